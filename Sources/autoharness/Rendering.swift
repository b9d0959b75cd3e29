import Benchmark
import Experiment
import Foundation

/// The text of `benchmark`, `gate` and `status`: one rendering for the operator's terminal
/// and for the coding agent's client (through the broker), so both read the same output.
enum Render {
    static func benchmark(_ outcomes: [TaskOutcome]) -> String {
        var out = ""
        for o in outcomes {
            let detail = o.status == .passed || o.status == .failed ? "" : " (\(o.status.rawValue)\(o.detail.map { ": \($0)" } ?? ""))"
            out += "\(o.passed ? "PASS" : "FAIL")  \(o.id)  reward \(String(format: "%.2f", o.reward))\(detail)\n"
        }
        out += "train: \(outcomes.filter(\.passed).count)/\(outcomes.count) passed; traces in workspace/traces/latest/\n"
        return out
    }

    /// The gate's answer and exit status (0 accepted, 1 rejected).
    static func gate(_ r: GateResult, config: ExperimentConfig) -> (text: String, exit: Int32) {
        var out = "gate attempt \(r.attempt): \(r.accepted ? "ACCEPTED" : "REJECTED")\n"
        out += "suite: \(r.suitePassed)/\(r.suiteTotal) (threshold \(config.threshold))\n"
        switch config.disclosure {
        case .decision: break
        case .rounded: if let v = r.valScore { out += "val_score: \(String(format: "%.2f", v))\n" }
        case .score: if let v = r.valScore { out += "val_score: \(String(format: "%.4f", v))\n" }
        }
        if r.accepted {
            out += "iteration \(r.iteration ?? 0) committed as \(r.commit.map { String($0.prefix(7)) } ?? "-"); \(r.promoted.count) task(s) promoted to the suite\n"
            return (out, 0)
        }
        out += "reason: \(reason(r, config.disclosure))\n"
        return (out, 1)
    }

    /// Every budget of `autoharness run` and what the open run has used of it (the limits
    /// alone when none is open). The coding agent's view leaves out the cost account.
    static func budgets(_ state: ExperimentState, config: ExperimentConfig, operator op: Bool) -> [RunBudget] {
        RunBudget.all(config: config, maxIterations: state.openRun?.maxIterations, maxHours: state.openRun?.maxHours, used: state.openRunCounters())
            .filter { op || $0.agentMaySee }
    }

    /// A rejection's reason as the disclosure allows (with `decision`, no score is implied).
    static func reason(_ a: GateAttemptRecord, _ d: ExperimentConfig.Disclosure) -> String {
        d == .decision && a.reason.hasPrefix("val_score") ? "held-out score did not improve" : a.reason
    }

