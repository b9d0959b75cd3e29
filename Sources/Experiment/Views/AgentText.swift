import Benchmark
import ExperimentModel
import Foundation

/// The text of `benchmark`, `gate` and `status`, the same for the operator's terminal and for
/// the coding agent's client (the broker calls these directly). Formatting only: what may be
/// shown was decided by `Disclosure`.
public enum AgentText {
    /// Train outcomes (nothing held out ever reaches this); `unverified`: why the rewards are
    /// not independent of agent.py's process (`BenchmarkKind.unverified`).
    public static func benchmark(_ outcomes: [TaskOutcome], unverified: String? = nil) -> String {
        var out = ""
        for o in outcomes {
            let detail = o.status == .passed || o.status == .failed ? "" : " (\(o.status.rawValue)\(o.detail.map { ": \($0)" } ?? ""))"
            out += "\(o.passed ? "PASS" : "FAIL")  \(o.id)  reward \(String(format: "%.2f", o.reward))\(detail)\n"
        }
        out += "train: \(outcomes.filter(\.passed).count)/\(outcomes.count) passed; traces in workspace/traces/latest/\n"
        if let unverified { out += "rewards: UNVERIFIED (\(unverified))\n" }
        return out
    }

    /// The gate's answer and exit status (0 accepted, 1 rejected or interrupted).
    public static func gate(_ g: GateDisclosure) -> (text: String, exit: Int32) {
        var out = "gate attempt \(g.attempt): \(g.accepted ? "ACCEPTED" : "REJECTED")\n"
        if let u = g.unverified { out += "rewards: UNVERIFIED (\(u))\n" }
        out += "suite: \(g.suitePassed)/\(g.suiteTotal) (threshold \(g.threshold))\n"
        if let s = g.score { out += "val_score: \(s.text)\n" }
        if g.accepted {
            out += "iteration \(g.iteration ?? 0) committed as \(g.commit ?? "-"); \(g.promoted) task(s) promoted to the suite\n"
        } else {
            out += "reason: \(g.reason)\n"
        }
        if let b = g.batch, let next = g.revealedBatch {
            out += "batch \(b) ended (\(g.accepted ? "accepted gate" : "its gate attempts are spent")); batch \(next) begins: "
                + ((g.revealedTasks ?? 0) > 0
                    ? "\(g.revealedTasks!) new train task(s) ran with the accepted agent.py, see workspace/failures.md\n"
                    : "every train task is revealed already\n")
        }
        return (out, g.accepted ? 0 : 1)
    }

    /// A gate's ranking of candidates (train numbers only, which the coding agent may see),
    /// printed before the gate's own answer.
    public static func ranking(_ r: CandidatesRankedRecord) -> String {
        var out = "\(r.ranked.count) candidates ran on the train split; only the first below meets the held-out split:\n"
        for (i, c) in r.ranked.enumerated() {
            out += "  \(i + 1). candidate \(c.number) \(c.agentSHA256.prefix(12)): train \(c.trainPassed)/\(c.trainTotal) (score \(String(format: "%.3f", c.trainScore))), suite \(c.suitePassed)/\(c.suiteTotal)\(c.meetsThreshold ? "" : " below threshold")\(i == 0 ? "  <- gated" : "  explored")\(c.message.map { " - " + $0 } ?? "")\n"
        }
        out += "agent/agent.py is now candidate \(r.ranked[0].number), the one gated\n"
        return out
    }

    /// The answer to `autoharness candidate`.
    public static func candidate(_ c: CandidateRecord, of limit: Int) -> String {
        "candidate \(c.number) of at most \(limit) waiting (\(c.agentSHA256.prefix(12))): the next `autoharness gate` runs every waiting candidate on the train split, ranks them there and judges only the best on the held-out split\n"
    }

    /// The coding agent's `status` (the broker never passes `verify`; the operator's CLI may).
    public static func status(_ s: AgentStatus, root: String, json: Bool, verify report: ExperimentSupervisor.VerifyReport? = nil) -> String {
        json ? statusJSON(s.facts, extra: verifyJSON(report)) : statusText(s.facts, root: root, operator: nil) + (report.map(verifyText) ?? "")
    }

