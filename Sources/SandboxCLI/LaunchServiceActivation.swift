import CSystemCalls
import Glibc
import Sandbox
import SupervisorIO

/// Socket activation: the service adopts the listening socket systemd passed down
/// (`sd_listen_fds(3)`'s protocol), held to what it asks of a socket it makes itself.
extension LaunchServer {
    /// Serves on `fd`, a listening socket systemd passed down (`LISTEN_FDS`; see
    /// `Self.passedSocket`). It is held to what the service asks of a socket it makes: a Unix
    /// stream socket bound to a path, the socket root's and writable by root alone (no one else
    /// may connect), in a directory root's and writable by no one else, as is every directory
    /// above it unless sticky. `expected`: the path it must be bound to (`--socket`), if given.
    /// The service listens on it again, so that clients' SO_PEERCRED names the service, not
    /// systemd: the front proves it may inspect the service through `/proc/PID/cwd` of that
    /// pid (see the wire above).
    public convenience init(passed fd: Int32, expected: String?, prepare: @escaping Prepare) throws(Failure) {
        guard geteuid() == 0 else { throw Failure(description: "sandbox serve needs root, as every sandbox launch does") }
        var buffer = [CChar](repeating: 0, count: 4096)
        guard ahs_unix_listener_path(fd, &buffer, UInt(buffer.count)) == 0 else {
            throw Failure(description: "the socket passed down (descriptor \(fd), LISTEN_FDS) is not usable: \(Self.adoptionProblem(errno))")
        }
        let path = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        if let expected, PolicySearch.canonical(POSIX.split(expected).directory).map({ $0 + "/" + POSIX.split(expected).name }) != path {
            throw Failure(description: "the socket passed down is bound to \(path), not to --socket \(expected)")
        }
        var st = stat()
        guard lstat(path, &st) == 0 else { throw Failure(description: "\(path): the socket passed down has no file there: \(String(cString: strerror(errno)))") }
        // The file at that path must be the one this socket is bound to: a socket file renamed
        // away (into a directory others may reach) or unlinked, with another file made at its
        // old path, would pass the checks below on a file clients never use.
        var boundDevice: UInt64 = 0
        var boundInode: UInt32 = 0
        guard ahs_unix_bound_file(fd, &boundDevice, &boundInode) == 0 else {
            throw Failure(description: "\(path): cannot tell which file the socket passed down is bound to (sock_diag): \(String(cString: strerror(errno)))")
        }
        guard UInt64(st.st_dev) == boundDevice, UInt32(truncatingIfNeeded: st.st_ino) == boundInode else {
            throw Failure(description: "\(path): not the file the socket passed down is bound to (it was renamed or removed, and this is another)")
        }
        // connect(2) needs write permission on the socket's file.
        guard st.st_mode & S_IFMT == S_IFSOCK, st.st_uid == 0, st.st_mode & 0o022 == 0 else {
            throw Failure(description: "\(path): owned by uid \(st.st_uid), mode \(String(st.st_mode & 0o7777, radix: 8)); the socket must be root's and writable by root alone (SocketMode=0600), or others could connect")
        }
        if let unsafe = Self.writableByOthers(POSIX.split(path).directory) { throw Failure(description: unsafe + Self.replaceable) }
        // Only a socket that passed every check is changed: a refused one stays as systemd made it.
        guard ahs_unix_adopt_listener(fd, Self.passedBacklog) == 0 else {
            throw Failure(description: "\(path): cannot listen on the socket passed down: \(String(cString: strerror(errno)))")
        }
        try self.init(listener: fd, path: path, identity: (UInt64(st.st_dev), UInt64(st.st_ino)), activated: true, fileLock: -1, prepare: prepare)
    }

    static func adoptionProblem(_ e: Int32) -> String {
        switch e {
        case ENOTSOCK: return "not a socket"
        case EAFNOSUPPORT: return "not a Unix socket"
        case ESOCKTNOSUPPORT: return "not a stream socket (ListenStream=)"
        case EINVAL: return "not listening"
        case EADDRNOTAVAIL: return "not bound to a path (an abstract or unnamed socket has no owner and mode to check)"
        default: return String(cString: strerror(e))
        }
    }

    /// The socket systemd passed down for this process (`sd_listen_fds(3)`'s protocol:
    /// `LISTEN_PID` is this process, `LISTEN_FDS` counts descriptors from 3), or nil when there
    /// is none. The variables are removed, so nothing started from here sees them. More than
    /// one socket is an error: the service listens at one.
    public static func passedSocket() throws(Failure) -> Int32? {
        defer { for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unsetenv(name) } }
        guard let pid = getenv("LISTEN_PID").flatMap({ pid_t(String(cString: $0)) }), pid == getpid(),
              let text = getenv("LISTEN_FDS").map({ String(cString: $0) }) else { return nil }
        guard let count = Int(text), count >= 1 else { throw Failure(description: "LISTEN_FDS=\(text): expected one socket") }
        guard count == 1 else { throw Failure(description: "LISTEN_FDS=\(text): systemd passed \(count) sockets; the service listens at one (one ListenStream= in the socket unit)") }
        return 3
    }

    /// Listening again sets the backlog of systemd's socket for good: as large as the kernel
    /// allows (systemd's own default, Backlog=SOMAXCONN), so clients queued while no service
    /// runs are not held in connect(2) at 64.
    static let passedBacklog: Int32 = 4096
}
