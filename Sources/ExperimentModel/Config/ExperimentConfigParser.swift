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
        var benchmarkKeys: [(key: String, node: Node)] = []
        // A benchmark's keys are typed once the benchmark is known, each at its own line.
        r.read(root, "", ConfigSchema.keys, others: BenchmarkKinds.settingKeyNames, into: &c) { benchmarkKeys.append(($0, $1)) }
        c.benchmarkSettings = BenchmarkKinds.readSettings(for: c.benchmark, benchmarkKeys, r)
        check(&c, r)
        guard r.errors.isEmpty else { throw ConfigErrors(r.errors) }
        return c
    }

    /// What keys say together, once the whole file is read (each problem at a key's line).
    static func check(_ c: inout ExperimentConfig, _ r: ConfigReader) {
        c.agentNetworkPlace = r.place("sandbox.network")
        for key in ["coding_agent.binds", "coding_agent.home_seed"] { c.codingAgentPlaces[key] = r.place(key) }
        if let node = r.node("sandbox.network") {
            Self.checkTunnelledKeys(r, node, section: "sandbox", c.agentTunnelledKeys, passed: c.codingAgent.envPass, passedBy: "coding_agent")
        }
        if let node = r.node("gate.held_out_env") {
            for name in c.gate.heldOutEnv.keys.sorted() where !c.runner.envPass.contains(name) {
                r.error(node, "gate.held_out_env: \(name) is not in runner.env_pass (only a variable passed to the runner can be given another value for held-out runs)")
            }
        }
        switch (c.gate.replyTime, c.gate.replyAfter) {
        case (.worstCase, let seconds?): c.gate.replyTime = .worstCase(seconds: seconds)
        case (.worstCase, nil):
            if let node = r.node("gate.reply_time") {
                r.error(node, "gate.reply_time: worst_case needs gate.reply_after: the seconds every gate takes (at least its longest run)")
            }
        case (.padded, _?):
            if let node = r.node("gate.reply_after") {
                r.error(node, "gate.reply_after: used only with gate.reply_time: worst_case (padded rounds each gate up to a power of two seconds)")
            }
        default: break
        }
        // Folded into replyTime: a config read from a file equals one built in code.
        c.gate.replyAfter = nil
        if c.gate.accept != .margin, let node = r.node("gate.min_improvement") {
            r.error(node, c.gate.accept == .paired
                ? "gate.min_improvement: only with gate.accept: margin (paired accepts what its test finds better at gate.alpha)"
                : "gate.min_improvement: only with gate.accept: margin (at_least_best accepts any score that reaches the best, a tie included)")
        }
        if c.gate.disclosure != .ladder, let node = r.node("gate.ladder_step") {
            r.error(node, "gate.ladder_step: only with gate.disclosure: ladder (the step a disclosed score must rise by)")
        }
        if c.gate.accept != .paired, let node = r.node("gate.alpha") {
            r.error(node, "gate.alpha: only with gate.accept: paired (the error rate of its test)")
        }
        if c.gate.infraRetries > 0, let node = r.node("gate.infra_retries"), r.errors.isEmpty {
            // Where the inference gate cannot count a held-out task's vendor failures as that
            // task's, a retry would be granted on nothing: refused, not silently ignored.
            if c.runsOwnTasks || c.runner.networkInference.isEmpty {
                r.error(node, "gate.infra_retries: needs runner.network.inference (the inference gate counts the model vendor's failures; '\(c.benchmark)' reaches no model API through it)")
            }
        }
        if c.benchmark.isEmpty && r.errors.isEmpty {
            r.fileError("benchmark: missing (allowed: \(ExperimentConfig.supportedBenchmarks.joined(separator: ", ")))")
        }
        if c.executor.kind == .ray && r.errors.isEmpty, let node = r.node("executor") {
            if !c.runsOwnTasks && !c.shardsOnNodes {
                r.error(node, "executor: ray runs a local, terminal-bench, command, bfcl, tau-bench, inspect or bird-interact benchmark's tasks on the cluster's nodes so far; '\(c.benchmark)' runs its own tool (not built yet): use executor: local")
            } else if !c.runsOwnTasks && c.gate.heldOutRuntime == .vm {
                r.error(node, "executor: ray runs a tool benchmark's held-out tasks in the nodes' own sandboxes, not in a VM (not built yet): set gate.held_out_runtime: host")
            } else if (c.executor.address ?? "").isEmpty {
                r.error(node, "executor.address: missing; executor: ray needs the cluster's address (host:port of its head)")
            } else if c.verifierTools != nil && c.gate.heldOutRuntime == .vm {
                // A node's held-out VM would verify without them and score such tasks 0.
                r.error(node, "executor: ray with sandbox.verifier_tools and gate.held_out_runtime: vm: a node's held-out VM does not get the verifier tools yet; set gate.held_out_runtime: host")
            }
        }
        if c.gate.heldOutRuntime == .vm && r.errors.isEmpty, let why = BenchmarkKinds.notInVM(c) {
            r.fileError("gate.held_out_runtime: vm: \(why); use host")
        }
        if c.runsOwnTasks && c.dataset == nil && r.errors.isEmpty {
            r.fileError("dataset: missing; a local benchmark needs the path of its directory (with tasks/<id>/)")
        }
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
}
