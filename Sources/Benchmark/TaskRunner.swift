// Running one benchmark task: agent sandbox, then verifier sandbox, then the reward.
//
// This is where the benchmark's trust boundary is kept. The order of the steps matters:
//   1. a fresh, randomly named scratch directory (nothing from an earlier task, nothing that
//      names the task or the split);
//   2. agent.py runs in the `benchmark-task` sandbox with /app and a read-only /agent only
//      — no tests, no solution, no logs directory, no other task, no network (or a tool runs
//      it over /app in sandboxes of its own: `ExternalAgentPhase`, Harbor's agent phase);
//   3. only after that sandbox is gone (its whole pid namespace killed) does the verifier
//      run, in its own sandbox, with the tests mounted for the first time, over an /app
//      whose git configuration names no command (`GitConfigs`);
//   4. the supervisor reads the reward itself, defensively, from the verifier's logs
//      directory, a tmpfs of its own where only the test script's process may have written
//      it (`RewardWriters`);
//   5. train runs copy a bounded trace out; test runs copy nothing;
//   6. the scratch directory is removed, whatever happened.
// The agent and the scorer therefore never share a process, and never share a writable
// filesystem while both could be running.

import FoundationEssentials
import Glibc
import Sandbox
import SandboxPolicy
import SupervisorIO

/// Runs benchmark tasks, each in its own agent sandbox and verifier sandbox.
public final class TaskRunner: Sendable {
    public let configuration: TaskRunConfiguration
    /// How this runner's sandboxes start.
    var sandboxes: TaskSandboxes { TaskSandboxes(configuration: configuration) }
    /// `configuration.scratchRoot`, resolved.
    let scratchRoot: String
    /// `configuration.agentDirectory`, resolved; nil in oracle mode without one.
    let agentDirectory: String?

    /// The tmpfs magic number (statfs f_type).
    static let tmpfsMagic = 0x0102_1994
    /// Per-file cap of what a trace keeps of a sandbox's stdout or stderr.
    static let traceCap = 1 << 20
    /// An instruction is text for a prompt; anything larger is a broken benchmark.
    static let instructionLimit = 16 << 20

    /// Checks the configuration once, so that a bad one fails here rather than as a
    /// `setup_failed` on every task.
    /// - Throws: `BenchmarkError` (`.configuration`) if not root, the scratch root is not a
    ///   root-owned directory on tmpfs, agent.py is missing, or a policy does not load with
    ///   exactly the placeholders this runner fills.
    public init(configuration: TaskRunConfiguration) throws(BenchmarkError) {
        self.configuration = configuration
        func fail(_ message: String) -> BenchmarkError { BenchmarkError(.configuration, message) }
        guard geteuid() == 0 else {
            throw fail("running benchmark tasks needs root: sandboxes build namespaces, and scratch directories are handed to the sandbox's host uid")
        }

        scratchRoot = try Self.checkScratchRoot(configuration.scratchRoot)

        // Per-task tmpfs mounts a killed supervisor left behind.
        _ = TaskScratch.sweep(root: scratchRoot)

        if configuration.oracle && configuration.agentDirectory.isEmpty {
            agentDirectory = nil
        } else {
            guard let real = realpath(configuration.agentDirectory, nil) else {
                throw fail("agent directory \(configuration.agentDirectory): \(FileSystem.errorText())")
            }
            let path = String(cString: real)
            free(real)
            guard LocalBenchmark.kind(path) == S_IFDIR else { throw fail("agent directory \(path) is not a directory") }
            if !configuration.oracle && LocalBenchmark.kind(path + "/agent.py") != S_IFREG {
                throw fail("agent directory \(path) holds no agent.py")
            }
            agentDirectory = path
        }

        // Load both policies with stand-in paths: this catches a missing policy, a syntax
        // error, and a placeholder this runner would never fill.
        // (Loading does not look at the paths; compiling a plan does, per task.)
        let standIn = "/nonexistent/autoharness-policy-check"
        do {
            _ = try configuration.policyLoader.load(configuration.taskPolicy, variables: ["workdir": standIn, "agent_dir": standIn])
            _ = try configuration.policyLoader.load(
                configuration.verifierPolicy, variables: ["workdir": standIn, "tests_dir": standIn, "logs_dir": standIn])
        } catch {
            throw fail("policy: \(error)")
        }
    }

