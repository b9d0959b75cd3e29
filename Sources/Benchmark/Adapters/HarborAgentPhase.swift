// `env_provider: local`: Harbor runs the agent, autoharness runs the verifier.
//
// Harbor imports agent.py into `harbor run`, and that process drives the task environment
// and writes the trial's result. Nothing it writes can be a reward, so for each task:
//   1. `TaskRunner` makes the task's working copy (its environment/, on the task's tmpfs);
//   2. `harbor run --disable-verification` runs the agent phase alone, in a runner sandbox
//      that holds that one task as Harbor loads it (task.toml, instruction.md, environment/:
//      never tests/ or solution/, never another task), the working copy at /app and a
//      private /logs; the agent's commands run as processes of that sandbox;
//   3. once that sandbox is gone (its pid namespace, so every process Harbor or agent.py
//      started, daemons included), `TaskRunner` scores /app in a fresh `verifier` sandbox of
//      its own: its own /tmp and HOME, an environment from the policy alone, the task's
//      tests mounted for the first time, /logs/verifier empty, the reward read by the
//      supervisor. As in Harbor, an agent that timed out or failed is still graded.
// Harbor's own result.json supplies only the agent's account (its exception, its cost) and
// train traces; it was written by agent.py's process.
//
// Written against harbor 0.25.0 (the same in 0.24.0): harbor/cli/jobs.py
// (`--disable-verification` sets `verifier.disable`), harbor/trial/single_step.py
// (`_run_verifier` returns at once when disabled; `_run_agent` records AgentTimeoutError and
// NonZeroAgentExitCodeError as the trial's exception_info), harbor/models/task/task.py (with
// verification disabled a task loads without tests/).

import Glibc
import SandboxPolicy
import SupervisorIO

final class HarborAgentPhase: ExternalAgentPhase, @unchecked Sendable {
    let adapter: HarborAdapter
    let context: AdapterRunContext

    init(adapter: HarborAdapter, context: AdapterRunContext) {
        self.adapter = adapter
        self.context = context
    }

    /// Where the run's copy of the task is inside the runner sandbox (`-p`).
    static let taskParent = "/work/in/tasks"
    /// What of a task directory Harbor's agent phase is given.
    static let agentPhaseEntries: Set<String> = ["task.toml", "instruction.md", "environment"]

    func argv(_ id: String) -> [String] {
        // The registry's dataset, cut down to this task at the run's copy of it; else the copy.
        let source = adapter.dataset.flatMap { d in adapter.registry.map { _ in ["-d", d, "--registry-path", HarborAdapter.registryCopy] } }
            ?? ["-p", Self.taskParent]
        return adapter.runArguments(source: source, environment: ["--env", "autoharness_harbor_env:SandboxEnvironment", "--disable-verification"],
                                    jobs: "/work/out/jobs", trials: 1, ids: [id])
    }

    /// The task's container lasts the agent's own time limit (the task's `[agent] timeout_sec`,
    /// or `per_task_timeout`, times `agent_timeout_multiplier`, as Harbor applies it) and
    /// `containerMargin` for Harbor's setup and copies, never past the runner's: a command that
    /// stops the container's server (`kill -STOP -1`) must not hold the task for the runner's
    /// whole day (found by an adversarial review).
    func containerTimeout(for task: BenchmarkTask) -> Double? { adapter.agentPhaseLimit(task) }

    /// Harbor's runner for `task`: the runner's settings, its time limit the agent phase's
    /// (`agentPhaseLimit`). An agent.py that blocks Harbor's event loop (a synchronous sleep
    /// in `run`) keeps Harbor's own agent timeout from firing; without this it would hold the
    /// task for the whole `runner.timeout`, past what a Ray node's request is given.
    func runnerSettings(for task: BenchmarkTask) -> ToolSettings {
        var settings = adapter.tool
        settings.timeout = adapter.agentPhaseLimit(task)
        return settings
    }

    static let containerMargin = 600.0

