import ExperimentModel
import Foundation

// What the coding agent may learn, decided in one place.
//
// The gate and `status` produce values of the types below; renderers (`AgentText`) only
// format them. The coding agent's channel — the broker's replies, and the CLI's `gate` and
// `status` without `--operator` — takes `GateDisclosure` and `AgentStatus` only, which no
// code path can build with more than `gate.disclosure` allows: a held-out score beyond its
// rounding, a held-out task's violations, the cost account. The operator's view is a
// different type (`OperatorStatus`).

/// A held-out score as `gate.disclosure` lets it out: rounded to 2 decimals (`rounded`) or
/// to the 4 that upstream prints (`score`); the operator's is exact.
public struct DisclosedScore: Equatable, Sendable {
    public let value: Double
    /// Four decimals or more (`score`, the operator), rather than two.
    public let exact: Bool

    /// The score as disclosed under `d` (nil for `decision`: no number at all; nil for
    /// `ladder` too, whose values come from the ledger's history, `init(ladder:)`: a caller
    /// that forgot the history discloses nothing rather than the score).
    public init?(_ v: Double?, _ d: ExperimentConfig.DisclosureLevel) {
        guard let v else { return nil }
        switch d {
        case .decision, .ladder: return nil
        case .rounded: (value, exact) = ((v * 100).rounded() / 100, false)
        case .score: (value, exact) = ((v * 10000).rounded() / 10000, true)
        }
    }

    /// A value of the ladder (`ScoreLadder`): a multiple of its step, shown to 4 decimals.
    init?(ladder v: Double?) { self.init(v, .score) }

    /// The operator's: the value as recorded.
    init?(operator v: Double?) {
        guard let v else { return nil }
        (value, exact) = (v, true)
    }

    /// Always four decimals, so a column of them parses the same (results.tsv, status).
    public var fixed4: String { String(format: "%.4f", value) }
    /// As many decimals as were disclosed (the gate's answer).
    public var text: String { String(format: exact ? "%.4f" : "%.2f", value) }
}

/// Everything the coding agent learns from one gate attempt.
public struct GateDisclosure: Equatable, Sendable {
    public let attempt: Int
    public let outcome: GateOutcome
    public let suitePassed: Int
    public let suiteTotal: Int
    public let threshold: Double
    public let score: DisclosedScore?
    /// Only for `scoreNotImproved`, when the gate required more than a tie.
    public let requiredImprovement: Double?
    public let iteration: Int?
    public let commit: String?
    public let promoted: Int
    /// `decision`: even the wording says nothing of a score.
    public let decisionOnly: Bool
    /// The rolling batch it ran in, and the one it revealed by ending it (train-side facts).
    public var batch: Int? = nil
    public var revealedBatch: Int? = nil
    public var revealedTasks: Int? = nil
    /// Why the rewards behind this answer are not independent of agent.py's process
    /// (`BenchmarkKind.unverified`), or nil.
    public var unverified: String? = nil

    public var accepted: Bool { outcome == .accepted }

    /// The reason line: a fixed wording per outcome, with train-side numbers only.
    public var reason: String {
        switch outcome {
        case .accepted: return "accepted"
        case .interrupted: return "interrupted"
        case .suiteBelowThreshold: return "suite pass rate \(suitePassed)/\(suiteTotal) below threshold \(threshold)"
        case .scoreNotImproved:
            if decisionOnly { return "held-out score did not improve" }
            if let r = requiredImprovement { return "val_score did not beat the best accepted score by more than min_improvement \(String(format: "%.4f", r))" }
            return "val_score did not beat the best accepted score"
        case .scoreBelowBest:
            return decisionOnly ? "held-out score did not improve" : "val_score is below the best accepted score"
        case .notShownBetter:
            return decisionOnly ? "held-out score did not improve" : "val_score was not shown better than the best accepted score at gate.alpha"
        }
    }
}

/// One violation row as a status shows it.
public struct ViolationLine: Equatable, Sendable {
    public let time: String
    public let actor: String
    public let kind: String
    public let detail: String
    public let count: Int
}

