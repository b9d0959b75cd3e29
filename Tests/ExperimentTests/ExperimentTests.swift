@testable import Experiment
@testable import Evidence
@testable import Execution
@testable import ExperimentModel
import Foundation
import Testing
import TestSupport

// End-to-end tests of the supervisor-side loop through the CLI: real sandboxes, real git,
// real SQLite, on the committed `arith` fixture benchmark (12 tasks: 6 add, 6 multiply).

enum Agents {
    /// Solves nothing (the template's behaviour).
    static let none = """
        class HarnessAgent:
            def run(self, instruction, workdir):
                print("nothing to do")
        """
    /// Solves additions only.
    static let addOnly = solver(ops: ["add": "a + b"])
    /// Solves both kinds.
    static let all = solver(ops: ["add": "a + b", "multiply": "a * b"])
    /// Takes far longer than a gate can wait (for the kill -9 test).
    static let slow = """
        import time
        class HarnessAgent:
            def run(self, instruction, workdir):
                time.sleep(15)
        """

    static func solver(ops: [String: String]) -> String {
        let cases = ops.map { "        if op == \"\($0.key)\": result = \($0.value)" }.sorted().joined(separator: "\n")
        return """
            import os
            class HarnessAgent:
                def run(self, instruction, workdir):
                    line = instruction.splitlines()[0]
                    _, op, a, b = line.split()
                    a, b = int(a), int(b)
                    result = None
            \(cases)
                    if result is not None:
                        with open(os.path.join(workdir, "answer.txt"), "w") as f:
                            f.write(str(result))
                    print("op", op, "->", result)
            """
    }
}

struct Experiment {
    let root: String
    let temp: TempDir
    /// Where `run` and `start` start the supervisor (CgroupEnclosure): set by tests that kill
    /// one and watch the next start sweep what it left, out of reach of other suites' sweeps.
    var enclosure: CgroupEnclosure?

    static let fixture = Built.packageRoot + "/Tests/ExperimentTests/Fixtures/arith"

