import Benchmark
import Foundation

/// One benchmark autoharness runs, in one place: its name, tool, dataset default, the
/// upstream keys it reads, what `init` checks and writes, and how its adapter is made.
///
/// Adding a benchmark: a type conforming here (a file beside this one), its entry in
/// `BenchmarkKinds.all`, and `templates/<name>/` (keys.yaml, runner.yaml, PROGRAM.md,
/// agent.py). Nothing else names benchmarks (ArchitectureTests.benchmarksRegisteredOnce).
protocol BenchmarkKind: Sendable {
    /// `benchmark:` in experiment_config.yaml, `init --benchmark`, `templates/<name>/`.
    var name: String { get }
    /// The tool `init` looks for on PATH when `--tool` names none (nil: no external tool).
    var defaultTool: String? { get }
    var defaultDataset: String? { get }
    /// One sentence: how to install what the benchmark runs.
    var installHint: String { get }
    /// The upstream keys it reads besides the common ones (`UpstreamKey.common`).
    var keys: [UpstreamKey] { get }
    /// Why this configuration's held-out split cannot run in the held-out VM (something only
    /// the host has), or nil: the guest then gets what it runs as read-only shares.
    func notInVM(_ config: ExperimentConfig) -> String?
    /// autoharness runs each task itself (the agent, then the verifier, each in a sandbox
    /// of the task and verifier policies), from a dataset directory; otherwise a tool runs
    /// the tasks under `runner:`.
    var runsOwnTasks: Bool { get }
    /// `init`: checks what the operator gave (`--dataset`, `--repo`, the tool found) and
    /// returns the dataset to write and the benchmark's template placeholders.
    func initialize(_ o: ExperimentSupervisor.InitOptions, tool: String, layout: ExperimentLayout) throws -> InitValues
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
    func guestServices(_ config: ExperimentConfig, adapter: any BenchmarkAdapter, inputs: GuestInputs,
                       log: (@Sendable (String) -> Void)?) throws -> GuestServices
}

extension BenchmarkKind {
    func unverified(_ config: ExperimentConfig) -> String? { nil }
    var defaultTool: String? { nil }
    var defaultDataset: String? { nil }
    var keys: [UpstreamKey] { [] }
    var runsOwnTasks: Bool { false }
    func runsVerifiers(_ config: ExperimentConfig) -> Bool { false }
    func guestServices(_ config: ExperimentConfig, adapter: any BenchmarkAdapter, inputs: GuestInputs,
                       log: (@Sendable (String) -> Void)?) throws -> GuestServices { GuestServices() }
}

extension ExperimentConfig {
    /// The configured benchmark runs each task itself (`BenchmarkKind.runsOwnTasks`).
    var runsOwnTasks: Bool { BenchmarkKinds.named(benchmark)?.runsOwnTasks ?? false }

    /// Why this configuration's rewards are unverified (`BenchmarkKind.unverified`), or nil.
    public var unverifiedRewards: String? { BenchmarkKinds.named(benchmark)?.unverified(self) }
}

/// What `init` writes for a benchmark: the config's `dataset:` and the placeholders of its
/// templates (`{{name}}` → value).
struct InitValues {
    var dataset: String
    var placeholders: [String: String] = [:]
}

/// Every benchmark this build runs.
enum BenchmarkKinds {
    static let all: [any BenchmarkKind] = [LocalKind(), TerminalBenchKind(), TauBenchKind(), BirdInteractKind(), CommandKind()]

    static var names: [String] { all.map(\.name) }

    static func named(_ name: String) -> (any BenchmarkKind)? { all.first { $0.name == name } }

    /// Why `config`'s held-out split cannot run in the VM, or nil (`BenchmarkKind.notInVM`).
    static func notInVM(_ config: ExperimentConfig) -> String? {
        guard let kind = named(config.benchmark) else { return "benchmark '\(config.benchmark)' is not one this build runs" }
        return kind.notInVM(config)
    }

    /// Every upstream key some benchmark reads, with the common ones.
    static var upstreamKeys: [UpstreamKey] {
        var seen = Set<String>()
        return (UpstreamKey.common + all.flatMap(\.keys)).filter { seen.insert($0.name).inserted }
    }
}

/// Upstream auto-harness's per-benchmark keys, typed. The config parser checks each value
/// where its line is known (numbers bounded, choices named); adapters read the fields.
public struct UpstreamSettings: Sendable, Equatable {
    /// terminal-bench: Harbor's multiplier of each task's own agent timeout.
    public var agentTimeoutMultiplier: Double?
    /// Passed to agent.py as AGENT_REASONING_EFFORT.
    public var reasoningEffort: String?
    /// tau-bench, bird-interact: the user simulator's model.
    public var userModel: String?
    /// tau-bench: the simulations' seed.
    public var seed: Int?
    /// bird-interact: a-interact or c-interact.
    public var mode: String?
    public var patience: Int?
    public var birdRepo: String?
    public var birdPythonBin: String?
    public var birdDataPath: String?
    public var systemAgentPort: Int?
    public var userSimPort: Int?
    public var dbEnvPort: Int?
    /// bird-interact: the directory of PostgreSQL's Unix socket.
    public var pgHost: String?
    public var pgPort: Int?
    public var pgUser: String?
    public var pgPassword: String?
    /// tau-bench: tau2's data directory (never bound into a run).
    public var tau2DataDir: String?
    /// terminal-bench: a local Harbor registry.json.
    public var registryPath: String?
    public init() {}
}

/// One upstream key: its name in experiment_config.yaml and the typed field it fills.
struct UpstreamKey {
    enum Value {
        case text(WritableKeyPath<UpstreamSettings, String?>)
        case choice(WritableKeyPath<UpstreamSettings, String?>, [String])
        case integer(WritableKeyPath<UpstreamSettings, Int?>, ClosedRange<Int>)
        case number(WritableKeyPath<UpstreamSettings, Double?>, ClosedRange<Double>)
    }
    let name: String
    let value: Value

    init(_ name: String, _ value: Value) {
        self.name = name
        self.value = value
    }

    /// Keys every benchmark reads.
    static var common: [UpstreamKey] { [UpstreamKey("reasoning_effort", .text(\.reasoningEffort))] }

    static let portRange = 1024...65535
}
