import Benchmark

// How a held-out run becomes val_score and how the gate compares two runs, per
// `timeout_policy`. Pure functions of the outcomes; the supervisor runs the tasks.
//
//   agent (default)  every task of the split counts; a task that timed out without a reward
//                    scores 0 like any other failure, so nothing agent.py does removes a
//                    task from the mean. The gate compares the split's mean with the best.
//   infra            a task that timed out without a reward is taken as the infrastructure's
//                    failure and left out of the mean (upstream's legacy behaviour). Left out
//                    of one side only, that would let agent.py abstain on the tasks it would
//                    fail by sleeping past their timeout; so the gate compares per task with
//                    the incumbent (the last accepted run, or the baseline): the tasks the
//                    candidate timed out on leave *both* means, and the incumbent's own
//                    timeouts count 0 where the candidate finished. Abstaining then can only
//                    hide a task, never turn it into an improvement: an improvement has to
//                    come from tasks the candidate finished.

/// A held-out run's per-task rewards and timeouts, kept in the supervisor's private ledger
/// (never in a view, a status or a reply) for `timeout_policy: infra`: the baseline's and
/// each accepted gate's, the incumbent the next gate is compared with.
public struct HeldOutResultsRecord: Codable, Sendable, Equatable {
    /// The gate attempt; nil for the baseline.
    public var attempt: Int?
    public var rewards: [String: Double]
    public var timedOut: [String]
}

public enum HeldOutScore {
    /// Timed out before any reward was given: the agent's or the verifier's wall-clock limit.
    /// (A Harbor trial whose verifier still ran after an agent timeout has its reward.)
    public static func timedOut(_ o: TaskOutcome) -> Bool { o.status == .agentTimeout || o.status == .verifierTimeout }

    /// val_score of one run of `test`: the mean over every task (agent), or over those that
    /// did not time out (infra; 0 when none finished).
    public static func val(_ test: [String], _ outcomes: [TaskOutcome], policy: ExperimentConfig.TimeoutPolicy) -> Double {
        let byID = Dictionary(outcomes.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        let counted = policy == .agent ? test : test.filter { byID[$0].map(timedOut) != true }
        return ExperimentSupervisor.mean(counted.map { byID[$0]?.reward ?? 0 })
    }

    public static func record(_ test: [String], _ outcomes: [TaskOutcome], attempt: Int?) -> HeldOutResultsRecord {
        let ids = Set(test)
        let mine = outcomes.filter { ids.contains($0.id) }
        return HeldOutResultsRecord(attempt: attempt, rewards: Dictionary(mine.map { ($0.id, $0.reward) }, uniquingKeysWith: { a, _ in a }),
                                    timedOut: mine.filter(timedOut).map(\.id).sorted())
    }

    /// The paired comparison of `infra`: both means over the tasks the candidate finished.
    public struct Paired: Equatable, Sendable {
        public var candidate: Double
        public var incumbent: Double
        /// Tasks in both means, and tasks the candidate timed out on.
        public var scored: Int
        public var leftOut: Int
    }

    public static func paired(_ test: [String], candidate: [TaskOutcome], incumbent: HeldOutResultsRecord) -> Paired {
        let byID = Dictionary(candidate.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        let scored = test.filter { byID[$0].map(timedOut) != true }
        let incumbentTimedOut = Set(incumbent.timedOut)
        return Paired(candidate: ExperimentSupervisor.mean(scored.map { byID[$0]?.reward ?? 0 }),
                      incumbent: ExperimentSupervisor.mean(scored.map { incumbentTimedOut.contains($0) ? 0 : incumbent.rewards[$0] ?? 0 }),
                      scored: scored.count, leftOut: test.count - scored.count)
    }
}
