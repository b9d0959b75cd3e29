import Benchmark

// The gate's rules, as one pure function of values: the ledger's state, the config, and the
// outcomes of the phases run so far. `ExperimentSupervisor.judge` is the sequencer around it:
// it runs what the decision asks for next (the held-out split, the promotion candidates),
// calls it again with the new outcomes, and records the final decision. Nothing here runs a
// task, reads a file or writes a row.
//
//   1. suite      the regression suite's pass rate (train) must reach `threshold`; an empty
//                 suite passes.
//   2. held-out   val_score, the mean over every test task (`HeldOutScore.val`), must beat the
//                 best accepted score by more than `gate.min_improvement` (auto: one test
//                 task's worth; a tie never passes), or with `gate.accept: at_least_best`
//                 reach it (a tie passes), or with `gate.accept: paired` be found better by a
//                 one-sided paired t-test of per-task scores at `gate.alpha` (`PairedTest`).
//   3. promotion  only if both pass: train tasks outside the suite that ever failed (or never
//                 ran) are re-run and those that pass now are promoted; with rolling batches,
//                 at cluster level (`RollingBatches`).

/// What the gate does next, or what it decided.
public enum GateDecision: Equatable, Sendable {
    /// Step 1 passed: run the held-out split, then decide again with its outcomes.
    case runHeldOut
    /// Step 2 passed: run these train tasks, then decide again with their outcomes.
    case runPromotion([String])
    /// A closed reason, the wording the ledger and the operator see (`GateDisclosure.reason`
    /// words it for the coding agent under `gate.disclosure`).
    case rejected(GateOutcome, reason: String, requiredImprovement: Double?)
    /// Promoted train tasks (sorted) and, with rolling batches, the clusters this gate resolved.
    case accepted(promoted: [String], resolvedClusters: [String])
}

public enum GateRules {
    /// The outcomes of a gate's phases so far (nil: not run).
    public struct Phases: Sendable {
        public var suite: [TaskOutcome]
        public var heldOut: [TaskOutcome]?
        public var promotion: [TaskOutcome]?
        public init(suite: [TaskOutcome], heldOut: [TaskOutcome]? = nil, promotion: [TaskOutcome]? = nil) {
            self.suite = suite
            self.heldOut = heldOut
            self.promotion = promotion
        }
    }

    /// Attempt `attempt` of agent.py `agentSHA256`, judged on `phases` against `s` (the state
    /// before the attempt).
    public static func decide(_ s: ExperimentState, config: ExperimentConfig, attempt: Int, agentSHA256: String, phases: Phases) -> GateDecision {
        let split = s.split ?? SplitRecord(train: [], test: [], seed: 0)
        let passed = phases.suite.filter(\.passed).count
        if let rejection = suite(passed: passed, total: s.suite.count, threshold: config.threshold) { return rejection }
        guard let heldOut = phases.heldOut else { return .runHeldOut }
        if config.gate.accept == .paired {
            guard let test = paired(s, config: config, heldOut: heldOut) else {
                return .rejected(.notShownBetter, reason: "gate.accept: paired: the best accepted agent.py's per-task held-out results are not recorded", requiredImprovement: nil)
            }
            if !test.accepted {
                return .rejected(.notShownBetter, reason: "the paired test did not show val_score better than the best accepted score at gate.alpha \(test.alpha) (p = \(String(format: "%.4f", test.pValue)))",
                                 requiredImprovement: nil)
            }
        } else if let rejection = heldOutStep(val: HeldOutScore.val(split.test, heldOut), best: s.best, testTasks: split.test.count, config: config) {
            return rejection
        }
        guard s.currentBatch != nil else {
            guard let promotion = phases.promotion else { return .runPromotion(candidates(s)) }
            return .accepted(promoted: promotion.filter(\.passed).map(\.id).sorted(), resolvedClusters: [])
        }
        let book = FailureBook(s)
        guard let promotion = phases.promotion else { return .runPromotion(RollingBatches.candidates(s, book: book)) }
        let after = FailureBook(RollingBatches.after(s, accepted: (attempt, agentSHA256),
                                                     evidence: evidence(s, phases: phases, attempt: attempt, agentSHA256: agentSHA256), time: ""))
        let p = RollingBatches.promotions(candidates: promotion, before: book, after: after)
        return .accepted(promoted: p.promoted, resolvedClusters: p.resolved)
    }

    /// What a gate's train phases (suite, promotion) showed failing: its `failure_evidence`
    /// row, recorded after the attempt's, and what the cluster rule judges.
    public static func evidence(_ s: ExperimentState, phases: Phases, attempt: Int, agentSHA256: String) -> FailureEvidenceRecord? {
        FailureEvidenceRecord.observed(phases.suite + (phases.promotion ?? []), train: Set(s.split?.train ?? []), source: "gate",
                                       attempt: attempt, agentSHA256: agentSHA256, batch: s.currentBatch?.revealed.batch)
    }

    /// Step 2 under `gate.accept: paired`: the candidate's held-out outcomes (`gate.trials`
    /// per task) against the best's recorded rewards, task by task; nil when the best's are
    /// not recorded (`ExperimentState.bestHeldOut`; the gate refuses before it starts).
    public static func paired(_ s: ExperimentState, config: ExperimentConfig, heldOut: [TaskOutcome]) -> PairedDecision? {
        guard let best = s.bestHeldOut?.trials, let test = s.split?.test else { return nil }
        let scores = zip(HeldOutScore.taskMeans(test, heldOut), best.means).map { PairedScores(candidate: $0, best: $1) }
        return PairedTest.decide(scores, candidateTrials: config.gate.trials, bestTrials: best.trials, alpha: config.gate.alpha)
    }

