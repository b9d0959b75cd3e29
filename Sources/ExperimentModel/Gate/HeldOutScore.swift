import Benchmark

// How a held-out run becomes val_score, per `timeout_policy`. Pure functions of the outcomes.
//
//   agent (default)  every task of the split counts; a task that timed out without a reward
//                    scores 0 like any other failure.
//   infra            upstream's legacy mode left such a task out of the mean. Any exclusion
//                    that the candidate's own run decides is one agent.py controls: it can
//                    time out on purpose (sleep, hang its verifier, or, in Harbor's process,
//                    raise an exception whose name contains "Timeout") on the tasks it would
//                    fail, and hide regressions or turn them into an "improvement"; and the
//                    number of tasks left out, if it reached the coding agent, would count
//                    held-out tasks with any property agent.py tests for. A task left out only
//                    where every run timed out changes no comparison (it is 0 on both sides).
//                    So the gate decides and discloses exactly as under `agent`, and `infra`
//                    adds the operator's view: the mean over the tasks that finished and how
//                    many timed out, in the ledger, `status --operator` and the report.

public enum HeldOutScore {
    /// The mean of `xs`, 0 for none.
    static func mean(_ xs: [Double]) -> Double { xs.isEmpty ? 0 : xs.reduce(0, +) / Double(xs.count) }

    /// Timed out before any reward was given: the agent's or the verifier's wall-clock limit.
    /// (A Harbor trial whose verifier still ran after an agent timeout has its reward.)
    public static func timedOut(_ o: TaskOutcome) -> Bool { o.status == .agentTimeout || o.status == .verifierTimeout }

    /// val_score: the mean over every task of `test` of its mean reward over its trials
    /// (`gate.trials`; a task with no outcome, or a trial that timed out, 0). What the gate
    /// compares and discloses, under either policy.
    public static func val(_ test: [String], _ outcomes: [TaskOutcome]) -> Double {
        HeldOutScore.mean(taskMeans(test, outcomes))
    }

    /// Each task of `test`'s mean reward over its trials, in `test`'s order: what val_score
    /// averages, the evidence's held-out leaves hold and the paired test compares.
    public static func taskMeans(_ test: [String], _ outcomes: [TaskOutcome]) -> [Double] {
        perTask(test, outcomes).map { HeldOutScore.mean($0) }
    }

    /// A run the model vendor failed at least once (the inference gate's count): what
    /// `gate.infra_retries` runs again.
    public static func sawVendorFailure(_ o: TaskOutcome) -> Bool { (o.vendorFailures ?? 0) > 0 }

    /// A trial the model vendor failed (`gate.infra_retries` ran out) and that did not pass: it
    /// counts as a timeout does.
    public static func vendorFailed(_ o: TaskOutcome) -> Bool { sawVendorFailure(o) && !o.passed }

    /// `timeout_policy: infra`, for the operator: the mean over the trials of `test`'s tasks
    /// that did not time out and were not failed by the vendor (nil when none finished), and
    /// how many timed out.
    public static func finished(_ test: [String], _ outcomes: [TaskOutcome]) -> (val: Double?, timedOut: Int) {
        let byID = Dictionary(grouping: outcomes, by: \.id)
        let trials = test.flatMap { byID[$0] ?? [TaskOutcome(id: $0, reward: 0, status: .missingResult)] }
        let done = trials.filter { !timedOut($0) && !vendorFailed($0) }
        return (done.isEmpty ? nil : HeldOutScore.mean(done.map(\.reward)), trials.filter(timedOut).count)
    }

    /// Each task of `test`'s rewards, one per trial in the order they ran, in `test`'s order
    /// (operator only: what the paired decision compares, `PairedTest`).
    public static func perTask(_ test: [String], _ outcomes: [TaskOutcome]) -> [[Double]] {
        let byID = Dictionary(grouping: outcomes, by: \.id)
        return test.map { byID[$0].map { $0.map(\.reward) } ?? [0] }
    }
}

