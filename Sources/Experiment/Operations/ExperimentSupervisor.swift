import Benchmark
import Crypto
import Foundation
import Ledger
import Sandbox
import SandboxPolicy
import SupervisorIO

public struct ExperimentError: Error, CustomStringConvertible, Sendable {
    /// `locked`: another supervisor holds the experiment lock.
    public enum Kind: Sendable { case usage, refused, state, io, locked }
    public var kind: Kind
    public var message: String
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }
    /// An I/O failure of the supervisor's own files, as `.io` naming the path and errno.
    public init(_ failure: IOFailure) { self.init(.io, failure.description) }
    public var description: String { message }
}

extension ExperimentError: AutoharnessError {
    public var category: ErrorCategory {
        switch kind {
        case .usage: return .usage
        case .refused: return .refused
        case .state: return .state
        case .io: return .io
        case .locked: return .locked
        }
    }
}

/// What `gate()` decided: the attempt exactly as it is recorded in the ledger.
public typealias GateResult = GateAttemptRecord

/// Everything the supervisor does between two edits of agent.py: prepare, benchmark (train
/// only), gate, status. It holds the experiment lock for its lifetime, and every score it
/// computes comes from a verifier sandbox agent.py never shared anything with.
public final class ExperimentSupervisor {
    public let layout: ExperimentLayout
    public let config: ExperimentConfig
    public let ledger: Ledger
    let lock: ExperimentLock?
    let adapter: any BenchmarkAdapter
    let policyLoader: PolicyLoader
    let git: Git
    /// Where runs go (`Executors`), with the held-out runtime settled at the first gate.
    let executors = Executors()
    /// Where the shipped templates are (the Ray driver, `executor: ray`); set by the CLI.
    public var templatesDirectory: String?
    /// Called after each task (serially), e.g. for a progress line. The outcome is nil for
    /// held-out tasks: not even a progress line may say which test task passed.
    public var progress: ((_ done: Int, _ total: Int, _ outcome: TaskOutcome?) -> Void)?
    /// Called with an operator line during long external tool runs (from any thread).
    public var log: (@Sendable (String) -> Void)?
    /// What recovery at open did, for the caller to print (`log` is not set yet then).
    public private(set) var recoveryNotes: [String] = []
    /// Called with each view's path just before it is written: tests kill the process there,
    /// between the ledger append and the views' publication.
    var beforeViewWrite: (String) -> Void = { _ in }
    /// Tasks of the benchmark that cannot run (each scores 0 with its reason), for the
    /// operator; the rest of the experiment works as usual.
    public var benchmarkProblems: [String] { adapter.problems }

    /// Opens an experiment. `exclusive` (every command that runs tasks or writes the ledger)
    /// takes the experiment lock, so a second supervisor is refused with the holder's pid,
    /// and repairs what a crash left (`recover`); read-only use (`status`) does not, and
    /// never repairs anything. `beforeViewWrite` is for tests (see the property).
    public init(layout: ExperimentLayout, policySearchPaths: [String], purpose: String, exclusive: Bool = true) throws {
        self.layout = layout
        do {
            config = try ExperimentConfig.load(layout.config)
        }
        try Self.ensurePrivateDirectory(layout)
        lock = exclusive ? try ExperimentLock(path: layout.lock, purpose: purpose) : nil
        ledger = try Ledger(path: layout.ledger, kinds: .experiment)
        do {
            adapter = try config.makeAdapter(root: layout.root, checkTools: exclusive)
        } catch let e as ExperimentError {
            throw ExperimentError(e.kind, "\(layout.config): \(e.message)")
        }
        var paths = policySearchPaths
        if let d = config.policyDirectory { paths.insert(d.hasPrefix("/") ? d : layout.root + "/" + d, at: 0) }
        policyLoader = PolicyLoader(searchPaths: paths)
        git = Git(root: layout.root, privateIndex: layout.privateDirectory + "/git-index")
        if exclusive { try recover() }
    }

    deinit { lock?.release() }

