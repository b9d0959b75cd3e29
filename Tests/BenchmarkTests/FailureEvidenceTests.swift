@testable import Benchmark
import Foundation
import Sandbox
import SandboxPolicy
import Testing

// Failure evidence: each parser on the shape its upstream writes, the caps every string goes
// through, and the local runner reading a verifier's CTRF report for train runs only.

@Suite("Failure evidence from the benchmarks' own results")
struct FailureEvidenceTests {
    /// A failed test as pytest-json-ctrf 0.3.5 serialises it (ctrf/TestObject.py: name without
    /// parameters, message from the phase, trace = longreprtext).
    static let ctrfReport = #"""
        {"results": {"tool": {"name": "pytest"}, "summary": {"tests": 3, "passed": 1, "failed": 2, "skipped": 0, "pending": 0, "other": 0, "start": 1, "stop": 2},
         "tests": [
          {"name": "tests/test_outputs.py::test_exists", "status": "passed", "duration": 1.2, "file_path": "tests/test_outputs.py"},
          {"name": "tests/test_outputs.py::test_value", "status": "failed", "raw_status": "call_failed", "duration": 3.1,
           "message": "The test failed in the call phase due to an assertion error",
           "trace": "def test_value():\n        got = open('/app/out.txt').read()\n>       assert got == '42', f'expected 42, got {got}'\nE       AssertionError: expected 42, got 41\nE       assert '41' == '42'\n\ntests/test_outputs.py:9: AssertionError"},
          {"name": "tests/test_outputs.py::test_file", "status": "failed", "raw_status": "call_failed",
           "message": "The test failed in the call phase due to an exception",
           "trace": ">       open('/app/missing.txt')\nE       FileNotFoundError: [Errno 2] No such file or directory: '/app/missing.txt'\n\ntests/test_outputs.py:14: FileNotFoundError"}
         ]}}
        """#

    @Test("CTRF: each failed test is a check named as pytest names it, its exception the class, pytest's E lines the excerpt")
    func ctrf() throws {
        let failures = try #require(FailureParsers.ctrf(Array(Self.ctrfReport.utf8)))
        #expect(failures.map(\.check) == ["tests/test_outputs.py::test_value", "tests/test_outputs.py::test_file"])
        #expect(failures.map(\.errorClass) == ["AssertionError", "FileNotFoundError"])
        #expect(failures[0].excerpt == "AssertionError: expected 42, got 41 ⏎ assert '41' == '42'")
        #expect(failures[1].excerpt.hasPrefix("FileNotFoundError: [Errno 2] No such file"))
        // Only the message to go on: pytest-json-ctrf's wording still names the class.
        let bare = try #require(FailureParsers.ctrf(Array(#"{"results": {"tests": [{"name": "t", "status": "failed", "message": "The test failed in the call phase due to an assertion error"}]}}"#.utf8)))
        #expect(bare == [FailureEvidence(check: "t", errorClass: "AssertionError", excerpt: "The test failed in the call phase due to an assertion error")])
        #expect(FailureParsers.ctrf(Array(#"{"tests": []}"#.utf8)) == nil, "not a CTRF report")
        #expect(FailureParsers.ctrf(Array("not json".utf8)) == nil)
    }

    @Test("tau2: the failed checks of the components reward_basis counts, with what was expected; a premature end says so")
    func tau2() throws {
        // RewardInfo.model_dump_json as tau2's scorer writes it (src/tau2/data_model/simulation.py).
        let info = #"""
            {"reward": 0.0, "reward_basis": ["DB", "COMMUNICATE"],
             "db_check": {"db_match": false, "db_reward": 0.0},
             "env_assertions": null,
             "action_checks": [{"action": {"action_id": "a1", "requestor": "assistant", "name": "cancel_reservation", "arguments": {"reservation_id": "EHGLP3"}, "info": null},
                                "action_match": false, "action_reward": 0.0}],
             "nl_assertions": null,
             "communicate_checks": [{"info": "refund of 240 dollars", "met": false, "justification": "not said"},
                                    {"info": "the flight number", "met": true, "justification": "said"}],
             "reward_breakdown": {"DB": 0.0, "COMMUNICATE": 0.0}, "info": null}
            """#
        let failures = try #require(FailureParsers.tau2(Array(info.utf8)))
        #expect(failures.map(\.check) == ["db", "communicate"], "ACTION is not in reward_basis: its failed check did not make the task fail")
        #expect(failures[0].errorClass == "db_mismatch")
        #expect(failures[1] == FailureEvidence(check: "communicate", errorClass: "info_not_communicated",
                                               excerpt: "expected the agent to tell the user: refund of 240 dollars"))
        // No basis named: every failed check counts.
        let all = try #require(FailureParsers.tau2(Array(info.replacingOccurrences(of: #""reward_basis": ["DB", "COMMUNICATE"],"#, with: "").utf8)))
        #expect(all.map(\.check) == ["db", "action cancel_reservation", "communicate"])
        #expect(all[1].excerpt == #"expected assistant call cancel_reservation("reservation_id":"EHGLP3")"#)
        // tau2's evaluator on a premature termination: reward 0 and a note, no checks.
        let early = try #require(FailureParsers.tau2(Array(#"{"reward": 0.0, "info": {"note": "Simulation terminated prematurely. Termination reason: max_steps"}}"#.utf8)))
        #expect(early == [FailureEvidence(check: "simulation", errorClass: "premature_termination",
                                          excerpt: "Simulation terminated prematurely. Termination reason: max_steps")])
        #expect(FailureParsers.tau2(Array(#"{"simulations": []}"#.utf8)) == nil)
    }

    @Test("Harbor: the trial's exception_info is a check of its own; BIRD: the phase that never passed, with the environment's last verdict")
    func harborAndBird() throws {
        let result = try #require(JSONValue.parse(Array(#"""
            {"task_name": "t", "exception_info": {"exception_type": "AgentTimeoutError", "exception_message": "Agent execution timed out after 600.0 seconds",
             "exception_traceback": "Traceback ...", "occurred_at": "2026-11-25T10:00:00"}}
            """#.utf8)))
        #expect(FailureParsers.harborException(result) == FailureEvidence(check: "trial", errorClass: "AgentTimeoutError",
                                                                         excerpt: "Agent execution timed out after 600.0 seconds"))
        #expect(FailureParsers.harborException(try #require(JSONValue.parse(Array(#"{"exception_info": null}"#.utf8)))) == nil)

        func sub(_ phase: Double?, _ passed: Bool, _ message: String) -> JSONValue {
            .object(["task_id": .string("b1"), "phase": phase.map(JSONValue.number) ?? .null, "passed": .bool(passed), "reward": .number(passed ? 0.7 : 0), "message": .string(message)])
        }
        #expect(FailureParsers.bird([sub(nil, false, "Test case 1 failed: row count 3 != 5"), sub(nil, false, "syntax error at or near SELEC")])
                == [FailureEvidence(check: "phase 1", errorClass: "phase1_not_passed", excerpt: "2 submission(s), 2 not accepted; last: syntax error at or near SELEC")])
        #expect(FailureParsers.bird([sub(1, true, "ok"), sub(nil, false, "follow-up: wrong columns")])
                == [FailureEvidence(check: "phase 2", errorClass: "phase2_not_passed", excerpt: "2 submission(s), 1 not accepted; last: follow-up: wrong columns")])
    }

    @Test("bfcl: the checker's error type is the class, its check the part before the colon; a parallel check's per-call sub-errors join its message; a passing verdict is none")
    func bfcl() throws {
        let simple = Array(#"{"valid": false, "category": "simple_python", "error_type": "type_error:simple", "error": ["Incorrect type for parameter 'x'. Expected type integer, got str. Parameter value: '4'."]}"#.utf8)
        #expect(FailureParsers.bfcl(simple) == [FailureEvidence(check: "type_error", errorClass: "type_error:simple",
                                                               excerpt: "Incorrect type for parameter 'x'. Expected type integer, got str. Parameter value: '4'.")])
        let parallel = Array(#"""
            {"valid": false, "error_type": "parallel_function_checker_no_order:cannot_find_match",
             "error": ["Could not find a matching function among index [1] of model output for index 1 of possible answers.",
                       {"Model Result Index 1": {"sub_error": ["Unexpected parameter: 'permeability'."], "sub_error_type": "simple_function_checker:unexpected_param"}}]}
            """#.utf8)
        #expect(FailureParsers.bfcl(parallel) == [FailureEvidence(
            check: "parallel_function_checker_no_order", errorClass: "parallel_function_checker_no_order:cannot_find_match",
            excerpt: "Could not find a matching function among index [1] of model output for index 1 of possible answers. Unexpected parameter: 'permeability'.")])
        #expect(FailureParsers.bfcl(Array(#"{"valid": true, "error_type": null, "error": []}"#.utf8)) == nil)
        #expect(FailureParsers.bfcl(Array("not json".utf8)) == nil)
    }

    @Test("inspect: the scorer is the check, its value the class, the answer and target the excerpt (with the explanation's last lines); an unscored sample says why")
    func inspect() throws {
        let verdict = Array(#"{"scorer": "inspect_ai/includes", "value": "I", "reward": 0.0, "answer": "pantry", "explanation": "line one\nline two", "target": "bathtub"}"#.utf8)
        #expect(FailureParsers.inspect(verdict) == [FailureEvidence(check: "inspect_ai/includes", errorClass: "value I",
                                                                   excerpt: "answered \"pantry\", target \"bathtub\"; line one\nline two")])
        let numeric = Array(#"{"scorer": "custom", "value": 0.25, "reward": 0.25, "answer": null, "explanation": null, "target": ["a", "b"]}"#.utf8)
        #expect(FailureParsers.inspect(numeric)?.first?.errorClass == "value 0.25")
        let raised = Array(#"{"error": "the solver raised: ValueError: no idea"}"#.utf8)
        #expect(FailureParsers.inspect(raised) == [FailureEvidence(check: "solve", errorClass: "not_scored", excerpt: "the solver raised: ValueError: no idea")])
        #expect(FailureParsers.inspect(Array("[1]".utf8)) == nil)
        #expect(FailureParsers.inspect(Array("not json".utf8)) == nil)
    }

    @Test("command: failures.json entries for requested ids only, malformed ones skipped")
    func command() {
        let bytes = Array(#"{"a": [{"check": "unit test 3", "error_class": "ValueError", "message": "bad"}, {"nope": 1}], "zz": [{"check": "x"}], "b": "text"}"#.utf8)
        let parsed = FailureParsers.command(bytes, ids: ["a", "b"])
        #expect(parsed == ["a": [FailureEvidence(check: "unit test 3", errorClass: "ValueError", excerpt: "bad")]])
    }

    @Test("every field is one escaped, capped line; more than eight failing checks are counted, not kept")
    func caps() {
        let e = FailureEvidence(check: "a\u{1b}[31mred\nline", errorClass: String(repeating: "E", count: 500), excerpt: String(repeating: "x ", count: 1000))
        #expect(e.check == "a\\x1b[31mred ⏎ line")
        #expect(e.errorClass.count == FailureEvidence.maxErrorClass + 1 && e.errorClass.hasSuffix("…"))
        #expect(e.excerpt.count <= FailureEvidence.maxExcerpt + 1 && !e.excerpt.contains("  "))
        #expect(FailureEvidence(check: "", errorClass: "", excerpt: "").check == "task")
        let many = (0..<12).map { FailureEvidence(check: "t\($0)", errorClass: "E", excerpt: "m") }
        let kept = FailureEvidence.bounded(many)
        #expect(kept.count == FailureEvidence.maxPerTask && kept.last?.excerpt == "m (and 4 more failing checks)")
    }

    /// A one-task local benchmark whose verifier writes a CTRF report naming `marker`.
    static func ctrfTask(_ dir: TempDir, marker: String) throws -> BenchmarkTask {
        try dir.file("tasks/t1/instruction.md", "Write 42 to answer.txt.\n")
        try dir.file("tasks/t1/tests/test.sh", """
            #!/bin/bash
            cat > /logs/verifier/ctrf.json <<'EOF'
            {"results": {"tests": [{"name": "tests/test_outputs.py::test_answer", "status": "failed",
              "message": "The test failed in the call phase due to an assertion error",
              "trace": "E       AssertionError: expected 42 (\(marker))\\ntests/test_outputs.py:3: AssertionError"}]}}
            EOF
            echo 0 > /logs/verifier/reward.txt
            """, mode: 0o755)
        return BenchmarkTask(id: "t1", directory: dir.path + "/tasks/t1", agentTimeout: 20, verifierTimeout: 20,
                             agentTimeoutDeclared: true, verifierTimeoutDeclared: true)
    }

    @Test("the local adapter asks for evidence on train runs only: a held-out run's outcomes carry none")
    func localAdapter() throws {
        try requireRoot()
        let dir = try TempDir()
        let marker = uniqueMarker("CTRF")
        _ = try Self.ctrfTask(dir, marker: marker)
        try dir.file("tasks/t1/task.toml", "[agent]\ntimeout_sec = 20\n\n[verifier]\ntimeout_sec = 20\n")
        let adapter = LocalAdapter(benchmark: try LocalBenchmark(directory: dir.path))
        let agent = try makeAgent(solverAgentSource(wrong: true))
        let scratch = try makeScratchRoot()
        func run(heldOut: Bool) throws -> TaskOutcome {
            let context = AdapterRunContext(policyLoader: PolicyLoader(searchPaths: [Paths.policies]), agentDirectory: agent.path,
                                            scratchRoot: scratch.path, audit: AuditLog(), heldOut: heldOut, concurrency: 1, traceDirectory: { _ in nil })
            return try #require(try adapter.run(["t1"], context).first)
        }
        let train = try run(heldOut: false)
        #expect(train.status == .failed && train.failures?.first?.excerpt.contains(marker) == true, "\(train)")
        let heldOut = try run(heldOut: true)
        #expect(heldOut.status == .failed && heldOut.failures == nil, "\(heldOut)")
    }

    @Test("the local runner reads the verifier's logs/ctrf.json when asked (train runs) and never otherwise (held-out runs)")
    func localRunner() throws {
        try requireRoot()
        let dir = try TempDir()
        let marker = uniqueMarker("CTRF")
        let task = try Self.ctrfTask(dir, marker: marker)
        let train = try Harness(agent: solverAgentSource(wrong: true), configure: { $0.collectFailures = true })
        let o = train.run(task)
        #expect(o.status == .failed)
        #expect(o.failures == [FailureEvidence(check: "tests/test_outputs.py::test_answer", errorClass: "AssertionError",
                                               excerpt: "AssertionError: expected 42 (\(marker))")], "\(o)")
        let heldOut = try Harness(agent: solverAgentSource(wrong: true), configure: { $0.collectFailures = false })
        let h = heldOut.run(task)
        #expect(h.status == .failed && h.failures == nil, "a held-out run collected evidence: \(h)")
    }
}
