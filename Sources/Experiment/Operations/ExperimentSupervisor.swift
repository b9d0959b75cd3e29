import Benchmark
import Crypto
import Evidence
import Execution
import ExperimentModel
import Foundation
import Ledger
import Sandbox
import SandboxPolicy
import SupervisorIO

/// Everything the supervisor does between two edits of agent.py: prepare, benchmark (train
/// only), gate, status. It holds the experiment lock for its lifetime, and every score it
/// computes comes from a verifier sandbox agent.py never shared anything with.
///
/// This type opens an experiment (the lock, recovery) and verifies it; each operation is a
/// type of its own over the shared `ExperimentContext` (ExperimentContext.swift, running
/// tasks in RunningTasks.swift): `PrepareOperation` (Prepare.swift), `TrainOperation`
/// (TrainRuns.swift: benchmark, batches, the agent's requests), `GateOperation`,
/// `CandidateOperation` (Candidates.swift), `TriageOperation` (Triage.swift),
/// `EvidenceOperation` (Evidence.swift), `ImagesOperation`; the public methods below hand
/// each call to its operation.
public final class ExperimentSupervisor {
    /// What the operations share; each public operation below hands it to its type.
    let experiment: ExperimentContext
    let lock: ExperimentLock?
    public var layout: ExperimentLayout { experiment.layout }
    public var config: ExperimentConfig { experiment.config }
    public var ledger: Ledger { experiment.ledger }
    var adapter: any BenchmarkAdapter { experiment.adapter }
    var policyLoader: PolicyLoader { experiment.policyLoader }
    var git: Git { experiment.git }
    /// Where the shipped templates are (the Ray driver, `executor: ray`); set by the CLI.
    public var templatesDirectory: String? {
        get { experiment.templatesDirectory }
        set { experiment.templatesDirectory = newValue }
    }
    /// Called after each task (serially), e.g. for a progress line. The outcome is nil for
    /// held-out tasks: not even a progress line may say which test task passed.
    public var progress: ((_ done: Int, _ total: Int, _ outcome: TaskOutcome?) -> Void)? {
        get { experiment.progress }
        set { experiment.progress = newValue }
    }
    /// Called with an operator line during long external tool runs (from any thread).
    public var log: (@Sendable (String) -> Void)? {
        get { experiment.log }
        set { experiment.log = newValue }
    }
    /// What recovery at open did, for the caller to print (`log` is not set yet then).
    public private(set) var recoveryNotes: [String] = []
    /// Called with each view's path just before it is written: tests kill the process there,
    /// between the ledger append and the views' publication.
    var beforeViewWrite: (String) -> Void {
        get { experiment.beforeViewWrite }
        set { experiment.beforeViewWrite = newValue }
    }
    /// Tasks of the benchmark that cannot run (each scores 0 with its reason), for the
    /// operator; the rest of the experiment works as usual.
    public var benchmarkProblems: [String] { adapter.problems }

    /// Opens an experiment. `exclusive` (every command that runs tasks or writes the ledger)
    /// takes the experiment lock, so a second supervisor is refused with the holder's pid,
    /// and repairs what a crash left (`recover`); read-only use (`status`) does not, and
    /// never repairs anything. `beforeViewWrite` is for tests (see the property).
    public init(layout: ExperimentLayout, policySearchPaths: [String], purpose: String, exclusive: Bool = true) throws {
        let config = try ExperimentConfig.load(layout.config)
        try layout.ensurePrivateDirectory()
        lock = exclusive ? try ExperimentLock(path: layout.lock, purpose: purpose) : nil
        let ledger = try Ledger(path: layout.ledger, kinds: .experiment)
        let adapter: any BenchmarkAdapter
        do {
            adapter = try config.makeAdapter(root: layout.root, checkTools: exclusive)
        } catch let e as ExperimentError {
            throw ExperimentError(e.kind, "\(layout.config): \(e.message)")
        }
        var paths = policySearchPaths
        if let d = config.policyDirectory { paths.insert(d.hasPrefix("/") ? d : layout.root + "/" + d, at: 0) }
        let policyLoader = PolicyLoader(searchPaths: paths)
        if exclusive {
            do {
                try config.checkPolicyMounts(root: layout.root, loader: policyLoader)
            } catch let e as ExperimentError {
                throw ExperimentError(e.kind, "\(layout.config): \(e.message)")
            }
        }
        experiment = ExperimentContext(layout: layout, config: config, ledger: ledger, adapter: adapter, policyLoader: policyLoader,
                                       git: Git(root: layout.root, privateIndex: layout.privateDirectory + "/git-index"))
        if exclusive { try recover() }
    }

    deinit { lock?.release() }

    public func state() throws -> ExperimentState { try experiment.state() }

    // MARK: - Recovery

