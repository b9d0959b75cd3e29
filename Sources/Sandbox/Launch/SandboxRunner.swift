import CSandboxLaunch
import CSandboxSpawn
import CSystemCalls
import CSeccomp
import Glibc
import Logging
import PolicyModel

public struct RunOptions: @unchecked Sendable {
    public var audit: AuditLog
    public var logger: Logger
    /// Continue when a requested cgroup limit cannot be enforced (it is logged as NOT
    /// ENFORCED). Off by default: limits fail closed.
    public var allowUnenforcedLimits = false
    /// Supervisor fds for the payload's stdin/stdout/stderr (-1: inherit).
    public var stdio: (Int32, Int32, Int32) = (-1, -1, -1)
    /// The settings the sandbox takes instead of this process's (nil: this process's): a
    /// launch run for another process (`LaunchServer`).
    public var callerSettings: CallerSettings?
    /// Signals for the payload and the order to kill the sandbox, from other threads.
    public var signals: SandboxSignals?
    /// The cgroup layout to use; nil means this process's own (`CgroupHost.current`).
    public var cgroupHost: CgroupHost?
    /// Lets another thread freeze and thaw the whole sandbox while it runs.
    public var control: SandboxControl?
    /// Held-out runs: records the sandbox's read-only bind sources, whose cached pages the
    /// supervisor drops once the held-out sandboxes are gone.
    public var pageCache: PageCacheEviction?
    /// Create the monitor inside its v2 cgroup with clone3(CLONE_INTO_CGROUP) where the
    /// kernel has it (off: fork, then the monitor joins; kernels before 5.7 always do that).
    public var cloneIntoCgroup = true
    /// Start the monitor as the launcher executable (`Launcher.shared`) when there is one;
    /// off, or without one, it is a fork of this process.
    public var useLauncher = true
    /// Network namespaces made ahead of time (one per sandbox); nil: each launcher unshares
    /// its own. Defaults to the process's installed pool.
    public var networkNamespaces: NetworkNamespacePool? = NetworkNamespacePool.installed
    /// Each sandbox's /dev and user namespace made ahead of time (`SandboxPartsPool`); nil: the
    /// monitor makes its own. Defaults to the process's installed pool.
    public var parts: SandboxPartsPool? = SandboxPartsPool.installed
    /// /proc's covering files cloned from a tree built once (`SharedTrees`); nil: each
    /// sandbox builds its own. Defaults to the process's installed trees.
    public var sharedTrees: SharedTrees? = SharedTrees.installed
    /// Hold the sandbox's mount namespaces and let them go on a thread of their own when the
    /// next payload starts (`NamespaceRelease`), not in its processes' exits, which the
    /// supervisor waits for. False: torn down by those exits, before the result is returned.
    public var releaseNamespacesLater = true
    /// Called once on the supervising thread, when the payload has run for a moment without
    /// needing the supervisor (3 ms without a message or notification): the caller's chance to
    /// do work of its own (build the next sandbox) without delaying the launch. Not called for
    /// a payload that ends or fails before that.
    public var whenQuiet: (() -> Void)?
    /// `network: proxy` sandboxes: the model APIs reached only through this gate (stateless
    /// inference calls, judged one by one; `InferenceGate`).
    public var inferenceGate: InferenceGate?
    /// In a held-out VM: `network: proxy` connections go, as they are, over this link to the
    /// host's proxy (which applies the allowlist and the gate), tagged with the sandbox's
    /// class (`agent` or `tool`); the allowlist and gate above are then not used here.
    public var egressLink: (link: EgressLink, tag: String)?
    /// Learn the payload's pid (`SandboxResult.payloadPID`, from the kernel's record of who
    /// sent the payload's last report before its exec): what a verifier's reward files are
    /// checked against (only the test script's own process may write them).
    public var findPayloadPID = false
    /// A network namespace the sandbox enters instead of a new one (the caller's descriptor,
    /// which stays the caller's): another sandbox's, whose payload's survivors a verifier
    /// queries over their loopback (`Survivors.networkNamespace`).
    public var networkNamespace: Int32?
    /// `run(_:options:keepingSurvivors:)`: init keeps what the payload left running, and the
    /// session calls `payloadEnded` with their programs when the payload exits.
    var keepSurvivors = false
    var payloadEnded: (([String], Int32) -> Void)?
    /// Tests only: seconds the supervisor waits when init reports the payload's fork, before
    /// it reads on (a supervisor slow to read its reports, as under load).
    var delayAtPayloadStartForTests: Double = 0

