// Who runs a task's agent before `TaskRunner`'s verifier.
//
// By default TaskRunner runs agent.py itself, in the `benchmark-task` sandbox (or the task's
// solution, for `--oracle`). A benchmark whose agent must run inside its own tool (Harbor
// imports agent.py into `harbor run`) hands TaskRunner an `ExternalAgentPhase` instead: the
// tool runs over the task's working copy in a sandbox of its own, and TaskRunner then scores
// that copy exactly as it scores a local task's (a fresh verifier sandbox, once every process
// of the agent's sandbox is gone; the tests mounted only there; the reward read by the
// supervisor). Nothing the tool's process writes is a reward.

import SandboxPolicy

/// How an external agent phase ended.
struct ExternalAgentEnd {
    enum Kind {
        /// The agent finished; its work is graded.
        case finished
        /// The tool says the agent failed (Harbor's AgentTimeoutError, a non-zero agent exit):
        /// its work is still graded, as the tool itself would (`detail` says why); a reward
        /// below the pass threshold then takes `status`.
        case failed(TaskStatus)
        /// Nothing to grade: the tool never ran the agent on this task, or was killed on its
        /// own time limit. Scores 0 with `status`; the verifier does not run.
        case ungraded(TaskStatus)
    }

    var kind: Kind
    var detail: String?
    /// Train runs: files for the task's trace (already bounded), beside TaskRunner's own.
    var trace: [(String, [UInt8])] = []
    /// Train runs: what the tool's own results say failed (its exception).
    var failures: [FailureEvidence] = []
    /// The tool's account of the agent's model spend.
    var costUSD: Double?
    /// What the run's own inference gate saw the vendor fail (`TaskOutcome.vendorFailures`).
    var vendorFailures: Int?
    /// A write of the supervisor's own failed while running the phase (`WriteFailures`).
    var supervisorFailure: String?

    init(_ kind: Kind, _ detail: String? = nil) {
        self.kind = kind
        self.detail = detail
    }
}

/// Runs a task's agent over its working copy, in sandboxes of its own, and returns only once
/// every one of them is gone (no process of the agent phase may outlive it).
protocol ExternalAgentPhase: Sendable {
    /// - Parameters:
    ///   - task: the task; its tests and solution must not be visible to the agent.
    ///   - workdir: the host path of the task's working copy (`/app`), seeded from the task's
    ///     environment/ and owned by the task sandbox's host uid. The verifier reads it next.
    ///   - container: on the task's image, its container's command server (`TaskContainer`),
    ///     which the tool's sandbox is given in place of the working copy.
    func run(_ task: BenchmarkTask, workdir: String, container: TaskContainerLink?) -> ExternalAgentEnd

    /// How long `task`'s container may run; nil: the agent's own timeout.
    func containerTimeout(for task: BenchmarkTask) -> Double?
}
