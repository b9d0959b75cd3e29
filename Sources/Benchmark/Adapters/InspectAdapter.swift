// `benchmark: inspect` — an inspect_ai task (UK AISI's evaluation framework), agent.py its
// solver, the task's own scorers the judge.
//
// inspect keeps a task's samples, targets and scorers in one Python process; autoharness keeps
// them apart. At `init` the task's dataset is read once into the experiment's private
// directory (`inspect-samples.jsonl`: each sample's id, input, choices, target and metadata);
// from then on:
//   1. runner (`benchmark-runner`, agent.py mounted): inspect's solve phase (`inspect eval
//      --no-score`) of a task of ours (autoharness_inspect_solve.py) whose dataset is
//      /work/out/samples.jsonl, this run's samples reduced to id, input and choices by the
//      supervisor, and whose solver is agent.py's `agent()`. inspect's install is bound
//      read-only with the datasets it carries hidden (`hiddenPackageData`); of the scripts
//      directory only the solve task's file is there; neither the frozen samples nor the
//      task file.
//   2. scorer (`benchmark-scorer`, no agent.py, a process that never imports it):
//      autoharness_inspect_score.py takes from the runner's log only each requested
//      sample's output and messages, rebuilds the sample from the frozen list (input,
//      choices, target, metadata), and scores it with the scorers of the task it loads
//      itself, writing `{id: reward | null}` and each train sample's verdict.
// A sample the solver raised on, one missing from the log, or a log that is not one JSON log
// of the solve task scores 0; scores the log already holds are never read.

import FoundationEssentials
import Glibc
import SandboxPolicy
import SupervisorIO

public struct InspectAdapter: BenchmarkAdapter {
    /// The virtual environment inspect_ai is installed in (scripts/install-inspect).
    public let environmentDirectory: String
    /// Its site-packages directory.
    public let sitePackages: String
    /// Its Python: runs the solve phase (in the runner) and the scorer.
    public let python: String
    /// Where autoharness_inspect_solve.py and autoharness_inspect_score.py are (bound read-only).
    public let scriptsDirectory: String
    /// What `inspect eval` takes: `/abs/task.py@name` or a registered `package/name`.
    public let taskSpec: String
    /// `NAME=VALUE` arguments of the task (`-T`).
    public var taskArguments: [String] = []
    /// The experiment's frozen sample list (root-only; the scorer gets its run's lines).
    public let samplesFile: String
    /// The scorer whose value is the reward (nil: the task's first).
    public var scoreName: String?
    public let tool: ToolSettings
    public let taskIDs: [String]
    /// inspect's model for the solve phase (`--model`): `mockllm/model`, `openai/...`; nil: none.
    public var agentModel: String?
    public var concurrency = 4
    public var environment: [String] = []
    /// Each sample's line for the runner: its id, input and choices.
    let runnerLines: [String: [UInt8]]
    /// Each sample's whole line (target, metadata), for the scorer.
    let scorerLines: [String: [UInt8]]

    public var name: String { "inspect" }
    public var toolActor: String { "inspect scorer" }
    public var hostPaths: [String] { [environmentDirectory, scriptsDirectory, samplesFile] + (taskDirectory.map { [$0] } ?? []) }

    /// The fields of a sample the runner gets: what a solver is shown. Not `target`,
    /// `metadata` (inspect_evals keep answer keys there) or anything else of the task.
    static let runnerFields: Set<String> = ["id", "input", "choices"]
    /// Largest frozen sample list read.
    static let samplesLimit = 256 << 20
    /// Directories of an inspect install that hold datasets with their answers, hidden in the
    /// runner (relative to site-packages): inspect_ai's packaged example datasets
    /// (`example_dataset`, theory_of_mind among them) and the whole of inspect_evals, whose
    /// evals carry their data. The solve task reads only the samples file.
    public static let hiddenPackageData = ["inspect_ai/dataset/_examples", "inspect_evals"]

    /// The directory of a task file (`/abs/dir/task.py@name`), bound read-only into the
    /// scorer so the task loads as it did at init; nil for a registered task.
    public var taskDirectory: String? { Self.taskDirectory(of: taskSpec) }