    /// Step 2 on scores: nil when `val` passes against `best` under `gate.accept` (margin or
    /// at_least_best).
    static func heldOutStep(val: Double, best: Double?, testTasks: Int, config: ExperimentConfig) -> GateDecision? {
        guard config.gate.accept == .atLeastBest else {
            return improvement(val: val, best: best, testTasks: testTasks, minImprovement: config.gate.minImprovement)
        }
        // Floating-point noise in the means (1e-9) never turns a tie into a rejection.
        guard val < (best ?? 0) - 1e-9 else { return nil }
        return .rejected(.scoreBelowBest, reason: "val_score is below the best accepted score", requiredImprovement: nil)
    }

    /// Step 1: nil when the suite's pass rate reaches `threshold` (an empty suite does).
    package static func suite(passed: Int, total: Int, threshold: Double) -> GateDecision? {
        let rate = total == 0 ? 1.0 : Double(passed) / Double(total)
        guard rate < threshold else { return nil }
        return .rejected(.suiteBelowThreshold, reason: "suite pass rate \(passed)/\(total) below threshold \(threshold)", requiredImprovement: nil)
    }

    /// The improvement step 2 requires: `gate.min_improvement` as set, else one test task's
    /// worth (1/N); 0 means strictly greater.
    public static func requiredImprovement(testTasks: Int, minImprovement: Double?) -> Double {
        minImprovement ?? (testTasks > 0 ? 1.0 / Double(testTasks) : 0)
    }

    /// The acceptance rule in force, in held-out tasks: what `prepare` and `status` say.
    public static func ruleText(testTasks n: Int, config: ExperimentConfig) -> String {
        // A benchmark too small to hold a task out (one task: `benchmark --oracle` of a task).
        if n == 0 { return "gate.accept: \(config.gate.accept.rawValue): the test split is empty, so no gate can be accepted" }
        switch config.gate.accept {
        case .paired:
            return "gate.accept: paired (alpha \(config.gate.alpha), \(config.gate.trials) trial(s) per held-out task): a gate is accepted when a one-sided paired t-test of its per-task held-out scores against the best accepted agent.py's finds it better on average at that error rate"
        case .atLeastBest:
            return "gate.accept: at_least_best: a gate is accepted when its val_score reaches the best accepted score (a tie passes; the same agent.py cannot be gated twice)"
        case .margin:
            let step = tasksNeeded(testTasks: n, minImprovement: config.gate.minImprovement)
            let setting = config.gate.minImprovement == nil ? "min_improvement auto = 1/\(n)" : "min_improvement \(config.gate.minImprovement!)"
            return "gate.accept: margin (\(setting)): a gate is accepted when at least \(step) more held-out task(s) pass than under the best accepted agent.py (a tie fails)"
        }
    }

    /// How many more held-out tasks than under the best must pass for step 2 to accept, with
    /// pass/fail rewards: more than `requiredImprovement` × N, so its floor plus one.
    public static func tasksNeeded(testTasks: Int, minImprovement: Double?) -> Int {
        let m = requiredImprovement(testTasks: testTasks, minImprovement: minImprovement)
        return Int((m * Double(max(testTasks, 1)) + 1e-9).rounded(.down)) + 1
    }

    /// Step 2: nil when `val` beats `best` (none yet: 0) by more than the required improvement.
    /// The comparison allows for floating-point noise in the means (1e-9), never for a tie.
    static func improvement(val: Double, best: Double?, testTasks: Int, minImprovement: Double?) -> GateDecision? {
        let needed = requiredImprovement(testTasks: testTasks, minImprovement: minImprovement)
        guard val - (best ?? 0) <= needed + 1e-9 else { return nil }
        return .rejected(.scoreNotImproved,
                         reason: needed > 0
                             ? "val_score did not beat the best accepted score by more than min_improvement \(String(format: "%.4f", needed))"
                             : "val_score did not beat the best accepted score",
                         requiredImprovement: needed > 0 ? needed : nil)
    }

    /// Step 3's candidates without batches: train tasks outside the suite (not waiting for the
    /// operator's review, not retired by them) that a recorded train run ever failed, or that
    /// no accepted agent.py ever ran (never ran at all, or only under agent.py files no gate
    /// accepted). Not upstream's "failing in the latest run": the coding agent is told to
    /// benchmark its candidate before gating (PROGRAM.md), and a gate of several candidates
    /// runs each on train first, and those runs mark the tasks they fixed as passing, so the
    /// latest run's view would promote none of them and the suite would stop growing.
    static func candidates(_ s: ExperimentState) -> [String] {
        let outside = Set(s.suite + s.pendingSuite).union(s.retiredSuite)
        let accepted = Set(s.iterations.map(\.agentSHA256))
        let ranUnderAccepted = Set(s.trainRuns.filter { accepted.contains($0.agentSHA256) }.flatMap(\.results.keys))
        return (s.split?.train ?? []).filter { !outside.contains($0) && (s.failedTrain.contains($0) || !ranUnderAccepted.contains($0)) }
    }
}

extension ExperimentConfig {
    /// The improvement a gate must exceed, given the test split's size.
    public func requiredImprovement(testTasks: Int) -> Double {
        gate.accept != .margin ? 0 : GateRules.requiredImprovement(testTasks: testTasks, minImprovement: gate.minImprovement)
    }
}
