// Ledger payloads of a gate: its start, the attempt's outcome, the iteration an accepted one
// became, and what the ledger keeps of its held-out phase beyond its score (operator only).

/// The result of the paired test: what `status --operator`, the ledger and the evidence show.
public struct PairedDecision: Codable, Equatable, Sendable {
    /// Mean over tasks of candidate minus best (val_score's difference).
    public var meanDifference: Double
    /// Its standard error, sd(d) / √N.
    public var standardError: Double
    /// The t statistic; nil when the differences do not vary (every task moved by the same
    /// amount, or there is one task), where it is not defined.
    public var t: Double?
    public var tasks: Int
    /// One-sided p-value, P(T_{N-1} ≥ t).
    public var pValue: Double
    public var alpha: Double
    /// The candidate's trials per task, and the best's.
    public var trials: Int
    public var bestTrials: Int
    /// p ≤ alpha with a positive mean difference: the candidate is better.
    public var accepted: Bool { pValue <= alpha && meanDifference > 0 }
}

/// A held-out run's rewards per task and trial, kept in the ledger for the paired decision
/// (the best's side), never disclosed to the coding agent. By position in the split's test
/// list, not by id: no attempt row names a held-out task.
public struct HeldOutTrials: Codable, Sendable, Equatable {
    /// `rewards[i]`: the split's i-th test task's rewards, one per trial.
    public var rewards: [[Double]]
    public var trials: Int
    public init(rewards: [[Double]], trials: Int) {
        self.rewards = rewards
        self.trials = trials
    }

    /// Each task's mean over its trials (val_score is their mean).
    public var means: [Double] { rewards.map { $0.isEmpty ? 0 : $0.reduce(0, +) / Double($0.count) } }
}

public struct GateStartedRecord: Codable, Sendable {
    public var attempt: Int
    public var agentSHA256: String
    /// The criteria the gate is judged by, recorded before any of its tasks runs (absent in
    /// rows written before evidence bundles).
    public var criteria: GateCriteria? = nil

    package init(attempt: Int, agentSHA256: String, criteria: GateCriteria? = nil) {
        self.attempt = attempt
        self.agentSHA256 = agentSHA256
        self.criteria = criteria
    }
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
    /// Tasks of any of its phases (held-out ones included) whose verifier ran agent code
    /// (`TaskOutcome.agentCode`); operator only, never in the gate's answer.
    public var agentCode: [String: [String]]?
    /// What the gate's requester said the change is and why (`gate -m`), one printable line.
    public var message: String?
    /// Each held-out task's rewards over its `gate.trials` trials; operator only, never
    /// disclosed: the best's side of later paired decisions once this attempt is accepted.
    public var heldOutTrials: HeldOutTrials?
    /// What the vendor failed in its held-out phase and what was run again for it
    /// (`gate.infra_retries`); operator only, never disclosed.
    public var infraRetries: InfraRetries?
    /// Under `gate.accept: paired`: the test against the best (mean difference, standard
    /// error, t, p, alpha, trials); operator only.
    public var pairedTest: PairedDecision?

    /// How the attempt ended, for records of any age.
    public var verdict: GateOutcome { outcome ?? GateOutcome(legacyReason: reason, accepted: accepted) }

    /// An attempt with no decision: cut off by a crash or a failed write.
    package static func interrupted(attempt: Int, agentSHA256: String) -> GateAttemptRecord {
        GateAttemptRecord(attempt: attempt, agentSHA256: agentSHA256, accepted: false, reason: "interrupted", suitePassed: 0, suiteTotal: 0,
                          valScore: nil, bestBefore: nil, promoted: [], commit: nil, iteration: nil, outcome: .interrupted)
    }

    package init(attempt: Int, agentSHA256: String, accepted: Bool, reason: String, suitePassed: Int, suiteTotal: Int, valScore: Double? = nil, bestBefore: Double? = nil, promoted: [String], commit: String? = nil, iteration: Int? = nil, outcome: GateOutcome? = nil, requiredImprovement: Double? = nil, batch: Int? = nil, revealedBatch: Int? = nil, revealedTasks: Int? = nil, valScoreFinished: Double? = nil, heldOutTimedOut: Int? = nil, trainCostUSD: Double? = nil, heldOutCostUSD: Double? = nil, agentCode: [String: [String]]? = nil, message: String? = nil, heldOutTrials: HeldOutTrials? = nil, infraRetries: InfraRetries? = nil, pairedTest: PairedDecision? = nil) {
        self.attempt = attempt
        self.agentSHA256 = agentSHA256
        self.accepted = accepted
        self.reason = reason
        self.suitePassed = suitePassed
        self.suiteTotal = suiteTotal
        self.valScore = valScore
        self.bestBefore = bestBefore
        self.promoted = promoted
        self.commit = commit
        self.iteration = iteration
        self.outcome = outcome
        self.requiredImprovement = requiredImprovement
        self.batch = batch
        self.revealedBatch = revealedBatch
        self.revealedTasks = revealedTasks
        self.valScoreFinished = valScoreFinished
        self.heldOutTimedOut = heldOutTimedOut
        self.trainCostUSD = trainCostUSD
        self.heldOutCostUSD = heldOutCostUSD
        self.agentCode = agentCode
        self.message = message
        self.heldOutTrials = heldOutTrials
        self.infraRetries = infraRetries
        self.pairedTest = pairedTest
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
    /// The accepted gate's `-m` message (results.tsv's description).
    public var description: String?

    package init(iteration: Int, valScore: Double, commit: String, evalsPassed: Int, evalsTotal: Int, timestamp: String, agentSHA256: String, description: String? = nil) {
        self.iteration = iteration
        self.valScore = valScore
        self.commit = commit
        self.evalsPassed = evalsPassed
        self.evalsTotal = evalsTotal
        self.timestamp = timestamp
        self.agentSHA256 = agentSHA256
        self.description = description
    }
}
