import Benchmark
import Foundation
import SandboxPolicy
import SupervisorIO
import Yams

extension ExperimentConfig {
    /// Loads and validates a config file; every problem found is reported at once.
    public static func load(_ path: String) throws -> ExperimentConfig {
        let bytes: [UInt8]
        switch InputFile.read(path, cap: maxBytes) {
        case .success(let b): bytes = b
        case .failure(let problem):
            throw ConfigErrors([ConfigError(file: path, line: nil, message: "cannot read the experiment config: \(problem.explanation("an experiment config"))")])
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigErrors([ConfigError(file: path, line: nil, message: "the experiment config is not valid UTF-8")])
        }
        return try parse(text, file: path)
    }

    /// Largest experiment config read (a real one is a few KiB; policies have the same cap).
    public static let maxBytes = PolicyLoader.maxFileBytes

    /// Parses a config's text (`file` names it in errors); every problem found is reported at once.
    public static func parse(_ text: String, file: String) throws -> ExperimentConfig {
        try ExperimentConfigParser.parse(text, file: file)
    }
}

/// The experiment config's reader: every section's keys, their checks and their `file:line`
/// diagnostics, all reported at once (`ConfigReader`).
enum ExperimentConfigParser {
    static func parse(_ text: String, file: String) throws -> ExperimentConfig {
        let r = ConfigReader(file: file)
        let root: Node
        switch YAMLReader.compose(text, file: file, document: "an experiment config") {
        case .failure(let problem):
            throw ConfigErrors([ConfigError(file: file, line: problem.location.line, message: problem.message, column: problem.location.column)])
        case .success(nil):
            throw ConfigErrors([ConfigError(file: file, line: nil, message: "the config is empty; it needs at least `benchmark:`")])
        case .success(let n?):
            root = n
        }
        var c = ExperimentConfig(benchmark: "")
        var replyMode: (String, Node)?, replyAfter: (Double, Node)?, heldOutEnvNode: Node?, executorNode: Node?
        var benchmarkKeys: [(key: String, node: Node)] = []
        var minImprovementNode: Node?
        var alphaNode: Node?, ladderStepNode: Node?, infraRetriesNode: Node?, agentNetworkNode: Node?
        r.mapping(root, "the config", allowed: ["benchmark", "dataset", "agent_model", "split", "gate_split", "threshold",
                                                "max_concurrency", "per_task_timeout", "sandbox", "coding_agent", "gate",
                                                "parallel_gate", "reasoning_effort", "tasks", "tasks_file", "runner", "budget", "loop", "timeout_policy", "executor", "triage"]
                                                + BenchmarkKinds.settingKeyNames) { key, v in
            switch key {
            case "benchmark":
                if let s = r.string(v, key) {
                    if ExperimentConfig.supportedBenchmarks.contains(s) {
                        c.benchmark = s
                    } else {
                        r.error(v, "benchmark: unknown benchmark '\(s)' (allowed: \(ExperimentConfig.supportedBenchmarks.joined(separator: ", ")))")
                    }
                }
            case "dataset": c.dataset = r.string(v, key)
            case "agent_model": c.agentModel = r.string(v, key)
            case "split": if let s = r.oneOf(v, key, ["train"]) { c.split = s }
            case "gate_split": if let s = r.oneOf(v, key, ["test"]) { c.gateSplit = s }
            case "threshold": if let x = r.number(v, key, 0...1) { c.threshold = x }
            case "max_concurrency": if let x = r.integer(v, key, 1...256) { c.maxConcurrency = x }
            case "per_task_timeout": if let x = r.number(v, key, 1...LocalBenchmark.maxTimeout) { c.perTaskTimeout = x }
            case "reasoning_effort": c.reasoningEffort = r.string(v, key)
            case "tasks":
                c.tasks = r.strings(v, key)
                for t in c.tasks ?? [] where !BenchmarkTask.isValidID(t) { r.error(v, "tasks: '\(t)' is not a valid task id (letters, digits, '.', '_', '-')") }
            case "tasks_file": c.tasksFile = r.string(v, key)
            case "runner":
                r.mapping(v, key, allowed: ["command", "binds", "env_pass", "network", "timeout", "policy", "scorer_policy", "scripts", "scorer", "scorer_binds", "scorer_timeout"]) { k, v in
                    let name = "runner.\(k)"
                    switch k {
                    case "scorer": c.runner.scorer = r.strings(v, name)
                    case "scorer_binds":
                        c.runner.scorerBinds = r.strings(v, name) ?? []
                        for b in c.runner.scorerBinds where !b.hasPrefix("/") { r.error(v, "\(name): '\(b)' must be an absolute path") }
                    case "scripts": c.runner.scripts = r.absolutePath(v, name)
                    case "scorer_policy": if let s = r.string(v, name) { c.runner.scorerPolicy = s }
                    case "scorer_timeout": if let x = r.number(v, name, 1...Limits.maxTimeoutSeconds) { c.runner.scorerTimeout = x }
                    default: Self.tool(r, k, v, section: "runner", into: &c.runner)
                    }
                }
                Self.checkTunnelledKeys(r, v, section: "runner", c.runner.tunnelledKeys, passed: c.runner.envPass)
            case "triage":
                var t = ExperimentConfig.Triage()
                r.mapping(v, key, allowed: ["command", "binds", "env_pass", "env", "network", "timeout", "policy", "after", "preset", "bin", "max_records"]) { k, v in
                    switch k {
                    case "max_records": if let x = r.integer(v, "triage.max_records", 1...ExperimentConfig.Triage.recordsCap) { t.maxRecords = x }
                    case "after":
                        if let x = r.oneOf(v, "triage.after", ExperimentConfig.Triage.After.allCases.map(\.rawValue)) { t.after = .init(rawValue: x)! }
                    case "preset": t.preset = r.oneOf(v, "triage.preset", ["claude", "codex"])
                    case "bin": t.bin = r.string(v, "triage.bin")
                    case "env": t.env = Self.constants(r, v, "triage.env")
                    default: Self.tool(r, k, v, section: "triage", into: &t.tool)
                    }
                }
                Self.checkTunnelledKeys(r, v, section: "triage", t.tool.tunnelledKeys, passed: t.tool.envPass)
                if t.preset == nil && (t.tool.command?.isEmpty ?? true) {
                    r.error(v, "triage.command: the triage command's argv (a list) is required, or a preset (triage.preset: claude | codex)")
                }
                c.triage = t
            case let k where BenchmarkKinds.settingKeyNames.contains(k):
                // Typed once the benchmark is known, each at its own line (below).
                benchmarkKeys.append((k, v))
            case "parallel_gate": break  // upstream: the gate's concurrency; ours is max_concurrency
            case "budget":
                r.mapping(v, key, allowed: ["max_cost_usd"]) { _, v in
                    if let x = r.number(v, "budget.max_cost_usd", 0...1_000_000) { c.maxCostUSD = x }
                }
            case "timeout_policy":
                if let p = r.oneOf(v, key, ExperimentConfig.TimeoutPolicy.allCases.map(\.rawValue)) { c.timeoutPolicy = ExperimentConfig.TimeoutPolicy(rawValue: p)! }
            case "executor":
                executorNode = v
                r.mapping(v, key, allowed: ["kind", "address", "python", "tasks_per_request"]) { k, v in
                    switch k {
                    case "kind": if let s = r.oneOf(v, "executor.kind", ExperimentConfig.Executor.Kind.allCases.map(\.rawValue)) { c.executor.kind = ExperimentConfig.Executor.Kind(rawValue: s)! }
                    case "address": c.executor.address = r.string(v, "executor.address")
                    case "python": if let s = r.string(v, "executor.python") { c.executor.python = s }
                    default: if let x = r.integer(v, "executor.tasks_per_request", 1...10_000) { c.executor.tasksPerRequest = x }
                    }
                }
            case "loop":
                r.mapping(v, key, allowed: ["batch_size", "batch_iterations", "review", "candidates"]) { k, v in
                    switch k {
                    case "candidates": if let x = r.integer(v, "loop.candidates", 1...ExperimentConfig.maxCandidates) { c.candidates = x }
                    case "batch_size": if let x = r.integer(v, "loop.batch_size", 0...100_000) { c.batchSize = x }
                    case "review": if let x = r.oneOf(v, "loop.review", ExperimentConfig.Review.allCases.map(\.rawValue)) { c.review = .init(rawValue: x)! }
                    default: if let x = r.integer(v, "loop.batch_iterations", 1...100_000) { c.batchIterations = x }
                    }
                }
            case "sandbox":
                r.mapping(v, key, allowed: ["task_policy", "verifier_policy", "verifier_tools", "coding_agent_policy", "policy_dir", "scratch", "network"]) { k, v in
                    switch k {
                    case "task_policy": if let s = r.string(v, "sandbox.\(k)") { c.taskPolicy = s }
                    case "coding_agent_policy": if let s = r.string(v, "sandbox.\(k)") { c.codingAgentPolicy = s }
                    case "network":
                        // The runner's keys and checks (`tool`), for the coding agent.
                        var agent = ExperimentConfig.Runner()
                        Self.tool(r, k, v, section: "sandbox", into: &agent)
                        (c.networkAllow, c.agentInference) = (agent.networkAllow, agent.networkInference)
                        (c.agentUpstreamCA, c.agentTunnelledKeys) = (agent.upstreamCA, agent.tunnelledKeys)
                        agentNetworkNode = v
                        let at = r.yaml.location(of: v)
                        c.agentNetworkPlace = "\(at.file):\(at.line)"
                    case "verifier_policy": if let s = r.string(v, "sandbox.\(k)") { c.verifierPolicy = s }
                    case "policy_dir": c.policyDirectory = r.string(v, "sandbox.\(k)")
                    case "verifier_tools": c.verifierTools = r.absolutePath(v, "sandbox.\(k)")
                    default: if let s = r.absolutePath(v, "sandbox.\(k)") { c.scratch = s }
                    }
                }
            case "coding_agent":
                r.mapping(v, key, allowed: ["command", "env_pass", "env", "home_seed", "binds", "prompt", "continue_prompt",
                                            "restart_backoff", "quick_exit_seconds", "max_crashes", "max_restarts", "price_usd_per_mtok"]) { k, v in
                    let name = "coding_agent.\(k)"
                    if k == "binds" || k == "home_seed" {
                        let at = r.yaml.location(of: v)
                        c.codingAgentPlaces[name] = "\(at.file):\(at.line)"
                    }
                    switch k {
                    case "command": c.codingAgent.command = r.strings(v, name) ?? []
                    case "env_pass":
                        c.codingAgent.envPass = r.strings(v, name) ?? []
                        for n in c.codingAgent.envPass where !EnvSpec.isVariableName(n) {
                            r.error(v, "\(name): '\(n)' is not a variable name")
                        }
                    case "env": c.codingAgent.env = Self.constants(r, v, name)
                    case "home_seed": if let s = r.string(v, name) { c.codingAgent.homeSeed = s }
                    case "binds":
                        c.codingAgent.binds = r.strings(v, name) ?? []
                        for b in c.codingAgent.binds where !b.hasPrefix("/") { r.error(v, "\(name): '\(b)' must be an absolute path") }
                    case "prompt": if let s = r.string(v, name) { c.codingAgent.prompt = s }
                    case "continue_prompt": if let s = r.string(v, name) { c.codingAgent.continuePrompt = s }
                    case "restart_backoff": if let x = r.number(v, name, 0...300) { c.codingAgent.restartBackoff = x }
                    case "quick_exit_seconds": if let x = r.number(v, name, 0...86_400) { c.codingAgent.quickExitSeconds = x }
                    case "max_restarts": if let x = r.integer(v, name, 0...1000) { c.codingAgent.maxRestarts = x }
                    case "price_usd_per_mtok":
                        var p: [String: Double] = [:]
                        r.mapping(v, name, allowed: ["input", "output", "cache_read", "cache_write"]) { k, v in
                            if let x = r.number(v, "\(name).\(k)", 0...1_000_000) { p[k] = x }
                        }
                        if let i = p["input"], let o = p["output"] {
                            c.codingAgent.price = TokenPrice(input: i, output: o, cacheRead: p["cache_read"], cacheWrite: p["cache_write"])
                        } else if case .mapping = v {
                            r.error(v, "\(name): needs both input and output (USD per million tokens; cache_read and cache_write default to input)")
                        }
                    default: if let x = r.integer(v, name, 1...1000) { c.codingAgent.maxCrashes = x }
                    }
                }
                for n in c.codingAgent.envPass where c.codingAgent.env[n] != nil {
                    r.error(v, "coding_agent: \(n) is in both env and env_pass; set it or pass it, not both")
                }
            default:  // gate
                r.mapping(v, key, allowed: ["disclosure", "budget", "accept", "min_improvement", "on_reject", "max_non_improving",
                                            "held_out_runtime", "vm", "reply_time", "reply_after", "held_out_env",
                                            "shared_vendor_account", "trials", "alpha", "ladder_step", "infra_retries"]) { k, v in
                    switch k {
                    case "ladder_step":
                        ladderStepNode = v
                        if let x = r.number(v, "gate.ladder_step", 0.001...0.5) { c.ladderStep = x }
                    case "trials": if let x = r.integer(v, "gate.trials", 1...GateTrials.maximum) { c.heldOutTrials = x }
                    case "infra_retries":
                        infraRetriesNode = v
                        if let x = r.integer(v, "gate.infra_retries", 0...GateTrials.maximumRetries) { c.infraRetries = x }
                    case "alpha":
                        alphaNode = v
                        if let x = r.number(v, "gate.alpha", 0.0001...0.5) { c.alpha = x }
                    case "shared_vendor_account":
                        if let s = r.oneOf(v, "gate.shared_vendor_account", ["true", "false"]) { c.sharedVendorAccount = s == "true" }
                    case "held_out_env":
                        r.mapping(v, "gate.held_out_env", allowed: nil) { name, source in
                            guard let src = r.string(source, "gate.held_out_env.\(name)") else { return }
                            for n in [name, src] where !EnvSpec.isVariableName(n) {
                                r.error(source, "gate.held_out_env: '\(n)' is not a variable name")
                            }
                            c.heldOutEnv[name] = src
                            heldOutEnvNode = v
                            let at = r.yaml.location(of: source)
                            c.heldOutEnvPlace = "\(at.file):\(at.line)"
                        }
                    case "reply_time": if let m = r.oneOf(v, "gate.reply_time", ["padded", "worst_case"]) { replyMode = (m, v) }
                    case "reply_after": if let x = r.number(v, "gate.reply_after", 1...604_800) { replyAfter = (x, v) }
                    case "held_out_runtime":
                        if let s = r.oneOf(v, "gate.held_out_runtime", HeldOutRuntime.allCases.map(\.rawValue)) { c.heldOutRuntime = HeldOutRuntime(rawValue: s)! }
                    case "vm":
                        r.mapping(v, "gate.vm", allowed: ["accel", "allow_emulation", "memory_mib", "cpus", "kernel_dir", "boot_timeout", "snapshot", "snapshot_dir"]) { k, v in
                            let name = "gate.vm.\(k)"
                            switch k {
                            case "accel": if let s = r.oneOf(v, name, VMSettings.Accel.allCases.map(\.rawValue)) { c.vm.accel = VMSettings.Accel(rawValue: s)! }
                            case "allow_emulation": if let s = r.oneOf(v, name, ["true", "false"]) { c.vm.allowEmulation = s == "true" }
                            case "memory_mib": if let x = r.integer(v, name, 256...1_048_576) { c.vm.memoryMiB = x }
                            case "cpus": if let x = r.integer(v, name, 1...256) { c.vm.cpus = x }
                            case "kernel_dir": if let s = r.absolutePath(v, name) { c.vm.kernelDirectory = s }
                            case "snapshot": if let s = r.oneOf(v, name, ["true", "false"]) { c.vm.snapshot = s == "true" }
                            case "snapshot_dir": if let s = r.absolutePath(v, name) { c.vm.snapshotDirectory = s }
                            default: if let x = r.number(v, name, 5...3600) { c.vm.bootTimeout = x }
                            }
                        }
                    case "disclosure":
                        if let s = r.oneOf(v, "gate.disclosure", ExperimentConfig.DisclosureLevel.allCases.map(\.rawValue)) { c.disclosure = ExperimentConfig.DisclosureLevel(rawValue: s)! }
                    case "budget": if let x = r.integer(v, "gate.budget", 0...1_000_000) { c.gateBudget = x }
                    case "accept":
                        if let s = r.oneOf(v, "gate.accept", ExperimentConfig.AcceptRule.allCases.map(\.rawValue)) { c.acceptRule = ExperimentConfig.AcceptRule(rawValue: s)! }
                    case "min_improvement":
                        minImprovementNode = v
                        if v.scalar?.string != "auto", let x = r.number(v, "gate.min_improvement", 0...1) { c.minImprovement = x }
                    case "max_non_improving": if let x = r.integer(v, "gate.max_non_improving", 0...1_000_000) { c.maxNonImproving = x }
                    default:
                        if let s = r.oneOf(v, "gate.on_reject", ExperimentConfig.OnReject.allCases.map(\.rawValue)) { c.onReject = ExperimentConfig.OnReject(rawValue: s)! }
                    }
                }
            }
        }
        if let node = agentNetworkNode {
            Self.checkTunnelledKeys(r, node, section: "sandbox", c.agentTunnelledKeys, passed: c.codingAgent.envPass, passedBy: "coding_agent")
        }
        if let node = heldOutEnvNode {
            for name in c.heldOutEnv.keys.sorted() where !c.runner.envPass.contains(name) {
                r.error(node, "gate.held_out_env: \(name) is not in runner.env_pass (only a variable passed to the runner can be given another value for held-out runs)")
            }
        }
        switch (replyMode, replyAfter) {
        case (("worst_case", _)?, (let seconds, _)?): c.replyTime = .worstCase(seconds: seconds)
        case (("worst_case", let node)?, nil):
            r.error(node, "gate.reply_time: worst_case needs gate.reply_after: the seconds every gate takes (at least its longest run)")
        case (_, (_, let node)?):
            r.error(node, "gate.reply_after: used only with gate.reply_time: worst_case (padded rounds each gate up to a power of two seconds)")
        default: break
        }
        c.benchmarkSettings = BenchmarkKinds.readSettings(for: c.benchmark, benchmarkKeys, r)
        if c.acceptRule != .margin, let node = minImprovementNode {
            r.error(node, c.acceptRule == .paired
                ? "gate.min_improvement: only with gate.accept: margin (paired accepts what its test finds better at gate.alpha)"
                : "gate.min_improvement: only with gate.accept: margin (at_least_best accepts any score that reaches the best, a tie included)")
        }
        if c.disclosure != .ladder, let node = ladderStepNode {
            r.error(node, "gate.ladder_step: only with gate.disclosure: ladder (the step a disclosed score must rise by)")
        }
        if c.acceptRule != .paired, let node = alphaNode {
            r.error(node, "gate.alpha: only with gate.accept: paired (the error rate of its test)")
        }
        if c.infraRetries > 0, let node = infraRetriesNode, r.errors.isEmpty {
            // Where the inference gate cannot count a held-out task's vendor failures as that
            // task's, a retry would be granted on nothing: refused, not silently ignored.
            if c.runsOwnTasks || c.runner.networkInference.isEmpty {
                r.error(node, "gate.infra_retries: needs runner.network.inference (the inference gate counts the model vendor's failures; '\(c.benchmark)' reaches no model API through it)")
            }
        }
        if c.benchmark.isEmpty && r.errors.isEmpty {
            r.fileError("benchmark: missing (allowed: \(ExperimentConfig.supportedBenchmarks.joined(separator: ", ")))")
        }
        if c.executor.kind == .ray && r.errors.isEmpty, let node = executorNode {
            if !c.runsOwnTasks {
                r.error(node, "executor: ray runs a local benchmark's tasks on the cluster's nodes so far; '\(c.benchmark)' runs its own tool (not built yet): use executor: local")
            } else if (c.executor.address ?? "").isEmpty {
                r.error(node, "executor.address: missing; executor: ray needs the cluster's address (host:port of its head)")
            } else if c.verifierTools != nil {
                // A node's verifiers would run without them and score such tasks 0.
                r.error(node, "executor: ray with sandbox.verifier_tools: worker nodes do not get the verifier tools yet; use executor: local, or remove sandbox.verifier_tools")
            }
        }
        if c.heldOutRuntime == .vm && r.errors.isEmpty, let why = BenchmarkKinds.notInVM(c) {
            r.fileError("gate.held_out_runtime: vm: \(why); use host")
        }
        if c.runsOwnTasks && c.dataset == nil && r.errors.isEmpty {
            r.fileError("dataset: missing; a local benchmark needs the path of its directory (with tasks/<id>/)")
        }
        guard r.errors.isEmpty else { throw ConfigErrors(r.errors) }
        return c
    }

