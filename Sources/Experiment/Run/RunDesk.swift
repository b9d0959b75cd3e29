import ExperimentModel
import Foundation
import Glibc
import Ledger
import Sandbox
import SandboxPolicy
import SupervisorIO

/// Where a run keeps its files (all under the experiment's `.autoharness/run`).
struct RunPaths: Sendable {
    var runDirectory: String
    var agentLog: String { runDirectory + "/agent.log" }
    var audit: String { runDirectory + "/audit.jsonl" }
    var staging: String { runDirectory + "/agent" }
    var home: String { runDirectory + "/home" }
    var compileOutput: String { runDirectory + "/compile.out" }
    var broker: String
    var history: String

    init(_ layout: ExperimentLayout) {
        runDirectory = layout.runDirectory
        broker = layout.brokerDirectory
        history = layout.historyDirectory
    }
}

/// The run's counters, as the ledger and this invocation have them.
struct RunTally {
    var runID = ""
    var resumed = false
    /// The ledger's last row before this invocation's `run_started` (violations after it
    /// are this invocation's).
    var startSeq: Int64 = 0
    /// When this invocation started (`--max-hours` counts from here).
    var startedAt = Date()
    var gates = 0
    var accepted = 0
    var nonImproving = 0
    /// The benchmark tools' model spend in this run, from the ledger after each request.
    var benchmarkSpend = 0.0
    var agentStarts = 0
    var requestsThisStart = 0
    /// A request of the current session ran something new (`SessionOutcome.progress`).
    var progressThisStart = false
    /// What this run's finished sessions reported using.
    var usage = AgentUsage()
    /// The run's end row is in the ledger (`run()` must not add a second).
    var endAppended = false
}

/// What one holder at a time works on: the ledger (through the supervisor), the agent's
/// staging, the run's counters and the audit's cursor. The broker's requests, the session
/// loop's bookkeeping and the cost timer take it through `RunLoop.desk` (a `Mutex`); a
/// gate holds it for its whole length, so nothing else is recorded while one runs.
struct RunDesk {
    let supervisor: ExperimentSupervisor
    let settings: RunSettings
    let paths: RunPaths
    let stop: RunStop
    /// Freezes the coding agent's whole sandbox while a gate runs held-out tasks.
    let agentControl: SandboxControl
    var config: ExperimentConfig { supervisor.config }
    var layout: ExperimentLayout { supervisor.layout }

    var tally = RunTally()
    /// Replaced by the run's own (created, or found on resume) before the agent starts.
    var staging: Staging
    var audit = AuditLog()
    var auditFlushed = 0
    var refusals = RefusalWindow()
    /// Import hooks in staging already reported (each once).
    var reportedExtras: Set<String> = []
    /// The usage account of the session in progress.
    var meter: UsageMeter?
    /// Hosts without a cgroup freezer: the agent was killed for a gate (restart it at once,
    /// not a crash) and the gate's answer it never received goes into its next prompt.
    var stoppedForGate = false
    var undeliveredAnswer: String?

    init(supervisor: ExperimentSupervisor, settings: RunSettings, stop: RunStop, agentControl: SandboxControl) {
        self.supervisor = supervisor
        self.settings = settings
        self.paths = RunPaths(supervisor.layout)
        self.stop = stop
        self.agentControl = agentControl
        self.staging = Staging(path: paths.staging, owner: (65534, 65534))
    }

    @discardableResult
    func append(_ items: [(RecordKind, any Encodable)]) throws -> Int64 {
        try supervisor.ledger.appendAll(items).last?.seq ?? 0
    }

    // MARK: - budgets

    /// The run's budgets with its counters as they are now.
    func budgets() -> [RunBudget] {
        var c = RunCounters()
        (c.gates, c.accepted, c.rejectedInARow) = (tally.gates, tally.accepted, tally.nonImproving)
        c.costUSD = (tally.usage + (meter?.usage ?? AgentUsage())).costUSD ?? 0
        c.benchmarkCostUSD = tally.benchmarkSpend
        c.hours = Date().timeIntervalSince(tally.startedAt) / 3600
        return RunBudget.all(config: config, maxIterations: settings.maxIterations, maxHours: settings.maxHours, used: c)
    }