    func run(_ task: BenchmarkTask, workdir: String, container: TaskContainerLink?) -> ExternalAgentEnd {
        let run: ToolRun
        do {
            run = try ToolRun(settings: runnerSettings(for: task), context: context, ids: [task.id])
        } catch {
            return ExternalAgentEnd(.ungraded(.setupFailed), "harbor: \(error.message)")
        }
        defer { run.finish() }
        do throws(BenchmarkError) {
            try copyForAgent(task, into: run)
            if let config = adapter.jobConfig() { try run.writeInput("harbor-job.json", config) }
            if let registry = adapter.registry {
                try run.writeInput("registry.json", registry.filtered([task.id], path: { Self.taskParent + "/" + $0 }))
            }
        } catch {
            return ExternalAgentEnd(.ungraded(.setupFailed), "task \(task.id): \(error.message)")
        }
        var inv = ToolInvocation(policy: adapter.tool.runnerPolicy, argv: argv(task.id), withAgent: true, label: "harbor")
        inv.environment = adapter.environment + HarborAdapter.quietEnvironment
            + ["PYTHONPATH=/work:\(HarborAdapter.localModuleDirectory)"]
        if let scripts = adapter.scriptsDirectory {
            // The module alone, in a directory of its own: beside it in the templates is the
            // template agent.py, and a plain `agent` module anywhere on sys.path would shadow
            // the namespace package /work/agent that `agent.agent:HarnessAgent` names.
            inv.extraMounts.append(MountSpec(kind: .readOnly(source: scripts + "/" + HarborAdapter.localModule),
                                             destination: HarborAdapter.localModuleDirectory + "/" + HarborAdapter.localModule))
        }
        if let container {
            // On the task's image: its container's command server, and no working copy here.
            inv.extraMounts.append(MountSpec(kind: .readOnly(source: container.socketDirectory), destination: TaskContainerLink.directory))
            inv.environment.append("AUTOHARNESS_TASK_EXEC=\(TaskContainerLink.socketPath)")
        } else {
            inv.extraMounts += [
                MountSpec(kind: .readWrite(source: workdir), destination: "/app"),
                MountSpec(kind: .tmpfs(size: 1 << 30, mode: 0o755), destination: "/logs"),
            ]
        }
        let exit = run.launch(inv, total: 1)
        run.reportFailure("harbor", exit)
        if case .timedOut? = exit.termination {
            // Killed on the agent phase's limit (or runner.timeout), mid-agent: half-done work
            // is not graded, as for a local task's agent.
            var end = ExternalAgentEnd(.ungraded(.agentTimeout), "harbor timed out (the agent phase's limit, \(Int(adapter.agentPhaseLimit(task))) s)")
            end.vendorFailures = run.inference?.vendorFailures
            return end
        }
        let out = run.openOutput()
        defer { if out >= 0 { close(out) } }
        var end = (out >= 0 ? trial(task.id, out, traces: !context.heldOut) : nil)
            ?? ExternalAgentEnd(.ungraded(.missingResult), "harbor wrote no trial result for the task (harbor \(exit.summary))")
        // This sandbox held this one task: what its gate saw the vendor fail was this task's.
        end.vendorFailures = run.inference?.vendorFailures
        if !context.heldOut {
            let secrets = run.secretValues()
            end.trace = (end.trace + run.logs()).map { ($0.0, ToolRun.redact($0.1, secrets)) }
        }
        return end
    }

    /// task.toml, instruction.md and environment/ into `in/tasks/<id>/`, read-only in the
    /// sandbox: Harbor reads its copy, the agent never sees tests/ or solution/.
    private func copyForAgent(_ task: BenchmarkTask, into run: ToolRun) throws(BenchmarkError) {
        guard let tasks = FileSystem.makeDirectory(at: run.inputFD, "tasks", mode: 0o755, owner: nil) else {
            throw BenchmarkError(.io, "\(run.scratch.path)/in/tasks: \(FileSystem.errorText())")
        }
        defer { close(tasks) }
        guard let copy = FileSystem.makeDirectory(at: tasks, task.id, mode: 0o755, owner: nil) else {
            throw BenchmarkError(.io, "\(run.scratch.path)/in/tasks/\(task.id): \(FileSystem.errorText())")
        }
        defer { close(copy) }
        let source = FileSystem.openDirectory(task.directory)
        guard source >= 0 else { throw BenchmarkError(.io, "\(task.directory): \(FileSystem.errorText())") }
        defer { close(source) }
        // Of environment/, the Dockerfile and what it copies into the image (`DockerfileCopies`),
        // as in the working copy: agent.py runs in Harbor's process and reads this copy too.
        let copies = DockerfileCopies.filter(task)
        do throws(IOFailure) {
            try FileSystem.copyTree(from: source, to: copy, owner: (0, 0), skip: [],
                                    include: { relative in
                                        let parts = relative.split(separator: "/", maxSplits: 1).map(String.init)
                                        guard Self.agentPhaseEntries.contains(parts.first ?? "") else { return false }
                                        guard parts[0] == "environment", parts.count == 2, let copies else { return true }
                                        return parts[1] == "Dockerfile" || copies(parts[1])
                                    },
                                    label: task.directory)
        } catch {
            throw BenchmarkError(error)
        }
    }

    /// The trial Harbor recorded for `id`: its exception (the agent's end), cost and, for train
    /// runs (`traces`), its evidence and trace.
    private func trial(_ id: String, _ out: Int32, traces: Bool) -> ExternalAgentEnd? {
        let names: Set<String> = [id, adapter.taskNames[id]].compactMap { $0 }.reduce(into: []) { $0.insert($1) }
        var found: ExternalAgentEnd?
        HarborAdapter.forEachTrial(out) { dir, _ in
            guard found == nil,
                  case .success(let bytes) = FileSystem.readSmallFile(at: dir, "result.json", limit: HarborAdapter.resultLimit),
                  let json = JSONValue.parse(bytes), let task = json["task_name"]?.string,
                  names.contains(task) || HarborTaskNames.harborName(taskID: json["task_id"]).map(names.contains) == true
            else { return }
            var end = ExternalAgentEnd(.finished)
            if let e = HarborAdapter.agentException(json) {
                end = ExternalAgentEnd(.failed(e.status), e.line + " (the verifier still ran, as in Harbor)")
                if traces, let evidence = FailureParsers.harborException(json) { end.failures = [evidence] }
            }
            end.costUSD = HarborAdapter.cost(json)
            if traces { end.trace = HarborAdapter.agentTrace(dir, result: bytes) }
            found = end
        }
        return found
    }
}
