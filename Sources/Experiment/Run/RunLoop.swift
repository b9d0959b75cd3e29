import Dispatch
import ExperimentModel
import Foundation
import Sandbox
import Synchronization

/// `autoharness run`: the coding agent in its sandbox, the broker answering it, budgets,
/// restarts, and a clean stop.
///
/// This type only sequences; each concern has its own file in `Run/`:
///   RunDesk          the ledger, staging and the run's counters, behind one `Mutex`: one
///                    holder at a time (a request, a session's bookkeeping, a cost tick)
///   BrokerRequests   a request parsed by the CLI's grammar and run (the desk held)
///   CopyBack         the candidate taken from staging and compiled in a sandbox of its own
///   GateRequest      take candidate → freeze → gate (decide, record) → thaw → reply
///   RunViolations    refused requests (rate-limited) and audit events into the ledger
///   AgentSessions    one start of the agent, what it came to, when the next one starts
///   RunDirectories   the agent sandbox's policy and the run's directories
///   AgentGate        the agent's model API through the run's inference gate (placeholder keys)
///   RunStop          whether and why the run stops, from any thread, with no sleeping thread
///   Budgets          what the run has used of its limits (hours, cost, sessions), as status shows it
///   BrokerServer     the Unix socket the agent's `autoharness` talks to, and who sent each request
///   BrokerGrammar    the verbs the agent may send, parsed as the CLI parses them
///   RunTypes         the request and answer types the files above pass around
///   Staging          agent.py read and written through a descriptor of a directory the agent controls
///
/// Threads: the caller's runs the agent's sessions one after another; the broker's answers
/// requests one at a time; dispatch timers check `--max-hours` and the cost budget.
public final class RunLoop: Sendable {
    let settings: RunSettings
    let config: ExperimentConfig
    let layout: ExperimentLayout
    let paths: RunPaths
    let stop: RunStop
    /// Freezes (or stops) the coding agent's whole sandbox for a gate.
    let agentControl: SandboxControl
    let desk: Synchronization.Mutex<RunDesk>

    public var runDirectory: String { paths.runDirectory }

    /// The supervisor is the run's from here on (`withSupervisor` reads it afterwards).
    public init(supervisor: sending ExperimentSupervisor, settings: RunSettings) {
        supervisor.log = settings.log  // external tools' alive lines, for the operator
        let stop = RunStop(log: settings.log)
        let control = SandboxControl()
        self.settings = settings
        self.config = supervisor.config
        self.layout = supervisor.layout
        self.paths = RunPaths(supervisor.layout)
        self.stop = stop
        self.agentControl = control
        self.desk = Synchronization.Mutex(RunDesk(supervisor: supervisor, settings: settings, stop: stop, agentControl: control))
    }

    /// Asks the run to stop (first reason wins): no new requests are run, the agent gets
    /// SIGTERM, then SIGKILL for its whole sandbox 5 seconds later. Safe from any thread.
    public func requestStop(_ reason: String, failed: Bool = false, nothingLeft: Bool = false) {
        stop.request(reason, failed: failed, nothingLeft: nothingLeft)
    }

    /// Reads the experiment through the run's supervisor (waits for a request in progress).
    public func withSupervisor<T: Sendable>(_ body: (ExperimentSupervisor) throws -> T) throws -> T {
        try desk.withLock { d throws -> T in try body(d.supervisor) }
    }

    public func run() throws -> RunReport {
        let started = Date()
        let command = settings.agentCommand ?? config.codingAgent.command
        let opening = try desk.withLock { d throws -> RunOpening in try d.begin(command: command, started: started) }
        do {
            try serve(command: command, opening: opening, started: started)
        } catch {
            // Whatever stopped the loop itself, the run's end is recorded if the ledger takes it.
            stop.request("stopped by an error: \(error)")
            let reason = stop.reason ?? "stopped"
            _ = try? desk.withLock { d throws in try d.appendEnd(reason: reason, nothingLeft: false) }
            throw error
        }
        return try desk.withLock { d throws -> RunReport in try d.finish(started: started, bestBefore: opening.bestBefore) }
    }

    /// The run once its start is recorded: the broker, the timers and the agent's sessions,
    /// until a stop. The broker is stopped (after the request in progress) however it ends.
    private func serve(command: [String], opening: RunOpening, started: Date) throws {
        settings.log(opening.resumed ? "resuming run \(opening.runID) (\(opening.gates) gate(s), \(opening.accepted) accepted so far)"
                                     : "run \(opening.runID) started")
        settings.log("coding agent: " + CodingAgentPreset.identity(command: command, config: config.codingAgent, root: layout.root))

        // Marked as this process's before it exists: a supervisor killed while it serves leaves
        // a socket the next one can attribute and remove.
        let brokerMarker = try Leftovers.claimBroker(layout)
        let broker: BrokerServer
        do {
            broker = try BrokerServer(path: layout.brokerSocket) { [self] request, peer in
                desk.withLock { $0.handle(request, peer: peer) }
            }
        } catch {
            Leftovers.release(brokerMarker)
            throw error
        }
        broker.start()
        let timers = startTimers(started: started)
        defer {
            for t in timers { t.cancel() }
            broker.stop()
            Leftovers.release(brokerMarker)
        }
        // Nothing to do before the agent has done anything: it is not started at all.
        if let why = desk.withLock({ $0.budgetSpent() ?? $0.costSpent() }) { stop.request(why, nothingLeft: true) }
        try runSessions(command: command, opening: opening)
    }

