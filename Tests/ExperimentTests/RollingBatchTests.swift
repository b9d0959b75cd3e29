import Benchmark
@testable import Experiment
@testable import ExperimentModel
import Foundation
import Testing
import TestSupport

// Rolling batches (`loop.batch_size`): the seeded reveal, when a batch ends, promotion at
// cluster level, and (end to end, real sandboxes) a scripted coding agent through three batches.

@Suite("Rolling batches")
struct RollingBatchTests {
    static let train = (0..<23).map { String(format: "t-%02d", $0) }

    @Test("batches are drawn seeded from what is still hidden: the same on every call, disjoint, covering the split, then empty")
    func draw() {
        var revealed: Set<String> = []
        var batches: [[String]] = []
        for n in 1...4 {
            let b = RollingBatches.draw(train: Self.train, revealed: revealed, number: n, size: 10, seed: 42)
            #expect(b == RollingBatches.draw(train: Self.train.reversed(), revealed: revealed, number: n, size: 10, seed: 42), "input order changes nothing")
            #expect(Set(b).isDisjoint(with: revealed))
            revealed.formUnion(b)
            batches.append(b)
        }
        #expect(batches.map(\.count) == [10, 10, 3, 0])
        #expect(revealed == Set(Self.train))
        #expect(batches[0] != Array(Self.train.prefix(10)), "shuffled, not the first ids")
        #expect(RollingBatches.draw(train: Self.train, revealed: [], number: 1, size: 10, seed: 7) != batches[0], "the seed decides")
        #expect(RollingBatches.draw(train: Self.train, revealed: [], number: 2, size: 10, seed: 42) != batches[0], "so does the batch number")
    }

    @Test("a batch ends at its first accepted gate or at its last allowed attempt, whatever that attempt's outcome")
    func ends() {
        var b = ExperimentState.Batch(revealed: BatchRevealedRecord(batch: 1, tasks: ["a"], iterations: 3))
        #expect(RollingBatches.ends(b, accepted: true) == .accepted)
        #expect(RollingBatches.ends(b, accepted: false) == nil)
        b.attempts = [4]
        #expect(RollingBatches.ends(b, accepted: false) == nil)
        b.attempts = [4, 5]
        #expect(RollingBatches.ends(b, accepted: false) == .iterations)
        #expect(RollingBatches.ends(b, accepted: true) == .accepted)
    }

    static func fail(_ check: String) -> FailureEvidence {
        FailureEvidence(check: check, errorClass: "AssertionError", excerpt: "expected 1, got 2")
    }

