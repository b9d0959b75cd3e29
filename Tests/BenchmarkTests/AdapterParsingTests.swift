@testable import Benchmark
import Foundation
import Testing

@Suite("Adapter parsing of untrusted tool output")
struct AdapterParsingTests {
    @Test("nesting deeper than the limit is refused before the recursive decoder sees it; normal JSON parses")
    func depth() {
        let deep = [UInt8](repeating: UInt8(ascii: "["), count: 1_000_000) + [UInt8](repeating: UInt8(ascii: "]"), count: 1_000_000)
        #expect(JSONValue.parse(deep) == nil)
        let ok = Array("{\"a\": [1, {\"b\": \"[[[[\"}], \"c\": null}".utf8)
        #expect(JSONValue.parse(ok)?["a"]?.array?.count == 2)
        #expect(JSONValue.depth(Array("\"[[[[\\\"[[\"".utf8)) == 0)
    }

    @Test("trace names: safe ids unchanged, anything else percent-encoded, never a path")
    func traceNames() {
        #expect(TraceName.encode("task-1.a_b") == "task-1.a_b")
        #expect(TraceName.encode("../etc") == "%2E.%2Fetc")
        #expect(TraceName.encode("[x]|y z") == "%5Bx%5D%7Cy%20z")
        #expect(!TraceName.encode("a/b").contains("/"))
        #expect(TraceName.isAcceptableID("[mobile]airplane|x") && !TraceName.isAcceptableID("a\nb") && !TraceName.isAcceptableID(""))
    }

