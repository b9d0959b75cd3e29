import Benchmark
import Foundation
import Ledger
import SupervisorIO

// Ledger payloads. Each is one record kind; the experiment's state is what replaying them in
// order gives, and the workspace views are rendered from that state alone.

public struct ExperimentCreated: Codable, Sendable {
    public var benchmark: String
    public var dataset: String
}

public struct SplitRecord: Codable, Sendable {
    public var train: [String]
    public var test: [String]
    public var seed: UInt64
}

public struct BaselineRecord: Codable, Sendable {
    public var valScore: Double
    public var testTasks: Int
    public var tasksPassed: Int
    public var tasksTotal: Int
    public var agentSHA256: String
    /// The benchmark tools' model spend over every task (`TaskOutcome.cost`); operator only.
    public var costUSD: Double? = nil
    /// `timeout_policy: infra`, operator only: the mean over the test tasks that finished, and
    /// how many timed out (`HeldOutScore.finished`).
    public var valScoreFinished: Double? = nil
    public var heldOutTimedOut: Int? = nil
}

public struct TrainRunRecord: Codable, Sendable {
    public var timestamp: String
    public var agentSHA256: String
    public var results: [String: Double]
    public var statuses: [String: String]
    /// The benchmark tools' model spend for the run (`TaskOutcome.cost`); operator only.
    public var costUSD: Double? = nil
}

public struct GateStartedRecord: Codable, Sendable {
    public var attempt: Int
    public var agentSHA256: String
}

public struct GateAttemptRecord: Codable, Sendable {
    public var attempt: Int
    public var agentSHA256: String
    public var accepted: Bool
    /// "accepted", "suite below threshold", "val_score did not beat best", "interrupted"
    public var reason: String
    public var suitePassed: Int
    public var suiteTotal: Int
    public var valScore: Double?
    public var bestBefore: Double?
    public var promoted: [String]
    public var commit: String?
    /// The iteration number an accepted attempt was recorded as.
    public var iteration: Int?
    /// How it ended (absent in records written before outcomes were: see `verdict`).
    public var outcome: GateOutcome?
    /// The improvement over the best score step 2 required, when more than a tie.
    public var requiredImprovement: Double?
    /// The rolling batch it ran in (absent: batches off).
    public var batch: Int?
    /// The batch it revealed, when it ended its own (accepted, or the last attempt allowed).
    public var revealedBatch: Int?
    /// How many train tasks that batch revealed (0 once every one is).
    public var revealedTasks: Int?
    /// `timeout_policy: infra`, operator only: the mean over the held-out tasks that finished,
    /// and how many timed out (never disclosed: a count of held-out tasks agent.py chose).
    public var valScoreFinished: Double?
    public var heldOutTimedOut: Int?
    /// The benchmark tools' model spend in its train phases and in its held-out phase, as
    /// totals (never per held-out task); operator only.
    public var trainCostUSD: Double?
    public var heldOutCostUSD: Double?

    /// How the attempt ended, for records of any age.
    public var verdict: GateOutcome { outcome ?? GateOutcome(legacyReason: reason, accepted: accepted) }

    /// An attempt with no decision: cut off by a crash or a failed write.
    static func interrupted(attempt: Int, agentSHA256: String) -> GateAttemptRecord {
        GateAttemptRecord(attempt: attempt, agentSHA256: agentSHA256, accepted: false, reason: "interrupted", suitePassed: 0, suiteTotal: 0,
                          valScore: nil, bestBefore: nil, promoted: [], commit: nil, iteration: nil, outcome: .interrupted)
    }
}

public struct IterationRecord: Codable, Sendable {
    public var iteration: Int
    public var valScore: Double
    public var commit: String
    public var evalsPassed: Int
    public var evalsTotal: Int
    public var timestamp: String
    public var agentSHA256: String
}

public struct SuitePromotionRecord: Codable, Sendable {
    public var added: [String]
    /// Latest suite-step rewards of every suite task (upstream's `last_results`).
    public var lastResults: [String: Double]
}

