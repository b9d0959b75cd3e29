/// One task's run as it accumulates: timings, notes, the reward's raw bytes for the trace.
struct TaskExecution {
    let task: BenchmarkTask
    var agentSeconds: Double = 0
    var verifierSeconds: Double = 0
    var notes: [String] = []
    var status: TaskStatus = .setupFailed
    var reward: Double = 0
    var instruction: [UInt8]?
    var rewardRaw: [UInt8]?
    /// The verifier's failed tests (`TaskRunConfiguration.collectFailures`).
    var failures: [FailureEvidence]?
    /// A write of the supervisor's own failed (the trace, the scratch directory): not the
    /// task's doing, so the operation fails rather than score it (`WriteFailures`).
    var supervisorFailure: String?
    /// An external agent phase's own trace files and account (`ExternalAgentEnd`).
    var extraTrace: [(String, [UInt8])] = []
    var agentFailures: [FailureEvidence]?
    var costUSD: Double?
    var vendorFailures: Int?
    /// What of /app the verifier executed or opened as code (`AgentCodeRuns`).
    var agentCode: [String]?

    init(task: BenchmarkTask) { self.task = task }

    mutating func note(_ s: String) { notes.append(s) }

    /// Sets the final status and reward (0 unless given: every error scores 0).
    mutating func finish(_ status: TaskStatus, _ note: String?, reward: Double = 0) {
        self.status = status
        self.reward = reward
        if let note { notes.append(note) }
    }

    var outcome: TaskOutcome {
        var o = TaskOutcome(id: task.id, reward: reward, status: status, agentSeconds: agentSeconds, verifierSeconds: verifierSeconds,
                            detail: notes.isEmpty ? nil : String(notes.joined(separator: "; ").prefix(500)))
        let all = (agentFailures ?? []) + (failures ?? [])
        if !o.passed, !all.isEmpty { o.failures = FailureEvidence.bounded(FailureEvidence.unique(all)) }
        o.costUSD = costUSD
        o.vendorFailures = vendorFailures
        o.verifierRanAgentCode = agentCode
        return o
    }
}
