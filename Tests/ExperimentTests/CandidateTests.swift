import Foundation
import Testing
import TestSupport

@testable import Experiment
@testable import ExperimentModel

/// An agent.py that solves exactly the arith tasks `ids` (it reads each task's marker): what
/// a candidate tuned task by task looks like, and a way to make candidates that differ only
/// on the held-out split.
func solving(_ ids: [String], tag: String = "") -> String {
    """
    import os
    SOLVE = [\(ids.sorted().map { "\"\($0)\"" }.joined(separator: ", "))]
    class HarnessAgent:
        def run(self, instruction, workdir):
            tid = instruction.split("MARKER-")[1].rsplit("-a91f", 1)[0]
            if tid not in SOLVE:
                return
            _, op, a, b = instruction.splitlines()[0].split()
            result = int(a) + int(b) if op == "add" else int(a) * int(b)
            with open(os.path.join(workdir, "answer.txt"), "w") as f:
                f.write(str(result))
    # \(tag)
    """
}

@Suite("Several candidates per gate (loop.candidates)")
struct CandidateTests {
    @Test("K candidates: each runs on the train split, only the best there meets the held-out split (one look), the others are explored, listed and still unjudged")
    func gatesOnlyTheBest() throws {
        try requireRoot()
        let exp = try Experiment(config: ["candidates": "3", "min_improvement": "0"])
        let (train, test) = try exp.split()
        // The best on train solves no held-out task; the best on the held-out split is second
        // on train. A gate that looked at every candidate's held-out score would pick c3.
        let c1 = solving(Array(train.prefix(6)))
        let c2 = solving(train)
        let c3 = solving(Array(train.prefix(7)) + test)
        for (i, source) in [c1, c2, c3].enumerated() {
            try exp.setAgent(source)
            let r = try exp.run("candidate", "-m", "try \(i + 1)")
            #expect(r.status == 0 && r.stdout.contains("candidate \(i + 1) of at most 3"), "\(r.stdout)\(r.stderr)")
        }
        try exp.setAgent(solving([]))
        let fourth = try exp.run("candidate")
        #expect(fourth.status == 2 && fourth.stderr.contains("3 candidates are already waiting"), "\(fourth.stderr)")
        let waiting = try exp.run("status").stdout
        #expect(waiting.contains("candidates waiting for the next gate: 3 of at most 3"), "\(waiting)")

        let g = try exp.run("gate")
        #expect(g.status == 1 && g.stdout.contains("REJECTED") && g.stdout.contains("did not beat the best"), "\(g.stdout)\(g.stderr)")
        let lines = g.stdout.split(separator: "\n").map(String.init)
        #expect(lines.contains { $0.contains("1. candidate 2") && $0.contains("train 8/8") && $0.contains("<- gated") }, "\(g.stdout)")
        #expect(lines.contains { $0.contains("2. candidate 3") && $0.contains("train 7/8") && $0.contains("explored") }, "\(g.stdout)")
        #expect(lines.contains { $0.contains("3. candidate 1") && $0.contains("train 6/8") && $0.contains("explored") }, "\(g.stdout)")
        #expect(try exp.file("agent/agent.py") == c2, "the gated candidate becomes agent/agent.py")

        // One gate, one held-out look: one start row, an attempt for c2 only, its score.
        #expect(try exp.rows("gate_started").count == 1)
        let attempts = try exp.rows("gate_attempt")
        #expect(attempts.count == 1 && attempts[0]["valScore"] as? Double == 0 && attempts[0]["message"] as? String == "try 2")
        let ranked = try #require(try exp.rows("candidates_ranked").first)
        let entries = try #require(ranked["ranked"] as? [[String: Any]])
        #expect(entries.compactMap { $0["number"] as? Int } == [2, 3, 1])
        #expect(entries.allSatisfy { Set($0.keys).isDisjoint(with: ["valScore", "heldOut", "test"]) }, "\(entries)")
        // Every candidate ran on the train split, recorded as a train run (budgets count it).
        #expect(try exp.rows("train_run").compactMap { $0["agentSHA256"] as? String }.count == 3)

        // The explored ones are listed for the coding agent and the operator, with their diffs.
        let st = try #require(JSONSerialization.jsonObject(with: Data(try exp.run("status", "--json").stdout.utf8)) as? [String: Any])
        let rankings = try #require(st["candidate_rankings"] as? [[String: Any]])
        #expect((rankings.first?["ranked"] as? [[String: Any]])?.filter { $0["gated"] as? Bool == false }.count == 2)
        #expect(try exp.run("status").stdout.contains("gated #2 train 8/8; explored #3 train 7/8, #1 train 6/8"))
        #expect(try exp.run("report").status == 0)
        let html = try exp.file("report.html")
        #expect(html.contains("best of 3 candidates on train") && html.contains("explored candidate 3") && html.contains("try 3"))

        // c3 never met the held-out split: it is not judged, so it can be gated on its own,
        // and then (alone) it is accepted.
        try exp.setAgent(c3)
        let alone = try exp.run("gate")
        #expect(alone.status == 0 && alone.stdout.contains("ACCEPTED"), "\(alone.stdout)\(alone.stderr)")
    }