/// The failing checks of every train task one run observed, from the benchmark's own results
/// (`FailureEvidence`): a train run, or a gate's suite and promotion phases. Supervisor-written,
/// train tasks only: never a held-out task, whatever the adapter returned.
public struct FailureEvidenceRecord: Codable, Sendable {
    /// `train run` or `gate`.
    public var source: String
    /// The gate attempt, for a gate's.
    public var attempt: Int?
    public var agentSHA256: String
    /// The rolling batch revealed when it ran (absent: batches off).
    public var batch: Int?
    /// Task id → its failing checks; empty for a task that passed.
    public var tasks: [String: [FailureEvidence]]

    public init(source: String, attempt: Int? = nil, agentSHA256: String, batch: Int? = nil, tasks: [String: [FailureEvidence]]) {
        self.source = source
        self.attempt = attempt
        self.agentSHA256 = agentSHA256
        self.batch = batch
        self.tasks = tasks
    }
}

/// A rolling batch of train tasks made visible (`loop.batch_size`): from this row on, train
/// runs, records and views cover these tasks too. The tasks are drawn, seeded, from the train
/// tasks not revealed yet (`RollingBatches.draw`); a batch may be empty once all are.
public struct BatchRevealedRecord: Codable, Sendable, Equatable {
    public var batch: Int
    public var tasks: [String]
    /// `loop.batch_iterations` when it was revealed: the gate attempts it may take.
    public var iterations: Int
}

/// How a rolling batch ended: with an accepted gate (whose promotions are this batch's, made
/// at cluster level) or with its gate attempts spent. What the explorer charts per batch.
public struct BatchEndedRecord: Codable, Sendable, Equatable {
    public var batch: Int
    /// `accepted` or `iterations`.
    public var endedBy: String
    public var attempts: [Int]
    /// Train tasks promoted into the suite at this end (those of clusters it resolved).
    public var promoted: [String]
    /// Clusters the accepted gate resolved.
    public var clustersResolved: [String]
    /// Clusters unresolved and resolved after it.
    public var clustersOpen: Int
    public var clustersClosed: Int
    public var suiteSize: Int
    /// Train tasks revealed so far.
    public var revealed: Int
}

/// The coding agent's proposal about a failure cluster: a label, or that it has the same root
/// cause as another. Recorded as the agent's and shown as such; it never changes what a
/// cluster counts or what the gate decides.
public struct ClusterProposalRecord: Codable, Sendable {
    public var actor: String
    public var cluster: String
    public var label: String?
    public var mergeWith: String?
}

/// Something the operator should know that nobody did wrong (e.g. a gate refused because the
/// coding agent could not be frozen).
public struct NoteRecord: Codable, Sendable {
    public var text: String
    public init(text: String) { self.text = text }
}

public struct ViolationRecord: Codable, Sendable {
    /// "coding agent", "agent.py (train run)", "agent.py (gate)", "cli"
    public var actor: String
    public var kind: String
    public var detail: String
    /// From a run over held-out tasks (the baseline or a gate's test phase). Kept in the
    /// ledger for the operator; never shown in the coding agent's view of `status`, since
    /// which calls a test task made (and how often) is a channel out of the test split.
    public var heldOut: Bool?
    /// How many times it happened (absent in older records, whose detail ends `×N`).
    public var count: Int?

    /// How many times it happened, for records of any age.
    public var occurrences: Int {
        if let count { return count }
        // Older records: the `×N` the detail ends with (1 if none). The only place a count
        // is read back out of text.
        guard let r = detail.range(of: " ×", options: .backwards), let n = Int(detail[r.upperBound...]) else { return 1 }
        return n
    }

    /// Details carry what a sandbox chose (task ids, file names, syscall arguments): every
    /// control character is escaped, so a newline cannot forge a line in `status
    /// --operator`, the report or the history, and a row holds at most 4 KiB of it.
    public static let maxDetail = 4096

    public init(actor: String, kind: String, detail: String, heldOut: Bool? = nil, count: Int? = nil) {
        self.actor = actor
        self.kind = kind
        self.detail = printable(detail, limit: Self.maxDetail)
        self.heldOut = heldOut
        self.count = count
    }
}

/// `autoharness run` started, or resumed an unfinished run (same `runID`).
public struct RunStartedRecord: Codable, Sendable {
    public var runID: String
    public var resumed: Bool
    public var command: [String]
    public var maxIterations: Int?
    public var maxHours: Double?
    public var gateBudget: Int
}

