import Glibc
import SupervisorIO

/// Mount namespaces of finished sandboxes, let go of by a thread of their own at a moment when
/// the next sandbox does not need the CPU or the kernel's mount locks.
///
/// When the last process of a mount namespace exits, the kernel unmounts its whole tree in
/// that exit, and waits an expedited RCU grace period doing so (init's namespace and the
/// payload's own, two per sandbox). The supervisor waits for exactly those exits before it
/// can go on, so it holds a reference to each namespace (an fd of `/proc/PID/ns/mnt`) while
/// the sandbox runs: the teardown then happens when that fd is closed, here, off the launch
/// path.
///
/// When: the thread keeps what it is given until some sandbox's payload is about to exec
/// (`payloadStarting`, where the pools refill too), or until `settleSeconds` passed without
/// one. Closed at once instead, the teardown ran beside the next launch's start (its cgroups,
/// its monitor's exec, its mount namespace's copy), and back-to-back launches were no faster
/// for it (`--bench-repeat`, 20 interleaved pairs: −10 µs, standard deviation 80); kept until
/// the next payload starts, with the pools' refills moved to the same moment, they were 67-82
/// µs faster (three sets of 20 pairs; docs/measurements.md, session 17).
///
/// Nothing is weakened by the delay: no process is left in the namespace (the pid namespace
/// is empty before the supervisor sees its end), nothing can enter it without the fd, which
/// is close-on-exec and never passed on, and the thread closes it within `settleSeconds`.
enum NamespaceRelease {
    /// The longest a finished sandbox's namespaces wait for a payload to start.
    static let settleSeconds = 0.02

    /// Opens a reference to the mount namespace of `pid`; -1 when it is gone (nothing to do).
    static func hold(pid: Int32) -> Int32 {
        guard pid > 0 else { return -1 }
        return open("/proc/\(pid)/ns/mnt", O_RDONLY | O_CLOEXEC)
    }

    /// Hands `fd` to the release thread.
    static func release(_ fd: Int32) { shared.close(fd) }

    /// A payload is about to exec: the thread closes what it holds now.
    static func payloadStarting() { shared.closeHeld() }

    /// How many references the thread has closed (tests).
    static var releasedCount: Int { shared.closedCount }

    private static let shared = DeferredClose(settleSeconds: settleSeconds)
}

/// Descriptors closed by a thread of its own, not at once: when `closeHeld()` is called, or
/// once the oldest of them has waited `settleSeconds`. Without the thread (no socket pair),
/// `close` closes at once.
final class DeferredClose: @unchecked Sendable {
    let settleSeconds: Double
    /// The end of the socket pair the thread reads from (-1: no thread). Records of 4 bytes:
    /// an fd number to hold, or `closeMark`.
    private let queue: Int32
    private let closed = Locked(0)
    private static let closeMark: Int32 = -1

    init(settleSeconds: Double) {
        self.settleSeconds = settleSeconds
        var p: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &p) == 0 else {
            queue = -1
            return
        }
        let readEnd = p[0]
        let settle = settleSeconds
        let count = closed
        let started = detachedThread {
            var held: [Int32] = []
            var oldest = 0.0  // when the first of `held` arrived
            func closeAll() {
                for fd in held { Glibc.close(fd) }
                count.withLock { count.value += held.count }
                held.removeAll()
            }
            while true {
                var p = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
                let wait = held.isEmpty ? -1 : Int32(max(0, (oldest + settle - monotonicNow()) * 1000).rounded(.up))
                let ready = poll(&p, 1, wait)
                if ready == 0 {
                    closeAll()
                    continue
                }
                if ready < 0 && errno == EINTR { continue }
                var record: Int32 = 0
                let n = ready < 0 ? -1 : read(readEnd, &record, 4)
                if n == 4 {
                    if record == Self.closeMark {
                        closeAll()
                    } else {
                        if held.isEmpty { oldest = monotonicNow() }
                        held.append(record)
                    }
                } else if n < 0 && errno == EINTR {
                    continue
                } else {
                    closeAll()
                    return
                }
            }
        }
        if started {
            queue = p[1]
        } else {
            Glibc.close(p[0])
            Glibc.close(p[1])
            queue = -1
        }
    }

    /// Hands `fd` over; closed here at once when there is no thread.
    func close(_ fd: Int32) {
        guard fd >= 0 else { return }
        var v = fd
        if queue < 0 || write(queue, &v, 4) != 4 {
            Glibc.close(fd)
            closed.withLock { closed.value += 1 }
        }
    }

    /// Has the thread close everything it holds now.
    func closeHeld() {
        guard queue >= 0 else { return }
        var v = Self.closeMark
        _ = write(queue, &v, 4)
    }

    /// How many descriptors were closed so far.
    var closedCount: Int { closed.withLock { closed.value } }
}