    /// Resolves a scratch root and checks it: a root-owned directory on tmpfs, not writable
    /// by others unless sticky.
    static func checkScratchRoot(_ path: String) throws(BenchmarkError) -> String {
        func fail(_ message: String) -> BenchmarkError { BenchmarkError(.configuration, message) }
        guard let real = realpath(path, nil) else {
            throw fail("scratch root \(path): \(FileSystem.errorText())")
        }
        let scratchRoot = String(cString: real)
        free(real)
        let fd = FileSystem.openDirectory(scratchRoot)
        guard fd >= 0 else { throw fail("scratch root \(scratchRoot): \(FileSystem.errorText())") }
        defer { close(fd) }
        guard let type = FileSystem.filesystemType(fd) else { throw fail("scratch root \(scratchRoot): fstatfs: \(FileSystem.errorText())") }
        guard type == Self.tmpfsMagic else {
            throw fail("scratch root \(scratchRoot) is not on tmpfs (f_type 0x\(String(type, radix: 16))): test-split work must never reach a disk")
        }
        guard let st = FileSystem.fileStatus(fd) else { throw fail("scratch root \(scratchRoot): \(FileSystem.errorText())") }
        let othersWrite = st.st_mode & (S_IWGRP | S_IWOTH) != 0
        guard st.st_uid == 0, !othersWrite || st.st_mode & S_ISVTX != 0 else {
            throw fail("scratch root \(scratchRoot) must be owned by root and not writable by others (or sticky, like /dev/shm)")
        }
        return scratchRoot
    }

    /// Runs one task and returns its outcome; never throws, because every failure is a
    /// scored outcome (reward 0) rather than something a caller could drop.
    /// - Parameters:
    ///   - task: the task to run.
    ///   - traceDirectory: where to persist this task's trace (train split), or nil (test
    ///     split: nothing is written outside the scratch directory, which is removed).
    public func run(_ task: BenchmarkTask, traceDirectory: String?) -> TaskOutcome {
        var run = TaskExecution(task: task)
        defer { if let f = run.supervisorFailure { configuration.writeFailures?.record(f) } }
        if let problem = task.problem {
            // Nothing of a task that did not load is run; it counts 0 like any setup failure.
            run.finish(.setupFailed, problem)
            if let traceDirectory { run.writeTrace(to: traceDirectory, outputs: -1) }
            return run.outcome
        }
        let scratch: TaskScratch
        do {
            // A held-out run (no trace) stays in memory whatever the task declares.
            let disk = traceDirectory == nil ? nil : task.storage.flatMap { size in
                (try? configuration.disks?.get()).map { TaskScratch.Disk(disks: $0, size: size) }
            }
            scratch = try TaskScratch(root: scratchRoot, disk: disk)
        } catch {
            // The scratch root is the supervisor's: a task that never started is not scored.
            run.finish(.setupFailed, "scratch: \(error.message)")
            run.supervisorFailure = "task scratch directory under \(scratchRoot): \(error.message)"
            return run.outcome
        }
        if traceDirectory != nil, let size = task.storage, scratch.disk == nil {
            var why = "no task disks configured"
            if case .failure(let e) = configuration.disks { why = "no task disks here: \(e.message)" }
            run.note("storage: the task declares \(TaskDisks.shown(size)); it ran on its \(TaskScratch.sizeLimit) tmpfs (\(why))")
        }
        execute(&run, in: scratch)
        if let traceDirectory { run.writeTrace(to: traceDirectory, outputs: scratch.outFD) }
        configuration.scratchObserver?(task.id, scratch.path)
        let problems = scratch.remove()
        if !problems.isEmpty {
            // The score stands; an operator needs to know scratch space is leaking.
            run.note("scratch cleanup: \(problems.prefix(3).joined(separator: "; "))")
        }
        return run.outcome
    }

