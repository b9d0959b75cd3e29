@testable import Experiment
@testable import ExperimentModel
import Foundation
import Testing
import TestSupport

// What the coding agent may learn is a type (`Disclosure` → `GateDisclosure`, `AgentStatus`),
// and these are the exact bytes of the broker's gate answer for every outcome and every
// `gate.disclosure`. A change to what leaks changes a line here.

@Suite("Disclosure: every gate outcome, every disclosure level, the exact bytes the coding agent receives")
struct DisclosureTests {
    static func record(_ outcome: GateOutcome, required: Double? = nil) -> GateAttemptRecord {
        let accepted = outcome == .accepted
        return GateAttemptRecord(
            attempt: 7, agentSHA256: String(repeating: "a", count: 64), accepted: accepted,
            // The operator's wording, with the exact numbers: never what the agent gets.
            reason: "operator text 0.123456789", suitePassed: outcome == .interrupted ? 0 : 3, suiteTotal: outcome == .interrupted ? 0 : 4,
            valScore: outcome == .suiteBelowThreshold || outcome == .interrupted ? nil : 0.56789, bestBefore: 0.61234,
            promoted: accepted ? ["t1", "t2"] : [], commit: accepted ? "abcdef0123456789" : nil, iteration: accepted ? 2 : nil,
            outcome: outcome, requiredImprovement: required)
    }

    static func config(_ d: ExperimentConfig.DisclosureLevel) -> ExperimentConfig {
        var c = ExperimentConfig(benchmark: "local")
        c.gate.disclosure = d
        c.threshold = 0.8
        return c
    }