/// What every status shows, at one level of disclosure.
public struct StatusFacts: Sendable {
    public struct Iteration: Sendable {
        public let iteration: Int
        public let score: DisclosedScore?
        public let commit: String
        public let evalsPassed: Int
        public let evalsTotal: Int
        public let timestamp: String
    }
    public let prepared: Bool
    /// `decision`, `rounded`, `score`, or `operator`.
    public let label: String
    public let iterations: [Iteration]
    public let best: DisclosedScore?
    public let suite: [String]
    /// The last ten gate attempts, oldest first.
    public let gates: [GateDisclosure]
    public let violations: [ViolationLine]
    public let budgets: [RunBudget]
    public let openRunID: String?
    /// Rolling batches, when on: the current one, train tasks revealed, its gate attempts.
    public var batch: BatchLine? = nil
    /// Why this experiment's rewards are unverified (`BenchmarkKind.unverified`), or nil.
    public var unverified: String? = nil
    /// What the operator accepted with `gate.shared_vendor_account: true`, or nil.
    public var sharedVendorAccount: String? = nil
    /// The gate's acceptance rule in force, with its numbers (`GateRules.ruleText`).
    public var gateRule: String? = nil
    /// `loop.candidates`: the candidates waiting for the next gate, and the last five gates'
    /// rankings (train numbers only: the coding agent may see them all).
    public var candidatesWaiting: [CandidateRecord] = []
    public var candidateLimit = 1
    public var rankings: [CandidatesRankedRecord] = []

    public struct BatchLine: Sendable {
        public let number: Int
        public let revealed: Int
        public let attemptsUsed: Int
        public let attemptsAllowed: Int
    }
}

/// `status` as the coding agent may see it: made only by `Disclosure.agentStatus`.
public struct AgentStatus: Sendable {
    public let facts: StatusFacts
    fileprivate init(_ facts: StatusFacts) { self.facts = facts }
}

/// `status --operator`: exact scores, held-out runs' violations, the cost account.
public struct OperatorStatus: Sendable {
    public let facts: StatusFacts
    public let lastRunEnd: RunEndedRecord?
    public let sessions: Int
    public let usage: AgentUsage
    /// The benchmark tools' model spend: train and held-out totals, never per held-out task.
    public let benchmarkCost: ExperimentState.BenchmarkCost
    /// `timeout_policy: infra`: the latest held-out run's mean over the tasks that finished and
    /// its timeouts (the baseline's or the last scored gate's).
    public var finished: (attempt: Int?, val: Double?, timedOut: Int)? = nil
    /// `gate.accept: paired`: the latest gate's test against the best (never disclosed: its
    /// numbers describe the per-task held-out differences).
    public var paired: (attempt: Int, test: PairedDecision)? = nil
    /// `gate.infra_retries`: the latest held-out run the model vendor failed (the baseline's or
    /// a gate's), and the task runs repeated over every gate.
    public var infraRetries: (attempt: Int?, retries: InfraRetries, allRetried: Int)? = nil
    /// What the coding agent said it needs from a human (`needs-human`), newest last.
    public var needsHuman: [(time: String, text: String)] = []
    /// `loop.review: operator`: promotions waiting for `suite approve`.
    public var pendingSuite: [String] = []
    /// `loop.review: operator`: clusters the latest triage would merge, waiting for
    /// `failures --accept-triage` or a decision per cluster.
    public var pendingMerges: [[String]] = []
    fileprivate init(facts: StatusFacts, lastRunEnd: RunEndedRecord?, sessions: Int, usage: AgentUsage, benchmarkCost: ExperimentState.BenchmarkCost) {
        self.facts = facts
        self.lastRunEnd = lastRunEnd
        self.sessions = sessions
        self.usage = usage
        self.benchmarkCost = benchmarkCost
    }
}

/// The one place that decides what a gate attempt and a status disclose.
public enum Disclosure {
    /// What the coding agent learns of `record` under the configured disclosure; `state` is the
    /// ledger's (holding the record), for `ladder`'s history.
    public static func gate(_ record: GateAttemptRecord, state: ExperimentState, config: ExperimentConfig) -> GateDisclosure {
        gate(record, config: config, level: config.gate.disclosure,
             ladder: config.gate.disclosure == .ladder ? ScoreLadder.replay(state, config: config) : nil)
    }

    /// `level` nil: the operator's (exact).
    static func score(_ v: Double?, _ level: ExperimentConfig.DisclosureLevel?) -> DisclosedScore? {
        level.map { DisclosedScore(v, $0) } ?? DisclosedScore(operator: v)
    }

