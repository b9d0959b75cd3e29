import ExperimentModel

// `gate.disclosure: ladder`: Blum & Hardt's Ladder ("The Ladder: A Reliable Leaderboard for
// Machine Learning Competitions", ICML 2015) over the held-out scores the ledger holds.
//
// Every gate is a look at the held-out split, and a score disclosed after each one lets a
// coding agent fit the split: submit variants, keep what scored above the rest, combine them
// (the boosting attack). Under the ladder the disclosed score changes only when a gate's
// val_score beats the last disclosed value by more than the step, and then it becomes that
// score rounded to a multiple of the step; otherwise the gate discloses the value it stood at.
// A variant that is no better by a step learns nothing from the number.
//
// The bound (docs/held-out.md): the disclosed values lie in {0, step, 2·step, …, 1} and each
// change raises them by more than one step, so over T gates they change at most ⌊1/step⌋ times,
// and the whole sequence is fixed by where it changed and to what: at most
// ⌊1/step⌋ · log2(T · (⌊1/step⌋ + 1)) bits, whatever the coding agent submits. (Each gate's
// accept or reject is disclosed under every level, and counts apart.)

public struct ScoreLadder: Sendable, Equatable {
    public let step: Double
    /// The value disclosed now (nil before any score).
    public private(set) var value: Double?

    public init(step: Double) {
        precondition(step > 0)
        self.step = step
    }

    /// Takes the next score in ledger order and returns the value disclosed after it. The first
    /// score (the baseline's) sets the ladder; 1e-9 of floating-point noise in a mean never
    /// makes a step.
    /// `step`: the one recorded for this score's gate, when it differs from the ladder's own
    /// (an operator who changed `gate.ladder_step` changes what later gates disclose, never
    /// what earlier ones did).
    @discardableResult
    public mutating func offer(_ score: Double, step given: Double? = nil) -> Double {
        let step = given ?? self.step
        if let current = value, score <= current + step + 1e-9 { return current }
        let rounded = (score / step).rounded() * step
        value = min(max(rounded, value ?? 0), 1)
        return value!
    }

    /// The step in force: `gate.ladder_step`, else one held-out task's worth.
    public static func step(_ config: ExperimentConfig, testTasks: Int) -> Double {
        config.gate.ladderStep ?? 1 / Double(max(testTasks, 1))
    }

    /// The ladder replayed over the ledger: the baseline's score, then each gate attempt's that
    /// ran its held-out split, in order; then `adding` (a gate not yet recorded).
    public struct Replay: Sendable, Equatable {
        /// Per gate attempt that scored: the value disclosed after it.
        public var attempts: [Int: Double] = [:]
        /// Per accepted iteration (0: the baseline): the value disclosed after its gate.
        public var iterations: [Int: Double] = [:]
        /// The value standing now (what `best` discloses).
        public var current: Double?
    }

    public static func replay(_ s: ExperimentState, config: ExperimentConfig, adding: (attempt: Int, val: Double)? = nil) -> Replay {
        var ladder = ScoreLadder(step: step(config, testTasks: s.split?.test.count ?? s.baseline?.testTasks ?? 1))
        var r = Replay()
        // Each score at the step its own gate registered (`GateCriteria.ladderStep`; the
        // baseline's at prepare), else today's.
        if let b = s.iterations.first(where: { $0.iteration == 0 }) {
            r.iterations[0] = ladder.offer(b.valScore, step: s.baseline?.ladderStep)
        }
        var scored = s.gateAttempts.compactMap { a in a.valScore.map { (a.attempt, $0, a.accepted ? a.iteration : nil) } }
        if let adding { scored.append((adding.attempt, adding.val, nil)) }
        for (attempt, val, iteration) in scored {
            let shown = ladder.offer(val, step: s.ladderSteps[attempt])
            r.attempts[attempt] = shown
            if let iteration { r.iterations[iteration] = shown }
        }
        r.current = ladder.value
        return r
    }
}
