// `benchmark: terminal-bench` — Terminal-Bench 2.0 through Harbor:
//
//   harbor run -d DATASET --agent-import-path agent.agent:HarnessAgent --model M --env PROVIDER
//              --agent-timeout-multiplier X --jobs-dir /work/out/jobs -y -n N -i TASK ...
//
// With `env_provider: local` each task's agent phase runs through Harbor and its verifier in
// a sandbox of autoharness's own (`HarborAgentPhase`): no reward comes from Harbor's process.
//
// With a remote provider (e2b, daytona, docker, ...) Harbor imports agent.py into its own
// process, which also drives the task environment, runs the verifier there and writes the
// jobs directory, so the score cannot be made independent of that process. What the
// adapter does for those:
//   - results are keyed on `task_name` inside each trial's result.json (trial directory
//     names are the task name cut to 32 characters plus a suffix, so they are never parsed);
//   - the reward is read from the trial's `verifier/reward.txt` (or reward.json), the file
//     the task's verifier wrote in the environment, and must agree with
//     `verifier_result.rewards.reward` in result.json; a disagreement scores 0 and says so;
//   - a trial with `exception_info` scores its verifier's reward when the verifier still ran
//     and wrote one (Harbor runs it after an AgentTimeoutError or a non-zero agent exit:
//     harbor 0.25.0, harbor/trial/single_step.py `_run_agent` records the exception and
//     `_run` goes on to `_run_verifier`), and 0 otherwise;
//   - tasks are named as Harbor names them in result.json (`[task] name` of task.toml, e.g.
//     `org/name`; the directory name when there is none: harbor/models/task/task.py
//     `Task.__init__`) and selected with `-i` by directory name (harbor/models/task/id.py,
//     a local task's `get_name`); both map to the directory id;
//   - a requested task with no trial scores 0;
//   - task names not requested are ignored (and noted), so a forged extra trial changes nothing.
// The residual risk of remote providers (agent.py in the harbor process could write both files
// of its own trial) is stated in docs/benchmarks.md.

import FoundationEssentials
import Glibc
import SandboxPolicy
import SupervisorIO

public struct HarborAdapter: BenchmarkAdapter {
    public let taskIDs: [String]
    public let tool: ToolSettings
    /// `-d` registry dataset (`terminal-bench@2.0`, `org/name@ref`), or nil with `datasetPath`.
    public var dataset: String?
    /// `registry_path`: the local registry.json `dataset` is resolved from (harbor 0.25.0,
    /// harbor/registry/client/factory.py: `--registry-path` selects JsonRegistryClient, no
    /// network). A run's harbor gets a copy cut down to the requested tasks.
    public var registry: HarborRegistry?
    static let registryCopy = "/work/in/registry.json"
    /// `-p` a local directory of Harbor tasks.
    public var datasetPath: String?
    public var model: String?
    public var environmentProvider = "docker"
    public var agentTimeoutMultiplier: Double?
    /// `per_task_timeout`: seconds for each task's agent run, replacing the task's own
    /// `[agent] timeout_sec`. Harbor has no flag for it: it is the job config's
    /// `agents[].override_timeout_sec` (harbor 0.25.0, harbor/models/trial/config.py
    /// AgentConfig; harbor/trial/trial.py `_compute_agent_timeout_sec`).
    public var agentTimeout: Double?
    public var concurrency: Int?
    /// `NAME=VALUE` for agent.py (AGENT_MODEL, AGENT_REASONING_EFFORT).
    public var environment: [String] = []
    /// Harbor's name of each task (`[task] name`) by directory id, where it differs.
    /// Set it through `HarborTaskNames.index`, which refuses names that are not one to one.
    public var taskNames: [String: String] = [:]
    /// `env_provider: local`: the directory of autoharness_harbor_env.py (runner.scripts).
    public var scriptsDirectory: String?
    /// `env_provider: local`: given to each verifier read-only (`sandbox.verifier_tools`).
    public var verifierTools: VerifierTools?
    /// `env_provider: local`: the tasks that run on their own image (`autoharness images`),
    /// each agent phase's commands in the task's container (`TaskContainer`).
    public var images: TaskImages?
    /// Train runs' file systems on disk for tasks that declare their storage (`TaskDisks`).
    public var disks: Result<TaskDisks, BenchmarkError>?
    public var taskImages: TaskImages? { images }
    /// The host:port entries a task's container reaches through the egress proxy (package
    /// mirrors); Harbor's runner keeps `runner.network.allow`.
    public var taskNetworkAllow: [String] = []