    @Test("promotion at cluster level: a passing task enters the suite only when every cluster it failed in is resolved; a cluster's tasks enter together")
    func promotions() throws {
        // a, b fail check x; c fails x and y; d fails y. The accepted gate fixes a, b, d, not c.
        var s = try FailureBookTests.state([FailureBookTests.run(1, "v0", ["a": [Self.fail("x")], "b": [Self.fail("x")],
                                                                         "c": [Self.fail("x"), Self.fail("y")], "d": [Self.fail("y")]])])
        s.batches = [ExperimentState.Batch(revealed: BatchRevealedRecord(batch: 1, tasks: ["a", "b", "c", "d"], iterations: 5))]
        let before = FailureBook(s)
        let candidates = RollingBatches.candidates(s, book: before)
        #expect(candidates == ["a", "b", "c", "d"])
        let gate = FailureEvidenceRecord(source: "gate", attempt: 1, agentSHA256: "v1",
                                         tasks: ["a": [], "b": [], "c": [Self.fail("x")], "d": []])
        let after = FailureBook(RollingBatches.after(s, accepted: (1, "v1"), evidence: gate, time: "t2"))
        let outcomes = ["a", "b", "c", "d"].map { TaskOutcome(id: $0, reward: $0 == "c" ? 0 : 1, status: $0 == "c" ? .failed : .passed) }
        let (promoted, resolved) = RollingBatches.promotions(candidates: outcomes, before: before, after: after)
        let x = FailureSignature.clusterID(FailureSignature.of(Self.fail("x")))
        let y = FailureSignature.clusterID(FailureSignature.of(Self.fail("y")))
        // x still fails on c: a and b wait; y is resolved (c passed y's check): d enters.
        #expect(resolved == [y])
        #expect(promoted == ["d"], "a and b wait for cluster \(x)")

        // The next batch's accepted gate fixes c: x resolves, and a, b (pending in x) are
        // candidates again although their own latest run passed.
        var s2 = RollingBatches.after(s, accepted: (1, "v1"), evidence: gate, time: "t2")
        s2.latestTrainRewards = ["a": 1, "b": 1, "c": 0, "d": 1]
        s2.suite = ["d"]
        let before2 = FailureBook(s2)
        #expect(RollingBatches.candidates(s2, book: before2) == ["a", "b", "c"])
        let gate2 = FailureEvidenceRecord(source: "gate", attempt: 2, agentSHA256: "v2", tasks: ["a": [], "b": [], "c": [], "d": []])
        let after2 = FailureBook(RollingBatches.after(s2, accepted: (2, "v2"), evidence: gate2, time: "t3"))
        let r2 = RollingBatches.promotions(candidates: ["a", "b", "c"].map { TaskOutcome(id: $0, reward: 1, status: .passed) },
                                           before: before2, after: after2)
        #expect(r2.resolved == [x] && r2.promoted == ["a", "b", "c"])

        // A task that waited for its cluster stays a candidate after a train run of an
        // accepted agent.py resolved everything; a revealed task never run is not one.
        var s3 = s2
        s3.failureEvents.append(FailureBookTests.run(9, "v1", ["a": [], "b": [], "c": []]))
        s3.latestTrainRewards = ["a": 1, "b": 1, "c": 1, "d": 1]
        s3.split?.train.append("e")
        s3.batches[0].revealed.tasks.append("e")
        #expect(FailureBook(s3).clusters.allSatisfy { !$0.unresolved })
        #expect(RollingBatches.candidates(s3, book: FailureBook(s3)) == ["a", "b", "c"])
    }

    @Test("an interrupted attempt that was its batch's last ends the batch and reveals the next in the same rows")
    func interruptedEndsBatch() throws {
        var s = try FailureBookTests.state([])
        s.batches = [ExperimentState.Batch(revealed: BatchRevealedRecord(batch: 1, tasks: ["a", "b"], iterations: 2), attempts: [1])]
        var config = ExperimentConfig(benchmark: "local")
        config.loop.batchSize = 2
        let rows = GateOperation.interruptedRows(s, attempt: 2, agentSHA256: "v", config: config)
        #expect(rows.map(\.0) == [.gateAttempt, .batchEnded, .batchRevealed])
        let attempt = try #require(rows[0].1 as? GateAttemptRecord)
        #expect(attempt.verdict == .interrupted && attempt.batch == 1 && attempt.revealedBatch == 2)
        let ended = try #require(rows[1].1 as? BatchEndedRecord)
        #expect(ended.endedBy == "iterations" && ended.attempts == [1, 2] && ended.promoted == [])
        #expect((rows[2].1 as? BatchRevealedRecord)?.tasks == RollingBatches.draw(train: ["a", "b", "c", "d"], revealed: ["a", "b"], number: 2, size: 2, seed: 1))
        s.batches[0].attempts = []
        #expect(GateOperation.interruptedRows(s, attempt: 1, agentSHA256: "v", config: config).count == 1, "not its last attempt")
    }