    /// Why the run must stop now for its gates, if it must (called with the counters current).
    func budgetSpent() -> String? {
        budgets().first { [.maxIterations, .gateBudget, .maxNonImproving].contains($0.kind) && $0.spent }?.stopReason
    }

    /// Why the run must stop for `budget.max_cost_usd`, if it must: the finished sessions
    /// and the running one.
    func costSpent() -> String? {
        budgets().first { $0.kind == .maxCost && $0.spent }?.stopReason
    }

    /// The gate and benchmark counters again from the ledger's rows (a gate that failed
    /// after it began still spent budget).
    mutating func recount() {
        let state = try? supervisor.state()
        tally.gates = state?.openRunGates ?? tally.gates + 1
        tally.benchmarkSpend = state?.openRunBenchmarkCost.total ?? tally.benchmarkSpend
    }

    // MARK: - sessions

    /// Counts a new start of the coding agent; returns its number and a gate's answer it
    /// missed while stopped. (Its usage account starts later, `startMeter`, after the
    /// session's header line: the prompt in it is not the CLI's output.)
    mutating func beginSession() -> (start: Int, missedAnswer: String?) {
        tally.agentStarts += 1
        tally.requestsThisStart = 0
        tally.progressThisStart = false
        defer { undeliveredAnswer = nil }
        return (tally.agentStarts, undeliveredAnswer)
    }

    /// Starts the session's usage account at the log's current end.
    mutating func startMeter(logPath: String) {
        meter = UsageMeter(path: logPath, price: config.codingAgent.price)
    }

    /// Ends the usage account of the session that just ended (`meter` was read to its
    /// end by the caller) and returns it.
    mutating func finishUsage() -> AgentUsage {
        let usage = meter?.usage ?? AgentUsage()
        meter = nil
        tally.usage = tally.usage + usage
        return usage
    }

    /// One ledger row for a session that ended: its account, what it came to and what the
    /// run does next.
    func recordSession(_ s: AgentSession, usage: AgentUsage, outcome: SessionOutcome, withoutProgress: Int, crashes: Int, restartAfter: Double?) {
        let row = AgentSessionRecord(runID: tally.runID, start: s.start, seconds: s.seconds, exit: s.exit, usage: usage, outcome: outcome,
                                     requests: s.requests, withoutProgress: withoutProgress, crashes: crashes, restartAfter: restartAfter)
        do {
            _ = try append([(.agentSession, row)])
        } catch {
            stop.recordingFailed("the coding agent's session \(s.start)", error)
        }
        if usage.totalTokens > 0 {
            settings.log("coding agent session \(s.start)\(usage.model.map { " (\($0))" } ?? ""): \(usage.summary); this run: \(tally.usage.summary)")
        }
    }

    // MARK: - the run's end

    /// Records the run's end (once) and builds the report.
    mutating func finish(started: Date, bestBefore: Double?) throws -> RunReport {
        flushAudit()
        flushRefusalCounts()
        let end = stop.current
        let reason = end.reason ?? "stopped"
        var endRecorded = true
        do {
            try appendEnd(reason: reason, nothingLeft: end.nothingLeft)
        } catch {
            // The report still goes out (on stderr); the next `run` resumes this one.
            settings.log("could not record the end of run \(tally.runID): \(error)")
            endRecorded = false
            stop.markFailed(ioFailure: "the end of the run could not be recorded: \(error)")
        }
        let after = try supervisor.state()
        // Every violation recorded since this invocation started, whoever recorded it.
        var counts: [String: Int] = [:]
        var order: [(String, String)] = []
        for r in try supervisor.ledger.records(kind: .violation) where r.seq > tally.startSeq {
            let v = try r.decode(ViolationRecord.self)
            let key = v.actor + "\u{1F}" + v.kind
            if counts[key] == nil { order.append((v.actor, v.kind)) }
            counts[key, default: 0] += v.occurrences
        }
        let final = stop.current
        return RunReport(runID: tally.runID, resumed: tally.resumed, reason: reason, failed: final.failed, ioFailure: final.ioFailure,
                         endRecorded: endRecorded, nothingLeft: end.nothingLeft, seconds: Date().timeIntervalSince(started),
                         gates: tally.gates, accepted: tally.accepted, agentStarts: tally.agentStarts, usage: tally.usage,
                         bestBefore: bestBefore, bestAfter: after.best,
                         violations: order.map { ($0.0, $0.1, counts[$0.0 + "\u{1F}" + $0.1]!) },
                         agentLog: paths.agentLog, auditLog: paths.audit)
    }