    static let localModule = "autoharness_harbor_env.py"
    static let localModuleDirectory = "/opt/autoharness-harbor"

    /// Switches for Harbor's own traffic: its PostHog telemetry (harbor/telemetry.py reads
    /// HARBOR_TELEMETRY), and LiteLLM's fetch of its price list on import. Since harbor 0.25.0
    /// Harbor imports LiteLLM itself whenever a model is named, for any agent (the agent
    /// preflight and BaseAgent's model info parse the name with it:
    /// harbor/agents/agent_auth_resolution.py `parse_model_name`), so without the second every
    /// `harbor run --model M` would reach for the network.
    static let quietEnvironment = ["HARBOR_TELEMETRY=0", "LITELLM_LOCAL_MODEL_COST_MAP=True"]

    /// `name = "..."` in the `[task]` table of a task.toml, if any (nil too when the file is
    /// not TOML: the task's directory name stands).
    public static func declaredName(taskToml text: String) -> String? {
        guard let toml = try? TaskToml.parse(text, file: "task.toml"), case .string(let name)? = toml.entry("task", "name")?.value else { return nil }
        return name
    }

    public var name: String { "terminal-bench" }

    public func canonicalTaskID(_ given: String) -> String? {
        (try? HarborTaskNames(ids: taskIDs, declared: taskNames))?.canonical(given)
    }

    public init(taskIDs: [String], tool: ToolSettings) {
        self.taskIDs = taskIDs.sorted()
        self.tool = tool
    }

    /// Where the jobs directory is inside the sandbox. With the docker provider the daemon
    /// (outside the sandbox) resolves the trial directories Harbor mounts into task
    /// containers, so the output directory is also bound at its host path and used there.
    /// (harbor 0.25.0 mounts them only with `--ek auto_mounting=true`, which autoharness does
    /// not pass, and copies the logs out otherwise: harbor/environments/base.py `_host_mounts`.
    /// The binding is kept for that case; it costs nothing otherwise.)
    func jobsDirectory(_ run: ToolRun) -> String {
        environmentProvider == "docker" ? run.scratch.path + "/app/jobs" : "/work/out/jobs"
    }

    static let agentImportPath = "agent.agent:HarnessAgent"
    /// Where the job config is in the runner sandbox (ToolRun's `in/`, read-only).
    static let jobConfigPath = "/work/in/harbor-job.json"

    /// The job config handed with `-c` when the agent needs a setting Harbor's flags lack
    /// (`override_timeout_sec`). It names the agent itself: `-a` would replace the config's
    /// whole `agents` list (harbor 0.25.0, harbor/cli/jobs.py `start`: `config["agents"] = []`
    /// when --agent is given), dropping the override.
    func jobConfig() -> [UInt8]? {
        struct Agent: Encodable {
            var import_path: String
            var model_name: String?
            var override_timeout_sec: Double
        }
        struct Job: Encodable { var agents: [Agent] }
        guard let t = agentTimeout else { return nil }
        let job = Job(agents: [Agent(import_path: Self.agentImportPath, model_name: model, override_timeout_sec: t)])
        return (try? JSONEncoder().encode(job)).map { Array($0) }
    }

    func argv(_ ids: [String], jobs: String) -> [String] {
        var source: [String] = []
        if let p = datasetPath {
            source = ["-p", p]
        } else if let d = dataset {
            source = ["-d", d] + (registry != nil ? ["--registry-path", Self.registryCopy] : [])
        }
        return runArguments(source: source, environment: ["--env", environmentProvider], jobs: jobs,
                            trials: min(concurrency ?? 1, ids.count), ids: ids)
    }