    /// init + prepare on the fixture.
    init(prepare: Bool = true, config: [String: String] = [:], dataset: String = Experiment.fixture) throws {
        temp = try TempDir()
        root = temp.path + "/exp"
        let r = try autoharness(["init", root, "--benchmark", "local", "--dataset", dataset])
        try #require(r.status == 0, "init failed: \(r.stderr)")
        // Tests choose where held-out tasks run; the default (auto) would follow the host's KVM.
        var config = config
        if config["held_out_runtime"] == nil { config["held_out_runtime"] = "host" }
        if !config.isEmpty {
            var text = try String(contentsOfFile: root + "/experiment_config.yaml", encoding: .utf8)
            for (k, v) in config {
                text = text.replacingOccurrences(of: "\n  \(k): ", with: "\n  \(k): \(v) #", options: [], range: nil)
                text = text.replacingOccurrences(of: "\n\(k): ", with: "\n\(k): \(v) #")
            }
            try text.write(toFile: root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
        }
        if prepare {
            let p = try self.run("prepare")
            try #require(p.status == 0, "prepare failed: \(p.stdout) \(p.stderr)")
        }
    }

    /// An experiment created elsewhere (kept alive by `temp`).
    init(existing root: String, temp: TempDir) {
        self.root = root
        self.temp = temp
    }

    func run(_ args: String...) throws -> Run { try run(args) }
    func run(_ args: [String]) throws -> Run {
        guard let enclosure else { return try autoharness(args + ["-C", root]) }
        let c = enclosure.wrap(Built.autoharness, args + ["-C", root])
        return try runProcess(c.exe, c.args)
    }

    /// `autoharness ARGS -C root` in the background, output discarded.
    func start(_ args: String...) throws -> Process {
        let p = Process()
        let c = enclosure?.wrap(Built.autoharness, args + ["-C", root]) ?? (exe: Built.autoharness, args: args + ["-C", root])
        p.executableURL = URL(fileURLWithPath: c.exe)
        p.arguments = c.args
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        return p
    }

    /// Sets `gate.accept` (min_improvement commented out: margin's alone) and `gate.trials`
    /// in the template's config, before prepare.
    func acceptRule(_ rule: String, trials: Int = 1, alpha: Double? = nil) throws {
        let path = root + "/experiment_config.yaml"
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let configured = text.replacingOccurrences(of: "\n  accept: margin ", with: "\n  accept: \(rule) ")
            .replacingOccurrences(of: "\n  min_improvement: auto", with: "\n  # min_improvement: auto")
            .replacingOccurrences(of: "\n  trials: 1 ", with: "\n  trials: \(trials) ")
            .replacingOccurrences(of: "\n  # alpha: 0.05 ", with: alpha.map { "\n  alpha: \($0) " } ?? "\n  # alpha: 0.05 ")
        try #require(configured.contains("\n  accept: \(rule) ") && configured.contains("\n  trials: \(trials) "))
        try configured.write(toFile: path, atomically: true, encoding: .utf8)
    }

    func setAgent(_ source: String) throws {
        try source.write(toFile: root + "/agent/agent.py", atomically: true, encoding: .utf8)
    }

    func split() throws -> (train: [String], test: [String]) {
        let data = try Data(contentsOf: URL(fileURLWithPath: root + "/.autoharness/split.json"))
        let obj = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        return (obj["train"] as? [String] ?? [], obj["test"] as? [String] ?? [])
    }

    func file(_ rel: String) throws -> String { try String(contentsOfFile: root + "/" + rel, encoding: .utf8) }

    /// Every regular file under the experiment whose contents include `needle` (relative paths).
    func filesContaining(_ needle: String) -> [String] {
        files(under: root, containing: needle).map { String($0.dropFirst(root.count + 1)) }
    }

    func sqlite(_ sql: String) throws {
        let r = try runProcess("/usr/bin/python3", ["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.executescript(sys.argv[2]); c.commit()",
                                                   root + "/.autoharness/ledger.sqlite", sql])
        try #require(r.status == 0, "sqlite: \(r.stderr)")
    }
}

@Suite("Experiments: prepare, benchmark, gate, status")
struct ExperimentTests {
    @Test("init, prepare, benchmark, gate accept, gate reject, tie: upstream-format views and an honest history")
    func fullCycle() throws {
        try requireRoot()
        let exp = try Experiment()
        let split = try exp.split()
        #expect(split.train.count == 8 && split.test.count == 4)
        #expect(Set(split.train).isDisjoint(with: split.test))
        let splitAttrs = try FileManager.default.attributesOfItem(atPath: exp.root + "/.autoharness/split.json")
        #expect((splitAttrs[.posixPermissions] as? Int) == 0o600)
        #expect(try exp.file("workspace/results.tsv").hasPrefix("iteration\tval_score\tcommit\tevals_passed\tevals_total\ttimestamp\tdescription\n0\t0.0000\tbaseline\t0\t0\t"))

        // First train run: nothing passes; traces go to latest/ and baseline/.
        let b = try exp.run("benchmark")
        #expect(b.status == 0, "\(b.stderr)")
        #expect(b.stdout.contains("train: 0/8 passed"))
        for id in split.train {
            #expect(FileManager.default.fileExists(atPath: exp.root + "/workspace/traces/latest/\(id)/instruction.md"))
            #expect(FileManager.default.fileExists(atPath: exp.root + "/workspace/traces/baseline/\(id)/instruction.md"))
        }
        let tr = try #require(JSONSerialization.jsonObject(with: Data(try exp.file("workspace/train_results.json").utf8)) as? [String: Any])
        #expect(tr["split"] as? String == "train")
        #expect((tr["results"] as? [String: Any])?.count == 8)

        // A real improvement is accepted and committed by the supervisor.
        try exp.setAgent(Agents.all)
        let g1 = try exp.run("gate")
        #expect(g1.status == 0, "\(g1.stdout) \(g1.stderr)")
        #expect(g1.stdout.contains("ACCEPTED"))
        #expect(g1.stdout.contains("val_score: 1.00"))
        let rows = try exp.file("workspace/results.tsv").split(separator: "\n")
        #expect(rows.count == 3)
        let row1 = rows[2].split(separator: "\t")
        #expect(row1[0] == "1" && row1[1] == "1.0000" && row1[2].count == 7)
        let suite = try #require(JSONSerialization.jsonObject(with: Data(try exp.file("workspace/suite.json").utf8)) as? [String: Any])
        #expect(Set(suite["tasks"] as? [String] ?? []) == Set(split.train))
        #expect(suite["threshold"] as? Double == 0.8)
        let committed = try runProcess("/usr/bin/git", ["-C", exp.root, "show", "HEAD:agent/agent.py"])
        #expect(committed.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == Agents.all.trimmingCharacters(in: .whitespacesAndNewlines))

        // A regression on the suite is rejected, and nothing is committed.
        let head = try runProcess("/usr/bin/git", ["-C", exp.root, "rev-parse", "HEAD"]).stdout
        try exp.setAgent(Agents.addOnly)
        let g2 = try exp.run("gate")
        #expect(g2.status == 1)
        let addInTrain = split.train.filter { $0.hasPrefix("add-") }.count
        #expect(g2.stdout.contains("REJECTED") && g2.stdout.contains("suite pass rate \(addInTrain)/8"), "\(g2.stdout)")
        // A tie with the best score does not pass.
        try exp.setAgent(Agents.all + "\n# same behaviour, new bytes\n")
        let g3 = try exp.run("gate")
        #expect(g3.status == 1)
        #expect(g3.stdout.contains("did not beat the best"))
        #expect(try runProcess("/usr/bin/git", ["-C", exp.root, "rev-parse", "HEAD"]).stdout == head)

        let status = try exp.run("status", "--json", "--verify")
        #expect(status.status == 0, "\(status.stdout) \(status.stderr)")
        let st = try #require(JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])
        #expect((st["iterations"] as? [Any])?.count == 2)
        #expect((st["gate_attempts"] as? [Any])?.count == 3)
        #expect((st["verify"] as? [String: Any])?["ok"] as? Bool == true)

        // No test-task instruction text anywhere under the experiment (train markers are in
        // the traces, which shows the scan can find them).
        for id in split.test { #expect(exp.filesContaining("MARKER-\(id)-a91f").isEmpty, "\(id) leaked") }
        #expect(!exp.filesContaining("MARKER-\(split.train[0])-a91f").isEmpty)
    }

    @Test("prepare warns when the test split is too small for the gate's improvement rule, with the numbers and the setting that works")
    func smallSplitWarning() throws {
        try requireRoot()
        let exp = try Experiment(prepare: false)
        let p = try exp.run("prepare")
        #expect(p.status == 0, "\(p.stderr)")
        #expect(p.stderr.contains("warning: the test split has 4 task(s) and min_improvement auto is 1/4: a gate is accepted only when at least 2 more held-out task(s) pass than the best so far; from this baseline (0/4 pass) at most 2 gate(s) can ever be accepted. `gate.min_improvement: 0` accepts"), "\(p.stderr)")
        let zero = try Experiment(prepare: false, config: ["min_improvement": "0"])
        let q = try zero.run("prepare")
        // Still under 10 tasks: said, but with one task a step and no advice to change it.
        #expect(q.stderr.contains("at least 1 more held-out task(s) pass") && q.stderr.contains("at most 4 gate(s)") && !q.stderr.contains("accepts any strictly higher"), "\(q.stderr)")
        // The arithmetic, on splits prepare would not make here.
        typealias S = ExperimentSupervisor
        #expect(S.smallSplitWarning(testTasks: 6, testPassed: 5, minImprovement: nil)?.contains("no gate can ever be accepted") == true)
        #expect(S.smallSplitWarning(testTasks: 40, testPassed: 10, minImprovement: nil) == nil)
        #expect(S.smallSplitWarning(testTasks: 40, testPassed: 39, minImprovement: nil)?.contains("(39/40 pass) no gate can ever be accepted") == true)
        #expect(S.smallSplitWarning(testTasks: 20, testPassed: 0, minImprovement: 0.5)?.contains("at least 11 more") == nil)
        #expect(S.smallSplitWarning(testTasks: 20, testPassed: 10, minImprovement: 0.5)?.contains("at least 11 more") == true)
    }

    @Test("a task whose agent crashes counts 0 over the whole test split; it is not dropped from the mean")
    func crashesCountAsZero() throws {
        try requireRoot()
        let exp = try Experiment(config: ["disclosure": "score", "min_improvement": "0"])
        let split = try exp.split()
        let addInTest = split.test.filter { $0.hasPrefix("add-") }.count
        try #require(addInTest > 0 && addInTest < split.test.count, "fixture split needs both kinds in test")
        // Solves additions, crashes on everything else.
        try exp.setAgent(Agents.addOnly.replacingOccurrences(of: "        if result is not None:", with: "        if result is None:\n            raise RuntimeError('cannot')\n        if result is not None:"))
        let g = try exp.run("gate")
        #expect(g.status == 0, "\(g.stdout) \(g.stderr)")
        let expected = String(format: "%.4f", Double(addInTest) / Double(split.test.count))
        #expect(g.stdout.contains("val_score: \(expected)"), "\(g.stdout)")
    }

    @Test("the ratchet follows PROGRAM.md's flow: a candidate benchmarked before its gate (its run marks the tasks it fixed as passing) still has them promoted")
    func ratchetAfterCandidateBenchmark() throws {
        try requireRoot()
        let exp = try Experiment()
        let (train, _) = try exp.split()
        // The template agent.py fails every train task; then the candidate, benchmarked as
        // PROGRAM.md step 4 says, passes them all, and its gate is accepted.
        let baseline = try exp.run("benchmark")
        #expect(baseline.stdout.contains("0/8 passed"), "\(baseline.stdout)")
        try exp.setAgent(Agents.all)
        #expect(try exp.run("benchmark").status == 0)
        let g = try exp.run("gate")
        #expect(g.stdout.contains("ACCEPTED"), "\(g.stdout) \(g.stderr)")
        let suite = try #require(JSONSerialization.jsonObject(with: Data(try exp.file("workspace/suite.json").utf8)) as? [String: Any])
        #expect(Set(suite["tasks"] as? [String] ?? []) == Set(train), "promoted: \(suite["tasks"] ?? "none")")
    }

    @Test("loop.review: operator: an accepted gate's promotions wait for the operator (listed by status --operator, not promoted again meanwhile); suite approve takes them in, suite retire takes a task out for good; each decision a ledger row in the report")
    func operatorReview() throws {
        try requireRoot()
        let exp = try Experiment(config: ["review": "operator", "min_improvement": "0"])
        let train = try exp.split().train
        func suite() throws -> Set<String> {
            let j = try #require(JSONSerialization.jsonObject(with: Data(try exp.file("workspace/suite.json").utf8)) as? [String: Any])
            return Set(j["tasks"] as? [String] ?? [])
        }
        try exp.setAgent(Agents.addOnly)
        #expect(try exp.run("gate").stdout.contains("ACCEPTED"))
        let first = Set(try #require(try exp.rows("gate_attempt").last?["promoted"] as? [String]))
        let afterFirst = try suite()
        #expect(!first.isEmpty && first.allSatisfy { $0.hasPrefix("add") } && afterFirst.isEmpty, "\(first)")
        let op = try exp.run("status", "--operator").stdout
        #expect(op.contains("waiting for your review") && first.allSatisfy(op.contains), "\(op)")
        // Pending tasks are not candidates again: the next accepted gate promotes the others.
        try exp.setAgent(Agents.all)
        #expect(try exp.run("gate").stdout.contains("ACCEPTED"))
        let second = Set(try #require(try exp.rows("gate_attempt").last?["promoted"] as? [String]))
        #expect(second.isDisjoint(with: first) && first.union(second) == Set(train), "\(second)")
        let afterSecond = try suite()
        #expect(afterSecond.isEmpty)
        // The operator's review.
        let approve = try exp.run("suite", "approve", "--reason", "read every trace")
        let approved = try suite()
        #expect(approve.status == 0 && approved == Set(train), "\(approve.stdout)\(approve.stderr)")
        let retired = try #require(first.sorted().first)
        #expect(try exp.run("suite", "retire", retired, "--reason", "flaky verifier").status == 0)
        let afterRetire = try suite()
        #expect(afterRetire == Set(train).subtracting([retired]))
        let again = try exp.run("suite", "approve", retired, "--reason", "changed my mind")
        #expect(again.status != 0 && again.stderr.contains("is not waiting for approval"), "\(again.stderr)")
        let reviews = try exp.rows("suite_review")
        #expect(reviews.count == train.count + 1 && reviews.last?["action"] as? String == "retire" && reviews.last?["reason"] as? String == "flaky verifier")
        #expect(try exp.run("report").status == 0)
        let html = try exp.file("report.html")
        #expect(html.contains("<h2>Suite review</h2>") && html.contains("flaky verifier") && html.contains("read every trace"))
    }

    @Test("gate.accept: at_least_best accepts a tie with the best (NeoSigma's rule), and prepare and status state the rule in force")
    func atLeastBestAcceptsATie() throws {
        try requireRoot()
        let exp = try Experiment(prepare: false)
        try exp.acceptRule("at_least_best")
        let p = try exp.run("prepare")
        #expect(p.status == 0 && p.stdout.contains("gate.accept: at_least_best"), "\(p.stdout) \(p.stderr)")
        try exp.setAgent(Agents.none + "\n# new bytes, the baseline's behaviour\n")
        let g = try exp.run("gate")
        #expect(g.stdout.contains("ACCEPTED"), "a tie passes: \(g.stdout) \(g.stderr)")
        #expect(try exp.run("status").stdout.contains("gate rule: gate.accept: at_least_best"))
    }

    @Test("gate.trials: 3 runs each held-out task three times in the baseline and in a gate (three rewards per task), and gate.accept: paired accepts a real fix with its test shown to the operator only")
    func pairedTrials() throws {
        try requireRoot()
        let exp = try Experiment(prepare: false)
        // Four test tasks: all four up is p = 1/16, so alpha 0.1.
        try exp.acceptRule("paired", trials: 3, alpha: 0.1)
        let p = try exp.run("prepare")
        #expect(p.status == 0 && p.stdout.contains("gate.accept: paired (alpha 0.1, 3 trial(s) per held-out task)"), "\(p.stdout) \(p.stderr)")
        let test = try exp.split().test
        let baseline = try #require(try exp.rows("baseline").first?["heldOutTrials"] as? [String: Any])
        #expect(baseline["trials"] as? Int == 3 && (baseline["rewards"] as? [[Double]])?.map(\.count) == test.map { _ in 3 }, "\(baseline)")
        try exp.setAgent(Agents.all)
        let g = try exp.run("gate")
        #expect(g.stdout.contains("ACCEPTED"), "\(g.stdout) \(g.stderr)")
        let attempt = try #require(try exp.rows("gate_attempt").last)
        // Solved every time, three times over: three rewards per task, one per trial.
        let rewards = try #require((attempt["heldOutTrials"] as? [String: Any])?["rewards"] as? [[Double]])
        #expect(rewards == test.map { _ in [1, 1, 1] }, "\(rewards)")
        // By position: no held-out id in the attempt's row.
        let row = String(decoding: try JSONSerialization.data(withJSONObject: attempt), as: UTF8.self)
        for id in test { #expect(!row.contains("\"\(id)\""), "\(id)") }
        let paired = try #require(attempt["pairedTest"] as? [String: Any])
        // Every test task from 0 to 1: p = 2^-N (the fixture's split has enough tasks).
        #expect(paired["pValue"] as? Double == pow(2, -Double(test.count)) && paired["trials"] as? Int == 3 && paired["tasks"] as? Int == test.count
                && paired["meanDifference"] as? Double == 1, "\(paired)")
        // The operator sees the test; the coding agent's gate answer and status do not.
        #expect(try exp.run("status", "--operator").stdout.contains("paired test, gate attempt 1: mean difference +1.0000 over \(test.count) held-out task(s)"))
        for out in [g.stdout, try exp.run("status").stdout] { #expect(!out.contains("paired test, gate attempt") && !out.contains("mean difference"), "\(out)") }
        // The report (the operator's) shows it with the attempt.
        #expect(try exp.run("report").status == 0)
        let html = try exp.file("report.html")
        #expect(html.contains("3 trials per held-out task") && html.contains("paired test: mean difference +1.0000, p \(String(format: "%.4f", pow(2, -Double(test.count))))"), "report")
        // The evidence bundle claims the test against alpha (registered before the gate ran),
        // and the verifier checks the claim's arithmetic.
        let out = exp.temp.path + "/gate1.json"
        let e = try exp.run("evidence", "export", "1", "-o", out)
        try #require(e.status == 0, "\(e.stdout)\(e.stderr)")
        let verified = try runProcess(Built.autoharness, ["evidence", "verify", out, "--json", "--allow-untrusted-key"])
        let statement = try #require((try JSONSerialization.jsonObject(with: Data(verified.stdout.utf8)) as? [String: Any])?["statement"] as? [String: Any], "\(verified.stderr)")
        let predicate = try #require(statement["predicate"] as? [String: Any])
        let claim = (predicate["claims"] as? [[String: Any]])?.first { $0["metric"] as? String == "paired_p" }
        #expect(claim?["comparator"] as? String == "<=" && claim?["threshold"] as? Double == 0.1 && claim?["passed"] as? Bool == true, "\(predicate)")
        let criteria = (predicate["gate"] as? [String: Any])?["criteria"] as? [String: Any] ?? predicate["criteria"] as? [String: Any]
        #expect(criteria?["trials"] as? Int == 3 && criteria?["alpha"] as? Double == 0.1 && criteria?["pairedAgainst"] as? Int == 0, "\(String(describing: criteria))")
    }

    @Test("a rejected gate promotes nothing and commits nothing")
    func rejectedGatePromotesNothing() throws {
        try requireRoot()
        let exp = try Experiment()
        #expect(try exp.run("benchmark").status == 0)
        let suiteBefore = try exp.file("workspace/suite.json")
        let head = try runProcess("/usr/bin/git", ["-C", exp.root, "rev-parse", "HEAD"]).stdout
        try exp.setAgent(Agents.none)  // ties the baseline's 0: rejected at step 2
        let g = try exp.run("gate")
        #expect(g.status == 1)
        #expect(try exp.file("workspace/suite.json") == suiteBefore)
        #expect(try runProcess("/usr/bin/git", ["-C", exp.root, "rev-parse", "HEAD"]).stdout == head)
        let st = try #require(JSONSerialization.jsonObject(with: Data(try exp.run("status", "--json").stdout.utf8)) as? [String: Any])
        #expect((st["gate_attempts"] as? [[String: Any]])?.first?["accepted"] as? Bool == false)
        #expect((st["suite"] as? [String])?.isEmpty == true)
    }

    @Test("refused calls made only by held-out tasks are recorded but withheld from status (review F1)")
    func heldOutViolationsWithheld() throws {
        try requireRoot()
        let exp = try Experiment()
        let test = try exp.split().test
        // Solves everything; signals through refused syscalls on held-out tasks only.
        try exp.setAgent(Agents.all + """

            import ctypes
            _run = HarnessAgent.run
            def run(self, instruction, workdir):
                _run(self, instruction, workdir)
                if any(f"MARKER-{t}-" in instruction for t in \(test)):
                    ctypes.CDLL(None).syscall(101, 16, 1, 0, 0)  # ptrace(PTRACE_ATTACH, 1)
            HarnessAgent.run = run
            """)
        #expect(try exp.run("gate").status == 0)
        let agentView = try exp.run("status", "--json").stdout
        #expect(!agentView.contains("ptrace"), "\(agentView)")
        let operatorView = try exp.run("status", "--json", "--operator").stdout
        #expect(operatorView.contains("ptrace"))
        #expect(operatorView.contains("held-out"))
    }

    @Test("progress never names a held-out task or its result (review F2)")
    func progressHidesHeldOutTasks() throws {
        try requireRoot()
        let exp = try Experiment()
        let test = Set(try exp.split().test)
        try exp.setAgent(Agents.all)
        let supervisor = try ExperimentSupervisor(layout: ExperimentLayout(root: exp.root),
                                                  policySearchPaths: [Built.packageRoot + "/policies"], purpose: "test")
        final class Seen: @unchecked Sendable { var ids: [String?] = [] }
        let seen = Seen()
        supervisor.progress = { _, _, outcome in seen.ids.append(outcome?.id) }
        let r = try supervisor.gate()
        #expect(r.accepted)
        #expect(seen.ids.contains(nil))  // the test phase reported progress, anonymously
        #expect(seen.ids.compactMap { $0 }.allSatisfy { !test.contains($0) }, "\(seen.ids)")
        // No log was set: the held-out runs' page cache was evicted all the same (the
        // journal goes only after the eviction).
        #expect(!FileManager.default.fileExists(atPath: supervisor.layout.heldOutJournal))
    }

    @Test("with disclosure decision no score appears in status or the commit message (review F3); results.tsv still reads with upstream's reader, and gate -m is the commit's body and its description")
    func decisionDisclosureHidesScores() throws {
        try requireRoot()
        let exp = try Experiment(config: ["disclosure": "decision"])
        try exp.setAgent(Agents.addOnly)
        #expect(try exp.run("gate", "-m", "adds first:\tthe rest\nnext").status == 0)
        let st = try #require(JSONSerialization.jsonObject(with: Data(try exp.run("status", "--json").stdout.utf8)) as? [String: Any])
        #expect(st["best"] is NSNull)
        #expect((st["iterations"] as? [[String: Any]])?.allSatisfy { $0["val_score"] is NSNull } == true)
        let message = try runProcess("/usr/bin/git", ["-C", exp.root, "log", "-1", "--format=%B"]).stdout
        #expect(!message.contains("0."), "\(message)")
        // The message, one line (its tab and line break made spaces), as the commit's body.
        #expect(message.split(separator: "\n", omittingEmptySubsequences: false).dropFirst().prefix(3).contains("adds first: the rest next"), "\(message)")
        // Upstream's reader (gating.py, best_val_score) skips the empty score instead of
        // failing on it, and sees the description column.
        let read = try runProcess("/usr/bin/python3", ["-c", """
            import csv, sys
            rows = list(csv.DictReader(open(sys.argv[1], newline=""), delimiter="\\t"))
            scores = [float(r["val_score"]) for r in rows if r.get("val_score")]
            print(len(rows), scores, rows[-1]["description"])
            """, exp.root + "/workspace/results.tsv"])
        #expect(read.status == 0 && read.stdout == "2 [] adds first: the rest next\n", "\(read.stdout)\(read.stderr)")
    }

    @Test("a symlink in place of agent/agent.py is refused, not followed to its target")
    func symlinkedAgentRefused() throws {
        try requireRoot()
        let exp = try Experiment()
        let secret = try exp.temp.file("secret.py", Agents.all)
        try FileManager.default.removeItem(atPath: exp.root + "/agent/agent.py")
        try FileManager.default.createSymbolicLink(atPath: exp.root + "/agent/agent.py", withDestinationPath: secret)
        let g = try exp.run("gate")
        #expect(g.status == 2, "a refused agent.py is the experiment's state, not a rejection")
        #expect(g.stderr.contains("agent/agent.py") && g.stderr.contains("symbolic link, which is never followed"), "\(g.stderr)")
        let st = try #require(JSONSerialization.jsonObject(with: Data(try exp.run("status", "--json").stdout.utf8)) as? [String: Any])
        #expect((st["gate_attempts"] as? [Any])?.isEmpty == true)
    }

    @Test("benchmark refuses held-out and unknown ids alike, runs nothing, and records the refusal")
    func testIdsRefused() throws {
        try requireRoot()
        let exp = try Experiment()
        let split = try exp.split()
        for id in [split.test[0], "no-such-task"] {
            let r = try exp.run("benchmark", "--task-ids", split.train[0], id)
            #expect(r.status == 2)
            #expect(r.stderr.contains("not train tasks (unknown or held out): \(id)"))
        }
        #expect(!FileManager.default.fileExists(atPath: exp.root + "/workspace/traces/latest/\(split.train[0])"))
        let st = try #require(JSONSerialization.jsonObject(with: Data(try exp.run("status", "--json").stdout.utf8)) as? [String: Any])
        let violations = st["violations"] as? [[String: Any]] ?? []
        #expect(violations.filter { ($0["kind"] as? String) == "refused_task_ids" }.count == 2)
    }

    @Test("editing a view changes nothing the gate uses, and status --verify reports it")
    func viewEditsDetected() throws {
        try requireRoot()
        let exp = try Experiment()
        // Claim a perfect history and an empty suite in the views.
        try "iteration\tval_score\tcommit\tevals_passed\tevals_total\ttimestamp\n0\t0.0000\tbaseline\t0\t0\tx\n1\t0.0100\tfake\t0\t0\tx\n"
            .write(toFile: exp.root + "/workspace/results.tsv", atomically: true, encoding: .utf8)
        let v = try exp.run("status", "--verify")
        #expect(v.status == 1)
        #expect(v.stdout.contains("view differs from the ledger (tampered): \(exp.root)/workspace/results.tsv"))
        // The fake 0.01 "best" does not lower the bar: the gate still compares with the ledger.
        try exp.setAgent(Agents.none)
        let g = try exp.run("gate")
        #expect(g.stdout.contains("did not beat the best"))
        #expect(try exp.file("workspace/results.tsv").contains("fake") == false)  // regenerated from the ledger

        // A fake that *lowers* the bar tells the two apart: after a real accepted score, the
        // view claims the best is 0; the same behaviour again would beat the view's best by far,
        // and ties the ledger's.
        try exp.setAgent(Agents.addOnly)
        let accepted = try exp.run("gate")
        #expect(accepted.status == 0, "\(accepted.stdout)")
        let real = try exp.file("workspace/results.tsv")
        let lowered = real.split(separator: "\n").map { line -> String in
            var f = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            if f.first == "1" { f[1] = "0.0000" }
            return f.joined(separator: "\t")
        }.joined(separator: "\n") + "\n"
        #expect(lowered != real)
        try lowered.write(toFile: exp.root + "/workspace/results.tsv", atomically: true, encoding: .utf8)
        try exp.setAgent(Agents.addOnly + "\n# the same behaviour, new bytes\n")
        let again = try exp.run("gate")
        #expect(again.status == 1 && again.stdout.contains("did not beat the best"), "the gate read the ledger's best, not the view's: \(again.stdout)")
    }

    @Test("edited, deleted and reordered ledger rows are detected and named")
    func ledgerTamperingDetected() throws {
        try requireRoot()
        let exp = try Experiment()
        let ok = try exp.run("status", "--verify")
        #expect(ok.status == 0, "\(ok.stdout)")
        // Raise the baseline score in place (the triggers only stop mistakes, not file access).
        try exp.sqlite("DROP TRIGGER IF EXISTS records_no_update; DROP TRIGGER IF EXISTS records_no_delete; " +
                       "UPDATE records SET payload = replace(payload, '\"valScore\":0', '\"valScore\":0.9') WHERE kind = 'baseline';")
        let edited = try exp.run("status", "--verify")
        #expect(edited.status == 1)
        #expect(edited.stdout.contains("edited"), "\(edited.stdout)")
        #expect(edited.stdout.contains("row 3") || edited.stdout.contains("row 4"), "\(edited.stdout)")
    }

    @Test("deleting a middle ledger row is detected")
    func ledgerDeletionDetected() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.sqlite("DROP TRIGGER IF EXISTS records_no_update; DROP TRIGGER IF EXISTS records_no_delete; DELETE FROM records WHERE seq = 2;")
        let r = try exp.run("status", "--verify")
        #expect(r.status == 1)
        #expect(r.stdout.contains("row 2"), "\(r.stdout)")
    }

    @Test("cutting the ledger's tail after an accepted gate is caught through the commit's Ledger-Head")
    func ledgerTruncationDetected() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.setAgent(Agents.all)
        #expect(try exp.run("gate").status == 0)
        let trailer = try runProcess("/usr/bin/git", ["-C", exp.root, "log", "-1", "--format=%(trailers:key=Ledger-Head,valueonly)"])
        let seq = try #require(Int(trailer.stdout.split(separator: ":").first ?? ""))
        // Remove the accepted gate and everything after the head the commit recorded.
        try exp.sqlite("DROP TRIGGER IF EXISTS records_no_update; DROP TRIGGER IF EXISTS records_no_delete; DELETE FROM records WHERE seq >= \(seq);")
        let r = try exp.run("status", "--verify")
        #expect(r.status == 1)
        #expect(r.stdout.contains("truncated"), "\(r.stdout)")
    }

    @Test("kill -9 of the supervisor during a gate leaves a consistent, verifiable ledger")
    func killDuringGate() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.setAgent(Agents.slow)
        let p = try exp.start("gate")
        // Wait until the gate has started (its record is in the ledger), then kill it.
        var started = false
        for _ in 0..<100 where !started {
            usleep(50_000)
            let st = try exp.run("status", "--json")
            started = st.stdout.contains("\"prepared\"") && (try? Data(contentsOf: URL(fileURLWithPath: exp.root + "/.autoharness/ledger.sqlite")))
                .map { $0.range(of: Data("gate_started".utf8)) != nil } ?? false
        }
        usleep(300_000)
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        let v = try exp.run("status", "--verify")
        #expect(v.status == 0, "\(v.stdout)")
        // The next supervisor records the interrupted attempt (never a half-recorded one) and works.
        try exp.setAgent(Agents.all)
        let g = try exp.run("gate")
        #expect(g.status == 0, "\(g.stdout) \(g.stderr)")
        let st = try #require(JSONSerialization.jsonObject(with: Data(try exp.run("status", "--json", "--verify").stdout.utf8)) as? [String: Any])
        let attempts = st["gate_attempts"] as? [[String: Any]] ?? []
        #expect(attempts.first?["reason"] as? String == "interrupted")
        #expect(attempts.last?["accepted"] as? Bool == true)
        #expect((st["iterations"] as? [Any])?.count == 2)
        #expect((st["verify"] as? [String: Any])?["ok"] as? Bool == true)
    }

    @Test("a second supervisor on the same experiment is refused, naming the holder")
    func secondSupervisorRefused() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.setAgent(Agents.slow)
        let p = try exp.start("benchmark")
        defer {
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
        }
        usleep(700_000)
        let r = try exp.run("gate")
        #expect(r.status == 4, "lock busy has its own exit code: \(r.status)")
        #expect(r.stderr.contains("\(p.processIdentifier)"), "\(r.stderr)")
        // Reading is still possible while the other supervisor works.
        #expect(try exp.run("status").status == 0)
    }

