import Benchmark
import BrokerWire
import Foundation
import Glibc
import Ledger
import Sandbox
import SandboxPolicy
import SupervisorIO

/// A request the coding agent may make through the broker. There is deliberately no verb
/// that records, commits, edits the suite or touches the test split.
public enum BrokerVerb: Sendable, Equatable {
    case benchmark(taskIDs: [String]?)
    case gate
    case status(json: Bool)
    case failures(cluster: String?, json: Bool)
    case proposeCluster(cluster: String, label: String?, mergeWith: String?)
}

/// How a request's arguments parse (the CLI's own parser decides, so the sandbox's
/// `autoharness` accepts exactly what the CLI documents).
public enum BrokerParse: Sendable {
    case verb(BrokerVerb)
    /// `--help` and the like: answered, not a violation.
    case help(String)
    /// Anything else: refused and recorded.
    case invalid(String)
}

public struct RunSettings: Sendable {
    /// Overrides `coding_agent.command`.
    public var agentCommand: [String]?
    /// Accepted iterations after which this run stops.
    public var maxIterations: Int?
    /// Wall-clock hours after which this invocation stops.
    public var maxHours: Double?
    /// The static broker client bound into the sandbox as `autoharness`.
    public var clientBinary: String
    /// Where `coding_agent.env_pass` variables are copied from.
    public var hostEnvironment: [String: String]
    /// One line of progress for the operator (stderr).
    public var log: @Sendable (String) -> Void

    public init(clientBinary: String, hostEnvironment: [String: String], log: @escaping @Sendable (String) -> Void) {
        self.clientBinary = clientBinary
        self.hostEnvironment = hostEnvironment
        self.log = log
    }
}

/// What a run did, for the end-of-run report.
public struct RunReport: Sendable {
    public var runID: String
    public var resumed: Bool
    public var reason: String
    /// The run ended because something is wrong (a crash loop, an unwritable ledger), not
    /// because a budget or the operator stopped it.
    public var failed: Bool
    /// The write that failed and stopped the run (a record the ledger refused, a snapshot,
    /// a view, a trace, the audit file on a full disk), with its path and error.
    public var ioFailure: String?
    /// False when even the run's end could not be recorded (the caller then prints this
    /// report on stderr: it is all that is left of the run's end).
    public var endRecorded = true
    /// The run ended because nothing was left to do: a budget was spent before it began, or
    /// the coding agent's sessions stopped making progress (`coding_agent.max_restarts`).
    public var nothingLeft: Bool
    public var seconds: Double
    public var gates: Int
    public var accepted: Int
    public var agentStarts: Int
    /// What the coding agent's CLI reported using in this run (resumed runs included).
    public var usage: AgentUsage
    public var bestBefore: Double?
    public var bestAfter: Double?
    /// Violations recorded during this invocation, by actor and kind.
    public var violations: [(actor: String, kind: String, count: Int)]
    public var agentLog: String
    public var auditLog: String
}

/// `autoharness run`: the coding agent in its sandbox, the broker answering it, budgets,
/// restarts, and a clean stop.
///
/// Threads: the caller's thread launches the agent's sandbox and waits for it (restarting
/// it as configured); the broker's thread answers requests one at a time; a watchdog
/// enforces `--max-hours`. Everything that touches the ledger holds `work`.
public final class RunLoop: @unchecked Sendable {
    let supervisor: ExperimentSupervisor
    let settings: RunSettings
    var config: ExperimentConfig { supervisor.config }
    var layout: ExperimentLayout { supervisor.layout }

    private let work = NSLock()
    private let stopLock = NSLock()
    private var stopReason: String?
    /// The stop is a failure (crash loop, unwritable ledger), not a budget or the operator.
    private var stopFailed = false
    /// The first write that failed, if that is why the run stopped (`RunReport.ioFailure`).
    private var ioFailure: String?
    /// The stop is for want of anything left to do (`RunReport.nothingLeft`).
    private var stopNothingLeft = false
    /// The run's end row is in the ledger (`run()` must not add a second).
    private var endAppended = false
    /// The running coding agent's signal channel (nil between sessions).
    private var agentSignals: SandboxSignals?

    // Counters (guarded by `work`).
    private var runID = ""
    private var gates = 0
    private var accepted = 0
    private var nonImproving = 0
    /// The benchmark tools' model spend in this run, from the ledger after each request.
    private var benchmarkSpend = 0.0
    private var requestsThisStart = 0
    /// A request of the current session ran something new (`SessionOutcome.progress`).
    private var progressThisStart = false
    private var agentStarts = 0
    private var reportedExtras: Set<String> = []
    /// Refused requests recorded one by one in the current minute, and those only counted.
    private var refusalWindow: (start: Double, recorded: Int, counted: [String: Int]) = (0, 0, [:])
    /// Refusals a flooding agent can repeat cheaply: at most this many rows a minute each,
    /// the rest summed up in one row.
    static let refusalsPerMinute = 30
    static let rateLimitedKinds: Set<String> = ["broker_protocol", "refused_request", "gate_budget", "repeat_gate"]
    private var startSeq: Int64 = 0
    /// When this invocation started (`--max-hours` counts from here).
    private var startedAt = Date()
    private var resumed = false
    /// What this run's finished sessions reported using, and the session in progress.
    private var runUsage = AgentUsage()
    private var meter: UsageMeter?

