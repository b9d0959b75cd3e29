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
    public let split: (train: [String], test: [String])
    public var agentModel: String?
    public var userModel: String?
    public var seed: UInt64 = 300
    public var concurrency = 3
    public var environment: [String] = []

    public var name: String { "tau-bench" }
    public var taskIDs: [String] { (split.train + split.test).sorted() }
    public var fixedSplit: (train: [String], test: [String], seed: UInt64)? { (split.train, split.test, seed) }

    var domainDirectory: String { dataDirectory + "/tau2/domains/" + domain }
    public var hostPaths: [String] { [dataDirectory, scriptsDirectory] }

    /// tau2 calls its models through LiteLLM, which fetches a price list from GitHub when it
    /// is imported; its bundled copy serves as well, and the fetch would be a refused
    /// connection recorded against the run.
    static let quietEnvironment = ["LITELLM_LOCAL_MODEL_COST_MAP=True"]

    /// Loads `split_tasks.json` and checks `tasks.json` of the domain.
    public init(domain: String, dataDirectory: String, scriptsDirectory: String, tool: ToolSettings) throws(BenchmarkError) {
        self.domain = domain
        self.dataDirectory = dataDirectory
        self.scriptsDirectory = scriptsDirectory
        self.tool = tool
        let dir = dataDirectory + "/tau2/domains/" + domain
        let fd = FileSystem.openDirectory(dir)
        guard fd >= 0 else {
            throw BenchmarkError(.invalidBenchmark, "tau2 domain \(domain): \(dir): \(FileSystem.errorText()) (tau2_data_dir must be tau2-bench's data directory)")
        }
        defer { close(fd) }
        func json(_ name: String) throws(BenchmarkError) -> JSONValue {
            switch FileSystem.readSmallFile(at: fd, name, limit: 256 << 20) {
            case .success(let b):
                guard let v = JSONValue.parse(b) else { throw BenchmarkError(.invalidBenchmark, "\(dir)/\(name): not valid JSON") }
                return v
            case .failure(let problem): throw BenchmarkError(.invalidBenchmark, "\(dir)/\(name): \(problem.explanation("tau2's data"))")
            }
        }
        let splits = try json("split_tasks.json")
        guard let train = splits["train"]?.array?.compactMap(\.string), let test = splits["test"]?.array?.compactMap(\.string),
              !train.isEmpty, !test.isEmpty else {
            throw BenchmarkError(.invalidBenchmark, "\(dir)/split_tasks.json: needs non-empty \"train\" and \"test\" lists of task ids")
        }
        guard Set(train).isDisjoint(with: test) else {
            throw BenchmarkError(.invalidBenchmark, "\(dir)/split_tasks.json: \"train\" and \"test\" share ids")
        }
        let known = Set((try json("tasks.json")).array?.compactMap { $0["id"]?.string } ?? [])
        let unknown = (train + test).filter { !known.contains($0) }
        guard unknown.isEmpty else {
            throw BenchmarkError(.invalidBenchmark, "\(dir)/split_tasks.json names ids not in tasks.json: \(unknown.prefix(5).joined(separator: ", "))")
        }
        guard let bad = (train + test).first(where: { !TraceName.isAcceptableID($0) }) else {
            self.split = (train, test)
            return
        }
        throw BenchmarkError(.invalidBenchmark, "\(dir)/split_tasks.json: task id \(bad.debugDescription) is empty, too long or has control characters")
    }

    public func run(_ ids: [String], _ context: AdapterRunContext) throws(BenchmarkError) -> [TaskOutcome] {
        guard !ids.isEmpty else { return [] }
        if context.oracle { throw BenchmarkError(.configuration, "--oracle is only for local benchmarks") }
        let run = try ToolRun(settings: tool, context: context, ids: ids)
        defer { run.finish() }
        try run.writeTaskIDs(ids)
        let scripts = MountSpec(kind: .readOnly(source: scriptsDirectory), destination: scriptsDirectory)

        // 1. the simulations, with agent.py, against a copy of the data without answers
        var runner = ToolInvocation(
            policy: tool.runnerPolicy,
            argv: tool.command + [scriptsDirectory + "/autoharness_tau2_run.py", "--domain", domain, "--task-ids-file", "/work/in/task_ids.txt",
                                  "--max-concurrency", String(min(concurrency, ids.count)), "--seed", String(seed),
                                  "--out", "/work/out/simulations.json"]
                + (agentModel.map { ["--agent-llm", $0] } ?? []) + (userModel.map { ["--user-llm", $0] } ?? []),
            withAgent: true, label: "tau2")
        runner.environment = environment + Self.quietEnvironment + ["TAU2_DATA_DIR=/work/out/data"]
        runner.extraMounts = [scripts]
        let domain = self.domain, source = dataDirectory
        runner.prepareOutput = { out, owner throws(BenchmarkError) in
            try Self.sanitizedData(from: source, domain: domain, ids: ids, into: out, owner: owner)
        }
        context.log("tau2: \(ids.count) task(s), domain \(domain)")
        let runExit = run.launch(runner, total: ids.count)
        run.reportFailure("tau2", runExit)

        // 2. re-scoring without agent.py, against the full task definitions
        var scorer = ToolInvocation(
            policy: tool.scorerPolicy,
            argv: tool.command + [scriptsDirectory + "/autoharness_tau2_score.py", "--domain", domain, "--task-ids-file", "/work/in/task_ids.txt",
                                  "--simulations", "/work/run/simulations.json", "--out", "/work/out/rewards.json", "--traces", "/work/out/traces"],
            withAgent: false, label: "tau2 scorer")
        scorer.environment = environment.filter { !$0.hasPrefix("AGENT_") } + Self.quietEnvironment + ["TAU2_DATA_DIR=\(dataDirectory)"]
        scorer.extraMounts = [scripts, MountSpec(kind: .readOnly(source: dataDirectory), destination: dataDirectory)]
        scorer.runDirectory = run.scratch.path + "/app"
        scorer.outputName = "score"
        // Train runs: which checks of tau2's reward breakdown failed, from the scorer's
        // reward_info.json (the scorer ran without agent.py, against the full task).
        return run.score(ids, with: scorer, after: runExit, nullDetail: "no scorable simulation (tau2 run \(runExit.summary))",
                         evidence: ("reward_info.json", FailureParsers.tau2))
    }

    /// What of tau2's data directory the runner may see, by name: the files tau2 v1.0.1 opens
    /// to build a domain's environment and user simulator (src/tau2/domains/<d>/utils.py and
    /// environment.py, src/tau2/user/user_simulator.py). Everything else stays out: other
    /// domains, `results/` (tau2's shipped leaderboard trajectories, which include the test
    /// tasks' solved runs), `task_issues/`, saved `simulations/`, the voice and full/small
    /// task sets. tasks.json and split_tasks.json are written, not copied.
    static let visibleFiles: [String: [String]] = [
        "airline": ["db.json", "policy.md"],
        "retail": ["db.json", "policy.md"],
        "telecom": ["db.toml", "user_db.toml", "main_policy.md", "tech_support_manual.md", "tech_support_workflow.md"],
    ]
    static let userSimulatorFiles = ["simulation_guidelines.md", "simulation_guidelines_tools.md"]

    /// Builds `out/data/tau2` by allowlist (`visibleFiles`, never a copy of the tree with
    /// parts deleted), then writes the domain's tasks.json with only the tasks of this run (a
    /// train run must not show agent.py, and through its output the coding agent, any test
    /// task), each reduced by `runnerTask`, and a split_tasks.json whose `base` is those ids.
    /// A file tau2 needs that the checkout lacks is left out: tau2 then names it.
    static func sanitizedData(from data: String, domain: String, ids: [String], into out: Int32, owner: (uid_t, gid_t)) throws(BenchmarkError) {
        guard let files = visibleFiles[domain] else {
            throw BenchmarkError(.configuration, "tau2 domain \(domain): autoharness knows which files of \(visibleFiles.keys.sorted().joined(separator: ", ")) the agent may see, not of this one")
        }
        let domainDir = data + "/tau2/domains/" + domain
        guard let d = FileSystem.makeDirectory(at: out, "data", mode: 0o755, owner: owner),
              let t = FileSystem.makeDirectory(at: d, "tau2", mode: 0o755, owner: owner),
              let domains = FileSystem.makeDirectory(at: t, "domains", mode: 0o755, owner: owner),
              let target = FileSystem.makeDirectory(at: domains, domain, mode: 0o755, owner: owner),
              let guidelines = FileSystem.makeDirectory(at: t, "user_simulator", mode: 0o755, owner: owner) else {
            throw BenchmarkError(.io, "tau2 data copy: \(FileSystem.errorText())")
        }
        defer { [d, t, domains, target, guidelines].forEach { close($0) } }
        for (source, names, destination) in [(domainDir, files, target), (data + "/tau2/user_simulator", userSimulatorFiles, guidelines)] {
            let src = FileSystem.openDirectory(source)
            guard src >= 0 else { throw BenchmarkError(.io, "\(source): \(FileSystem.errorText())") }
            defer { close(src) }
            for name in names {
                guard FileSystem.entryStatus(at: src, FileSystem.name(name)) != nil else { continue }
                do throws(IOFailure) {
                    try FileSystem.copyFile(from: src, FileSystem.name(name), to: destination, owner: owner, mode: 0o644,
                                            path: source + "/" + name)
                } catch {
                    throw BenchmarkError(.io, "tau2 data copy", cause: error)
                }
            }
        }
        let dfd = FileSystem.openDirectory(domainDir)
        guard dfd >= 0 else { throw BenchmarkError(.io, "\(domainDir): \(FileSystem.errorText())") }
        defer { close(dfd) }
        guard case .success(let bytes) = FileSystem.readSmallFile(at: dfd, "tasks.json", limit: 256 << 20),
              let stripped = runnerTasks(bytes, keeping: Set(ids)) else {
            throw BenchmarkError(.invalidBenchmark, "\(domainDir)/tasks.json: not a JSON list of tasks")
        }
        let split = (try? JSONEncoder().encode(["base": ids])).map(Array.init) ?? []
        for (name, bytes) in [("tasks.json", stripped), ("split_tasks.json", split)] {
            if let e = FileSystem.writeFile(at: target, name, bytes, mode: 0o644, owner: owner) {
                throw BenchmarkError(.io, "tau2 data copy: \(name): \(FileSystem.errorText(e))")
            }
        }
    }

    /// The task fields tau2 needs to run a simulation: the user simulator's scenario, the
    /// environment's initial state and the user's tools (tau2 v1.0.1 src/tau2/data_model/tasks.py,
    /// Task). `description` (the evaluator's notes), `ticket` (solo mode), `issues` and
    /// `required_documents` are dropped.
    static let runnerTaskFields: Set<String> = ["id", "user_scenario", "initial_state", "user_tools"]

    /// The tasks named in `ids`, each reduced to `runnerTaskFields` plus an
    /// `evaluation_criteria` with nothing in it. Not null: tau2's run_domain ends with
    /// compute_metrics, whose per-task metrics (Results._task_metrics in
    /// src/tau2/data_model/simulation.py) raise KeyError('num_agent_actions') on a null
    /// criteria, so no simulation was ever returned. Every check null (not `actions: []`,
    /// which makes tau2 replay an empty action list against the database) and an empty
    /// `reward_basis`: tau2 grades each simulation 1.0 and computes its metrics as zeros.
    static func runnerTasks(_ bytes: [UInt8], keeping ids: Set<String>) -> [UInt8]? {
        guard case .array(let all)? = JSONValue.parse(bytes) else { return nil }
        var tasks = all.filter { $0["id"]?.string.map(ids.contains) ?? false }
        let empty = JSONValue.object(["actions": .null, "env_assertions": .null, "communicate_info": .null,
                                      "nl_assertions": .null, "reward_basis": .array([])])
        for i in tasks.indices {
            guard case .object(let o) = tasks[i] else { return nil }
            var kept = o.filter { runnerTaskFields.contains($0.key) }
            kept["evaluation_criteria"] = empty
            tasks[i] = .object(kept)
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return (try? encoder.encode(JSONValue.array(tasks))).map(Array.init)
    }
}
