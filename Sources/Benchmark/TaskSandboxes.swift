import Glibc
import Sandbox
import SandboxPolicy
import SupervisorIO

/// How a task's sandboxes start (the agent's, its container's, the verifier's and its package
/// install): stdout and stderr in files of the task's scratch opened by the supervisor, the
/// plan compiled with an empty host environment, the run's page-cache journal and a VM
/// guest's egress link.
struct TaskSandboxes {
    let configuration: TaskRunConfiguration

    /// Compiles and runs one sandbox with stdio on supervisor-opened fds, closing them
    /// afterwards (including `stdin`), reporting to `audit`. Blocks until the sandbox is gone.
    func run(_ policy: Policy, _ command: [String], _ overrides: PlanOverrides, stdin: Int32,
             stdout: String, stderr: String, scratch: TaskScratch, audit: AuditLog,
             whenQuiet: (() -> Void)? = nil, compiled: (LaunchPlan) -> Void = { _ in }, findPayloadPID: Bool = false,
             joinNetwork: Int32? = nil, keepSurvivors: Bool = false, afterPayload: (Survivors) -> Void = { _ in })
             -> (result: Result<SandboxResult, SandboxFailure>, seconds: Double) {
        switch prepare(policy, command, overrides, stdin: stdin, stdout: stdout, stderr: stderr, scratch: scratch, audit: audit,
                       findPayloadPID: findPayloadPID) {
        case .failure(let f): return (.failure(f.failure), f.seconds)
        case .success(var prepared):
            defer { prepared.close() }
            compiled(prepared.plan)
            prepared.options.whenQuiet = whenQuiet
            prepared.options.networkNamespace = joinNetwork
            do throws(SandboxError) {
                let result = keepSurvivors ? try SandboxRunner.run(prepared.plan, options: prepared.options, keepingSurvivors: afterPayload)
                    : try SandboxRunner.run(prepared.plan, options: prepared.options)
                return (.success(result), TaskRunner.now() - prepared.start)
            } catch {
                return (.failure(SandboxFailure(error)), TaskRunner.now() - prepared.start)
            }
        }
    }

    /// A sandbox's plan and options, with its stdio open (closed by `close()`, which owns `stdin`).
    struct Prepared {
        var plan: LaunchPlan
        var options: RunOptions
        var stdio: (Int32, Int32, Int32)
        var start: Double

        func close() {
            for fd in [stdio.0, stdio.1, stdio.2] where fd >= 0 { Glibc.close(fd) }
        }
    }

    /// Opens the sandbox's output files and compiles its plan. `stdin` is the result's to
    /// close (closed here on failure).
    func prepare(_ policy: Policy, _ command: [String], _ overrides: PlanOverrides, stdin: Int32,
                 stdout: String, stderr: String, scratch: TaskScratch,
                 audit: AuditLog, findPayloadPID: Bool = false) -> Result<Prepared, TimedFailure> {
        let start = TaskRunner.now()
        var out: Int32 = -1, err: Int32 = -1
        do throws(SandboxFailure) {
            do {
                out = try scratch.createOutput(stdout)
                err = try scratch.createOutput(stderr)
            } catch {
                throw SandboxFailure(message: error.message)
            }
            // The host environment is deliberately empty: the policy's env section is the
            // sandbox's whole environment, identical whoever runs the supervisor and for
            // either split.
            let plan: LaunchPlan
            do throws(SandboxError) {
                plan = try PlanCompiler.compile(policy: policy, command: command, overrides: overrides, hostEnvironment: [:])
            } catch {
                throw SandboxFailure(error)
            }
            var options = RunOptions(audit: audit)
            options.stdio = (stdin, out, err)
            options.pageCache = configuration.pageCache
            options.findPayloadPID = findPayloadPID
            // The agent phase's mirrors (the only proxy a task's sandboxes get), in a held-out
            // VM reached through the host's proxy.
            if plan.network.mode == .proxy, let guest = configuration.guestEgress {
                options.egressLink = (guest.link, "task")
            }
            return .success(Prepared(plan: plan, options: options, stdio: (stdin, out, err), start: start))
        } catch {
            for fd in [stdin, out, err] where fd >= 0 { close(fd) }
            return .failure(TimedFailure(failure: error, seconds: TaskRunner.now() - start))
        }
    }

    struct TimedFailure: Error {
        var failure: SandboxFailure
        var seconds: Double
    }
}

/// A sandbox that could not run, and whether the failure is the supervisor's own write.
struct SandboxFailure: Error {
    var message: String
    var supervisor = false

    init(message: String, supervisor: Bool = false) {
        self.message = message
        self.supervisor = supervisor
    }

    /// `.io` is a write of the supervisor's own (the page-cache journal) that failed.
    init(_ error: SandboxError) {
        self.init(message: error.message, supervisor: error.code == .io)
    }
}
