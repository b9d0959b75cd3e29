import Benchmark
@testable import Experiment
@testable import ExperimentModel
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

    @Test("val_score counts every task of the split, a timeout 0; infra's operator view is the mean over the tasks that finished and how many timed out")
    func val() {
        let run = [Self.o("a", 1), Self.o("b", 0, timedOut: true), Self.o("c", 0), TaskOutcome(id: "d", reward: 0, status: .verifierTimeout)]
        #expect(HeldOutScore.val(Self.test, run) == 0.25)
        let f = HeldOutScore.finished(Self.test, run)
        #expect(f.val == 0.5 && f.timedOut == 2)
        #expect(HeldOutScore.val(Self.test, []) == 0, "a task with no outcome counts 0")
        #expect(HeldOutScore.finished(Self.test, []).timedOut == 0, "and is no timeout")
        #expect(HeldOutScore.finished(["a"], [Self.o("a", 0, timedOut: true)]).val == nil)
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

    @Test("end to end under infra: a candidate that sleeps past the tasks it would fail is judged on every task (rejected, although its finished tasks all pass); only the operator sees the finished-task mean and the timeouts")
    func infraGate() throws {
        try requireRoot()
        let data = try TempDir()
        let exp = try Experiment(config: ["timeout_policy": "infra", "min_improvement": "0"], dataset: try Self.quickTimeouts(data))
        let split = try exp.split()
        let mulTests = split.test.filter { $0.hasPrefix("mul") }.count
        try #require(mulTests > 0 && mulTests < split.test.count, "the fixture's split has both kinds in test: \(split.test)")

        try exp.setAgent(Self.addAgent(sleepOnMultiply: false))
        let g1 = try exp.run("gate")
        #expect(g1.status == 0, "\(g1.stdout)")

        // Same additions, multiplications slept through: over the finished tasks 1.0 against
        // 0.5, over the split a tie.
        try exp.setAgent(Self.addAgent(sleepOnMultiply: true))
        let g2 = try exp.run("gate")
        #expect(g2.status == 1 && g2.stdout.contains("REJECTED") && g2.stdout.contains("did not beat the best"), "\(g2.stdout)")
        let attempt2 = try #require(try exp.rows("gate_attempt").last)
        let half = Double(split.test.count - mulTests) / Double(split.test.count)
        #expect(attempt2["valScore"] as? Double == half && attempt2["valScoreFinished"] as? Double == 1.0
                && attempt2["heldOutTimedOut"] as? Int == mulTests, "\(attempt2)")
        // The coding agent's answer and status carry neither the finished-task mean nor the
        // count (a count of held-out tasks with whatever property agent.py slept on).
        for text in [g2.stdout + g2.stderr, try exp.run("status").stdout, try exp.run("status", "--json").stdout] {
            #expect(!text.contains("1.00") && !text.contains("timeout"), "\(text)")
        }
        let op = try exp.run("status", "--operator").stdout
        #expect(op.contains("timeout_policy infra: gate attempt 2 had \(mulTests) held-out timeout(s); over the tasks that finished 1.0000"), "\(op)")

        try exp.setAgent(Agents.all)
        let g3 = try exp.run("gate")
        #expect(g3.status == 0, "\(g3.stdout)")
    }
}
