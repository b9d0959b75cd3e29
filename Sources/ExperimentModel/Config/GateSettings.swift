import Foundation

/// `gate:` in the experiment config: the held-out judgement (its rule, trials, retries,
/// runtime and reply time) and what it discloses.
public struct GateSettings: Sendable, Equatable {
    /// `gate.ladder_step` under `disclosure: ladder`; nil: one held-out task's worth (1/N).
    public var ladderStep: Double?
    /// `gate.disclosure`: what a gate's reply tells of the held-out score.
    public var disclosure: ExperimentConfig.DisclosureLevel = .rounded
    /// Gate calls allowed per `autoharness run` (0: unlimited).
    public var budget = 0
    /// `gate.accept`: what a held-out score must do against the best accepted one.
    public var accept: ExperimentConfig.AcceptRule = .margin
    /// `gate.trials`: how many times each held-out task runs in one gate's held-out phase (and
    /// in prepare's baseline), all inside the one frozen phase; val_score is the mean over
    /// tasks of each task's mean reward.
    public var trials = 1
    /// `gate.infra_retries`: how many more times a held-out task runs, inside the same frozen
    /// phase, when the inference gate saw the model vendor fail its requests
    /// (`TaskOutcome.vendorFailures`); the run it replaces counts for nothing, whatever it scored.
    /// Off by default: the count is partly in agent.py's hands (docs/loop.md).
    public var infraRetries = 0
    /// `gate.alpha`: with `accept` paired, the test's one-sided error rate.
    public var alpha = 0.05
    /// With `accept` margin: a new val_score must exceed the best by more than this; nil
    /// means one task's worth (1 / number of test tasks). Either way a tie never passes.
    public var minImprovement: Double?
    /// `gate.on_reject`: a rejected agent.py is reverted to the last accepted one, or kept.
    public var onReject: ExperimentConfig.OnReject = .revert
    /// Where the held-out phase of each gate runs (`gate.held_out_runtime`).
    public var heldOutRuntime: HeldOutRuntime = .auto
    /// The held-out virtual machine (`gate.vm:`), used when `heldOutRuntime` is `vm`.
    public var vm = VMSettings()
    /// When a gate's answer is released (`gate.reply_time`, `gate.reply_after`).
    public var replyTime: ReplyTime = .padded
    /// `gate.held_out_env`: for held-out runs, a `runner.env_pass` variable's value comes from
    /// another of the supervisor's variables (name → source).
    public var heldOutEnv: [String: String] = [:]
    /// Where `gate.held_out_env` is (`file:line`), for what is refused about its values.
    public var heldOutEnvPlace: String?
    /// `gate.shared_vendor_account: true`: the operator accepts that held-out and train runs
    /// reach a model API with one account's keys (its prompt cache and stored objects are a
    /// channel between them); shown in status, the report and the evidence. Without it, a
    /// runner that reaches a model API needs `held_out_env` for each of its keys.
    public var sharedVendorAccount = false
    /// `autoharness run` stops after this many consecutive rejected gates (upstream: 5).
    public var maxNonImproving = 5
    /// `gate.reply_after` as written (the seconds of `worst_case`), folded into
    /// `replyTime` once the whole section is read.
    var replyAfter: Double?
    public init() {}
}

extension ExperimentConfig {
    public enum AcceptRule: String, Sendable, CaseIterable {
        /// Beat it by more than `minImprovement` (a tie never passes): the default, a guard
        /// against fitting the held-out split one lucky task at a time (docs/loop.md).
        case margin
        /// Reach it (NeoSigma's `val_score >= best_seen`; a tie passes). The same agent.py
        /// bytes still cannot be gated twice.
        case atLeastBest = "at_least_best"
        /// Beat it in a one-sided paired t-test of per-task scores at `alpha` (`PairedTest`): a
        /// decision with a stated error rate, meant with `gate.trials` > 1.
        case paired
    }

    public enum DisclosureLevel: String, Sendable, CaseIterable {
        /// accept/reject and the suite pass rate only
        case decision
        /// plus val_score rounded to 2 decimals
        case rounded
        /// plus val_score to 4 decimals (upstream behaviour)
        case score
        /// plus val_score on Blum & Hardt's ladder (`ScoreLadder`): a new value only when a
        /// gate beats the last disclosed one by more than `ladderStep`, rounded to the step
        case ladder
    }

    public enum OnReject: String, Sendable, CaseIterable { case revert, keep }
}
