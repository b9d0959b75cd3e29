import Benchmark
import Foundation
import Ledger
import SupervisorIO

/// A row the failure records are derived from.
public enum FailureEvent: Sendable {
    case evidence(seq: Int64, time: String, FailureEvidenceRecord)
    case accepted(attempt: Int, agentSHA256: String)
}

/// The experiment as the ledger says it is.
public struct ExperimentState: Sendable {
    public var created: ExperimentCreated?
    public var split: SplitRecord?
    public var baseline: BaselineRecord?
    public var iterations: [IterationRecord] = []
    public var suite: [String] = []
    /// `loop.review: operator`: promoted by accepted gates, waiting for the operator.
    public var pendingSuite: [String] = []
    /// Retired by the operator: out of the suite, never promoted again.
    public var retiredSuite: Set<String> = []
    public var suiteReviews: [(time: String, record: SuiteReviewRecord)] = []
    public var suiteLastResults: [String: Double] = [:]
    public var latestTrainRun: TrainRunRecord?
    /// Every train run, oldest first.
    public var trainRuns: [TrainRunRecord] = []
    /// Latest reward of every train task across all runs.
    public var latestTrainRewards: [String: Double] = [:]
    /// Train tasks some recorded train run failed: the ratchet's candidates for promotion
    /// (`GateRules.candidates`), whatever a later run of another agent.py gave them.
    public var failedTrain: Set<String> = []
    public var gateAttempts: [GateAttemptRecord] = []
    /// Gates started (each counted before any task of it ran), whatever became of them.
    public var gatesStarted = 0
    /// The highest attempt number any gate row carries.
    public var lastAttempt = 0
    /// Gates started with no outcome recorded (cut off by a crash, or their outcome could not
    /// be written); recovery records each as interrupted.
    public var openGates: [GateStartedRecord] = []
    /// `gate.disclosure: ladder`: the step each gate attempt registered (`GateCriteria`).
    public var ladderSteps: [Int: Double] = [:]
    public var violations: [(time: String, record: ViolationRecord)] = []
    /// The latest run that has no end record (a crash or kill -9 left it open).
    public var openRun: RunStartedRecord?
    /// Gates started (interrupted ones included: a gate counts from the moment it starts) and
    /// accepted ones since the open run started.
    public var openRunGates = 0
    public var openRunAccepted = 0
    /// Rejected gates since the open run's last accepted one (interrupted ones not counted).
    public var openRunRejectedInARow = 0
    /// When the open run was last started or resumed (the ledger's time of that row).
    public var openRunSince: String?
    /// How the latest run that ended, ended.
    public var lastRunEnd: RunEndedRecord?
    /// Every coding-agent session recorded, oldest first.
    public var agentSessions: [AgentSessionRecord] = []
    /// What the failure records are derived from, in ledger order (`FailureBook`).
    public var failureEvents: [FailureEvent] = []
    /// Proposals about clusters, in ledger order.
    public var clusterProposals: [(time: String, record: ClusterProposalRecord)] = []
    /// `autoharness candidate`: the candidates waiting for the next gate (a gate's start takes
    /// them all, whatever becomes of it).
    public var pendingCandidates: [CandidateRecord] = []
    /// Every gate's ranking of its candidates, in order.
    public var rankings: [CandidatesRankedRecord] = []
    /// The latest triage entry of each failure record (`TriageEntry.key`), and every triage
    /// run in order.
    public var triage: [String: TriageEntry] = [:]
    public var triageRuns: [(time: String, record: TriageRecord)] = []
    /// The latest triage's labels wait for the operator (`loop.review: operator`).
    public var triageMergesPending = false
    /// The operator's decisions about clusters' grouping, in order.
    public var clusterReviews: [(time: String, record: ClusterReviewRecord)] = []
    /// What the coding agent asked a human for, in order.
    public var needsHuman: [(time: String, record: NeedsHumanRecord)] = []
    /// Rolling batches in order (empty: batches never began, every train task is visible).
    public var batches: [Batch] = []
    /// Worker nodes (`executor: ray`) that answered badly: no request of this experiment goes
    /// to their address again.
    public var excludedNodes: [NodeExcludedRecord] = []
    /// The benchmark tools' model spend, as they reported it: on train tasks and on held-out
    /// ones (the baseline's and gates'), over the experiment and in the open run.
    public var benchmarkCost = BenchmarkCost()
    public var openRunBenchmarkCost = BenchmarkCost()