    /// The directory of `spec`'s task file, or nil for a registered task.
    static func taskDirectory(of spec: String) -> String? {
        let file = spec.split(separator: "@", maxSplits: 1).first.map(String.init) ?? spec
        guard file.hasPrefix("/"), file.hasSuffix(".py"), let cut = file.lastIndex(of: "/") else { return nil }
        return cut == file.startIndex ? "/" : String(file[..<cut])
    }

    /// Reads the frozen sample list; `only` keeps those ids (each must be in it).
    public init(environmentDirectory: String, sitePackages: String, python: String, scriptsDirectory: String, taskSpec: String,
                samplesFile: String, tool: ToolSettings, only: [String]?) throws(BenchmarkError) {
        let bytes: [UInt8]
        switch InputFile.read(samplesFile, cap: Self.samplesLimit) {
        case .success(let b): bytes = b
        case .failure(let problem):
            throw BenchmarkError(.invalidBenchmark, "inspect: \(samplesFile): \(problem.explanation("the task's sample list (init writes it)"))")
        }
        try self.init(environmentDirectory: environmentDirectory, sitePackages: sitePackages, python: python, scriptsDirectory: scriptsDirectory,
                      taskSpec: taskSpec, samples: bytes, from: samplesFile, tool: tool, only: only)
    }

    /// The samples `bytes` hold (JSON lines, as the frozen list has them; `from` names where
    /// they came from in messages): a worker node's, from its request.
    public init(environmentDirectory: String, sitePackages: String, python: String, scriptsDirectory: String, taskSpec: String,
                samples bytes: [UInt8], from samplesFile: String, tool: ToolSettings, only: [String]?) throws(BenchmarkError) {
        self.environmentDirectory = environmentDirectory
        self.sitePackages = sitePackages
        self.python = python
        self.scriptsDirectory = scriptsDirectory
        self.taskSpec = taskSpec
        self.samplesFile = samplesFile
        self.tool = tool
        var lines: [String: [UInt8]] = [:]
        var whole: [String: [UInt8]] = [:]
        var ids: [String] = []
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        for (n, line) in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).enumerated() {
            guard case .object(let sample)? = JSONValue.parse(Array(line)), let id = sample["id"]?.string, sample["input"] != nil else {
                throw BenchmarkError(.invalidBenchmark, "\(samplesFile):\(n + 1): not a sample (an object with id and input)")
            }
            guard TraceName.isAcceptableID(id), lines[id] == nil else {
                throw BenchmarkError(.invalidBenchmark, "\(samplesFile):\(n + 1): sample id \(id.debugDescription) is unusable or repeated")
            }
            guard let reduced = try? encoder.encode(JSONValue.object(sample.filter { Self.runnerFields.contains($0.key) && !$0.value.isNull })) else {
                throw BenchmarkError(.invalidBenchmark, "\(samplesFile):\(n + 1): sample \(id) does not encode")
            }
            lines[id] = Array(reduced)
            whole[id] = Array(line)
            ids.append(id)
        }
        if let only {
            if let unknown = only.first(where: { lines[$0] == nil }) {
                throw BenchmarkError(.configuration, "inspect: sample \(unknown) is not among the \(ids.count) samples of \(samplesFile)")
            }
            ids = only
        }
        guard !ids.isEmpty else { throw BenchmarkError(.configuration, "inspect: \(samplesFile) holds no samples") }
        taskIDs = ids.sorted()
        let kept = Set(ids)
        runnerLines = lines.filter { kept.contains($0.key) }
        scorerLines = whole.filter { kept.contains($0.key) }
    }

    /// `lines` as a JSONL file in a sandbox's output directory, before it starts.
    static func writeLines(_ lines: [[UInt8]], to out: Int32, owner: (uid_t, gid_t)) throws(BenchmarkError) {
        let bytes = Array(lines.joined(separator: [UInt8(ascii: "\n")])) + [UInt8(ascii: "\n")]
        if let e = FileSystem.writeFile(at: out, "samples.jsonl", bytes, mode: 0o644, owner: owner) {
            throw BenchmarkError(.io, "inspect: samples.jsonl: \(FileSystem.errorText(e))")
        }
    }

    /// What inspect writes under XDG directories and HOME goes to the sandbox's own /tmp.
    static let quietEnvironment = ["HOME=/tmp", "XDG_DATA_HOME=/tmp/xdg/data", "XDG_CACHE_HOME=/tmp/xdg/cache",
                                   "XDG_CONFIG_HOME=/tmp/xdg/config", "XDG_STATE_HOME=/tmp/xdg/state",
                                   "INSPECT_DISPLAY=none", "HF_HUB_OFFLINE=1", "HF_DATASETS_OFFLINE=1"]

