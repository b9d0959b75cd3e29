import CSystemCalls
import Glibc
import Sandbox
import SupervisorIO
import WireCoding

/// `sandbox exec` run by a resident supervisor (`autoharness sandbox serve`) for the front.
///
/// A one-shot launch pays for what a long-lived supervisor makes once or ahead of time: the
/// policy's load and plan, the cgroup host's facts, a network namespace, the /dev tree and
/// user namespace (`SandboxPartsPool`), the template root and /proc's covers (`SharedTrees`).
/// The service is such a supervisor. The front hands it the launch and stands in for the
/// sandbox as before: the payload reads and writes the front's own stdin, stdout and stderr
/// (the descriptors themselves, passed over the socket), the front's signals reach the payload,
/// its exit status is the front's, and the front's end ends the sandbox. Every layer is built
/// per launch exactly as in a one-shot launch; only the parts a supervisor makes ahead differ.
///
/// The wire, over a Unix stream socket (0600, root's, in a directory no one else may write):
/// - client to service, once: "AHLS", the version and the body's length (u32, little-endian),
///   the body. Five descriptors ride on its first byte: stdin, stdout, stderr, the working
///   directory (O_PATH) and the service's own working directory (/proc/SERVICE/cwd). That one is
///   a detached tmpfs no path leads to, which the kernel opens through /proc only for a client
///   that may inspect the service (ptrace read access): one confined by Landlock, or by an LSM's
///   ptrace rules, may not, and is not served. The body is NUL-terminated strings: the client's launch code
///   (`SandboxExecution.launchCode`), its umask (octal), the number of arguments, the
///   arguments after `sandbox exec`, then the client's environment.
/// - client to service, afterwards: one byte per signal the client received (its number).
/// - service to client: 'D' (declined: nothing ran, the client launches itself), or 'S' just
///   before the launch starts and then 'X' with the exit status, as a u32 little-endian; then
///   the end of the connection. A connection that ends before 'S' ran nothing (a service that
///   failed to start, or was killed while reading): the client launches itself. One that ends
///   after 'S' without 'X' took the sandbox with it: the client reports that (status 125).
///
/// Only root clients are served, and a client uses only a root service (SO_PEERCRED on both
/// ends): a sandboxed process, root in its user namespace, is another user on the host. A root
/// client confined otherwise than the service (its namespaces, root directory, capabilities,
/// no_new_privs or seccomp filters: `PeerConfinement`) is declined and launches itself. The
/// client is C, run before the front's Swift runtime starts (Sources/CFrontStart,
/// Sources/CSystemCalls/launch_client.c).
public enum LaunchService {
    /// Where `sandbox serve` listens and the front looks, unless `$AUTOHARNESS_LAUNCH_SERVICE`
    /// names another socket (or is `off`).
    public static let defaultSocket = AHS_LAUNCH_SERVICE_SOCKET

    static let magic: [UInt8] = Array("AHLS".utf8)
    static let version = UInt32(AHS_LAUNCH_WIRE_VERSION)
    static let headerSize = 12
    /// The body's limit: the kernel's own for a command line and its environment.
    static let bodyLimit = 2 << 20
    /// stdin, stdout, stderr, the working directory, the service's working directory.
    static let descriptorCount = 5
    static let declined = UInt8(ascii: "D")
    static let launching = UInt8(ascii: "S")
    static let exited = UInt8(ascii: "X")

    /// Environment variables that steer this program itself (where policies, caches and the
    /// launcher are found): a launch is served only when the client's equal the service's.
    /// The timing marks and the service's own address are the client's business.
    static func steering(_ name: String) -> Bool {
        name.hasPrefix("AUTOHARNESS_") && name != "AUTOHARNESS_TIMING" && name != "AUTOHARNESS_LAUNCH_SERVICE"
    }

    /// The socket the front asks: `$AUTOHARNESS_LAUNCH_SERVICE`, else the default; nil when
    /// that is `off` or empty.
    public static func frontSocket(_ environment: [String: String] = hostEnvironment()) -> String? {
        let path = environment["AUTOHARNESS_LAUNCH_SERVICE"] ?? defaultSocket
        return path.isEmpty || path == "off" ? nil : path
    }

    /// Whether the front starts a service at `socket` when none answers there: only at an
    /// absolute path (the service's working directory is not the caller's).
    public static func frontStarts(at socket: String) -> Bool { socket.hasPrefix("/") }