    @Test("a key named twice in one object is found as Python's json compares keys; the same key in different objects is not")
    func duplicateKeys() {
        func duplicate(_ s: String) -> String? { JSONValue.firstDuplicateKey(Array(s.utf8)) }
        #expect(duplicate(#"{"reward": 1, "reward": 0}"#) == "reward")
        #expect(duplicate(#"{"rew\u0061rd": 1, "reward": 0}"#) == "reward")
        #expect(duplicate(#"{"a": {"x": 1, "x": 2}}"#) == "x")
        #expect(duplicate(#"{"\ud83d\ude00": 1, "😀": 2}"#) == "😀")
        #expect(duplicate(#"{"a": [{"b": 1}], "c": {"d": 1}, "c": 2}"#) == "c")
        #expect(duplicate(#"{"a": {"reward": 0}, "reward": 1}"#) == nil)
        #expect(duplicate(#"[{"a": 1}, {"a": 2}]"#) == nil)
        #expect(duplicate(#"{"a": ["a", "a"], "b": "a"}"#) == nil)
        #expect(duplicate(#"{"a\"": 1, "a": 2}"#) == nil)
        #expect(duplicate(#"{"é": 1, "e\u0301": 2}"#) == nil, "different code points are different keys in Python")
        #expect(JSONValue.parse(Array(#"{"reward": 1, "reward": 0}"#.utf8)) == nil)
        #expect(JSONValue.parse(Array(#"{"a": {"reward": 0}, "reward": 1}"#.utf8))?["reward"] == .number(1))
        switch Reward.parseJSON(Array(#"{"rew\u0061rd": 1, "reward": 0}"#.utf8)) {
        case .failure(let e): #expect(e.message == #"key "reward" appears twice in one object (which one counts is ambiguous)"#)
        case .success(let v): Issue.record("an escaped repeat of reward was accepted: \(v)")
        }
    }

    @Test("a tool's rewards.json over its cap, or naming a task twice, scores every task 0 and says why")
    func commandRewardsRefused() throws {
        let (dir, fd) = try Self.outputDirectory(holdingSparse: "rewards.json", bytes: 17 << 20)
        defer { close(fd) }
        let big = CommandAdapter.parse(fd, ids: ["a", "b"], traces: false)
        #expect(big.count == 2)
        for r in big.values {
            #expect(r.status == .missingResult && r.reward == 0)
            #expect(r.detail == "rewards.json: 17825792 bytes (17 MiB), over the 16 MiB cap for a tool's rewards file", "\(r.detail ?? "")")
        }
        try dir.file("rewards.json", #"{"a": 1, "b": 1, "a": 0}"#)
        let twice = CommandAdapter.parse(fd, ids: ["a", "b"], traces: false)
        #expect(twice.count == 2 && twice.values.allSatisfy { $0.status == .missingResult && $0.reward == 0 })
        #expect(twice["b"]?.detail == "rewards.json names \"a\" twice (which value counts is ambiguous)", "\(twice)")
    }

    @Test("a Harbor trial's result.json over its cap is refused by size, and the tasks without a readable trial say so")
    func harborResultRefused() throws {
        let (dir, fd) = try Self.outputDirectory(holdingSparse: "jobs/job-1/t1__abc/result.json", bytes: 17 << 20)
        defer { close(fd) }
        let parsed = withExtendedLifetime(dir) { HarborAdapter.parse(fd, ids: ["t1"], traces: false) }
        let r = try #require(parsed.results["t1"])
        #expect(r.status == .missingResult && r.reward == 0)
        #expect(r.detail == "no readable trial; 1 trial result file(s) refused, the first: a trial's result.json: 17825792 bytes (17 MiB), over the 16 MiB cap for a trial's result", "\(r.detail ?? "")")
    }

    @Test("the tools' own model spend: Harbor's agent_result (or its steps'), a command's costs.json; anything not a finite non-negative number is no cost")
    func costs() throws {
        func harbor(_ s: String) -> Double? { HarborAdapter.cost(JSONValue.parse(Array(s.utf8))!) }
        #expect(harbor(#"{"agent_result": {"n_input_tokens": 10, "cost_usd": 0.42}}"#) == 0.42)
        #expect(harbor(#"{"agent_result": null, "step_results": [{"agent_result": {"cost_usd": 0.5}}, {"agent_result": null}, {"agent_result": {"cost_usd": 0.25}}]}"#) == 0.75)
        #expect(harbor(#"{"agent_result": {"cost_usd": null}}"#) == nil)
        #expect(harbor(#"{"agent_result": {"cost_usd": -1}}"#) == nil && harbor(#"{"agent_result": {"cost_usd": 1e300}}"#) == nil)
        #expect(harbor(#"{"verifier_result": {}}"#) == nil)

        let dir = try TempDir()
        let fd = open(dir.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        defer { close(fd) }
        try dir.file("rewards.json", #"{"a": 1, "b": 0, "c": 1}"#)
        try dir.file("costs.json", #"{"a": 0.125, "b": "lots", "c": -3, "x": 9}"#)
        let r = CommandAdapter.parse(fd, ids: ["a", "b", "c"], traces: false)
        #expect(r["a"]?.costUSD == 0.125 && r["b"]?.costUSD == nil && r["c"]?.costUSD == nil && r["x"] == nil)
        var o = [TaskOutcome(id: "a", reward: 1, status: .passed), TaskOutcome(id: "b", reward: 0, status: .failed)]
        #expect(TaskOutcome.cost(o) == nil, "no cost reported is not $0")
        o[0].costUSD = 0.125
        #expect(TaskOutcome.cost(o) == 0.125)
        #expect(!String(decoding: try TraceJSON.encode(o[0]), as: UTF8.self).contains("cost"), "never in a trace")
    }

    /// A tool's output directory (and an fd for it) holding a sparse file of `bytes` bytes.
    static func outputDirectory(holdingSparse name: String, bytes: Int) throws -> (TempDir, Int32) {
        let dir = try TempDir()
        #expect(truncate(try dir.file(name, ""), off_t(bytes)) == 0)
        return (dir, open(dir.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC))
    }

    @Test("secrets are redacted wherever they occur verbatim")
    func redaction() {
        let out = ToolRun.redact(Array("k=sk-123456789 and sk-123456789!".utf8), [("KEY", Array("sk-123456789".utf8))])
        #expect(String(decoding: out, as: UTF8.self) == "k=[KEY] and [KEY]!")
    }
}