    /// Constant environment variables (`coding_agent.env`, `triage.env`): names checked, string
    /// values, none of the supervisor's own AUTOHARNESS_ ones.
    static func constants(_ r: ConfigReader, _ v: Node, _ name: String) -> [String: String] {
        var out: [String: String] = [:]
        r.mapping(v, name, allowed: nil) { n, value in
            guard EnvSpec.isVariableName(n) else { return r.error(value, "\(name): '\(n)' is not a variable name") }
            guard let s = value.scalar?.string else { return r.error(value, "\(name).\(n): expected a string value") }
            guard !n.hasPrefix("AUTOHARNESS_") else { return r.error(value, "\(name).\(n): AUTOHARNESS_ variables are set by the supervisor") }
            out[n] = s
        }
        return out
    }

    /// `network.tunnelled_keys` names only variables the section passes (checked once the
    /// whole section is read: env_pass may follow network; the coding agent's are in
    /// `sandbox.network` and `coding_agent.env_pass`).
    static func checkTunnelledKeys(_ r: ConfigReader, _ node: Node, section: String, _ keys: [String], passed: [String], passedBy: String? = nil) {
        for n in keys where !passed.contains(n) {
            r.error(node, "\(section).network.tunnelled_keys: \(n) is not in \(passedBy ?? section).env_pass")
        }
    }