    /// What listens at `socket`, for `doctor`, found without connecting (a connection would
    /// start a socket-activated service): the listening socket in /proc/net/unix, and the
    /// processes holding it (systemd's socket unit holds it in PID 1; a service, in itself).
    public static func state(at socket: String?) -> String {
        guard let socket else { return "off (AUTOHARNESS_LAUNCH_SERVICE=off): every sandbox exec launches by itself" }
        var st = stat()
        guard lstat(socket, &st) == 0 else {
            return frontStarts(at: socket)
                ? "none at \(socket): the next sandbox exec starts one there, for its own cgroup (--same-cgroup), which stops after \(frontIdleExit) without a launch"
                : "none at \(socket), and none is started at a relative path: every sandbox exec launches by itself"
        }
        guard st.st_mode & S_IFMT == S_IFSOCK else { return "\(socket) is not a socket: every sandbox exec launches by itself" }
        // /proc/net/unix: Num RefCount Protocol Flags Type St Inode Path; a listener's flags
        // have __SO_ACCEPTCON (0x10000). Its path is the one it was bound at: the socket's own
        // for systemd's, `DIR/.NAME.XXXXXX/s` for a service's (ahs_unix_listen binds there and
        // renames the file into place).
        let slash = socket.lastIndex(of: "/")
        let staged = slash.map { String(socket[..<$0]) + "/." + String(socket[socket.index(after: $0)...]) + "." }
        let listening = SmallFile.contents(of: "/proc/net/unix").split(separator: "\n").compactMap { line -> String? in
            let f = line.split(separator: " ", maxSplits: 7, omittingEmptySubsequences: true)
            guard f.count == 8, let flags = UInt32(f[3], radix: 16), flags & 0x10000 != 0 else { return nil }
            let bound = String(f[7])
            let ours = staged.map { bound.hasPrefix($0) && bound.hasSuffix("/s") && bound.count == $0.count + 8 } ?? false
            return bound == socket || ours ? String(f[6]) : nil
        }
        guard let inode = listening.first else {
            return "\(socket) is left from a service that ended (nothing listens): " + (frontStarts(at: socket) ? "the next sandbox exec starts one" : "every sandbox exec launches by itself")
        }
        let holders = socketHolders(inode: inode)
        let described = holders.map { pid -> String in
            if pid == 1 { return "PID 1 (systemd's socket unit; the service starts on the first launch)" }
            let cmdline = SmallFile.contents(of: "/proc/\(pid)/cmdline").split(separator: "\0").map(String.init)
            let whose = cmdline.contains("--same-cgroup") ? "started by a front, serving its cgroup alone" : "serving any cgroup's callers within its limits"
            return "pid \(pid) (\(cmdline.prefix(3).joined(separator: " ")): \(whose))"
        }
        return "listening at \(socket), held by " + (described.isEmpty ? "no process this one can see" : described.joined(separator: " and "))
    }

    /// The pids whose descriptors include the socket with inode `inode`.
    static func socketHolders(inode: String) -> [Int32] {
        let target = "socket:[\(inode)]"
        var pids: [Int32] = []
        guard let proc = opendir("/proc") else { return [] }
        defer { closedir(proc) }
        while let e = readdir(proc) {
            let name = DirectoryEntry.name(e)
            guard let pid = Int32(name) else { continue }
            guard let fds = opendir("/proc/\(name)/fd") else { continue }
            defer { closedir(fds) }
            var buf = [CChar](repeating: 0, count: 64)
            while let f = readdir(fds) {
                let fd = DirectoryEntry.name(f)
                guard fd != ".", fd != ".." else { continue }
                let n = readlink("/proc/\(name)/fd/\(fd)", &buf, buf.count - 1)
                guard n > 0 else { continue }
                buf[n] = 0
                if String(cString: buf) == target {
                    pids.append(pid)
                    break
                }
            }
        }
        return pids.sorted()
    }

    /// How long a service the front started waits without a launch before it stops.
    public static let frontIdleExit = "60s"

    /// What the front runs when no service answers at `socket` (`ahs_launch_service_absent`):
    /// `sandbox serve` of the full CLI, at that socket, for this caller's next launches, while
    /// this one goes on by itself. It serves only clients in the cgroup it started in (the
    /// front's), stops after `frontIdleExit` without a launch, and writes its messages to
    /// `SOCKET.log`. It has none of the front's scheduling and resource settings
    /// (`ahs_start_detached`; each launch has its caller's). Its environment is PATH and the
    /// variables that steer this program, which a client's must equal to be served. The
    /// arguments (argv[0] first) and the environment.
    public static func frontStart(socket: String, fullCLI: String, environment: [String: String]) -> (arguments: [String], environment: [String]) {
        let arguments = [fullCLI, "sandbox", "serve", "--socket", socket, "--idle-exit", frontIdleExit, "--same-cgroup", "--log"]
        var env = environment.filter { steering($0.key) }
        env["PATH"] = environment["PATH"] ?? "/usr/sbin:/usr/bin:/sbin:/bin"
        return (arguments, env.sorted { $0.key < $1.key }.map { $0.key + "=" + $0.value })
    }

    /// /proc/`pid`/cgroup by hierarchy (`CgroupHost.memberships`), with the supervisor's own
    /// leaf (`CgroupHost.supervisorLeaf`, which a supervisor moves into on a cgroup v2 host)
    /// taken off: a client and a service started from the same cgroup compare equal.
    static func cgroupMemberships(of pid: String) -> [String: String] {
        CgroupHost.memberships(of: pid).mapValues { path in
            path.hasSuffix("/" + CgroupHost.supervisorLeaf) ? String(path.dropLast(CgroupHost.supervisorLeaf.count + 1)) : path
        }
    }

    /// The cgroups this service started in, for `LaunchServer.onlyCgroups` (`--same-cgroup`).
    public static func ownCgroups() -> [String: String] { cgroupMemberships(of: "self") }

    /// Writes all of `bytes` (a stream socket may take fewer per call).
    @discardableResult
    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.send(fd, $0.baseAddress! + done, bytes.count - done, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return false }
            done += n
        }
        return true
    }
}