    /// `status --operator`, with `--verify`'s findings when given.
    public static func status(_ s: OperatorStatus, root: String, json: Bool, verify report: ExperimentSupervisor.VerifyReport?) -> String {
        guard json else { return statusText(s.facts, root: root, operator: s) + (report.map(verifyText) ?? "") }
        var extra = verifyJSON(report)
        if let end = s.lastRunEnd { extra["last_run"] = ["run_id": end.runID, "reason": end.reason, "nothing_left": end.nothingLeft ?? false] }
        let u = s.usage
        var usage: [String: Any] = ["sessions": s.sessions, "input_tokens": u.inputTokens, "cache_read_tokens": u.cacheReadTokens,
                                    "cache_write_tokens": u.cacheWriteTokens, "output_tokens": u.outputTokens, "uncosted_tokens": u.uncostedTokens,
                                    "cost_usd": u.costUSD ?? NSNull() as Any]
        let accepted = s.facts.iterations.count - 1
        usage["cost_per_accepted_usd"] = u.costUSD.map { accepted > 0 ? $0 / Double(accepted) as Any : NSNull() } ?? NSNull()
        extra["coding_agent_usage"] = usage
        extra["needs_human"] = s.needsHuman.map { ["time": $0.time, "text": $0.text] }
        extra["pending_suite"] = s.pendingSuite
        extra["pending_merges"] = s.pendingMerges
        extra["infra_retries"] = s.infraRetries.map { r -> Any in
            ["attempt": r.attempt as Any? ?? NSNull(), "vendor_failures": r.retries.failures, "retried": r.retries.retried,
             "unresolved": r.retries.unresolved, "retried_in_all": r.allRetried]
        } ?? NSNull()
        let c = s.benchmarkCost
        extra["benchmark_cost_usd"] = c.reported ? ["train": c.train, "held_out": c.heldOut] as Any : NSNull()
        return statusJSON(s.facts, extra: extra)
    }

    private static func verifyJSON(_ report: ExperimentSupervisor.VerifyReport?) -> [String: Any] {
        guard let report else { return [:] }
        return ["verify": ["ok": report.ok, "ledger_problems": report.ledger.problems.map(\.description),
                           "edited_views": report.editedViews, "behind_views": report.behindViews, "missing_commits": report.missingCommits,
                           "unpublished_commits": report.unpublishedCommits]]
    }

