import Glibc

/// What a one-shot launch (`autoharness sandbox exec`) does while its policy is still being
/// loaded and compiled, on other threads:
/// - detects the cgroup host (delegating a v2 cgroup if needed) and ends sandboxes a killed
///   supervisor left behind, both of which must happen before the sandbox's cgroup is made;
/// - makes the sandbox's network namespace (a pool of one that is never refilled).
///
/// Neither depends on the policy, and together they are about 1.2 ms of a one-shot CLI launch
/// that would otherwise come after the policy's 1.5 ms, one after the other. A long-lived
/// supervisor does the first once and keeps namespaces ready (`NetworkNamespacePool`).
///
/// Nothing here weakens what the policy decides: a namespace made ahead is fresh (lo down,
/// nothing bound) and is used only if the plan asks for a network namespace; otherwise it is
/// closed unused when the process exits. The cgroup work is exactly what the first sandbox
/// would have done on its own thread.
public final class LaunchAhead: @unchecked Sendable {
    private var thread = pthread_t()
    private var started = false
    private var messages: [String] = []
    /// The namespace pool made for this launch; nil if one was installed already.
    public let networkNamespaces: NetworkNamespacePool?

    /// Starts both. `makeNetworkNamespace`: false when the caller installs a pool of its own
    /// (`--bench-repeat` measures a long-lived supervisor's).
    public init(makeNetworkNamespace: Bool) {
        networkNamespaces = makeNetworkNamespace && NetworkNamespacePool.installed == nil
            ? NetworkNamespacePool.install(capacity: 1, refills: false) : nil
        let box = Unmanaged.passRetained(self).toOpaque()
        started = pthread_create(&thread, nil, { arg in
            let me = Unmanaged<LaunchAhead>.fromOpaque(arg!).takeRetainedValue()
            me.detectCgroups()
            return nil
        }, box) == 0
        if !started {
            Unmanaged<LaunchAhead>.fromOpaque(box).release()
            detectCgroups()
        }
    }

    private func detectCgroups() {
        let host = CgroupHost.current
        var lines: [String] = []
        if let done = host.delegation { lines.append(done) }
        lines += host.endOrphanedSandboxes()
        messages = lines
    }

    /// Waits for the cgroup work and returns what it has to say (a delegation, orphans ended),
    /// one line each. Call once, before the sandbox is launched.
    public func finish() -> [String] {
        if started {
            pthread_join(thread, nil)
            started = false
        }
        return messages
    }
}