    /// `status`: the operator's view with `operator`, else only what gate.disclosure allows
    /// and no violations from held-out runs (what the coding agent may see).
    static func status(_ state: ExperimentState, config: ExperimentConfig, root: String, operator op: Bool, json: Bool,
                       verify report: ExperimentSupervisor.VerifyReport? = nil) -> String {
        let d = op ? ExperimentConfig.Disclosure.score : config.disclosure
        let violations = op ? state.violations : state.violations.filter { $0.record.heldOut != true }
        if json {
            func score(_ v: Double?) -> Any {
                guard let v else { return NSNull() }
                if op { return v }
                return d == .decision ? NSNull() : (Double(Views.disclosed(v, d)) ?? NSNull()) as Any
            }
            var obj: [String: Any] = [
                "prepared": state.prepared,
                "disclosure": op ? "operator" : d.rawValue,
                "iterations": state.iterations.map { ["iteration": $0.iteration, "val_score": score($0.valScore), "commit": $0.commit,
                                                      "evals_passed": $0.evalsPassed, "evals_total": $0.evalsTotal, "timestamp": $0.timestamp] },
                "best": score(state.best),
                "suite": state.suite,
                "gate_attempts": state.gateAttempts.suffix(10).map { ["attempt": $0.attempt, "accepted": $0.accepted, "reason": reason($0, d),
                                                                       "suite": "\($0.suitePassed)/\($0.suiteTotal)"] },
                "violations": violations.map { ["time": $0.time, "actor": $0.record.actor, "kind": $0.record.kind, "detail": $0.record.detail] },
                "budgets": budgets(state, config: config, operator: op).map {
                    ["setting": $0.setting, "counts": $0.counts, "limit": $0.limit ?? NSNull() as Any, "used": $0.used ?? NSNull() as Any, "spent": $0.spent]
                },
            ]
            if op, let end = state.lastRunEnd {
                obj["last_run"] = ["run_id": end.runID, "reason": end.reason, "nothing_left": end.nothingLeft ?? false]
            }
            if op {
                let u = state.agentUsage
                var usage: [String: Any] = ["sessions": state.agentSessions.count, "input_tokens": u.inputTokens, "cache_read_tokens": u.cacheReadTokens,
                                            "cache_write_tokens": u.cacheWriteTokens, "output_tokens": u.outputTokens, "uncosted_tokens": u.uncostedTokens,
                                            "cost_usd": u.costUSD ?? NSNull() as Any]
                let accepted = state.iterations.count - 1
                usage["cost_per_accepted_usd"] = u.costUSD.map { accepted > 0 ? $0 / Double(accepted) as Any : NSNull() } ?? NSNull()
                obj["coding_agent_usage"] = usage
            }
            if let report {
                obj["verify"] = ["ok": report.ok, "ledger_problems": report.ledger.problems.map(\.description),
                                 "edited_views": report.editedViews, "behind_views": report.behindViews, "missing_commits": report.missingCommits]
            }
            let data = (try? JSONSerialization.data(withJSONObject: obj, options: [.prettyPrinted, .sortedKeys])) ?? Data()
            return String(decoding: data, as: UTF8.self) + "\n"
        }
        var out = "experiment \(root)\n"
        if !state.prepared {
            out += "not prepared yet: run `autoharness prepare`\n"
        } else {
            out += "iterations: \(state.iterations.count - 1) accepted (plus baseline)\n"
            if let best = state.best { out += "best val_score: \(Views.disclosed(best, d))\n" }
            out += "suite: \(state.suite.count) task(s)\n"
            let recent = state.gateAttempts.suffix(5)
            if !recent.isEmpty {
                out += "recent gate attempts:\n"
                for a in recent { out += "  #\(a.attempt) \(a.accepted ? "accepted" : "rejected: \(reason(a, d))") (suite \(a.suitePassed)/\(a.suiteTotal))\n" }
            }
            if op && !state.agentSessions.isEmpty {
                let u = state.agentUsage
                out += "coding agent: \(state.agentSessions.count) session(s), \(u.summary) (as its CLI reported it)\n"
                if let c = u.costUSD, state.iterations.count > 1 {
                    out += "  cost per accepted improvement: \(AgentUsage.dollars(c / Double(state.iterations.count - 1)))\n"
                }
            }
            if let run = state.openRun { out += "run \(run.runID) in progress or interrupted (`autoharness run` resumes it)\n" }
            if op, state.openRun == nil, let end = state.lastRunEnd {
                out += "last run \(end.runID) stopped: \(end.nothingLeft == true ? "nothing left to do: " : "")\(end.reason)\n"
            }
            out += state.openRun == nil ? "budgets of each run (none open):\n" : "budgets of this run:\n"
            for b in budgets(state, config: config, operator: op) { out += "  \(b.text)\n" }
            out += "violations: \(violations.count)\(op ? "" : " (held-out runs' are withheld; --operator shows them)")\n"
            var byKind: [String: Int] = [:]
            for v in violations { byKind["\(v.record.actor): \(v.record.kind)", default: 0] += RunLoop.count(in: v.record.detail) }
            for (k, n) in byKind.sorted(by: { $0.key < $1.key }) { out += "  \(k) ×\(n)\n" }
            if !violations.isEmpty { out += "latest:\n" }
            for v in violations.suffix(10) { out += "  \(v.time) \(v.record.actor): \(v.record.detail)\n" }
        }
        if let report {
            if report.ok {
                out += "verify: ok (\(report.ledger.records) ledger records, head \(report.ledger.head.prefix(12)))\n"
            } else {
                out += "verify: PROBLEMS\n"
                for p in report.ledger.problems { out += "  ledger: \(p)\n" }
                for v in report.editedViews { out += "  view differs from the ledger (tampered): \(v) (the gate ignores it; the next recorded change regenerates it)\n" }
                for c in report.missingCommits { out += "  accepted commit not in git history: \(c)\n" }
            }
            for v in report.behindViews {
                out += "  view behind the ledger, not tampered: \(v) (a supervisor stopped before publishing it; the next command that takes the experiment lock regenerates it)\n"
            }
        }
        return out
    }
}
