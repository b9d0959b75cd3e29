import Benchmark
import Sandbox
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
        if checkTools {
            try vendorAccounts.check()
            try checkCodingAgentBinds(root: root)
        }
        return try kind.adapter(self, root: root, checkTools: checkTools)
    }

    /// What no bind an operator configures for the coding agent or the triage may reach: this
    /// experiment (its ledger, split, snapshots and keys; `whole` false: its private directory
    /// only, for what is copied rather than bound), the dataset and its task list, and what
    /// only the scorer may read. Each benchmark's own paths are checked with `toolBinds`.
    package func experimentProtected(root: String, whole: Bool = true) -> [RunnerBinds.Protected] {
        var protected: [RunnerBinds.Protected] = [whole ? .init(path: root, what: "contains this experiment (its ledger, split and snapshots)")
                                                        : .init(path: root + "/.autoharness", what: "contains this experiment's private directory (its ledger, split, snapshots and keys)")]
        for d in [dataset, tasksFile].compactMap({ $0 }) where !d.isEmpty {
            protected.append(.init(path: d.hasPrefix("/") ? d : root + "/" + d, what: "contains the benchmark's tasks, the held-out ones included"))
        }
        for b in runner.scorerBinds { protected.append(.init(path: b, what: "is the scorer's alone (the answers it checks against)")) }
        return protected
    }

    /// The coding agent's binds and `home_seed` (copied into its home) against the experiment,
    /// the dataset and the scorer's answers: a bind of the dataset's parent let a coding agent
    /// list every task and read the held-out instructions. Refused before any
    /// sandbox starts, naming the setting and its line.
    func checkCodingAgentBinds(root: String) throws {
        func at(_ setting: String) -> String { codingAgentPlaces[setting].map { "\($0): \(setting)" } ?? setting }
        try RunnerBinds.refuse(codingAgent.binds.map { (at("coding_agent.binds"), $0) }, exposing: experimentProtected(root: root))
        if let seed = codingAgent.homeSeed {
            try RunnerBinds.refuse([(at("coding_agent.home_seed"), seed.hasPrefix("/") ? seed : root + "/" + seed)],
                                   exposing: experimentProtected(root: root, whole: false))
        }
    }

    /// What upstream's runners export to agent.py: AGENT_MODEL, AGENT_REASONING_EFFORT.
    func agentEnvironment() -> [String] {
        var env: [String] = []
        if let m = agentModel, m != "none" { env.append("AGENT_MODEL=\(m)") }
        if let r = reasoningEffort { env.append("AGENT_REASONING_EFFORT=\(r)") }
        return env
    }

    package func toolSettings(_ command: [String]) -> ToolSettings {
        var t = ToolSettings(command: command)
        t.binds = runner.binds
        t.envPass = runner.envPass
        t.heldOutEnv = gate.heldOutEnv
        t.networkAllow = runner.networkAllow
        t.networkInference = runner.networkInference
        t.tunnelledKeys = vendorAccounts.tunnelledKeys
        t.upstreamCA = runner.upstreamCA
        t.timeout = runner.timeout
        t.runnerPolicy = runner.policy
        t.scorerPolicy = runner.scorerPolicy
        if let x = runner.scorerTimeout { t.scorerTimeout = x }
        t.shellCalls = runner.srtShim
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

    /// `sandbox.verifier_tools`, checked; nil when the config names none.
    func verifierToolbox() throws -> VerifierTools? {
        guard let dir = verifierTools else { return nil }
        do {
            return try VerifierTools(directory: dir)
        } catch {
            throw ExperimentError(.usage, error.message)
        }
    }
}