    /// A tool's keys as `runner:` and `triage:` share them (command, binds, env_pass, network,
    /// timeout, policy), read into `tool`, each error naming `section.key`.
    static func tool(_ r: ConfigReader, _ k: String, _ v: Node, section: String, into tool: inout ExperimentConfig.Runner) {
        let name = "\(section).\(k)"
        switch k {
        case "command": tool.command = r.strings(v, name)
        case "binds":
            tool.binds = r.strings(v, name) ?? []
            for b in tool.binds where !b.hasPrefix("/") { r.error(v, "\(name): '\(b)' must be an absolute path") }
        case "env_pass":
            tool.envPass = r.strings(v, name) ?? []
            for n in tool.envPass where !EnvSpec.isVariableName(n) { r.error(v, "\(name): '\(n)' is not a variable name") }
        case "network":
            r.mapping(v, name, allowed: ["allow", "inference", "upstream_ca", "tunnelled_keys"]) { k, w in
                switch k {
                case "allow": tool.networkAllow = r.hostPorts(w, "\(name).allow") ?? []
                case "tunnelled_keys":
                    tool.tunnelledKeys = r.strings(w, "\(name).tunnelled_keys") ?? []
                case "inference":
                    tool.networkInference = r.hostPorts(w, "\(name).inference") ?? []
                    let at = r.yaml.location(of: w)
                    tool.inferencePlace = "\(at.file):\(at.line)"
                    for t in tool.networkInference where t.contains("*") {
                        r.error(w, "\(name).inference: '\(t)' is a pattern; the inference gate takes exact host:port pairs")
                    }
                default: tool.upstreamCA = r.absolutePath(w, "\(name).upstream_ca")
                }
            }
            // One host, however spelled (case, a trailing dot, another port, an address as
            // written, a pattern above it), is a gate or a tunnel, never both.
            for t in tool.networkInference {
                guard let a = tool.networkAllow.first(where: { LocalKind.sameHost(t, $0) }) else { continue }
                r.error(v, "\(name): \(t) in inference and \(a) in allow reach one host; list it once (inference: only stateless model calls pass)")
            }
            if !tool.tunnelledKeys.isEmpty && tool.networkAllow.isEmpty {
                r.error(v, "\(name).tunnelled_keys: keys passed as they are, for hosts of \(name).allow, which is empty (a key for an inference host gets a placeholder)")
            }
            let why = section == "sandbox"
                ? "a plain tunnel would hand the coding agent the real key and the vendor's stored objects"
                : "a plain tunnel would let a held-out run leave stored completions, files or responses that a train run lists"
            for t in tool.networkAllow where ExperimentConfig.isModelAPI(t) {
                r.error(v, "\(name).allow: \(t) is a model API: list it under \(name).inference instead, where only stateless inference calls pass (\(why))")
            }
        case "timeout": if let x = r.number(v, name, 1...Limits.maxTimeoutSeconds) { tool.timeout = x }
        default: if let s = r.string(v, name) { tool.policy = s }
        }
    }
}
