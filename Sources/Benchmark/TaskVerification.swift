// Steps 3 and 4 of a task (TaskRunner.swift): the verifier, in a sandbox of its own after the
// agent's, and the reward the supervisor reads. On a task's image, what the agent phase left
// running (a server the tests query) runs on beside the verifier in the agent's sandbox,
// reachable over a shared loopback only: the verifier's files are a copy of what the agent
// wrote, made while those processes were frozen, and its flag says they were there.

import Glibc
import Sandbox
import SandboxPolicy
import SupervisorIO

/// What the verifier step needs of the task's run so far.
struct VerifierStep {
    var task: BenchmarkTask
    var scratch: TaskScratch
    var image: TaskImage?
    /// The agent's overlay (`TaskScratch.imageRootPath`) on an image.
    var imageRoot: String?
    /// /app on the host: the working copy, or the agent overlay's /app.
    var appPath: String
    var appOwner: (uid_t, gid_t)
    var policy: Policy
    var overrides: PlanOverrides
    var audit: AuditLog
    var timeout: Double
    var ahead: TaskVerifier.Ahead
    var rewardWatch: ChangeWatch
    /// Why the agent's run counts as a problem (a crash, a non-zero exit), and the status
    /// a reward below the pass threshold then takes.
    var agentProblem: String?
    var problemStatus = TaskStatus.agentCrashed
    /// On an image with package mirrors: what the test script installs with apt-get, and
    /// the agent phase's policy and overrides its install runs under (`VerifierPackages`).
    var packages: (names: [String], policy: Policy, overrides: PlanOverrides)?
}

/// The verifier of one task, run by `TaskRunner` once the agent's sandbox has exited.
struct TaskVerifier {
    let runner: TaskRunner

    /// A verifier's timeout or memory kill while it ran agent code (the flag: code from /app,
    /// or the agent phase's processes beside it) is recorded against agent.py too: what it
    /// left may have caused it (an import that spins, a server that never answers), and a
    /// benchmark's fault is not agent.py's.
    func blameAgent(_ run: TaskExecution, _ kind: AuditEvent.Kind, sandbox: String, _ what: String) {
        guard let code = run.agentCode, !code.isEmpty else { return }
        var event = AuditEvent(sandbox: sandbox, kind: kind, name: "verifier", action: "kill")
        event.detail = "\(what) while running agent.py's code: \(code.prefix(2).joined(separator: "; "))"
        runner.configuration.audit.record(event)
    }

