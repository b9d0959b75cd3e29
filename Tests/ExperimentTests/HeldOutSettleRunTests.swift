import Foundation
import Testing
import TestSupport

/// The clean-up after a held-out phase fails closed, through the real commands: a debug
/// build's `AUTOHARNESS_TEST_NOISE_FAILS` makes the counter noise fail as a host at its
/// process limit would.
@Suite("Held-out clean-up fails closed, end to end")
struct HeldOutSettleRunTests {
    static var failingNoise: [String: String] {
        var env = ProcessInfo.processInfo.environment
        env["AUTOHARNESS_TEST_NOISE_FAILS"] = "1"
        return env
    }

    @Test("a gate whose clean-up failed records nothing of its held-out phase and leaves the clean-up owed; every start retries it and refuses to go on until it succeeds")
    func gateFailsClosed() throws {
        try requireRoot()
        let exp = try Experiment()
        let journal = exp.root + "/.autoharness/held-out-sources"
        let g = try autoharness(["gate", "-C", exp.root], environment: Self.failingNoise)
        #expect(g.status != 0 && g.stderr.contains("moving the host's counters failed"), "\(g.stdout)\n\(g.stderr)")
        #expect(!g.stdout.contains("val_score"), "\(g.stdout)")
        #expect(FileManager.default.fileExists(atPath: journal), "the clean-up is owed")
        let (train, _) = try exp.split()
        let refused = try autoharness(["benchmark", "--task-ids", train[0], "-C", exp.root], environment: Self.failingNoise)
        #expect(refused.status != 0 && refused.stderr.contains("the clean-up of a held-out run is still owed"), "\(refused.stdout)\n\(refused.stderr)")
        #expect(FileManager.default.fileExists(atPath: journal))
        let s = try exp.run("benchmark", "--task-ids", train[0])
        #expect(s.status == 0 || s.status == 1, "\(s.stdout)\n\(s.stderr)")
        #expect(s.stderr.contains("a held-out run was cut off"), "\(s.stderr)")
        #expect(!FileManager.default.fileExists(atPath: journal), "done once the noise succeeds")
    }

    @Test("during a run, a gate whose clean-up failed ends the frozen coding agent instead of thawing it, and the run stops")
    func agentEndedNotThawed() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.configureRun(command: ["python3", Fixtures.agents + "/gate_then_run_on.py"])
        let r = try runProcess(Built.autoharness, ["run", "--max-hours", "0.1", "-C", exp.root], environment: Self.failingNoise)
        let log = exp.agentLog
        #expect(log.contains("GATE-REQUESTED"), "\(log)")
        #expect(!log.contains("THAWED") && !log.contains("STILL-RUNNING"), "the agent ran on after a failed clean-up: \(log)")
        #expect(r.stderr.contains("the coding agent was ended rather than thawed"), "\(r.stdout)\n\(r.stderr)")
        #expect(try exp.rows("note").contains { ($0["text"] as? String)?.contains("ended rather than thawed") == true })
        #expect(FileManager.default.fileExists(atPath: exp.root + "/.autoharness/held-out-sources"))
        // Not restarted: one start of the agent.
        #expect(log.components(separatedBy: "GATE-REQUESTED").count == 2, "\(log)")
        expectNothingLeft(exp, marker: Fixtures.agents + "/gate_then_run_on.py")
    }
}
