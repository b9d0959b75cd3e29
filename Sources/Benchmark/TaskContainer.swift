// An external agent phase (Harbor's) on a task's image: the task container.
//
// Harbor and agent.py run in the tool's runner sandbox, on the host's userland; the agent's
// commands must run on the task's image, as under Harbor's Docker provider. So the task gets a
// second sandbox, its container: the image's overlay as its root, the agent's policy and
// overrides (root inside its user namespace, the image's WORKDIR and ENV, the agent phase's
// egress), and `autoharness-exec` as its payload, a command server on a Unix socket in a
// directory that only the runner sandbox is also given (`TaskContainerLink`). The runner's
// environment class (templates/terminal-bench/autoharness_harbor_env.py) sends each command
// and file copy there. Both sandboxes belong to the agent phase: nothing crosses between them
// that agent.py could not have done in either.
//
// When the tool is done, the supervisor closes the server's stdin and it exits; what the
// commands left running (a server the tests query) is kept beside the verifier, exactly as
// for a local task on its image (`TaskVerifier.verifyAndScore(_:_:survivors:)`), and killed after it.

import Glibc
import Sandbox
import SandboxPolicy
import SupervisorIO

/// Where an external agent phase reaches the task's container.
struct TaskContainerLink {
    /// The host directory holding the server's socket (bound into the tool's sandbox).
    var socketDirectory: String

    /// The directory's path in both sandboxes, and the socket's name in it.
    static let directory = "/run/autoharness-task"
    static let socketName = "exec.sock"
    static var socketPath: String { directory + "/" + socketName }
    /// Where the server's binary is bound in the container.
    static let server = "/opt/autoharness/exec/autoharness-exec"

    /// The command server beside this binary (`autoharness-exec`), or in libexec/ of an
    /// installation; nil when there is none.
    static func serverBinary() -> String? {
        let dir = Launcher.executableDirectory()
        for path in [dir + "/autoharness-exec", dir + "/../libexec/autoharness/autoharness-exec"] {
            var st = stat()
            if stat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_mode & 0o111 != 0 {
                // Canonical: a bind source with `..` is refused.
                guard let real = realpath(path, nil) else { return nil }
                defer { free(real) }
                return String(cString: real)
            }
        }
        return nil
    }
}

/// The tool's end, handed from its thread to the supervising one, and whether the container
/// is gone (then the tool's thread stops waiting for its server).
private final class ToolEnd: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var cond = pthread_cond_t()
    private var end: ExternalAgentEnd?
    private var gone = false

    init() {
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&cond, nil)
    }

    private func locked<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return body()
    }

    var sandboxEnded: Bool {
        get { locked { gone } }
        set { locked { gone = newValue } }
    }

    func post(_ e: ExternalAgentEnd) {
        locked {
            end = e
            pthread_cond_broadcast(&cond)
        }
    }

    func wait() -> ExternalAgentEnd {
        locked {
            while end == nil { pthread_cond_wait(&cond, &mutex) }
            return end!
        }
    }
}

