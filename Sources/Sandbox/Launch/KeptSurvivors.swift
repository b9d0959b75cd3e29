import CSystemCalls
import Glibc
import SupervisorIO

/// What a payload left running when it exited, kept for a while (`SandboxRunner.run(_:options:
/// keepingSurvivors:)`): a server a task's solution started, which the task's tests query.
///
/// The survivors stay in their own sandbox (its namespaces, cgroup, seccomp filter, Landlock,
/// capabilities), supervised as before, with no timeout of their own: they end when the
/// caller's work is done. What another sandbox can share with them is their network namespace
/// (`networkNamespace`, for `RunOptions.networkNamespace`): their loopback, and nothing else.
public struct Survivors: @unchecked Sendable {
    /// Their sandbox's network namespace, open for the length of the call.
    public let networkNamespace: Int32
    /// The programs still running when the payload exited (`comm`, at most 20), for a report.
    public let programs: [String]
    /// How the payload ended: `.exited` or `.signaled`.
    public let termination: SandboxResult.Termination
    let control: SandboxControl

    /// Stops every one of them in its tracks (the cgroup freezer), e.g. while their files are
    /// copied, until `thaw()`.
    public func freeze() throws(SandboxError) { try control.freeze() }

    public func thaw() throws(SandboxError) { try control.thaw() }
}

extension SandboxRunner {
    /// Runs `plan` as `run` does, except that processes its payload started and left running
    /// when it exits (daemons, servers) are not killed with it: if there are any, `afterPayload`
    /// is called on this thread while they run (the sandbox's supervision goes on, on a thread
    /// of its own: their seccomp notifications, egress and audit as before), and the sandbox is
    /// killed when it returns. The plan's timeout bounds the payload only. The result is the
    /// payload's, as `run` reports it; `afterPayload` is not called when nothing survived it or
    /// it did not run to its exit (timeout, setup failure).
    public static func run(_ plan: LaunchPlan, options given: RunOptions,
                           keepingSurvivors afterPayload: (Survivors) -> Void) throws(SandboxError) -> SandboxResult {
        var options = given
        let namespace = try NetworkNamespaces.make()
        defer { close(namespace) }
        let control = SandboxControl()
        let signals: SandboxSignals
        if let s = given.signals { signals = s } else { signals = try SandboxSignals() }
        options.networkNamespace = namespace
        options.control = control
        options.signals = signals
        options.keepSurvivors = true
        let ended = PayloadEnd()
        options.payloadEnded = { ended.post(programs: $0, status: $1) }
        let started = try start(plan, options: options, hold: false)
        let box = StartedBox(started)
        guard detachedThread({ box.finish(); ended.post(programs: nil) }) else {
            signals.kill()
            box.finish()
            throw SandboxError(.launch, "no thread to supervise the sandbox \(plan.sandboxID) on")
        }
        if let (programs, status) = ended.wait() {
            let termination: SandboxResult.Termination = status & 0x7f == 0 ? .exited((status >> 8) & 0xff) : .signaled(status & 0x7f)
            afterPayload(Survivors(networkNamespace: namespace, programs: programs, termination: termination, control: control))
            try? control.thaw()
            signals.kill()
        }
        return box.result()
    }
}

/// The sandbox, supervised to its end on another thread; `result()` waits for that end.
private final class StartedBox: @unchecked Sendable {
    private var started: SandboxRunner.Started
    private var outcome: SandboxResult?
    private let done = PayloadEnd()

    init(_ s: SandboxRunner.Started) { started = s }

    func finish() {
        outcome = started.finish()
        done.post(programs: nil)
    }

    func result() -> SandboxResult {
        _ = done.wait()
        return outcome!
    }
}

/// One event, posted once from the supervising thread (the first post wins), awaited on the
/// caller's: the payload's exit with survivors (their programs, its wait status), or the
/// sandbox's end (nil).
final class PayloadEnd: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var cond = pthread_cond_t()
    private var posted = false
    private var event: ([String], Int32)?

    init() {
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&cond, nil)
    }

    func post(programs: [String]?, status: Int32 = 0) {
        pthread_mutex_lock(&mutex)
        if !posted {
            posted = true
            event = programs.map { ($0, status) }
            pthread_cond_broadcast(&cond)
        }
        pthread_mutex_unlock(&mutex)
    }

    func wait() -> ([String], Int32)? {
        pthread_mutex_lock(&mutex)
        while !posted { pthread_cond_wait(&cond, &mutex) }
        let p = event
        pthread_mutex_unlock(&mutex)
        return p
    }
}

/// Network namespaces made on demand for one sandbox (and whatever relays into it).
public enum NetworkNamespaces {
    /// A new network namespace owned by the initial user namespace (lo down, nothing in it):
    /// the caller's descriptor. Made on a thread of its own, which returns to this process's
    /// namespace afterwards (`ahs_make_netns`); a thread that could not return ends there.
    public static func make() throws(SandboxError) -> Int32 {
        final class Made: @unchecked Sendable { var fd: Int32 = -ENOSYS }
        let made = Made()
        let ready = PayloadEnd()
        let ok = detachedThread {
            let home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)
            if home < 0 {
                made.fd = -errno
            } else {
                var stranded: Int32 = 0
                made.fd = ahs_make_netns(home, &stranded)
                close(home)
                // A thread stranded in the new namespace must do nothing more: it ends here.
            }
            ready.post(programs: nil)
        }
        guard ok else { throw SandboxError(.launch, "no thread to make a network namespace on") }
        _ = ready.wait()
        guard made.fd >= 0 else {
            throw SandboxError(.launch, "unshare(CLONE_NEWNET): \(String(cString: strerror(-made.fd)))", errno: -made.fd)
        }
        return made.fd
    }
}