    @Test("config errors name the line, the key and the allowed values")
    func configErrors() throws {
        let text = "benchmark: local\ndataset: /x\nthreshold: 1.5\ngate:\n  disclosure: everything\nbogus: 1\n"
        #expect(throws: ConfigErrors.self) { try ExperimentConfig.parse(text, file: "c.yaml") }
        do {
            _ = try ExperimentConfig.parse(text, file: "c.yaml")
        } catch let e as ConfigErrors {
            let d = e.description
            #expect(d.contains("c.yaml:3: threshold: must be a number from 0 to 1 (got '1.5')"))
            #expect(d.contains("c.yaml:5: gate.disclosure: 'everything' is not allowed (allowed: decision, rounded, score, ladder)"))
            #expect(d.contains("c.yaml:6: unknown key 'bogus'"))
        }
    }

    @Test("coding_agent.env: constants with their line; AUTOHARNESS_ names and names also in env_pass are errors")
    func codingAgentEnv() throws {
        let ok = try ExperimentConfig.parse("benchmark: local\ndataset: /x\ncoding_agent:\n  env:\n    DISABLE_AUTOUPDATER: \"1\"\n", file: "c.yaml")
        #expect(ok.codingAgent.env == ["DISABLE_AUTOUPDATER": "1"])
        let text = "benchmark: local\ndataset: /x\ncoding_agent:\n  env_pass: [KEY]\n  env:\n    AUTOHARNESS_PROMPT: x\n    KEY: y\n"
        do {
            _ = try ExperimentConfig.parse(text, file: "c.yaml")
            Issue.record("accepted \(text)")
        } catch let e as ConfigErrors {
            #expect(e.description.contains("c.yaml:6: coding_agent.env.AUTOHARNESS_PROMPT: AUTOHARNESS_ variables are set by the supervisor"), "\(e)")
            #expect(e.description.contains("KEY is in both env and env_pass"), "\(e)")
        }
    }