extension TaskRunner {
    /// Runs `external` with the task's commands in its container (see the top of this file),
    /// then the verifier; the task is finished when this returns.
    func runInContainer(_ external: any ExternalAgentPhase, _ run: inout TaskExecution, _ step: inout VerifierStep,
                        policy: Policy, overrides given: PlanOverrides, image: TaskImage, stdin: Int32) {
        close(stdin)  // the container's stdin is the supervisor's pipe, below
        let (task, scratch) = (step.task, step.scratch)
        guard let server = TaskContainerLink.serverBinary() else {
            return run.finish(.setupFailed, "task \(task.id): autoharness-exec (the task container's command server) is not beside \(Launcher.executableDirectory())/autoharness: build or install it with autoharness")
        }
        let link: TaskContainerLink
        do throws(BenchmarkError) {
            close(try scratch.makeSandboxDirectory("exec", owner: image.owner))
            link = TaskContainerLink(socketDirectory: scratch.path + "/exec")
        } catch {
            return run.finish(.setupFailed, "task \(task.id): \(error.message)")
        }
        var overrides = given
        overrides.mounts += [
            MountSpec(kind: .readOnly(source: server), destination: TaskContainerLink.server),
            MountSpec(kind: .readWrite(source: link.socketDirectory), destination: TaskContainerLink.directory),
        ]
        // The container lasts as long as the tool's agent may, with a margin (`containerTimeout`).
        overrides.timeoutSeconds = external.containerTimeout(for: task) ?? given.timeoutSeconds
        guard let quit = closeOnExecPipe() else {
            return run.finish(.setupFailed, "task \(task.id): pipe: \(FileSystem.errorText())")
        }
        // The tool runs on a thread of its own once the server listens; closing `quit[1]`
        // (after it, or when the container is gone first) ends the server.
        let end = ToolEnd()
        let socket = link.socketDirectory + "/" + TaskContainerLink.socketName
        let writeEnd = quit.write
        let appPath = step.appPath
        let started = Self.now()
        let toolThread = detachedThread {
            var st = stat()
            while lstat(socket, &st) != 0 || st.st_mode & S_IFMT != S_IFSOCK {
                if end.sandboxEnded || Self.now() - started > Self.containerStartLimit {
                    close(writeEnd)
                    return end.post(ExternalAgentEnd(.ungraded(.setupFailed), "the task container's command server did not start (agent.stderr)"))
                }
                usleep(20_000)
            }
            let result = external.run(task, workdir: appPath, container: link)
            close(writeEnd)
            end.post(result)
        }
        guard toolThread else {
            close(quit.read); close(quit.write)
            return run.finish(.setupFailed, "task \(task.id): no thread to run the tool on")
        }
        var verifiedBeside = false
        var stepCopy = step
        let container = sandboxes.run(policy, [TaskContainerLink.server, TaskContainerLink.socketPath], overrides, stdin: quit.read,
                                stdout: "agent.stdout", stderr: "agent.stderr", scratch: scratch, audit: configuration.audit,
                                keepSurvivors: true) { survivors in
            verifiedBeside = true
            guard self.take(end.wait(), seconds: Self.now() - started, into: &run, step: &stepCopy) else { return }
            TaskVerifier(runner: self).verifyAndScore(&run, stepCopy, survivors: survivors)
        }
        end.sandboxEnded = true
        let toolEnd = end.wait()
        if verifiedBeside { return }
        switch container.result {
        case .failure(let failure):
            if failure.supervisor { run.supervisorFailure = "task container: \(failure.message)" }
            return run.finish(.setupFailed, "task container: \(failure.message)")
        case .success(let r):
            switch r.termination {
            case .timedOut:
                return run.finish(.agentTimeout, "the task container timed out after \(Self.seconds(overrides.timeoutSeconds ?? 0))")
            case .setupFailed(let message, _):
                return run.finish(.setupFailed, "task container setup: \(message)")
            case .execFailed(let e):
                return run.finish(.setupFailed, "task container: \(TaskContainerLink.server): \(FileSystem.errorText(e))")
            case .exited, .signaled:
                break
            }
        }
        guard take(toolEnd, seconds: Self.now() - started, into: &run, step: &step) else { return }
        TaskVerifier(runner: self).verifyAndScore(&run, step)
    }

    /// How long the container's server may take to listen.
    static let containerStartLimit = 60.0

    /// Takes what an external agent phase reported into the task's run; false when that
    /// finished the task (nothing to grade).
    func take(_ end: ExternalAgentEnd, seconds: Double, into run: inout TaskExecution, step: inout VerifierStep) -> Bool {
        run.agentSeconds = seconds
        run.extraTrace = end.trace
        run.costUSD = end.costUSD
        run.vendorFailures = end.vendorFailures
        if !end.failures.isEmpty { run.agentFailures = end.failures }
        if let f = end.supervisorFailure { run.supervisorFailure = f }
        switch end.kind {
        case .finished:
            if let d = end.detail { run.note(d) }
        case .failed(let status):
            step.agentProblem = end.detail ?? "the agent failed"
            step.problemStatus = status
        case .ungraded(let status):
            run.finish(status, end.detail)
            return false
        }
        return true
    }
}
