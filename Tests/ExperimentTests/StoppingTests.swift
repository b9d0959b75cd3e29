@testable import Experiment
@testable import ExperimentModel
import Foundation
import Testing
import TestSupport

// When `autoharness run` stops by itself: restarts that back off and are bounded, nothing left
// to do, and every budget in `status`.

@Suite("autoharness run: restarts, nothing left to do, budgets in status", .serialized)
struct StoppingTests {
    @Test("sessions that run nothing new (repeated gate and benchmark, refused and status requests) back off and end the run: nothing left to do, exit 3, one line of reason")
    func sessionsWithoutProgressEndTheRun() throws {
        try requireRoot()
        let exp = try Experiment()
        // The unchanged agent.py has been judged once: the agent's gate of it is a repeat.
        #expect(try exp.run("gate").status == 1)
        let script = """
            import os, subprocess, time
            start = os.environ['AUTOHARNESS_AGENT_START']
            print(f'START {start} {time.time():.3f}', flush=True)
            def ah(*a):
                r = subprocess.run(['autoharness', *a], capture_output=True, text=True)
                print(f'$ autoharness {" ".join(a)} -> {r.returncode}', flush=True)
                return r
            print('STATUS ' + start + ' ' + ah('status').stdout.replace('\\n', ' | '), flush=True)
            ah('benchmark')  # new bytes the first time only
            ah('gate')       # already judged: refused
            ah('record')     # not a verb: refused
            print(f'END {start} {time.time():.3f}', flush=True)
            """
        try exp.configureRun(command: ["python3", "-c", script], values: ["restart_backoff": "0.4", "max_restarts": "2"])
        let r = try exp.run("run", "--max-hours", "0.05")
        #expect(r.status == 3, "\(r.stdout)\n\(r.stderr)")
        let last = r.stderr.split(separator: "\n").last.map(String.init) ?? ""
        #expect(last.hasPrefix("autoharness: nothing left to do: 3 sessions of the coding agent in a row ended without progress")
                && last.hasSuffix("coding_agent.max_restarts is 2"), "\(last)")
        #expect(r.stdout.contains("coding agent started 4 time(s)"), "\(r.stdout)")

        // Each session's row says what it came to and what the run did next: the first ran a
        // benchmark of new bytes; the others nothing new, with a back-off that doubles.
        let sessions = try exp.rows("agent_session")
        #expect(sessions.map { $0["outcome"] as? String } == ["progress", "no_progress", "no_progress", "no_progress"], "\(sessions)")
        #expect(sessions.map { $0["withoutProgress"] as? Int } == [0, 1, 2, 3])
        #expect(sessions.map { $0["restartAfter"] as? Double } == [0.4, 0.4, 0.8, nil], "\(sessions)")
        #expect(sessions.allSatisfy { $0["requests"] as? Int == 4 })
        let ended = try #require(try exp.rows("run_ended").first)
        #expect(ended["nothingLeft"] as? Bool == true && (ended["reason"] as? String)?.hasPrefix("3 sessions") == true, "\(ended)")
        // The waits are real: from a session's end to the next start, at least the back-off.
        let log = exp.agentLog.split(separator: "\n")
        func times(_ tag: String) -> [Double] { log.filter { $0.hasPrefix(tag + " ") }.compactMap { Double($0.split(separator: " ")[2]) } }
        let starts = times("START"), ends = times("END")
        try #require(starts.count == 4 && ends.count == 4, "\(exp.agentLog)")
        for (i, wait) in [0.4, 0.4, 0.8].enumerated() {
            #expect(starts[i + 1] - ends[i] >= wait - 0.05, "start \(i + 2) came \(starts[i + 1] - ends[i])s after session \(i + 1) ended, not \(wait)s")
        }
        // The agent saw its budgets as the run went (and no cost account).
        let status4 = try #require(log.first { $0.hasPrefix("STATUS 4 ") }.map(String.init))
        #expect(status4.contains("budgets of this run:") && status4.contains("restarts after sessions without progress, in a row: 2 of 2 (coding_agent.max_restarts)"), "\(status4)")
        #expect(status4.contains("gates: 0 (gate.budget: no limit)") && status4.contains("crashes in a row: 0 of 5 (coding_agent.max_crashes)"), "\(status4)")
        #expect(!status4.contains("cost"), "\(status4)")
        #expect(try exp.violations().filter { $0["kind"] as? String == "repeat_gate" }.count == 4)