    /// Steps 2–4 for one task (see the top of this file).
    private func execute(_ run: inout TaskExecution, in scratch: TaskScratch) {
        let task = run.task
        // The verifier's /tests is a copy in the task's scratch, its files guarded while it runs.
        let testsDirectory = scratch.testsPath
        do throws(BenchmarkError) { try scratch.copyTests(from: task.testsDirectory) } catch {
            return run.finish(.setupFailed, "task \(task.id): \(error.message)")
        }
        let taskPolicy: Policy
        let verifierPolicy: Policy
        let emptyAgent = scratch.path + "/no-agent"
        if let why = configuration.images?.refused[task.id] { return run.finish(.setupFailed, "task \(task.id): \(why)") }
        let image = configuration.images?.byTask[task.id]
        let imageRoot = image.map { _ in scratch.imageRootPath }
        let appPath = image == nil ? scratch.appPath : scratch.imageAppPath
        do {
            try image.map(scratch.mountImage)
            // Oracle runs without an agent directory still satisfy {agent_dir}: an empty,
            // root-only directory stands in.
            if agentDirectory == nil {
                guard let d = FileSystem.makeDirectory(at: scratch.fd, "no-agent", mode: 0o700, owner: nil) else {
                    throw BenchmarkError(.io, "\(emptyAgent): \(FileSystem.errorText())")
                }
                close(d)
            }
            taskPolicy = try configuration.policyLoader.load(
                configuration.taskPolicy, variables: ["workdir": appPath, "agent_dir": agentDirectory ?? emptyAgent])
            verifierPolicy = try configuration.policyLoader.load(
                configuration.verifierPolicy,
                variables: ["workdir": appPath, "tests_dir": testsDirectory, "logs_dir": scratch.logsPath])
            try image?.check([taskPolicy, verifierPolicy], tools: configuration.verifierTools)
        } catch let error as BenchmarkError {
            return run.finish(.setupFailed, error.message)
        } catch {
            return run.finish(.setupFailed, "policy: \(error)")
        }

        // Step 1: the working copy, seeded from environment/ (`DockerfileCopies`) and owned by the
        // agent sandbox's host uid; the logs directory, owned by the verifier's. On an image,
        // /app is what the image holds (made empty where it holds none).
        let stdinFD: Int32
        let rewardWatch: ChangeWatch
        do throws(BenchmarkError) {
            let owner = image?.owner ?? (taskPolicy.identity.hostUID, taskPolicy.identity.hostGID)
            let app = imageRoot == nil ? try scratch.makeSandboxDirectory("app", owner: owner) : try scratch.imageApp(owner: owner)
            defer { close(app) }
            if imageRoot == nil, LocalBenchmark.kind(task.environmentDirectory) == S_IFDIR {
                let env = FileSystem.openDirectory(task.environmentDirectory)
                guard env >= 0 else { throw BenchmarkError(.io, "\(task.environmentDirectory): \(FileSystem.errorText())") }
                defer { close(env) }
                do throws(IOFailure) {
                    try FileSystem.copyTree(from: env, to: app, owner: owner,
                                            skip: ["Dockerfile"], include: DockerfileCopies.filter(task))
                } catch { throw BenchmarkError(error) }
            }
            // The verifier's logs: a file system of its own, watched from now on, so every
            // change to a reward file is known with the process that made it (`RewardWriters`).
            try scratch.makeLogsFilesystem(owner: image?.owner ?? (verifierPolicy.identity.hostUID, verifierPolicy.identity.hostGID))
            try scratch.makeVerifierTmp(owner: image?.owner ?? (verifierPolicy.identity.hostUID, verifierPolicy.identity.hostGID))
            if let image, (verifierPolicy.env.set["HOME"] ?? "/tmp") == "/tmp" { try scratch.seedVerifierHome(fromImage: image.rootfs, owner: image.owner) }
            do throws(SandboxError) {
                rewardWatch = try ChangeWatch(directory: scratch.logsPath)
            } catch {
                throw BenchmarkError(.configuration, "who writes the reward could not be watched", cause: error)
            }
            stdinFD = try instructionInput(task, scratch: scratch, run: &run)
        } catch {
            return run.finish(.setupFailed, "task \(task.id): \(error.message)")
        }

        // The verifier's sandbox is built while the agent runs, where that is safe
        // (`TaskVerifier.buildAhead`): once the agent's payload has run for a moment without
        // needing the supervisor, so neither its launch nor its first requests wait for it.
        let verifierTimeout = task.verifierTimeoutDeclared ? task.verifierTimeout : configuration.defaultVerifierTimeout
        var verifierOverrides = PlanOverrides()
        verifierOverrides.timeoutSeconds = verifierTimeout
        (verifierOverrides.memory, verifierOverrides.cpus) = (task.memory, task.cpus)
        // Its /tmp on the task's file system, where the watch of what it runs sees a copy of
        // agent.py's program run from there (`AgentCodeRuns`), in place of the policy's tmpfs.
        verifierOverrides.mounts.append(MountSpec(kind: .readWrite(source: scratch.verifierTmpPath), destination: "/tmp"))
        // On an image the tests start where the image's processes do (its WORKDIR), as under Harbor.
        image?.apply(to: &verifierOverrides, root: imageRoot, policy: verifierPolicy, verifier: true)
        if let tools = configuration.verifierTools {
            let home = verifierPolicy.env.set["HOME"] ?? "/tmp"
            verifierOverrides.mounts += tools.mounts(home: home)
            verifierOverrides.environment += tools.environment(policyPath: image?.path(policy: verifierPolicy) ?? verifierPolicy.env.set["PATH"],
                                                               home: home)
        }
        let verifierAudit = configuration.verifierAudit ?? configuration.audit
        let ahead = TaskVerifier.Ahead()
        let buildAhead = { [self] in
            let stdin = PayloadInput.empty()
            guard stdin >= 0 else { return }
            ahead.value = TaskVerifier(runner: self).buildAhead(verifierPolicy, verifierOverrides, stdin: stdin, scratch: scratch,
                                             audit: verifierAudit, agentWrites: ahead.agentWrites)
        }
        defer { TaskVerifier.dropAhead(ahead.take(), scratch: scratch) }

        // Step 2: the agent (or, validating a benchmark, the oracle solution).
        let agentTimeout = task.agentTimeoutDeclared ? task.agentTimeout : configuration.defaultAgentTimeout
        var overrides = PlanOverrides()
        overrides.timeoutSeconds = agentTimeout
        (overrides.memory, overrides.cpus) = (task.memory, task.cpus)
        image?.apply(to: &overrides, root: imageRoot, policy: taskPolicy, verifier: false)
        let agentNetwork = TaskNetwork.allow(task.network, operator: configuration.agentNetworkAllow)
        if !agentNetwork.isEmpty { overrides.network = NetworkSpec(mode: .proxy, allow: agentNetwork) }
        let command: [String]
        if configuration.oracle {
            guard task.hasSolution else {
                close(stdinFD)
                return run.finish(.setupFailed, "task \(task.id) has no solution/solve.sh")
            }
            overrides.mounts = [MountSpec(kind: .readOnly(source: task.solutionDirectory), destination: "/solution")]
            command = ["bash", "/solution/solve.sh"]
        } else {
            command = ["python3", "-c", Self.agentRunner]
        }
        var step = VerifierStep(task: task, scratch: scratch, image: image, imageRoot: imageRoot, appPath: appPath,
                                appOwner: image?.owner ?? (taskPolicy.identity.hostUID, taskPolicy.identity.hostGID),
                                policy: verifierPolicy, overrides: verifierOverrides, audit: verifierAudit, timeout: verifierTimeout,
                                ahead: ahead, rewardWatch: rewardWatch)
        // The verifier's packages come from the operator's mirrors, whatever the task's own
        // network: a no-network task's test may still apt-get install.
        if let image, !configuration.agentNetworkAllow.isEmpty {
            let names = VerifierPackages.requested(inTests: task.testsDirectory)
            if !names.isEmpty {
                var o = PlanOverrides()
                o.timeoutSeconds = VerifierPackages.timeout
                image.apply(to: &o, root: imageRoot, policy: taskPolicy, verifier: false)
                o.network = NetworkSpec(mode: .proxy, allow: configuration.agentNetworkAllow)
                step.packages = (names, taskPolicy, o)
            }
        }
        if let external = configuration.externalAgent, !configuration.oracle {
            if let image {
                // The tool's commands run in the task's container, on its image (TaskContainer.swift).
                return runInContainer(external, &run, &step, policy: taskPolicy, overrides: overrides, image: image, stdin: stdinFD)
            }
            // The tool's sandboxes are gone when this returns; the verifier is built after.
            close(stdinFD)
            let start = Self.now()
            let end = external.run(task, workdir: appPath, container: nil)
            guard take(end, seconds: Self.now() - start, into: &run, step: &step) else { return }
        } else {
            // On an image, what the agent leaves running (a server its tests query) is kept
            // while the verifier runs, which is then done here, beside it.
            var verifiedBeside = false
            let start = Self.now()
            let agent = sandboxes.run(taskPolicy, command, overrides, stdin: stdinFD, stdout: "agent.stdout", stderr: "agent.stderr",
                                scratch: scratch, audit: configuration.audit,
                                whenQuiet: configuration.buildVerifierAhead ? buildAhead : nil,
                                compiled: { ahead.agentWrites = $0.writableSources },
                                keepSurvivors: image != nil) { survivors in
                                    verifiedBeside = true
                                    run.agentSeconds = Self.now() - start
                                    step.agentProblem = Self.agentProblem(survivors.termination, memoryLimit: false)
                                    TaskVerifier(runner: self).verifyAndScore(&run, step, survivors: survivors)
                                }
            if verifiedBeside { return }
            run.agentSeconds = agent.seconds
            switch agent.result {
            case .failure(let failure):
                if failure.supervisor { run.supervisorFailure = "agent sandbox: \(failure.message)" }
                return run.finish(.setupFailed, "agent sandbox: \(failure.message)")
            case .success(let r):
                switch r.termination {
                case .exited, .signaled:
                    step.agentProblem = Self.agentProblem(r.termination, memoryLimit: r.memoryLimitHit)
                case .timedOut:
                    // The tree is dead and half-done work is not graded: a timed-out agent scores 0.
                    return run.finish(.agentTimeout, "agent timed out after \(Self.seconds(agentTimeout))")
                case .setupFailed(let message, _):
                    return run.finish(.setupFailed, "agent sandbox setup: \(message)")
                case .execFailed(let e):
                    return run.finish(.agentCrashed, "agent could not be executed: \(FileSystem.errorText(e))")
                }
            }
        }
        TaskVerifier(runner: self).verifyAndScore(&run, step)
    }