    private var staging: Staging!
    private var audit = AuditLog()
    private var auditFlushed = 0
    private var owner: (uid_t, gid_t) = (65534, 65534)
    /// Freezes the coding agent's whole sandbox while a gate runs held-out tasks.
    private let agentControl = SandboxControl()
    /// Hosts without a cgroup freezer: the agent was killed for a gate (restart it at once,
    /// not a crash) and the gate's answer it never received goes into its next prompt.
    private var stoppedForGate = false
    private var undeliveredAnswer: String?

    public var runDirectory: String { layout.runDirectory }
    var agentLogPath: String { runDirectory + "/agent.log" }
    var auditPath: String { runDirectory + "/audit.jsonl" }
    var stagingPath: String { runDirectory + "/agent" }
    var homePath: String { runDirectory + "/home" }
    var brokerDirectory: String { layout.brokerDirectory }
    var historyDirectory: String { layout.historyDirectory }

    public init(supervisor: ExperimentSupervisor, settings: RunSettings) {
        self.supervisor = supervisor
        self.settings = settings
        supervisor.log = settings.log  // external tools' alive lines, for the operator
    }

    // MARK: - stopping

    /// Asks the run to stop (first reason wins): no new requests are run, the agent gets
    /// SIGTERM, then SIGKILL for its whole sandbox 5 seconds later. Safe from any thread.
    public func requestStop(_ reason: String, failed: Bool = false, nothingLeft: Bool = false) {
        let signals: SandboxSignals? = stopLock.withLock {
            if stopReason == nil {
                stopReason = reason
                stopFailed = failed
                stopNothingLeft = nothingLeft
            }
            return agentSignals
        }
        guard let signals else { return }
        signals.send(SIGTERM)
        Thread.detachNewThread { [self] in
            sleep(5)
            // Only the session that got the SIGTERM: a later one has a channel of its own.
            stopLock.withLock { if agentSignals === signals { signals.kill() } }
        }
    }

    var stopping: String? { stopLock.withLock { stopReason } }

    // MARK: - the run

    public func run() throws -> RunReport {
        let started = Date()
        startedAt = started
        let state = try supervisor.state()
        guard state.prepared else { throw ExperimentError(.state, "experiment not prepared yet: run `autoharness prepare` first") }
        let command = settings.agentCommand ?? config.codingAgent.command
        guard !command.isEmpty else {
            throw ExperimentError(.usage, "no coding agent command: set coding_agent.command in \(layout.config) or pass --agent-cmd")
        }
        guard access(settings.clientBinary, X_OK) == 0 else {
            throw ExperimentError(.io, "the broker client \(settings.clientBinary) is missing or not executable (build the whole package)")
        }
        resumed = state.openRun != nil
        runID = state.openRun?.runID ?? Self.newRunID()
        gates = state.openRunGates
        accepted = state.openRunAccepted
        benchmarkSpend = state.openRunBenchmarkCost.total
        nonImproving = state.openRunRejectedInARow
        // A resumed run goes on counting where its last recorded session left off.
        let counted = state.openRunCounters()
        runUsage = resumed ? state.agentUsage(run: runID) : AgentUsage()
        let bestBefore = state.best

        let policy = try loadPolicy()
        owner = (policy.identity.hostUID, policy.identity.hostGID)
        try prepareDirectories(resumed: resumed)
        // An audit line that cannot be written stops the run: the agent does not go on unaudited.
        audit = try AuditLog(path: auditPath) { [weak self] failure in self?.writeFailed("the audit of the coding agent's sandbox", failure) }
        startSeq = try append([(.runStarted, RunStartedRecord(runID: runID, resumed: resumed, command: command, maxIterations: settings.maxIterations,
                                                   maxHours: settings.maxHours, gateBudget: config.gateBudget))])
        do {
            return try serve(command: command, policy: policy, started: started, bestBefore: bestBefore,
                             withoutProgress: counted?.withoutProgress ?? 0, crashes: counted?.crashes ?? 0)
        } catch {
            // Whatever stopped the loop itself, the run's end is recorded if the ledger takes it.
            stopLock.withLock { if stopReason == nil { stopReason = "stopped by an error: \(error)" } }
            if !endAppended {
                _ = try? work.withLock {
                    try append([(.runEnded, RunEndedRecord(runID: runID, reason: stopping ?? "stopped", gates: gates, accepted: accepted,
                                                           agentStarts: agentStarts, nothingLeft: nil))])
                }
            }
            throw error
        }
    }