    private static func statusJSON(_ f: StatusFacts, extra: [String: Any]) -> String {
        func score(_ s: DisclosedScore?) -> Any { s.map { $0.value as Any } ?? NSNull() }
        var obj: [String: Any] = [
            "prepared": f.prepared,
            "disclosure": f.label,
            "iterations": f.iterations.map { ["iteration": $0.iteration, "val_score": score($0.score), "commit": $0.commit,
                                              "evals_passed": $0.evalsPassed, "evals_total": $0.evalsTotal, "timestamp": $0.timestamp] },
            "best": score(f.best),
            "suite": f.suite,
            "gate_attempts": f.gates.map { ["attempt": $0.attempt, "accepted": $0.accepted, "reason": $0.reason, "suite": "\($0.suitePassed)/\($0.suiteTotal)"] },
            "violations": f.violations.map { ["time": $0.time, "actor": $0.actor, "kind": $0.kind, "detail": $0.detail] },
            "unverified_rewards": f.unverified ?? NSNull() as Any,
            "shared_vendor_account": f.sharedVendorAccount ?? NSNull() as Any,
            "gate_rule": f.gateRule ?? NSNull() as Any,
            "budgets": f.budgets.map {
                ["setting": $0.setting, "counts": $0.counts, "limit": $0.limit ?? NSNull() as Any, "used": $0.used ?? NSNull() as Any, "spent": $0.spent]
            },
        ]
        if f.candidateLimit > 1 {
            obj["candidates_waiting"] = f.candidatesWaiting.map { ["number": $0.number, "agent_sha256": $0.agentSHA256, "message": $0.message ?? NSNull() as Any] }
            obj["candidate_rankings"] = f.rankings.map { r in
                ["attempt": r.attempt, "chosen": r.chosen, "ranked": r.ranked.map {
                    ["number": $0.number, "agent_sha256": $0.agentSHA256, "message": $0.message ?? NSNull() as Any, "train_passed": $0.trainPassed,
                     "train_total": $0.trainTotal, "train_score": $0.trainScore, "suite_passed": $0.suitePassed, "suite_total": $0.suiteTotal,
                     "meets_threshold": $0.meetsThreshold, "gated": $0.agentSHA256 == r.chosen] as [String: Any]
                }] as [String: Any]
            }
        }
        if let b = f.batch {
            obj["batch"] = ["number": b.number, "revealed": b.revealed, "gate_attempts_used": b.attemptsUsed, "gate_attempts_allowed": b.attemptsAllowed]
        }
        obj.merge(extra) { $1 }
        let data = (try? JSONSerialization.data(withJSONObject: obj, options: [.prettyPrinted, .sortedKeys])) ?? Data()
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    private static func statusText(_ f: StatusFacts, root: String, operator op: OperatorStatus?) -> String {
        var out = "experiment \(root)\n"
        if let u = f.unverified { out += "rewards: UNVERIFIED (\(u))\n" }
        if let v = f.sharedVendorAccount { out += "vendor account: SHARED (\(v))\n" }
        guard f.prepared else { return out + "not prepared yet: run `autoharness prepare`\n" }
        out += "iterations: \(f.iterations.count - 1) accepted (plus baseline)\n"
        if let best = f.best { out += "best val_score: \(best.fixed4)\n" } else if !f.iterations.isEmpty { out += "best val_score: -\n" }
        out += "suite: \(f.suite.count) task(s)\n"
        if let rule = f.gateRule { out += "gate rule: \(rule)\n" }
        if let b = f.batch {
            out += "rolling batch \(b.number): \(b.revealed) train task(s) revealed, gate attempts \(b.attemptsUsed) of \(b.attemptsAllowed)\n"
        }
        let recent = f.gates.suffix(5)
        if !recent.isEmpty {
            out += "recent gate attempts:\n"
            for g in recent { out += "  #\(g.attempt) \(g.accepted ? "accepted" : "rejected: \(g.reason)") (suite \(g.suitePassed)/\(g.suiteTotal))\n" }
        }
        if f.candidateLimit > 1 {
            out += "candidates waiting for the next gate: \(f.candidatesWaiting.count) of at most \(f.candidateLimit)"
                + (f.candidatesWaiting.isEmpty ? "" : " (" + f.candidatesWaiting.map { "#\($0.number) \($0.agentSHA256.prefix(12))" }.joined(separator: ", ") + ")") + "\n"
            for r in f.rankings.suffix(3) {
                let line = { (c: RankedCandidate) in "#\(c.number) train \(c.trainPassed)/\(c.trainTotal)" }
                out += "  gate attempt \(r.attempt) ranked \(r.ranked.count) on train: gated \(line(r.ranked[0]))"
                    + (r.explored.isEmpty ? "" : "; explored " + r.explored.map(line).joined(separator: ", ")) + "\n"
            }
        }
        if let op, op.sessions > 0 {
            out += "coding agent: \(op.sessions) session(s), \(op.usage.summary) (as its CLI reported it)\n"
            if let c = op.usage.costUSD, f.iterations.count > 1 {
                out += "  cost per accepted improvement: \(AgentUsage.dollars(c / Double(f.iterations.count - 1)))\n"
            }
        }
        if let op, let f = op.finished {
            out += "timeout_policy infra: \(f.attempt.map { "gate attempt \($0)" } ?? "the baseline") had \(f.timedOut) held-out timeout(s); "
                + "over the tasks that finished \(f.val.map { String(format: "%.4f", $0) } ?? "-") (the gate counts every task)\n"
        }
        if let op, let (attempt, t) = op.paired {
            out += "paired test, gate attempt \(attempt): mean difference \(String(format: "%+.4f", t.meanDifference)) over \(t.tasks) held-out task(s) "
                + "(standard error \(String(format: "%.4f", t.standardError)), t \(t.t.map { String(format: "%.2f", $0) } ?? "undefined")), \(t.trials) trial(s) per task (the best's \(t.bestTrials)); "
                + "p \(String(format: "%.4f", t.pValue)) against gate.alpha \(t.alpha): \(t.accepted ? "better" : "not shown better")\n"
        }
        if let op, let r = op.infraRetries {
            out += "model vendor failures, \(r.attempt.map { "gate attempt \($0)" } ?? "the baseline")'s held-out runs: \(r.retries.summary)"
                + " (gate.infra_retries; \(r.allRetried) task run(s) repeated in all)\n"
        }
        if let op, op.benchmarkCost.reported {
            let c = op.benchmarkCost
            out += "benchmark model spend: train \(AgentUsage.dollars(c.train)), held-out \(AgentUsage.dollars(c.heldOut)) (as its tools reported it)\n"
        }
        if let op, !op.pendingSuite.isEmpty {
            out += "waiting for your review (loop.review: operator; `autoharness suite approve|retire`): \(op.pendingSuite.joined(separator: ", "))\n"
        }
        if let op, !op.pendingMerges.isEmpty {
            out += "triage merges waiting for your review (loop.review: operator; `autoharness failures --accept-triage` or --cluster ID --merge|--split): "
                + op.pendingMerges.map { $0.joined(separator: " + ") }.joined(separator: "; ") + "\n"
        }
        if let op, !op.needsHuman.isEmpty {
            out += "needs from a human (the coding agent's notes, newest last): \(op.needsHuman.count)\n"
            for n in op.needsHuman.suffix(5) { out += "  \(n.time) \(n.text)\n" }
        }
        if let run = f.openRunID { out += "run \(run) in progress or interrupted (`autoharness run` resumes it)\n" }
        if let op, f.openRunID == nil, let end = op.lastRunEnd {
            out += "last run \(end.runID) stopped: \(end.nothingLeft == true ? "nothing left to do: " : "")\(end.reason)\n"
        }
        out += f.openRunID == nil ? "budgets of each run (none open):\n" : "budgets of this run:\n"
        for b in f.budgets { out += "  \(b.text)\n" }
        out += "violations: \(f.violations.count)\(op != nil ? "" : " (held-out runs' are withheld; --operator shows them)")\n"
        var byKind: [String: Int] = [:]
        for v in f.violations { byKind["\(v.actor): \(v.kind)", default: 0] += v.count }
        for (k, n) in byKind.sorted(by: { $0.key < $1.key }) { out += "  \(k) ×\(n)\n" }
        if !f.violations.isEmpty { out += "latest:\n" }
        for v in f.violations.suffix(10) { out += "  \(v.time) \(v.actor): \(v.detail)\n" }
        return out
    }

    private static func verifyText(_ report: ExperimentSupervisor.VerifyReport) -> String {
        var out = ""
        if report.ok {
            out += "verify: ok (\(report.ledger.records) ledger records, head \(report.ledger.head.prefix(12)))\n"
        } else {
            out += "verify: PROBLEMS\n"
            for p in report.ledger.problems { out += "  ledger: \(p)\n" }
            for v in report.editedViews { out += "  view differs from the ledger (tampered): \(v) (the gate ignores it; the next recorded change regenerates it)\n" }
            for c in report.missingCommits { out += "  accepted commit not in git history: \(c)\n" }
        }
        for c in report.unpublishedCommits {
            out += "  accepted commit not yet on the branch, not missing: \(c) (a supervisor stopped between recording and publishing it; the next command that takes the experiment lock publishes it)\n"
        }
        for v in report.behindViews {
            out += "  view behind the ledger, not tampered: \(v) (a supervisor stopped before publishing it; the next command that takes the experiment lock regenerates it)\n"
        }
        return out
    }
}
