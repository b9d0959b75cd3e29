import BrokerWire
import ExperimentModel
import Foundation
import Glibc
import Sandbox
import SandboxPolicy
import SupervisorIO

/// One start of the coding agent, once its sandbox has ended.
struct AgentSession {
    var start: Int
    /// False when the run was stopping before the sandbox started.
    var ran = true
    var result: SandboxResult?
    var exit: String
    var seconds: Double
    var requests = 0
    var progress = false
}

/// The coding agent's sessions: one start in its sandbox, what a session that ended came
/// to, and when the next one starts.
extension RunLoop {
    /// Starts the coding agent and waits for its sandbox to end (on the caller's thread,
    /// without the desk: the broker answers the agent meanwhile).
    func launchAgent(command: [String], policy: Policy, gate: AgentGate?, resumed: Bool) throws -> AgentSession {
        let (starts, answer, audit) = desk.withLock { d in
            let begun = d.beginSession()
            return (begun.start, begun.missedAnswer, d.audit)
        }
        var prompt = starts == 1 && !resumed ? config.codingAgent.prompt : config.codingAgent.continuePrompt
        if let answer {
            prompt += "\n\nYour last `autoharness gate` was answered while you were stopped (this host has no cgroup freezer, so the coding agent does not run during a gate). Its answer:\n" + answer
        }
        let argv = command.map { $0 == "{prompt}" ? prompt : $0 }
        var ov = PlanOverrides()
        for b in config.codingAgent.binds { ov.mounts.append(MountSpec(kind: .readOnly(source: b), destination: b)) }
        ov.environment = config.codingAgent.envPass + config.codingAgent.env.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" } + [
            "AUTOHARNESS_PROMPT=\(prompt)", "AUTOHARNESS_AGENT_START=\(starts)", "AUTOHARNESS_BROKER=\(BrokerWire.sandboxSocket)",
            "PYTHONDONTWRITEBYTECODE=1",
        ]
        var host = settings.hostEnvironment
        gate?.apply(&ov, host: &host)
        let signals: SandboxSignals
        do throws(SandboxError) { signals = try SandboxSignals() } catch { throw ExperimentError(.io, error.message) }
        let log = open(paths.agentLog, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        let noInput = PayloadInput.empty()
        let noInputErrno = errno
        defer {
            close(log)
            if noInput >= 0 { close(noInput) }
            stop.detach()
        }
        guard stop.attach(signals) else { return AgentSession(start: starts, ran: false, exit: "not started", seconds: 0) }
        let header = "\n=== \(isoTimestamp()) coding agent start \(starts): \(argv.joined(separator: " "))\n"
        let count = header.utf8.count
        let written = log < 0 ? -1 : header.withCString { write(log, $0, count) }
        let e = errno
        // The agent's output goes to this log: a log that cannot be written (a full disk)
        // means a session nobody could read afterwards, so it is not started.
        guard written == count else {
            stop.writeFailed("the coding agent's log", "\(paths.agentLog): \(ErrnoName.describe(written < 0 ? e : ENOSPC))")
            return AgentSession(start: starts, ran: false, exit: "not started", seconds: 0)
        }
        // Never -1: that would hand the coding agent the supervisor's own stdin.
        guard noInput >= 0 else {
            let why = "stdin (/dev/null through a read-only mount): \(ErrnoName.describe(noInputErrno))"
            settings.log("coding agent sandbox: \(why)")
            return AgentSession(start: starts, ran: false, exit: "could not be started (\(why))", seconds: 0)
        }
        let t0 = Date()
        settings.log("coding agent start \(starts) (log: \(paths.agentLog))")
        desk.withLock { $0.startMeter(logPath: paths.agentLog) }
        do throws(SandboxError) {
            let plan = try PlanCompiler.compile(policy: policy, command: argv, overrides: ov, hostEnvironment: host)
            var options = RunOptions(audit: audit)
            options.inferenceGate = gate?.gate
            options.stdio = (noInput, log, log)
            options.signals = signals
            options.control = agentControl
            let r = try SandboxRunner.run(plan, options: options)
            let (requests, progress) = desk.withLock { ($0.tally.requestsThisStart, $0.tally.progressThisStart) }
            return AgentSession(start: starts, result: r, exit: Self.describe(r), seconds: Date().timeIntervalSince(t0), requests: requests, progress: progress)
        } catch {
            settings.log("coding agent sandbox: \(error.message)")
            _ = "sandbox error: \(error.message)\n".withCString { write(log, $0, strlen($0)) }
            return AgentSession(start: starts, exit: "could not be started (\(error.message))", seconds: Date().timeIntervalSince(t0))
        }
    }

