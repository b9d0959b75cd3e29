import Benchmark
import Foundation
import Ledger
import SupervisorIO

// Ledger payloads. Each is one record kind; the experiment's state is what replaying them in
// order gives, and the workspace views are rendered from that state alone.

public struct ExperimentCreated: Codable, Sendable {
    public var benchmark: String
    public var dataset: String

    package init(benchmark: String, dataset: String) {
        self.benchmark = benchmark
        self.dataset = dataset
    }
}

public struct SplitRecord: Codable, Sendable {
    public var train: [String]
    public var test: [String]
    public var seed: UInt64
    /// The split's commitment (`SplitCommitment`), made at `prepare` and signed into every
    /// evidence bundle, and its salt (hex), revealed only by `evidence export --reveal-split`.
    /// Absent in experiments prepared before evidence bundles.
    public var commitment: String? = nil
    public var commitmentSalt: String? = nil

    package init(train: [String], test: [String], seed: UInt64, commitment: String? = nil, commitmentSalt: String? = nil) {
        self.train = train
        self.test = test
        self.seed = seed
        self.commitment = commitment
        self.commitmentSalt = commitmentSalt
    }
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
    /// Tasks whose verifier ran agent code (`TaskOutcome.agentCode`); operator only.
    public var agentCode: [String: [String]]? = nil
    /// `gate.disclosure: ladder` at prepare: the step the baseline's score was offered at.
    public var ladderStep: Double? = nil
    /// What the vendor failed in the baseline's runs and what was run again for it
    /// (`gate.infra_retries`); operator only, nil when the vendor failed nothing.
    public var infraRetries: InfraRetries? = nil
    /// Each test task's rewards over its `gate.trials` trials (the first the baseline's run of
    /// every task); operator only, the best's side of a paired decision while the baseline is
    /// the best.
    public var heldOutTrials: HeldOutTrials? = nil

    package init(valScore: Double, testTasks: Int, tasksPassed: Int, tasksTotal: Int, agentSHA256: String, costUSD: Double? = nil, valScoreFinished: Double? = nil, heldOutTimedOut: Int? = nil, agentCode: [String: [String]]? = nil, ladderStep: Double? = nil, infraRetries: InfraRetries? = nil, heldOutTrials: HeldOutTrials? = nil) {
        self.valScore = valScore
        self.testTasks = testTasks
        self.tasksPassed = tasksPassed
        self.tasksTotal = tasksTotal
        self.agentSHA256 = agentSHA256
        self.costUSD = costUSD
        self.valScoreFinished = valScoreFinished
        self.heldOutTimedOut = heldOutTimedOut
        self.agentCode = agentCode
        self.ladderStep = ladderStep
        self.infraRetries = infraRetries
        self.heldOutTrials = heldOutTrials
    }
}

public struct TrainRunRecord: Codable, Sendable {
    public var timestamp: String
    public var agentSHA256: String
    public var results: [String: Double]
    public var statuses: [String: String]
    /// The benchmark tools' model spend for the run (`TaskOutcome.cost`); operator only.
    public var costUSD: Double? = nil
    /// Tasks whose verifier ran agent code (`TaskOutcome.agentCode`).
    public var agentCode: [String: [String]]? = nil

    package init(timestamp: String, agentSHA256: String, results: [String: Double], statuses: [String: String], costUSD: Double? = nil, agentCode: [String: [String]]? = nil) {
        self.timestamp = timestamp
        self.agentSHA256 = agentSHA256
        self.results = results
        self.statuses = statuses
        self.costUSD = costUSD
        self.agentCode = agentCode
    }
}

public struct SuitePromotionRecord: Codable, Sendable {
    public var added: [String]
    /// Latest suite-step rewards of every suite task (upstream's `last_results`).
    public var lastResults: [String: Double]
    /// `loop.review: operator`: the tasks wait for the operator's approval instead of joining.
    public var pending: Bool?

