// `benchmark: tau-bench` — tau2-bench (retail, airline, telecom) with its own
// `split_tasks.json` train/test split and seed 300, as upstream auto-harness runs it.
//
// tau2 runs agent.py in its own process (the agent is a Python object the orchestrator
// calls), and that process also holds the tasks, so two sandboxes:
//   1. runner (`benchmark-runner`): autoharness_tau2_run.py registers HarnessAgent and calls
//      tau2's run_domain on the requested ids. TAU2_DATA_DIR is a copy of the data directory
//      on the run's tmpfs in which every task's `evaluation_criteria` (expected actions,
//      assertions) is emptied and only the files tau2 opens for the domain are copied
//      (`visibleFiles`: no other domain, no shipped results, no task issues, no old
//      simulations): agent.py cannot read the answers, because they are not in its sandbox.
//      tau2 therefore grades these simulations 1.0; that score is never read.
//   2. scorer (`benchmark-scorer`, no agent.py mounted, a process that never imports it):
//      autoharness_tau2_score.py re-evaluates each saved trajectory with tau2's own
//      evaluate_simulation against the full task definitions (replaying the tool calls on a
//      fresh environment) and writes `{task id: reward | null}`.
// The supervisor reads the scorer's rewards; a task with no simulation, a simulation that
// does not parse, or a premature termination scores 0.

import FoundationEssentials
import Glibc
import SandboxPolicy
import SupervisorIO

public struct Tau2Adapter: BenchmarkAdapter {
    public let domain: String
    /// The tau2 data directory (TAU2_DATA_DIR): `tau2/domains/<domain>/tasks.json`, ...
    public let dataDirectory: String
    /// Where autoharness_tau2_run.py and autoharness_tau2_score.py are (host path, bound read-only).
    public let scriptsDirectory: String
    public let tool: ToolSettings
    /// tau2's own split (`split_tasks.json`); nil for a domain without one (banking_knowledge),
    /// whose tasks the supervisor splits like any benchmark's.
    public let split: (train: [String], test: [String])?
    /// Every task id of the domain.
    public let taskIDs: [String]
    /// What the runner may see of the domain's data, and how its tasks are stored.
    public let layout: Tau2Domain
    public var agentModel: String?
    public var userModel: String?
    public var seed: UInt64 = 300
    /// tau2's `--retrieval-config`, the same for the runner and the scorer (whose environments
    /// must be built as the runner's were).
    public var retrievalConfig: String?
    public var concurrency = 3
    public var environment: [String] = []

    public var name: String { "tau-bench" }
    public var fixedSplit: (train: [String], test: [String], seed: UInt64)? { split.map { ($0.train, $0.test, seed) } }

    var domainDirectory: String { dataDirectory + "/tau2/domains/" + domain }
    public var hostPaths: [String] { [dataDirectory, scriptsDirectory] }

    /// tau2 calls its models through LiteLLM, which fetches a price list from GitHub when it
    /// is imported; its bundled copy serves as well, and the fetch would be a refused
    /// connection recorded against the run.
    static let quietEnvironment = ["LITELLM_LOCAL_MODEL_COST_MAP=True"]

    /// Reads the domain's task ids (`tasks.json`, or banking_knowledge's `tasks/task_*.json`)
    /// and its own split where it has one. `layout` is autoharness's description of the domain
    /// (`Tau2Domain.known`) or the operator's (`runner_data`).
    public init(domain: String, dataDirectory: String, scriptsDirectory: String, tool: ToolSettings, layout: Tau2Domain) throws(BenchmarkError) {
        self.domain = domain
        self.dataDirectory = dataDirectory
        self.scriptsDirectory = scriptsDirectory
        self.tool = tool
        self.layout = layout
        let dir = dataDirectory + "/tau2/domains/" + domain
        let fd = FileSystem.openDirectory(dir)
        guard fd >= 0 else {
            throw BenchmarkError(.invalidBenchmark, "tau2 domain \(domain): \(dir): \(FileSystem.errorText()) (tau2_data_dir must be tau2-bench's data directory)")
        }
        defer { close(fd) }
        let tasks = try layout.tasks(in: fd, path: dir)
        let known = Set(tasks.compactMap { $0["id"]?.string })
        if let bad = known.sorted().first(where: { !TraceName.isAcceptableID($0) }) {
            throw BenchmarkError(.invalidBenchmark, "\(dir): task id \(bad.debugDescription) is empty, too long or has control characters")
        }
        guard layout.ownSplit else {
            guard !known.isEmpty else { throw BenchmarkError(.invalidBenchmark, "\(dir): no tasks") }
            split = nil
            taskIDs = known.sorted()
            return
        }
        let splits = try Tau2Domain.json(at: fd, "split_tasks.json", path: dir)
        guard let train = splits["train"]?.array?.compactMap(\.string), let test = splits["test"]?.array?.compactMap(\.string),
              !train.isEmpty, !test.isEmpty else {
            throw BenchmarkError(.invalidBenchmark, "\(dir)/split_tasks.json: needs non-empty \"train\" and \"test\" lists of task ids")
        }
        guard Set(train).isDisjoint(with: test) else {
            throw BenchmarkError(.invalidBenchmark, "\(dir)/split_tasks.json: \"train\" and \"test\" share ids")
        }
        let unknown = (train + test).filter { !known.contains($0) }
        guard unknown.isEmpty else {
            throw BenchmarkError(.invalidBenchmark, "\(dir)/split_tasks.json names ids not in tasks.json: \(unknown.prefix(5).joined(separator: ", "))")
        }
        split = (train, test)
        taskIDs = (train + test).sorted()
    }