    /// Steps 3 and 4; `survivors`: what the agent phase on an image left running.
    func verifyAndScore(_ run: inout TaskExecution, _ step: VerifierStep, survivors: Survivors? = nil) {
        let (task, scratch, image, appOwner, verifierTimeout) = (step.task, step.scratch, step.image, step.appOwner, step.timeout)
        var verifierOverrides = step.overrides
        var verifierPolicy = step.policy
        var (appPath, root, upper) = (step.appPath, step.imageRoot, image.map { _ in scratch.upperPath })
        // The supervisor's own records of this task (links removed, refused, flagged): counted
        // per task (a name of its own, finished with it), so one task's many cannot use up
        // the next one's.
        let audited = "supervisor:" + (scratch.path.split(separator: "/").last.map(String.init) ?? "task")
        defer { runner.configuration.audit.finish(sandbox: audited) }
        if let survivors, let image {
            // The agent phase left processes running (a server its tests query): they keep the
            // agent's overlay, and the verifier gets one of its own, whose upper layer is a
            // copy of the agent's taken while they are frozen. Nothing they write from now on
            // reaches what the verifier reads, checks or runs; they share its loopback only.
            Self.dropAhead(step.ahead.take(), scratch: scratch)
            do throws(SandboxError) { try survivors.freeze() } catch {
                return run.finish(.setupFailed, "task \(task.id): freezing the agent's processes: \(error.message)")
            }
            do throws(BenchmarkError) {
                defer { try? survivors.thaw() }
                try scratch.mountVerifierImage(image)
            } catch {
                return run.finish(.setupFailed, "task \(task.id): \(error.message)")
            }
            (appPath, root, upper) = (scratch.verifierRootPath + "/app", scratch.verifierRootPath, scratch.verifierUpperPath)
            do {
                verifierPolicy = try runner.configuration.policyLoader.load(
                    runner.configuration.verifierPolicy, variables: ["workdir": appPath, "tests_dir": scratch.testsPath, "logs_dir": scratch.logsPath])
            } catch {
                return run.finish(.setupFailed, "policy: \(error)")
            }
            verifierOverrides.imageRoot = root
        }
        // The verifier's own network namespace, into which the supervisor relays the TCP ports
        // the survivors listen on (`PortRelay`): their services, and nothing else of theirs.
        var relay: (PortRelay, Int32)?
        if let survivors {
            do throws(SandboxError) {
                let namespace = try NetworkNamespaces.make()
                do throws(SandboxError) {
                    relay = (try PortRelay(from: survivors.networkNamespace, into: namespace), namespace)
                } catch {
                    close(namespace)
                    throw error
                }
            } catch {
                return run.finish(.setupFailed, "task \(task.id): the relay to the agent's processes: \(error.message)")
            }
        }
        defer { if let relay { _ = relay.0.stop(); close(relay.1) } }

        // What of /app git would run as code is gone before any test sees it (`GitConfigs`).
        // On an image, /app is in the overlay the agent wrote as root: never a link it left.
        let app = root == nil ? FileSystem.openDirectory(at: scratch.fd, FileSystem.name("app"))
            : (try? scratch.imageApp(owner: appOwner, root: root!)) ?? -1
        guard app >= 0 else { return run.finish(.setupFailed, "app directory: \(FileSystem.errorText())") }
        let sanitized = runner.configuration.sanitizesGitConfigs ? GitConfigs.sanitize(app: app, owner: appOwner) : .success(0)
        // Links that lead out of /app (to the answer key in /tests, the verifier's /tmp, /proc)
        // are gone too, each recorded against agent.py (`PlantedLinks`); on an image, links
        // anywhere the agent made that lead into what only the verifier has.
        let swept = root == nil ? PlantedLinks.sweep(app: app) : PlantedLinks.sweepImage(upper: upper!, root: root!)
        close(app)
        if case .failure(let e) = sanitized { return run.finish(.setupFailed, e.message) }
        switch swept {
        case .failure(let e): return run.finish(.setupFailed, e.message)
        case .success(let removed) where !removed.isEmpty:
            for link in removed {
                var event = AuditEvent(sandbox: audited, kind: .plantedLink, name: link, action: "removed")
                event.detail = root == nil ? "a link agent.py left in /app leading out of it, removed before the verifier started"
                    : "a link agent.py left on the task's image leading into what only the verifier has, removed before the verifier started"
                runner.configuration.audit.record(event)
            }
            run.note("removed \(removed.count) link(s) leading \(root == nil ? "out of /app" : "into the verifier's paths"): \(removed.prefix(3).joined(separator: "; "))")
        case .success: break
        }

        // The packages the test script installs, by the image's apt-get, before it starts.
        var installed: String?
        if let (names, policy, given) = step.packages {
            var o = given
            o.imageRoot = root
            let stdin = PayloadInput.empty()
            guard stdin >= 0 else { return run.finish(.setupFailed, "the package install's stdin: \(FileSystem.errorText())") }
            let r = runner.sandboxes.run(policy, VerifierPackages.command(names), o, stdin: stdin, stdout: "packages.stdout", stderr: "packages.stderr",
                            scratch: scratch, audit: step.audit)
            let how: String
            switch r.result {
            case .success(let s) where s.termination == .exited(0): how = "installed"
            case .success(let s): how = "failed (\(s.termination))"
            case .failure(let f): how = "failed (\(f.message))"
            }
            installed = "the image's apt-get (the agent's to have changed) ran before the verifier for the packages its test script installs: \(names.joined(separator: " ")): \(how)"
            run.note(installed!)
        }

        // The answer key is opened only by names that reach it through no link (`AnswerKeyGuard`).
        let guardKey: OpenWatch
        switch AnswerKeyGuard.start(scratch.testsPath) {
        case .success(let g): guardKey = g
        case .failure(let e):
            Self.dropAhead(step.ahead.take(), scratch: scratch)
            return run.finish(.setupFailed, "task \(task.id): \(e.message): the answer key cannot be guarded, so the verifier does not start")
        }

        // Which agent code the verifier runs (`AgentCodeRuns`), watched from here to its end; on
        // an image, anything of the agent's upper layer too, and its configuration is hidden.
        // Its /tmp and its logs, file systems of their own, too: a copy of agent.py's program
        // run from there (each watch with its own index of agent.py's files).
        var codeWatches: [(OpenWatch, AgentFiles)] = []
        let (watchedApp, watchedUpper) = (appPath, upper)
        if let upper { verifierOverrides.mounts += TaskImage.hiddenFromVerifier(upper: upper) }
        do throws(SandboxError) {
            for directory in [watchedApp, scratch.verifierTmpPath, scratch.logsPath] {
                let agentFiles = AgentFiles(app: appPath, upper: upper)
                codeWatches.append((try OpenWatch(directory: directory) { open, event in
                    AgentCodeRuns.counts(&open, event, app: watchedApp, upper: watchedUpper, agentFiles: agentFiles)
                }, agentFiles))
            }
        } catch {
            for (watch, _) in codeWatches { _ = watch.stop() }
            codeWatches = []
            run.note("\(error.message): which code from /app the verifier ran is not known")
        }

        // Step 3: the verifier. A crashed agent may still have finished the work, so it is
        // graded; only its status records the crash.
        let verifier: (result: Result<SandboxResult, SandboxFailure>, seconds: Double)
        if let (held, prepared) = step.ahead.value, held.isReady {
            step.ahead.value = nil
            let start = TaskRunner.now()
            let result = held.run()
            prepared.close()
            verifier = (.success(result), TaskRunner.now() - start)
        } else {
            // Not built ahead, or its build failed: built now, as if it never had been.
            Self.dropAhead(step.ahead.take(), scratch: scratch)
            // Never -1 here: that would hand the verifier the supervisor's own stdin.
            let empty = PayloadInput.empty()
            guard empty >= 0 else { return run.finish(.setupFailed, "the verifier's stdin (/dev/null through a read-only mount): \(FileSystem.errorText())") }
            verifier = runner.sandboxes.run(verifierPolicy, Self.verifierCommand, verifierOverrides, stdin: empty,
                               stdout: "verifier.stdout", stderr: "verifier.stderr", scratch: scratch, audit: step.audit,
                               findPayloadPID: true, joinNetwork: relay?.1)
        }
        run.verifierSeconds = verifier.seconds
        AnswerKeyGuard.stop(guardKey, tests: scratch.testsPath, audit: runner.configuration.audit, as: audited, run: &run)
        AnswerKeyGuard.flagLinksLeft([("/tmp", scratch.verifierTmpPath), ("/app", appPath), ("/logs/verifier", scratch.logsPath)],
                                     audit: runner.configuration.audit, as: audited, run: &run)
        if let first = codeWatches.first {
            let seen = codeWatches.dropFirst().reduce(first.0.stop()) { $0.merged(with: $1.0.stop()) }
            run.agentCode = AgentCodeRuns.lines(seen, app: appPath)
            for problem in Set(codeWatches.compactMap(\.1.problem)) { run.note(problem) }
        }
        if let installed { run.agentCode = [installed] + (run.agentCode ?? []) }
        if let survivors, let (r, _) = relay {
            // Flagged like agent code the verifier ran: the tests could talk to the agent's processes.
            let reached = r.stop().map { "\($0.0) (\($0.1) connection\($0.1 == 1 ? "" : "s"))" }
            if r.notRelayed > 0 { run.note("\(r.notRelayed) more port(s) the agent phase's processes listened on were not relayed (at most \(PortRelay.maxListeners))") }
            let kept = "the agent phase's processes ran beside the verifier (\(survivors.programs.joined(separator: ", "))), "
                + (reached.isEmpty ? "which reached none of them" : "which reached them through the supervisor's relay: \(reached.joined(separator: ", "))")
            run.agentCode = [kept] + (run.agentCode ?? [])
            run.note(kept)
        }
        if let agentProblem = step.agentProblem { run.note(agentProblem) }
        var verifierExit: Int32 = 0
        var testScript: Int32?
        var verifierSandbox = ""
        switch verifier.result {
        case .failure(let failure):
            if failure.supervisor { run.supervisorFailure = "verifier sandbox: \(failure.message)" }
            return run.finish(.setupFailed, "verifier sandbox: \(failure.message)")
        case .success(let r):
            testScript = r.payloadPID
            verifierSandbox = r.sandboxID
            switch r.termination {
            case .exited(let code):
                verifierExit = code
            case .signaled(let signal):
                if r.memoryLimitHit { blameAgent(run, .memoryLimit, sandbox: r.sandboxID, "the verifier hit its memory limit") }
                return run.finish(.verifierCrashed, "verifier killed by signal \(signal)\(r.memoryLimitHit ? " (memory limit)" : "")")
            case .timedOut:
                blameAgent(run, .timeout, sandbox: r.sandboxID, "the verifier timed out")
                return run.finish(.verifierTimeout, "verifier timed out after \(TaskRunner.seconds(verifierTimeout))")
            case .setupFailed(let message, _):
                return run.finish(.setupFailed, "verifier sandbox setup: \(message)")
            case .execFailed(let e):
                return run.finish(.verifierCrashed, "verifier could not be executed: \(FileSystem.errorText(e))")
            }
        }

        // Step 4: the reward, read by the supervisor. A verifier that exits non-zero after
        // writing a reward is normal (test.sh often ends with pytest's status).
        let logs = FileSystem.openDirectory(at: scratch.fd, FileSystem.name("logs"))
        guard logs >= 0 else { return run.finish(.setupFailed, "logs directory: \(FileSystem.errorText())") }
        defer { close(logs) }
        // Train runs: the verifier's own test report, if it wrote one in Harbor's place
        // (logs/ctrf.json): which tests failed and how.
        if runner.configuration.collectFailures, case .success(let report) = FileSystem.readSmallFile(at: logs, "ctrf.json", limit: FailureParsers.reportLimit) {
            run.failures = FailureParsers.ctrf(report)
        }
        // Only the test script's own process may have written the reward (`RewardWriters`).
        let changes: [ChangeWatch.Change]
        do throws(SandboxError) {
            changes = try step.rewardWatch.changes()
        } catch {
            return run.finish(.invalidReward, "\(error.message): the reward's writer is unknown")
        }
        if let (path, why) = RewardWriters.problem(changes, payload: testScript, logs: logs) {
            var event = AuditEvent(sandbox: verifierSandbox, kind: .rewardTampering, name: path, action: "void")
            event.detail = why
            runner.configuration.audit.record(event)
            return run.finish(.invalidReward, why)
        }
        switch Reward.read(logs: logs) {
        case .missing:
            if verifierExit != 0 { return run.finish(.verifierCrashed, "verifier exited \(verifierExit) without a reward") }
            return run.finish(.noReward, "verifier wrote no reward.txt or reward.json")
        case .invalid(let why, let raw):
            run.rewardRaw = raw
            return run.finish(.invalidReward, why)
        case .value(let reward, let raw):
            run.rewardRaw = raw
            if verifierExit != 0 { run.note("verifier exited \(verifierExit)") }
            if reward >= TaskOutcome.passThreshold {
                run.finish(.passed, nil, reward: reward)
            } else if step.agentProblem != nil {
                // An error scores 0: partial credit is for agents that finish their run.
                run.finish(step.problemStatus, "verifier reward \(reward)")
            } else {
                run.finish(.failed, nil, reward: reward)
            }
        }
    }

    /// The verifier's sandbox, built while the agent runs on a core that would otherwise
    /// wait (`HeldSandbox`): only when that changes nothing for either
    /// (`LaunchPlan.canBeBuiltWhile`: the build writes nothing the agent can see, and binds
    /// nothing the agent could still replace). Nil when it cannot be built ahead; the
    /// verifier is then built after the agent, as it always could be. Its output files are
    /// created now and removed by `dropAhead` if it never runs.
    func buildAhead(_ policy: Policy, _ overrides: PlanOverrides, stdin: Int32,
                                    scratch: TaskScratch, audit: AuditLog, agentWrites: [String]?) -> (HeldSandbox, TaskSandboxes.Prepared)? {
        switch runner.sandboxes.prepare(policy, Self.verifierCommand, overrides, stdin: stdin, stdout: "verifier.stdout",
                              stderr: "verifier.stderr", scratch: scratch, audit: audit, findPayloadPID: true) {
        case .failure:
            Self.removeVerifierOutputs(scratch)
            return nil
        case .success(let prepared):
            guard let agentWrites, prepared.plan.canBeBuiltWhile(writable: agentWrites),
                  let held = try? SandboxRunner.build(prepared.plan, options: prepared.options) else {
                prepared.close()
                Self.removeVerifierOutputs(scratch)
                return nil
            }
            return (held, prepared)
        }
    }

    static func dropAhead(_ ahead: (HeldSandbox, TaskSandboxes.Prepared)?, scratch: TaskScratch) {
        guard let (held, prepared) = ahead else { return }
        held.discard()
        prepared.close()
        removeVerifierOutputs(scratch)
    }

    static func removeVerifierOutputs(_ scratch: TaskScratch) {
        for name in ["verifier.stdout", "verifier.stderr"] { _ = FileSystem.removeEntry(at: scratch.outFD, name) }
    }

    static let verifierCommand = ["bash", "/tests/test.sh"]

    /// Where the agent's quiet moment leaves the verifier it built (same thread; a class so
    /// the closure can fill it).
    final class Ahead {
        var value: (HeldSandbox, TaskSandboxes.Prepared)?
        /// What the agent's sandbox can write (its plan's `writableSources`).
        var agentWrites: [String]?

        func take() -> (HeldSandbox, TaskSandboxes.Prepared)? {
            defer { value = nil }
            return value
        }
    }
}
