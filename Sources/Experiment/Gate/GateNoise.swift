// The gate's error rates on a simulated benchmark: `autoharness simulate-gate` and
// scripts/bench-gate-noise. Each rule is the gate's own code (`GateRules.heldOutStep` for
// margin and at_least_best, `PairedTest` for paired), fed pass counts drawn here.
//
// The benchmark: `tasks` held-out tasks, each with a pass probability for the best accepted
// agent.py: 30 % never pass, 30 % always pass, 40 % pass with a probability drawn uniformly
// from [0, 1] (agents' per-task results across repeated trials are mostly all-or-nothing,
// with a stochastic remainder). A trial of a task passes with its probability, independently.
//
// One loop: a fresh draw of the probabilities; the best's gate runs each task `k` times (its
// kept counts); then two candidates are gated against it, each also `k` trials per task:
//   no better   the same probabilities: every acceptance is a false accept.
//   better      `improvement` × tasks of pass probability added to tasks in a random order,
//               each raised as far as 1 before the next is touched (a real change fixes some
//               tasks, it does not nudge them all): an acceptance is a true accept.
// Draws are seeded (SplitMix64): the same arguments print the same table on every machine.

public struct GateNoiseSimulation: Sendable {
    public var tasks = 34
    public var trials: [Int] = [1, 3, 5]
    public var loops = 200
    public var alpha = 0.05
    /// The better candidate's gain in mean pass probability (0.10: ten points).
    public var improvement = 0.10
    public var seed: UInt64 = 1
    public init() {}

    public struct Row: Sendable, Equatable {
        /// `margin`, `at_least_best` or `paired`.
        public var rule: String
        public var trials: Int
        public var falseAccept: Double
        public var trueAccept: Double
    }

    /// One row per rule and trial count, in `trials`' order.
    public func run() -> [Row] {
        var rows: [Row] = []
        for k in trials {
            var falseAccepts = [0, 0, 0], trueAccepts = [0, 0, 0]
            for loop in 0..<loops {
                var world = SplitMix64(seed: seed &* 0x9E37_79B9 &+ UInt64(loop))
                let best = (0..<tasks).map { _ in Self.passProbability(&world) }
                let better = Self.improved(best, by: improvement * Double(tasks), &world)
                // The trials' own generator: the same benchmark for every k, fresh coins for each.
                var coins = SplitMix64(seed: world.next() &+ UInt64(k))
                let bestCounts = best.map { Self.passes($0, k, &coins) }
                let same = best.map { Self.passes($0, k, &coins) }
                let improvedCounts = better.map { Self.passes($0, k, &coins) }
                for (i, accepted) in decisions(candidate: same, best: bestCounts, trials: k).enumerated() where accepted { falseAccepts[i] += 1 }
                for (i, accepted) in decisions(candidate: improvedCounts, best: bestCounts, trials: k).enumerated() where accepted { trueAccepts[i] += 1 }
            }
            for (i, rule) in ["margin", "at_least_best", "paired"].enumerated() {
                rows.append(Row(rule: rule, trials: k, falseAccept: Double(falseAccepts[i]) / Double(loops),
                                trueAccept: Double(trueAccepts[i]) / Double(loops)))
            }
        }
        return rows
    }

    /// Whether each rule (margin, at_least_best, paired) accepts `candidate` over `best`.
    func decisions(candidate: [Int], best: [Int], trials k: Int) -> [Bool] {
        let val = Double(candidate.reduce(0, +)) / Double(k * tasks)
        let bestVal = Double(best.reduce(0, +)) / Double(k * tasks)
        var margin = ExperimentConfig(benchmark: "local")
        margin.acceptRule = .margin
        var atLeast = margin
        atLeast.acceptRule = .atLeastBest
        let paired = PairedTest.decide(zip(candidate, best).map { PairedCounts(candidate: $0, best: $1) }, trials: k, alpha: alpha)
        return [GateRules.heldOutStep(val: val, best: bestVal, testTasks: tasks, config: margin) == nil,
                GateRules.heldOutStep(val: val, best: bestVal, testTasks: tasks, config: atLeast) == nil,
                paired.accepted]
    }

    static func uniform(_ g: inout SplitMix64) -> Double { Double(g.next() >> 11) * 0x1p-53 }

    static func passProbability(_ g: inout SplitMix64) -> Double {
        let u = uniform(&g)
        return u < 0.3 ? 0 : u < 0.6 ? 1 : uniform(&g)
    }

    static func improved(_ p: [Double], by total: Double, _ g: inout SplitMix64) -> [Double] {
        var out = p, left = total
        var order = Array(p.indices)
        for i in stride(from: order.count - 1, to: 0, by: -1) { order.swapAt(i, Int(g.next() % UInt64(i + 1))) }
        for i in order where left > 1e-12 {
            let gain = min(1 - out[i], left)
            out[i] += gain
            left -= gain
        }
        return out
    }

    static func passes(_ p: Double, _ k: Int, _ g: inout SplitMix64) -> Int {
        (0..<k).filter { _ in uniform(&g) < p }.count
    }
}