    public func state() throws -> ExperimentState { try ExperimentState(records: ledger.records()) }

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
        if let r = PageCacheEviction.evictLeftover(journal: layout.heldOutJournal) {
            recoveryNotes.append("a held-out run was cut off; \(r); \(InodeNumberNoise.perturb())")
        }
        let s = try state()
        var changed = false
        for open in s.openGates {
            changed = true
            _ = try ledger.appendAll(Self.interruptedRows(try state(), attempt: open.attempt, agentSHA256: open.agentSHA256, config: config))
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

    // MARK: - prepare

    public struct PrepareSummary: Sendable {
        public var tasks: Int
        public var passed: Int
        public var train: Int
        public var test: Int
        public var baselineScore: Double
        /// How the split was made, for the operator.
        public var splitOrigin: String
        /// What the operator should change before running (a test split too small to gate).
        public var warnings: [String] = []
    }

    /// A test split on which the gate's improvement rule can accept few or no gates. With
    /// `min_improvement: auto` (1/N) each acceptance needs two more held-out tasks to pass
    /// than the best so far, so a small split runs out of room fast (or never has any).
    public static func smallSplitWarning(testTasks n: Int, testPassed: Int, minImprovement: Double?) -> String? {
        guard n > 0 else { return nil }
        let m = GateRules.requiredImprovement(testTasks: n, minImprovement: minImprovement)
        // Tasks one acceptance needs beyond the best, with pass/fail rewards: more than m·N.
        let step = Int((m * Double(n) + 1e-9).rounded(.down)) + 1
        let room = n - testPassed
        let possible = room / step
        guard n < 10 || possible == 0 else { return nil }
        let setting = minImprovement == nil ? "min_improvement auto is 1/\(n)" : "min_improvement is \(minImprovement!)"
        var text = "the test split has \(n) task(s) and \(setting): a gate is accepted only when at least \(step) more held-out task(s) pass than the best so far; "
        text += "from this baseline (\(testPassed)/\(n) pass) "
        text += possible == 0 ? "no gate can ever be accepted. " : "at most \(possible) gate(s) can ever be accepted. "
        if step > 1 { text += "`gate.min_improvement: 0` accepts any strictly higher score (one more task); " }
        text += "a benchmark with more tasks gives a finer held-out score."
        return text
    }

    /// Statuses that say the benchmark's machinery, not agent.py, failed the task.
    static let infrastructureFailures: Set<TaskStatus> = [.setupFailed, .missingResult, .verifierCrashed, .verifierTimeout, .noReward, .invalidReward]

    /// A baseline where every task failed for the machinery's reasons measures nothing: it is
    /// refused (nothing recorded) with the counts and the first reasons, instead of becoming
    /// a 0/N starting point every later gate would "beat".
    static func refuseBrokenBaseline(_ outcomes: [TaskOutcome]) throws {
        guard !outcomes.isEmpty, outcomes.allSatisfy({ infrastructureFailures.contains($0.status) }) else { return }
        var counts: [TaskStatus: Int] = [:]
        for o in outcomes { counts[o.status, default: 0] += 1 }
        let byStatus = counts.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.value) \($0.key.rawValue)" }.joined(separator: ", ")
        let reasons = Array(Set(outcomes.compactMap(\.detail))).sorted().prefix(3).map { "  \($0)" }.joined(separator: "\n")
        throw ExperimentError(.state, """
            every task of the baseline failed before agent.py could be judged (\(byStatus)); nothing was recorded. \
            Fix the benchmark's setup and run `autoharness prepare` again. First reasons:
            \(reasons)
            """)
    }

    /// Runs the baseline over every task with nothing persisted (the split does not exist yet,
    /// so every task is treated as a test task), derives the split, records iteration 0.
    public func prepare() throws -> PrepareSummary {
        let s = try state()
        guard !s.prepared else {
            throw ExperimentError(.state, "experiment already prepared (split recorded in the ledger); nothing was run")
        }
        let snap = try snapshotAgent()
        let audit = RunAudit()
        let outcomes: [TaskOutcome]
        do {
            outcomes = try run(adapter.taskIDs, agent: snap.directory, audit: audit, split: .baseline, operatorDiagnostics: true, traces: { _ in nil })
        } catch {
            recordViolations(violations(audit, during: "baseline", heldOut: true))
            throw error
        }
        try Self.refuseBrokenBaseline(outcomes)
        var passed: [String: Bool] = [:]
        for o in outcomes { passed[o.id] = o.passed }
        let split: SplitFile
        if let fixed = adapter.fixedSplit {
            split = SplitFile(train: fixed.train.sorted(), test: fixed.test.sorted(),
                              metadata: .init(created: isoTimestamp(), totalTasks: fixed.train.count + fixed.test.count, seed: fixed.seed))
        } else {
            split = SplitFile.make(baselinePassed: passed, created: isoTimestamp())
        }
        try AtomicFile.write([UInt8](split.encoded()), to: layout.split, mode: 0o600)
        let val = HeldOutScore.val(split.test, outcomes)
        var baselineRecord = BaselineRecord(valScore: val, testTasks: split.test.count, tasksPassed: outcomes.filter(\.passed).count,
                                            tasksTotal: outcomes.count, agentSHA256: snap.sha256, costUSD: TaskOutcome.cost(outcomes),
                                            agentCode: TaskOutcome.agentCode(outcomes))
        if config.timeoutPolicy == .infra { (baselineRecord.valScoreFinished, baselineRecord.heldOutTimedOut) = HeldOutScore.finished(split.test, outcomes) }
        var items: [(RecordKind, any Encodable)] = [
            (.split, SplitRecord(train: split.train, test: split.test, seed: split.metadata.seed)),
            (.baseline, baselineRecord),
            (.iteration, IterationRecord(iteration: 0, valScore: val, commit: "baseline", evalsPassed: 0, evalsTotal: 0,
                                         timestamp: isoTimestamp(), agentSHA256: snap.sha256)),
        ]
        let splitRecord = SplitRecord(train: split.train, test: split.test, seed: split.metadata.seed)
        if let first = RollingBatches.first(splitRecord, config: config) { items.append((.batchRevealed, first)) }
        items += violations(audit, during: "baseline", heldOut: true)
        _ = try ledger.appendAll(items)
        try regenerateViews()
        // The first rolling batch's tasks run as a train run with the baseline agent.py: its
        // failures are there when the coding agent starts.
        _ = try settleBatches()
        var summary = PrepareSummary(tasks: outcomes.count, passed: outcomes.filter(\.passed).count, train: split.train.count,
                                     test: split.test.count, baselineScore: val,
                                     splitOrigin: adapter.fixedSplit != nil
                                         ? "the benchmark's own split, seed \(split.metadata.seed)"
                                         : "stratified on baseline pass/fail, seed \(split.metadata.seed)")
        let testPassed = split.test.filter { passed[$0] == true }.count
        if let w = Self.smallSplitWarning(testTasks: split.test.count, testPassed: testPassed, minImprovement: config.minImprovement) {
            summary.warnings.append(w)
        }
        return summary
    }