    /// `harbor run` over the tasks `source` selects (`-p`/`-d`), with the agent (its model, or
    /// the job config that names both), the environment flags, the timeout multiplier, the jobs
    /// directory, `trials` at a time, and `ids`.
    func runArguments(source: [String], environment: [String], jobs: String, trials: Int, ids: [String]) -> [String] {
        var a = tool.command + ["run"] + source
        if jobConfig() != nil {
            a += ["-c", Self.jobConfigPath]
        } else {
            a += ["--agent", Self.agentImportPath]  // harbor 0.25.0: an import path is -a/--agent (--agent-import-path is deprecated)
            if let m = model { a += ["--model", m] }
        }
        a += environment
        if let x = agentTimeoutMultiplier { a += ["--agent-timeout-multiplier", String(format: "%.2f", x)] }
        a += ["--jobs-dir", jobs, "-y", "-n", String(trials)]
        for id in ids { a += ["-i", id] }
        return a
    }

    public func run(_ ids: [String], _ context: AdapterRunContext) throws(BenchmarkError) -> [TaskOutcome] {
        guard !ids.isEmpty else { return [] }
        if environmentProvider == "local" { return try runLocally(ids, context) }
        if context.oracle { throw BenchmarkError(.configuration, "--oracle is only for local benchmarks and env_provider: local (Harbor has its own: harbor run --agent oracle)") }
        let run = try ToolRun(settings: tool, context: context, ids: ids)
        defer { run.finish() }
        let jobs = jobsDirectory(run)
        if let config = jobConfig() { try run.writeInput("harbor-job.json", config) }
        var inv = ToolInvocation(policy: tool.runnerPolicy, argv: argv(ids, jobs: jobs), withAgent: true, label: "harbor")
        inv.environment = environment + Self.quietEnvironment
        if environmentProvider == "docker" {
            inv.extraMounts = [MountSpecs.readWrite(run.scratch.path + "/app")]
        }
        // A local dataset is bound task by task, at its host path (Docker resolves build
        // contexts there): a train run's harbor, and agent.py inside it, must not see the
        // held-out tasks' files, which it could copy into a train trace.
        if let dir = datasetPath {
            inv.extraMounts += ids.map { MountSpec(kind: .readOnly(source: dir + "/" + $0), destination: dir + "/" + $0) }
        }
        if let registry {
            try run.writeInput("registry.json", registry.filtered(ids))
            inv.extraMounts += ids.compactMap { id in registry.localTasks[id].map { MountSpec(kind: .readOnly(source: $0), destination: $0) } }
        }
        context.log("harbor: \(ids.count) task(s), \(environmentProvider) environments")
        let exit = run.launch(inv, total: ids.count, probe: { Self.finishedTrials($0) })
        run.reportFailure("harbor", exit)
        let out = run.openOutput()
        defer { if out >= 0 { close(out) } }
        var results: [String: ToolTaskResult] = [:]
        if out >= 0 {
            let parsed = Self.parse(out, ids: Set(ids), names: taskNames, traces: !context.heldOut)
            results = parsed.results
            if !parsed.ignored.isEmpty && !context.heldOut {
                context.log("harbor: ignored trials for tasks not requested: \(parsed.ignored.prefix(5).joined(separator: ", "))")
            }
        }
        return run.outcomes(ids, results, toolExit: exit, seconds: exit.seconds)
    }

    /// `env_provider: local`: each task's agent phase through `harbor run`, its verifier
    /// run by `TaskRunner` in a sandbox of its own (`HarborAgentPhase`). `--oracle` runs each
    /// task's solution/solve.sh in place of Harbor, as for a local benchmark.
    func runLocally(_ ids: [String], _ context: AdapterRunContext) throws(BenchmarkError) -> [TaskOutcome] {
        context.log("harbor: \(ids.count) task(s), each agent phase through harbor, each verifier in a sandbox of its own")
        return try context.runTasks(ids.map(localTask)) {
            $0.externalAgent = HarborAgentPhase(adapter: self, context: context)
            $0.verifierTools = verifierTools
            $0.images = images
            $0.disks = disks
            $0.agentNetworkAllow = taskNetworkAllow
        }
    }

    /// `env_provider: local`: one `harbor run` per task (`HarborAgentPhase`), each its own gate.
    public var gatesEachTask: Bool { environmentProvider == "local" }

    /// `env_provider: local` grades with autoharness's verifier: each task's test.sh.
    public var verifierScripts: [String] {
        environmentProvider == "local" ? taskIDs.compactMap { hostDirectory($0).map { $0 + "/tests/test.sh" } } : []
    }

