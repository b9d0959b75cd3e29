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
/// µs faster (three sets of 20 pairs; docs/measurements.md).
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

    /// Closes what is held now, on the caller's thread, and returns once the namespaces are
    /// torn down: for what needs the sandboxes' memory back at once (the held-out page-cache
    /// eviction reads what stays charged to their cgroups, and their tmpfs pages stay charged
    /// while a namespace holds their mounts).
    static func releaseNow() { shared.closeNow() }

    /// How many references the thread has closed (tests).
    static var releasedCount: Int { shared.closedCount }

    private static let shared = DeferredClose(settleSeconds: settleSeconds)
}

/// Descriptors closed by a thread of its own, not at once: when `closeHeld()` is called, or
/// once the oldest of them has waited `settleSeconds`; or by the caller, `closeNow()`. Without
/// the thread (no socket pair), `close` closes at once.
final class DeferredClose: @unchecked Sendable {
    /// What is held, and when the first of it arrived.
    private let held = Locked<(fds: [Int32], since: Double)>(([], 0))
    /// The end of the socket pair that wakes the thread (-1: no thread): `arrived` when the
    /// first descriptor is held (the thread then waits at most until `since + settleSeconds`),
    /// `closeMark` to close everything now.
    private let wake: Int32
    private let closed = Locked(0)
    /// Held while descriptors taken from `held` are being closed: `closeNow()` returns only
    /// once a close the thread began has finished too.
    private let closing = Mutex()
    private static let arrived: UInt8 = 1
    private static let closeMark: UInt8 = 2

    init(settleSeconds: Double) {
        var p: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &p) == 0 else {
            wake = -1
            return
        }
        let readEnd = p[0]
        let (held, closed, closing) = (self.held, self.closed, self.closing)
        let started = detachedThread {
            while true {
                let since = held.withLock { held.value.fds.isEmpty ? nil : held.value.since }
                let wait = since.map { Int32(max(0, ($0 + settleSeconds - monotonicNow()) * 1000).rounded(.up)) } ?? -1
                var p = pollfd(fd: readEnd, events: Int16(POLLIN), revents: 0)
                let ready = poll(&p, 1, wait)
                if ready < 0 { if errno == EINTR { continue } else { return } }
                var now = ready == 0  // the oldest has waited long enough
                if ready > 0 {
                    var byte: UInt8 = 0
                    let n = read(readEnd, &byte, 1)
                    if n == 0 || (n < 0 && errno != EINTR) { return }
                    now = now || byte == Self.closeMark
                }
                if now { Self.closeAll(held, counting: closed, closing: closing) }
            }
        }
        if started {
            wake = p[1]
        } else {
            Glibc.close(p[0])
            Glibc.close(p[1])
            wake = -1
        }
    }

    /// Hands `fd` over; closed here at once when there is no thread.
    func close(_ fd: Int32) {
        guard fd >= 0 else { return }
        guard wake >= 0 else {
            Glibc.close(fd)
            closed.withLock { closed.value += 1 }
            return
        }
        let first = held.withLock { () -> Bool in
            let first = held.value.fds.isEmpty
            if first { held.value.since = monotonicNow() }
            held.value.fds.append(fd)
            return first
        }
        if first { signal(Self.arrived) }
    }

    /// Has the thread close everything it holds now (nothing to wake it for when it holds
    /// nothing: this is on every launch's path).
    func closeHeld() {
        guard wake >= 0, held.withLock({ !held.value.fds.isEmpty }) else { return }
        signal(Self.closeMark)
    }

    /// Closes everything held now, on the calling thread, and returns once every descriptor
    /// handed over before the call is closed (a close the thread is doing included).
    func closeNow() { Self.closeAll(held, counting: closed, closing: closing) }

    /// How many descriptors were closed so far.
    var closedCount: Int { closed.withLock { closed.value } }

    private func signal(_ byte: UInt8) {
        var b = byte
        _ = send(wake, &b, 1, Int32(MSG_DONTWAIT | MSG_NOSIGNAL))
    }

    private static func closeAll(_ held: Locked<(fds: [Int32], since: Double)>, counting closed: Locked<Int>, closing: Mutex) {
        closing.withLock {
            let fds = held.withLock { () -> [Int32] in
                defer { held.value.fds.removeAll() }
                return held.value.fds
            }
            guard !fds.isEmpty else { return }
            // Each close tears its namespace down before it returns (the kernel's deferred
            // work for the last reference runs on this thread's way back from the call).
            for fd in fds { Glibc.close(fd) }
            closed.withLock { closed.value += fds.count }
        }
    }
}