    /// (outcome, required improvement, disclosure) → exact text and exit status.
    static let table: [(GateOutcome, Double?, ExperimentConfig.DisclosureLevel, String, Int32)] = [
        (.accepted, nil, .decision, "gate attempt 7: ACCEPTED\nsuite: 3/4 (threshold 0.8)\niteration 2 committed as abcdef0; 2 task(s) promoted to the suite\n", 0),
        (.accepted, nil, .rounded, "gate attempt 7: ACCEPTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.57\niteration 2 committed as abcdef0; 2 task(s) promoted to the suite\n", 0),
        (.accepted, nil, .score, "gate attempt 7: ACCEPTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.5679\niteration 2 committed as abcdef0; 2 task(s) promoted to the suite\n", 0),
        (.accepted, nil, .ladder, "gate attempt 7: ACCEPTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.5000\niteration 2 committed as abcdef0; 2 task(s) promoted to the suite\n", 0),
        (.suiteBelowThreshold, nil, .decision, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nreason: suite pass rate 3/4 below threshold 0.8\n", 1),
        (.suiteBelowThreshold, nil, .rounded, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nreason: suite pass rate 3/4 below threshold 0.8\n", 1),
        (.suiteBelowThreshold, nil, .score, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nreason: suite pass rate 3/4 below threshold 0.8\n", 1),
        (.suiteBelowThreshold, nil, .ladder, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nreason: suite pass rate 3/4 below threshold 0.8\n", 1),
        (.scoreNotImproved, nil, .decision, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nreason: held-out score did not improve\n", 1),
        (.scoreNotImproved, nil, .rounded, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.57\nreason: val_score did not beat the best accepted score\n", 1),
        (.scoreNotImproved, nil, .score, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.5679\nreason: val_score did not beat the best accepted score\n", 1),
        (.scoreNotImproved, nil, .ladder, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.5000\nreason: val_score did not beat the best accepted score\n", 1),
        (.scoreNotImproved, 0.05, .decision, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nreason: held-out score did not improve\n", 1),
        (.scoreNotImproved, 0.05, .rounded, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.57\nreason: val_score did not beat the best accepted score by more than min_improvement 0.0500\n", 1),
        (.scoreNotImproved, 0.05, .score, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.5679\nreason: val_score did not beat the best accepted score by more than min_improvement 0.0500\n", 1),
        (.scoreNotImproved, 0.05, .ladder, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.5000\nreason: val_score did not beat the best accepted score by more than min_improvement 0.0500\n", 1),
        (.scoreBelowBest, nil, .decision, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nreason: held-out score did not improve\n", 1),
        (.scoreBelowBest, nil, .rounded, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.57\nreason: val_score is below the best accepted score\n", 1),
        (.scoreBelowBest, nil, .score, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.5679\nreason: val_score is below the best accepted score\n", 1),
        (.scoreBelowBest, nil, .ladder, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.5000\nreason: val_score is below the best accepted score\n", 1),
        (.notShownBetter, nil, .decision, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nreason: held-out score did not improve\n", 1),
        (.notShownBetter, nil, .rounded, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.57\nreason: val_score was not shown better than the best accepted score at gate.alpha\n", 1),
        (.notShownBetter, nil, .score, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.5679\nreason: val_score was not shown better than the best accepted score at gate.alpha\n", 1),
        (.notShownBetter, nil, .ladder, "gate attempt 7: REJECTED\nsuite: 3/4 (threshold 0.8)\nval_score: 0.5000\nreason: val_score was not shown better than the best accepted score at gate.alpha\n", 1),
        (.interrupted, nil, .decision, "gate attempt 7: REJECTED\nsuite: 0/0 (threshold 0.8)\nreason: interrupted\n", 1),
        (.interrupted, nil, .rounded, "gate attempt 7: REJECTED\nsuite: 0/0 (threshold 0.8)\nreason: interrupted\n", 1),
        (.interrupted, nil, .score, "gate attempt 7: REJECTED\nsuite: 0/0 (threshold 0.8)\nreason: interrupted\n", 1),
        (.interrupted, nil, .ladder, "gate attempt 7: REJECTED\nsuite: 0/0 (threshold 0.8)\nreason: interrupted\n", 1),
    ]

    @Test("the table covers every outcome and every disclosure level")
    func tableIsComplete() {
        for o in GateOutcome.allCases {
            for d in ExperimentConfig.DisclosureLevel.allCases {
                #expect(Self.table.contains { $0.0 == o && $0.2 == d }, "\(o) under \(d) is not in the table")
            }
        }
    }

    /// The ledger around attempt 7: a 4-task test split (the ladder's step 0.25), a baseline
    /// of 0.25, and the attempt itself.
    static func state(with record: GateAttemptRecord) throws -> ExperimentState {
        var s = try ExperimentState(records: [])
        s.split = SplitRecord(train: ["a"], test: ["w", "x", "y", "z"], seed: 1)
        s.iterations = [IterationRecord(iteration: 0, valScore: 0.25, commit: "baseline", evalsPassed: 0, evalsTotal: 0, timestamp: "t", agentSHA256: "")]
        s.gateAttempts = [record]
        return s
    }

    @Test("the gate's answer, byte for byte", arguments: DisclosureTests.table.indices)
    func gateAnswer(_ i: Int) throws {
        let (outcome, required, level, text, exit) = Self.table[i]
        let record = Self.record(outcome, required: required)
        let answer = AgentText.gate(Disclosure.gate(record, state: try Self.state(with: record), config: Self.config(level)))
        #expect(answer.text == text, "\(outcome) \(level)")
        #expect(answer.exit == exit)
        // Never the operator's wording, never the best score, never digits past the level.
        #expect(!answer.text.contains("operator text") && !answer.text.contains("0.61") && !answer.text.contains("0.56789"))
    }

    @Test("records written before outcomes existed are read by their reason text, in one place")
    func legacyRecords() {
        func legacy(_ reason: String, accepted: Bool = false) -> GateOutcome {
            GateAttemptRecord(attempt: 1, agentSHA256: "", accepted: accepted, reason: reason, suitePassed: 0, suiteTotal: 0, valScore: nil,
                              bestBefore: nil, promoted: [], commit: nil, iteration: nil).verdict
        }
        #expect(legacy("accepted", accepted: true) == .accepted)
        #expect(legacy("interrupted") == .interrupted)
        #expect(legacy("suite pass rate 1/2 below threshold 0.8") == .suiteBelowThreshold)
        #expect(legacy("val_score did not beat the best accepted score") == .scoreNotImproved)
    }

    @Test("the coding agent's status: scores as disclosed, no held-out run's violations, no cost account; the operator's has them")
    func statusViews() throws {
        var state = try ExperimentState(records: [])
        state.split = SplitRecord(train: ["a"], test: ["b"], seed: 1)
        state.iterations = [IterationRecord(iteration: 0, valScore: 0.123456, commit: "baseline", evalsPassed: 0, evalsTotal: 0,
                                            timestamp: "t", agentSHA256: "")]
        state.violations = [("t1", ViolationRecord(actor: "agent.py (gate, held-out split)", kind: "syscall", detail: "syscall ptrace ×3", heldOut: true, count: 3)),
                            ("t2", ViolationRecord(actor: "coding agent", kind: "refused_request", detail: "`autoharness record`", count: 1))]
        let cfg = Self.config(.rounded)
        let agent = AgentText.status(Disclosure.agentStatus(state, config: cfg), root: "/work", json: false)
        #expect(agent.contains("best val_score: 0.1200") && !agent.contains("0.1235") && !agent.contains("ptrace") && agent.contains("refused_request ×1"), "\(agent)")
        #expect(!agent.contains("max_cost_usd"), "\(agent)")
        let json = AgentText.status(Disclosure.agentStatus(state, config: Self.config(.score)), root: "/work", json: true)
        #expect(json.contains("0.1235") && !json.contains("0.123456"), "\(json)")
        let op = AgentText.status(Disclosure.operatorStatus(state, config: cfg), root: "/exp", json: false, verify: nil)
        #expect(op.contains("best val_score: 0.1235") && op.contains("syscall ×3") && op.contains("max_cost_usd"), "\(op)")
        // What the coding agent asked a human for: the operator's status only.
        state.needsHuman = [("t3", NeedsHumanRecord(actor: "coding agent", text: "the BFCL install lacks live_multiple"))]
        let asked = AgentText.status(Disclosure.operatorStatus(state, config: cfg), root: "/exp", json: false, verify: nil)
        #expect(asked.contains("needs from a human (the coding agent's notes, newest last): 1\n  t3 the BFCL install lacks live_multiple\n"), "\(asked)")
        #expect(!AgentText.status(Disclosure.agentStatus(state, config: cfg), root: "/work", json: false).contains("BFCL install"))
        let askedJSON = AgentText.status(Disclosure.operatorStatus(state, config: cfg), root: "/exp", json: true, verify: nil)
        #expect(askedJSON.contains("\"needs_human\"") && askedJSON.contains("lacks live_multiple"), "\(askedJSON)")
    }

    @Test("gate.disclosure: ladder: the disclosed score moves only when a gate beats it by more than the step, to that score rounded to the step; below that every gate shows the value it stood at, in the answer, status and results.tsv")
    func ladder() throws {
        var l = ScoreLadder(step: 0.25)
        #expect(l.offer(0.25) == 0.25)  // the baseline sets it
        #expect(l.offer(0.5) == 0.25)   // one step exactly: not more
        #expect(l.offer(0.4) == 0.25)
        #expect(l.offer(0.55) == 0.5)   // more than a step: rounded to the step
        #expect(l.offer(0.2) == 0.5)    // never down
        #expect(l.offer(1.0) == 1.0)
        // Two rejected variants with different scores, then an accepted one.
        func attempt(_ n: Int, _ val: Double, accepted: Bool) -> GateAttemptRecord {
            GateAttemptRecord(attempt: n, agentSHA256: String(n), accepted: accepted, reason: "", suitePassed: 1, suiteTotal: 1, valScore: val,
                              bestBefore: 0.25, promoted: [], commit: accepted ? "abcdef0" : nil, iteration: accepted ? 1 : nil,
                              outcome: accepted ? .accepted : .scoreNotImproved)
        }
        let records = [attempt(1, 0.45, accepted: false), attempt(2, 0.3, accepted: false), attempt(3, 0.8, accepted: true)]
        var state = try Self.state(with: records[0])
        state.gateAttempts = records
        state.iterations.append(IterationRecord(iteration: 1, valScore: 0.8, commit: "abcdef0", evalsPassed: 1, evalsTotal: 1, timestamp: "t1", agentSHA256: "3"))
        let config = Self.config(.ladder)
        let answers = records.map { AgentText.gate(Disclosure.gate($0, state: state, config: config)).text }
        #expect(answers[0].contains("val_score: 0.2500\n") && answers[1].contains("val_score: 0.2500\n") && answers[2].contains("val_score: 0.7500\n"), "\(answers)")
        let status = AgentText.status(Disclosure.agentStatus(state, config: config), root: "/work", json: false)
        #expect(status.contains("best val_score: 0.7500") && !status.contains("0.45") && !status.contains("0.8000"), "\(status)")
        #expect(Views.resultsTSV(state, config: config).hasSuffix("0\t0.2500\tbaseline\t0\t0\tt\t\n1\t0.7500\tabcdef0\t1\t1\tt1\t\n"))
        // A score offered without the history is not disclosed at all.
        #expect(DisclosedScore(0.45, .ladder) == nil)
        // gate.ladder_step sets the step.
        var stepped = config
        stepped.gate.ladderStep = 0.2
        #expect(ScoreLadder.replay(state, config: stepped).attempts == [1: 0.4, 2: 0.4, 3: 0.8])
        // Each gate keeps the step it registered: a step changed later (finer, here) changes
        // what later gates disclose, never what earlier ones did (a finer replay of gate 1
        // would show 0.45, a number it never disclosed).
        state.baseline = BaselineRecord(valScore: 0.25, testTasks: 4, tasksPassed: 1, tasksTotal: 4, agentSHA256: "", ladderStep: 0.25)
        state.ladderSteps = [1: 0.25, 2: 0.25, 3: 0.25]
        var finer = config
        finer.gate.ladderStep = 0.05
        #expect(ScoreLadder.replay(state, config: finer).attempts == [1: 0.25, 2: 0.25, 3: 0.75])
        #expect(abs((ScoreLadder.replay(state, config: finer, adding: (4, 0.86)).attempts[4] ?? 0) - 0.85) < 1e-9, "a new gate at the new step")
        state.ladderSteps = [:]
        state.baseline?.ladderStep = nil
        #expect(ScoreLadder.replay(state, config: finer).attempts[1] == 0.45, "without the registered steps, the control")
    }

    @Test("results.tsv: upstream's six columns, then the accepted gate's description; the score as disclosed, empty under decision")
    func resultsColumns() throws {
        var state = try ExperimentState(records: [])
        state.iterations = [IterationRecord(iteration: 0, valScore: 0.123456, commit: "baseline", evalsPassed: 0, evalsTotal: 0, timestamp: "t0", agentSHA256: ""),
                            IterationRecord(iteration: 1, valScore: 0.5, commit: "abc1234", evalsPassed: 2, evalsTotal: 3, timestamp: "t1", agentSHA256: "",
                                            description: "coerce numbers")]
        let header = "iteration\tval_score\tcommit\tevals_passed\tevals_total\ttimestamp\tdescription\n"
        #expect(Views.resultsTSV(state, config: Self.config(.score)) == header + "0\t0.1235\tbaseline\t0\t0\tt0\t\n1\t0.5000\tabc1234\t2\t3\tt1\tcoerce numbers\n")
        #expect(Views.resultsTSV(state, config: Self.config(.decision)) == header + "0\t\tbaseline\t0\t0\tt0\t\n1\t\tabc1234\t2\t3\tt1\tcoerce numbers\n")
        // A requester's message as kept: one line, control characters spaced, capped.
        #expect(noteLine("a\tb\r\n\u{2028}c\u{1b}[31m") == "a b c [31m")
        #expect(noteLine(" \n\t ") == nil)
        #expect(noteLine(String(repeating: "x", count: 900))?.count == maxNoteLength)
    }
}