    /// What the held-out VM shares for Harbor to run in it: the dataset (or the registry file
    /// and its tasks on this host), autoharness_harbor_env.py's directory and
    /// the verifier tools. Harbor itself is the runner's command, under `runner.binds`.
    public var hostPaths: [String] {
        var paths: [String] = []
        if let dir = datasetPath { paths.append(dir) }
        if let registry {
            paths += registry.localTasks.values.sorted()
            paths.append(registry.path)
        }
        if let scripts = scriptsDirectory { paths.append(scripts) }
        return paths + (verifierTools?.hostPaths ?? [])
    }

    /// The directory of task `id` on this host: under `-p`, or a registry's local task.
    func hostDirectory(_ id: String) -> String? {
        if let dir = datasetPath { return dir + "/" + id }
        return registry?.localTasks[id]
    }

    /// Task `id` as the verifier needs it: its tests/test.sh, its `[verifier] timeout_sec`
    /// (Harbor's default, 600 s, when none), whether it has a solution for `--oracle`, and its
    /// `[agent] timeout_sec`, which `--oracle`'s solution gets (Harbor's agent phase reads its
    /// own). A task that cannot be scored carries its problem and scores 0 as setup_failed.
    func localTask(_ id: String) -> BenchmarkTask {
        task(id)
    }

    /// Every task as `env_provider: local` runs it (`localTask`), for images and checks.
    public var localTasks: [BenchmarkTask] { taskIDs.map(localTask) }
    public func benchmarkTask(_ id: String) -> BenchmarkTask? { environmentProvider == "local" ? localTask(id) : nil }

    private func task(_ id: String) -> BenchmarkTask {
        guard let dir = hostDirectory(id) else {
            var t = BenchmarkTask(id: id, directory: "/nonexistent")
            t.problem = "task \(id) has no directory on this host (a registry task fetched from git): env_provider local runs tasks that are on disk"
            return t
        }
        var task = BenchmarkTask(id: id, directory: dir)
        task.hasSolution = LocalBenchmark.kind(dir + "/solution/solve.sh") == S_IFREG
        guard LocalBenchmark.kind(dir + "/tests/test.sh") == S_IFREG else {
            task.problem = "task \(id): \(dir)/tests/test.sh is missing or not a regular file"
            return task
        }
        guard case .success(let bytes) = InputFile.read(dir + "/task.toml", cap: LocalBenchmark.maxTaskTomlBytes),
              let text = String(validating: bytes, as: UTF8.self) else { return task }
        do throws(BenchmarkError) {
            try task.read(taskToml: text, path: dir + "/task.toml")
        } catch {
            task.problem = error.message
        }
        return task
    }

    static let resultLimit = 16 << 20

    /// Trials with a result.json, for the progress line.
    static func finishedTrials(_ out: Int32) -> Int? {
        var n = 0
        forEachTrial(out) { trial, _ in
            if FileSystem.entryStatus(at: trial, FileSystem.name("result.json")) != nil { n += 1 }
        }
        return n
    }

    /// Calls `body` with an fd for every `jobs/<job>/<trial>/` directory (never following links).
    static func forEachTrial(_ out: Int32, _ body: (Int32, String) -> Void) {
        let jobs = FileSystem.openDirectory(at: out, FileSystem.name("jobs"))
        guard jobs >= 0 else { return }
        defer { close(jobs) }
        for job in (FileSystem.entries(of: jobs) ?? []).prefix(100) {
            let j = FileSystem.openDirectory(at: jobs, job)
            guard j >= 0 else { continue }
            defer { close(j) }
            for trial in (FileSystem.entries(of: j) ?? []).prefix(100_000) {
                let t = FileSystem.openDirectory(at: j, trial)
                guard t >= 0 else { continue }
                body(t, FileSystem.display(trial))
                close(t)
            }
        }
    }

    /// One trial, as read from its directory.
    struct Trial {
        var task: String
        var harborName: String?
        var reward: Double?
        var status: TaskStatus
        var detail: String?
        var trace: [(String, [UInt8])]
        /// Train runs: Harbor's exception and the verifier's failed tests (ctrf.json).
        var failures: [FailureEvidence] = []
        /// The agent's model spend Harbor recorded (`TrialResult.agent_result.cost_usd`, or
        /// its steps' for a multi-step trial: harbor/models/trial/result.py,
        /// `compute_token_cost_totals`).
        var costUSD: Double?
    }

