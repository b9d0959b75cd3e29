// One interface for every benchmark the supervisor can score.
//
// `local` runs each task itself (agent sandbox, then verifier sandbox: `TaskRunner`). The
// external adapters (terminal-bench through Harbor, tau2-bench, BIRD-Interact, a generic
// command) hand a list of task ids to the benchmark's own tool, run in the
// `benchmark-runner` sandbox with its output directory on a per-run tmpfs, and read the
// rewards back themselves. Whatever the adapter, three rules hold:
//   - the outcome list has exactly one entry per requested id: a task the tool errored on,
//     timed out on or left out of its output scores 0 (a status says which);
//   - held-out runs persist nothing: the tool's output directory vanishes with its tmpfs and
//     only rewards reach the caller;
//   - a train run's trace for a task holds only that task's files, copied out bounded.

import Glibc
import Sandbox
import SandboxPolicy

/// What one run of a benchmark needs from the supervisor.
public struct AdapterRunContext {
    /// Resolves `benchmark-task`, `verifier`, `benchmark-runner`, `benchmark-scorer`.
    public var policyLoader: PolicyLoader
    /// The read-only snapshot directory holding the agent.py under evaluation.
    public var agentDirectory: String
    /// Root for per-run tmpfs scratch directories (root-owned, on tmpfs).
    public var scratchRoot: String
    public var audit: AuditLog
    /// A held-out run: nothing it produced may persist, and progress names no task.
    public var heldOut: Bool
    /// Held-out runs: every sandbox the adapter starts passes it in `RunOptions.pageCache`.
    public var pageCache: PageCacheEviction?
    /// Where a task's trace goes (train runs), or nil.
    public var traceDirectory: (String) -> String?
    public var concurrency: Int
    public var oracle = false
    /// Called on the calling thread, one call at a time. The outcome is nil when the adapter
    /// cannot say which task finished (external tools report at the end) or the run is held out.
    public var progress: (_ done: Int, _ total: Int, _ last: TaskOutcome?) -> Void = { _, _, _ in }
    /// A line for the operator (long tool runs say they are alive).
    public var log: @Sendable (String) -> Void = { _ in }
    /// A held-out run the operator started by hand (prepare's baseline, before any coding
    /// agent has touched agent.py): a failing tool's stderr tail goes to `log`. Never in a
    /// gate, where agent.py is the coding agent's and could write test data to it.
    public var operatorDiagnostics = false
    /// Where sandboxes that do not hold agent.py report (a local task's verifier, a tool's
    /// scorer or graders), so what they do and the limits they hit are not recorded against
    /// agent.py; nil: `audit`.
    public var toolAudit: AuditLog?
    /// Failed writes of the supervisor's own (train traces, scratch, the page-cache journal):
    /// the caller fails the operation if this holds one after `run` (`WriteFailures`).
    public var writeFailures = WriteFailures()
    /// In a held-out VM (`autoharness vm-guest`): where the tools' sandboxes send their
    /// egress, and the CA bundle that trusts the host's inference gate; nil on the host.
    public var guestEgress: GuestEgress?

    public init(policyLoader: PolicyLoader, agentDirectory: String, scratchRoot: String, audit: AuditLog, heldOut: Bool,
                concurrency: Int, traceDirectory: @escaping (String) -> String?) {
        self.policyLoader = policyLoader
        self.agentDirectory = agentDirectory
        self.scratchRoot = scratchRoot
        self.audit = audit
        self.heldOut = heldOut
        self.concurrency = concurrency
        self.traceDirectory = traceDirectory
    }
}

/// A held-out VM's egress: every `network: proxy` connection of the guest's sandboxes goes,
/// untouched, over `link` to the host's proxy, which applies the allowlist, the inference
/// gate and the audit there (`EgressLink`). `trustBundle` is the guest's copy of the host
/// gate's CA bundle (the host ends the TLS), when the config names model APIs.
public struct GuestEgress: Sendable {
    public var link: EgressLink
    public var trustBundle: String?
    /// Each task's position in the guest's request. A stream of a run that serves one task
    /// carries it in its tag (`agent-3`), so the host's gate, which serves the whole phase,
    /// counts the vendor's failures per task (`gate.infra_retries`).
    public var slots: [String: Int]