/// `autoharness run` stopped, and why.
public struct RunEndedRecord: Codable, Sendable {
    public var runID: String
    public var reason: String
    public var gates: Int
    public var accepted: Int
    public var agentStarts: Int
    /// It stopped because nothing was left to do (a budget spent before it began, or the
    /// coding agent's sessions stopped making progress); absent otherwise.
    public var nothingLeft: Bool?
}

/// One start of the coding agent ended: how long it ran, how, and what its CLI reported using.
/// The fields after `usage` are absent in rows written before they were recorded.
public struct AgentSessionRecord: Codable, Sendable {
    public var runID: String
    public var start: Int
    public var seconds: Double
    public var exit: String
    public var usage: AgentUsage
    /// What the session came to for the run's limits (`SessionOutcome`).
    public var outcome: SessionOutcome?
    /// Requests it made through the broker.
    public var requests: Int?
    /// After this session: sessions in a row without progress (crashes not counted), and
    /// crashes in a row. A resumed run continues from them.
    public var withoutProgress: Int?
    public var crashes: Int?
    /// Seconds the run waited before starting the agent again; absent when it stopped.
    public var restartAfter: Double?
}

/// How a session of the coding agent ended, for the limits on restarting it.
public enum SessionOutcome: String, Codable, Sendable {
    /// A request ran something new: a gate, or a benchmark of an agent.py not benchmarked
    /// before.
    case progress
    /// No accepted change and nothing new run: only refused, repeated (a gate or benchmark
    /// of bytes already judged or run) or status requests, or none. Counts toward
    /// `coding_agent.max_restarts`.
    case noProgress = "no_progress"
    /// An exit within `quick_exit_seconds` that failed or made no request. Counts toward
    /// `coding_agent.max_crashes`.
    case crash
    /// Ended by the supervisor: the run was stopping, or the agent was stopped for a gate.
    case stopped
}

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
    public var suiteLastResults: [String: Double] = [:]
    public var latestTrainRun: TrainRunRecord?
    /// Every train run, oldest first.
    public var trainRuns: [TrainRunRecord] = []
    /// Latest reward of every train task across all runs (the promotion step's "failing").
    public var latestTrainRewards: [String: Double] = [:]
    public var gateAttempts: [GateAttemptRecord] = []
    /// Gates started (each counted before any task of it ran), whatever became of them.
    public var gatesStarted = 0
    /// The highest attempt number any gate row carries.
    public var lastAttempt = 0
    /// Gates started with no outcome recorded (cut off by a crash, or their outcome could not
    /// be written); recovery records each as interrupted.
    public var openGates: [GateStartedRecord] = []
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
    /// Rolling batches in order (empty: batches never began, every train task is visible).
    public var batches: [Batch] = []
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
                benchmarkCost.add(train: run.costUSD, heldOut: nil)
                if openRun != nil { openRunBenchmarkCost.add(train: run.costUSD, heldOut: nil) }
                if let i = batches.indices.last { batches[i].trainRuns += 1 }
            case .gateStarted:
                let g = try r.decode(GateStartedRecord.self)
                openGates.append(g)
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
                for id in p.added where !suite.contains(id) { suite.append(id) }
                suiteLastResults = p.lastResults
            case .violation: violations.append((r.time, try r.decode(ViolationRecord.self)))
            case .note: break
            case .failureEvidence:
                failureEvents.append(.evidence(seq: r.seq, time: r.time, try r.decode(FailureEvidenceRecord.self)))
            case .clusterProposal: clusterProposals.append((r.time, try r.decode(ClusterProposalRecord.self)))
            case .batchRevealed: batches.append(Batch(revealed: try r.decode(BatchRevealedRecord.self)))
            case .batchEnded:
                let e = try r.decode(BatchEndedRecord.self)
                if let i = batches.lastIndex(where: { $0.revealed.batch == e.batch }) { batches[i].ended = e }
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