    @Test("loop: batch_size and batch_iterations are read and bounded, naming the line")
    func config() throws {
        let c = try ExperimentConfig.parse("benchmark: local\ndataset: d\nloop:\n  batch_size: 10\n  batch_iterations: 3\n", file: "c.yaml")
        #expect(c.loop.batchSize == 10 && c.loop.batchIterations == 3)
        #expect(try ExperimentConfig.parse("benchmark: local\ndataset: d\n", file: "c.yaml").loop.batchSize == 0, "off by default")
        let bad = #expect(throws: ConfigErrors.self) {
            try ExperimentConfig.parse("benchmark: local\ndataset: d\nloop:\n  batch_size: 4\n  batch_iterations: 0\n", file: "c.yaml")
        }
        #expect(bad?.description.contains("c.yaml:5") == true && bad?.description.contains("loop.batch_iterations") == true, "\(String(describing: bad))")
        #expect(throws: ConfigErrors.self) { try ExperimentConfig.parse("benchmark: local\ndataset: d\nloop:\n  batch: 4\n", file: "c.yaml") }
    }

    /// The failure page and JSON as the coding agent reads them, and the agent's `failures`.
    static func views(_ exp: Experiment) throws -> (json: [String: Any], md: String) {
        let json = try #require(try JSONSerialization.jsonObject(with: Data(exp.file("workspace/failures.json").utf8)) as? [String: Any])
        return (json, try exp.file("workspace/failures.md"))
    }

    @Test("a scripted coding agent through three batches: reveals, records per batch, ranking, promotions at batch end, views as the ledger renders them; no held-out id or evidence anywhere")
    func threeBatches() throws {
        try requireRoot()
        let data = try TempDir()
        let exp = try Experiment(config: ["batch_size": "3", "batch_iterations": "2", "min_improvement": "0"],
                                 dataset: try FailureBookTests.ctrfArith(data))
        let split = try exp.split()
        let ledger = { (kind: String) in try exp.rows(kind) }

        // prepare revealed batch 1: three train tasks, drawn as RollingBatches.draw says.
        let b1 = RollingBatches.draw(train: split.train, revealed: [], number: 1, size: 3, seed: 42)
        var revealed = try ledger("batch_revealed")
        #expect(revealed.count == 1 && revealed[0]["tasks"] as? [String] == b1 && revealed[0]["iterations"] as? Int == 2)
        let hidden = split.train.filter { !b1.contains($0) }

        // prepare ran batch 1 as a train run with the baseline agent.py.
        #expect(try ledger("train_run").map { Set(($0["results"] as? [String: Any] ?? [:]).keys) } == [Set(b1)])

        // The agent sees the batch's tasks only; a hidden train task is refused exactly as a
        // held-out one is, and both are recorded.
        try exp.setAgent(Agents.none)
        let bench = try exp.run("benchmark")
        #expect(bench.status == 0 && bench.stdout.contains("train: 0/3 passed"), "\(bench.stdout) \(bench.stderr)")
        let tr = try #require(try JSONSerialization.jsonObject(with: Data(exp.file("workspace/train_results.json").utf8)) as? [String: Any])
        #expect(Set((tr["results"] as? [String: Any] ?? [:]).keys) == Set(b1))
        let asHidden = try exp.run("benchmark", "--task-ids", hidden[0])
        let asTest = try exp.run("benchmark", "--task-ids", split.test[0])
        #expect(asHidden.status == asTest.status && asHidden.status != 0)
        #expect(asHidden.stderr.replacingOccurrences(of: hidden[0], with: "ID") == asTest.stderr.replacingOccurrences(of: split.test[0], with: "ID"),
                "\(asHidden.stderr) vs \(asTest.stderr)")
        #expect(try ledger("violation").filter { $0["kind"] as? String == "refused_task_ids" }.count == 2)
        var v = try Self.views(exp)
        #expect(v.md.contains("Rolling batch 1: 3 train task(s) revealed so far, 3 new in this batch; gate attempts 0 of 2"), "\(v.md)")
        #expect((v.json["batches"] as? [String: Any])?["current_tasks"] as? [String] == b1.sorted())
        #expect(try ledger("failure_evidence").allSatisfy { $0["batch"] as? Int == 1 })

        // Gate 1 fixes one operation (whichever the held-out split can reward): accepted,
        // which ends batch 1; the tasks of the cluster it resolved enter the suite, and batch
        // 2 is revealed and run with the accepted agent.py.
        let firstOp = split.test.contains { $0.hasPrefix("add") } ? "add" : "mul"
        let firstAgent = Agents.solver(ops: firstOp == "add" ? ["add": "a + b"] : ["multiply": "a * b"])
        try exp.setAgent(firstAgent)
        let g1 = try exp.run("gate")
        #expect(g1.status == 0, "\(g1.stdout) \(g1.stderr)")
        let b2 = RollingBatches.draw(train: split.train, revealed: Set(b1), number: 2, size: 3, seed: 42)
        #expect(g1.stdout.contains("batch 1 ended (accepted gate); batch 2 begins: 3 new train task(s) ran with the accepted agent.py"), "\(g1.stdout)")
        var ended = try ledger("batch_ended")
        #expect(ended.count == 1)
        #expect(ended[0]["endedBy"] as? String == "accepted" && ended[0]["attempts"] as? [Int] == [1])
        let firstPromoted = b1.filter { $0.hasPrefix(firstOp) }.sorted()
        #expect(ended[0]["promoted"] as? [String] == firstPromoted)
        #expect((ended[0]["clustersResolved"] as? [String])?.count == (firstPromoted.isEmpty ? 0 : 1))
        #expect(try ledger("suite_promotion").last?["added"] as? [String] == firstPromoted)
        revealed = try ledger("batch_revealed")
        #expect(revealed.count == 2 && revealed[1]["tasks"] as? [String] == b2)
        // The reveal ran batch 2 as a train run, recorded as batch 2's evidence.
        let runs = try ledger("train_run")
        #expect(Set((runs.last?["results"] as? [String: Any] ?? [:]).keys) == Set(b2))
        #expect(try ledger("failure_evidence").last?["batch"] as? Int == 2)

        // Two rejected gates (the same behaviour, new bytes: a tie) spend batch 2's attempts.
        try exp.setAgent(firstAgent + "\n# a tie\n")
        let g2 = try exp.run("gate")
        #expect(g2.status == 1 && !g2.stdout.contains("batch 2 ended"), "\(g2.stdout)")
        try exp.setAgent(firstAgent + "\n# another tie\n")
        let g3 = try exp.run("gate")
        #expect(g3.status == 1 && g3.stdout.contains("batch 2 ended (its gate attempts are spent); batch 3 begins: 2 new train task(s)"), "\(g3.stdout)")
        ended = try ledger("batch_ended")
        #expect(ended.count == 2 && ended[1]["endedBy"] as? String == "iterations" && ended[1]["attempts"] as? [Int] == [2, 3])
        #expect(ended[1]["promoted"] as? [String] == [], "no promotion without an accepted gate")
        let b3 = RollingBatches.draw(train: split.train, revealed: Set(b1 + b2), number: 3, size: 3, seed: 42)
        #expect(b3.count == 2 && Set(b1 + b2 + b3) == Set(split.train))

        // Ranking now: the other operation's cluster is the only unresolved one, first.
        v = try Self.views(exp)
        let clusters = try #require(v.json["clusters"] as? [[String: Any]])
        let otherCheck = firstOp == "add" ? "tests/test_outputs.py::test_multiply" : "tests/test_outputs.py::test_add"
        #expect(clusters.first?["check"] as? String == otherCheck && clusters.first?["unresolved"] as? Bool == true, "\(clusters)")
        #expect(clusters.dropFirst().allSatisfy { $0["unresolved"] as? Bool == false })
        #expect(v.md.contains("## 1. \(clusters[0]["id"] as! String): AssertionError in `\(otherCheck)`"), "\(v.md)")

        // Gate 4 fixes both: accepted; batch 3 ends and promotes every task of the cluster it
        // resolved (revealed in any batch); batch 4 has nothing left to reveal.
        try exp.setAgent(Agents.all)
        let g4 = try exp.run("gate")
        #expect(g4.status == 0 && g4.stdout.contains("batch 3 ended (accepted gate); batch 4 begins: every train task is revealed already"), "\(g4.stdout)")
        ended = try ledger("batch_ended")
        let secondOp = firstOp == "add" ? "mul" : "add"
        #expect(ended[2]["promoted"] as? [String] == split.train.filter { $0.hasPrefix(secondOp) }.sorted(), "\(ended[2])")
        // The suite holds resolved failures only: the first operation's tasks revealed later
        // passed from their first run with an accepted agent.py, never failed, never entered.
        let suiteNow = Set(firstPromoted + split.train.filter { $0.hasPrefix(secondOp) })
        #expect(ended[2]["clustersOpen"] as? Int == 0 && ended[2]["suiteSize"] as? Int == suiteNow.count)
        let suite = try #require(try JSONSerialization.jsonObject(with: Data(exp.file("workspace/suite.json").utf8)) as? [String: Any])
        #expect(Set(suite["tasks"] as? [String] ?? []) == suiteNow)
        #expect(try ledger("gate_attempt").map { $0["batch"] as? Int } == [1, 2, 2, 3])

        // The views are exactly what the ledger renders (byte for byte), and the agent's
        // `failures --json` answer is the view's content.
        let status = try exp.run("status", "--json", "--verify")
        let st = try #require(try JSONSerialization.jsonObject(with: Data(status.stdout.utf8)) as? [String: Any])
        #expect((st["verify"] as? [String: Any])?["edited_views"] as? [String] == [] && (st["verify"] as? [String: Any])?["ok"] as? Bool == true)
        #expect((st["batch"] as? [String: Any])?["number"] as? Int == 4)
        v = try Self.views(exp)
        let answer = try #require(try JSONSerialization.jsonObject(with: Data(try exp.run("failures", "--json").stdout.utf8)) as? NSDictionary)
        #expect(answer == v.json as NSDictionary)

        // The operator's report charts the batches and tabulates how each ended.
        #expect(try exp.run("report").status == 0)
        let html = try exp.file("report.html")
        #expect(html.contains("<h2>rolling batches</h2>") && html.contains("<td>2</td><td>6</td><td>iterations</td><td>2, 3</td>"), "\(html.count)")

        // No held-out task's id, marker or evidence in any row, view or answer.
        let page = try exp.run("failures").stdout
        for id in split.test {
            #expect(exp.filesContaining("CTRFMARK-\(id)").isEmpty, "\(id)")
            let rows = try ledger("failure_evidence") + ledger("batch_revealed") + ledger("batch_ended") + ledger("gate_attempt")
            let text = String(decoding: try JSONSerialization.data(withJSONObject: rows), as: UTF8.self)
            #expect(!text.contains("\"\(id)\""), "\(id) in a row")
            let json = try exp.file("workspace/failures.json")
            #expect(!page.contains(id) && !v.md.contains(id) && !json.contains("\"\(id)\""))
        }
    }

    @Test("batches turned on after the train split was visible are refused, naming the setting; nothing runs")
    func turnedOnLate() throws {
        try requireRoot()
        let exp = try Experiment()
        #expect(try exp.run("benchmark").status == 0)
        var text = try exp.file("experiment_config.yaml")
        text = text.replacingOccurrences(of: "\n  batch_size: 0", with: "\n  batch_size: 4")
        try text.write(toFile: exp.root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
        let runs = try exp.rows("train_run").count
        for verb in ["benchmark", "gate"] {
            let r = try exp.run(verb)
            #expect(r.status != 0 && r.stderr.contains("loop.batch_size 4 was set after this experiment's train split was visible"), "\(r.stderr)")
        }
        #expect(try exp.rows("train_run").count == runs && exp.rows("gate_started").isEmpty && exp.rows("batch_revealed").isEmpty)
    }
}