    public func run(_ ids: [String], _ context: AdapterRunContext) throws(BenchmarkError) -> [TaskOutcome] {
        guard !ids.isEmpty else { return [] }
        if context.oracle { throw BenchmarkError(.configuration, "--oracle is only for local benchmarks and bfcl") }
        let lines = ids.compactMap { runnerLines[$0] }
        guard lines.count == ids.count else {
            throw BenchmarkError(.configuration, "inspect: asked for samples this experiment does not have: \(ids.filter { runnerLines[$0] == nil }.prefix(3).joined(separator: ", "))")
        }
        let run = try ToolRun(settings: tool, context: context, ids: ids)
        defer { run.finish() }
        try run.writeTaskIDs(ids)
        let scripts = MountSpec(kind: .readOnly(source: scriptsDirectory), destination: scriptsDirectory)
        // The runner gets the solve task's file alone: the scripts directory may hold task
        // files (templates/inspect has the example task), which are the scorer's.
        let solve = scriptsDirectory + "/autoharness_inspect_solve.py"
        let install = MountSpec(kind: .readOnly(source: environmentDirectory), destination: environmentDirectory)

        // 1. the solve phase, with agent.py, on this run's samples without targets or metadata
        var runner = ToolInvocation(
            policy: tool.runnerPolicy,
            argv: [python, "-I", "-m", "inspect_ai", "eval", solve + "@autoharness_solve",
                   "-T", "samples=/work/out/samples.jsonl", "-T", "agent=/work/agent/agent.py", "--model", agentModel ?? "none",
                   "--no-score", "--no-fail-on-error", "--log-format", "json", "--log-dir", "/work/out/log", "--display", "none",
                   "--max-samples", String(max(1, min(concurrency, ids.count))), "--log-level", "warning"],
            withAgent: true, label: "inspect")
        runner.environment = environment + Self.quietEnvironment + ["TIKTOKEN_CACHE_DIR=\(environmentDirectory)/tiktoken-cache"]
        runner.extraMounts = [MountSpec(kind: .readOnly(source: solve), destination: solve), install] + Self.hiddenPackageData.compactMap { relative in
            let path = sitePackages + "/" + relative
            var st = stat()
            return lstat(path, &st) != 0 ? nil : MountSpec(kind: .hide, destination: path)
        }
        runner.prepareOutput = { out, owner throws(BenchmarkError) in try Self.writeLines(lines, to: out, owner: owner) }
        context.log("inspect: \(ids.count) sample(s), model \(agentModel ?? "none")")
        let runExit = run.launch(runner, total: ids.count)
        run.reportFailure("inspect", runExit)

        // 2. the task's scorers, without agent.py, on the frozen samples and the log's answers
        var scorer = ToolInvocation(
            policy: tool.scorerPolicy,
            argv: [python, "-I", scriptsDirectory + "/autoharness_inspect_score.py", "--task", taskSpec, "--samples", "/work/out/samples.jsonl",
                   "--log-dir", "/work/run/log", "--task-ids-file", "/work/in/task_ids.txt", "--out", "/work/out/rewards.json"]
                + taskArguments.flatMap { ["--task-arg", $0] } + (scoreName.map { ["--score", $0] } ?? [])
                + (context.heldOut ? [] : ["--traces", "/work/out/traces"]),
            withAgent: false, label: "inspect scorer")
        scorer.environment = Self.quietEnvironment
        // This run's samples whole, in the scorer's own output directory, made only now: the
        // runner, gone, never had it.
        let whole = ids.compactMap { scorerLines[$0] }
        scorer.prepareOutput = { out, owner throws(BenchmarkError) in try Self.writeLines(whole, to: out, owner: owner) }
        scorer.extraMounts = [scripts, install] + (taskDirectory.map { [MountSpec(kind: .readOnly(source: $0), destination: $0)] } ?? [])
        scorer.runDirectory = run.scratch.path + "/app"
        scorer.outputName = "score"
        return run.score(ids, with: scorer, after: runExit, nullDetail: "no scorable answer (inspect solve \(runExit.summary))",
                         evidence: ("verdict.json", FailureParsers.inspect))
    }
}
