import Foundation
import Benchmark
import SandboxPolicy
import Yams
import SupervisorIO

/// `experiment_config.yaml`: upstream auto-harness keys first, then ours.
public struct ExperimentConfig: Sendable, Equatable {

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
    /// `sandbox.verifier_tools`: the toolbox every verifier gets read-only
    /// (scripts/install-verifier-tools; `VerifierTools`).
    public var verifierTools: String?
    public var policyDirectory: String?
    public var scratch = "/dev/shm/autoharness"
    /// `host:port` pairs the coding agent's egress proxy may connect to (`sandbox.network.allow`).
    public var networkAllow: [String] = []
    /// `sandbox.network.inference`: the coding agent's model APIs, reached only through an
    /// inference gate of the run's own (its keys swapped for placeholders, vendor state refused).
    public var agentInference: [String] = []
    /// Where `sandbox.network` is (`file:line`), for what is refused about it at run start.
    public var agentNetworkPlace: String?
    /// `sandbox.network.upstream_ca`: a CA that gate trusts upstream besides the system's store.
    public var agentUpstreamCA: String?
    /// `sandbox.network.tunnelled_keys`: `coding_agent.env_pass` keys for plain tunnels,
    /// passed as they are.
    public var agentTunnelledKeys: [String] = []
    /// The hosts the coding agent reaches, whichever way.
    public var agentTargets: [String] { networkAllow + agentInference }
    public var codingAgentPolicy = "coding-agent"
    // coding_agent: (used by `autoharness run`)
    public var codingAgent = CodingAgent()
    /// `gate:`: how a candidate is judged on the held-out split and what is disclosed.
    public var gate = GateSettings()
    /// Where `coding_agent.binds` and `coding_agent.home_seed` are (`file:line`), by setting.
    public var codingAgentPlaces: [String: String] = [:]
    /// `timeout_policy` (upstream's key): how a held-out task that timed out without a reward
    /// counts in val_score.
    public var timeoutPolicy: TimeoutPolicy = .agent
    public enum TimeoutPolicy: String, Sendable, CaseIterable {
        /// It scores 0, like any other failure (upstream's default).
        case agent
        /// The operator also sees the mean over the tasks that finished; the gate decides and
        /// discloses as under `agent` (`HeldOutScore`).
        case infra
    }
    /// `loop:`: how `autoharness run` reveals train tasks and ranks candidates.
    public var loop = Loop()
    public static let maxCandidates = 8
    // budget:
    /// `autoharness run` stops once the coding agent's reported cost in this run reaches this
    /// many dollars (0: no limit).
    public var maxCostUSD = 0.0
    // external benchmarks:
    /// `command`: the task ids (or `tasksFile`, one id per line or a JSON list).
    public var tasks: [String]?
    public var tasksFile: String?
    /// How the benchmark's tool is run: `runner:`.
    public var runner = Runner()
    /// Where tasks run: `executor:` (this host, or the nodes of a Ray cluster).
    public var executor = Executor()
    /// The host paths bound into the sandboxes that must never see a benchmark's answers
    /// (agent.py's runner, the triage, the coding agent), with the setting each came from:
    /// what each benchmark's `RunnerBinds.refuse` checks.
    var toolBinds: [(setting: String, path: String)] {
        runner.binds.map { ("runner.binds", $0) } + (triage?.tool.binds ?? []).map { ("triage.binds", $0) }
            + codingAgent.binds.map { (codingAgentPlaces["coding_agent.binds"].map { "\($0): coding_agent.binds" } ?? "coding_agent.binds", $0) }
    }

    /// `triage:`: a command that reads the train split's failure records in a sandbox of its
    /// own and writes a hypothesis, a label and a severity per record (nil: no triage).
    public var triage: Triage?