    @Test("coding_agent.home_seed copies files and directories into the agent's home, owned by the sandbox user, and refuses a symbolic link by name")
    func homeSeed() throws {
        let dir = try TempDir()
        try FileManager.default.createDirectory(atPath: dir.path + "/seed/.codex", withIntermediateDirectories: true)
        try "x = 1\n".write(toFile: dir.path + "/seed/.codex/config.toml", atomically: true, encoding: .utf8)
        try FileManager.default.createDirectory(atPath: dir.path + "/home", withIntermediateDirectories: true)
        try RunLoop.seedHome(from: dir.path + "/seed", to: dir.path + "/home", owner: (65534, 65534))
        let attrs = try FileManager.default.attributesOfItem(atPath: dir.path + "/home/.codex/config.toml")
        #expect((attrs[.ownerAccountID] as? NSNumber)?.intValue == 65534)
        #expect(try String(contentsOfFile: dir.path + "/home/.codex/config.toml", encoding: .utf8) == "x = 1\n")

        try FileManager.default.createSymbolicLink(atPath: dir.path + "/seed/.codex/auth.json", withDestinationPath: "/etc/shadow")
        try FileManager.default.createDirectory(atPath: dir.path + "/home2", withIntermediateDirectories: true)
        do {
            try RunLoop.seedHome(from: dir.path + "/seed", to: dir.path + "/home2", owner: (65534, 65534))
            Issue.record("a symbolic link in the seed was copied")
        } catch let e as ExperimentError {
            #expect(e.message.contains("seed/.codex/auth.json is neither a regular file nor a directory"), "\(e.message)")
        }
    }

    @Test("the split is deterministic and stratified on baseline pass/fail")
    func splitDeterministic() {
        var baseline: [String: Bool] = [:]
        for i in 0..<40 { baseline["t\(i)"] = i % 4 == 0 }  // 10 passing, 30 failing
        let a = SplitFile.make(baselinePassed: baseline, created: "x")
        let b = SplitFile.make(baselinePassed: baseline, created: "x")
        #expect(a == b)
        #expect(a.train.count == 28 && a.test.count == 12)
        #expect(a.train.filter { baseline[$0]! }.count == 7)  // 70% of each stratum
        #expect(a.test.filter { baseline[$0]! }.count == 3)
        #expect(SplitFile.make(baselinePassed: baseline, seed: 7, created: "x") != a)
        let json = String(decoding: (try? a.encoded()) ?? Data(), as: UTF8.self)
        #expect(json.contains("\"total_tasks\" : 40") && json.contains("\"seed\" : 42"))
    }
}
