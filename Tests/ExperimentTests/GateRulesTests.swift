import Benchmark
@testable import Experiment
@testable import Evidence
@testable import ExperimentModel
import Foundation
import Testing

// The gate's rules as a pure function (`GateRules.decide`): every rule in a table, and the
// order in which it asks for the phases. (End to end, with real sandboxes: ExperimentTests.)

@Suite("Gate rules")
struct GateRulesTests {
    @Test("step 1: the suite's pass rate must reach the threshold; an empty suite passes", arguments: [
        (4, 5, 0.8, nil),
        (3, 5, 0.8, "suite pass rate 3/5 below threshold 0.8"),
        (0, 0, 1.0, nil),
        (0, 1, 0.0, nil),
        (9, 10, 1.0, "suite pass rate 9/10 below threshold 1.0"),
    ] as [(Int, Int, Double, String?)])
    func suite(_ c: (Int, Int, Double, String?)) {
        let d = GateRules.suite(passed: c.0, total: c.1, threshold: c.2)
        if let reason = c.3 {
            #expect(d == .rejected(.suiteBelowThreshold, reason: reason, requiredImprovement: nil))
        } else {
            #expect(d == nil)
        }
    }

    @Test("step 2: val_score must beat the best by more than min_improvement (auto: one task of N); a tie never passes", arguments: [
        // val, best, N, min_improvement, required if rejected (0: a plain tie rule), accepted
        (0.75, 0.5, 4, nil, 0.25, false),    // exactly one task better: not more than 1/N
        (1.0, 0.5, 4, nil, 0.25, true),      // two tasks better
        (0.5, 0.5, 4, 0.0, 0.0, false),      // a tie, strictly greater required
        (0.5001, 0.5, 4, 0.0, 0.0, true),
        (0.3 + 1e-12, 0.3, 10, 0.0, 0.0, false),  // floating-point noise is no improvement
        (0.25, nil, 4, nil, 0.25, false),    // no best yet: against 0
        (0.5, nil, 4, nil, 0.25, true),
        (0.9, 0.5, 4, 0.5, 0.5, false),      // a set margin
        (0.0, 0.0, 0, nil, 0.0, false),      // an empty test split never improves
    ] as [(Double, Double?, Int, Double?, Double, Bool)])
    func improvement(_ c: (Double, Double?, Int, Double?, Double, Bool)) {
        let d = GateRules.improvement(val: c.0, best: c.1, testTasks: c.2, minImprovement: c.3)
        if c.5 {
            #expect(d == nil)
        } else {
            let reason = c.4 > 0 ? "val_score did not beat the best accepted score by more than min_improvement \(String(format: "%.4f", c.4))"
                                 : "val_score did not beat the best accepted score"
            #expect(d == .rejected(.scoreNotImproved, reason: reason, requiredImprovement: c.4 > 0 ? c.4 : nil))
        }
    }

    static func o(_ id: String, _ reward: Double) -> TaskOutcome { TaskOutcome(id: id, reward: reward, status: reward >= 0.5 ? .passed : .failed) }

    /// Train a…d, test x, y; suite [a]; b failed its latest train run, c passed it, d never ran.
    static func state(best: Double? = 0.5) throws -> ExperimentState {
        var s = try ExperimentState(records: [])
        s.split = SplitRecord(train: ["a", "b", "c", "d"], test: ["x", "y"], seed: 1)
        s.suite = ["a"]
        s.latestTrainRewards = ["a": 1, "b": 0, "c": 1]
        s.trainRuns = [TrainRunRecord(timestamp: "t", agentSHA256: "v0", results: s.latestTrainRewards, statuses: [:])]
        s.failedTrain = ["b"]
        if let best { s.iterations = [IterationRecord(iteration: 0, valScore: best, commit: "baseline", evalsPassed: 0, evalsTotal: 0, timestamp: "t", agentSHA256: "v0")] }
        return s
    }

    @Test("the ratchet: a train task some recorded run failed stays a promotion candidate after a later run (the candidate's own benchmark) passed it; one never seen failing is not")
    func ratchetCandidates() throws {
        var s = try Self.state(best: 0)
        #expect(GateRules.candidates(s) == ["b", "d"])
        // Passed only by agent.py files no gate accepted (a candidate's benchmark, the
        // candidates a gate ranked): still a candidate, as if it never ran.
        s.trainRuns[0].agentSHA256 = "not accepted"
        #expect(GateRules.candidates(s) == ["b", "c", "d"])
        s.trainRuns[0].agentSHA256 = "v0"
        s.failedTrain.insert("c")  // failed once, passing in the latest run
        #expect(GateRules.candidates(s) == ["b", "c", "d"])
        // Waiting for the operator's review, or retired by them: not a candidate.
        s.pendingSuite = ["b"]
        s.retiredSuite = ["d"]
        #expect(GateRules.candidates(s) == ["c"])
        // Replayed from the ledger's rows: the set grows with every failing train run.
        let rows = try ExperimentState(records: [])
        #expect(rows.failedTrain.isEmpty)
    }