    /// Makes the record whole after a crash: a gate that started but never finished is
    /// recorded as interrupted (its results discarded, never half-recorded), an accepted
    /// iteration whose commit was created but not yet published is published, and views a
    /// crash left behind the ledger are regenerated.
    func recover() throws {
        // Scratch mounts and a broker socket of supervisors killed before they could remove
        // them (never a live one's: see `Leftovers`).
        recoveryNotes += Leftovers.sweep(layout, scratchRoot: config.scratch)
        // A supervisor that died during held-out runs left their page-cache traces: gone
        // before anything untrusted of this experiment runs again.
        if let settled = HeldOutSettle.settleLeftover(journal: layout.heldOutJournal) {
            recoveryNotes += settled.lines
            if let failure = settled.failure {
                throw ExperimentError(.io, "the clean-up of a held-out run is still owed: \(failure); nothing untrusted of this experiment runs until it succeeds (it is tried again at every start)")
            }
        }
        let s = try state()
        var changed = false
        for open in s.openGates {
            changed = true
            _ = try ledger.appendAll(GateOperation.interruptedRows(try state(), attempt: open.attempt, agentSHA256: open.agentSHA256, config: config))
        }
        if let full = rollForwardCommit(s) {
            try git.publish(full)
            changed = true
        }
        guard s.prepared else { return }
        if changed {
            try regenerateViews()
            return
        }
        // Otherwise only views that are behind are rewritten: an edited view must stay
        // visible to `status --verify` until the next recorded change replaces it.
        let views = try Views.repair(layout, records: try ledger.records(), config: config, beforeEach: beforeViewWrite)
        let names = { (paths: [String]) in paths.map { String($0.dropFirst(self.layout.root.count + 1)) }.joined(separator: ", ") }
        if !views.behind.isEmpty {
            recoveryNotes.append("regenerated \(names(views.behind)): behind the ledger (an earlier supervisor stopped before publishing them)")
        }
        if !views.tampered.isEmpty {
            recoveryNotes.append("\(names(views.tampered)) differ from the ledger and were left for `status --verify`; the next recorded change rewrites them")
        }
    }

    // MARK: - verify

    public struct VerifyReport: Sendable {
        public var ledger: LedgerVerification
        /// Views that differ from everything the ledger rendered since their last publish.
        public var editedViews: [String]
        /// Views a crash left at an earlier state of the ledger: not a problem (they are
        /// derived), and regenerated by the next command that takes the lock.
        public var behindViews: [String]
        /// Accepted commits not on the branch, other than the one `unpublishedCommits` names:
        /// gone from the repository, or left off the branch by a rewrite.
        public var missingCommits: [String]
        /// The latest accepted commit, written but not yet on the branch: a supervisor stopped
        /// between recording the iteration and publishing its commit. Not a problem: the next
        /// command that takes the experiment lock publishes it (recover()).
        public var unpublishedCommits: [String] = []
        public var ok: Bool { ledger.ok && editedViews.isEmpty && missingCommits.isEmpty }
    }

    /// Recomputes the ledger's hash chain, compares the views with what the ledger says
    /// (behind it, or edited), and checks that every accepted iteration's commit is in the
    /// repository.
    public func verify() throws -> VerifyReport {
        // The latest accepted commit names the ledger head it followed: a ledger whose tail
        // was cut (or whose chain was recomputed) no longer contains that row.
        let v = try ledger.verify(expectedHead: git.latestLedgerHead())
        let records = try ledger.records()
        let s = try ExperimentState(records: records)
        let views = s.prepared ? try Views.check(layout, records: records, config: config) : Views.Check()
        let unpublished = s.gateAttempts.compactMap(\.commit).filter { !git.isPublished($0) }
        // Exactly what recover() rolls forward: the latest iteration's commit, present in the
        // object store. Anything else off the branch is missing.
        let pending = rollForwardCommit(s).map { [$0] } ?? []
        return VerifyReport(ledger: v, editedViews: views.tampered, behindViews: views.behind,
                            missingCommits: unpublished.filter { !pending.contains($0) }, unpublishedCommits: pending)
    }

    /// The latest accepted iteration's commit when it exists in the repository but is not on
    /// the branch: a supervisor stopped between appending the iteration and publishing it.
    private func rollForwardCommit(_ s: ExperimentState) -> String? {
        guard let last = s.iterations.last, last.commit != "baseline",
              let full = s.gateAttempts.compactMap(\.commit).first(where: { $0.hasPrefix(last.commit) }),
              git.exists(full), !git.isPublished(full) else { return nil }
        return full
    }