    // MARK: - benchmark

    /// Runs train tasks (all, or `taskIDs`), keeping their traces. Any id that is not a train
    /// task — unknown or held out, deliberately indistinguishable — refuses the whole request
    /// and is recorded as a violation.
    public func runBenchmark(taskIDs: [String]?, oracle: Bool = false, actor: String = "cli", agent: Snapshot? = nil) throws -> [TaskOutcome] {
        try runTrain(taskIDs: taskIDs, oracle: oracle, actor: actor, agent: agent, state: try settleBatches())
    }

    /// `runBenchmark` once the batches are settled.
    func runTrain(taskIDs: [String]?, oracle: Bool, actor: String, agent: Snapshot?, state s: ExperimentState) throws -> [TaskOutcome] {
        guard let split = s.split else { throw ExperimentError(.state, "experiment not prepared yet: run `autoharness prepare` first") }
        // With rolling batches, a train task of a batch not revealed yet is as unknown here
        // as a held-out one (the refusal below reads the same for all three).
        let train = Set(s.visibleTrain)
        // Another name of a task (Harbor's [task] name, org/name@ref) is its id; a name that
        // is no task's stays as given. Refusals repeat the names as given: naming the task
        // an alias maps to would tell a held-out task from an unknown name.
        let given = taskIDs
        let taskIDs = taskIDs.map { $0.map { adapter.canonicalTaskID($0) ?? $0 } }
        if let ids = taskIDs, let given {
            let refused = zip(given, ids).filter { !train.contains($0.1) }.map(\.0)
            if !refused.isEmpty {
                _ = try ledger.append(.violation, ViolationRecord(
                    actor: actor, kind: "refused_task_ids",
                    detail: "benchmark requested \(refused.count) id\(refused.count == 1 ? "" : "s") outside the train split: \(refused.prefix(20).joined(separator: ", "))\(refused.count > 20 ? ", …" : "")",
                    count: 1))
                throw ExperimentError(.refused, "not \(s.batches.isEmpty ? "train tasks (unknown or held out)" : "revealed train tasks (unknown, held out, or in a batch not revealed yet)"): \(printable(refused.prefix(20).joined(separator: ", "), limit: 2000))\(refused.count > 20 ? " and \(refused.count - 20) more" : ""); nothing was run; this request was recorded")
            }
        }
        let tasks = (taskIDs.map(Set.init) ?? train).sorted()
        let snap = try agent ?? snapshotAgent()
        let firstRun = s.latestTrainRun == nil
        let audit = RunAudit()
        var recorded = false
        do {
            try TraceFiles.makeDirectories(layout.latestTraces)
            for t in tasks { try TraceFiles.remove(layout.latestTraces + "/" + TraceName.encode(t)) }
            let outcomes = try run(tasks, agent: snap.directory, audit: audit, split: .train, oracle: oracle,
                                   traces: { [layout] in layout.latestTraces + "/" + TraceName.encode($0) })
            if firstRun {
                try TraceFiles.makeDirectories(layout.baselineTraces)
                for t in tasks {
                    let dst = layout.baselineTraces + "/" + TraceName.encode(t)
                    try TraceFiles.remove(dst)
                    try TraceFiles.copy(layout.latestTraces + "/" + TraceName.encode(t), to: dst)
                }
            }
            var items: [(RecordKind, any Encodable)] = [(.trainRun, TrainRunRecord(
                timestamp: isoTimestamp(), agentSHA256: snap.sha256,
                results: Dictionary(uniqueKeysWithValues: outcomes.map { ($0.id, $0.reward) }),
                statuses: Dictionary(uniqueKeysWithValues: outcomes.map { ($0.id, $0.status.rawValue) }),
                costUSD: TaskOutcome.cost(outcomes), agentCode: TaskOutcome.agentCode(outcomes)))]
            if let evidence = FailureEvidenceRecord.observed(outcomes, train: train, source: "train run", agentSHA256: snap.sha256,
                                                             batch: s.batches.last?.revealed.batch) {
                items.append((.failureEvidence, evidence))
            }
            items += violations(audit, during: "train run")
            _ = try ledger.appendAll(items)
            recorded = true
            try regenerateViews()
            return outcomes
        } catch {
            // A train run whose traces could not be kept is not recorded; what its sandboxes
            // did is (if the ledger still takes it).
            if !recorded { recordViolations(violations(audit, during: "train run")) }
            throw error
        }
    }

