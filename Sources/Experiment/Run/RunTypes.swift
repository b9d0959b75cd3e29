import ExperimentModel

/// A request the coding agent may make through the broker. There is deliberately no verb
/// that records, commits, edits the suite or touches the test split.
public enum BrokerVerb: Sendable, Equatable {
    case benchmark(taskIDs: [String]?)
    case gate(message: String?)
    case candidate(message: String?)
    case status(json: Bool)
    case failures(cluster: String?, json: Bool)
    case proposeCluster(cluster: String, label: String?, mergeWith: String?)
    case needsHuman(text: String)
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