    /// The coding agent's sessions, one after another, until the run stops or a streak
    /// limit ends it.
    private func runSessions(command: [String], opening: RunOpening) throws {
        var withoutProgress = opening.withoutProgress, crashes = opening.crashes
        while stop.reason == nil {
            let session = try launchAgent(command: command, policy: opening.policy, gate: opening.gate, resumed: opening.resumed)
            guard session.ran else { return }
            desk.withLock { $0.meter }?.poll()  // the rest of the session's output, outside the desk
            let (usage, heldForGate) = desk.withLock { d -> (AgentUsage, Bool) in
                let usage = d.finishUsage()
                if let why = d.costSpent() { stop.request(why) }
                d.flushAudit()
                defer { d.stoppedForGate = false }
                return (usage, d.stoppedForGate)
            }
            // Killed by us (the run is stopping, or on a host without a freezer for a gate):
            // neither a crash nor a session without progress.
            let outcome = stop.reason != nil || heldForGate ? .stopped
                : Self.outcome(seconds: session.seconds, clean: session.result?.exitCode == 0, requests: session.requests,
                               progress: session.progress, quickExit: config.codingAgent.quickExitSeconds)
            var delay: Double?
            switch Self.afterSession(outcome, withoutProgress: &withoutProgress, crashes: &crashes, progress: session.progress,
                                     heldForGate: heldForGate, stopping: stop.reason != nil, config: config,
                                     exit: session.exit, agentLog: paths.agentLog) {
            case .stop(let reason, let failed, let nothingLeft): stop.request(reason, failed: failed, nothingLeft: nothingLeft)
            case .restart(let seconds): delay = seconds
            case .end: break
            }
            let (w, c) = (withoutProgress, crashes)
            desk.withLock { $0.recordSession(session, usage: usage, outcome: outcome, withoutProgress: w, crashes: c, restartAfter: delay) }
            guard let delay else { return }
            if heldForGate {
                settings.log("coding agent restarted after the gate it was stopped for")
                continue
            }
            let streak = outcome == .crash ? "\(crashes) crash(es) in a row of coding_agent.max_crashes \(config.codingAgent.maxCrashes)"
                : "\(withoutProgress) session(s) in a row without progress of coding_agent.max_restarts \(config.codingAgent.maxRestarts)"
            settings.log("coding agent \(session.exit) after \(Int(session.seconds))s (\(outcome == .progress ? "it made progress" : streak)); "
                         + "restarting in \(String(format: delay < 10 ? "%.1f" : "%.0f", delay))s with the continuation prompt")
            stop.wait(seconds: delay)
        }
    }

    /// `--max-hours` (every second, never waiting for the desk: a gate holds it for its
    /// whole length, and the deadline does not wait for a gate) and `budget.max_cost_usd`
    /// (every 2 seconds, on its own queue: a tick waits for a request in progress, and each
    /// request checks the budget as it ends too).
    private func startTimers(started: Date) -> [any DispatchSourceTimer] {
        var timers: [any DispatchSourceTimer] = []
        if let maxHours = settings.maxHours {
            let config = self.config
            timers.append(Self.every(1) { [stop] in
                guard stop.reason == nil, let why = Self.hoursSpent(config: config, maxHours: maxHours, since: started) else { return }
                stop.request(why)
            })
        }
        if config.maxCostUSD > 0 {
            timers.append(Self.every(2) { [self] in
                guard stop.reason == nil else { return }
                desk.withLock { $0.meter }?.poll()  // reading the log holds only the meter's own lock
                if let why = desk.withLock({ $0.costSpent() }) { stop.request(why) }
            })
        }
        return timers
    }

    private static func every(_ seconds: Double, _ tick: @escaping @Sendable () -> Void) -> any DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "autoharness.run.timer"))
        timer.schedule(deadline: .now() + seconds, repeating: seconds)
        timer.setEventHandler(handler: tick)
        timer.resume()
        return timer
    }

    /// Why the run must stop for `--max-hours`, if it must.
    static func hoursSpent(config: ExperimentConfig, maxHours: Double, since started: Date) -> String? {
        var c = RunCounters()
        c.hours = Date().timeIntervalSince(started) / 3600
        return RunBudget.all(config: config, maxIterations: nil, maxHours: maxHours, used: c).first { $0.kind == .maxHours && $0.spent }?.stopReason
    }
}