    public init(link: EgressLink, trustBundle: String?, slots: [String: Int] = [:]) {
        self.link = link
        self.trustBundle = trustBundle
        self.slots = slots
    }

    /// The tag of a stream of `kind` (`agent`, `tool`) opened for a run of `ids`.
    public func tag(_ kind: String, ids: [String]) -> String {
        guard ids.count == 1, let slot = slots[ids[0]] else { return kind }
        return "\(kind)-\(slot)"
    }
}

/// A benchmark the supervisor can split, run and score.
public protocol BenchmarkAdapter: Sendable {
    /// `local`, `terminal-bench`, `tau-bench`, `bird-interact`, `command`.
    var name: String { get }
    /// Every task id, sorted, known before anything runs (a task missing from a tool's
    /// output can only be counted if the whole list is known up front).
    var taskIDs: [String] { get }
    /// A split the benchmark itself defines (tau2's `split_tasks.json`); nil: the supervisor
    /// makes the stratified 70/30 split from the baseline.
    var fixedSplit: (train: [String], test: [String], seed: UInt64)? { get }
    /// Runs `ids` (each in `taskIDs`) and returns one outcome per id, in the same order.
    /// A train task's definition reaches the coding agent only through its trace.
    func run(_ ids: [String], _ context: AdapterRunContext) throws(BenchmarkError) -> [TaskOutcome]
    /// The id of the task `given` names (a benchmark whose tasks go by several names maps
    /// each to one id), or nil when it names none.
    func canonicalTaskID(_ given: String) -> String?
    /// What is wrong with single tasks (a malformed task.toml), for the operator: each such
    /// task scores 0 when run, and the others are unaffected.
    var problems: [String] { get }
    /// Who the sandboxes reporting to `AdapterRunContext.toolAudit` are, in records.
    var toolActor: String { get }
    /// Host directories the adapter reads, or binds into its sandboxes, besides its policies'
    /// mounts and `ToolSettings.binds` (a local benchmark's tasks, tau2's data and scripts): what
    /// a held-out VM must share for the same adapter to run in it.
    var hostPaths: [String] { get }
    /// The test scripts autoharness's own verifiers run (each task's tests/test.sh on this
    /// host), for checks of what they need; empty when a tool grades.
    var verifierScripts: [String] { get }
    /// Whether each task of a run reaches the model APIs through an inference gate of its own
    /// (its own tool sandbox: Harbor's `env_provider: local`), so `TaskOutcome.vendorFailures`
    /// is the task's even in a run of many; false: one gate serves a run's tasks together
    /// (`OneTaskRuns` gives each its own).
    var gatesEachTask: Bool { get }
    /// Whether two runs of this adapter may run at once (`OneTaskRuns`); false when its runs
    /// share state outside their sandboxes that each checks as its own (BIRD's PostgreSQL
    /// server, whose roles a run's services compare before and after).
    var runsBesideItself: Bool { get }
    /// The tasks that run on their own image (`autoharness images`), nil for an adapter whose
    /// tasks never do.
    var taskImages: TaskImages? { get }
    /// What the agent phase of a task autoharness runs reaches through the egress proxy
    /// (package mirrors), empty: nothing.
    var taskNetworkAllow: [String] { get }
    /// The tasks autoharness runs (with their task.toml's `TaskNetwork`), by id; empty for
    /// an adapter whose tasks a tool runs.
    func benchmarkTask(_ id: String) -> BenchmarkTask?
}

extension BenchmarkAdapter {
    /// What the agent phases of `ids` reach together: the operator's mirrors and each task's
    /// own allowlist (a held-out VM's one proxy for the `task` class serves them all).
    public func taskNetwork(_ ids: [String]) -> [String] {
        var out = taskNetworkAllow
        for id in ids {
            for entry in benchmarkTask(id)?.network?.entries ?? [] where !out.contains(entry) { out.append(entry) }
        }
        return out
    }
}

