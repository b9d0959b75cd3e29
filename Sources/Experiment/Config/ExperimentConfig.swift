import Foundation
import Yams

/// `experiment_config.yaml`: upstream auto-harness keys first, then ours.
public struct ExperimentConfig: Sendable, Equatable {
    public enum Disclosure: String, Sendable, CaseIterable {
        /// accept/reject and the suite pass rate only
        case decision
        /// plus val_score rounded to 2 decimals
        case rounded
        /// plus val_score to 4 decimals (upstream behaviour)
        case score
    }

    // upstream keys
    public var benchmark: String
    /// For `local`: the benchmark directory (absolute, or relative to the experiment).
    public var dataset: String?
    public var agentModel: String?
    public var split = "train"
    public var gateSplit = "test"
    public var threshold = 0.8
    public var maxConcurrency = 2
    public var perTaskTimeout: Double?
    // sandbox:
    public var taskPolicy = "benchmark-task"
    public var verifierPolicy = "verifier"
    public var policyDirectory: String?
    public var scratch = "/dev/shm/autoharness"
    // coding_agent: (used by `autoharness run`)
    public var codingAgentCommand: [String] = []
    public var codingAgentEnvPass: [String] = []
    // gate:
    public var disclosure: Disclosure = .rounded
    public var gateBudget = 0
    /// A new val_score must exceed the best by more than this (0: strictly greater).
    public var minImprovement = 0.0
    public var onReject = "revert"

    public init(benchmark: String, dataset: String? = nil) {
        self.benchmark = benchmark
        self.dataset = dataset
    }

    public static let supportedBenchmarks = ["local"]
    static let plannedBenchmarks = ["terminal-bench", "tau-bench", "bird-interact", "command"]
}

/// A config problem: `file:line: key: message`.
public struct ConfigError: Error, CustomStringConvertible, Sendable {
    public var file: String
    public var line: Int?
    public var message: String
    public var description: String { line.map { "\(file):\($0): \(message)" } ?? "\(file): \(message)" }
}