    @Test("gate.trials ranks candidates on each train task's mean over k runs: one recorded train run per candidate, k runs of every task, the ranking's numbers over task means")
    func rankedOverTrials() throws {
        try requireRoot()
        let exp = try Experiment(config: ["candidates": "2", "trials": "3"])
        let (train, _) = try exp.split()
        // Passes each task by a coin, so three runs give means in thirds; each run also makes
        // one refused call, which counts the runs the ranking made.
        let coin = """
            import ctypes, os
            class HarnessAgent:
                def run(self, instruction, workdir):
                    # One refused system call a run (kexec_load): the ranking's violations count
                    # the runs it made beyond the recorded one.
                    ctypes.CDLL(None, use_errno=True).syscall(246, 0, 0, None, 0)
                    if os.urandom(1)[0] < 128:
                        return
                    _, op, a, b = instruction.splitlines()[0].split()
                    result = int(a) + int(b) if op == "add" else int(a) * int(b)
                    with open(os.path.join(workdir, "answer.txt"), "w") as f:
                        f.write(str(result))
            """
        for source in [coin, solving([])] {
            try exp.setAgent(source)
            let r = try exp.run("candidate")
            try #require(r.status == 0, "\(r.stdout)\(r.stderr)")
        }
        let g = try exp.run("gate")
        try #require(g.status == 0 || g.status == 1, "\(g.stdout)\(g.stderr)")
        let ranked = try #require(try exp.rows("candidates_ranked").first?["ranked"] as? [[String: Any]])
        let first = try #require(ranked.first)
        #expect(first["number"] as? Int == 1 && first["trials"] as? Int == 3 && first["trainTotal"] as? Int == train.count, "\(ranked)")
        // Over task means of three runs: the sum of means is in thirds, and above the count of
        // tasks whose mean is 1 unless every task's three coin flips agreed ((1/4)^N). One run
        // per task would make the two equal. (Whether the sum is a whole number is a coin too:
        // that check failed one CI in three.)
        let score = try #require(first["trainScore"] as? Double) * Double(train.count)
        #expect(abs(score * 3 - (score * 3).rounded()) < 0.01, "a mean over three runs per task: \(score)")
        // The coin ran every task twice more than its recorded train run, each run once refused.
        let violations = try exp.rows("violation")
        let extra = violations.filter { ($0["actor"] as? String) == "agent.py (candidate ranking)" && ($0["detail"] as? String)?.contains("kexec_load") == true }
        #expect(extra.compactMap { $0["count"] as? Int }.reduce(0, +) == 2 * train.count, "\(violations)")
        #expect(try exp.rows("train_run").count == 2, "one recorded train run per candidate")
    }

    @Test("candidates that differ only on the held-out split teach the coding agent nothing more than K = 1: the same looks, the same answer, the same status")
    func nearIdenticalLearnNothingMore() throws {
        try requireRoot()
        // The same fixture and seed: the same split in both experiments.
        let many = try Experiment(config: ["candidates": "3", "min_improvement": "0", "disclosure": "score"])
        let one = try Experiment(config: ["min_improvement": "0", "disclosure": "score"])
        let (train, test) = try many.split()
        #expect(try one.split().test == test)
        // Identical on train (every task), each solving a different held-out task: an agent
        // fishing for which held-out task its edit wins.
        let variants = test.prefix(3).enumerated().map { i, t in solving(train + [t], tag: "variant \(i)") }
        for v in variants {
            try many.setAgent(v)
            #expect(try many.run("candidate").status == 0)
        }
        try one.setAgent(variants[0])
        let gMany = try many.run("gate"), gOne = try one.run("gate")
        // Ties on train go to the first submitted: the answer is the one variant 0 alone gets.
        // (The commit's hash differs by its time; the ranking's lines are train numbers.)
        let answer = { (s: String) in
            s.split(separator: "\n").filter { !$0.hasPrefix("  ") && !$0.contains("candidate") }
                .map { $0.replacing(/committed as [0-9a-f]+/, with: "committed as C") }.joined(separator: "\n")
        }
        #expect(answer(gMany.stdout) == answer(gOne.stdout) && gMany.status == gOne.status, "\(gMany.stdout)\n---\n\(gOne.stdout)")
        #expect(gOne.stdout.contains("val_score: 0.25"), "\(gOne.stdout)")
        #expect(try many.rows("gate_started").count == 1 && one.rows("gate_started").count == 1)
        // What either agent can read of the held-out split afterwards is the same.
        func heldOutView(_ e: Experiment) throws -> [String] {
            let st = try #require(JSONSerialization.jsonObject(with: Data(try e.run("status", "--json").stdout.utf8)) as? [String: Any])
            let its = (st["iterations"] as? [[String: Any]] ?? []).map { "\($0["iteration"] ?? "") \($0["val_score"] ?? "")" }
            let gates = (st["gate_attempts"] as? [[String: Any]] ?? []).map { "\($0["attempt"] ?? "") \($0["accepted"] ?? "") \($0["reason"] ?? "")" }
            return its + gates + ["best \(st["best"] ?? "")"]
        }
        #expect(try heldOutView(many) == heldOutView(one))
    }