    /// Brings rolling batches to where the ledger says they should be, before a train run or
    /// a gate: reveals the first batch (prepare's, or of an experiment whose config turned
    /// batches on before anything ran), and runs a revealed batch whose tasks have not run
    /// yet (a supervisor stopped before it could). Returns the state after.
    func settleBatches() throws -> ExperimentState {
        var s = try state()
        if let first = RollingBatches.first(s, config: config) {
            // Turned on after train runs or gates, batches would hide what the coding agent
            // already saw and strand suite tasks outside every batch.
            guard s.trainRuns.isEmpty && s.gatesStarted == 0 else {
                throw ExperimentError(.state, "\(layout.config): loop.batch_size \(config.batchSize) was set after this experiment's train split was "
                    + "visible (\(s.trainRuns.count) train run(s), \(s.gatesStarted) gate(s)); rolling batches must be set before prepare. "
                    + "Set loop.batch_size: 0, or start a new experiment; nothing was run")
            }
            _ = try ledger.append(.batchRevealed, first)
            log?("rolling batches begin: batch 1 reveals \(first.tasks.count) of \(s.split?.train.count ?? 0) train task(s) (loop.batch_size \(config.batchSize))")
            try regenerateViews()
            s = try state()
        }
        if let batch = s.batches.last, batch.trainRuns == 0, !batch.revealed.tasks.isEmpty {
            try runRevealedBatch()
            s = try state()
        }
        return s
    }

    /// Proposals recorded at most, over the experiment: each is a ledger row.
    static let maxClusterProposals = 1000

    /// Records `actor`'s proposal about a failure cluster (a label, or that it shares its root
    /// cause with `mergeWith`): shown beside the cluster, counted nowhere.
    public func proposeCluster(_ cluster: String, label: String?, mergeWith: String?, actor: String) throws {
        let s = try state()
        let book = FailureBook(s)
        guard book.cluster(cluster) != nil else {
            throw ExperimentError(.usage, "no failure cluster \(printable(cluster)): `autoharness failures` lists them")
        }
        if let m = mergeWith {
            guard m != cluster, book.cluster(m) != nil else {
                throw ExperimentError(.usage, "--merge-with \(printable(m)): not another existing cluster")
            }
        }
        guard s.clusterProposals.count < Self.maxClusterProposals else {
            throw ExperimentError(.refused, "\(Self.maxClusterProposals) proposals are already recorded; no more are kept")
        }
        _ = try ledger.append(.clusterProposal, ClusterProposalRecord(actor: actor, cluster: cluster,
                                                                      label: label.map { printable($0, limit: 200) }, mergeWith: mergeWith))
        try regenerateViews()
    }

    /// Appends what a failed operation's sandboxes did, if the ledger takes it: the
    /// operation's own error is what the caller reports.
    func recordViolations(_ items: [(RecordKind, any Encodable)]) {
        guard !items.isEmpty else { return }
        if (try? ledger.appendAll(items)) == nil { log?("the violations of the failed operation could not be recorded either") }
    }

    // MARK: - gate

