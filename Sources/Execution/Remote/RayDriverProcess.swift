import Foundation
import Glibc
import ExperimentModel
import Sandbox
import SupervisorIO
import Synchronization

// The Ray driver as a process of the supervisor's: how it is started (confined), and how its
// output is read (lines, bounded) and its stderr kept (the last of it, for errors).

extension RayExecutor {
    /// `argv` run with `hidden` out of its sight: util-linux's unshare gives it a mount
    /// namespace of its own, a shell mounts an empty read-only tmpfs over each hidden
    /// directory, and setpriv execs it (the same process throughout, which the supervisor kills
    /// by pid) with no capability (empty bounding set, root's privileges locked off, no new
    /// privileges), so it can neither unmount the tmpfs nor enter another namespace. Ray needs
    /// neither: the driver reaches the cluster over the host's network and the head's session
    /// directory as the same user. Not a PID namespace of its own: the head's raylet tracks its
    /// drivers by their pids on the host. With `user` (`executor.driver_user`), setpriv also
    /// makes it that user, its groups cleared: code run in it can then neither write root's
    /// files nor signal the supervisor or reach its sandboxes. Without `hidden` or `user`,
    /// `argv` as it is.
    static func confined(_ argv: [String], hiding hidden: [String], user: DriverUser? = nil) -> [String] {
        guard !hidden.isEmpty || user != nil else { return argv }
        let ids = user.map { "--reuid=\($0.uid) --regid=\($0.gid) --clear-groups " } ?? ""
        let mask = #"for d in "$@"; do [ "$d" = -- ] && break; mount -t tmpfs -o ro,size=4k,mode=0,nosuid,nodev,noexec autoharness-hidden "$d" || exit 125; done; "#
            + #"while [ "$1" != -- ]; do shift; done; shift; "#
            + "exec /usr/bin/setpriv " + ids + #"--bounding-set=-all --inh-caps=-all --ambient-caps=-all "#
            + #"--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked,+keep_caps_locked --no-new-privs "$@""#
        return ["/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", mask, "autoharness-ray-driver"] + hidden + ["--"] + argv
    }
}

extension RayExecutor {
    /// The driver to run as `user` (`executor.driver_user`): a directory of its own for its
    /// HOME (returned; the caller removes it) and its name in USER and LOGNAME. A token file
    /// (RAY_AUTH_TOKEN_PATH) is the driver's to read, as the head, that user too, reads it: the
    /// supervisor never opens a path that user may control.
    mutating func runAs(_ user: DriverUser) throws -> String {
        let dir = try Self.temporaryDirectory("autoharness-ray", mode: 0o700)
        guard chown(dir, user.uid, user.gid) == 0 else {
            let e = errno
            _ = FileSystem.removeTree(dir)
            throw ExperimentError(.io, "\(dir): chown to \(user.uid):\(user.gid): \(ErrnoName.describe(e))")
        }
        self.user = user
        environment["HOME"] = dir
        environment["USER"] = user.name
        environment["LOGNAME"] = user.name
        return dir
    }

    /// A fresh directory of root's in /tmp, `prefix`-XXXXXX, with `mode`.
    static func temporaryDirectory(_ prefix: String, mode: mode_t) throws -> String {
        var template = Array("/tmp/\(prefix)-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { throw ExperimentError(.io, "a directory for the Ray driver in /tmp: \(ErrnoName.describe(errno))") }
        let dir = String(cString: made)
        guard chmod(dir, mode) == 0 else {
            let e = errno
            _ = FileSystem.removeTree(dir)
            throw ExperimentError(.io, "\(dir): chmod: \(ErrnoName.describe(e))")
        }
        return dir
    }
}

/// The user the Ray driver runs as (`executor.driver_user`).
public struct DriverUser: Sendable, Equatable {
    public var uid: uid_t
    public var gid: gid_t
    /// Its name (USER and LOGNAME in the driver's environment: Python asks them first).
    public var name: String

    /// `given`: a user name, or UID:GID. Refused: system ids (below 1000: root, and groups such
    /// as disk or docker that are root's in all but name), nobody and qemu's (65534 and 65533:
    /// the ids sandboxes and the held-out VM run as here), -1 (which setpriv and chown take as
    /// "unchanged"), and ids in the range task images' sandboxes use (`reserved`), whose
    /// processes the driver could otherwise signal.
    public static func resolve(_ given: String, reserved: HostIDRange? = nil) throws -> DriverUser {
        var user: DriverUser
        let parts = given.split(separator: ":", omittingEmptySubsequences: false)
        if parts.count == 2, let u = UInt32(parts[0]), let g = UInt32(parts[1]) {
            user = DriverUser(uid: u, gid: g, name: getpwuid(u).map { String(cString: $0.pointee.pw_name) } ?? "autoharness-ray")
        } else if let pw = getpwnam(given) {
            user = DriverUser(uid: pw.pointee.pw_uid, gid: pw.pointee.pw_gid, name: given)
        } else {
            throw ExperimentError(.usage, "executor.driver_user: \(given): no such user (a name in /etc/passwd, or UID:GID)")
        }
        let unusable: (UInt32) -> Bool = { $0 < 1000 || $0 == 65533 || $0 == 65534 || $0 == UInt32.max }
        if unusable(user.uid) || unusable(user.gid) {
            throw ExperimentError(.usage, "executor.driver_user: \(given) is uid \(user.uid), gid \(user.gid): not a system id (below 1000), nor nobody's or qemu's (65534, 65533: sandboxes and the held-out VM run as them here), nor -1; make a user of its own for the driver")
        }
        if let r = reserved, (r.uid..<r.uid + r.count).contains(user.uid) || (r.gid..<r.gid + r.count).contains(user.gid) {
            throw ExperimentError(.usage, "executor.driver_user: \(given) is uid \(user.uid), gid \(user.gid), in the ids task images' sandboxes run as (uids from \(r.uid), gids from \(r.gid), \(r.count) each); make a user of its own for the driver")
        }
        return user
    }

    /// Whether this user may list directory `path` by its mode (as its owner, its group or
    /// another), its parents aside.
    func mayList(_ path: String) -> Bool {
        var st = stat()
        guard stat(path, &st) == 0 else { return false }
        let bits: mode_t = st.st_uid == uid ? 0o500 : st.st_gid == gid ? 0o050 : 0o005
        return st.st_mode & bits == bits
    }
}

/// The last 4 KiB of what the driver wrote on stderr.
final class DriverLog: Sendable {
    private let text = Synchronization.Mutex("")
    func consume(_ handle: FileHandle) {
        while true {
            let chunk = handle.availableData
            if chunk.isEmpty { return }
            text.withLock { $0 = String(($0 + String(decoding: chunk, as: UTF8.self)).suffix(4096)) }
        }
    }
    var tail: String { text.withLock { $0 } }
}

/// Lines from a descriptor, each at most `maxLine` bytes (a longer one ends the reading).
final class LineReader {
    let fd: Int32
    let maxLine: Int
    private var buffer: [UInt8] = []
    private var ended = false

    init(_ fd: Int32, maxLine: Int) {
        self.fd = fd
        self.maxLine = maxLine
    }

    func next() -> [UInt8]? {
        while true {
            if let nl = buffer.firstIndex(of: 0x0A) {
                let line = Array(buffer[..<nl])
                buffer.removeSubrange(...nl)
                return line
            }
            if ended || buffer.count > maxLine { return nil }
            var chunk = [UInt8](repeating: 0, count: 1 << 16)
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { ended = true; continue }
            buffer += chunk[..<n]
        }
    }
}