    @Test("loop.candidates: 1 refuses `candidate` (the gate judges agent.py alone); an agent.py a gate judged is refused; the same one twice waits once")
    func refusals() throws {
        try requireRoot()
        let single = try Experiment()
        let r = try single.run("candidate")
        #expect(r.status == 2 && r.stderr.contains("loop.candidates is 1"), "\(r.stderr)")

        let exp = try Experiment(config: ["candidates": "2", "min_improvement": "0"])
        try exp.setAgent(Agents.addOnly)
        #expect(try exp.run("candidate").status == 0)
        let again = try exp.run("candidate")
        #expect(again.status == 0 && again.stdout.contains("candidate 1 of"), "\(again.stdout)")
        #expect(try exp.rows("candidate").count == 1)
        // One waiting candidate is gated as it is, with no ranking.
        #expect(try exp.run("gate").stdout.contains("ACCEPTED"))
        #expect(try exp.rows("candidates_ranked").isEmpty && exp.rows("train_run").isEmpty)
        let judged = try exp.run("candidate")
        #expect(judged.status == 2 && judged.stderr.contains("already judged (gate attempt 1, accepted)"), "\(judged.stderr)")
    }
}

extension CandidateTests {
    @Test("a spent budget ends the ranking between two candidates: no gate starts, no look at the held-out split, the candidates still wait")
    func budgetBetweenCandidates() throws {
        try requireRoot()
        let exp = try Experiment(config: ["candidates": "2"])
        for n in 1...2 {
            try exp.setAgent(Agents.addOnly + "\n# \(n)\n")
            #expect(try exp.run("candidate").status == 0)
        }
        let supervisor = try ExperimentSupervisor(layout: ExperimentLayout(root: exp.root), policySearchPaths: [Built.packageRoot + "/policies"], purpose: "test")
        final class Asked: @unchecked Sendable { var n = 0 }
        let asked = Asked()
        #expect(throws: ExperimentError.self) {
            _ = try supervisor.gateCandidates(actor: "test", overBudget: {
                asked.n += 1
                return asked.n > 1 ? "budget.max_cost_usd 1 was reached" : nil
            })
        }
        #expect(asked.n == 2)
        #expect(try exp.rows("gate_started").isEmpty && exp.rows("train_run").count == 1)
        #expect(try supervisor.state().pendingCandidates.count == 2)
    }
}

@Suite("The ranking of candidates")
struct CandidateRankingTests {
    @Test("loop.candidates is read and bounded (1 to 8), naming the line")
    func config() throws {
        #expect(try ExperimentConfig.parse("benchmark: local\ndataset: d\nloop:\n  candidates: 3\n", file: "c.yaml").loop.candidates == 3)
        #expect(try ExperimentConfig.parse("benchmark: local\ndataset: d\n", file: "c.yaml").loop.candidates == 1, "one by default")
        let bad = #expect(throws: ConfigErrors.self) { try ExperimentConfig.parse("benchmark: local\ndataset: d\nloop:\n  candidates: 9\n", file: "c.yaml") }
        #expect(bad?.description.contains("c.yaml:4") == true && bad?.description.contains("loop.candidates") == true, "\(String(describing: bad))")
    }

    func c(_ n: Int, score: Double, suite: Int, meets: Bool = true) -> RankedCandidate {
        RankedCandidate(number: n, agentSHA256: "sha\(n)", message: nil, trainPassed: Int(score * 10), trainTotal: 10, trainScore: score,
                        suitePassed: suite, suiteTotal: 5, meetsThreshold: meets)
    }

    @Test("suite threshold met first, then train score, then suite passes, then the order submitted")
    func order() {
        let ranked = CandidateRanking.rank([c(1, score: 0.9, suite: 3, meets: false), c(2, score: 0.5, suite: 5), c(3, score: 0.7, suite: 4),
                                            c(4, score: 0.7, suite: 5), c(5, score: 0.7, suite: 5)])
        #expect(ranked.map(\.number) == [4, 5, 3, 2, 1])
    }
}