extension BenchmarkAdapter {
    public var fixedSplit: (train: [String], test: [String], seed: UInt64)? { nil }
    public var problems: [String] { [] }
    public var toolActor: String { "benchmark tool" }
    public var hostPaths: [String] { [] }
    public var verifierScripts: [String] { [] }
    public var gatesEachTask: Bool { false }
    public var runsBesideItself: Bool { true }
    public var taskImages: TaskImages? { nil }
    public var taskNetworkAllow: [String] { [] }
    public func benchmarkTask(_ id: String) -> BenchmarkTask? { nil }
    public func canonicalTaskID(_ given: String) -> String? { taskIDs.contains(given) ? given : nil }
}

/// The local Harbor-layout benchmark, one agent sandbox and one verifier sandbox per task.
public struct LocalAdapter: BenchmarkAdapter {
    public let benchmark: LocalBenchmark
    public var taskPolicy = "benchmark-task"
    public var verifierPolicy = "verifier"
    public var defaultAgentTimeout: Double?
    /// Given to each verifier read-only (`sandbox.verifier_tools`).
    public var verifierTools: VerifierTools?
    /// The tasks that run on their own image.
    public var images: TaskImages?
    public var taskImages: TaskImages? { images }
    /// `runner.network.allow`: the host:port entries each task's agent phase reaches through the
    /// egress proxy (package mirrors); none by default.
    public var agentNetworkAllow: [String] = []
    public var taskNetworkAllow: [String] { agentNetworkAllow }
    /// Train runs' file systems on disk for tasks that declare their storage (`TaskDisks`).
    public var disks: Result<TaskDisks, BenchmarkError>?
    public func benchmarkTask(_ id: String) -> BenchmarkTask? { benchmark.task(id) }

    public init(benchmark: LocalBenchmark) { self.benchmark = benchmark }

    public var name: String { "local" }
    public var taskIDs: [String] { benchmark.tasks.map(\.id) }
    public var problems: [String] { benchmark.problems }
    public var toolActor: String { "verifier" }
    public var hostPaths: [String] { [benchmark.directory] + (verifierTools?.hostPaths ?? []) }
    public var verifierScripts: [String] { benchmark.tasks.map { $0.testsDirectory + "/test.sh" } }

    public func run(_ ids: [String], _ context: AdapterRunContext) throws(BenchmarkError) -> [TaskOutcome] {
        let tasks = ids.compactMap { benchmark.task($0) }
        guard !tasks.isEmpty else { return [] }
        return try context.runTasks(tasks) { cfg in
            cfg.taskPolicy = taskPolicy
            cfg.verifierPolicy = verifierPolicy
            cfg.verifierTools = verifierTools
            cfg.images = images
            cfg.agentNetworkAllow = agentNetworkAllow
            cfg.disks = disks
            if let t = defaultAgentTimeout { cfg.defaultAgentTimeout = t }
        }
    }
}

extension AdapterRunContext {
    /// Runs `tasks` with a `TaskRunner` set up for this run (its audits, oracle, page cache,
    /// write failures; failure evidence for train runs), after `configure` has had its say;
    /// progress names no task of a held-out run.
    func runTasks(_ tasks: [BenchmarkTask], configure: (inout TaskRunConfiguration) -> Void) throws(BenchmarkError) -> [TaskOutcome] {
        var cfg = TaskRunConfiguration(policyLoader: policyLoader, agentDirectory: agentDirectory, scratchRoot: scratchRoot, audit: audit)
        cfg.verifierAudit = toolAudit
        cfg.oracle = oracle
        cfg.pageCache = pageCache
        cfg.writeFailures = writeFailures
        cfg.collectFailures = !heldOut
        cfg.guestEgress = guestEgress
        configure(&cfg)
        if heldOut { cfg.disks = nil }
        let runner = try TaskRunner(configuration: cfg)
        let heldOut = self.heldOut
        let progress = self.progress
        let traceDirectory = self.traceDirectory
        return runner.runAll(tasks, concurrency: concurrency, traceDirectory: { traceDirectory($0.id) }) { done, total, last in
            progress(done, total, heldOut ? nil : last)
        }
    }
}