    public func run(_ ids: [String], _ context: AdapterRunContext) throws(BenchmarkError) -> [TaskOutcome] {
        guard !ids.isEmpty else { return [] }
        if context.oracle { throw BenchmarkError(.configuration, "--oracle is only for local benchmarks") }
        var settings = tool
        // A domain whose tools run shell commands through srt (banking_knowledge): autoharness's
        // srt, each command in a sandbox of its own (`ShellToolCalls`).
        if layout.shell && settings.shellCalls == nil { settings.shellCalls = scriptsDirectory + "/srt-shim" }
        let run = try ToolRun(settings: settings, context: context, ids: ids)
        defer { run.finish() }
        try run.writeTaskIDs(ids)
        let scripts = MountSpec(kind: .readOnly(source: scriptsDirectory), destination: scriptsDirectory)

        // 1. the simulations, with agent.py, against a copy of the data without answers
        var runner = ToolInvocation(
            policy: tool.runnerPolicy,
            argv: tool.command + [scriptsDirectory + "/autoharness_tau2_run.py", "--domain", domain, "--task-ids-file", "/work/in/task_ids.txt",
                                  "--max-concurrency", String(min(concurrency, ids.count)), "--seed", String(seed),
                                  "--out", "/work/out/simulations.json"]
                + (agentModel.map { ["--agent-llm", $0] } ?? []) + (userModel.map { ["--user-llm", $0] } ?? [])
                + (retrievalConfig.map { ["--retrieval-config", $0] } ?? []),
            withAgent: true, label: "tau2")
        runner.environment = environment + Self.quietEnvironment + ["TAU2_DATA_DIR=/work/out/data"]
        runner.extraMounts = [scripts]
        let domain = self.domain, source = dataDirectory, layout = self.layout
        runner.prepareOutput = { out, owner throws(BenchmarkError) in
            try layout.sanitizedData(from: source, domain: domain, ids: ids, into: out, owner: owner)
        }
        context.log("tau2: \(ids.count) task(s), domain \(domain)")
        let runExit = run.launch(runner, total: ids.count)
        run.reportFailure("tau2", runExit)

        // 2. re-scoring without agent.py, against the full task definitions
        var scorer = ToolInvocation(
            policy: tool.scorerPolicy,
            argv: tool.command + [scriptsDirectory + "/autoharness_tau2_score.py", "--domain", domain, "--task-ids-file", "/work/in/task_ids.txt",
                                  "--simulations", "/work/run/simulations.json", "--out", "/work/out/rewards.json", "--traces", "/work/out/traces"]
                + (retrievalConfig.map { ["--retrieval-config", $0] } ?? []),
            withAgent: false, label: "tau2 scorer")
        scorer.environment = environment.filter { !$0.hasPrefix("AGENT_") } + Self.quietEnvironment + ["TAU2_DATA_DIR=\(dataDirectory)"]
        // The evaluator builds the domain's environments, which check that srt and its helpers
        // are on PATH (they run no command): the shim's names, which never run here.
        if let shim = settings.shellCalls { scorer.environment.append("PATH=\(shim):/usr/local/bin:/usr/bin:/bin") }
        scorer.extraMounts = [scripts, MountSpec(kind: .readOnly(source: dataDirectory), destination: dataDirectory)]
            + (settings.shellCalls.map { [MountSpec(kind: .readOnly(source: $0), destination: $0)] } ?? [])
        scorer.runDirectory = run.scratch.path + "/app"
        scorer.outputName = "score"
        // Train runs: which checks of tau2's reward breakdown failed, from the scorer's
        // reward_info.json (the scorer ran without agent.py, against the full task).
        return run.score(ids, with: scorer, after: runExit, nullDetail: "no scorable simulation (tau2 run \(runExit.summary))",
                         evidence: ("reward_info.json", FailureParsers.tau2))
    }
}
