import Benchmark
@testable import Experiment
import Foundation
import Testing
import TestSupport

// `timeout_policy`: how a timed-out held-out task counts, and that under `infra` abstaining on
// tasks (sleeping past their timeout) never turns into an improvement.

@Suite("Held-out score: timeout_policy")
struct HeldOutScoreTests {
    static func o(_ id: String, _ reward: Double, timedOut: Bool = false) -> TaskOutcome {
        TaskOutcome(id: id, reward: reward, status: timedOut ? .agentTimeout : reward >= 0.5 ? .passed : .failed)
    }

    static let test = ["a", "b", "c", "d"]

    @Test("agent counts a timeout 0 over the whole split; infra leaves it out of the mean; a verifier timeout is one too, a failure is not")
    func val() {
        let run = [Self.o("a", 1), Self.o("b", 0, timedOut: true), Self.o("c", 0), TaskOutcome(id: "d", reward: 0, status: .verifierTimeout)]
        #expect(HeldOutScore.val(Self.test, run, policy: .agent) == 0.25)
        #expect(HeldOutScore.val(Self.test, run, policy: .infra) == 0.5)
        #expect(HeldOutScore.val(Self.test, [], policy: .infra) == 0, "a task with no outcome is no timeout: it counts 0")
        #expect(HeldOutScore.record(Self.test, run + [Self.o("train-x", 1)], attempt: 3)
                == HeldOutResultsRecord(attempt: 3, rewards: ["a": 1, "b": 0, "c": 0, "d": 0], timedOut: ["b", "d"]))
    }

    @Test("infra compares task by task: abstaining on the tasks it would fail gains nothing, hides a regression at most, and the incumbent's timeouts count 0 where the candidate finished")
    func paired() {
        // The incumbent passes a and fails the rest, all finished.
        let incumbent = HeldOutResultsRecord(attempt: 1, rewards: ["a": 1, "b": 0, "c": 0, "d": 0], timedOut: [])
        // A candidate that passes a and sleeps past b, c, d: the one-sided mean would be 1.0
        // against 0.25; compared on the tasks it finished, it is a tie.
        let abstainer = [Self.o("a", 1), Self.o("b", 0, timedOut: true), Self.o("c", 0, timedOut: true), Self.o("d", 0, timedOut: true)]
        #expect(HeldOutScore.val(Self.test, abstainer, policy: .infra) == 1.0)
        #expect(HeldOutScore.paired(Self.test, candidate: abstainer, incumbent: incumbent) == .init(candidate: 1, incumbent: 1, scored: 1, leftOut: 3))
        // One real improvement (b) among the tasks it finished: it counts.
        let better = [Self.o("a", 1), Self.o("b", 1), Self.o("c", 0, timedOut: true), Self.o("d", 0)]
        let p = HeldOutScore.paired(Self.test, candidate: better, incumbent: incumbent)
        #expect(p.candidate - p.incumbent > 0 && p.scored == 3)
        // A regression on a, hidden by a timeout: no penalty, and no gain either.
        let hider = [Self.o("a", 0, timedOut: true), Self.o("b", 0), Self.o("c", 0), Self.o("d", 0)]
        let h = HeldOutScore.paired(Self.test, candidate: hider, incumbent: incumbent)
        #expect(h.candidate == h.incumbent)
        // The incumbent timed out on c; a candidate that finishes and passes c improves on it.
        let stalled = HeldOutResultsRecord(attempt: 1, rewards: ["a": 1, "b": 0, "c": 0, "d": 0], timedOut: ["c"])
        let c = HeldOutScore.paired(Self.test, candidate: [Self.o("a", 1), Self.o("b", 0), Self.o("c", 1), Self.o("d", 0)], incumbent: stalled)
        #expect(c == .init(candidate: 0.5, incumbent: 0.25, scored: 4, leftOut: 0))
    }

    @Test("timeout_policy is agent or infra, naming the line otherwise")
    func config() throws {
        #expect(try ExperimentConfig.parse("benchmark: local\ndataset: d\n", file: "c.yaml").timeoutPolicy == .agent)
        #expect(try ExperimentConfig.parse("benchmark: local\ndataset: d\ntimeout_policy: infra\n", file: "c.yaml").timeoutPolicy == .infra)
        let bad = #expect(throws: ConfigErrors.self) { try ExperimentConfig.parse("benchmark: local\ndataset: d\ntimeout_policy: none\n", file: "c.yaml") }
        #expect(bad?.description.contains("c.yaml:3") == true && bad?.description.contains("timeout_policy") == true)
    }

    /// The arith fixture with a 3 s agent timeout on every task.
    static func quickTimeouts(_ temp: TempDir) throws -> String {
        let root = temp.path + "/arith-3s"
        try FileManager.default.copyItem(atPath: Experiment.fixture, toPath: root)
        for id in try FileManager.default.contentsOfDirectory(atPath: root + "/tasks") {
            let toml = root + "/tasks/\(id)/task.toml"
            let text = try String(contentsOfFile: toml, encoding: .utf8).replacingOccurrences(of: "[agent]\ntimeout_sec = 20", with: "[agent]\ntimeout_sec = 3")
            try text.write(toFile: toml, atomically: true, encoding: .utf8)
        }
        return root
    }

    /// Solves additions; with `sleep`, sleeps past the timeout on multiplications instead of
    /// failing them.
    static func addAgent(sleepOnMultiply: Bool) -> String {
        """
        import os, time
        class HarnessAgent:
            def run(self, instruction, workdir):
                _, op, a, b = instruction.splitlines()[0].split()
                if op == "add":
                    with open(os.path.join(workdir, "answer.txt"), "w") as f:
                        f.write(str(int(a) + int(b)))
                elif \(sleepOnMultiply ? "True" : "False"):
                    time.sleep(30)
        """
    }

    @Test("end to end under infra: a candidate that sleeps past the tasks it would fail is rejected although its own mean is perfect; finishing them is accepted")
    func infraGate() throws {
        try requireRoot()
        let data = try TempDir()
        let exp = try Experiment(config: ["timeout_policy": "infra", "min_improvement": "0"], dataset: try Self.quickTimeouts(data))
        let split = try exp.split()
        let mulTests = split.test.filter { $0.hasPrefix("mul") }.count
        try #require(mulTests > 0 && mulTests < split.test.count, "the fixture's split has both kinds in test: \(split.test)")
        #expect(try exp.rows("held_out_results").count == 1, "the baseline's, kept at prepare")

        try exp.setAgent(Self.addAgent(sleepOnMultiply: false))
        let g1 = try exp.run("gate")
        #expect(g1.status == 0, "\(g1.stdout)")

        // Same additions, multiplications slept through: one-sided, 1.0 against 0.5.
        try exp.setAgent(Self.addAgent(sleepOnMultiply: true))
        let g2 = try exp.run("gate")
        #expect(g2.status == 1 && g2.stdout.contains("REJECTED"), "\(g2.stdout)")
        let attempt2 = try #require(try exp.rows("gate_attempt").last)
        #expect(attempt2["valScore"] as? Double == 1.0 && attempt2["heldOutLeftOut"] as? Int == mulTests, "\(attempt2)")

        try exp.setAgent(Agents.all)
        let g3 = try exp.run("gate")
        #expect(g3.status == 0, "\(g3.stdout)")
        #expect(try exp.rows("held_out_results").map { $0["attempt"] as? Int } == [nil, 1, 3], "kept for the baseline and accepted gates only")

        // The per-task held-out results are the supervisor's: in no view, status or report.
        let mul = try #require(split.test.first { $0.hasPrefix("mul") })
        for rel in ["workspace/results.tsv", "workspace/suite.json", "workspace/train_results.json", "workspace/failures.json", "workspace/failures.md"] {
            let text = try exp.file(rel)
            #expect(!text.contains(mul), "\(rel)")
        }
        let status = try exp.run("status", "--json").stdout
        #expect(!status.contains(mul))
    }

    @Test("infra set after prepare is refused before the gate counts: there is no incumbent run to compare with")
    func infraLate() throws {
        try requireRoot()
        let exp = try Experiment()
        var text = try exp.file("experiment_config.yaml")
        text = text.replacingOccurrences(of: "\ntimeout_policy: agent", with: "\ntimeout_policy: infra")
        try text.write(toFile: exp.root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
        let g = try exp.run("gate")
        #expect(g.status != 0 && g.stderr.contains("timeout_policy must be set before prepare"), "\(g.stderr)")
        #expect(try exp.rows("gate_started").isEmpty)
    }
}