    @Test("gate.accept: paired judges per-task scores against the best's recorded rewards: three fixed tasks pass, one flipped trial does not (though val_score rose), a trade does not, and without the best's rewards nothing is accepted")
    func acceptPaired() throws {
        var s = try Self.state(best: 0.5)
        let test = (0..<10).map { "t\($0)" }
        s.split = SplitRecord(train: ["a", "b", "c", "d"], test: test, seed: 1)
        // The baseline (the best): t0…t4 failed all three trials, t5…t9 passed all three.
        var baseline = BaselineRecord(valScore: 0.5, testTasks: 10, tasksPassed: 5, tasksTotal: 14, agentSHA256: "v0")
        baseline.heldOutTrials = HeldOutTrials(rewards: test.indices.map { Array(repeating: $0 < 5 ? 0 : 1, count: 3) }, trials: 3)
        s.baseline = baseline
        var config = ExperimentConfig(benchmark: "local")
        (config.gate.accept, config.gate.trials) = (.paired, 3)
        /// Three trials per task: `passing[id]` of them pass (default: the baseline's).
        func heldOut(_ passing: [String: Int]) -> [TaskOutcome] {
            (0..<3).flatMap { trial in test.map { Self.o($0, trial < (passing[$0] ?? ($0 < "t5" ? 0 : 3)) ? 1 : 0) } }
        }
        func decide(_ passing: [String: Int]) -> GateDecision {
            GateRules.decide(s, config: config, attempt: 1, agentSHA256: "v1", phases: .init(suite: [Self.o("a", 1)], heldOut: heldOut(passing)))
        }
        // t0, t1, t2 fixed: differences 1, 1, 1 and seven 0s, t ≈ 1.96 on 9 degrees of freedom.
        #expect(decide(["t0": 3, "t1": 3, "t2": 3]) == .runPromotion(["b", "d"]))
        let fixed = try #require(GateRules.paired(s, config: config, heldOut: heldOut(["t0": 3, "t1": 3, "t2": 3])))
        #expect(abs(fixed.meanDifference - 0.3) < 1e-12 && fixed.pValue < 0.05 && fixed.tasks == 10 && fixed.bestTrials == 3)
        // One more trial passes on t0: val_score rose by 1/30, nowhere near alpha.
        guard case .rejected(.notShownBetter, let reason, nil) = decide(["t0": 1]) else { Issue.record("\(decide(["t0": 1]))"); return }
        #expect(reason.hasPrefix("the paired test did not show val_score better than the best accepted score at gate.alpha 0.05 (p = 0.1"), "\(reason)")
        #expect(HeldOutScore.val(test, heldOut(["t0": 1])) > 0.5)
        // Fixed on one task, lost on another: not better.
        #expect(decide(["t0": 3, "t9": 0]).isRejection)
        // The best's rewards from another trial count (gate.trials changed since): still paired.
        s.baseline?.heldOutTrials = HeldOutTrials(rewards: test.indices.map { [$0 < 5 ? 0 : 1] }, trials: 1)
        #expect(decide(["t0": 3, "t1": 3, "t2": 3]) == .runPromotion(["b", "d"]))
        // Not one per test task, or none: rejected (and the gate refuses before it starts).
        s.baseline?.heldOutTrials = HeldOutTrials(rewards: [[1]], trials: 1)
        #expect(s.bestHeldOut?.trials == nil)
        s.baseline?.heldOutTrials = nil
        #expect(decide(["t0": 3, "t1": 3, "t2": 3]) == .rejected(.notShownBetter, reason: "gate.accept: paired: the best accepted agent.py's per-task held-out results are not recorded", requiredImprovement: nil))
    }

    @Test("gate.accept: at_least_best passes a tie (NeoSigma's val_score >= best_seen) and rejects a lower score with its own outcome; margin rejects the tie")
    func acceptAtLeastBest() throws {
        let s = try Self.state(best: 0.5)
        var config = ExperimentConfig(benchmark: "local")
        config.gate.accept = .atLeastBest
        func decide(_ heldOut: [TaskOutcome]) -> GateDecision {
            GateRules.decide(s, config: config, attempt: 1, agentSHA256: "v1", phases: .init(suite: [Self.o("a", 1)], heldOut: heldOut))
        }
        let tie = [Self.o("x", 1), Self.o("y", 0)]
        #expect(decide(tie) == .runPromotion(["b", "d"]))
        #expect(decide([Self.o("x", 0), Self.o("y", 0)]) == .rejected(.scoreBelowBest, reason: "val_score is below the best accepted score", requiredImprovement: nil))
        config.gate.accept = .margin
        #expect(decide(tie).isRejection)
        #expect(config.requiredImprovement(testTasks: 2) == 0.5)
        config.gate.accept = .atLeastBest
        #expect(config.requiredImprovement(testTasks: 2) == 0)
    }