    /// Judges a snapshot of agent.py: (1) regression suite on train ≥ threshold; (2) test
    /// val_score beats the best accepted score by more than `gate.min_improvement` (a tie
    /// fails; every test task counts, errors as 0); (3) only if both pass, failing non-suite
    /// train tasks are re-run and newly passing ones promoted. On acceptance the supervisor
    /// commits the snapshot and records the iteration; a rejection is recorded too.
    /// `beforeHeldOut` runs just before the first held-out task and may refuse (throw): the
    /// run loop checks there that the coding agent is still frozen.
    public func gate(actor: String = "cli", agent: Snapshot? = nil, beforeHeldOut: () throws -> Void = {}) throws -> GateResult {
        let s = try settleBatches()
        guard let split = s.split else { throw ExperimentError(.state, "experiment not prepared yet: run `autoharness prepare` first") }
        // Numbered and counted by its start row, appended (and synced) before any task runs:
        // a gate whose outcome is lost still used its look at the held-out split.
        let attempt = s.lastAttempt + 1
        // The gate's clock: its answer is held to `config.replyTime` counted from here.
        let started = monotonicSeconds()
        let snap = try agent ?? snapshotAgent()
        // Where held-out tasks run, settled once per supervisor: a VM that cannot run here is
        // refused before the gate counts (nothing looked yet).
        try executors.settleHeldOut(executorEnvironment)
        _ = try ledger.append(.gateStarted, GateStartedRecord(attempt: attempt, agentSHA256: snap.sha256))
        let audit = RunAudit()
        let heldOutAudit = RunAudit()
        var recorded = false
        var heldOutBegan = false
        do {
            let result = try judge(s, split: split, attempt: attempt, snap: snap, audit: audit, heldOutAudit: heldOutAudit,
                                   started: started, recorded: &recorded, heldOutBegan: &heldOutBegan, beforeHeldOut: beforeHeldOut)
            // The batch this gate revealed runs now, with the agent.py the gate left standing; a
            // failure here (recorded gate, unrecorded run) is the caller's error, and the next
            // train run or gate runs the batch first (`settleBatches`).
            if result.revealedBatch != nil { try runRevealedBatch() }
            return result
        } catch {
            // The attempt counted from its start row; it ends as interrupted, as a crash would
            // (recovery does the same if even this cannot be written), and what its
            // sandboxes did is recorded. A failure once held-out tasks ran is held to the
            // reply grid too: when agent.py makes a held-out run fail is as much a channel.
            if heldOutBegan && !recorded { _ = holdReply(since: started) }
            if !recorded {
                recordViolations(Self.interruptedRows(s, attempt: attempt, agentSHA256: snap.sha256, config: config)
                    + violations(audit, during: "gate") + violations(heldOutAudit, during: "gate, held-out split", heldOut: true))
            }
            throw error
        }
    }