    /// `triage:` in the experiment config: the tool's settings as `runner:` has them (its
    /// policy `triage`, its model API behind the inference gate) and when it runs.
    public struct Triage: Sendable, Equatable {
        public var tool = Runner()
        public enum After: String, Sendable, CaseIterable { case batch, trainRun = "train_run" }
        /// `triage.after`: after each revealed batch's run (`batch`), or after every train run
        /// the coding agent or the operator asks for (`train_run`); `autoharness triage` any time.
        public var after = After.batch
        /// `triage.preset: claude | codex`: the command, switches, install and model API of the
        /// coding-agent preset (`CodingAgentPreset`), with a triage prompt; `triage.bin` the CLI.
        public var preset: String?
        public var bin: String?
        /// `triage.env`: constant variables (switches; never secrets).
        public var env: [String: String] = [:]
        /// `triage.max_records`: records one automatic run reads at most (the newest failures
        /// first wait for the next), at most `recordsCap`.
        public var maxRecords = 200
        /// The most records one triage input holds (`TriageSchema.input`).
        public static let recordsCap = 5000
        public init() { tool.policy = "triage" }
    }

    /// `loop:` in the experiment config.
    public struct Loop: Sendable, Equatable {
        /// `loop.batch_size`: train tasks revealed per rolling batch (0: off, every train task is
        /// visible from the start, as upstream runs).
        public var batchSize = 0
        /// `loop.batch_iterations`: gate attempts a batch may take before the next batch is
        /// revealed without an accepted gate.
        public var batchIterations = 5
        /// `loop.review`: `auto` (an accepted gate's promotions join the suite) or `operator`
        /// (they wait for `autoharness suite approve`).
        public var review = Review.auto
        /// `loop.candidates`: candidate agent.py files one gate may rank (`autoharness candidate`);
        /// only the best on train and the suite is judged on the held-out split.
        public var candidates = 1
        public init() {}
    }
    public enum Review: String, Sendable, CaseIterable { case auto, `operator` }

    /// `executor:` in the experiment config.
    public struct Executor: Sendable, Equatable {
        public enum Kind: String, Sendable, CaseIterable { case local, ray }
        public var kind = Kind.local
        /// `executor.address`: the Ray cluster's GCS address (host:port).
        public var address: String?
        /// `executor.python`: the Python that has `ray` (the driver runs with it).
        public var python = "python3"
        /// `executor.tasks_per_request`: tasks sent to a node in one signed request.
        public var tasksPerRequest = 1
        /// `executor.order`: which tasks go out first.
        public enum Order: String, Sendable, CaseIterable {
            case longestFirst = "longest_first"
            case listed
        }
        public var order = Order.longestFirst
        /// `executor.driver_user`: the user (a name, or UID:GID) the Ray driver runs as; nil,
        /// this process's (root, confined: docs/past-one-machine.md).
        public var driverUser: String?
        public init() {}
    }
    /// `reasoning_effort` (upstream's key): passed to agent.py as AGENT_REASONING_EFFORT.
    public var reasoningEffort: String?
    /// The configured benchmark's own keys (`env_provider`, `user_model`, `seed`, `mode`, ...),
    /// typed by its `BenchmarkKind.Settings` and read only through `BenchmarkKind.settings`.
    var benchmarkSettings = BenchmarkSettingsBox()

    /// A host of a model vendor's domain (any port, any label under it, a trailing dot), which
    /// `runner.network.allow` refuses: it belongs in `runner.network.inference`.
    static func isModelAPI(_ target: String) -> Bool {
        guard let colon = target.lastIndex(of: ":") else { return false }
        var host = target[..<colon].lowercased()
        while host.hasSuffix(".") { host.removeLast() }
        return ["openai.com", "anthropic.com"].contains { host == $0 || host.hasSuffix("." + $0) || host == "*." + $0 }
    }