    package init(added: [String], lastResults: [String: Double], pending: Bool? = nil) {
        self.added = added
        self.lastResults = lastResults
        self.pending = pending
    }
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

/// The operator's decision about one task of the suite (`autoharness suite approve|retire`):
/// a pending promotion approved, or a task retired from the suite (or its promotion refused),
/// never to be promoted again.
public struct SuiteReviewRecord: Codable, Sendable {
    public var actor: String
    /// `approve` or `retire`.
    public var action: String
    public var task: String
    public var reason: String

    package init(actor: String, action: String, task: String, reason: String) {
        self.actor = actor
        self.action = action
        self.task = task
        self.reason = reason
    }
}

/// An agent.py submitted for the next gate to rank (`autoharness candidate`, `loop.candidates`).
public struct CandidateRecord: Codable, Sendable, Equatable {
    public var actor: String
    public var agentSHA256: String
    /// What it is and why (`candidate -m`, kept as `noteLine` keeps it).
    public var message: String?
    /// Its number among the candidates waiting for the next gate (from 1).
    public var number: Int

    package init(actor: String, agentSHA256: String, message: String? = nil, number: Int) {
        self.actor = actor
        self.agentSHA256 = agentSHA256
        self.message = message
        self.number = number
    }
}

/// One candidate as a gate's ranking saw it: train-split numbers only.
public struct RankedCandidate: Codable, Sendable, Equatable {
    public var number: Int
    public var agentSHA256: String
    public var message: String?
    /// Over every train task the coding agent can see (the revealed batches').
    public var trainPassed: Int
    public var trainTotal: Int
    /// The mean reward over those tasks (partial rewards count).
    public var trainScore: Double
    public var suitePassed: Int
    public var suiteTotal: Int
    /// The suite's pass rate reaches `threshold`: the gate's first step would pass.
    public var meetsThreshold: Bool
    /// `gate.trials` when more than 1: each task ran that many times, and the numbers above
    /// are over each task's mean (a task passes when its mean reaches the pass threshold).
    public var trials: Int? = nil
}

/// A gate's ranking of the waiting candidates, recorded before the gate starts: every
/// candidate ran on the train split, and only the first of `ranked` (`chosen`) is judged by
/// gate attempt `attempt`; the others are recorded as explored.
public struct CandidatesRankedRecord: Codable, Sendable {
    public var attempt: Int
    public var chosen: String
    /// Best first (`CandidateRanking.rank`).
    public var ranked: [RankedCandidate]
    public var explored: [RankedCandidate] { ranked.filter { $0.agentSHA256 != chosen } }

    package init(attempt: Int, chosen: String, ranked: [RankedCandidate]) {
        self.attempt = attempt
        self.chosen = chosen
        self.ranked = ranked
    }
}

/// Something the coding agent needs from a human (`autoharness needs-human TEXT`): shown to the
/// operator (`status --operator`, the report), never acted on by the supervisor.
public struct NeedsHumanRecord: Codable, Sendable {
    public var actor: String
    public var text: String

    package init(actor: String, text: String) {
        self.actor = actor
        self.text = text
    }
}

/// The coding agent's proposal about a failure cluster: a label, or that it has the same root
/// cause as another. Recorded as the agent's and shown as such; it never changes what a
/// cluster counts or what the gate decides.
public struct ClusterProposalRecord: Codable, Sendable {
    public var actor: String
    public var cluster: String
    public var label: String?
    public var mergeWith: String?

    package init(actor: String, cluster: String, label: String? = nil, mergeWith: String? = nil) {
        self.actor = actor
        self.cluster = cluster
        self.label = label
        self.mergeWith = mergeWith
    }
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

/// A worker node (`executor: ray`) that answered a request badly (an answer that does not
/// decode, is oversized, or is not an answer to what was asked): it gets no request of this
/// experiment again, under any node id, while it has this address.
public struct NodeExcludedRecord: Codable, Sendable {
    /// The node's address as Ray reports it (NodeManagerAddress), and its Ray node id then.
    public var address: String
    public var node: String
    public var reason: String
    /// The request was held-out (the reason then names no task).
    public var heldOut: Bool

    package init(address: String, node: String, reason: String, heldOut: Bool) {
        self.address = address
        self.node = node
        self.reason = reason
        self.heldOut = heldOut
    }
}