    /// The gate's three steps and their record (`gate`); `recorded` is set once the ledger
    /// holds the attempt.
    private func judge(_ s: ExperimentState, split: SplitRecord, attempt: Int, snap: Snapshot, audit: RunAudit, heldOutAudit: RunAudit,
                       started: Double, recorded: inout Bool, heldOutBegan: inout Bool, beforeHeldOut: () throws -> Void) throws -> GateResult {
        var result = GateResult(attempt: attempt, agentSHA256: snap.sha256, accepted: false, reason: "", suitePassed: 0,
                                suiteTotal: s.suite.count, valScore: nil, bestBefore: s.best, promoted: [], commit: nil, iteration: nil)
        result.batch = s.currentBatch?.revealed.batch

        // The rules are `GateRules.decide`, a pure function of what ran so far; this runs what
        // it asks for next, in order: the suite (train), the held-out split (traces never
        // persist, only rewards come back), the promotion candidates (train).
        var phases = GateRules.Phases(suite: try run(s.suite, agent: snap.directory, audit: audit, split: .train, traces: { _ in nil }))
        result.suitePassed = phases.suite.filter(\.passed).count
        var resolvedClusters: [String] = []
        decided: while true {
            switch GateRules.decide(s, config: config, attempt: attempt, agentSHA256: snap.sha256, phases: phases) {
            case .runHeldOut:
                try beforeHeldOut()
                heldOutBegan = true
                let outcomes = try run(split.test, agent: snap.directory, audit: heldOutAudit, split: .heldOut, traces: { _ in nil })
                phases.heldOut = outcomes
                result.heldOutCostUSD = TaskOutcome.cost(outcomes)
                result.valScore = HeldOutScore.val(split.test, outcomes)
                // `timeout_policy: infra`: the operator's view of the tasks that finished.
                if config.timeoutPolicy == .infra { (result.valScoreFinished, result.heldOutTimedOut) = HeldOutScore.finished(split.test, outcomes) }
            case .runPromotion(let candidates):
                phases.promotion = try run(candidates, agent: snap.directory, audit: audit, split: .train, traces: { _ in nil })
            case .rejected(let outcome, let reason, let required):
                (result.outcome, result.reason, result.requiredImprovement) = (outcome, reason, required)
                break decided
            case .accepted(let promoted, let resolved):
                (result.accepted, result.outcome, result.reason, result.promoted) = (true, .accepted, "accepted", promoted)
                resolvedClusters = resolved
                break decided
            }
        }
        let promotionOutcomes = phases.promotion ?? []
        var lastResults = Dictionary(uniqueKeysWithValues: phases.suite.map { ($0.id, $0.reward) })
        let promotedSet = Set(result.promoted)
        for o in promotionOutcomes where promotedSet.contains(o.id) { lastResults[o.id] = o.reward }
        result.trainCostUSD = TaskOutcome.cost(phases.suite + promotionOutcomes)
        result.agentCode = TaskOutcome.agentCode(phases.suite + (phases.heldOut ?? []) + promotionOutcomes)
        // What the suite and promotion phases (train tasks only) showed failing; recorded after
        // the attempt's row, so an accepted gate's passing runs resolve records by this attempt.
        let evidence = GateRules.evidence(s, phases: phases, attempt: attempt, agentSHA256: snap.sha256)
        let after = s.currentBatch == nil ? nil : FailureBook(RollingBatches.after(s, accepted: result.accepted ? (attempt, snap.sha256) : nil,
                                                                                   evidence: evidence, time: isoTimestamp()))
        // The batch ends here when this attempt was accepted or was its last; the next is revealed.
        var batchRows: [(RecordKind, any Encodable)] = []
        if let after, let (ended, next) = RollingBatches.end(s, attempt: attempt, accepted: result.accepted, promoted: result.promoted,
                                                            resolved: resolvedClusters, after: after, config: config) {
            result.revealedBatch = next.batch
            result.revealedTasks = next.tasks.count
            batchRows = [(.batchEnded, ended), (.batchRevealed, next)]
        }

        // Nothing of the outcome (its rows' times, the commit's date, the reply) exists before
        // the configured instant.
        var items: [(RecordKind, any Encodable)] = []
        if heldOutBegan, let overrun = holdReply(since: started) { items.append((.note, NoteRecord(text: overrun))) }
        if result.accepted, let val = result.valScore {
            let iteration = s.iterations.count
            let head = try ledger.head
            let message = """
                autoharness: iteration \(iteration), val_score \(Views.disclosed(val, config.disclosure)) (best before \(Views.disclosed(s.best ?? 0, config.disclosure)))

                Gate attempt \(attempt) accepted: suite \(result.suitePassed)/\(result.suiteTotal), \(result.promoted.count) task(s) promoted.

                Agent-SHA256: \(snap.sha256)
                Ledger-Head: \(head.seq):\(head.hash)
                """
            let commit = try git.prepareCommit(file: snap.directory + "/agent.py", at: "agent/agent.py", message: message)
            result.commit = commit
            result.iteration = iteration
            items.append((.gateAttempt, result))
            items.append((.iteration, IterationRecord(iteration: iteration, valScore: val, commit: String(commit.prefix(7)),
                                                      evalsPassed: result.suitePassed, evalsTotal: result.suiteTotal,
                                                      timestamp: isoTimestamp(), agentSHA256: snap.sha256)))
            items.append((.suitePromotion, SuitePromotionRecord(added: result.promoted, lastResults: lastResults)))
        } else {
            items.append((.gateAttempt, result))
        }
        if let evidence { items.append((.failureEvidence, evidence)) }
        items += batchRows
        items += violations(audit, during: "gate")
        items += violations(heldOutAudit, during: "gate, held-out split", heldOut: true)
        _ = try ledger.appendAll(items)
        recorded = true
        // Published only once the ledger holds the iteration; a crash in between is rolled
        // forward by recover().
        if let c = result.commit { try git.publish(c) }
        try regenerateViews()
        return result
    }

    /// An interrupted attempt's rows: the attempt, and (when it was its batch's last allowed
    /// attempt: it looked at the held-out split like any other) the batch's end and the next
    /// batch, revealed in the same append; the next train run or gate runs it.
    static func interruptedRows(_ s: ExperimentState, attempt: Int, agentSHA256: String, config: ExperimentConfig) -> [(RecordKind, any Encodable)] {
        var record = GateAttemptRecord.interrupted(attempt: attempt, agentSHA256: agentSHA256)
        record.batch = s.currentBatch?.revealed.batch
        guard let (ended, next) = RollingBatches.end(s, attempt: attempt, accepted: false, promoted: [], resolved: [], after: FailureBook(s), config: config) else {
            return [(.gateAttempt, record)]
        }
        record.revealedBatch = next.batch
        record.revealedTasks = next.tasks.count
        return [(.gateAttempt, record), (.batchEnded, ended), (.batchRevealed, next)]
    }

    /// Runs the latest revealed batch as a train run (traces, records, views) with the agent.py
    /// the experiment stands on: the last accepted one (the baseline's before any).
    func runRevealedBatch() throws {
        let s = try state()
        guard let batch = s.batches.last, !batch.revealed.tasks.isEmpty, let sha = s.iterations.last?.agentSHA256 else { return }
        let snap = Snapshot(sha256: sha, directory: layout.snapshotDirectory(sha256: sha))
        guard access(snap.directory + "/agent.py", R_OK) == 0 else {
            throw ExperimentError(.io, "batch \(batch.revealed.batch) cannot run: the accepted agent.py's snapshot \(snap.directory)/agent.py is gone")
        }
        log?("batch \(batch.revealed.batch) revealed: running its \(batch.revealed.tasks.count) train task(s) with the accepted agent.py")
        _ = try runTrain(taskIDs: batch.revealed.tasks, oracle: false, actor: "supervisor", agent: snap, state: s)
    }

