import Foundation
import Glibc
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
    /// drivers by their pids on the host. Without `hidden`, `argv` as it is.
    static func confined(_ argv: [String], hiding hidden: [String]) -> [String] {
        guard !hidden.isEmpty else { return argv }
        let mask = #"for d in "$@"; do [ "$d" = -- ] && break; mount -t tmpfs -o ro,size=4k,mode=0,nosuid,nodev,noexec autoharness-hidden "$d" || exit 125; done; "#
            + #"while [ "$1" != -- ]; do shift; done; shift; "#
            + #"exec /usr/bin/setpriv --bounding-set=-all --inh-caps=-all --ambient-caps=-all "#
            + #"--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked,+keep_caps_locked --no-new-privs "$@""#
        return ["/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", mask, "autoharness-ray-driver"] + hidden + ["--"] + argv
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