    public init(audit: AuditLog = AuditLog(), logger: Logger = Logger(label: "autoharness.sandbox")) {
        self.audit = audit
        self.logger = logger
    }
}

public enum SandboxRunner {
    /// Read once: the kernel's Landlock ABI does not change while we run.
    static let landlockABI = ahs_landlock_abi()

    public static func run(_ plan: LaunchPlan, options: RunOptions) throws(SandboxError) -> SandboxResult {
        var started = try start(plan, options: options, hold: false)
        return started.finish()
    }

    /// Builds `plan`'s sandbox up to the payload's exec and leaves it waiting there (see
    /// `HeldSandbox`). Returns once its monitor is started; the handshake (id maps) runs on
    /// a thread of its own and the rest of the build in the sandbox's own processes.
    public static func build(_ plan: LaunchPlan, options: RunOptions) throws(SandboxError) -> HeldSandbox {
        HeldSandbox(try start(plan, options: options, hold: true))
    }

    static func start(_ given: LaunchPlan, options: RunOptions, hold: Bool) throws(SandboxError) -> Started {
        // A caller's own hard limits bound the policy's, as in the caller's own launch (the
        // sandbox takes them: CallerSettings).
        var plan = given
        if let settings = options.callerSettings {
            plan.rlimits = plan.rlimits.map { r in
                var r = r
                r.value = min(r.value, settings.hardLimit(r.resource))
                return r
            }
        }
        guard geteuid() == 0 else {
            throw SandboxError(.notPrivileged, "sandboxes need root (CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID in the initial namespaces) to build namespaces and write id maps")
        }
        let log = options.logger
        try options.pageCache?.record(plan)
        let cgroup = try SandboxCgroup(id: plan.sandboxID, limits: plan.limits, host: options.cgroupHost ?? .current,
                                       allowUnenforced: options.allowUnenforcedLimits, freezable: options.control != nil,
                                       accountPages: options.pageCache != nil)
        for line in SandboxCgroup.sweepNow(options.cgroupHost ?? .current) { log.warning("\(line)") }
        Timing.mark("cgroups created")
        var enforcement = cgroup.enforcement
        for r in plan.rlimits {
            let clamped = r.value < r.requested ? " (lowered from \(r.requested) to the host's hard limit)" : ""
            enforcement.append(.init(limit: r.name, value: String(r.value), mechanism: "rlimit (per process)\(clamped)"))
        }
        if let t = plan.limits.timeoutSeconds { enforcement.append(.init(limit: "timeout", value: "\(t)s", mechanism: "supervisor kills the pid namespace")) }
        if plan.landlock != .off {
            let abi = Self.landlockABI
            enforcement.append(.init(limit: "landlock", value: plan.landlock.rawValue,
                                     mechanism: abi > 0 ? "Landlock ABI \(abi) (writes only beneath read-write mounts)" : "NOT APPLIED: the kernel has no Landlock"))
        }
        log.debug("sandbox \(plan.sandboxID): policy \(plan.policyName); limits: \(enforcement.map(\.description).joined(separator: "; "))")

        let storage = CPlan(plan, stdio: options.stdio, cgroupJoin: cgroup.selfJoinFiles)
        if let settings = options.callerSettings { storage.plan.settings = settings.plan }
        // The v2 directory held open across the fork: clone3 places the monitor by this fd.
        var intoFD: Int32 = -1
        if options.cloneIntoCgroup, let target = cgroup.cloneTarget {
            intoFD = open(target.directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if intoFD >= 0 {
                storage.plan.cgroup_into_fd = intoFD
                storage.plan.cgroup_into_join = Int32(target.joinIndex)
            }
        }
        // Ours to close once the monitor holds it (after the spawn): never another sandbox's.
        let netns = options.networkNamespace.map { fcntl($0, F_DUPFD_CLOEXEC, 0) } ?? options.networkNamespaces?.take() ?? -1
        if options.networkNamespace != nil && netns < 0 {
            throw SandboxError(.launch, "the network namespace to enter: \(String(cString: strerror(errno)))", errno: errno)
        }
        storage.plan.keep_survivors = options.keepSurvivors ? 1 : 0
        storage.plan.netns_fd = netns
        // Also ours to close once the monitor holds them: made for this sandbox alone.
        let dev = options.parts?.takeDevice() ?? -1
        // Made ahead only for one-id maps (a span's is written as the monitor starts).
        let userns = plan.identity.span == 1 ? options.parts?.takeUserNamespace(for: plan.identity) ?? -1 : -1
        storage.plan.dev_fd = dev
        storage.plan.userns_fd = userns
        // The template root (if the plan has one) must stay open until the launcher holds it.
        var template: TemplateRoot?
        if let shared = options.sharedTrees {
            storage.plan.masks_fd = shared.masks
            storage.plan.seed_fd = shared.seed
            template = shared.template(for: plan, in: storage)
            storage.plan.template_fd = template?.fd ?? -1
        }
        // Held after seccomp where the filter lets the wait's recvfrom through (no argument
        // rule applies to it): its load, ~0.2 ms, then happens before the go-ahead.
        storage.plan.hold = !hold ? 0 : plan.filter.allowsWaitingAfterLoad ? 2 : 1
        var child = ahl_child()
        let launcher = options.useLauncher ? Launcher.shared : nil
        let rc = withUnsafePointer(to: &storage.plan) { p in launcher.map { ahl_spawn_exec(p, $0.fd, &child) } ?? ahl_spawn(p, &child) }
        if intoFD >= 0 { close(intoFD) }
        if netns >= 0 { close(netns) }
        if dev >= 0 { close(dev) }
        if userns >= 0 { close(userns) }
        withExtendedLifetime(template) {}
        guard rc == 0 else {
            cgroup.removeHandingOver(to: options.pageCache)
            throw SandboxError(.launch, "fork: \(String(cString: strerror(rc)))", errno: rc)
        }
        Timing.mark((child.born_in_cgroup != 0 ? "monitor cloned into its cgroup" : "monitor forked") + (launcher != nil ? " (launcher)" : ""))
        log.debug("sandbox \(plan.sandboxID): monitor \(launcher.map { "is the launcher \($0.path)" } ?? "forked from the supervisor (\(options.useLauncher ? Launcher.unavailableReason ?? "" : "launcher turned off"))")")
        log.debug("sandbox \(plan.sandboxID): network namespace \(netns >= 0 ? "made ahead of time by the supervisor" : "unshared by the monitor")")
        log.debug("sandbox \(plan.sandboxID): /dev \(dev >= 0 ? "made ahead of time by the supervisor" : "made by the monitor"); user namespace \(userns >= 0 ? "made ahead of time with its id maps" : "unshared by the monitor, id maps written by the supervisor")")
        log.debug("sandbox \(plan.sandboxID): /proc covers \(options.sharedTrees != nil ? "cloned from the supervisor's shared tree" : "built by the sandbox")")
        log.debug("sandbox \(plan.sandboxID): mount namespace copied from \(storage.plan.seed_fd >= 0 ? "the supervisor's seed (two mounts)" : options.sharedTrees?.seedProblem.map { "the host's (\($0))" } ?? "the host's")")
        log.debug("sandbox \(plan.sandboxID): root \(template.map { "cloned from a template root holding \($0.entries) of its \(plan.mounts.count) mounts" } ?? "built by the sandbox")")
        if child.born_in_cgroup != 0 {
            log.debug("sandbox \(plan.sandboxID): monitor created inside \(cgroup.cloneTarget!.directory) by clone3(CLONE_INTO_CGROUP)")
        }
        options.control?.attach(cgroup)
        var session = Session(plan: plan, child: child, cgroup: cgroup, options: options)
        session.mapsWritten = userns >= 0
        return Started(session: session,
                       enforcement: enforcement, storage: storage)
    }

    /// A sandbox whose monitor runs: what `finish` needs to supervise it to the end.
    struct Started {
        var session: Session
        let enforcement: [LimitEnforcement]
        /// The C plan the monitor was started from, kept alive until the sandbox is gone.
        let storage: CPlan

        mutating func finish() -> SandboxResult {
            var r = session.supervise()
            session.options.control?.detach()
            if !session.refilled {  // not done as the payload started
                session.options.networkNamespaces?.refill()
                session.options.parts?.refill()
            }
            r.enforcement = enforcement
            r.bornInCgroup = session.child.born_in_cgroup != 0
            withExtendedLifetime(storage) {}
            return r
        }
    }
}

/// A sandbox built ahead of its run (`SandboxRunner.build`): namespaces, cgroup, filesystem,
/// limits, dropped capabilities and Landlock are in place, and the payload waits just before
/// exec until `run()` (after loading its seccomp filter when the filter allows the wait,
/// before it otherwise). The supervisor builds the next sandbox it will need (a
/// task's verifier) while the current one (the agent) runs, on a core that would otherwise
/// idle. The timeout counts from `run()`. Nothing of the payload has run while it is held.
///
/// Each held sandbox must end in `run()` or `discard()`; one dropped without either is
/// discarded when released.
public final class HeldSandbox: @unchecked Sendable {
    /// Touched only by the handshake thread until `join()`, then only by the owner's.
    private var started: SandboxRunner.Started?
    private var handshake: pthread_t?
    public let sandboxID: String

    init(_ started: SandboxRunner.Started) {
        self.started = started
        sandboxID = started.session.plan.sandboxID
        var attr = pthread_attr_t()
        pthread_attr_init(&attr)
        pthread_attr_setstacksize(&attr, 256 << 10)
        var tid = pthread_t()
        let box = Unmanaged.passRetained(self).toOpaque()
        let rc = pthread_create(&tid, &attr, { arg in
            let held = Unmanaged<HeldSandbox>.fromOpaque(arg!).takeRetainedValue()
            held.started?.session.prepare()
            return nil
        }, box)
        pthread_attr_destroy(&attr)
        if rc == 0 {
            handshake = tid
        } else {
            Unmanaged<HeldSandbox>.fromOpaque(box).release()
            self.started?.session.prepare()  // no thread to spare: on this one
        }
    }

    private func join() {
        guard let t = handshake else { return }
        handshake = nil
        pthread_join(t, nil)
    }

    /// Whether the sandbox was built and waits to run. False once its build failed, it
    /// ran or it was discarded (`run()` then reports the failure as a setup failure).
    public var isReady: Bool {
        join()
        guard var s = started else { return false }
        let ready = s.session.awaitHeld()
        started = s
        return ready
    }

    /// Lets the payload run and supervises it to the end, like `SandboxRunner.run`.
    public func run() -> SandboxResult {
        join()
        guard var s = started else { preconditionFailure("HeldSandbox.run() after run() or discard()") }
        started = nil
        return s.finish()
    }

    /// Kills the sandbox unrun and removes what it had (cgroup, namespaces).
    public func discard() {
        join()
        guard var s = started else { return }
        started = nil
        s.session.abandon("discarded before it ran", monitorResponds: s.session.ownError == nil)
        _ = s.finish()
    }

    deinit { discard() }
}