extension ExperimentConfig {
    /// Loads and validates a config file; every problem found is reported at once.
    public static func load(_ path: String) throws -> ExperimentConfig {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw ConfigErrors([ConfigError(file: path, line: nil, message: "cannot read the experiment config")])
        }
        return try parse(text, file: path)
    }

    public static func parse(_ text: String, file: String) throws -> ExperimentConfig {
        let r = Reader(file: file)
        let root: Node
        do {
            guard let n = try Yams.compose(yaml: text, .basic, .default, .utf8) else {
                throw ConfigErrors([ConfigError(file: file, line: nil, message: "the config is empty; it needs at least `benchmark:`")])
            }
            root = n
        } catch let e as YamlError {
            throw ConfigErrors([ConfigError(file: file, line: Reader.line(of: e), message: "not valid YAML: \(e)")])
        }
        var c = ExperimentConfig(benchmark: "")
        r.mapping(root, "the config", allowed: ["benchmark", "dataset", "agent_model", "split", "gate_split", "threshold",
                                                "max_concurrency", "per_task_timeout", "sandbox", "coding_agent", "gate",
                                                "parallel_gate", "env_provider", "domain"]) { key, v in
            switch key {
            case "benchmark":
                if let s = r.string(v, key) {
                    if ExperimentConfig.supportedBenchmarks.contains(s) {
                        c.benchmark = s
                    } else if ExperimentConfig.plannedBenchmarks.contains(s) {
                        r.error(v, "benchmark: '\(s)' is not supported yet (supported: \(ExperimentConfig.supportedBenchmarks.joined(separator: ", ")))")
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
            case "per_task_timeout": if let x = r.number(v, key, 1...86_400) { c.perTaskTimeout = x }
            case "parallel_gate", "env_provider", "domain": break  // upstream keys with no meaning for local benchmarks
            case "sandbox":
                r.mapping(v, key, allowed: ["task_policy", "verifier_policy", "policy_dir", "scratch"]) { k, v in
                    switch k {
                    case "task_policy": if let s = r.string(v, "sandbox.\(k)") { c.taskPolicy = s }
                    case "verifier_policy": if let s = r.string(v, "sandbox.\(k)") { c.verifierPolicy = s }
                    case "policy_dir": c.policyDirectory = r.string(v, "sandbox.\(k)")
                    default: if let s = r.absolutePath(v, "sandbox.\(k)") { c.scratch = s }
                    }
                }
            case "coding_agent":
                r.mapping(v, key, allowed: ["command", "env_pass"]) { k, v in
                    switch k {
                    case "command": c.codingAgentCommand = r.strings(v, "coding_agent.command") ?? []
                    default: c.codingAgentEnvPass = r.strings(v, "coding_agent.env_pass") ?? []
                    }
                }
            default:  // gate
                r.mapping(v, key, allowed: ["disclosure", "budget", "min_improvement", "on_reject"]) { k, v in
                    switch k {
                    case "disclosure":
                        if let s = r.oneOf(v, "gate.disclosure", Disclosure.allCases.map(\.rawValue)) { c.disclosure = Disclosure(rawValue: s)! }
                    case "budget": if let x = r.integer(v, "gate.budget", 0...1_000_000) { c.gateBudget = x }
                    case "min_improvement": if let x = r.number(v, "gate.min_improvement", 0...1) { c.minImprovement = x }
                    default: if let s = r.oneOf(v, "gate.on_reject", ["revert", "keep"]) { c.onReject = s }
                    }
                }
            }
        }
        if c.benchmark.isEmpty && r.errors.isEmpty {
            r.errors.append(ConfigError(file: file, line: nil, message: "benchmark: missing (allowed: \(supportedBenchmarks.joined(separator: ", ")))"))
        }
        if c.benchmark == "local" && c.dataset == nil && r.errors.isEmpty {
            r.errors.append(ConfigError(file: file, line: nil, message: "dataset: missing; a local benchmark needs the path of its directory (with tasks/<id>/)"))
        }
        guard r.errors.isEmpty else { throw ConfigErrors(r.errors) }
        return c
    }
}

/// Every problem of one config file.
public struct ConfigErrors: Error, CustomStringConvertible, Sendable, ExpressibleByArrayLiteral {
    public var errors: [ConfigError]
    public init(_ errors: [ConfigError]) { self.errors = errors }
    public init(arrayLiteral elements: ConfigError...) { errors = elements }
    public var description: String { errors.map(\.description).joined(separator: "\n") }
}

/// Typed reads of YAML nodes that record `file:line` errors instead of throwing.
private final class Reader {
    let file: String
    var errors: [ConfigError] = []

    init(file: String) { self.file = file }

    static func line(of e: YamlError) -> Int? {
        switch e {
        case .scanner(_, _, let mark, _), .parser(_, _, let mark, _), .composer(_, _, let mark, _): return mark.line
        default: return nil
        }
    }

    func error(_ node: Node, _ message: String) {
        errors.append(ConfigError(file: file, line: node.mark?.line, message: message))
    }

    func mapping(_ node: Node, _ what: String, allowed: [String], _ each: (String, Node) -> Void) {
        guard case .mapping(let m) = node else {
            error(node, "\(what): expected a mapping of keys")
            return
        }
        var seen: Set<String> = []
        for (k, v) in m {
            guard let key = k.scalar?.string else {
                error(k, "\(what): keys must be plain names")
                continue
            }
            guard allowed.contains(key) else {
                error(k, "unknown key '\(key)' in \(what) (allowed: \(allowed.joined(separator: ", ")))")
                continue
            }
            guard seen.insert(key).inserted else {
                error(k, "\(key): given twice")
                continue
            }
            each(key, v)
        }
    }

    func string(_ node: Node, _ key: String) -> String? {
        guard let s = node.scalar?.string, !s.isEmpty else {
            error(node, "\(key): expected a non-empty string")
            return nil
        }
        return s
    }

    func oneOf(_ node: Node, _ key: String, _ allowed: [String]) -> String? {
        guard let s = string(node, key) else { return nil }
        guard allowed.contains(s) else {
            error(node, "\(key): '\(s)' is not allowed (allowed: \(allowed.joined(separator: ", ")))")
            return nil
        }
        return s
    }

    func number(_ node: Node, _ key: String, _ range: ClosedRange<Double>) -> Double? {
        guard let s = string(node, key) else { return nil }
        guard let x = Double(s), x.isFinite, range.contains(x) else {
            error(node, "\(key): must be a number from \(fmt(range.lowerBound)) to \(fmt(range.upperBound)) (got '\(s)')")
            return nil
        }
        return x
    }

    func integer(_ node: Node, _ key: String, _ range: ClosedRange<Int>) -> Int? {
        guard let s = string(node, key) else { return nil }
        guard let x = Int(s), range.contains(x) else {
            error(node, "\(key): must be a whole number from \(range.lowerBound) to \(range.upperBound) (got '\(s)')")
            return nil
        }
        return x
    }

    func absolutePath(_ node: Node, _ key: String) -> String? {
        guard let s = string(node, key) else { return nil }
        guard s.hasPrefix("/") else {
            error(node, "\(key): must be an absolute path (got '\(s)')")
            return nil
        }
        return s
    }

    func strings(_ node: Node, _ key: String) -> [String]? {
        guard case .sequence(let seq) = node else {
            error(node, "\(key): expected a list of strings")
            return nil
        }
        var out: [String] = []
        for item in seq {
            guard let s = item.scalar?.string else {
                error(item, "\(key): expected a string")
                continue
            }
            out.append(s)
        }
        return out
    }

    private func fmt(_ x: Double) -> String { x == x.rounded() ? String(Int(x)) : String(x) }
}
