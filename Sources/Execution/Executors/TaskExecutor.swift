import Benchmark
import ExperimentModel
import Foundation
import Sandbox
import SandboxPolicy

// Where tasks run.
//
// Every run of the benchmark's tasks (prepare's baseline, a train run, a gate's suite,
// held-out and promotion phases) goes through one `TaskExecutor`, chosen by `Executors` from
// the configuration: the host's sandboxes (`HostExecutor`), a fresh VM per held-out phase
// (`HeldOutVMExecutor`), or a Ray cluster's nodes, each request in a VM of its own there when
// `held_out_runtime: vm` (`RayNodeExecutor`). An executor takes the run's task ids and its
// split class and returns one outcome per task it ran; it owns what its runtime leaves behind
// for later runs (page-cache eviction, the inode counters' noise, the VM's egress proxies, a
// node's answer keys). `ExperimentSupervisor` sequences prepare, benchmark and gate on top and
// never asks which runtime it is.

/// One run's tasks, as the supervisor hands them to an executor.
package struct TaskRun {
    var ids: [String]
    var split: SplitClass
    /// The snapshot directory holding the agent.py under evaluation.
    var agent: String
    var audit: RunAudit
    /// `solution/solve.sh` in place of agent.py (`benchmark --oracle`).
    var oracle = false
    /// A failing tool's stderr reaches the operator (prepare's baseline).
    var operatorDiagnostics = false
    /// Each task in an adapter run of its own (`OneTaskRuns`): its vendor failures are its own
    /// (`gate.infra_retries`). Executors that cannot tell tasks' model calls apart (a held-out
    /// VM's, whose gate is the host's for the whole phase) run the tasks as usual.
    var oneTaskPerRun = false

    package init(ids: [String], split: SplitClass, agent: String, audit: RunAudit, oracle: Bool = false, operatorDiagnostics: Bool = false, oneTaskPerRun: Bool = false) {
        self.ids = ids
        self.split = split
        self.agent = agent
        self.audit = audit
        self.oracle = oracle
        self.operatorDiagnostics = operatorDiagnostics
        self.oneTaskPerRun = oneTaskPerRun
    }
}

/// A place tasks run.
package protocol TaskExecutor {
    /// Runs `run.ids`; the outcomes of the tasks it ran (the supervisor scores a missing one 0).
    func run(_ run: TaskRun) throws -> [TaskOutcome]
}

/// What every executor needs of the experiment.
package struct ExecutorEnvironment {
    let config: ExperimentConfig
    let layout: ExperimentLayout
    let adapter: any BenchmarkAdapter
    let policyLoader: PolicyLoader
    /// Operator lines (from any thread).
    let log: (@Sendable (String) -> Void)?
    /// After each task; the outcome is nil for runs that keep nothing.
    let progress: ((_ done: Int, _ total: Int, _ outcome: TaskOutcome?) -> Void)?

    package init(config: ExperimentConfig, layout: ExperimentLayout, adapter: any BenchmarkAdapter, policyLoader: PolicyLoader, log: (@Sendable (String) -> Void)?, progress: ((_ done: Int, _ total: Int, _ outcome: TaskOutcome?) -> Void)?) {
        self.config = config
        self.layout = layout
        self.adapter = adapter
        self.policyLoader = policyLoader
        self.log = log
        self.progress = progress
    }
}

/// Where one run's sandboxes report: those that hold agent.py, and those that never load it
/// (a local task's verifier, tau2's scorer, BIRD's graders).
package struct RunAudit {
    package let agent = AuditLog()
    package let tool = AuditLog()

    package init() {

    }
}