/// The files the coding agent may read about the experiment, rendered from the ledger: the three
/// of upstream's format and the failure views.
public enum Views {
    /// results.tsv: `iteration val_score commit evals_passed evals_total timestamp`.
    /// val_score as disclosed: `score` %.4f (upstream); `rounded` the 2-decimal value, still
    /// printed with 4 decimals so the column parses the same; `decision` a dash.
    public static func resultsTSV(_ s: ExperimentState, disclosure: ExperimentConfig.Disclosure) -> String {
        var out = "iteration\tval_score\tcommit\tevals_passed\tevals_total\ttimestamp\n"
        for it in s.iterations {
            out += "\(it.iteration)\t\(disclosed(it.valScore, disclosure))\t\(it.commit)\t\(it.evalsPassed)\t\(it.evalsTotal)\t\(it.timestamp)\n"
        }
        return out
    }

    public static func disclosed(_ v: Double, _ d: ExperimentConfig.Disclosure) -> String {
        DisclosedScore(v, d)?.fixed4 ?? "-"
    }

    /// suite.json: `{"tasks":[ids],"threshold":t,"last_results":{id:reward}}`.
    public static func suiteJSON(_ s: ExperimentState, threshold: Double) throws -> Data {
        struct Suite: Encodable {
            var tasks: [String]
            var threshold: Double
            var last_results: [String: Double]
        }
        return try encode(Suite(tasks: s.suite, threshold: threshold, last_results: s.suiteLastResults))
    }

    /// train_results.json: `{"split":"train","timestamp":..,"results":{id:reward|null}}`.
    public static func trainResultsJSON(_ s: ExperimentState) throws -> Data {
        struct TrainResults: Encodable {
            var split = "train"
            var timestamp: String?
            var results: [String: Double?]
        }
        // Every train task the coding agent may see (with rolling batches, those revealed so
        // far) appears; those not in the latest run are null (not run).
        let run = s.latestTrainRun
        var results: [String: Double?] = [:]
        let visible = Set(s.visibleTrain)
        for id in visible { results[id] = .some(nil) }
        for (k, v) in run?.results ?? [:] where visible.contains(k) { results[k] = v }
        return try encode(TrainResults(timestamp: run?.timestamp, results: results))
    }

    static func encode<T: Encodable>(_ v: T) throws -> Data {
        let e = JSONEncoder()
        e.outputFormatting = [.prettyPrinted, .sortedKeys]
        var d = try e.encode(v)
        d.append(0x0A)
        return d
    }

    /// The largest view the supervisor reads back to compare (failures.json grows with records).
    static let maxViewBytes = 256 << 20

    /// The views as the ledger state `s` renders them, in the order they are published.
    static func rendered(_ layout: ExperimentLayout, _ s: ExperimentState, config: ExperimentConfig) throws -> [(path: String, bytes: Data)] {
        // One derivation of the failure records for both of their views (this runs once per
        // ledger head when a view is checked against the heads since its last publish).
        let book = FailureBook(s)
        return [(layout.resultsTSV, Data(resultsTSV(s, disclosure: config.disclosure).utf8)),
         (layout.suiteJSON, try suiteJSON(s, threshold: config.threshold)),
         (layout.trainResultsJSON, try trainResultsJSON(s)),
         (layout.failuresJSON, try failuresJSON(s, book)),
         (layout.failuresMarkdown, Data(failuresMarkdown(s, book).utf8))]
    }

    /// Rewrites the three views atomically (write, fsync, rename), then records the ledger
    /// head they were rendered from (`layout.viewsHead`). That record is written last, so it
    /// never names a head newer than a view on disk: a supervisor stopped anywhere in here
    /// leaves each view at the recorded head or at a later one, never an earlier one.
    /// `beforeEach` is called with each path just before it is written (tests stop there).
    public static func regenerate(_ layout: ExperimentLayout, _ s: ExperimentState, config: ExperimentConfig,
                                  beforeEach: (String) -> Void = { _ in }) throws {
        for (path, bytes) in try rendered(layout, s, config: config) {
            beforeEach(path)
            try AtomicFile.write([UInt8](bytes), to: path)
        }
        try recordHead(layout, s.head, beforeEach: beforeEach)
    }

    private static func recordHead(_ layout: ExperimentLayout, _ head: LedgerHead, beforeEach: (String) -> Void) throws {
        beforeEach(layout.viewsHead)
        try AtomicFile.write([UInt8](try encode(head)), to: layout.viewsHead, mode: 0o600)
    }

