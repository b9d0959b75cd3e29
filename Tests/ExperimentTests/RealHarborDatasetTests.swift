import Foundation
import Testing
import TestSupport

/// The real Harbor (scripts/install-harbor) with a registry dataset from a local registry.json
/// (Harbor's JsonRegistryClient: no network), per_task_timeout, task names in Harbor's forms,
/// and the template agent.py against a fake model server. A missing install fails the test.
@Suite("Real Harbor: registry datasets, per_task_timeout, the template agent", .serialized)
struct RealHarborDatasetTests {
    /// `count` tasks like RealHarborTests' (verifier compares /app/out.txt with the seed),
    /// `[task] name = "autoharness-test/<id>"`, an agent timeout of 60 s.
    static func tasks(in dir: String, prefix: String, count: Int, sleep: Bool) throws -> [String] {
        var ids: [String] = []
        for k in 1...count {
            let id = "\(prefix)-\(k)"
            ids.append(id)
            let t = dir + "/" + id
            for d in ["environment", "tests"] { try FileManager.default.createDirectory(atPath: t + "/" + d, withIntermediateDirectories: true) }
            try "schema_version = \"1.4\"\n\n[task]\nname = \"autoharness-test/\(id)\"\n\n[agent]\ntimeout_sec = 60.0\n\n[verifier]\ntimeout_sec = 30.0\n"
                .write(toFile: t + "/task.toml", atomically: true, encoding: .utf8)
            try "Copy the word in /app/seed.txt into /app/out.txt.\(sleep ? " SLEEP" : "")\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
            try "FROM ubuntu:24.04\nWORKDIR /app\n".write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
            try "word-\(k)\n".write(toFile: t + "/environment/seed.txt", atomically: true, encoding: .utf8)
            try "#!/bin/bash\nif cmp -s /app/seed.txt /app/out.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
                .write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
        }
        return ids
    }

    func configure(_ exp: Experiment) throws {
        try exp.set("env_provider", "local")
        try exp.set("env_pass", "[]", in: "runner")
        try exp.set("allow", "[]", in: "runner")
        try exp.set("min_improvement", "0")
    }