    /// A trial's agent cost: `agent_result.cost_usd`, else the sum over `step_results[]`
    /// (what Harbor's `TrialResult.compute_token_cost_totals` adds up); nil if none is a
    /// finite, non-negative number.
    static func cost(_ json: JSONValue) -> Double? {
        func valid(_ v: JSONValue?) -> Double? { v?.number.flatMap { $0.isFinite && $0 >= 0 && $0 < 1e7 ? $0 : nil } }
        if let a = json["agent_result"], !a.isNull { return valid(a["cost_usd"]) }
        let steps = (json["step_results"]?.array ?? []).compactMap { valid($0["agent_result"]?["cost_usd"]) }
        return steps.isEmpty ? nil : steps.reduce(0, +)
    }

    /// Reads every trial of the jobs directory and keys them on `task_name`.
    static func parse(_ out: Int32, ids: Set<String>, names: [String: String] = [:], traces: Bool) -> (results: [String: ToolTaskResult], ignored: [String]) {
        // Harbor's names of a requested task -> its id: the declared name and the id itself
        // (one to one: HarborTaskNames refused the dataset otherwise).
        var byName: [String: String] = [:]
        for id in ids {
            byName[id] = id
            if let n = names[id] { byName[n] = id }
        }
        var trials: [String: [Trial]] = [:]
        var ignored: [String] = []
        var unreadable: [String] = []
        forEachTrial(out) { dir, name in
            guard let trial = readTrial(dir, name: name, traces: traces, unreadable: &unreadable) else { return }
            // result.json's task_name is the [task] name; its task_id gives the name `-i`
            // matched (the directory, or a registry package's org/name), for a registry task
            // whose declared name autoharness cannot know before it runs.
            if let id = byName[trial.task] ?? trial.harborName.flatMap({ byName[$0] }) {
                trials[id, default: []].append(trial)
            } else {
                ignored.append(trial.task)
            }
        }
        var results: [String: ToolTaskResult] = [:]
        for (task, list) in trials {
            // Retried or repeated trials: the mean over those that finished without an
            // exception; if none did, the task errored.
            let scored = list.filter { $0.reward != nil }
            var r: ToolTaskResult
            if scored.isEmpty {
                let first = list[0]
                r = ToolTaskResult(reward: 0, status: first.status, detail: first.detail)
            } else {
                let mean = scored.map { $0.reward! }.reduce(0, +) / Double(scored.count)
                r = ToolTaskResult(reward: mean, status: mean >= TaskOutcome.passThreshold ? .passed : .failed,
                                   detail: list.count > 1 ? "\(list.count) trials, \(scored.count) scored" : list[0].detail)
            }
            // Evidence of every failing trial, the first trial's first.
            let evidence = list.filter { $0.status != .passed }.flatMap(\.failures)
            if traces && !evidence.isEmpty { r.failures = FailureEvidence.bounded(FailureEvidence.unique(evidence)) }
            let costs = list.compactMap(\.costUSD)
            r.costUSD = costs.isEmpty ? nil : costs.reduce(0, +)
            if traces { r.trace = list.count == 1 ? list[0].trace : list.enumerated().flatMap { i, t in t.trace.map { ("trial\(i + 1)-\($0.0)", $0.1) } } }
            results[task] = r
        }
        if let first = unreadable.first {
            let why = "no readable trial; \(unreadable.count) trial result file(s) refused, the first: \(first)"
            for id in ids where results[id] == nil { results[id] = ToolTaskResult(reward: 0, status: .missingResult, detail: why) }
        }
        return (results, ignored)
    }

    /// The agent's exception Harbor recorded in a trial's result.json: a status (a timeout, or
    /// any other failure as a crash) and a line for the operator; nil when there is none.
    static func agentException(_ json: JSONValue) -> (status: TaskStatus, line: String)? {
        guard let e = json["exception_info"], !e.isNull else { return nil }
        let type = e["exception_type"]?.string ?? "exception"
        let message = e["exception_message"]?.string ?? ""
        return (type.lowercased().contains("timeout") ? .agentTimeout : .agentCrashed,
                "harbor: \(type)\(message.isEmpty ? "" : ": " + message.prefix(200))")
    }