    static func gate(_ r: GateAttemptRecord, config: ExperimentConfig, level: ExperimentConfig.DisclosureLevel?, ladder: ScoreLadder.Replay?) -> GateDisclosure {
        let outcome = r.verdict
        let shown = level == .ladder ? DisclosedScore(ladder: r.valScore == nil ? nil : ladder?.attempts[r.attempt]) : score(r.valScore, level)
        return GateDisclosure(attempt: r.attempt, outcome: outcome, suitePassed: r.suitePassed, suiteTotal: r.suiteTotal,
                              threshold: config.threshold, score: shown,
                              requiredImprovement: outcome == .scoreNotImproved ? r.requiredImprovement.flatMap { $0 > 0 ? $0 : nil } : nil,
                              iteration: r.iteration, commit: r.commit.map { String($0.prefix(7)) }, promoted: r.promoted.count,
                              decisionOnly: level == .decision, batch: r.batch, revealedBatch: r.revealedBatch,
                              revealedTasks: r.revealedTasks, unverified: config.unverifiedRewards)
    }

    /// `status` for the coding agent: scores as disclosed, no held-out run's violations, no
    /// cost account.
    public static func agentStatus(_ s: ExperimentState, config: ExperimentConfig) -> AgentStatus {
        AgentStatus(facts(s, config: config, level: config.gate.disclosure, label: config.gate.disclosure.rawValue, heldOut: false, cost: false))
    }

    /// `status --operator`: everything the ledger holds.
    public static func operatorStatus(_ s: ExperimentState, config: ExperimentConfig) -> OperatorStatus {
        var o = OperatorStatus(facts: facts(s, config: config, level: nil, label: "operator", heldOut: true, cost: true),
                               lastRunEnd: s.lastRunEnd, sessions: s.agentSessions.count, usage: s.agentUsage, benchmarkCost: s.benchmarkCost)
        if let g = s.gateAttempts.last(where: { $0.heldOutTimedOut != nil }), let n = g.heldOutTimedOut {
            o.finished = (g.attempt, g.valScoreFinished, n)
        } else if let b = s.baseline, let n = b.heldOutTimedOut {
            o.finished = (nil, b.valScoreFinished, n)
        }
        if let g = s.gateAttempts.last(where: { $0.pairedTest != nil }), let t = g.pairedTest { o.paired = (g.attempt, t) }
        let retried = s.gateAttempts.reduce(s.baseline?.infraRetries?.retried ?? 0) { $0 + ($1.infraRetries?.retried ?? 0) }
        if let g = s.gateAttempts.last(where: { $0.infraRetries != nil }), let r = g.infraRetries {
            o.infraRetries = (g.attempt, r, retried)
        } else if let r = s.baseline?.infraRetries {
            o.infraRetries = (nil, r, retried)
        }
        o.needsHuman = s.needsHuman.map { ($0.time, $0.record.text) }
        o.pendingSuite = s.pendingSuite
        o.pendingMerges = FailureBook(s).pendingMerges
        return o
    }

    private static func facts(_ s: ExperimentState, config: ExperimentConfig, level: ExperimentConfig.DisclosureLevel?, label: String,
                              heldOut: Bool, cost: Bool) -> StatusFacts {
        let budgets = RunBudget.all(config: config, maxIterations: s.openRun?.maxIterations, maxHours: s.openRun?.maxHours, used: s.openRunCounters())
        let ladder = level == .ladder ? ScoreLadder.replay(s, config: config) : nil
        return StatusFacts(
            prepared: s.prepared, label: label,
            iterations: s.iterations.map { it in
                .init(iteration: it.iteration, score: ladder.map { DisclosedScore(ladder: $0.iterations[it.iteration]) } ?? score(it.valScore, level),
                      commit: it.commit, evalsPassed: it.evalsPassed, evalsTotal: it.evalsTotal, timestamp: it.timestamp)
            },
            best: ladder.map { DisclosedScore(ladder: $0.current) } ?? score(s.best, level), suite: s.suite,
            gates: s.gateAttempts.suffix(10).map { gate($0, config: config, level: level, ladder: ladder) },
            violations: s.violations.filter { heldOut || $0.record.heldOut != true }.map {
                ViolationLine(time: $0.time, actor: $0.record.actor, kind: $0.record.kind, detail: $0.record.detail, count: $0.record.occurrences)
            },
            budgets: budgets.filter { cost || $0.agentMaySee }, openRunID: s.openRun?.runID,
            batch: s.batches.last.map { .init(number: $0.revealed.batch, revealed: s.visibleTrain.count, attemptsUsed: $0.attempts.count,
                                              attemptsAllowed: $0.revealed.iterations) },
            unverified: config.unverifiedRewards, sharedVendorAccount: config.vendorAccounts.sharedNote,
            gateRule: s.split.map { GateRules.ruleText(testTasks: $0.test.count, config: config) },
            candidatesWaiting: s.pendingCandidates, candidateLimit: config.loop.candidates, rankings: Array(s.rankings.suffix(5)))
    }
}