    /// The run's end row, unless it is in the ledger already.
    mutating func appendEnd(reason: String, nothingLeft: Bool) throws {
        guard !tally.endAppended else { return }
        try append([(.runEnded, RunEndedRecord(runID: tally.runID, reason: reason, gates: tally.gates, accepted: tally.accepted,
                                               agentStarts: tally.agentStarts, nothingLeft: nothingLeft ? true : nil))])
        tally.endAppended = true
    }
}

/// What `RunDesk.begin` found and set up: what the session loop starts from.
struct RunOpening: Sendable {
    var policy: Policy
    /// The coding agent's model API's gate (`sandbox.network.inference`), nil without one.
    var gate: AgentGate?
    var runID: String
    var resumed: Bool
    var gates: Int
    var accepted: Int
    var bestBefore: Double?
    /// The streaks a resumed run goes on counting from.
    var withoutProgress: Int
    var crashes: Int
}

extension RunDesk {
    /// The run's start: checks, counters from the ledger (a resumed run goes on where its
    /// last recorded session left off), the sandbox's policy and directories, the audit file
    /// and the `run_started` row.
    mutating func begin(command: [String], started: Date) throws -> RunOpening {
        let state = try supervisor.state()
        guard state.prepared else { throw ExperimentError(.state, "experiment not prepared yet: run `autoharness prepare` first") }
        guard !command.isEmpty else {
            throw ExperimentError(.usage, "no coding agent command: set coding_agent.command in \(layout.config) or pass --agent-cmd")
        }
        guard access(settings.clientBinary, X_OK) == 0 else {
            throw ExperimentError(.io, "the broker client \(settings.clientBinary) is missing or not executable (build the whole package)")
        }
        tally.resumed = state.openRun != nil
        tally.runID = state.openRun?.runID ?? RunLoop.newRunID()
        tally.startedAt = started
        tally.gates = state.openRunGates
        tally.accepted = state.openRunAccepted
        tally.benchmarkSpend = state.openRunBenchmarkCost.total
        tally.nonImproving = state.openRunRejectedInARow
        tally.usage = tally.resumed ? state.agentUsage(run: tally.runID) : AgentUsage()
        let counted = state.openRunCounters()

        let policy = try loadPolicy()
        try prepareDirectories(resumed: tally.resumed, owner: (policy.identity.hostUID, policy.identity.hostGID))
        let gate = try AgentGate.make(config, policy: policy, command: command, root: layout.root, runDirectory: paths.runDirectory,
                                      host: settings.hostEnvironment, log: settings.log)
        // An audit line that cannot be written stops the run: the agent does not go on unaudited.
        let stop = self.stop
        audit = try AuditLog(path: paths.audit) { failure in stop.writeFailed("the audit of the coding agent's sandbox", failure) }
        tally.startSeq = try append([(.runStarted, RunStartedRecord(runID: tally.runID, resumed: tally.resumed, command: command,
                                                                  maxIterations: settings.maxIterations, maxHours: settings.maxHours,
                                                                  gateBudget: config.gate.budget))])
        return RunOpening(policy: policy, gate: gate, runID: tally.runID, resumed: tally.resumed, gates: tally.gates, accepted: tally.accepted,
                          bestBefore: state.best, withoutProgress: counted?.withoutProgress ?? 0, crashes: counted?.crashes ?? 0)
    }
}