        // Afterwards the operator sees why the run ended and every limit a run has.
        let op = try exp.run("status", "--operator").stdout
        #expect(op.contains("last run \(ended["runID"] as? String ?? "?") stopped: nothing left to do: 3 sessions"), "\(op)")
        for line in ["budgets of each run (none open):", "  --max-iterations: no limit unless given to `autoharness run`", "  gate.budget: no limit",
                     "  gate.max_non_improving: 5", "  --max-hours: no limit unless given", "  budget.max_cost_usd: no limit",
                     "  coding_agent.max_restarts: 2", "  coding_agent.max_crashes: 5"] {
            #expect(op.contains(line), "no '\(line)' in\n\(op)")
        }
    }

    @Test("status shows every budget with what the open run used of it, as text and JSON; the coding agent's view has no cost")
    func statusShowsBudgets() throws {
        try requireRoot()
        let exp = try Experiment()
        let before = try exp.statusJSON()
        let limits = try #require(before["budgets"] as? [[String: Any]])
        #expect(limits.compactMap { $0["setting"] as? String } == ["--max-iterations", "gate.budget", "gate.max_non_improving", "--max-hours",
                                                                  "budget.max_cost_usd", "coding_agent.max_restarts", "coding_agent.max_crashes"])
        #expect(limits.allSatisfy { $0["used"] is NSNull })

        // An open run: killed while its first gate runs.
        try exp.killRunMidGate(values: ["budget": "3", "max_non_improving": "4", "max_cost_usd": "2", "max_restarts": "5"])
        let agentView = try exp.run("status").stdout
        for line in ["budgets of this run:", "  accepted gates: 0 (--max-iterations: no limit)", "  gates: 1 of 3 (gate.budget)",
                     "  rejected gates in a row: 0 of 4 (gate.max_non_improving)", "of 0.10 (--max-hours)",
                     "  restarts after sessions without progress, in a row: 0 of 5 (coding_agent.max_restarts)", "  crashes in a row: 0 of 5"] {
            #expect(agentView.contains(line), "no '\(line)' in\n\(agentView)")
        }
        #expect(!agentView.contains("cost"), "\(agentView)")
        let op = try exp.run("status", "--operator").stdout
        #expect(op.contains("  model spend (coding agent + benchmark): $0.0000 of $2.0000 (budget.max_cost_usd)"), "\(op)")
        let json = try #require(try exp.statusJSON()["budgets"] as? [[String: Any]])
        let gate = try #require(json.first { $0["setting"] as? String == "gate.budget" })
        #expect(gate["limit"] as? Double == 3 && gate["used"] as? Double == 1 && gate["spent"] as? Bool == false, "\(gate)")
        let agentJSON = try #require(try JSONSerialization.jsonObject(with: Data(exp.run("status", "--json").stdout.utf8)) as? [String: Any])
        let shown = (agentJSON["budgets"] as? [[String: Any]] ?? []).compactMap { $0["setting"] as? String }
        #expect(shown.count == 6 && !shown.contains("budget.max_cost_usd"), "\(shown)")
        // The next start ends the frozen coding agent the kill left.
        try exp.setAgent(Agents.none)
        #expect(try exp.run("benchmark", "--task-ids", try exp.split().train[0]).status == 0)
    }

    @Test("budget.max_cost_usd counts the benchmark's model spend with the coding agent's: either alone below the limit, together at it, the run stops")
    func costBudget() {
        var config = ExperimentConfig(benchmark: "local")
        config.maxCostUSD = 1
        var used = RunCounters()
        used.costUSD = 0.6
        func cost() -> RunBudget { RunBudget.all(config: config, maxIterations: nil, maxHours: nil, used: used).first { $0.kind == .maxCost }! }
        #expect(!cost().spent)
        used.benchmarkCostUSD = 0.4
        #expect(cost().spent && cost().stopReason.contains("$1.0000: the coding agent's and the benchmark's model spend"))
        #expect(!cost().agentMaySee, "the cost account stays the operator's")
    }

    @Test("the back-off doubles from the second session in a row without progress and stops at 300 s")
    func backoffDoublesAndIsCapped() {
        #expect([0, 1, 2, 3, 4, 9, 10, 1000].map { RunLoop.backoff(base: 2, streak: $0) } == [2, 2, 4, 8, 16, 300, 300, 300])
        #expect(RunLoop.backoff(base: 0, streak: 5) == 0)
    }

    @Test("a session is progress if it ran anything new, however it ended; otherwise a quick failing or silent exit is a crash, the rest no progress")
    func sessionOutcome() {
        func o(_ s: Double, clean: Bool, requests: Int, progress: Bool) -> SessionOutcome {
            RunLoop.outcome(seconds: s, clean: clean, requests: requests, progress: progress, quickExit: 30)
        }
        #expect(o(1, clean: false, requests: 3, progress: true) == .progress)
        #expect(o(1, clean: false, requests: 3, progress: false) == .crash)
        #expect(o(1, clean: true, requests: 0, progress: false) == .crash)
        #expect(o(1, clean: true, requests: 2, progress: false) == .noProgress)
        #expect(o(600, clean: true, requests: 0, progress: false) == .noProgress)
    }
}

@Suite("Config inputs: coding_agent.max_restarts")
struct MaxRestartsConfigTests {
    static let config = "benchmark: local\ndataset: d\ncoding_agent:\n  command: [agent]\n  max_restarts: %@\n"

    @Test("max_restarts is a whole number from 0 to 1000; anything else is refused at its line", arguments: ["-1", "1001", "two", "1.5", "\"\""])
    func refused(value: String) throws {
        do {
            _ = try ExperimentConfig.parse(Self.config.replacingOccurrences(of: "%@", with: value), file: "exp/experiment_config.yaml")
            Issue.record("max_restarts: \(value) was accepted")
        } catch let e as ConfigErrors {
            #expect("\(e)".hasPrefix("exp/experiment_config.yaml:5: coding_agent.max_restarts: "), "\(e)")
        }
    }

    @Test("max_restarts defaults to 3 and takes 0 (no restart after a session without progress)")
    func accepted() throws {
        #expect(try ExperimentConfig.parse("benchmark: local\ndataset: d\n", file: "c").codingAgent.maxRestarts == 3)
        #expect(try ExperimentConfig.parse(Self.config.replacingOccurrences(of: "%@", with: "0"), file: "c").codingAgent.maxRestarts == 0)
    }
}
