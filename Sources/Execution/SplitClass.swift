/// What a run's tasks are to the experiment. Only a train run has a trace function: a
/// held-out run that keeps traces cannot be written down.
package enum SplitClass {
    /// Train tasks: failures recorded, each task's trace where `traces` says (nil: none).
    case train(traces: (String) -> String?)
    /// Prepare's baseline: every task, before the split exists; nothing but rewards is kept.
    case baseline
    /// A gate's held-out phase: nothing but rewards, status classes and violation counts.
    case heldOut

    /// Train tasks whose traces are not kept (the suite, promotion, candidate ranking).
    package static var trainUntraced: SplitClass { .train(traces: { _ in nil }) }

    /// Nothing of the run persists but its rewards.
    var keepsNothing: Bool {
        if case .train = self { return false }
        return true
    }

    /// A gate's held-out phase, what `gate.held_out_runtime` applies to (prepare's baseline
    /// runs where train runs do).
    var isGateHeldOut: Bool {
        if case .heldOut = self { return true }
        return false
    }

    /// Where a task's trace goes: only a train run's can go anywhere.
    var traces: (String) -> String? {
        if case .train(let t) = self { return t }
        return { _ in nil }
    }
}