    /// workspace/learnings.md as text (the report), at most 256 KiB, no link followed (the
    /// coding agent writes it); nil when it is missing, a link, or larger.
    public func learningsText() -> String? {
        guard case .success(let bytes) = InputFile.read(at: AT_FDCWD, layout.learnings, cap: 256 << 10) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A snapshot's agent.py by its sha256, as text (the report's explorer); nil if it is
    /// missing or not a regular file of at most the agent file's cap.
    public func snapshotSource(_ sha256: String) -> String? {
        (try? snapshotBytes(sha256)).map { String(decoding: $0, as: UTF8.self) }
    }

    /// A content-addressed copy of agent.py (`snapshotAgent`).
    public typealias Snapshot = AgentSnapshot

    // MARK: - operations (each its own type over `experiment`)

    public typealias PrepareSummary = Experiment.PrepareSummary
    public typealias EvidenceReveal = Experiment.EvidenceReveal

    public func prepare() throws -> PrepareSummary { try PrepareOperation(experiment: experiment).prepare() }

    public static func smallSplitWarning(testTasks n: Int, testPassed: Int, minImprovement: Double?) -> String? {
        PrepareOperation.smallSplitWarning(testTasks: n, testPassed: testPassed, minImprovement: minImprovement)
    }

    public func runBenchmark(taskIDs: [String]?, oracle: Bool = false, actor: String = "cli", agent: Snapshot? = nil) throws -> [TaskOutcome] {
        try TrainOperation(experiment: experiment).runBenchmark(taskIDs: taskIDs, oracle: oracle, actor: actor, agent: agent)
    }

    public func proposeCluster(_ cluster: String, label: String?, mergeWith: String?, actor: String) throws {
        try TrainOperation(experiment: experiment).proposeCluster(cluster, label: label, mergeWith: mergeWith, actor: actor)
    }

    @discardableResult
    public func reviewSuite(_ action: String, tasks: [String], reason: String, actor: String) throws -> [String] {
        try TrainOperation(experiment: experiment).reviewSuite(action, tasks: tasks, reason: reason, actor: actor)
    }

    public func needsHuman(_ text: String, actor: String) throws { try TrainOperation(experiment: experiment).needsHuman(text, actor: actor) }

    public func gate(actor: String = "cli", agent: Snapshot? = nil, message: String? = nil, beforeHeldOut: () throws -> Void = {}) throws -> GateResult {
        try GateOperation(experiment: experiment).gate(actor: actor, agent: agent, message: message, beforeHeldOut: beforeHeldOut)
    }

    @discardableResult
    public func submitCandidate(agent: Snapshot? = nil, message: String?, actor: String) throws -> CandidateRecord {
        try CandidateOperation(experiment: experiment).submitCandidate(agent: agent, message: message, actor: actor)
    }

    public func gateCandidates(actor: String, message: String? = nil, overBudget: () -> String? = { nil },
                               beforeHeldOut: () throws -> Void = {}) throws -> (ranking: CandidatesRankedRecord?, result: GateResult) {
        try CandidateOperation(experiment: experiment).gateCandidates(actor: actor, message: message, overBudget: overBudget, beforeHeldOut: beforeHeldOut)
    }

    @discardableResult
    public func runTriage(trigger: String, onlyNew: Bool = false) throws -> TriageRecord? {
        try TriageOperation(experiment: experiment).runTriage(trigger: trigger, onlyNew: onlyNew)
    }

    public func reviewCluster(_ cluster: String, action: ClusterReviewRecord.Action, label: String? = nil, with other: String? = nil,
                              reason: String, actor: String) throws {
        try TriageOperation(experiment: experiment).reviewCluster(cluster, action: action, label: label, with: other, reason: reason, actor: actor)
    }

    @discardableResult
    public func acceptTriage(reason: String, actor: String) throws -> [String] {
        try TriageOperation(experiment: experiment).acceptTriage(reason: reason, actor: actor)
    }

    public func exportEvidence(attempt: Int, reveal: EvidenceReveal, key: Curve25519.Signing.PrivateKey) throws -> EvidenceBundle {
        try EvidenceOperation(experiment: experiment).exportEvidence(attempt: attempt, reveal: reveal, key: key)
    }

    public func evidenceAttempts() throws -> [Int] { try EvidenceOperation(experiment: experiment).evidenceAttempts() }

    public func buildImages(log: (String) -> Void) throws -> (images: Int, problems: [String: String]) {
        try ImagesOperation(experiment: experiment).buildImages(log: log)
    }

    public func snapshotAgent() throws -> Snapshot { try experiment.snapshotAgent() }

    public func snapshot(bytes: [UInt8]) throws -> Snapshot { try experiment.snapshot(bytes: bytes) }

    public func snapshotBytes(_ sha256: String) throws -> [UInt8] { try experiment.snapshotBytes(sha256) }

    public func regenerateViews() throws { try experiment.regenerateViews() }
}

