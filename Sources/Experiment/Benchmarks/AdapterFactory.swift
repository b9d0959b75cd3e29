import Benchmark
import Foundation
import SandboxPolicy
import SupervisorIO

extension ExperimentConfig {
    /// The benchmark's adapter, with every tool, file and key it needs checked now (unless
    /// `checkTools` is false: reading the record needs no tool): a missing tool or key is one
    /// message with the install hint, before any sandbox starts.
    public func makeAdapter(root: String, checkTools: Bool = true) throws -> any BenchmarkAdapter {
        guard let kind = BenchmarkKinds.named(benchmark) else {
            throw ExperimentError(.usage, "benchmark: \(benchmark) is not available in this build")
        }
        // The toolbox is for the verifiers autoharness runs itself; elsewhere it would be
        // silently ignored, and an operator would believe tasks were graded with it.
        if verifierTools != nil && !kind.runsVerifiers(self) {
            throw ExperimentError(.usage, "sandbox.verifier_tools: only the verifiers autoharness runs get it (benchmark: local, "
                + "or terminal-bench with env_provider: local); \(kind.configured(self)) "
                + "grades elsewhere: remove the key")
        }
        return try kind.adapter(self, root: root, checkTools: checkTools)
    }

    /// What upstream's runners export to agent.py: AGENT_MODEL, AGENT_REASONING_EFFORT.
    func agentEnvironment() -> [String] {
        var env: [String] = []
        if let m = agentModel, m != "none" { env.append("AGENT_MODEL=\(m)") }
        if let r = reasoningEffort { env.append("AGENT_REASONING_EFFORT=\(r)") }
        return env
    }

    func toolSettings(_ command: [String]) -> ToolSettings {
        var t = ToolSettings(command: command)
        t.binds = runner.binds
        t.envPass = runner.envPass
        t.heldOutEnv = heldOutEnv
        t.networkAllow = runner.networkAllow
        t.networkInference = runner.networkInference
        t.upstreamCA = runner.upstreamCA
        t.timeout = runner.timeout
        t.runnerPolicy = runner.policy
        t.scorerPolicy = runner.scorerPolicy
        if let x = runner.scorerTimeout { t.scorerTimeout = x }
        return t
    }

    /// Largest tasks_file read (100 000 ids of 100 characters).
    static let maxTasksFileBytes = 16 << 20

    /// `tasks:` or `tasks_file:` (one id per line, or a JSON list of ids).
    func taskList(root: String, valid: (String) -> Bool = BenchmarkTask.isValidID) throws -> [String] {
        var ids = tasks ?? []
        if let f = tasksFile {
            let p = f.hasPrefix("/") ? f : root + "/" + f
            let text: String
            switch InputFile.read(p, cap: Self.maxTasksFileBytes) {
            case .success(let bytes):
                guard let t = String(validating: bytes, as: UTF8.self) else { throw ExperimentError(.usage, "tasks_file \(p): not valid UTF-8") }
                text = t
            case .failure(let problem):
                throw ExperimentError(.usage, "tasks_file \(p): \(problem.explanation("a task list"))")
            }
            if let list = try? JSONDecoder().decode([String].self, from: Data(text.utf8)) {
                ids += list
            } else {
                for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                    let id = line.trimmingCharacters(in: .whitespaces)
                    if id.isEmpty || id.hasPrefix("#") { continue }
                    guard valid(id) else { throw ExperimentError(.usage, "\(p):\(n + 1): '\(id)' is not a valid task id") }
                    ids.append(id)
                }
            }
        }
        for id in ids where !valid(id) { throw ExperimentError(.usage, "task id '\(id)' is not valid (letters, digits, '.', '_', '-')") }
        guard !ids.isEmpty else { throw ExperimentError(.usage, "benchmark: \(benchmark) needs its task ids: `tasks: [...]` or `tasks_file: FILE`") }
        let unique = Array(Set(ids)).sorted()
        guard unique.count == ids.count else { throw ExperimentError(.usage, "the task list names an id twice") }
        return unique
    }
}

