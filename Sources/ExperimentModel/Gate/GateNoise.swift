// The gate's error rates on a simulated benchmark: `autoharness simulate-gate` and
// scripts/bench-gate-noise. Each rule is the gate's own code (`GateRules.heldOutStep` for
// margin and at_least_best, `PairedTest` for paired), fed pass counts drawn here; beside them,
// the conditional exact test paired does not use (`conditionalMidP`), to show why.
//
// The benchmark: `tasks` held-out tasks, each with a pass probability for the best accepted
// agent.py: 30 % never pass, 30 % always pass, 40 % pass with a probability drawn uniformly
// from [0, 1] (agents' per-task results across repeated trials are mostly all-or-nothing,
// with a stochastic remainder). A trial of a task passes with its probability, independently.
//
// One loop: a fresh draw of the probabilities; the best's gate runs each task `k` times (its
// kept counts); then three candidates are gated against it, each also `k` trials per task:
//   no better   the same probabilities: every acceptance is a false accept.
//   a trade     on each task, always passes or never, passing with the best's probability
//               (no better on average; a change that reshuffles which tasks pass): every
//               acceptance is a false accept.
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
        /// `margin`, `at_least_best`, `paired`, or `conditional` (not offered: the comparison).
        public var rule: String
        public var trials: Int
        public var falseAccept: Double
        /// Accepts of a trade (no better on average).
        public var tradeAccept: Double
        public var trueAccept: Double
    }

    static let rules = ["margin", "at_least_best", "paired", "conditional"]

    /// One row per rule and trial count, in `trials`' order.
    public func run() -> [Row] {
        var rows: [Row] = []
        for k in trials {
            var accepts = [[Int]](repeating: [0, 0, 0], count: Self.rules.count)
            for loop in 0..<loops {
                var world = SplitMix64(seed: seed &* 0x9E37_79B9 &+ UInt64(loop))
                let best = (0..<tasks).map { _ in Self.passProbability(&world) }
                let better = Self.improved(best, by: improvement * Double(tasks), &world)
                let trade = best.map { Self.uniform(&world) < $0 ? 1.0 : 0.0 }
                // The trials' own generator: the same benchmark for every k, fresh coins for each.
                var coins = SplitMix64(seed: world.next() &+ UInt64(k))
                let bestCounts = best.map { Self.passes($0, k, &coins) }
                for (column, candidate) in [best, trade, better].enumerated() {
                    let counts = candidate.map { Self.passes($0, k, &coins) }
                    for (i, accepted) in decisions(candidate: counts, best: bestCounts, trials: k).enumerated() where accepted {
                        accepts[i][column] += 1
                    }
                }
            }
            for (i, rule) in Self.rules.enumerated() {
                let rate = accepts[i].map { Double($0) / Double(loops) }
                rows.append(Row(rule: rule, trials: k, falseAccept: rate[0], tradeAccept: rate[1], trueAccept: rate[2]))
            }
        }
        return rows
    }

    /// Whether each rule (`rules`' order) accepts `candidate` over `best`.
    func decisions(candidate: [Int], best: [Int], trials k: Int) -> [Bool] {
        let val = Double(candidate.reduce(0, +)) / Double(k * tasks)
        let bestVal = Double(best.reduce(0, +)) / Double(k * tasks)
        var margin = ExperimentConfig(benchmark: "local")
        margin.gate.accept = .margin
        var atLeast = margin
        atLeast.gate.accept = .atLeastBest
        let scores = zip(candidate, best).map { PairedScores(candidate: Double($0) / Double(k), best: Double($1) / Double(k)) }
        let paired = PairedTest.decide(scores, candidateTrials: k, bestTrials: k, alpha: alpha)
        return [GateRules.heldOutStep(val: val, best: bestVal, testTasks: tasks, config: margin) == nil,
                GateRules.heldOutStep(val: val, best: bestVal, testTasks: tasks, config: atLeast) == nil,
                paired.accepted,
                Self.conditionalMidP(candidate: candidate, best: best, trials: k) <= alpha]
    }

    /// The exact stratified (conditional Cochran-Mantel-Haenszel) test's one-sided mid-p: given
    /// each task's m passes of its 2k trials, the candidate's share is hypergeometric under
    /// "every task keeps its pass probability"; the sum's exact distribution by convolution.
    /// Not what `paired` uses (PairedTest's header): here to measure what it would accept.
    static func conditionalMidP(candidate: [Int], best: [Int], trials k: Int) -> Double {
        var dist: [Double] = [1]
        var observed = 0
        for (c, b) in zip(candidate, best) {
            let m = c + b
            guard m > 0 && m < 2 * k else { continue }
            observed += c
            let total = choose(2 * k, k)
            var next = [Double](repeating: 0, count: dist.count + k)
            for (s, p) in dist.enumerated() where p > 0 {
                for a in max(0, m - k)...min(m, k) { next[s + a] += p * choose(m, a) * choose(2 * k - m, k - a) / total }
            }
            dist = next
        }
        guard dist.count > 1 else { return 1 }
        let above = dist.indices.filter { $0 > observed }.reduce(0.0) { $0 + dist[$1] }
        return above + (observed < dist.count ? dist[observed] : 0) / 2
    }

    static func choose(_ n: Int, _ r: Int) -> Double {
        guard r >= 0 && r <= n else { return 0 }
        var c = 1.0
        for i in 0..<min(r, n - r) { c = c * Double(n - i) / Double(i + 1) }
        return c
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