    public struct BenchmarkCost: Sendable, Equatable {
        public var train = 0.0
        public var heldOut = 0.0
        /// Whether any run reported a cost at all (else "not reported", not $0).
        public var reported = false
        public var total: Double { train + heldOut }
        mutating func add(train t: Double?, heldOut h: Double?) {
            if let t { train += t; reported = true }
            if let h { heldOut += h; reported = true }
        }
    }
    /// The last row replayed into this state: the head the views rendered from it stand for.
    public var head = LedgerHead(seq: 0, hash: Ledger.genesisHash)

    /// What every session recorded used, summed.
    public var agentUsage: AgentUsage { agentSessions.reduce(AgentUsage()) { $0 + $1.usage } }
    /// What the sessions of run `runID` used.
    public func agentUsage(run runID: String) -> AgentUsage {
        agentSessions.filter { $0.runID == runID }.reduce(AgentUsage()) { $0 + $1.usage }
    }

    /// The best accepted val_score (the baseline counts as iteration 0).
    public var best: Double? { iterations.map(\.valScore).max() }

    /// The agent.py that holds `best` (the latest iteration with that score): its gate
    /// attempt's number (0: the baseline) and its per-task held-out rewards, for the paired
    /// decision; rewards nil when not recorded (a ledger older than `gate.trials`) or not one
    /// per test task of the split.
    public var bestHeldOut: (attempt: Int, trials: HeldOutTrials?)? {
        guard let top = best, let holder = iterations.last(where: { $0.valScore >= top - 1e-12 }) else { return nil }
        let recorded: (Int, HeldOutTrials?)
        if holder.iteration == 0 {
            recorded = (0, baseline?.heldOutTrials)
        } else if let a = gateAttempts.last(where: { $0.iteration == holder.iteration && $0.accepted }) {
            recorded = (a.attempt, a.heldOutTrials)
        } else {
            return nil
        }
        let usable = recorded.1.flatMap { $0.rewards.count == split?.test.count && $0.trials >= 1 ? $0 : nil }
        return (recorded.0, usable)
    }

    public struct Batch: Sendable {
        public var revealed: BatchRevealedRecord
        public var ended: BatchEndedRecord?
        /// Gate attempts recorded while it was the current batch.
        public var attempts: [Int] = []
        /// Train runs recorded since it was revealed (0: its tasks have not run yet).
        public var trainRuns = 0
    }

    /// The batch gates and train runs now belong to: the last revealed, unless it ended.
    public var currentBatch: Batch? { batches.last.flatMap { $0.ended == nil ? $0 : nil } }

    /// Train tasks the coding agent may see and run: those of revealed batches, or every train
    /// task when batches never began.
    public var visibleTrain: [String] {
        guard !batches.isEmpty else { return split?.train ?? [] }
        let revealed = Set(batches.flatMap(\.revealed.tasks))
        return (split?.train ?? []).filter(revealed.contains)
    }
    public var prepared: Bool { split != nil }

