import CSandboxLaunch
import Glibc
import SupervisorIO

/// Freezes and thaws a running sandbox from another thread (e.g. the coding agent while a
/// gate's held-out tasks run, so nothing it does can overlap them).
///
/// The cgroup freezer, not signals: every thread of every process in the sandbox's cgroup
/// stops, whatever it does with SIGCONT, a zombie thread-group leader or a fork in flight,
/// and `freeze` returns only once the kernel reports the cgroup frozen. A supervisor killed
/// while a sandbox is frozen leaves it frozen; the next supervisor's first launch ends it
/// (`SandboxCgroup.sweepOrphans`).
public final class SandboxControl: @unchecked Sendable {
    private let lock = Mutex()
    private var cgroup: SandboxCgroup?
    private var frozen = false

    public init() {}

    func attach(_ c: SandboxCgroup) {
        lock.withLock { cgroup = c }
    }

    func detach() {
        lock.withLock {
            cgroup = nil
            frozen = false
        }
    }

    /// Freezes the whole sandbox and verifies it; a no-op when no sandbox is running.
    /// Throws (having thawed) if the freeze cannot be verified.
    public func freeze() throws(SandboxError) {
        var failure: SandboxError?
        lock.withLock {
            guard let cgroup, !frozen else { return }
            do throws(SandboxError) {
                try cgroup.freeze()
                frozen = true
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
    }

    /// True while the kernel reports the running sandbox frozen.
    public var isFrozen: Bool { lock.withLock { cgroup?.isFrozen ?? false } }

    /// Whether the running sandbox has a cgroup freezer (nil: no sandbox running).
    public var canFreeze: Bool? { lock.withLock { cgroup.map { $0.freezer != nil } } }

    /// Kills the whole running sandbox and waits until none of its processes is left.
    /// Returns false if some were still there after `seconds`.
    public func stop(within seconds: Double) -> Bool {
        kill()
        let deadline = monotonicNow() + seconds
        while !processIDs.isEmpty {
            if monotonicNow() > deadline { return false }
            usleep(5_000)
        }
        return true
    }

    /// Host pids of every process in the running sandbox (its monitor included).
    public var processIDs: [pid_t] { lock.withLock { cgroup?.remainingProcesses() ?? [] } }

    /// Kills every process of the running sandbox, frozen or not.
    public func kill() {
        lock.withLock {
            cgroup?.killAll()
            frozen = false
        }
    }

    public func thaw() throws(SandboxError) {
        lock.withLock {
            cgroup?.thaw()
            frozen = false
        }
    }
}

/// Runs launch plans. `run` blocks its thread until the sandbox is gone and cleaned up;

/// Signals for a running sandbox's payload, and the order to end the sandbox whole, from any
/// thread. Hand it to `RunOptions.signals`; the runner passes each request on to the sandbox's
/// monitor (the bytes of that protocol stay inside this module).
///
/// A socket pair, not a pipe: a request may come after the sandbox ended, and a pipe would
/// answer it with SIGPIPE; here it is simply never read. One channel serves one sandbox at a
/// time; requests made while none runs reach the next one.
public final class SandboxSignals: @unchecked Sendable {
    let readFD: Int32
    private let writeFD: Int32
    /// The channel's end (every sender gone, or an error) kills the sandbox: set for a
    /// connection whose other end is the process the sandbox was launched for.
    let killsOnHangUp: Bool

    public init() throws(SandboxError) {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else {
            throw SandboxError(.launch, "socketpair: \(String(cString: strerror(errno)))", errno: errno)
        }
        readFD = fds[0]
        writeFD = fds[1]
        killsOnHangUp = false
    }

    /// The signals of a process at the other end of `connection` (a stream socket, which
    /// stays the caller's to close): each byte it sends is a request as `send` makes them, and
    /// its end, when that process is gone or the caller shuts the socket's reading side down,
    /// kills the whole sandbox (`sandbox serve`: a launch does not outlive its client).
    public init(connection: Int32) {
        readFD = connection
        writeFD = -1
        killsOnHangUp = true
    }

    deinit {
        if writeFD >= 0 {
            close(readFD)
            close(writeFD)
        }
    }

    /// Forwards `signal` (1-64) to the payload, as if sent to it directly (on a client's
    /// connection only the client does).
    public func send(_ signal: Int32) {
        guard (1...64).contains(signal), writeFD >= 0 else { return }
        put(UInt8(signal))
    }

    /// Kills the whole sandbox (its init, and with it the pid namespace), as a timeout does.
    /// On a client's connection: shuts its reading side down, which the sandbox's supervisor
    /// sees as the client's end.
    public func kill() {
        if writeFD < 0 {
            shutdown(readFD, Int32(SHUT_RD))
        } else {
            put(UInt8(AHL_CTL_KILL))
        }
    }

    private func put(_ byte: UInt8) {
        var b = byte
        _ = Glibc.send(writeFD, &b, 1, Int32(MSG_NOSIGNAL))
    }

    /// Whether a byte read from the channel is a request the monitor understands.
    static func isRequest(_ byte: UInt8) -> Bool { (1...64).contains(byte) || byte == UInt8(AHL_CTL_KILL) }

    /// This process's `signals` are passed on to the payload from now on (how `sandbox exec`
    /// stands in for the command it runs: ^C and SIGTERM reach the command). The channel is
    /// kept for the life of the process.
    public func relay(processSignals signals: [Int32]) {
        Self.relayed = self
        ProcessSignals.forward(signals, to: writeFD)
    }

    nonisolated(unsafe) private static var relayed: SandboxSignals?
}

/// This process's signals as bytes on a descriptor, for a thread to read: a handler may do
/// almost nothing, so it only writes the signal's number.
public enum ProcessSignals {
    nonisolated(unsafe) private static var target: Int32 = -1

    /// From now on each of `signals` writes its number (one byte) to `fd`, which must stay
    /// open for the life of the process. SIGPIPE is ignored. One target per process.
    public static func forward(_ signals: [Int32], to fd: Int32) {
        target = fd
        for s in signals {
            signal(s) { sig in
                var b = UInt8(truncatingIfNeeded: sig)
                _ = Glibc.send(ProcessSignals.target, &b, 1, Int32(MSG_NOSIGNAL))
            }
        }
        signal(SIGPIPE, SIG_IGN)
        // A parent may have started us with these blocked (Foundation's Process does when
        // launching from a non-main thread); a blocked SIGTERM would never arrive.
        var set = sigset_t()
        sigemptyset(&set)
        for s in signals { sigaddset(&set, s) }
        sigprocmask(SIG_UNBLOCK, &set, nil)
    }

    /// A socket pair whose write end receives `signals` (`forward`); returns the read end.
    public static func channel(_ signals: [Int32]) -> Int32 {
        var fds: [Int32] = [-1, -1]
        guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) == 0 else { return -1 }
        forward(signals, to: fds[1])
        return fds[0]
    }
}
