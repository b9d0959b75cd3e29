import Foundation

// Ledger payloads of the coding agent's runs: a run's start and end, and each session of
// its coding agent.

/// `autoharness run` started, or resumed an unfinished run (same `runID`).
public struct RunStartedRecord: Codable, Sendable {
    public var runID: String
    public var resumed: Bool
    public var command: [String]
    public var maxIterations: Int?
    public var maxHours: Double?
    public var gateBudget: Int

    package init(runID: String, resumed: Bool, command: [String], maxIterations: Int? = nil, maxHours: Double? = nil, gateBudget: Int) {
        self.runID = runID
        self.resumed = resumed
        self.command = command
        self.maxIterations = maxIterations
        self.maxHours = maxHours
        self.gateBudget = gateBudget
    }
}

/// `autoharness run` stopped, and why.
public struct RunEndedRecord: Codable, Sendable {
    public var runID: String
    public var reason: String
    public var gates: Int
    public var accepted: Int
    public var agentStarts: Int
    /// It stopped because nothing was left to do (a budget spent before it began, or the
    /// coding agent's sessions stopped making progress); absent otherwise.
    public var nothingLeft: Bool?

    package init(runID: String, reason: String, gates: Int, accepted: Int, agentStarts: Int, nothingLeft: Bool? = nil) {
        self.runID = runID
        self.reason = reason
        self.gates = gates
        self.accepted = accepted
        self.agentStarts = agentStarts
        self.nothingLeft = nothingLeft
    }
}

/// One start of the coding agent ended: how long it ran, how, and what its CLI reported using.
/// The fields after `usage` are absent in rows written before they were recorded.
public struct AgentSessionRecord: Codable, Sendable {
    public var runID: String
    public var start: Int
    public var seconds: Double
    public var exit: String
    public var usage: AgentUsage
    /// What the session came to for the run's limits (`SessionOutcome`).
    public var outcome: SessionOutcome?
    /// Requests it made through the broker.
    public var requests: Int?
    /// After this session: sessions in a row without progress (crashes not counted), and
    /// crashes in a row. A resumed run continues from them.
    public var withoutProgress: Int?
    public var crashes: Int?
    /// Seconds the run waited before starting the agent again; absent when it stopped.
    public var restartAfter: Double?

    package init(runID: String, start: Int, seconds: Double, exit: String, usage: AgentUsage, outcome: SessionOutcome? = nil, requests: Int? = nil, withoutProgress: Int? = nil, crashes: Int? = nil, restartAfter: Double? = nil) {
        self.runID = runID
        self.start = start
        self.seconds = seconds
        self.exit = exit
        self.usage = usage
        self.outcome = outcome
        self.requests = requests
        self.withoutProgress = withoutProgress
        self.crashes = crashes
        self.restartAfter = restartAfter
    }
}

/// How a session of the coding agent ended, for the limits on restarting it.
public enum SessionOutcome: String, Codable, Sendable {
    /// A request ran something new: a gate, or a benchmark of an agent.py not benchmarked
    /// before.
    case progress
    /// No accepted change and nothing new run: only refused, repeated (a gate or benchmark
    /// of bytes already judged or run) or status requests, or none. Counts toward
    /// `coding_agent.max_restarts`.
    case noProgress = "no_progress"
    /// An exit within `quick_exit_seconds` that failed or made no request. Counts toward
    /// `coding_agent.max_crashes`.
    case crash
    /// Ended by the supervisor: the run was stopping, or the agent was stopped for a gate.
    case stopped
}
