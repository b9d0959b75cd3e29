import Benchmark

// How a gate chooses among several candidates (`loop.candidates`): from train-split outcomes
// only. Nothing here sees the held-out split; the gate judges only the first of the ranking,
// so one gate is one look at the held-out split whatever the number of candidates.
public enum CandidateRanking {
    /// A candidate's standing from its run on the visible train split (`outcomes`), the suite
    /// being those of its tasks in `suite`.
    public static func standing(_ c: CandidateRecord, outcomes: [TaskOutcome], suite: [String], threshold: Double, trials: Int = 1) -> RankedCandidate {
        let inSuite = Set(suite)
        let suitePassed = outcomes.filter { inSuite.contains($0.id) && $0.passed }.count
        return RankedCandidate(number: c.number, agentSHA256: c.agentSHA256, message: c.message,
                               trainPassed: outcomes.filter(\.passed).count, trainTotal: outcomes.count,
                               trainScore: outcomes.isEmpty ? 0 : outcomes.map(\.reward).reduce(0, +) / Double(outcomes.count),
                               suitePassed: suitePassed, suiteTotal: suite.count,
                               meetsThreshold: GateRules.suite(passed: suitePassed, total: suite.count, threshold: threshold) == nil,
                               trials: trials > 1 ? trials : nil)
    }

    /// The task ids of `outcomes`, each once, in the order they first appear.
    package static func ids(_ outcomes: [TaskOutcome]) -> [String] {
        var seen: Set<String> = []
        return outcomes.map(\.id).filter { seen.insert($0).inserted }
    }

    /// One outcome per task of `outcomes` (several trials each, `gate.trials`): its mean
    /// reward, passed when the mean reaches the pass threshold, in the order tasks first appear.
    public static func taskMeans(_ outcomes: [TaskOutcome]) -> [TaskOutcome] {
        let tasks = ids(outcomes)
        return zip(tasks, HeldOutScore.taskMeans(tasks, outcomes)).map { id, mean in
            TaskOutcome(id: id, reward: mean, status: mean >= TaskOutcome.passThreshold ? .passed : .failed)
        }
    }

    /// Best first: a candidate whose suite would pass the gate's first step before one whose
    /// would not, then the higher train score, then more suite tasks passed, then the earlier
    /// submitted (ties never depend on anything but the order the coding agent chose).
    public static func rank(_ candidates: [RankedCandidate]) -> [RankedCandidate] {
        candidates.sorted { a, b in
            if a.meetsThreshold != b.meetsThreshold { return a.meetsThreshold }
            if abs(a.trainScore - b.trainScore) > 1e-9 { return a.trainScore > b.trainScore }
            if a.suitePassed != b.suitePassed { return a.suitePassed > b.suitePassed }
            return a.number < b.number
        }
    }
}
