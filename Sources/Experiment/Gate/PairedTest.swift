// The paired decision of `gate.accept: paired`: is the candidate better than the best accepted
// agent.py on the held-out split, at a stated error rate? Pure functions of pass counts.
//
// Data: for each held-out task, how many of its k trials passed under the candidate (c) and
// how many of k under the best (b), from the best's own gate (kept operator-only).
//
// The test: an exact stratified (conditional) test, the one-sided exact form of the
// Cochran-Mantel-Haenszel test. Under the null, on every task the candidate's and the best's
// trials have the same pass probability and are independent, so given the task's total
// m = c + b of its 2k trials, which k of them are the candidate's is a random draw: c follows
// the hypergeometric distribution H(2k, m, k). Tasks are independent, so the statistic
// S = sum of c over tasks has, under the null, the distribution of a sum of independent
// hypergeometric variables, computed here exactly by convolution (its support is at most
// k × tasks + 1 integers). The p-value is the mid-p: P(S > s) + P(S = s) / 2 for the observed s.
//
// Why this test: it uses the trials within a task (a task that went 0/3 to 3/3 is strong
// evidence; a sign-flip permutation test of per-task differences treats it as a coin's
// toss), it needs no normal approximation on 30-odd tasks, and with k = 1 it is McNemar's
// exact test on the tasks whose outcome changed. Tasks every trial passed or failed under both
// (m = 0 or 2k) carry no information and drop out. Why the mid-p: the exact test's p-value
// is conservative on discrete data (its actual rate of false accepts falls well below alpha,
// spending power); the mid-p's rate is close to alpha from either side, and
// `scripts/bench-gate-noise` measures it on a simulated benchmark (docs/measurements.md).
//
// What it assumes (docs/loop.md): trials are independent draws; tasks are independent; "no
// better" is taken as "the same pass probability on every task". A candidate better on some
// tasks and worse on others by as much is not covered exactly. The best's counts come from the
// gate that accepted it, a run selected for being good: that makes the test conservative
// against it (regression to the mean works for the candidate), never the reverse.

/// One held-out task's pass counts under the candidate and the best, of `trials` each.
public struct PairedCounts: Equatable, Sendable {
    public var candidate: Int
    public var best: Int
    public init(candidate: Int, best: Int) {
        self.candidate = candidate
        self.best = best
    }
}

/// The result of the paired test: what `status --operator`, the report and the evidence show.
public struct PairedDecision: Codable, Equatable, Sendable {
    /// Candidate passes over all tasks and trials (the statistic S).
    public var statistic: Int
    /// Its expectation under the null: the candidate's share (kc / (kc + kb)) of each
    /// informative task's passes.
    public var expected: Double
    /// Tasks whose trials (both sides') were neither all passes nor all failures.
    public var informativeTasks: Int
    /// One-sided mid-p value.
    public var pValue: Double
    public var alpha: Double
    /// The candidate's trials per task, and the best's.
    public var trials: Int
    public var bestTrials: Int
    /// p ≤ alpha and more passes than expected: the candidate is better.
    public var accepted: Bool { pValue <= alpha && Double(statistic) > expected }
}

public enum PairedTest {
    /// The one-sided paired test of candidate over best (see the file's header), both with
    /// `trials` trials per task.
    public static func decide(_ tasks: [PairedCounts], trials k: Int, alpha: Double) -> PairedDecision {
        decide(tasks, candidateTrials: k, bestTrials: k, alpha: alpha)
    }

    /// The same with the candidate's trials per task `kc` and the best's `kb` (the best may have
    /// been gated under another `gate.trials`): given a task's m passes of its kc + kb trials,
    /// the candidate's share is hypergeometric H(kc + kb, m, kc). Every count must lie in
    /// 0...its trials.
    public static func decide(_ tasks: [PairedCounts], candidateTrials kc: Int, bestTrials kb: Int, alpha: Double) -> PairedDecision {
        precondition(kc >= 1 && kb >= 1 && tasks.allSatisfy { (0...kc).contains($0.candidate) && (0...kb).contains($0.best) })
        var statistic = 0, expected = 0.0, informative = 0
        // dist[s]: probability that the informative tasks' candidate passes sum to s.
        var dist: [Double] = [1]
        for t in tasks {
            let m = t.candidate + t.best
            guard m > 0 && m < kc + kb else { continue }
            informative += 1
            statistic += t.candidate
            expected += Double(m * kc) / Double(kc + kb)
            let pmf = hypergeometric(population: kc + kb, successes: m, draws: kc)
            var next = [Double](repeating: 0, count: dist.count + kc)
            for (s, p) in dist.enumerated() where p > 0 {
                for (a, q) in pmf where q > 0 { next[s + a] += p * q }
            }
            dist = next
        }
        var above = 0.0
        for s in dist.indices where s > statistic { above += dist[s] }
        let at = statistic < dist.count ? dist[statistic] : 0
        // With no informative task the candidate and the best cannot be told apart: p = 1.
        let p = informative == 0 ? 1 : min(1, above + at / 2)
        return PairedDecision(statistic: statistic, expected: expected, informativeTasks: informative, pValue: p, alpha: alpha, trials: kc, bestTrials: kb)
    }

    /// P(X = a) for each a of the hypergeometric distribution: `draws` taken without
    /// replacement from `population` items of which `successes` are successes.
    static func hypergeometric(population n: Int, successes m: Int, draws k: Int) -> [(Int, Double)] {
        let total = choose(n, k)
        return (max(0, k - (n - m))...min(m, k)).map { a in (a, choose(m, a) * choose(n - m, k - a) / total) }
    }

    /// n choose r as a Double (exact for the sizes here: kc + kb ≤ 2 × 20).
    static func choose(_ n: Int, _ r: Int) -> Double {
        guard r >= 0 && r <= n else { return 0 }
        var c = 1.0
        for i in 0..<min(r, n - r) { c = c * Double(n - i) / Double(i + 1) }
        return c
    }
}

/// `gate.trials`: how many times each held-out task runs in one gate.
public enum GateTrials {
    /// At most this many: the exact distribution's support and a gate's cost grow with it.
    public static let maximum = 20
}