    @Test("the phases in order: the suite decides first (no held-out look after a failing one), then the held-out split, then promotion of what failed and passes now")
    func sequence() throws {
        let s = try Self.state()
        var config = ExperimentConfig(benchmark: "local")
        config.gate.minImprovement = 0
        func decide(_ p: GateRules.Phases) -> GateDecision { GateRules.decide(s, config: config, attempt: 1, agentSHA256: "v1", phases: p) }
        #expect(decide(.init(suite: [Self.o("a", 0)])) == .rejected(.suiteBelowThreshold, reason: "suite pass rate 0/1 below threshold 0.8", requiredImprovement: nil))
        #expect(decide(.init(suite: [Self.o("a", 0)], heldOut: [Self.o("x", 1), Self.o("y", 1)])).isRejection, "a failing suite ends it whatever else ran")
        #expect(decide(.init(suite: [Self.o("a", 1)])) == .runHeldOut)
        #expect(decide(.init(suite: [Self.o("a", 1)], heldOut: [Self.o("x", 1), Self.o("y", 0)])) == .rejected(.scoreNotImproved, reason: "val_score did not beat the best accepted score", requiredImprovement: nil))
        let passing = GateRules.Phases(suite: [Self.o("a", 1)], heldOut: [Self.o("x", 1), Self.o("y", 1)])
        #expect(decide(passing) == .runPromotion(["b", "d"]), "failed or never ran, outside the suite")
        var done = passing
        done.promotion = [Self.o("b", 1), Self.o("d", 0)]
        #expect(decide(done) == .accepted(promoted: ["b"], resolvedClusters: []))
        // A held-out task with no outcome counts 0.
        #expect(decide(.init(suite: [Self.o("a", 1)], heldOut: [Self.o("x", 1)])).isRejection)
    }

    @Test("with rolling batches, promotion is the cluster rule: candidates are tasks that ever failed, and a task enters with its whole cluster")
    func batched() throws {
        let x = FailureEvidence(check: "x", errorClass: "E", excerpt: "x failed")
        var s = try Self.state(best: 0)
        s.suite = []
        s.latestTrainRewards = [:]
        s.batches = [ExperimentState.Batch(revealed: BatchRevealedRecord(batch: 1, tasks: ["a", "b", "c"], iterations: 3))]
        s.failureEvents = [.evidence(seq: 1, time: "t", FailureEvidenceRecord(source: "train run", agentSHA256: "v0", tasks: ["a": [x], "b": [x], "c": []]))]
        let config = ExperimentConfig(benchmark: "local")
        let passing = GateRules.Phases(suite: [], heldOut: [Self.o("x", 1), Self.o("y", 1)])
        #expect(GateRules.decide(s, config: config, attempt: 1, agentSHA256: "v1", phases: passing) == .runPromotion(["a", "b"]),
                "c never failed; d is not revealed")
        var half = passing
        var stillFailing = Self.o("b", 0)
        stillFailing.failures = [x]
        half.promotion = [Self.o("a", 1), stillFailing]
        #expect(GateRules.decide(s, config: config, attempt: 1, agentSHA256: "v1", phases: half) == .accepted(promoted: [], resolvedClusters: []),
                "b still fails x: a waits for its cluster")
        var all = passing
        all.promotion = [Self.o("a", 1), Self.o("b", 1)]
        let cluster = FailureSignature.clusterID(FailureSignature.of(x))
        #expect(GateRules.decide(s, config: config, attempt: 1, agentSHA256: "v1", phases: all) == .accepted(promoted: ["a", "b"], resolvedClusters: [cluster]))
    }

    @Test("an attempt cut off has no decision: recorded as interrupted, counted; the gate budget is spent at its limit")
    func interruptedAndBudget() {
        let r = GateAttemptRecord.interrupted(attempt: 7, agentSHA256: "v")
        #expect(r.verdict == .interrupted && !r.accepted && r.valScore == nil && r.promoted.isEmpty)
        var config = ExperimentConfig(benchmark: "local")
        config.gate.budget = 3
        var used = RunCounters()
        used.gates = 2
        func budget() -> RunBudget { RunBudget.all(config: config, maxIterations: nil, maxHours: nil, used: used).first { $0.kind == .gateBudget }! }
        #expect(!budget().spent)
        used.gates = 3
        #expect(budget().spent && budget().stopReason == "gate budget 3 spent")
    }
}

extension GateDecision {
    var isRejection: Bool { if case .rejected = self { return true } else { return false } }
}
