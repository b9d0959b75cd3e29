/// How a gate attempt ended: a closed set, decided by the gate.
public enum GateOutcome: String, Codable, CaseIterable, Sendable {
    case accepted
    /// Step 1: the regression suite's pass rate was below `gate.threshold`.
    case suiteBelowThreshold = "suite_below_threshold"
    /// Step 2: val_score did not beat the best accepted score (by more than the required
    /// improvement, when there is one).
    case scoreNotImproved = "score_not_improved"
    /// Step 2 under `gate.accept: at_least_best`: val_score was below the best accepted score.
    case scoreBelowBest = "score_below_best"
    /// Step 2 under `gate.accept: paired`: the paired test did not find the candidate better
    /// than the best at `gate.alpha` (its val_score may still be higher).
    case notShownBetter = "not_shown_better"
    /// Cut off (a crash, a failed write): no decision.
    case interrupted

    /// The outcome of a record written before outcomes were recorded, from its reason text
    /// (the only place that text is read).
    init(legacyReason reason: String, accepted: Bool) {
        switch (accepted, reason) {
        case (true, _): self = .accepted
        case (false, "interrupted"): self = .interrupted
        case (false, let r) where r.hasPrefix("suite pass rate"): self = .suiteBelowThreshold
        default: self = .scoreNotImproved
        }
    }
}
