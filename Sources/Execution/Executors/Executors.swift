import Benchmark
import Foundation

/// Which executor each run goes to: the one place that asks which runtime is configured.
/// The held-out runtime is settled once per supervisor, at its first gate (`settleHeldOut`):
/// a VM that cannot run here is refused before the gate counts.
package final class Executors {
    /// The held-out VM's checked settings, made at the first gate (`gate.held_out_runtime: vm`,
    /// or `auto` where a KVM guest boots).
    package private(set) var heldOutVM: HeldOutVM?
    private var settled = false

    package init() {}

    /// The executor for `run`. Oracle runs read `solution/`, which no node is sent: they stay
    /// on this host. A gate's held-out phase goes to the VM once one is settled; prepare's
    /// baseline, which scores every task before any split exists, runs where train runs do.
    /// `ray` makes the cluster's executor when that is the one.
    package func executor(for run: TaskRun, _ environment: ExecutorEnvironment, ray: () -> RayNodeExecutor) -> any TaskExecutor {
        if environment.config.executor.kind == .ray && !run.oracle { return ray() }
        if run.split.isGateHeldOut, let vm = heldOutVM { return HeldOutVMExecutor(environment: environment, vm: vm) }
        return HostExecutor(environment: environment)
    }

    /// Where a gate's held-out tasks run, settled at the first gate and said once.
    package func settleHeldOut(_ environment: ExecutorEnvironment) throws {
        guard !settled else { return }
        let config = environment.config
        let log = environment.log
        // The one vendor state the inference gate cannot keep apart within an account, which
        // the operator accepted (without gate.shared_vendor_account the adapter is refused).
        if config.vendorAccounts.shared {
            log?("gate.shared_vendor_account: true: held-out and train runs reach the model APIs with one account's keys; OpenAI "
                 + "caches long prompts per organisation whatever a request says, so a train run's usage can show which prompts a "
                 + "held-out run sent (docs/held-out.md)")
        }
        if config.executor.kind == .ray {
            log?(config.gate.heldOutRuntime == .vm
                 ? "held-out runtime: a fresh VM per held-out request on the Ray node it is sealed to (executor: ray, gate.held_out_runtime: vm; nodes that cannot boot one are not used)"
                 : "held-out runtime: the sandboxes of the Ray cluster's nodes (executor: ray; each node evicts what they read and moves its inode counters after them)")
            settled = true
            return
        }
        // Loopback is up in a sandbox on a task's image, as in a container.
        let networked = !(environment.adapter.taskImages?.byTask.isEmpty ?? true) || !config.runsOwnTasks || !config.runner.networkAllow.isEmpty
        switch config.gate.heldOutRuntime {
        case .vm: heldOutVM = try HeldOutVM(settings: config.gate.vm, log: log)
        case .auto:
            let r = HeldOutVM.resolveAuto(settings: config.gate.vm, config: config, log: log)
            heldOutVM = r.vm
            log?(r.vm == nil ? HeldOutVM.hostRuntimeLine(why: "auto: " + r.why, networked: networked) : "held-out runtime: vm (auto: \(r.why))")
        case .host: log?(HeldOutVM.hostRuntimeLine(why: "gate.held_out_runtime: host", networked: networked))
        }
        settled = true
    }
}