    /// What an agent's exit counts as: nothing for status 0, else a problem to note.
    static func agentProblem(_ termination: SandboxResult.Termination, memoryLimit: Bool) -> String? {
        switch termination {
        case .exited(0): return nil
        case .exited(let code): return "agent exited \(code)"
        case .signaled(let signal): return "agent killed by signal \(signal)\(memoryLimit ? " (memory limit)" : "")"
        default: return nil
        }
    }

    /// The agent's stdin: a copy of instruction.md in `out/`. A copy rather than the
    /// benchmark's own file because /proc/self/fd/0 inside names the file's host path, and
    /// the benchmark's path names the task (and possibly the split); the copy's path is
    /// random like everything else in the scratch directory.
    private func instructionInput(_ task: BenchmarkTask, scratch: TaskScratch, run: inout TaskExecution) throws(BenchmarkError) -> Int32 {
        let dir = FileSystem.openDirectory(task.directory)
        guard dir >= 0 else { throw BenchmarkError(.io, "\(task.directory): \(FileSystem.errorText())") }
        defer { close(dir) }
        let bytes: [UInt8]
        switch FileSystem.readSmallFile(at: dir, "instruction.md", limit: Self.instructionLimit) {
        case .success(let b): bytes = b
        case .failure(let e): throw BenchmarkError(.io, "\(task.instructionPath): cannot read (\(e))")
        }
        run.instruction = bytes
        if let e = FileSystem.writeFile(at: scratch.outFD, "instruction.md", bytes, mode: 0o600) {
            throw BenchmarkError(.io, "\(scratch.outPath)/instruction.md: \(FileSystem.errorText(e))")
        }
        let fd = FileSystem.openFile(at: scratch.outFD, "instruction.md", O_RDONLY)
        guard fd >= 0 else { throw BenchmarkError(.io, "\(scratch.outPath)/instruction.md: \(FileSystem.errorText())") }
        return fd
    }

    /// The program agent.py runs under. It imports /agent/agent.py as module `agent`, reads
    /// the instruction from stdin and calls `HarnessAgent().run(instruction, "/app")`
    /// (awaiting it if it is a coroutine). The working directory /app holds task files, so
    /// it is taken off sys.path: a task's `json.py` must not shadow the agent's imports.
    /// Bytecode is not written (/agent is read-only anyway).
    static let agentRunner = """
        import sys
        sys.dont_write_bytecode = True
        sys.path[:] = [p for p in sys.path if p not in ("", ".", "/app")]
        import importlib.util
        spec = importlib.util.spec_from_file_location("agent", "/agent/agent.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["agent"] = module
        spec.loader.exec_module(module)
        instruction = sys.stdin.read()
        result = module.HarnessAgent().run(instruction, "/app")
        if hasattr(result, "__await__"):
            import asyncio  # only for async agents: importing it costs tens of milliseconds
            asyncio.run(result)
        """

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    static func seconds(_ s: Double) -> String {
        s == s.rounded() && s < 1e15 ? "\(Int(s))s" : "\(s)s"
    }
}