    @Test("dataset name@version from a local registry.json: Harbor runs the registry's tasks; per_task_timeout stops an agent Harbor would have let run 60 s; --task-ids in Harbor's name forms")
    func registryAndTimeout() throws {
        try requireRoot()
        let harbor = try RealHarborTests.harbor()
        let data = try TempDir(mode: 0o755)
        let ids = try Self.tasks(in: data.path + "/tasks", prefix: "slow", count: 4, sleep: true)
        let registry: [[String: Any]] = [["name": "ah-local", "version": "1.0", "description": "generated",
                                          "tasks": ids.map { ["name": $0, "path": data.path + "/tasks/" + $0] }],
                                         ["name": "ah-local", "version": "0.9", "description": "older", "tasks": [] as [Any]]]
        try JSONSerialization.data(withJSONObject: registry).write(to: URL(fileURLWithPath: data.path + "/registry.json"))

        let exp = try Experiment(benchmark: "terminal-bench", extraArgs: ["--tool", harbor, "--dataset", "ah-local@1.0", "--registry-path", data.path + "/registry.json"])
        defer { exp.removeScratch() }
        let config = try exp.file("experiment_config.yaml")
        #expect(config.contains("dataset: ah-local@1.0") && config.contains("registry_path: \(data.path)/registry.json"), "\(config.prefix(600))")
        try configure(exp)
        try exp.set("agent_model", "none")
        try (try exp.file("experiment_config.yaml")).replacingOccurrences(of: "# per_task_timeout: 600", with: "per_task_timeout: 3")
            .write(toFile: exp.root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
        // Writes its answer, then sleeps 30 s: within the tasks' own 60 s, past per_task_timeout.
        try exp.setAgent(RealHarborTests.agent(solves: true))

        let started = Date()
        let p = try exp.run(["prepare"], environment: [:])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 4/4 tasks pass"), "\(p.stdout)\(p.stderr)")
        #expect(Date().timeIntervalSince(started) < 4 * 30, "the agents were not stopped at per_task_timeout")
        let split = try exp.split()
        #expect(Set(split.train + split.test) == Set(ids))

        let b = try exp.run(["benchmark"], environment: [:])
        #expect(b.status == 0, "\(b.stdout)\(b.stderr)")
        for id in split.train {
            let result = try #require(exp.traceFile(traceName(id), "harbor-result.json"), "no Harbor result for \(id): \(b.stderr)")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(result.utf8)) as? [String: Any])
            #expect(json["task_name"] as? String == "autoharness-test/\(id)")
            #expect(json["source"] as? String == "ah-local", "a registry run: \(json["source"] ?? "nil")")
            let e = json["exception_info"] as? [String: Any]
            #expect(e?["exception_type"] as? String == "AgentTimeoutError", "\(result.prefix(600))")
            #expect((e?["exception_message"] as? String)?.contains("timed out after 3.0 seconds") == true, "\(e ?? [:])")
        }

        let one = try #require(split.train.sorted().first)
        for given in ["autoharness-test/\(one)", "autoharness-test/\(one)@1.0"] {
            let r = try exp.run(["benchmark", "--task-ids", given], environment: [:])
            #expect(r.status == 0 && r.stdout.contains("train: 1/1 passed"), "\(given): \(r.stdout)\(r.stderr)")
        }
        #expect(exp.scratchMounts().isEmpty)
        let violations = try exp.rows("violation")
        #expect(violations.isEmpty, "\(violations)")
    }

    @Test("the template agent.py under the real harbor: without a key each trial fails with 'no API key'; with one it solves tasks through the model's bash tool calls")
    func templateAgent() throws {
        try requireRoot()
        let harbor = try RealHarborTests.harbor()
        let data = try TempDir(mode: 0o755)
        _ = try Self.tasks(in: data.path, prefix: "hello", count: 3, sleep: false)
        let exp = try Experiment(benchmark: "terminal-bench", extraArgs: ["--tool", harbor, "--dataset", data.path])
        defer { exp.removeScratch() }
        #expect(try exp.file("agent/agent.py").contains("class HarnessAgent(BaseAgent)"))
        try configure(exp)
        try exp.set("agent_model", "anthropic/claude-fake")

        let p = try exp.run(["prepare"], environment: [:])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/3 tasks pass"), "\(p.stdout)\(p.stderr)")
        let train = try exp.split().train
        var b = try exp.run(["benchmark"], environment: [:])
        #expect(b.status == 0, "\(b.stdout)\(b.stderr)")
        for id in train {
            let ours = try #require(exp.traceFile(traceName(id), "result.json"), "no trace for \(id)")
            #expect(ours.contains("no API key: ANTHROPIC_API_KEY is not set"), "\(ours)")
        }

        // Each task: one bash call that solves it, then a final answer.
        let solve: [[String: Any]] = [["tool": "bash", "input": ["command": "cp seed.txt out.txt && cat out.txt"]]]
        let model = try FakeModel(turns: Array(repeating: [solve, [["text": "done"]]], count: 10).flatMap { $0 })
        var config = try exp.file("experiment_config.yaml")
        config = config.replacingOccurrences(of: "\n  binds: [", with: "\n  binds: [\"\(model.certs)\", ")
        try config.write(toFile: exp.root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
        try exp.set("env_pass", "[ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, SSL_CERT_FILE]", in: "runner")
        try exp.set("allow", "[\"\(model.address)\"]", in: "runner")
        let env = ["ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": "https://\(model.address)", "SSL_CERT_FILE": model.caFile]
        b = try exp.run(["benchmark"], environment: env)
        #expect(b.status == 0, "\(b.stdout)\(b.stderr)")
        let rewards = try exp.trainResults()
        for id in train {
            #expect(rewards[id] as? Double == 1.0, "\(id): \(rewards[id] ?? "nil") \(exp.traceFile(traceName(id), "result.json") ?? "")")
            #expect(exp.traceFile(traceName(id), "agent-trajectory.jsonl")?.contains("cp seed.txt out.txt") == true)
        }
        let requests = model.requests().filter { $0["main"] as? Bool == true }
        #expect(requests.count == 2 * train.count, "\(requests)")
        #expect(requests.allSatisfy { $0["model"] as? String == "claude-fake" && ($0["tools"] as? [String]) == ["bash"] }, "\(requests)")
        #expect(model.toolResults().filter { $0.contains("exit code 0") && $0.contains("word-") }.count == train.count, "\(model.toolResults())")
    }
}