    /// The loop of `run()` once the run's start is recorded: the broker, the agent's
    /// sessions, and the run's end.
    private func serve(command: [String], policy: Policy, started: Date, bestBefore: Double?,
                       withoutProgress: Int, crashes: Int) throws -> RunReport {
        var withoutProgress = withoutProgress, crashes = crashes
        settings.log(resumed ? "resuming run \(runID) (\(gates) gate(s), \(accepted) accepted so far)" : "run \(runID) started")
        settings.log("coding agent: " + CodingAgentPreset.identity(command: command, config: config.codingAgent, root: layout.root))

        // Marked as this process's before it exists: a supervisor killed while it serves leaves
        // a socket the next one can attribute and remove.
        let brokerMarker = try Leftovers.claimBroker(layout)
        let broker: BrokerServer
        do {
            broker = try BrokerServer(path: layout.brokerSocket) { [self] request, peer in
                handle(request, peer: peer)
            }
        } catch {
            Leftovers.release(brokerMarker)
            throw error
        }
        broker.start()
        if settings.maxHours != nil {
            Thread.detachNewThread { [self] in
                while stopping == nil {
                    if let why = hoursSpent() {
                        requestStop(why)
                        break
                    }
                    sleep(1)
                }
            }
        }
        if config.maxCostUSD > 0 {
            Thread.detachNewThread { [self] in
                while stopping == nil {
                    work.withLock { meter }?.poll()  // reading the log holds only the meter's lock
                    if let why = work.withLock({ costSpent() }) {
                        requestStop(why)
                        break
                    }
                    sleep(2)
                }
            }
        }
        // Nothing to do before the agent has done anything: it is not started at all.
        if let why = budgetSpent() ?? costSpent() { requestStop(why, nothingLeft: true) }

        while stopping == nil {
            let session = try launchAgent(command: command, policy: policy)
            guard session.ran else { break }
            let usage = finishUsage()
            if let why = work.withLock({ costSpent() }) { requestStop(why) }
            let heldForGate = work.withLock { () -> Bool in
                flushAudit()
                defer { stoppedForGate = false }
                return stoppedForGate
            }
            // Killed by us (the run is stopping, or on a host without a freezer for a gate):
            // neither a crash nor a session without progress.
            let outcome = stopping != nil || heldForGate ? .stopped
                : Self.outcome(seconds: session.seconds, clean: session.result?.exitCode == 0, requests: session.requests,
                               progress: session.progress, quickExit: config.codingAgent.quickExitSeconds)
            switch outcome {
            case .progress: (withoutProgress, crashes) = (0, 0)
            case .noProgress: (withoutProgress, crashes) = (withoutProgress + 1, 0)
            case .crash: crashes += 1
            case .stopped: if session.progress { (withoutProgress, crashes) = (0, 0) }
            }
            var counters = RunCounters()
            (counters.withoutProgress, counters.crashes) = (withoutProgress, crashes)
            let limits = RunBudget.all(config: config, maxIterations: nil, maxHours: nil, used: counters)
            var delay: Double?
            if outcome == .crash, let b = limits.first(where: { $0.kind == .maxCrashes && $0.spent }) {
                requestStop("crash loop: \(b.stopReason) (last: \(session.exit); see \(agentLogPath))", failed: true)
            } else if outcome == .noProgress, let b = limits.first(where: { $0.kind == .maxRestarts && $0.spent }) {
                requestStop(b.stopReason, nothingLeft: true)
            } else if stopping == nil {
                delay = heldForGate ? 0 : Self.backoff(base: config.codingAgent.restartBackoff, streak: max(withoutProgress, crashes))
            }
            recordSession(session, usage: usage, outcome: outcome, withoutProgress: withoutProgress, crashes: crashes, restartAfter: delay)
            guard let delay else { break }
            if heldForGate {
                settings.log("coding agent restarted after the gate it was stopped for")
                continue
            }
            let streak = outcome == .crash ? "\(crashes) crash(es) in a row of coding_agent.max_crashes \(config.codingAgent.maxCrashes)"
                : "\(withoutProgress) session(s) in a row without progress of coding_agent.max_restarts \(config.codingAgent.maxRestarts)"
            settings.log("coding agent \(session.exit) after \(Int(session.seconds))s (\(outcome == .progress ? "it made progress" : streak)); "
                         + "restarting in \(String(format: delay < 10 ? "%.1f" : "%.0f", delay))s with the continuation prompt")
            let until = Date().addingTimeInterval(delay)
            while stopping == nil && Date() < until { usleep(100_000) }
        }
        broker.stop()
        Leftovers.release(brokerMarker)
        let reason = stopping ?? "stopped"
        let nothingLeft = stopLock.withLock { stopNothingLeft }
        let end: RunReport = try work.withLock {
            flushAudit()
            flushRefusalCounts()
            var endRecorded = true
            do {
                try append([(.runEnded, RunEndedRecord(runID: runID, reason: reason, gates: gates, accepted: accepted, agentStarts: agentStarts,
                                                       nothingLeft: nothingLeft ? true : nil))])
                endAppended = true
            } catch {
                // The report still goes out (on stderr); the next `run` resumes this one.
                settings.log("could not record the end of run \(runID): \(error)")
                endRecorded = false
                stopLock.withLock {
                    stopFailed = true
                    if ioFailure == nil { ioFailure = "the end of the run could not be recorded: \(error)" }
                }
            }
            let after = try supervisor.state()
            // Every violation recorded since this invocation started, whoever recorded it.
            var counts: [String: Int] = [:]
            var order: [(String, String)] = []
            for r in try supervisor.ledger.records(kind: .violation) where r.seq > startSeq {
                let v = try r.decode(ViolationRecord.self)
                let key = v.actor + "\u{1F}" + v.kind
                if counts[key] == nil { order.append((v.actor, v.kind)) }
                counts[key, default: 0] += v.occurrences
            }
            return RunReport(runID: runID, resumed: resumed, reason: reason, failed: stopLock.withLock { stopFailed },
                             ioFailure: stopLock.withLock { ioFailure }, endRecorded: endRecorded, nothingLeft: nothingLeft,
                             seconds: Date().timeIntervalSince(started), gates: gates,
                             accepted: accepted, agentStarts: agentStarts, usage: runUsage, bestBefore: bestBefore, bestAfter: after.best,
                             violations: order.map { ($0.0, $0.1, counts[$0.0 + "\u{1F}" + $0.1]!) }, agentLog: agentLogPath, auditLog: auditPath)
        }
        return end
    }

