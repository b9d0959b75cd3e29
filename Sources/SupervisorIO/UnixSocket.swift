import CSystemCalls
import Glibc

/// The calls a supervisor-side Unix socket server needs that the Glibc module hides.
public enum UnixSocket {
    /// The next connection on `listener`, close-on-exec (accept4), or -1 with errno.
    public static func accept(_ listener: Int32) -> Int32 { ahs_accept_cloexec(listener) }

    /// The process and user at the other end of a connected socket (SO_PEERCRED), as the
    /// kernel recorded them when it connected.
    public static func peer(_ fd: Int32) -> (pid: pid_t, uid: uid_t)? {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        guard ahs_peer_credentials(fd, &pid, &uid) == 0 else { return nil }
        return (pid, uid)
    }

    /// Whether process `pid` (a connected peer's, as `peer` gives it) runs in a pid namespace
    /// other than this process's: a sandbox's, not a process of the host. nil when it has gone
    /// (its /proc entry with it) or a namespace cannot be read. The pid could be reused between
    /// the connect and this look if the peer exited in between; a peer that did is not waiting
    /// for its answer.
    public static func inOtherPidNamespace(_ pid: pid_t) -> Bool? {
        guard pid > 0 else { return nil }
        var mine = stat(), theirs = stat()
        guard stat("/proc/self/ns/pid", &mine) == 0, stat("/proc/\(pid)/ns/pid", &theirs) == 0 else { return nil }
        return mine.st_ino != theirs.st_ino || mine.st_dev != theirs.st_dev
    }

    /// `path` as a socket address, or nil when it does not fit (`sun_path`: 107 bytes and a NUL).
    public static func address(_ path: String) -> sockaddr_un? {
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in for (i, b) in bytes.enumerated() { raw[i] = b } }
        return addr
    }

    /// bind(2) of `fd` to `address`: 0, or -1 with errno.
    public static func bind(_ fd: Int32, _ address: sockaddr_un) -> Int32 {
        withUnsafePointer(to: address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
    }

    /// connect(2) of `fd` to `address`: 0, or -1 with errno.
    public static func connect(_ fd: Int32, _ address: sockaddr_un) -> Int32 {
        withUnsafePointer(to: address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) } }
    }

    /// A pidfd of the process at the other end (SO_PEERPIDFD, Linux 6.5): the process that
    /// connected, not whatever now has its pid. nil where the kernel has no such option
    /// (ENOPROTOOPT); -1 when it has but the peer is gone.
    public static func peerPidfd(_ fd: Int32) -> Int32? {
        var pidfd: Int32 = -1
        var len = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, 77 /* SO_PEERPIDFD */, &pidfd, &len) == 0 { return pidfd }
        return errno == ENOPROTOOPT ? nil : -1
    }
}
