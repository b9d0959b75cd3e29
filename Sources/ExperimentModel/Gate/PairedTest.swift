import Glibc

// The paired decision of `gate.accept: paired`: is the candidate better than the best accepted
// agent.py on the held-out split, at a stated error rate? Pure functions of per-task scores.
//
// Data: for each held-out task, its mean reward over the candidate's kc trials and over the
// best's kb trials (the best's from the gate that accepted it, kept operator-only), so that the
// mean of the differences is exactly val_score's difference.
//
// The test: a one-sided paired t-test with the task as the unit. d_t = candidate's mean minus
// the best's on task t; t = mean(d) / (sd(d) / √N), compared with Student's t with N − 1
// degrees of freedom. The null is "no better on average over tasks like these": the mean of d
// is at most 0. Its standard error comes from the spread of the differences across tasks, which
// holds both the trials' noise (smaller with more trials) and how unevenly a change moves tasks.
//
// Why the task and not the trial: a test that conditions on each task's trials (the exact
// stratified, Cochran-Mantel-Haenszel form; `conditionalMidP`, kept for the comparison in
// `GateNoiseSimulation`) assumes that under the null every task keeps its pass probability. A
// change to agent.py that trades tasks (solves some reliably, loses others, no better on
// average) breaks that assumption, and on the simulated benchmark that test accepts such a
// trade in 15 % of gates at 3 trials per task, 19 % at 5: a change that reshuffles which tasks
// pass is what a coding agent makes most. The t-test holds its rate for trades too; it pays in
// power (a ten-point gain found in about half the gates at 3 trials on 34 tasks), and no test
// valid for trades can do much better on so few tasks: with every trial's noise gone, a gain
// on three or four tasks is still three or four tasks. docs/loop.md states the assumptions and
// scripts/bench-gate-noise the measured rates.
//
// Assumptions: tasks are independent; the mean difference over 30-odd tasks is close enough
// to normal for Student's t (differences are bounded in [-1, 1]); each gate is one test at
// alpha, so over B gates of candidates that are no better the chance of some false accept is
// up to 1 − (1 − alpha)^B (choose alpha for the run, e.g. 0.05 / gate.budget).

/// One held-out task's mean reward under the candidate and under the best.
public struct PairedScores: Equatable, Sendable {
    public var candidate: Double
    public var best: Double
    public init(candidate: Double, best: Double) {
        self.candidate = candidate
        self.best = best
    }
}

public enum PairedTest {
    /// The one-sided paired t-test of candidate over best (see the file's header).
    public static func decide(_ tasks: [PairedScores], candidateTrials kc: Int, bestTrials kb: Int, alpha: Double) -> PairedDecision {
        let d = tasks.map { $0.candidate - $0.best }
        let n = d.count
        let mean = n == 0 ? 0 : d.reduce(0, +) / Double(n)
        let variance = n < 2 ? 0 : d.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(n - 1)
        let se = (variance / Double(max(n, 1))).squareRoot()
        let t: Double?, p: Double
        if n < 2 {
            // One task is no sample of tasks.
            (t, p) = (nil, 1)
        } else if se < 1e-12 {
            // Every task moved by the same amount: t is not defined. Under the null each task's
            // difference is as likely to have the other sign, so all N up has probability 2^-N
            // (a small split cannot pass this way: 4 tasks give 1/16).
            (t, p) = (nil, mean > 1e-12 ? pow(2, -Double(n)) : 1)
        } else {
            let statistic = mean / se
            (t, p) = (statistic, studentUpperTail(statistic, degreesOfFreedom: Double(n - 1)))
        }
        return PairedDecision(meanDifference: mean, standardError: se, t: t, tasks: n, pValue: p, alpha: alpha, trials: kc, bestTrials: kb)
    }

    /// P(T ≥ t) for Student's t with `df` degrees of freedom, through the regularized
    /// incomplete beta function: P(|T| ≥ |t|) = I_{df/(df+t²)}(df/2, 1/2).
    static func studentUpperTail(_ t: Double, degreesOfFreedom df: Double) -> Double {
        let twoSided = regularizedIncompleteBeta(df / 2, 0.5, df / (df + t * t))
        return t >= 0 ? twoSided / 2 : 1 - twoSided / 2
    }

    /// I_x(a, b), by its continued fraction (evaluated with the modified Lentz method), on the
    /// side of the symmetry I_x(a, b) = 1 − I_{1−x}(b, a) where the fraction converges fast.
    static func regularizedIncompleteBeta(_ a: Double, _ b: Double, _ x: Double) -> Double {
        if x <= 0 { return 0 }
        if x >= 1 { return 1 }
        if x > (a + 1) / (a + b + 2) { return 1 - regularizedIncompleteBeta(b, a, 1 - x) }
        // The prefactor x^a (1-x)^b / (a B(a, b)), in logarithms.
        let logFront = a * log(x) + b * log(1 - x) + lgamma(a + b) - lgamma(a) - lgamma(b) - log(a)
        // I = front / f with f = 1 + d1/(1 + d2/(1 + d3/(1 + ...))), where
        // d(2m+1) = -(a+m)(a+b+m)x / ((a+2m)(a+2m+1)) and d(2m) = m(b-m)x / ((a+2m-1)(a+2m)).
        let tiny = 1e-300
        var f = 1.0, c = 1.0, dInv = 0.0
        for j in 1...400 {
            let m = Double(j / 2)
            let dj = j % 2 == 1 ? -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
                                : m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
            dInv = 1 + dj * dInv
            if abs(dInv) < tiny { dInv = tiny }
            dInv = 1 / dInv
            c = 1 + dj / c
            if abs(c) < tiny { c = tiny }
            let delta = c * dInv
            f *= delta
            if abs(delta - 1) < 1e-15 { break }
        }
        return exp(logFront) / f
    }
}
