import Foundation
import Testing
import TestSupport

/// `gate.infra_retries` against a vendor in an outage: the fake vendor fails a seeded tenth of
/// the requests sent with the held-out account's key (503), and agent.py's client does not
/// retry (the task's run fails with it). The gate's decisions must be those of the same gates
/// with a vendor that never fails.
@Suite("Gate: held-out tasks the model vendor failed are run again", .serialized)
struct InfraRetryTests {
    static let heldOutKey = "sk-held-out-outage-0001"

    static let trainKey = "sk-train-outage"

    /// Squares numbers up to `limit` after one Chat request through the inference gate (urllib:
    /// no retries of its own). A number past `limit`: "?" in train runs; in held-out runs (told
    /// apart by the length of the key's placeholder) agent.py exits 1 before any request, a
    /// failure of its own that no retry may repeat. `tag` makes each version's bytes its own
    /// (the same agent.py is never gated twice).
    static func agent(limit: Int, tag: Int) -> String {
        """
        # version \(tag)
        import json, os, sys, urllib.request

        class HarnessAgent:
            def run(self, instruction):
                n = int(instruction.split()[1])
                key = os.environ["FAKE_API_KEY"]
                if n > \(limit):
                    if len(key) == \(heldOutKey.count):
                        sys.exit(1)
                    return "?"
                body = json.dumps({"model": "m", "messages": [{"role": "user", "content": instruction}]}).encode()
                req = urllib.request.Request("https://%s/v1/chat/completions" % os.environ["FAKE_MODEL"], data=body,
                                             headers={"content-type": "application/json", "authorization": "Bearer " + key})
                urllib.request.urlopen(req, timeout=30).read()
                return str(n * n)
        """
    }

    /// The versions the gates judge, in order: better, equal, worse (the suite catches it).
    static let limits = [2, 3, 3, 5, 4, 6, 6, 7, 2, 8]
    /// What those gates decide against a vendor that never fails (outcome, val_score), as
    /// `outageChangesNoDecision` measures each time: the cluster's test compares with it.
    static let cleanOutcomes = ["score_not_improved 0.3333333333333333", "score_not_improved 0.3333333333333333",
                                "score_not_improved 0.3333333333333333", "accepted 0.6666666666666666", "suite_below_threshold -",
                                "score_not_improved 0.6666666666666666", "score_not_improved 0.6666666666666666",
                                "score_not_improved 0.6666666666666666", "suite_below_threshold -", "score_not_improved 0.6666666666666666"]

    func make(_ model: FakeModel) throws -> Experiment {
        let exp = try CommandAdapterTests().make()
        try exp.set("env_pass", "[FAKE_MODEL, FAKE_API_KEY]", in: "runner")
        try exp.set("inference", "[\"\(model.address)\"]\n    upstream_ca: \(model.caFile)", in: "runner")
        try exp.set("held_out_runtime", "host\n  held_out_env: {FAKE_API_KEY: FAKE_HELD_OUT_KEY}", in: "gate")
        try exp.set("infra_retries", "3", in: "gate")
        try exp.setAgent(Self.agent(limit: 1, tag: 0))
        return exp
    }

    /// agent.py that answers without a model call where `answersWhen` (Python, over `n` and
    /// `key`) holds; elsewhere it starts a generation the vendor answers `slow` s later and exits
    /// `exitAfter` s into it (the sandbox ends mid-call). `key` is the Python expression of its
    /// API key. Under emulation (a held-out VM on a busy host) the call takes seconds to reach
    /// the vendor: give it more.
    static func leavesMidCall(answersWhen: String, key: String = "os.environ[\"FAKE_API_KEY\"]", exitAfter: Int = 2, slow: Int = 20) -> String {
        """
        import json, os, threading, time, urllib.request

        class HarnessAgent:
            def run(self, instruction):
                n = int(instruction.split()[1])
                key = \(key)
                if \(answersWhen):
                    return str(n * n)
                def call():
                    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "SLEEP:\(slow) " + instruction}]}).encode()
                    req = urllib.request.Request("https://%s/v1/chat/completions" % os.environ["FAKE_MODEL"], data=body,
                                                 headers={"content-type": "application/json", "authorization": "Bearer " + key})
                    try:
                        urllib.request.urlopen(req, timeout=60).read()
                    except Exception:
                        pass
                threading.Thread(target=call, daemon=True).start()
                time.sleep(\(exitAfter))
                os._exit(1)
        """
    }

