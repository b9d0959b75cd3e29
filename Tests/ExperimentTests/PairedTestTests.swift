import Foundation
import Testing
@testable import Experiment

// gate.accept: paired's statistics (PairedTest) and the simulated benchmark that states its
// error rates (GateNoiseSimulation, `autoharness simulate-gate`).

@Suite("The paired held-out decision and its error rates")
struct PairedTestTests {
    private func counts(_ pairs: [(Int, Int)]) -> [PairedCounts] { pairs.map { PairedCounts(candidate: $0.0, best: $0.1) } }

    @Test("values worked by hand: with one trial it is McNemar's exact test (mid-p), a task from 0/3 to 3/3 has p 1/40, no informative task gives p 1")
    func handValues() {
        // Three tasks fixed, one failing under both: S = 3 of 3 coin tosses, mid-p = (1/8) / 2.
        let mcnemar = PairedTest.decide(counts([(1, 0), (1, 0), (1, 0), (0, 0)]), trials: 1, alpha: 0.05)
        #expect(abs(mcnemar.pValue - 0.0625) < 1e-12 && mcnemar.informativeTasks == 3 && !mcnemar.accepted)
        // m = 3 of 6 trials, all three the candidate's: P = 1 / C(6,3) = 1/20, mid-p 1/40.
        let fixed = PairedTest.decide(counts([(3, 0), (3, 3), (0, 0)]), trials: 3, alpha: 0.05)
        #expect(abs(fixed.pValue - 0.025) < 1e-12 && fixed.statistic == 3 && fixed.expected == 1.5 && fixed.accepted)
        let none = PairedTest.decide(counts([(3, 3), (0, 0)]), trials: 3, alpha: 0.5)
        #expect(none.pValue == 1 && none.informativeTasks == 0 && !none.accepted)
        // The same counts the other way round: far from accepted.
        let worse = PairedTest.decide(counts([(0, 3)]), trials: 3, alpha: 0.05)
        #expect(worse.pValue > 0.9 && !worse.accepted)
        // Exactly what the null expects is never accepted, whatever alpha.
        let even = PairedTest.decide(counts([(2, 1), (1, 2)]), trials: 3, alpha: 0.99)
        #expect(Double(even.statistic) == even.expected && !even.accepted)
    }

    /// The convolution against brute force: every way of choosing which k of each task's 2k
    /// trial outcomes were the candidate's, equally likely under the null.
    @Test("the exact distribution matches an enumeration of every relabelling of the trials")
    func matchesEnumeration() {
        var g = SplitMix64(seed: 7)
        for _ in 0..<20 {
            let k = Int(g.next() % 3) + 1
            let tasks = (0..<3).map { _ in PairedCounts(candidate: Int(g.next() % UInt64(k + 1)), best: Int(g.next() % UInt64(k + 1))) }
            let observed = tasks.map(\.candidate).reduce(0, +)
            // Per task: the 2k outcomes (m passes), every k-subset as the candidate's.
            var sums: [Int: Double] = [0: 1]
            for t in tasks {
                let outcomes = (0..<(2 * k)).map { $0 < t.candidate + t.best }
                var ways: [Int: Double] = [:]
                var total = 0.0
                for mask in 0..<(1 << (2 * k)) where mask.nonzeroBitCount == k {
                    let passes = (0..<(2 * k)).filter { mask & (1 << $0) != 0 && outcomes[$0] }.count
                    ways[passes, default: 0] += 1
                    total += 1
                }
                var next: [Int: Double] = [:]
                for (s, p) in sums { for (a, w) in ways { next[s + a, default: 0] += p * w / total } }
                sums = next
            }
            let midP = sums.filter { $0.key > observed }.values.reduce(0, +) + (sums[observed] ?? 0) / 2
            let decision = PairedTest.decide(tasks, trials: k, alpha: 0.05)
            if decision.informativeTasks > 0 { #expect(abs(decision.pValue - midP) < 1e-9, "\(tasks) k=\(k)") }
        }
    }

    /// The figures docs/measurements.md states (scripts/bench-gate-noise), at its seed: what
    /// a change to the test, the simulation or the rules would move.
    @Test("on the simulated benchmark at k = 3: paired's false accepts stay within alpha + 1 point and it accepts a ten-point gain in at least 80 % of loops; margin's false-accept rate is several times alpha")
    func statedErrorRates() {
        var sim = GateNoiseSimulation()
        sim.trials = [3]
        let rows = sim.run()
        let paired = rows.first { $0.rule == "paired" }!, margin = rows.first { $0.rule == "margin" }!
        #expect(paired.falseAccept <= sim.alpha + 0.01, "\(paired)")
        #expect(paired.trueAccept >= 0.8, "\(paired)")
        #expect(margin.falseAccept > 2 * sim.alpha, "\(margin)")
        // Deterministic: the same seed gives the same rows.
        #expect(sim.run() == rows)
    }
}