    static func newRunID() -> String {
        var t = time(nil)
        var tm = tm()
        gmtime_r(&t, &tm)
        return String(format: "%04d%02d%02dT%02d%02d%02dZ-%04x", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                      UInt16.random(in: 0...UInt16.max))
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

    /// The run's budgets with its counters as they are now (holding `work`).
    func budgets() -> [RunBudget] {
        var c = RunCounters()
        (c.gates, c.accepted, c.rejectedInARow) = (gates, accepted, nonImproving)
        c.costUSD = (runUsage + (meter?.usage ?? AgentUsage())).costUSD ?? 0
        c.benchmarkCostUSD = benchmarkSpend
        c.hours = Date().timeIntervalSince(startedAt) / 3600
        return RunBudget.all(config: config, maxIterations: settings.maxIterations, maxHours: settings.maxHours, used: c)
    }

    /// Why the run must stop for `--max-hours`, if it must. It reads no counter, so it does
    /// not wait for `work`: a gate holds that for its whole length, and the deadline does not.
    func hoursSpent() -> String? {
        var c = RunCounters()
        c.hours = Date().timeIntervalSince(startedAt) / 3600
        return RunBudget.all(config: config, maxIterations: nil, maxHours: settings.maxHours, used: c).first { $0.kind == .maxHours && $0.spent }?.stopReason
    }

    /// Why the run must stop now for its gates, if it must (called with the counters current).
    func budgetSpent() -> String? {
        budgets().first { [.maxIterations, .gateBudget, .maxNonImproving].contains($0.kind) && $0.spent }?.stopReason
    }

    /// Why the run must stop for `budget.max_cost_usd`, if it must (holding `work`): the
    /// finished sessions and the running one.
    func costSpent() -> String? {
        budgets().first { $0.kind == .maxCost && $0.spent }?.stopReason
    }

    /// Ends the usage account of the session that just ended (the rest of its output is
    /// read) and returns it.
    func finishUsage() -> AgentUsage {
        let m = work.withLock { meter }
        m?.poll()
        return work.withLock {
            meter = nil
            let usage = m?.usage ?? AgentUsage()
            runUsage = runUsage + usage
            return usage
        }
    }

    /// One ledger row for a session that ended: its account, what it came to and what the
    /// run does next.
    func recordSession(_ s: AgentSession, usage: AgentUsage, outcome: SessionOutcome, withoutProgress: Int, crashes: Int, restartAfter: Double?) {
        work.withLock {
            let row = AgentSessionRecord(runID: runID, start: s.start, seconds: s.seconds, exit: s.exit, usage: usage, outcome: outcome,
                                         requests: s.requests, withoutProgress: withoutProgress, crashes: crashes, restartAfter: restartAfter)
            do {
                _ = try append([(.agentSession, row)])
            } catch {
                recordingFailed("the coding agent's session \(s.start)", error)
            }
            if usage.totalTokens > 0 {
                settings.log("coding agent session \(s.start)\(usage.model.map { " (\($0))" } ?? ""): \(usage.summary); this run: \(runUsage.summary)")
            }
        }
    }

    // MARK: - the sandbox

    func loadPolicy() throws -> Policy {
        let vars = [
            "program_md": layout.program, "agent_staging": stagingPath, "workspace_view": layout.workspace,
            "learnings_md": layout.learnings, "home": homePath, "broker_dir": brokerDirectory, "autoharness_bin": settings.clientBinary,
            "history_dir": historyDirectory,
        ]
        var policy = try supervisor.policyLoader.load(config.codingAgentPolicy, variables: vars)
        if policy.network.mode == .proxy { policy.network.allow = config.networkAllow }
        return policy
    }

    /// Copies the regular files and directories under `from` into the agent's new home,
    /// owned by the sandbox's host user. Anything else (a symbolic link, a device) is an
    /// error naming it: a seed is configuration, and a link would be followed in the sandbox.
    static func seedHome(from: String, to home: String, owner: (uid_t, gid_t)) throws {
        let source = FileSystem.openDirectory(from)
        guard source >= 0 else {
            throw ExperimentError(.io, "coding_agent.home_seed: \(from): \(errno == ENOTDIR || errno == ELOOP ? "not a directory" : ErrnoName.describe(errno))")
        }
        defer { close(source) }
        let destination = FileSystem.openDirectory(home)
        guard destination >= 0 else { throw ExperimentError(.io, "\(home): \(ErrnoName.describe(errno))") }
        defer { close(destination) }
        do throws(IOFailure) {
            try FileSystem.copyTree(from: source, to: destination, owner: owner, skip: [], symlinks: .refuse, label: from)
        } catch {
            throw ExperimentError(.io, "coding_agent.home_seed: " + (error.reason.map { "\(error.path) is \($0)" } ?? error.description))
        }
    }

    /// The run's directories: staging (a copy of agent/agent.py, or on resume the agent's
    /// edits in progress), its home (kept across restarts within the run), the broker's.
    func prepareDirectories(resumed: Bool) throws {
        let fm = FileManager.default
        try fm.createDirectory(atPath: runDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        if resumed && fm.fileExists(atPath: stagingPath) {
            staging = Staging(path: stagingPath, owner: owner)
        } else {
            let dir = open(layout.agentDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard dir >= 0 else { throw ExperimentError(.io, "\(layout.agentDirectory): \(String(cString: strerror(errno)))") }
            defer { close(dir) }
            switch AgentFile.read(directoryFD: dir, maxBytes: AgentFile.maxBytes) {
            case .success(let bytes): staging = try Staging.create(at: stagingPath, from: bytes, owner: owner)
            case .failure(let why): throw ExperimentError(.io, "\(layout.agentFile) \(why.reason)")
            }
        }
        if !resumed { try removeTree(homePath) }
        if !fm.fileExists(atPath: homePath) {
            guard mkdir(homePath, 0o700) == 0, chown(homePath, owner.0, owner.1) == 0 else {
                throw ExperimentError(.io, "\(homePath): \(String(cString: strerror(errno)))")
            }
            if let seed = config.codingAgent.homeSeed {
                let from = seed.hasPrefix("/") ? seed : layout.root + "/" + seed
                try Self.seedHome(from: from, to: homePath, owner: owner)
            }
        }
        for d in [brokerDirectory, historyDirectory] {
            try fm.createDirectory(atPath: d, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
            chmod(d, 0o755)
        }
        try writeHistory()
        // learnings.md is bound read-write as a single file: the sandbox user must own it.
        let fd = open(layout.learnings, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw ExperimentError(.io, "\(layout.learnings): \(String(cString: strerror(errno))) (it must be a regular file)") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, fchown(fd, owner.0, owner.1) == 0 else {
            throw ExperimentError(.io, "\(layout.learnings) must be a regular file")
        }
    }

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

    /// Starts the coding agent and waits for its sandbox to end.
    func launchAgent(command: [String], policy: Policy) throws -> AgentSession {
        let (starts, answer) = work.withLock { () -> (Int, String?) in
            agentStarts += 1
            requestsThisStart = 0
            progressThisStart = false
            defer { undeliveredAnswer = nil }
            return (agentStarts, undeliveredAnswer)
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
        let signals: SandboxSignals
        do throws(SandboxError) { signals = try SandboxSignals() } catch { throw ExperimentError(.io, error.message) }
        let log = open(agentLogPath, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        let noInput = PayloadInput.empty()
        let noInputErrno = errno
        defer {
            close(log)
            if noInput >= 0 { close(noInput) }
            stopLock.withLock { agentSignals = nil }
        }
        stopLock.withLock { agentSignals = signals }
        if stopping != nil { return AgentSession(start: starts, ran: false, exit: "not started", seconds: 0) }
        let header = "\n=== \(isoTimestamp()) coding agent start \(starts): \(argv.joined(separator: " "))\n"
        let count = header.utf8.count
        let written = log < 0 ? -1 : header.withCString { write(log, $0, count) }
        let e = errno
        // The agent's output goes to this log: a log that cannot be written (a full disk)
        // means a session nobody could read afterwards, so it is not started.
        guard written == count else {
            writeFailed("the coding agent's log", "\(agentLogPath): \(ErrnoName.describe(written < 0 ? e : ENOSPC))")
            return AgentSession(start: starts, ran: false, exit: "not started", seconds: 0)
        }
        // Never -1: that would hand the coding agent the supervisor's own stdin.
        guard noInput >= 0 else {
            let why = "stdin (/dev/null through a read-only mount): \(ErrnoName.describe(noInputErrno))"
            settings.log("coding agent sandbox: \(why)")
            return AgentSession(start: starts, ran: false, exit: "could not be started (\(why))", seconds: 0)
        }
        let t0 = Date()
        settings.log("coding agent start \(starts) (log: \(agentLogPath))")
        work.withLock { meter = UsageMeter(path: agentLogPath, price: config.codingAgent.price) }
        do throws(SandboxError) {
            let plan = try PlanCompiler.compile(policy: policy, command: argv, overrides: ov, hostEnvironment: settings.hostEnvironment)
            var options = RunOptions(audit: audit)
            options.stdio = (noInput, log, log)
            options.signals = signals
            options.control = agentControl
            let r = try SandboxRunner.run(plan, options: options)
            let (requests, progress) = work.withLock { (requestsThisStart, progressThisStart) }
            return AgentSession(start: starts, result: r, exit: Self.describe(r), seconds: Date().timeIntervalSince(t0), requests: requests, progress: progress)
        } catch {
            settings.log("coding agent sandbox: \(error.message)")
            _ = "sandbox error: \(error.message)\n".withCString { write(log, $0, strlen($0)) }
            return AgentSession(start: starts, exit: "could not be started (\(error.message))", seconds: Date().timeIntervalSince(t0))
        }
    }

    // MARK: - the broker

    func handle(_ request: Result<[String], BrokerWire.RequestError>, peer: BrokerPeer) -> BrokerReply {
        work.withLock {
            requestsThisStart += 1
            defer { flushAudit() }
            let argv: [String]
            switch request {
            case .failure(let e):
                violation("broker_protocol", "malformed broker message: \(e)")
                return BrokerReply(stderr: "autoharness: refused: \(e); this was recorded\n", exit: 2)
            case .success(let a): argv = a
            }
            let shown = printable(argv.joined(separator: " "))
            let verb: BrokerVerb
            switch BrokerGrammar.parse(argv) {
            case .help(let text): return BrokerReply(stdout: text, exit: 0)
            case .invalid(let why):
                violation("refused_request", "`autoharness \(shown)`: \(printable(why))")
                return BrokerReply(stderr: "autoharness: \(why)\nautoharness: refused; this request was recorded\n", exit: 2)
            case .verb(let v): verb = v
            }
            if let why = stopping {
                if verb == .gate, let spent = budgetSpent() {
                    violation("gate_budget", "gate requested after the run's budget was spent: \(spent)")
                    return BrokerReply(stderr: "autoharness: refused: \(spent); the run is stopping; this request was recorded\n", exit: 2)
                }
                // 3, the CLI's "nothing left to do": 1 would read as a rejected gate.
                return BrokerReply(stderr: "autoharness: the run is stopping (\(why)); request not run\n", exit: 3)
            }
            settings.log("coding agent: autoharness \(shown)")
            do {
                switch verb {
                case .status(let json):
                    return BrokerReply(stdout: AgentText.status(Disclosure.agentStatus(try supervisor.state(), config: config), root: "/work", json: json), exit: 0)
                case .failures(let cluster, let json):
                    return BrokerReply(stdout: try Views.failuresText(try supervisor.state(), cluster: cluster, json: json), exit: 0)
                case .proposeCluster(let cluster, let label, let mergeWith):
                    try supervisor.proposeCluster(cluster, label: label, mergeWith: mergeWith, actor: "coding agent")
                    return BrokerReply(stdout: "recorded as your proposal about \(cluster); shown beside it in workspace/failures.md, counted nowhere\n", exit: 0)
                case .benchmark(let ids):
                    let (snap, notice) = try candidate()
                    // The same bytes benchmarked again show nothing new: a repeat, not progress.
                    let repeated = try supervisor.state().trainRuns.contains { $0.agentSHA256 == snap.sha256 }
                    let outcomes = try supervisor.runBenchmark(taskIDs: ids, actor: "coding agent", agent: snap)
                    benchmarkSpend = (try? supervisor.state().openRunBenchmarkCost.total) ?? benchmarkSpend
                    if !repeated { progressThisStart = true }
                    return BrokerReply(stdout: AgentText.benchmark(outcomes), stderr: notice, exit: 0)
                case .gate:
                    return try gate()
                }
            } catch {
                let code = Exit.code(for: error)
                // Fail closed: a write of the supervisor's that failed (a full disk, an I/O
                // error, the ledger) stops the run; nothing goes on that could not be kept.
                guard code == Exit.ioError else { return BrokerReply(stderr: "autoharness: \(error)\n", exit: code) }
                writeFailed("`autoharness \(shown)` for the coding agent", "\(error)", afterReply: true)
                return BrokerReply(stderr: "autoharness: \(error)\nautoharness: the run is stopping\n", exit: code)
            }
        }
    }

    func gate() throws -> BrokerReply {
        if let why = budgetSpent() {
            violation("gate_budget", "gate requested after the run's budget was spent: \(why)")
            requestStopAfterReply(why)
            return BrokerReply(stderr: "autoharness: refused: \(why); the run is stopping; this request was recorded\n", exit: 2)
        }
        let (snap, notice) = try candidate()
        let s = try supervisor.state()
        if let earlier = s.gateAttempts.last(where: { $0.agentSHA256 == snap.sha256 && $0.verdict != .interrupted }) {
            violation("repeat_gate", "gate requested for an agent.py already judged in attempt \(earlier.attempt) (sha256 \(snap.sha256.prefix(12)))")
            return BrokerReply(stderr: "autoharness: refused: this exact agent.py was already judged (gate attempt \(earlier.attempt), \(earlier.accepted ? "accepted" : "rejected")); change it before gating again; this request was recorded\n", exit: 2)
        }
        let bytes = try supervisor.snapshotBytes(snap.sha256)
        try AtomicFile.write(bytes, to: layout.agentFile, mode: 0o644)
        // The coding agent is frozen for the whole gate: held-out tasks run while none of its
        // processes can run, so nothing they do in the kernel's shared state (file locks on
        // /usr, say) can be observed as it happens. If it cannot be frozen, no gate runs. On
        // a host with no cgroup freezer at all, the agent is stopped instead: its whole
        // sandbox is killed before the gate and started again after it.
        let stopped = agentControl.canFreeze == false
        if stopped {
            let why = "this host has no cgroup freezer: the coding agent was stopped (its whole sandbox killed) for gate attempt \((try? supervisor.state().gatesStarted + 1) ?? 0) and is restarted after it with the gate's answer in its prompt"
            guard (try? append([(.note, NoteRecord(text: why))])) != nil else {
                throw ExperimentError(.io, "could not record that the coding agent is stopped for the gate; the gate was not run and not counted")
            }
            settings.log(why)
            stoppedForGate = true
            guard agentControl.stop(within: 10) else {
                throw ExperimentError(.io, "the coding agent's processes did not all end within 10 s; the gate was not run and not counted")
            }
        } else {
            do throws(SandboxError) {
                try agentControl.freeze()
            } catch {
                // Not the agent's fault, and nothing held out ran: recorded as a note, no gate
                // counted.
                let why = "gate refused: the coding agent could not be frozen (\(error.message)); no held-out task ran"
                _ = try? append([(.note, NoteRecord(text: why))])
                settings.log(why)
                throw ExperimentError(.io, "could not freeze the coding agent for the gate (\(error.message)); the gate was not run and not counted")
            }
        }
        let r: GateResult
        do {
            defer {
                if !stopped { try? agentControl.thaw() }
                // Counted from the ledger's start rows, so a gate that failed after it began
                // (a full disk, a crashed tool) still spent budget.
                gates = (try? supervisor.state().openRunGates) ?? gates + 1
                benchmarkSpend = (try? supervisor.state().openRunBenchmarkCost.total) ?? benchmarkSpend
            }
            // Checked again as the held-out phase begins: the kernel must still say frozen
            // (or, stopped, not one process of the agent may be left).
            r = try supervisor.gate(actor: "coding agent", agent: snap) { [agentControl] in
                if stopped {
                    guard agentControl.processIDs.isEmpty else {
                        throw ExperimentError(.io, "a process of the stopped coding agent is still alive; the held-out split was not run")
                    }
                } else {
                    guard agentControl.isFrozen else {
                        throw ExperimentError(.io, "the coding agent is no longer frozen; the held-out split was not run")
                    }
                }
            }
        }
        progressThisStart = true
        var extra = ""
        if r.accepted {
            accepted += 1
            nonImproving = 0
            try writeHistory()
        } else {
            nonImproving += 1
            if config.onReject == .revert, let last = try supervisor.state().iterations.last {
                let kept = try supervisor.snapshotBytes(last.agentSHA256)
                try AtomicFile.write(kept, to: layout.agentFile, mode: 0o644)
                try staging.replaceAgent(with: kept)
                extra = "agent/agent.py was restored to the last accepted version (iteration \(last.iteration)); gate.on_reject: revert\n"
            }
        }
        let (text, code) = AgentText.gate(Disclosure.gate(r, config: config))
        if let why = budgetSpent() {
            requestStopAfterReply(why)
            extra += "this was the run's last gate: \(why)\n"
        }
        if stopped { undeliveredAnswer = text + extra + notice }
        return BrokerReply(stdout: text + extra, stderr: notice, exit: code)
    }

    /// Marks the run as stopping now and signals the agent a moment later, so the answer
    /// that ended the run reaches it first.
    func requestStopAfterReply(_ reason: String, failed: Bool = false) {
        stopLock.withLock {
            if stopReason == nil {
                stopReason = reason
                stopFailed = failed
            }
        }
        Thread.detachNewThread { [self] in
            usleep(500_000)
            requestStop(reason, failed: failed)
        }
    }

    /// Copy-back: takes agent.py from staging (nothing else), checks that it compiles, and
    /// snapshots it. Refusals are recorded; other files are dropped, with a notice (returned
    /// for the reply) or, for what would change imports, a violation.
    func candidate() throws -> (snapshot: ExperimentSupervisor.Snapshot, notice: String) {
        // One row per request at most, naming up to 20 new entries (a flood of files is
        // counted, not recorded name by name).
        let (entries, total) = try staging.extraEntries(limit: 10_000)
        let hooks = entries.filter { $0.kind == .importHook }.map(\.name)
        let fresh = hooks.filter { reportedExtras.count < 10_000 && reportedExtras.insert($0).inserted }
        if !fresh.isEmpty {
            let shown = fresh.prefix(20).map { "agent/" + printable($0) }.joined(separator: ", ")
            let more = total > entries.count ? " (\(total) entries in all; listing stopped at \(entries.count))" : fresh.count > 20 ? " and \(fresh.count - 20) more" : ""
            violation("staging_extra_file", "\(shown)\(more) created in staging: would change imports if taken; not taken (only agent.py is copied back)")
        }
        let dropped = entries.filter { $0.kind != .routine }.map { "agent/" + printable($0.name) }
        let notice = dropped.isEmpty ? "" :
            "autoharness: only agent/agent.py is kept; not taken: \(dropped.prefix(10).joined(separator: ", "))\(dropped.count > 10 ? " and \(dropped.count - 10) more" : "")\n"
        let bytes: [UInt8]
        switch try staging.takeAgent() {
        case .success(let b): bytes = b
        case .failure(let refusal):
            let why = refusal.reason
            violation("copy_back_refused", "agent/agent.py \(why)")
            throw ExperimentError(.refused, "agent/agent.py \(why); nothing was run; this request was recorded")
        }
        let snap = try supervisor.snapshot(bytes: bytes)
        if let problem = try compileCheck(snap) {
            throw ExperimentError(.refused, "agent/agent.py does not compile; nothing was run:\n\(problem)")
        }
        return (snap, notice)
    }

    /// The end of the compile sandbox's output read for its error lines.
    static let compileOutputTail = 64 << 10

    /// `compile()` of the candidate in a throwaway sandbox (the `base` policy, no network):
    /// the parser never runs in the supervisor, and nothing of the candidate is executed.
    func compileCheck(_ snap: ExperimentSupervisor.Snapshot) throws -> String? {
        let policy = try supervisor.policyLoader.load("base")
        var ov = PlanOverrides()
        ov.mounts = [MountSpec(kind: .readOnly(source: snap.directory), destination: "/candidate")]
        ov.timeoutSeconds = 60
        let out = runDirectory + "/compile.out"
        let fd = open(out, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ExperimentError(.io, "\(out): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let code = "import sys\nsrc = open('/candidate/agent.py', 'rb').read()\ncompile(src, 'agent/agent.py', 'exec')\n"
        do throws(SandboxError) {
            let plan = try PlanCompiler.compile(policy: policy, command: ["python3", "-I", "-c", code], overrides: ov, hostEnvironment: [:])
            var options = RunOptions(audit: AuditLog())
            options.stdio = (-1, fd, fd)
            let r = try SandboxRunner.run(plan, options: options)
            if r.exitCode == 0 { return nil }
            // What the sandbox wrote, read through the descriptor the supervisor opened: the
            // last 64 KiB at most (the lines shown are the last eight).
            var st = stat()
            let size = fstat(fd, &st) == 0 ? Int(st.st_size) : 0
            lseek(fd, off_t(max(0, size - Self.compileOutputTail)), SEEK_SET)
            let tail = (try? InputFile.read(descriptor: fd, cap: Self.compileOutputTail).get()) ?? []
            let text = String(decoding: tail, as: UTF8.self)
            let lines = text.split(separator: "\n").suffix(8).joined(separator: "\n")
            return lines.isEmpty ? "python3 \(Self.describe(r))" : lines
        } catch {
            throw ExperimentError(.io, "compile check sandbox: \(error.message)")
        }
    }

    /// `history/git-log.txt` for the agent: the accepted commits of agent/agent.py with
    /// their diffs, newest first (the agent has no `.git`). Commit messages carry scores only
    /// as `gate.disclosure` allows. Capped at 256 KiB (older history is cut).
    func writeHistory() throws {
        // Subjects only: the trailers name the ledger head, whose row count moves with
        // violations recorded during held-out runs.
        var text = (try? supervisor.git.run(["log", "-p", "--format=commit %h%nDate: %aI%n%n    %s%n", "--", "agent/agent.py"])) ?? ""
        let cap = 256 * 1024
        if text.utf8.count > cap {
            text = String(decoding: Array(text.utf8.prefix(cap)), as: UTF8.self) + "\n[older history cut at 256 KiB]\n"
        }
        try AtomicFile.write(text, to: historyDirectory + "/git-log.txt", mode: 0o644)
    }

    // MARK: - records

    /// Nothing may happen that is not recorded: if the ledger cannot be written (a full
    /// disk, say), the agent is stopped at once.
    func recordingFailed(_ what: String, _ error: Error) {
        settings.log("could not record \(what): \(error); stopping the coding agent")
        stopLock.withLock { if ioFailure == nil { ioFailure = "\(error)" } }
        requestStop("the ledger could not be written (\(error))", failed: true)
    }

    /// Fail closed: a write of the supervisor's failed (`failure` names the path and the
    /// error), so the coding agent is stopped and the run ends, with exit status 5.
    func writeFailed(_ what: String, _ failure: String, afterReply: Bool = false) {
        settings.log("\(what) failed: \(failure); stopping the coding agent")
        stopLock.withLock { if ioFailure == nil { ioFailure = failure } }
        let reason = "\(what) failed: \(failure)"
        if afterReply { requestStopAfterReply(reason, failed: true) } else { requestStop(reason, failed: true) }
    }

    @discardableResult
    func append(_ items: [(RecordKind, any Encodable)]) throws -> Int64 {
        try supervisor.ledger.appendAll(items).last?.seq ?? 0
    }

    /// Records one violation by the coding agent (in the ledger at once).
    func violation(_ kind: String, _ detail: String) {
        if Self.rateLimitedKinds.contains(kind) {
            let now = BrokerServer.now()
            if now - refusalWindow.start >= 60 { flushRefusalCounts(); refusalWindow = (now, 0, [:]) }
            refusalWindow.recorded += 1
            if refusalWindow.recorded > Self.refusalsPerMinute {
                refusalWindow.counted[kind, default: 0] += 1
                return
            }
        }
        do {
            try append([(.violation, ViolationRecord(actor: "coding agent", kind: kind, detail: detail, count: 1))])
        } catch {
            recordingFailed("a violation (\(kind): \(detail))", error)
        }
        settings.log("violation by the coding agent: \(kind): \(detail)")
    }

    /// One row per kind for the refusals only counted in the last window.
    func flushRefusalCounts() {
        let counted = refusalWindow.counted
        refusalWindow.counted = [:]
        for (kind, n) in counted.sorted(by: { $0.key < $1.key }) {
            let detail = "\(n) more refused request\(n == 1 ? "" : "s") of this kind within a minute (over \(Self.refusalsPerMinute) a minute are counted, not recorded one by one)"
            do {
                try append([(.violation, ViolationRecord(actor: "coding agent", kind: kind, detail: detail, count: n))])
            } catch {
                recordingFailed("a violation (\(kind): \(detail))", error)
            }
        }
    }

    /// Moves the coding agent sandbox's new audit events (refused syscalls, denied egress,
    /// limits) into the ledger, one row per kind and name. Allowed egress stays in the audit
    /// file only.
    func flushAudit() {
        let events = audit.events
        guard auditFlushed < events.count else { return }
        let fresh = events[auditFlushed...]
        auditFlushed = events.count
        var counts: [String: (kind: String, detail: String, n: Int)] = [:]
        var order: [String] = []
        for e in fresh where e.isViolation {
            let kind: String, key: String, detail: String
            switch e.countedKind {
            case .egress:
                kind = "egress_denied"
                key = "egress " + e.name
                let why = e.kind == .egress ? e.detail.map { " (\(printable($0)))" } ?? "" : ""
                detail = "CONNECT \(printable(e.name)) refused by the proxy\(why)"
            case .syscall:
                kind = "syscall"
                key = "syscall " + e.name
                detail = "\(e.name) refused (\(e.action))"
            default:
                kind = e.kind.rawValue
                key = kind
                detail = e.detail ?? e.name
            }
            if counts[key] == nil { order.append(key) }
            counts[key, default: (kind, detail, 0)].n += e.count ?? 1
        }
        var items: [(RecordKind, any Encodable)] = []
        for k in order {
            let c = counts[k]!
            items.append((.violation, ViolationRecord(actor: "coding agent", kind: c.kind, detail: "\(c.detail) ×\(c.n)", count: c.n)))
            settings.log("violation by the coding agent: \(c.detail) ×\(c.n)")
        }
        if !items.isEmpty {
            do { try append(items) } catch { recordingFailed("violations", error) }
        }
    }
}