    /// The train-trace files of a trial's agent side: Harbor's result.json (`result`), its
    /// trial.log and exception.txt, and the agent's logs directory, bounded.
    static func agentTrace(_ dir: Int32, result: [UInt8]) -> [(String, [UInt8])] {
        var trace = [("harbor-result.json", result)]
        for f in ["trial.log", "exception.txt"] {
            if let b = FileSystem.readCapped(at: dir, f, cap: TaskRunner.traceCap) { trace.append(("harbor-" + f, b)) }
        }
        return trace + TraceCopy.directory(at: dir, "agent", prefix: "agent-")
    }

    /// A trial directory's result.json and verifier reward, cross-checked. A result.json that
    /// cannot be read or parsed adds why to `unreadable` (without the trial's name, which
    /// names its task: held-out runs tell nothing per task).
    static func readTrial(_ dir: Int32, name: String, traces: Bool, unreadable: inout [String]) -> Trial? {
        let bytes: [UInt8]
        switch FileSystem.readSmallFile(at: dir, "result.json", limit: resultLimit) {
        case .success(let b): bytes = b
        case .failure(.missing): return nil  // a trial still running when the tool stopped, or not a trial
        case .failure(let problem):
            unreadable.append("a trial's result.json: \(problem.explanation("a trial's result"))")
            return nil
        }
        guard let json = JSONValue.parse(bytes), let task = json["task_name"]?.string else {
            let duplicate = JSONValue.firstDuplicateKey(bytes).map { "names \(Reward.quote($0)) twice" }
            unreadable.append("a trial's result.json \(duplicate ?? "is not a JSON object with a task_name")")
            return nil
        }
        var trial = Trial(task: task, harborName: HarborTaskNames.harborName(taskID: json["task_id"]), reward: nil, status: .missingResult, detail: nil, trace: [])
        if traces {
            trial.trace = agentTrace(dir, result: bytes) + TraceCopy.directory(at: dir, "verifier", prefix: "verifier-")
        }
        trial.costUSD = Self.cost(json)
        var exception: String?
        if let e = agentException(json) {
            exception = e.line
            if traces, let evidence = FailureParsers.harborException(json) { trial.failures.append(evidence) }
            trial.status = e.status
            trial.detail = exception
            // Harbor ran the verifier anyway when it recorded a reward; otherwise 0.
            guard json.path("verifier_result", "rewards", "reward") != nil else { return trial }
        }
        let claimed = json.path("verifier_result", "rewards", "reward")
        let verifier = FileSystem.openDirectory(at: dir, FileSystem.name("verifier"))
        let reading: Reward.Reading = verifier >= 0 ? Reward.read(logs: verifier) : .missing
        // The verifier's own test report: which tests failed and how (train runs only).
        if traces, verifier >= 0, case .success(let report) = FileSystem.readSmallFile(at: verifier, "ctrf.json", limit: FailureParsers.reportLimit),
           let failed = FailureParsers.ctrf(report) {
            trial.failures += failed
        }
        if verifier >= 0 { close(verifier) }
        switch reading {
        case .missing:
            trial.detail = "no verifier/reward.txt or reward.json in trial \(name)\(claimed.map { " (result.json claims \($0.brief))" } ?? "")"
        case .invalid(let why, _):
            trial.status = .invalidReward
            trial.detail = "trial \(name): verifier/\(why)"
        case .value(let v, _):
            guard let c = claimed?.number else {
                trial.detail = "trial \(name): result.json has no verifier_result.rewards.reward (verifier wrote \(v))"
                return trial
            }
            guard abs(c - v) < 1e-9 else {
                trial.status = .invalidReward
                trial.detail = "trial \(name): result.json says reward \(c), verifier/reward file says \(v)"
                return trial
            }
            trial.reward = v
            trial.status = v >= TaskOutcome.passThreshold ? .passed : .failed
            trial.detail = exception.map { "\($0) (the verifier still ran, as in Harbor)" }
        }
        return trial
    }
}

/// Mount entries adapters add to a tool's sandbox.
enum MountSpecs {
    /// `path` bound read-write at the same path.
    static func readWrite(_ path: String) -> MountSpec { MountSpec(kind: .readWrite(source: path), destination: path) }
}
