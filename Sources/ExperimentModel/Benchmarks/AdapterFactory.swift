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
            try checkHeldOutCredentials()
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

    /// A held-out run's credentials (`gate.held_out_env`) must differ, by value, from every
    /// credential train runs, the coding agent and the triage hold: a vendor keeps state per
    /// account (prompt caches, stored objects), and a held-out run that shares a key with
    /// anything that learns is a channel to it (a red team read whole held-out texts back
    /// through a prompt cache, with `held_out_env` naming a variable that held the train key).
    func checkHeldOutCredentials() throws {
        func value(_ name: String) -> String? { getenv(name).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } }
        // A runner that reaches a model API: held-out runs get keys of their own, or the
        // operator says the shared account is accepted. OpenAI caches long prompt prefixes per
        // organisation whatever a request says, so the gate alone cannot close the channel.
        if !runner.networkInference.isEmpty && !sharedVendorAccount {
            let at = runner.inferencePlace.map { $0 + ": " } ?? ""
            for name in modelCredentials {
                guard let source = heldOutEnv[name] else {
                    throw ExperimentError(.usage, """
                        \(at)runner.network.inference: held-out runs would reach \(runner.networkInference.joined(separator: ", ")) with \
                        the train runs' $\(name): the vendor's per-account state (OpenAI's automatic prompt cache, stored objects) \
                        would carry held-out prompts to train runs and the coding agent. Give held-out runs another account's key: \
                        gate.held_out_env: {\(name): \(name)_HELD_OUT}, and export \(name)_HELD_OUT=... (another organisation or \
                        project: docs/held-out.md); or accept the channel with gate.shared_vendor_account: true
                        """)
                }
                guard value(source) != nil else {
                    throw ExperimentError(.usage, """
                        \(heldOutEnvPlace.map { $0 + ": " } ?? "")gate.held_out_env: \(name) comes from $\(source) for held-out runs, \
                        and \(source) is not set; export \(source)=... (another account's key)
                        """)
                }
            }
        }
        var holders: [(who: String, variable: String)] = []
        // A key by its name, or by its value's shape under any name (BEDROCK_KEY_2).
        func holds(_ v: String) -> Bool { InferenceGate.isCredentialVariable(v) || value(v).map(InferenceGate.looksLikeKey) == true }
        for v in runner.envPass where holds(v) { holders.append(("train runs", v)) }
        for v in codingAgent.envPass where holds(v) { holders.append(("the coding agent", v)) }
        for v in triage?.tool.envPass ?? [] where holds(v) { holders.append(("the triage", v)) }
        for (name, source) in heldOutEnv.sorted(by: { $0.key < $1.key }) {
            guard let held = value(source) else { continue }
            for h in holders where value(h.variable) == held {
                throw ExperimentError(.usage, """
                    \(heldOutEnvPlace.map { $0 + ": " } ?? "")gate.held_out_env: \(name) comes from $\(source) for held-out runs, and \
                    $\(source) holds the same value as $\(h.variable), which \(h.who) hold: the vendor's state (its prompt cache, \
                    stored objects) would be shared between held-out runs and \(h.who). Give held-out runs another account's key \
                    (another organisation or project at the vendor: docs/held-out.md)
                    """)
            }
        }
    }

    /// The runner's keys that reach its model APIs: its credential variables (`_KEY`,
    /// `_TOKEN`), but an environment provider's (Harbor's remote providers: checked on their
    /// own, `checkHeldOutAccount`).
    var modelCredentials: [String] {
        runner.envPass.filter { InferenceGate.isCredentialVariable($0) && !tunnelledKeys.contains($0) }
    }

    /// The runner's keys for hosts it reaches as plain tunnels, passed as they are: a remote
    /// environment provider's and `runner.network.tunnelled_keys`.
    var tunnelledKeys: Set<String> { Set(TerminalBenchKind.providerKeys.values.joined()).union(runner.tunnelledKeys) }

    /// Whether held-out and train runs reach a model API with one account's key, as the
    /// operator accepted (`gate.shared_vendor_account: true`): shown in status, the report
    /// and the evidence.
    public var sharesVendorAccount: Bool {
        !runner.networkInference.isEmpty && sharedVendorAccount && modelCredentials.contains { heldOutEnv[$0] == nil }
    }

    /// What status and the report say of a shared vendor account, or nil.
    public var sharedVendorAccountNote: String? {
        guard sharesVendorAccount else { return nil }
        return "held-out and train runs reach \(runner.networkInference.joined(separator: ", ")) with one account's keys "
            + "(gate.shared_vendor_account: true): the vendor's prompt cache and stored objects can carry held-out prompts to train runs"
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
        t.heldOutEnv = heldOutEnv
        t.networkAllow = runner.networkAllow
        t.networkInference = runner.networkInference
        t.tunnelledKeys = tunnelledKeys
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