    public struct Runner: Sendable, Equatable {
        /// The tool's argv prefix (`command`: the whole argv with placeholders).
        public var command: [String]?
        public var binds: [String] = []
        public var envPass: [String] = []
        public var networkAllow: [String] = []
        /// Model APIs reached only through the proxy's inference gate (`InferenceGate`).
        public var networkInference: [String] = []
        /// Where `network.inference` is (`file:line`), for what is refused about it.
        public var inferencePlace: String?
        /// `network.tunnelled_keys`: `env_pass` keys for hosts of `networkAllow` (plain
        /// tunnels, which cannot swap a placeholder): passed as they are.
        public var tunnelledKeys: [String] = []
        /// A CA file the gate trusts upstream besides the system's store (a corporate
        /// TLS-inspecting proxy's, a test server's).
        public var upstreamCA: String?
        public var timeout: Double?
        public var policy = "benchmark-runner"
        public var scorerPolicy = "benchmark-scorer"
        /// `command`: the argv that scores the runner's outputs in a sandbox of its own,
        /// without agent.py (placeholders as `command`'s, plus `{run_dir}`); nil: the
        /// command's own rewards count, shown as unverified.
        public var scorer: [String]?
        /// Host paths bound read-only in the scorer's sandbox alone (the answers it checks
        /// against), never in the runner's.
        public var scorerBinds: [String] = []
        /// Seconds a scorer may take (its own limit, not the runner's: a FIFO or a huge file
        /// a runner left must not hold a gate for the runner's whole day).
        public var scorerTimeout: Double?
        /// Where autoharness's helper scripts for the tool are (tau2: run and re-score).
        public var scripts: String?
        /// A directory holding autoharness's `srt` (templates/tau-bench/srt-shim): first on the
        /// runner's PATH, each shell command the runner runs through it runs in a sandbox of its
        /// own (`ShellToolCalls`).
        public var srtShim: String?
        public init() {}
    }


    /// How `autoharness run` starts and restarts the coding agent.
    public struct CodingAgent: Sendable, Equatable {
        /// argv; an element `{prompt}` is replaced by `prompt` on the first start and by
        /// `continuePrompt` on restarts.
        public var command: [String] = []
        public var envPass: [String] = []
        /// Constant variables set in the agent's sandbox (switches such as
        /// DISABLE_AUTOUPDATER=1; secrets go by name in `envPass`, never here).
        public var env: [String: String] = [:]
        /// A directory (relative to the experiment root, or absolute) whose files are copied
        /// into the agent's fresh `$HOME` at the start of a run (e.g. `.codex/config.toml`).
        public var homeSeed: String?
        /// Host paths bound read-only at the same path (the agent's own install, say).
        public var binds: [String] = []
        public var prompt = "Read PROGRAM.md and start the optimization loop."
        public var continuePrompt = "You were restarted. Read PROGRAM.md and workspace/learnings.md, check `autoharness status`, and continue the optimization loop."
        /// Seconds before restarting the agent; doubled for each further session in a row
        /// without progress (or crash), capped at `RunLoop.maxBackoff`.
        public var restartBackoff = 2.0
        /// An exit within this many seconds of the start counts as a crash.
        public var quickExitSeconds = 30.0
        /// This many crashes in a row stop the run (a crash loop).
        public var maxCrashes = 5
        /// Restarts after sessions that made no progress, in a row; the next such session
        /// stops the run: nothing is left for the agent to do.
        public var maxRestarts = 3
        /// Prices the tokens of CLIs that report no cost (Codex), and of sessions cut off
        /// before their CLI reported one.
        public var price: TokenPrice?
        public init() {}
    }

    public init(benchmark: String, dataset: String? = nil) {
        self.benchmark = benchmark
        self.dataset = dataset
    }

    public static var supportedBenchmarks: [String] { BenchmarkKinds.names }
}

/// A config problem: `file:line: key: message`.
public struct ConfigError: Error, CustomStringConvertible, Sendable {
    public var file: String
    public var line: Int?
    public var message: String
    public var column: Int? = nil
    public var description: String {
        guard let line else { return "\(file): \(message)" }
        return column.map { "\(file):\(line):\($0): \(message)" } ?? "\(file):\(line): \(message)"
    }
}

/// Every problem of one config file.
public struct ConfigErrors: Error, CustomStringConvertible, Sendable, ExpressibleByArrayLiteral {
    public var errors: [ConfigError]
    public init(_ errors: [ConfigError]) { self.errors = errors }
    public init(arrayLiteral elements: ConfigError...) { errors = elements }
    public var description: String { errors.map(\.description).joined(separator: "\n") }
}

extension ConfigError: AutoharnessError {
    public var category: ErrorCategory { .usage }
}

extension ConfigErrors: AutoharnessError {
    public var category: ErrorCategory { .usage }
}
