import ExperimentModel
import Foundation
import Ledger

/// What `autoharness run` has used of its limits so far.
public struct RunCounters: Sendable, Equatable {
    /// Gates started in this run (a gate counts from its start, whatever became of it).
    public var gates = 0
    public var accepted = 0
    /// Rejected gates since the run's last accepted one.
    public var rejectedInARow = 0
    /// Sessions of the coding agent in a row that ended without progress (crashes are
    /// counted apart).
    public var withoutProgress = 0
    /// Sessions in a row that were crashes.
    public var crashes = 0
    /// What the coding agent's CLI reported spending in this run, in dollars.
    public var costUSD = 0.0
    /// What the benchmark's tools reported spending on its models in this run (train and
    /// held-out runs alike), in dollars.
    public var benchmarkCostUSD = 0.0
    /// Hours since this invocation of `autoharness run` started.
    public var hours = 0.0
    public init() {}
}

/// One limit of `autoharness run`, and how much of it the run in progress has used: the
/// list `status` shows, and the sentence a run that stops for it ends with. Every budget
/// the run enforces is here, so none can exist that `status` does not show.
public struct RunBudget: Sendable, Equatable {
    public enum Kind: String, Sendable, CaseIterable {
        case maxIterations, maxHours, gateBudget, maxNonImproving, maxCost, maxRestarts, maxCrashes
    }
    public var kind: Kind
    /// Where it is set: a flag of `autoharness run` or a config key.
    public var setting: String
    /// What it counts.
    public var counts: String
    /// nil: no limit set.
    public var limit: Double?
    /// nil: no run is open.
    public var used: Double?

    /// The coding agent's `status` shows it too. The cost account is the operator's: the
    /// agent's view of `status` carries no tokens or dollars.
    public var agentMaySee: Bool { kind != .maxCost }

    /// The run must stop for it. A restart is used when a session without progress ends, so
    /// `max_restarts` is spent only by the session after the last allowed restart.
    public var spent: Bool {
        guard let limit, let used else { return false }
        return kind == .maxRestarts ? used > limit : used >= limit
    }

    /// The reason a run that stops for this budget gives (`used` as it is when it stops).
    public var stopReason: String {
        let n = Int(used ?? 0), m = Int(limit ?? 0)
        switch kind {
        case .maxIterations: return "--max-iterations \(m) reached (\(n) accepted)"
        case .maxHours: return "--max-hours \(limit ?? 0) reached"
        case .gateBudget: return "gate budget \(m) spent"
        case .maxNonImproving: return "\(n) consecutive gates without improvement (gate.max_non_improving \(m))"
        case .maxCost:
            return "budget.max_cost_usd \(AgentUsage.dollars(limit ?? 0)) reached (\(AgentUsage.dollars(used ?? 0)): the coding agent's and the benchmark's model spend as they reported it)"
        case .maxRestarts:
            return "\(n) sessions of the coding agent in a row ended without progress (no benchmark of a new agent.py, no gate: "
                + "only refused, repeated or status requests, or none) and coding_agent.max_restarts is \(m)"
        case .maxCrashes:
            return "the coding agent exited \(n) times in a row soon after starting (coding_agent.quick_exit_seconds), failing or without a single request (coding_agent.max_crashes \(m))"
        }
    }

    /// `gates: 3 of 10 (gate.budget)`; without an open run, the limit alone
    /// (`gate.budget: 10`).
    public var text: String {
        func number(_ x: Double) -> String {
            switch kind {
            case .maxCost: return AgentUsage.dollars(x)
            case .maxHours: return String(format: "%.2f", x)
            default: return String(Int(x))
            }
        }
        guard let used else {
            let unset = setting.hasPrefix("--") ? "no limit unless given to `autoharness run`" : "no limit"
            return "\(setting): " + (limit.map(number) ?? unset)
        }
        return "\(counts): \(number(used)) " + (limit.map { "of \(number($0)) (\(setting))" } ?? "(\(setting): no limit)")
    }

    /// Every budget, in the order the run checks them. `used` nil: the limits alone.
    public static func all(config: ExperimentConfig, maxIterations: Int?, maxHours: Double?, used u: RunCounters?) -> [RunBudget] {
        func positive(_ x: Double) -> Double? { x > 0 ? x : nil }
        return [
            RunBudget(kind: .maxIterations, setting: "--max-iterations", counts: "accepted gates", limit: maxIterations.map(Double.init),
                      used: u.map { Double($0.accepted) }),
            RunBudget(kind: .gateBudget, setting: "gate.budget", counts: "gates", limit: positive(Double(config.gate.budget)),
                      used: u.map { Double($0.gates) }),
            RunBudget(kind: .maxNonImproving, setting: "gate.max_non_improving", counts: "rejected gates in a row",
                      limit: positive(Double(config.gate.maxNonImproving)), used: u.map { Double($0.rejectedInARow) }),
            RunBudget(kind: .maxHours, setting: "--max-hours", counts: "hours", limit: maxHours, used: u.map(\.hours)),
            RunBudget(kind: .maxCost, setting: "budget.max_cost_usd", counts: "model spend (coding agent + benchmark)", limit: positive(config.maxCostUSD),
                      used: u.map { $0.costUSD + $0.benchmarkCostUSD }),
            RunBudget(kind: .maxRestarts, setting: "coding_agent.max_restarts", counts: "restarts after sessions without progress, in a row",
                      limit: Double(config.codingAgent.maxRestarts), used: u.map { Double($0.withoutProgress) }),
            RunBudget(kind: .maxCrashes, setting: "coding_agent.max_crashes", counts: "crashes in a row",
                      limit: Double(config.codingAgent.maxCrashes), used: u.map { Double($0.crashes) }),
        ]
    }
}

extension ExperimentState {
    /// What the open run has used, from its ledger rows; nil when no run is open.
    public func openRunCounters(now: Date = Date()) -> RunCounters? {
        guard let run = openRun else { return nil }
        var c = RunCounters()
        c.gates = openRunGates
        c.accepted = openRunAccepted
        c.rejectedInARow = openRunRejectedInARow
        let last = agentSessions.last { $0.runID == run.runID }
        c.withoutProgress = last?.withoutProgress ?? 0
        c.crashes = last?.crashes ?? 0
        c.costUSD = agentUsage(run: run.runID).costUSD ?? 0
        c.benchmarkCostUSD = openRunBenchmarkCost.total
        if let since = openRunSince.flatMap(Timestamp.parse) { c.hours = max(0, now.timeIntervalSince(since) / 3600) }
        return c
    }
}