    /// The head the views were last completely published from; nil if they never were (or
    /// the record is unreadable, which only narrows what counts as behind).
    static func publishedHead(_ layout: ExperimentLayout) -> LedgerHead? {
        (try? InputFile.read(layout.viewsHead, cap: 4096).get()).flatMap { try? JSONDecoder().decode(LedgerHead.self, from: Data($0)) }
    }

    /// How the views on disk stand against the ledger.
    public struct Check: Sendable {
        /// Views that are exactly what the ledger rendered at a head between their last
        /// complete publish and now: a supervisor stopped between appending and publishing.
        /// Derived data, regenerated by the next command that takes the experiment lock.
        public var behind: [String] = []
        /// Views that are nothing the ledger rendered since their last complete publish:
        /// edited, deleted, replaced by an older copy, or rendered under another config.
        public var tampered: [String] = []
    }

    /// Compares each view with what the ledger renders now; one that differs is behind only
    /// if it equals the rendering at some head from the last recorded publish on, and
    /// tampered otherwise. The view's own content is never taken as a claim of where it
    /// stands: an older copy put back by hand is tampered unless no complete publish has
    /// happened since it was current, which only a crash leaves.
    public static func check(_ layout: ExperimentLayout, records: [LedgerRecord], config: ExperimentConfig) throws -> Check {
        try classify(layout, records: records, config: config).check
    }

    private static func classify(_ layout: ExperimentLayout, records: [LedgerRecord], config: ExperimentConfig)
        throws -> (check: Check, current: ExperimentState, rendered: [(path: String, bytes: Data)]) {
        let current = try ExperimentState(records: records)
        let expected = try rendered(layout, current, config: config)
        var differing: [(path: String, onDisk: Data?)] = []
        for (path, bytes) in expected {
            // A view is in the coding agent's workspace: read as a file a sandbox could have
            // touched (no link followed, no FIFO, capped); one that cannot be read differs.
            let onDisk = (try? InputFile.read(at: AT_FDCWD, path, cap: Self.maxViewBytes).get()).map { Data($0) }
            if onDisk != bytes { differing.append((path, onDisk)) }
        }
        var behind: Set<String> = []
        if !differing.isEmpty {
            if let published = publishedHead(layout) {
                // A head the ledger does not hold (rows cut or rewritten) vouches for nothing.
                if records.contains(where: { $0.seq == published.seq && $0.hash == published.hash }) {
                    _ = try ExperimentState(records: records) { s in
                        guard s.head.seq >= published.seq else { return }
                        for (path, bytes) in try rendered(layout, s, config: config)
                        where differing.contains(where: { $0.path == path && $0.onDisk == bytes }) {
                            behind.insert(path)
                        }
                    }
                }
            } else {
                // Never published: a view not written yet is behind (prepare stopped after
                // recording iteration 0); one that exists is not the ledger's.
                for d in differing where d.onDisk == nil { behind.insert(d.path) }
            }
        }
        let paths = differing.map(\.path)
        return (Check(behind: paths.filter { behind.contains($0) }, tampered: paths.filter { !behind.contains($0) }), current, expected)
    }

    /// Regenerates the views that are behind the ledger and records the head, for a command
    /// that holds the experiment lock. Tampered views are left as they are, for `status
    /// --verify` to show, until the next recorded change rewrites every view.
    public static func repair(_ layout: ExperimentLayout, records: [LedgerRecord], config: ExperimentConfig,
                              beforeEach: (String) -> Void = { _ in }) throws -> Check {
        let (check, current, expected) = try classify(layout, records: records, config: config)
        for (path, bytes) in expected where check.behind.contains(path) {
            beforeEach(path)
            try AtomicFile.write([UInt8](bytes), to: path)
        }
        // Every view not tampered is now current: the recorded head may move up to now, which
        // narrows what a later check accepts as behind.
        if publishedHead(layout) != current.head { try recordHead(layout, current.head, beforeEach: beforeEach) }
        return check
    }
}

/// Text a sandbox chose, as it may appear in a one-line record: control characters escaped,
/// length capped (in characters).
func printable(_ s: String, limit: Int = 200) -> String {
    var out = ""
    for u in s.unicodeScalars {
        if u.value < 0x20 || u.value == 0x7F { out += String(format: "\\x%02x", u.value) } else { out.unicodeScalars.append(u) }
        if out.count >= limit { return out + "…" }
    }
    return out
}

