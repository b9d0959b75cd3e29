/// How a task's run ended. Everything but `passed` and `failed` scores 0: an error is never
/// dropped from a split's mean (upstream auto-harness let infrastructure errors vanish from
/// the average, so abstaining on hard tasks paid).
public enum TaskStatus: String, Codable, Sendable, CaseIterable {
    /// The verifier's reward is ≥ 0.5.
    case passed
    /// The verifier's reward is < 0.5.
    case failed
    /// The agent hit its wall-clock limit; its tree was killed and the verifier not run.
    case agentTimeout = "agent_timeout"
    /// The agent exited non-zero, died by a signal or could not be executed, and the
    /// verifier did not pass the task; reward 0 even if it gave partial credit. (A crashing
    /// agent whose work still passes is `passed`, with the crash in `detail`.)
    case agentCrashed = "agent_crashed"
    /// The verifier hit its wall-clock limit (any reward it wrote is ignored).
    case verifierTimeout = "verifier_timeout"
    /// The verifier died by a signal, could not be executed, or exited non-zero without
    /// writing a reward.
    case verifierCrashed = "verifier_crashed"
    /// The verifier exited 0 without writing reward.txt or reward.json.
    case noReward = "no_reward"
    /// The reward file was not a finite number in [0, 1] (or not a regular file, or too big).
    case invalidReward = "invalid_reward"
    /// A sandbox could not be set up, or the supervisor could not prepare the task.
    case setupFailed = "setup_failed"
    /// An external benchmark tool's output has no usable result for the task (the tool
    /// crashed, skipped it, or its record was malformed or contradicted itself).
    case missingResult = "missing_result"
}

/// The result of one task: what the supervisor records, and (train split only) what the
/// coding agent may read as `result.json`.
public struct TaskOutcome: Sendable, Codable, Equatable {
    public var id: String
    /// In [0, 1]; 0 for every status except `passed`/`failed`.
    public var reward: Double
    public var status: TaskStatus
    /// `reward >= 0.5`, the upstream pass threshold.
    public var passed: Bool
    /// Wall-clock seconds of the agent's sandbox, setup and teardown included.
    public var agentSeconds: Double
    /// Wall-clock seconds of the verifier's sandbox (0 if it did not run).
    public var verifierSeconds: Double
    /// A short note, e.g. `agent exited 1` or `reward.txt: "yes" is not a number`.
    public var detail: String?
    /// Train runs only: the failing checks the benchmark's own results name (`FailureEvidence`);
    /// nil when the task passed, the run was held out, or the tool said nothing finer than
    /// the status.
    public var failures: [FailureEvidence]?
    /// The benchmark tool's own model spend for this task, in dollars, as it reported it
    /// (Harbor's `agent_result.cost_usd`, tau2's agent and user costs, a command's costs.json);
    /// nil when it reported none. The operator's account: never written into a trace.
    public var costUSD: Double?
    /// What of the working copy (/app, which agent.py wrote) the verifier executed or opened as
    /// code, one line each (`AgentCodeRuns`); nil when nothing, or when autoharness did not
    /// run the verifier. A flag to look at, not a verdict: the reward stands.
    public var verifierRanAgentCode: [String]?
    /// Requests the inference gate sent on for this task's run that the model vendor failed
    /// (a 5xx, a reset, no answer: `InferenceGate.vendorFailures`), when the task's run had a
    /// gate of its own (one task per tool sandbox); nil when it had none or shared one with
    /// other tasks. What `gate.infra_retries` re-runs a held-out task for.
    public var vendorFailures: Int?

    /// The sum of what the tool reported for `outcomes`; nil when it reported nothing.
    public static func cost(_ outcomes: [TaskOutcome]) -> Double? {
        let known = outcomes.compactMap(\.costUSD)
        return known.isEmpty ? nil : known.reduce(0, +)
    }

    /// Task id → what its verifier ran of agent code (`verifierRanAgentCode`), for the tasks
    /// that have any; nil when none did.
    public static func agentCode(_ outcomes: [TaskOutcome]) -> [String: [String]]? {
        let flagged = outcomes.compactMap { o in o.verifierRanAgentCode.map { (o.id, $0) } }
        return flagged.isEmpty ? nil : Dictionary(flagged, uniquingKeysWith: { a, _ in a })
    }

    /// The flag of a held-out task whose verifier ran where its lines stay (a held-out VM, a
    /// node): how many there were, nothing of the paths and programs a held-out agent.py chose.
    public static func countedFlag(_ lines: Int, where place: String) -> [String] {
        ["\(lines) line(s) of agent code the verifier ran \(place) (which files and programs stay there)"]
    }

    /// The count of a flag `countedFlag` made for `place`, or nil if it is anything else.
    public static func flagCount(_ flag: [String], where place: String) -> Int? {
        guard flag.count == 1, let n = flag[0].split(separator: " ").first.flatMap({ Int($0) }), (1...1000).contains(n),
              flag == countedFlag(n, where: place) else { return nil }
        return n
    }

    /// The pass threshold on a task's reward.
    public static let passThreshold = 0.5

    public init(id: String, reward: Double, status: TaskStatus, agentSeconds: Double = 0,
                verifierSeconds: Double = 0, detail: String? = nil) {
        self.id = id
        self.reward = reward
        self.status = status
        self.passed = reward >= Self.passThreshold
        self.agentSeconds = agentSeconds
        self.verifierSeconds = verifierSeconds
        self.detail = detail
    }

    enum CodingKeys: String, CodingKey {
        case id, reward, status, passed, detail, failures
        case verifierRanAgentCode = "verifier_ran_agent_code"
        case vendorFailures = "vendor_failures"
        case agentSeconds = "agent_seconds"
        case verifierSeconds = "verifier_seconds"
    }
}
