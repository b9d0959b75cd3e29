import Glibc

/// Mount namespaces of finished sandboxes, let go of by a thread of their own.
///
/// When the last process of a mount namespace exits, the kernel unmounts its whole tree in
/// that exit, and waits an RCU grace period doing so: ~0.2 ms for a sandbox's init, about as
/// much again for its payload's namespace (measured with `sandbox exec --bench-repeat`,
/// AUTOHARNESS_TIMING). The supervisor waits for exactly those exits before it can go on, so
/// it holds a reference to each namespace (an fd of `/proc/PID/ns/mnt`) while the sandbox
/// runs: the teardown then happens when that fd is closed, here, off the launch path.
///
/// Only where the caller has something else to do meanwhile (`RunOptions.releaseNamespacesLater`:
/// a task's verifier runs, the next task starts): back to back launches of /bin/true
/// (`--bench-repeat`) got 0.5 ms slower, the next launch's mounts waiting on the teardown's
/// locks, while a gate's tasks got 2.3 ms faster (scripts/bench-gate's trivial prepare, five
/// alternating pairs: 29.8 vs 32.1 ms per task).
///
/// Nothing is weakened by the delay: no process is left in the namespace (the pid namespace
/// is empty before the supervisor sees its end), nothing can enter it without the fd, which
/// is close-on-exec and never passed on, and the thread closes it at once.
enum NamespaceRelease {
    /// Opens a reference to the mount namespace of `pid`; -1 when it is gone (nothing to do).
    static func hold(pid: Int32) -> Int32 {
        guard pid > 0 else { return -1 }
        return open("/proc/\(pid)/ns/mnt", O_RDONLY | O_CLOEXEC)
    }

    /// Closes `fd` on the release thread (synchronously when there is none).
    static func release(_ fd: Int32) {
        guard fd >= 0 else { return }
        var v = fd
        if queue < 0 || write(queue, &v, 4) != 4 { close(fd) }
    }

    /// How many references the thread has closed (tests).
    static var releasedCount: Int { released.withLock { released.value } }
    private static let released = Locked(0)

    /// The end of the socket pair the release thread reads fd numbers from (-1: no thread).
    /// Records of 4 bytes: each write is one whole fd number.
    private static let queue: Int32 = {
        var p: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &p) == 0 else { return -1 }
        let readEnd = p[0]
        detachedThread {
            var fd: Int32 = -1
            while true {
                let n = read(readEnd, &fd, 4)
                if n == 4 {
                    close(fd)
                    released.withLock { released.value += 1 }
                } else if n < 0 && errno == EINTR { continue } else { return }
            }
        }
        return p[1]
    }()
}