    /// Replays `records` in order. `each` sees the state after every row: the states the
    /// ledger passed through, which is what a view that is behind is compared with.
    public init(records: [LedgerRecord], each: (ExperimentState) throws -> Void = { _ in }) throws {
        for r in records {
            switch r.kind {
            case .experimentCreated: created = try r.decode(ExperimentCreated.self)
            case .split: split = try r.decode(SplitRecord.self)
            case .baseline:
                baseline = try r.decode(BaselineRecord.self)
                benchmarkCost.add(train: nil, heldOut: baseline?.costUSD)
            case .trainRun:
                let run = try r.decode(TrainRunRecord.self)
                latestTrainRun = run
                trainRuns.append(run)
                latestTrainRewards.merge(run.results) { $1 }
                for (id, reward) in run.results where reward < TaskOutcome.passThreshold { failedTrain.insert(id) }
                benchmarkCost.add(train: run.costUSD, heldOut: nil)
                if openRun != nil { openRunBenchmarkCost.add(train: run.costUSD, heldOut: nil) }
                if let i = batches.indices.last { batches[i].trainRuns += 1 }
            case .gateStarted:
                let g = try r.decode(GateStartedRecord.self)
                openGates.append(g)
                if let step = g.criteria?.ladderStep { ladderSteps[g.attempt] = step }
                pendingCandidates = []
                gatesStarted += 1
                lastAttempt = max(lastAttempt, g.attempt)
                if openRun != nil { openRunGates += 1 }
            case .gateAttempt:
                let a = try r.decode(GateAttemptRecord.self)
                gateAttempts.append(a)
                benchmarkCost.add(train: a.trainCostUSD, heldOut: a.heldOutCostUSD)
                if openRun != nil { openRunBenchmarkCost.add(train: a.trainCostUSD, heldOut: a.heldOutCostUSD) }
                lastAttempt = max(lastAttempt, a.attempt)
                if openRun != nil && a.accepted { openRunAccepted += 1 }
                if openRun != nil && a.verdict != .interrupted { openRunRejectedInARow = a.accepted ? 0 : openRunRejectedInARow + 1 }
                openGates.removeAll { $0.attempt == a.attempt }
                if a.accepted { failureEvents.append(.accepted(attempt: a.attempt, agentSHA256: a.agentSHA256)) }
                if let i = batches.indices.last, batches[i].ended == nil { batches[i].attempts.append(a.attempt) }
            case .iteration: iterations.append(try r.decode(IterationRecord.self))
            case .suitePromotion:
                let p = try r.decode(SuitePromotionRecord.self)
                for id in p.added where !suite.contains(id) && !retiredSuite.contains(id) {
                    if p.pending == true {
                        if !pendingSuite.contains(id) { pendingSuite.append(id) }
                    } else {
                        suite.append(id)
                    }
                }
                suiteLastResults = p.lastResults
            case .suiteReview:
                let v = try r.decode(SuiteReviewRecord.self)
                suiteReviews.append((r.time, v))
                pendingSuite.removeAll { $0 == v.task }
                if v.action == "approve" {
                    if !suite.contains(v.task) { suite.append(v.task) }
                } else {
                    suite.removeAll { $0 == v.task }
                    retiredSuite.insert(v.task)
                }
            case .violation: violations.append((r.time, try r.decode(ViolationRecord.self)))
            // Read by `evidence export` from the ledger itself: nothing of it is state.
            case .note, .gateEvidence: break
            case .failureEvidence:
                failureEvents.append(.evidence(seq: r.seq, time: r.time, try r.decode(FailureEvidenceRecord.self)))
            case .clusterProposal: clusterProposals.append((r.time, try r.decode(ClusterProposalRecord.self)))
            case .candidate: pendingCandidates.append(try r.decode(CandidateRecord.self))
            case .candidatesRanked: rankings.append(try r.decode(CandidatesRankedRecord.self))
            case .triage:
                let t = try r.decode(TriageRecord.self)
                triageRuns.append((r.time, t))
                triageMergesPending = t.mergesPending == true
                for e in t.entries { triage[TriageEntry.key(cluster: e.cluster, task: e.task)] = e }
            case .clusterReview: clusterReviews.append((r.time, try r.decode(ClusterReviewRecord.self)))
            case .needsHuman: needsHuman.append((r.time, try r.decode(NeedsHumanRecord.self)))
            case .batchRevealed: batches.append(Batch(revealed: try r.decode(BatchRevealedRecord.self)))
            case .batchEnded:
                let e = try r.decode(BatchEndedRecord.self)
                if let i = batches.lastIndex(where: { $0.revealed.batch == e.batch }) { batches[i].ended = e }
            case .nodeExcluded: excludedNodes.append(try r.decode(NodeExcludedRecord.self))
            case .runStarted:
                let run = try r.decode(RunStartedRecord.self)
                if openRun?.runID != run.runID {
                    openRunBenchmarkCost = BenchmarkCost()
                    openRunGates = 0
                    openRunAccepted = 0
                    openRunRejectedInARow = 0
                }
                openRun = run
                openRunSince = r.time
            case .agentSession: agentSessions.append(try r.decode(AgentSessionRecord.self))
            case .runEnded:
                lastRunEnd = try r.decode(RunEndedRecord.self)
                openRun = nil
                openRunSince = nil
                openRunBenchmarkCost = BenchmarkCost()
                openRunGates = 0
                openRunAccepted = 0
                openRunRejectedInARow = 0
            default:
                // The ledger is opened with `.experiment` and refuses any other kind: a kind
                // in that set without a case here is a bug, never a row to skip.
                throw LedgerError(.corrupt, "row \(r.seq): no replay for kind '\(r.kind)'")
            }
            head = LedgerHead(seq: r.seq, hash: r.hash)
            try each(self)
        }
    }
}

/// A ledger row by position and hash: which state of the ledger something was derived from.
public struct LedgerHead: Codable, Equatable, Sendable {
    public var seq: Int64
    public var hash: String
    public init(seq: Int64, hash: String) {
        self.seq = seq
        self.hash = hash
    }
}