    /// Sleeps until the instant `config.replyTime` sets for a gate that started at `started`
    /// (monotonic seconds). Returns a note for the ledger when the gate ran past
    /// `gate.reply_after`.
    func holdReply(since started: Double) -> String? {
        let elapsed = monotonicSeconds() - started
        let release = config.replyTime.release(after: elapsed)
        if release - elapsed > 0.05 {
            log?("gate: answer held \(String(format: "%.1f", release - elapsed)) s, to \(Int(release)) s after the gate began (gate.reply_time: \(config.replyTime.name))")
        }
        while true {
            let left = release - (monotonicSeconds() - started)
            if left <= 0 { break }
            Thread.sleep(forTimeInterval: left)
        }
        guard config.replyTime.overran(elapsed) else { return nil }
        let why = "gate ran \(String(format: "%.1f", elapsed)) s, past gate.reply_after; it answered on the padded grid (\(Int(release)) s), which says up to about \(String(format: "%.1f", config.replyTime.capacityBits(worst: elapsed))) bits: raise gate.reply_after"
        log?(why)
        return why
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

    /// A snapshot's agent.py by its sha256, as text (the report's explorer); nil if it is
    /// missing or not a regular file of at most the agent file's cap.
    public func snapshotSource(_ sha256: String) -> String? {
        (try? snapshotBytes(sha256)).map { String(decoding: $0, as: UTF8.self) }
    }

    /// A snapshot's agent.py by its sha256: a regular file of at most the agent file's cap,
    /// no link followed (the bytes came from the coding agent).
    public func snapshotBytes(_ sha256: String) throws -> [UInt8] {
        guard sha256.count == 64, sha256.allSatisfy(\.isHexDigit) else { throw ExperimentError(.state, "not a snapshot: \(printable(sha256))") }
        let path = layout.snapshotDirectory(sha256: sha256)
        let dir = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard dir >= 0 else { throw ExperimentError(.io, "\(path): \(String(cString: strerror(errno)))") }
        defer { close(dir) }
        switch AgentFile.read(directoryFD: dir, maxBytes: AgentFile.maxBytes) {
        case .success(let bytes): return bytes
        case .failure(let why): throw ExperimentError(.io, "\(path)/agent.py \(why.reason)")
        }
    }

    public func regenerateViews() throws { try Views.regenerate(layout, try state(), config: config, beforeEach: beforeViewWrite) }

    // MARK: - running tasks

    /// Runs `ids` where the configuration says (`Executors`): one outcome per id, in order (a
    /// task the executor did not score is 0, never missing).
    func run(_ ids: [String], agent: String, audit: RunAudit, split: SplitClass, oracle: Bool = false,
             operatorDiagnostics: Bool = false, traces: @escaping (String) -> String?) throws -> [TaskOutcome] {
        guard !ids.isEmpty else { return [] }
        let request = TaskRun(ids: ids, split: split, agent: agent, audit: audit, oracle: oracle, operatorDiagnostics: operatorDiagnostics, traces: traces)
        let environment = executorEnvironment
        let outcomes = try executors.executor(for: request, environment) {
            RayNodeExecutor(environment: environment, templatesDirectory: templatesDirectory,
                            excludedNodes: { [unowned self] in try state().excludedNodes },
                            recordExclusion: { [ledger] in _ = try ledger.append(.nodeExcluded, $0) })
        }.run(request)
        // Whatever the executor did, the mean is over every requested id.
        let byID = Dictionary(outcomes.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        let all = ids.map { byID[$0] ?? TaskOutcome(id: $0, reward: 0, status: .missingResult, detail: "no outcome from the \(adapter.name) adapter") }
        return split.keepsNothing ? Self.withoutEvidence(all) : all
    }

    /// What the executors need of this experiment, with the operator's current callbacks.
    var executorEnvironment: ExecutorEnvironment {
        ExecutorEnvironment(config: config, layout: layout, adapter: adapter, policyLoader: policyLoader, log: log, progress: progress)
    }

    /// A held-out task's failing checks are test data: none leaves `run`, whatever an adapter
    /// returned (adapters collect none for held-out runs; this is the second wall).
    static func withoutEvidence(_ outcomes: [TaskOutcome]) -> [TaskOutcome] {
        outcomes.map { o in
            var o = o
            o.failures = nil
            return o
        }
    }

    /// Refused syscalls and limit events of a run, as ledger violation records (one per kind
    /// of event; the audit already bounds their number).
    /// Where one run's sandboxes report: those that hold agent.py, and those that never load
    /// it (a local task's verifier, tau2's scorer, BIRD's graders).
    struct RunAudit {
        let agent = AuditLog()
        let tool = AuditLog()
    }

    /// A run's violations and limit hits, each against the sandbox that made it: agent.py for
    /// the sandboxes that hold it (a tool sharing its process included: tau2's runner,
    /// Harbor's orchestrator), "verifier" (local benchmarks) or "benchmark tool" for those
    /// without it.
    func violations(_ audit: RunAudit, during: String, heldOut: Bool = false) -> [(RecordKind, any Encodable)] {
        violations(audit.agent, actor: "agent.py (\(during))", heldOut: heldOut)
            + violations(audit.tool, actor: "\(adapter.toolActor) (\(during))", heldOut: heldOut)
    }

    func violations(_ audit: AuditLog, actor: String, heldOut: Bool = false) -> [(RecordKind, any Encodable)] {
        var counts: [String: Int] = [:]
        var order: [String] = []
        var destinations = 0
        // Connections the allowlist let through (a runner's model API) are not violations.
        for e in audit.events where e.isViolation {
            // A refused syscall and a voided reward name what (the call, the reward file's path).
            let named: Set<AuditEvent.Kind> = [.syscall, .rewardTampering, .sharedStateChanged]
            var key = named.contains(e.countedKind) ? "\(e.countedKind.rawValue) \(e.name)" : e.countedKind.rawValue
            // A refused connection names where it went (the first 20 destinations; a flood
            // of distinct ones is folded into one row).
            if e.countedKind == .egress {
                let named = "egress \(e.name)"
                if counts[named] == nil && destinations >= 20 {
                    key = "egress (other destinations)"
                } else {
                    if counts[named] == nil { destinations += 1 }
                    key = named
                }
            }
            if counts[key] == nil { order.append(key) }
            counts[key, default: 0] += e.count ?? 1
        }
        let named = ["syscall", "egress", AuditEvent.Kind.rewardTampering.rawValue, AuditEvent.Kind.sharedStateChanged.rawValue]
        return order.map { key in
            (.violation, ViolationRecord(actor: actor, kind: named.first { key.hasPrefix($0) } ?? key,
                                         detail: "\(key) ×\(counts[key]!)", heldOut: heldOut ? true : nil, count: counts[key]!))
        }
    }

    // MARK: - snapshots

    public struct Snapshot: Sendable {
        public var sha256: String
        /// A directory holding exactly `agent.py`, bound read-only into task sandboxes.
        public var directory: String
    }

    /// Copies agent/agent.py into a content-addressed, supervisor-owned directory. The gate
    /// and the benchmark judge this copy, never the live file the coding agent may still edit.
    public func snapshotAgent() throws -> Snapshot {
        // What agent/ or agent.py is (a symlink, missing, too big) is the experiment's state;
        // a failing read is an I/O error.
        let dir = open(layout.agentDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard dir >= 0 else {
            let e = errno
            throw ExperimentError([ELOOP, ENOTDIR, ENOENT].contains(e) ? .state : .io,
                                  "\(layout.agentDirectory): \(String(cString: strerror(e))) (it must be a directory, not a symlink)")
        }
        defer { close(dir) }
        switch AgentFile.read(directoryFD: dir, maxBytes: AgentFile.maxBytes) {
        case .success(let bytes): return try snapshot(bytes: bytes)
        case .failure(let why): throw ExperimentError(why.errno == nil ? .state : .io, "\(layout.agentFile) \(why.reason)")
        }
    }

    /// Stores `bytes` as a content-addressed snapshot (idempotent).
    public func snapshot(bytes: [UInt8]) throws -> Snapshot {
        let sha = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
        let dir = layout.snapshotDirectory(sha256: sha)
        if access(dir + "/agent.py", F_OK) != 0 {
            do {
                try TraceFiles.makeDirectories(dir)
                try AtomicFile.write(bytes, to: dir + "/agent.py", mode: 0o644)
            } catch let e as IOFailure {
                throw ExperimentError(.io, "snapshot \(dir)/agent.py: \(e.reason ?? ErrnoName.describe(e.errno))")
            } catch {
                throw ExperimentError(.io, "snapshot \(error)")
            }
        }
        return Snapshot(sha256: sha, directory: dir)
    }

    static func ensurePrivateDirectory(_ layout: ExperimentLayout) throws {
        try FileManager.default.createDirectory(atPath: layout.snapshots, withIntermediateDirectories: true)
        chmod(layout.privateDirectory, 0o700)
    }

    static func mean(_ xs: [Double]) -> Double { xs.isEmpty ? 0 : xs.reduce(0, +) / Double(xs.count) }
}