    /// prepare, then one gate per entry of `limits`: each gate's outcome and score, the
    /// experiment and its vendor.
    func gates(outage: Bool, seed: Int) throws -> (outcomes: [String], exp: Experiment, model: FakeModel) {
        let model = try FakeModel(turns: [], outage: outage ? ["--fail-account", Self.heldOutKey, "--fail-rate", "0.1", "--fail-seed", "\(seed)"] : [])
        let exp = try make(model)
        let env = ["FAKE_MODEL": model.address, "FAKE_API_KEY": Self.trainKey, "FAKE_HELD_OUT_KEY": Self.heldOutKey]
        let p = try exp.run(["prepare"], environment: env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        for (i, limit) in Self.limits.enumerated() {
            try exp.setAgent(Self.agent(limit: limit, tag: i + 1))
            let g = try exp.run(["gate"], environment: env)
            try #require(g.status == 0 || g.status == 1, "\(g.stdout)\(g.stderr)")
        }
        let outcomes = try exp.rows("gate_attempt").map { "\($0["outcome"] ?? "-") \($0["valScore"] ?? "-")" }
        return (outcomes, exp, model)
    }

    /// `gates` for a clean vendor and a failing one, side by side (each gate waits out its
    /// reply grid; two experiments share nothing).
    func bothGates() throws -> (clean: (outcomes: [String], exp: Experiment, model: FakeModel),
                                failing: (outcomes: [String], exp: Experiment, model: FakeModel)) {
        final class Slot: @unchecked Sendable { var result: Result<(outcomes: [String], exp: Experiment, model: FakeModel), any Error>? }
        let slot = Slot()
        let done = DispatchSemaphore(value: 0)
        Thread { [self] in
            slot.result = Result { try gates(outage: false, seed: 0) }
            done.signal()
        }.start()
        let failing = try gates(outage: true, seed: 7)
        done.wait()
        return (try #require(slot.result).get(), failing)
    }

    @Test("a vendor failing 10% of held-out calls with 503: 10 seeded gates decide as they do with no failures; the retries are in the ledger, match the vendor's own count and are shown to the operator; held-out runs where agent.py exits 1 are not")
    func outageChangesNoDecision() throws {
        let (clean, failing) = try bothGates()
        defer { clean.exp.removeScratch(); failing.exp.removeScratch() }
        #expect(failing.outcomes == clean.outcomes, "with failures:\n\(failing.outcomes.joined(separator: "\n"))\nwithout:\n\(clean.outcomes.joined(separator: "\n"))")
        // Not one decision: some accepted, some rejected.
        #expect(Set(clean.outcomes.map { $0.split(separator: " ")[0] }).count > 1, "\(clean.outcomes)")
        #expect(clean.outcomes == Self.cleanOutcomes, "\(clean.outcomes)")

        // What the vendor failed is what the gates counted, baseline included; every failed
        // run was run again, and none was left failed (3 retries).
        let failed = failing.model.requests().filter { $0["failed"] != nil }.count
        let rows = try failing.exp.rows("gate_attempt")
        let baseline = try #require(try failing.exp.rows("baseline").first)
        let accounts = ([baseline] + rows).compactMap { $0["infraRetries"] as? [String: Any] }
        let counted = accounts.reduce(0) { $0 + ($1["failures"] as? Int ?? 0) }
        let retried = accounts.reduce(0) { $0 + ($1["retried"] as? Int ?? 0) }
        #expect(failed > 0 && counted == failed && retried == failed, "vendor failed \(failed), gates counted \(counted), retried \(retried)")
        #expect(accounts.allSatisfy { ($0["unresolved"] as? Int) == 0 }, "\(accounts)")
        // Train runs (the other key) were never failed, and carry no account.
        #expect(try failing.exp.rows("train_run").allSatisfy { $0["infraRetries"] == nil })
        // The run with no vendor failures records none.
        #expect(try clean.exp.rows("gate_attempt").allSatisfy { $0["infraRetries"] == nil })

        // Held-out runs where agent.py exited 1 (its own failure, no request) happened, and
        // were not retried: every retry above is one the vendor failed.
        let crashed = failing.model.requests().count
        #expect(rows.contains { ($0["valScore"] as? Double).map { $0 < 1 } == true } && crashed > 0)

        // The operator sees the retries; the coding agent's status does not.
        let op = try failing.exp.run(["status", "--operator"], environment: [:])
        #expect(op.stdout.contains("model vendor failures") && op.stdout.contains("\(retried) task run(s) repeated in all"), "\(op.stdout)")
        #expect(try failing.exp.run(["report"], environment: [:]).status == 0)
        #expect(try failing.exp.file("report.html").contains("model vendor: "), "the report shows the account")
        let agentView = try failing.exp.run(["status"], environment: [:])
        #expect(agentView.status == 0 && !agentView.stdout.contains("vendor"), "\(agentView.stdout)")
    }

    @Test("agent.py that exits in the middle of a slow generation buys no retry: the proxy cut the vendor's connection itself, once the sandbox ended, and that is not counted as the vendor's failure")
    func leavingMidCallIsNotTheVendors() throws {
        let model = try FakeModel(turns: [])
        let exp = try make(model)
        defer { exp.removeScratch() }
        // In held-out runs (told apart by the key's length), on sq-1 to sq-5.
        try exp.setAgent(Self.leavesMidCall(answersWhen: "n > 5 or len(key) != \(Self.heldOutKey.count)"))
        let env = ["FAKE_MODEL": model.address, "FAKE_API_KEY": Self.trainKey, "FAKE_HELD_OUT_KEY": Self.heldOutKey]
        let p = try exp.run(["prepare"], environment: env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        // The attempt was made: every baseline run of sq-1..5 had its generation at the vendor.
        #expect(model.requests().filter { $0["slow"] != nil }.count == 5, "\(model.requests())")
        let baseline = try #require(try exp.rows("baseline").first)
        #expect(baseline["infraRetries"] == nil, "\(baseline)")
        #expect(!p.stderr.contains("run again (gate.infra_retries)"), "\(p.stderr)")
    }
}
