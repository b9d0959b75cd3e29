import Sandbox
import SandboxPolicy
import SupervisorIO

/// What a `TaskRunner` needs: where policies, the agent and scratch space are.
public struct TaskRunConfiguration: Sendable {
    /// Finds `taskPolicy` and `verifierPolicy`.
    public var policyLoader: PolicyLoader
    /// Policy of the agent's sandbox; placeholders `{workdir}` (→ /app) and `{agent_dir}`.
    public var taskPolicy = "benchmark-task"
    /// Policy of the verifier's sandbox; placeholders `{workdir}`, `{tests_dir}`, `{logs_dir}`.
    public var verifierPolicy = "verifier"
    /// Host directory holding `agent.py`: the read-only snapshot the supervisor took of the
    /// agent under evaluation. May be empty in oracle mode.
    public var agentDirectory: String
    /// Where per-task scratch directories are made, for both splits. Must be on tmpfs, so
    /// nothing a test task wrote ever reaches a disk, and root-owned and not writable by
    /// others (unless sticky), so no one else can plant names in it.
    public var scratchRoot: String
    /// Receives every refused syscall, timeout and limit hit of the agent's sandboxes.
    public var audit: AuditLog
    /// Receives the verifier sandboxes' own (a verifier that runs out of memory or time did
    /// so itself, whatever agent.py left in /app); nil: `audit`.
    public var verifierAudit: AuditLog?
    /// Set for held-out runs: collects what their sandboxes could read (see `RunOptions`).
    public var pageCache: PageCacheEviction?
    /// Where a failed write of the supervisor's own goes (`WriteFailures`); once one is
    /// there, no further task starts.
    public var writeFailures: WriteFailures?
    /// Run `solution/solve.sh` instead of agent.py, to check that a benchmark's tasks are
    /// solvable and its verifiers score a correct solution 1.
    public var oracle: Bool = false
    /// Agent time limit for tasks whose task.toml declares none.
    public var defaultAgentTimeout: Double = LocalBenchmark.defaultTimeout
    /// Verifier time limit for tasks whose task.toml declares none.
    public var defaultVerifierTimeout: Double = LocalBenchmark.defaultTimeout
    /// Read the failing checks of each failed task (`FailureEvidence`): train runs only.
    public var collectFailures = false
    /// Build each task's verifier sandbox while its agent runs (`HeldSandbox`), where its
    /// build writes nothing the agent can reach; off: after the agent, always.
    public var buildVerifierAhead = true
    /// What each verifier gets read-only instead of fetching it (uv, pytest's wheels, the
    /// `curl`/`apt-get` shims: `VerifierTools`); nil: nothing.
    public var verifierTools: VerifierTools?
    /// The tasks that run on their image (`TaskImage`): both of their sandboxes have the
    /// image as root instead of the host's userland; nil or a task not listed: the host's.
    public var images: TaskImages?
    /// Train runs of tasks that declare `[environment] storage`: their file systems on disk of
    /// that size (`TaskDisks`), or why this host cannot make them; nil, a held-out run or a task
    /// declaring none: tmpfs.
    public var disks: Result<TaskDisks, BenchmarkError>?
    /// Non-empty: the agent's sandbox (never the verifier's) has the egress proxy to these
    /// host:port entries in place of its policy's network (`runner.network.allow`), every
    /// connection recorded in its audit.
    public var agentNetworkAllow: [String] = []
    /// In a held-out VM: that proxy only forwards each connection over this link to the
    /// host's, which judges it (`GuestEgress`).
    public var guestEgress: GuestEgress?
    /// Rewrite the git configuration in /app before the verifier (`GitConfigs`). Off only in
    /// tests that show what the verifier's policy does on its own.
    var sanitizesGitConfigs = true
    /// Runs each task's agent in place of `taskPolicy`'s sandbox (Harbor's agent phase);
    /// nil: agent.py under `agentRunner`. Not used for `oracle` runs.
    var externalAgent: (any ExternalAgentPhase)?

    /// Tests only: called with the task's scratch directory just before it is removed (the
    /// only way to look at what a test-split run produced, since nothing of it persists).
    var scratchObserver: (@Sendable (_ taskID: String, _ scratchDirectory: String) -> Void)?

    public init(policyLoader: PolicyLoader, agentDirectory: String, scratchRoot: String, audit: AuditLog = AuditLog()) {
        self.policyLoader = policyLoader
        self.agentDirectory = agentDirectory
        self.scratchRoot = scratchRoot
        self.audit = audit
    }
}
