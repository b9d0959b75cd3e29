import Benchmark
import Foundation

/// One benchmark autoharness runs, in one place: its name, tool, dataset default, the
/// upstream keys it reads, what `init` checks and writes, and how its adapter is made.
///
/// Adding a benchmark: a type conforming here with its settings type (a file beside this one),
/// its entry in `BenchmarkKinds.all`, and `templates/<name>/` (keys.yaml, runner.yaml,
/// PROGRAM.md, agent.py). Nothing else names benchmarks or their keys
/// (ArchitectureTests.benchmarksRegisteredOnce).
package protocol BenchmarkKind: Sendable {
    /// `benchmark:` in experiment_config.yaml, `init --benchmark`, `templates/<name>/`.
    var name: String { get }
    /// The tool `init` looks for on PATH when `--tool` names none (nil: no external tool).
    var defaultTool: String? { get }
    var defaultDataset: String? { get }
    /// One sentence: how to install what the benchmark runs.
    var installHint: String { get }
    /// The keys of experiment_config.yaml this benchmark reads besides the common ones, typed
    /// (a struct in the kind's own file; `NoSettings` for none).
    associatedtype Settings: BenchmarkSettings = NoSettings
    /// Why this configuration's held-out split cannot run in the held-out VM (something only
    /// the host has), or nil: the guest then gets what it runs as read-only shares.
    func notInVM(_ config: ExperimentConfig) -> String?
    /// autoharness runs each task itself (the agent, then the verifier, each in a sandbox
    /// of the task and verifier policies), from a dataset directory; otherwise a tool runs
    /// the tasks under `runner:`.
    var runsOwnTasks: Bool { get }
    /// With `executor: ray`, the tool runs on the cluster's nodes, each on a shard of a run's
    /// ids (`NodeTool`); the kinds that run their own tasks send them whole instead.
    var shardsOnNodes: Bool { get }
    /// `init`: checks what the operator gave (`--dataset`, `--repo`, the tool found) and
    /// returns the dataset to write and the benchmark's template placeholders.
    func initialize(_ o: InitOptions, tool: String, layout: ExperimentLayout) throws -> InitValues
    /// The adapter, with every tool, file and key it needs checked now (unless `checkTools`
    /// is false: reading the record needs no tool).
    func adapter(_ config: ExperimentConfig, root: String, checkTools: Bool) throws -> any BenchmarkAdapter
    /// Why the rewards this configuration produces are not independent of agent.py's process
    /// (shown in `status`, the gate's answer and the report), or nil when they are.
    func unverified(_ config: ExperimentConfig) -> String?
    /// autoharness runs this configuration's verifiers itself, so `sandbox.verifier_tools`
    /// applies to them.
    func runsVerifiers(_ config: ExperimentConfig) -> Bool
    /// What the held-out VM must run beside the tasks (a database server), built by the host
    /// from nothing held-out in directories `inputs` makes and shares read-only.
    func guestServices(_ config: ExperimentConfig, adapter: any BenchmarkAdapter, inputs: any GuestInputDirectories,
                       log: (@Sendable (String) -> Void)?) throws -> GuestServices
    /// The benchmark as the operator configured it, for messages ("benchmark: NAME", plus
    /// what among its settings the message depends on).
    func configured(_ config: ExperimentConfig) -> String
    /// Where the task directories of `dataset` are, for a benchmark whose tasks can run on
    /// their own image (`ImagesAtInit`); nil for one whose cannot.
    func imageTasks(dataset: String) -> String?
    /// The placeholders `init` fills differently when it made the tasks' images (`built`).
    func imagePlaceholders(built: Bool) -> [String: String]
}

extension BenchmarkKind {
    package func unverified(_ config: ExperimentConfig) -> String? { nil }
    package var defaultTool: String? { nil }
    package var defaultDataset: String? { nil }
    package var runsOwnTasks: Bool { false }
    package var shardsOnNodes: Bool { false }
    package func runsVerifiers(_ config: ExperimentConfig) -> Bool { false }
    package func configured(_ config: ExperimentConfig) -> String { "benchmark: \(name)" }
    package func imageTasks(dataset: String) -> String? { nil }
    package func imagePlaceholders(built: Bool) -> [String: String] { [:] }
    package func guestServices(_ config: ExperimentConfig, adapter: any BenchmarkAdapter, inputs: any GuestInputDirectories,
                       log: (@Sendable (String) -> Void)?) throws -> GuestServices { GuestServices() }
}

extension ExperimentConfig {
    /// The configured benchmark runs each task itself (`BenchmarkKind.runsOwnTasks`).
    package var runsOwnTasks: Bool { BenchmarkKinds.named(benchmark)?.runsOwnTasks ?? false }

    /// The configured benchmark's tool runs on Ray's nodes, a shard each (`BenchmarkKind.shardsOnNodes`).
    package var shardsOnNodes: Bool { BenchmarkKinds.named(benchmark)?.shardsOnNodes ?? false }

    /// Why this configuration's rewards are unverified (`BenchmarkKind.unverified`), or nil.
    public var unverifiedRewards: String? { BenchmarkKinds.named(benchmark)?.unverified(self) }
}

/// What `init` writes for a benchmark: the config's `dataset:` and the placeholders of its
/// templates (`{{name}}` → value).
package struct InitValues {
    package var dataset: String
    package var placeholders: [String: String] = [:]
}

/// Every benchmark this build runs.
package enum BenchmarkKinds {
    static let all: [any BenchmarkKind] = [LocalKind(), TerminalBenchKind(), TauBenchKind(), BirdInteractKind(), CommandKind(), BfclKind(), InspectKind()]

    package static var names: [String] { all.map(\.name) }

    package static func named(_ name: String) -> (any BenchmarkKind)? { all.first { $0.name == name } }

    /// Why `config`'s held-out split cannot run in the VM, or nil (`BenchmarkKind.notInVM`).
    package static func notInVM(_ config: ExperimentConfig) -> String? {
        guard let kind = named(config.benchmark) else { return "benchmark '\(config.benchmark)' is not one this build runs" }
        return kind.notInVM(config)
    }
}

extension InitValues {
    /// The config's `sandbox.verifier_tools` line for a benchmark whose verifiers autoharness
    /// runs, always a comment: the tools are a host path, and an experiment moved to a host or
    /// a container without them must still open. `condition` (e.g. `env_provider: local`) says
    /// when it applies.
    static func verifierToolsLine(when condition: String?) -> String {
        let dir = ExperimentLayout.defaultVerifierTools
        let what = "uv, pytest's wheels, curl and apt-get shims, read-only in each verifier, for test scripts that fetch them (Terminal-Bench 2.0's)"
        let state = (try? VerifierTools(directory: dir)) != nil ? "installed here" : "scripts/install-verifier-tools installs it"
        return "  # verifier_tools: \(dir)  # \(condition.map { "with \($0): " } ?? "")\(what); \(state)\n"
    }
}