    /// What the run does after a session that ended.
    enum AfterSession: Equatable {
        case restart(afterSeconds: Double)
        case stop(reason: String, failed: Bool, nothingLeft: Bool)
        /// The run is stopping already.
        case end
    }

    /// The streaks after `outcome`, and whether a limit of them ends the run.
    static func afterSession(_ outcome: SessionOutcome, withoutProgress: inout Int, crashes: inout Int, progress: Bool,
                             heldForGate: Bool, stopping: Bool, config: ExperimentConfig, exit: String, agentLog: String) -> AfterSession {
        switch outcome {
        case .progress: (withoutProgress, crashes) = (0, 0)
        case .noProgress: (withoutProgress, crashes) = (withoutProgress + 1, 0)
        case .crash: crashes += 1
        case .stopped: if progress { (withoutProgress, crashes) = (0, 0) }
        }
        var counters = RunCounters()
        (counters.withoutProgress, counters.crashes) = (withoutProgress, crashes)
        let limits = RunBudget.all(config: config, maxIterations: nil, maxHours: nil, used: counters)
        if outcome == .crash, let b = limits.first(where: { $0.kind == .maxCrashes && $0.spent }) {
            return .stop(reason: "crash loop: \(b.stopReason) (last: \(exit); see \(agentLog))", failed: true, nothingLeft: false)
        }
        if outcome == .noProgress, let b = limits.first(where: { $0.kind == .maxRestarts && $0.spent }) {
            return .stop(reason: b.stopReason, failed: false, nothingLeft: true)
        }
        if stopping { return .end }
        return .restart(afterSeconds: heldForGate ? 0 : backoff(base: config.codingAgent.restartBackoff, streak: max(withoutProgress, crashes)))
    }

    /// The longest wait between two starts of the coding agent, in seconds.
    public static let maxBackoff = 300.0

    /// Seconds before starting the agent again after `streak` sessions in a row without
    /// progress (or crashes): `base` after one or none, doubled for each further one, at most
    /// `maxBackoff`.
    static func backoff(base: Double, streak: Int) -> Double {
        streak <= 1 ? base : min(maxBackoff, base * pow(2, Double(min(streak, 32) - 1)))
    }

    /// What a session that the supervisor did not end came to. Anything new run is progress,
    /// however the session ended; otherwise a quick exit is a crash unless it was clean and
    /// made requests (`claude -p` that asks for a status and ends its session is not
    /// crashing, but it did not progress either).
    static func outcome(seconds: Double, clean: Bool, requests: Int, progress: Bool, quickExit: Double) -> SessionOutcome {
        if progress { return .progress }
        if seconds < quickExit && (requests == 0 || !clean) { return .crash }
        return .noProgress
    }

    static func describe(_ r: SandboxResult) -> String {
        switch r.termination {
        case .exited(let c): return "exited with code \(c)"
        case .signaled(let s): return "was killed by signal \(s)"
        case .timedOut: return "timed out"
        case .setupFailed(let m, _): return "could not be started (\(m))"
        case .execFailed(let e): return "could not be executed (\(String(cString: strerror(e))))"
        }
    }

    static func newRunID() -> String {
        var t = time(nil)
        var tm = tm()
        gmtime_r(&t, &tm)
        return String(format: "%04d%02d%02dT%02d%02d%02dZ-%04x", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                      UInt16.random(in: 0...UInt16.max))
    }
}
