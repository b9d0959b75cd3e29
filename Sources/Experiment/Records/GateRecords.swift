// What the ledger keeps of a gate's held-out phase beyond its score (operator only).

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
