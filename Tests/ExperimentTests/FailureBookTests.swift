import Benchmark
@testable import Experiment
@testable import Execution
@testable import ExperimentModel
import Foundation
import Testing
import TestSupport

// Failure records and clusters: the signature's normaliser, the records' life across runs and
// gates, the ranking, and (end to end, real sandboxes) that held-out tasks never become one.

@Suite("Failure records and clusters")
struct FailureBookTests {
    @Test("the signature's normaliser strips what varies between occurrences of one failure", arguments: [
        ("expected 7000, got 7", "expected <num>, got <num>"),
        ("expected -1.5e3 got +2", "expected <num> got <num>"),
        ("No such file: '/app/out.txt'", "No such file: <str>"),
        ("open /app/data/x.csv failed", "open <path> failed"),
        ("see tests/test_outputs.py:12", "see <path>"),
        ("ratio 3/4 off", "ratio <num>/<num> off"),
        ("GET https://api.example.com/v1/x?id=3 -> 500", "GET <url> -> <num>"),
        ("mail bob@example.com now", "mail <email> now"),
        ("id 123e4567-e89b-12d3-a456-426614174000 gone", "id <uuid> gone"),
        ("commit deadbeef1 and 0x7ffd12", "commit <hex> and <hex>"),
        ("at 2026-11-25T12:00:00Z and 10:30:05.", "at <date> and <date>."),
        ("host 10.0.0.1:8080 down", "host <ip> down"),
        ("reservation \"EHGLP3\" for user `mia_li_3668`", "reservation <str> for user <str>"),
        ("don't   stop\n\tnow", "don't stop now"),
        ("test_add_2 failed", "test_add_<num> failed"),
    ])
    func normalise(_ c: (String, String)) {
        #expect(FailureSignature.normalise(c.0) == c.1)
    }

    @Test("a quote that closes nothing on its line is kept as itself, and the rest is still read")
    func normaliseUnclosedQuote() {
        #expect(FailureSignature.normalise("expected \"abc\ngot 42") == "expected \"abc got <num>")
        #expect(FailureSignature.normalise("`x") == "`x")
    }

    @Test("a message of megabytes without a space normalises as its start does (it is read only as far as the 300 characters kept can reach)")
    func normaliseLongMessage() {
        let long = String(repeating: "ab(cd=", count: 700_000) + " http://example.com/x"
        let result = FailureSignature.normalise(long)
        #expect(result == FailureSignature.normalise(String(long.prefix(1 << 16))))
        #expect(!result.isEmpty && result.count <= 310)
    }

    @Test("one root cause, one cluster: the same class, check and normalised message share an id; anything else does not")
    func signatures() {
        let a = FailureEvidence(check: "tests/test.sh::convert km->m", errorClass: "AssertionError", excerpt: "AssertionError: expected 7000, got 7")
        let b = FailureEvidence(check: "tests/test.sh::convert km->m", errorClass: "AssertionError", excerpt: "AssertionError: expected 15000, got 15")
        let c = FailureEvidence(check: "tests/test.sh::convert kg->g", errorClass: "AssertionError", excerpt: "AssertionError: expected 7000, got 7")
        #expect(FailureSignature.of(a) == "AssertionError | tests/test.sh::convert km->m | AssertionError: expected <num>, got <num>")
        #expect(FailureSignature.clusterID(FailureSignature.of(a)) == FailureSignature.clusterID(FailureSignature.of(b)))
        #expect(FailureSignature.clusterID(FailureSignature.of(a)) != FailureSignature.clusterID(FailureSignature.of(c)))
        #expect(FailureSignature.clusterID("x").count == 9 && FailureSignature.clusterID("x").hasPrefix("c"))
    }

    static func evidence(_ check: String, _ got: Int) -> FailureEvidence {
        FailureEvidence(check: check, errorClass: "AssertionError", excerpt: "expected 1, got \(got)")
    }

    static func state(_ events: [FailureEvent], proposals: [ClusterProposalRecord] = []) throws -> ExperimentState {
        var s = try ExperimentState(records: [])
        s.split = SplitRecord(train: ["a", "b", "c", "d"], test: ["h"], seed: 1)
        s.failureEvents = events
        s.clusterProposals = proposals.map { ("2026-11-25T00:00:00Z", $0) }
        return s
    }

    static func run(_ seq: Int64, _ sha: String, source: String = "train run", attempt: Int? = nil, _ tasks: [String: [FailureEvidence]]) -> FailureEvent {
        .evidence(seq: seq, time: "t\(seq)", FailureEvidenceRecord(source: source, attempt: attempt, agentSHA256: sha, tasks: tasks))
    }

    @Test("a record is open while its task fails, fixed when a candidate's run passes it, resolved once a gate accepts that candidate, open again (recurring) if it comes back")
    func lifecycle() throws {
        let x = Self.evidence("test_x", 2)
        var events: [FailureEvent] = [
            Self.run(1, "v0", ["a": [x], "b": [Self.evidence("test_x", 3)], "c": [], "h": [Self.evidence("test_x", 9)]]),
        ]
        var book = FailureBook(try Self.state(events))
        #expect(book.records.map(\.task) == ["a", "b"], "a held-out id in a row never becomes a record")
        #expect(book.clusters.count == 1 && book.clusters[0].tasks == ["a", "b"] && book.clusters[0].open == 2)
        #expect(book.records.allSatisfy { $0.state == .open && $0.firstSeen.seq == 1 })

        events.append(Self.run(2, "v1", ["a": []]))
        book = FailureBook(try Self.state(events))
        #expect(book.records.first { $0.task == "a" }?.state == .fixed, "a candidate's train run fixing it proves nothing yet")
        #expect(book.clusters[0].unresolved && book.clusters[0].resolved == 0)

        events.append(.accepted(attempt: 1, agentSHA256: "v1"))
        book = FailureBook(try Self.state(events))
        let a = try #require(book.records.first { $0.task == "a" })
        #expect(a.state == .resolved && a.resolvedBy == 1)

        // Gate 2 accepts v2; its train phases pass b and fail a again.
        events.append(.accepted(attempt: 2, agentSHA256: "v2"))
        events.append(Self.run(3, "v2", source: "gate", attempt: 2, ["a": [Self.evidence("test_x", 5)], "b": []]))
        book = FailureBook(try Self.state(events))
        let a2 = try #require(book.records.first { $0.task == "a" })
        let b2 = try #require(book.records.first { $0.task == "b" })
        #expect(a2.state == .open && a2.recurrences == 1 && a2.occurrences == 2 && a2.resolvedBy == nil && a2.excerpt == "expected 1, got 5")
        #expect(a2.lastSeen == FailureBook.Sighting(seq: 3, time: "t3", source: "gate", attempt: 2, batch: nil))
        #expect(b2.state == .resolved && b2.resolvedBy == 2, "a run of an agent.py already accepted resolves at once")
        let c = book.clusters[0]
        #expect(c.records == 2 && c.resolved == 1 && c.open == 1 && c.totalFailures == 3 && c.resolutionRate == 0.5)
    }

    @Test("clusters rank unresolved first, then by open records, total failures, lowest resolution rate; proposals are shown and counted nowhere")
    func ranking() throws {
        let one = Self.evidence("one", 1), two = Self.evidence("two", 1), three = Self.evidence("three", 1)
        let events: [FailureEvent] = [
            Self.run(1, "v0", ["a": [one, two], "b": [two], "c": [three], "d": [three]]),
            Self.run(2, "v0", ["c": [three]]),
            .accepted(attempt: 1, agentSHA256: "v1"),
            Self.run(3, "v1", source: "gate", attempt: 1, ["a": [two], "b": [two], "c": [three], "d": [three]]),
        ]
        let idOne = FailureSignature.clusterID(FailureSignature.of(one)), idTwo = FailureSignature.clusterID(FailureSignature.of(two))
        let idThree = FailureSignature.clusterID(FailureSignature.of(three))
        let plain = FailureBook(try Self.state(events))
        // three: 2 open, 4 failures; two: 2 open, 4 failures... three has c seen 3 times.
        #expect(plain.clusters.map(\.id) == [idThree, idTwo, idOne], "\(plain.clusters.map { ($0.id, $0.open, $0.totalFailures) })")
        #expect(plain.clusters.map(\.rank) == [1, 2, 3])
        #expect(plain.clusters[2].unresolved == false && plain.clusters[2].resolved == 1)
        let proposed = FailureBook(try Self.state(events, proposals: [
            ClusterProposalRecord(actor: "coding agent", cluster: idOne, label: "a fake fix", mergeWith: nil),
            ClusterProposalRecord(actor: "coding agent", cluster: idTwo, label: nil, mergeWith: idThree),
        ]))
        #expect(proposed.clusters.map(\.id) == plain.clusters.map(\.id))
        #expect(proposed.records == plain.records)
        #expect(proposed.cluster(idOne)?.proposals.first?.label == "a fake fix" && proposed.cluster(idOne)?.resolved == 1)
        let page = Views.failuresMarkdown(try Self.state(events, proposals: [ClusterProposalRecord(actor: "coding agent", cluster: idTwo, label: "units", mergeWith: nil)]))
        #expect(page.contains("proposed by the coding agent at 2026-11-25T00:00:00Z, not counted: label \"units\""), "\(page)")
    }

    @Test("a run's row holds every train task it ran: passed ones empty, failed ones their evidence or their status class; nothing else")
    func observedRow() throws {
        var timedOut = TaskOutcome(id: "b", reward: 0, status: .agentTimeout, detail: "agent timed out after 20s")
        timedOut.failures = nil
        var failed = TaskOutcome(id: "a", reward: 0, status: .failed)
        failed.failures = [Self.evidence("t", 1)]
        let row = try #require(FailureEvidenceRecord.observed([failed, timedOut, TaskOutcome(id: "c", reward: 1, status: .passed),
                                                               TaskOutcome(id: "h", reward: 0, status: .failed)],
                                                              train: ["a", "b", "c"], source: "train run", agentSHA256: "v"))
        #expect(row.tasks.keys.sorted() == ["a", "b", "c"])
        #expect(row.tasks["a"] == [Self.evidence("t", 1)] && row.tasks["c"] == [])
        #expect(row.tasks["b"] == [FailureEvidence(check: "agent", errorClass: "agent_timeout", excerpt: "agent timed out after 20s")])
        #expect(FailureEvidenceRecord.observed([TaskOutcome(id: "h", reward: 0, status: .failed)], train: ["a"], source: "gate", agentSHA256: "v") == nil)
    }

    @Test("held-out outcomes leave the supervisor's run without evidence, whatever the adapter returned")
    func heldOutStripped() {
        var o = TaskOutcome(id: "h", reward: 0, status: .failed)
        o.failures = [Self.evidence("secret", 1)]
        for split in [SplitClass.heldOut, .baseline] {
            #expect(LocalExecution.complete(["h", "m"], [o], split: split, adapter: "local").allSatisfy { $0.failures == nil })
        }
        let train = LocalExecution.complete(["h", "m"], [o], split: .trainUntraced, adapter: "local")
        #expect(train.first?.failures != nil && train.last?.status == .missingResult && train.last?.reward == 0)
    }

    /// The arith fixture with verifiers that write a CTRF report naming `CTRFMARK-<id>` in the
    /// failed test's trace.
    static func ctrfArith(_ temp: TempDir) throws -> String {
        let root = temp.path + "/arith-ctrf"
        try FileManager.default.copyItem(atPath: Experiment.fixture, toPath: root)
        for id in try FileManager.default.contentsOfDirectory(atPath: root + "/tasks") {
            let test = root + "/tasks/\(id)/tests/test.sh"
            let original = try String(contentsOfFile: test, encoding: .utf8)
            let op = id.hasPrefix("add") ? "add" : "multiply"
            try (original + """
                # Read back by the script itself: a child that opens the reward file voids it.
                read -r written < /logs/verifier/reward.txt
                if [ "$written" != 1 ]; then
                cat > /logs/verifier/ctrf.json <<EOF
                {"results": {"tests": [{"name": "tests/test_outputs.py::test_\(op)", "status": "failed",
                  "message": "The test failed in the call phase due to an assertion error",
                  "trace": "E       AssertionError: wrong answer ${got:-nothing} (CTRFMARK-\(id))\\ntests/test_outputs.py:3: AssertionError"}]}}
                EOF
                fi

                """).write(toFile: test, atomically: true, encoding: .utf8)
        }
        return root
    }

    @Test("end to end: a train run records each failing test, clusters by root cause, an accepted gate resolves them; no held-out task's id or evidence reaches a row, view or answer")
    func endToEnd() throws {
        try requireRoot()
        let data = try TempDir()
        let exp = try Experiment(dataset: try Self.ctrfArith(data))
        let split = try exp.split()
        try exp.setAgent(Agents.none)
        let b = try exp.run("benchmark")
        #expect(b.status == 0, "\(b.stderr)")

        let rows = try exp.rows("failure_evidence")
        #expect(rows.count == 1)
        let tasks = try #require(rows.first?["tasks"] as? [String: [[String: Any]]])
        #expect(Set(tasks.keys) == Set(split.train), "every train task, nothing else")
        let add = try #require(split.train.first { $0.hasPrefix("add") })
        #expect(tasks[add]?.first?["check"] as? String == "tests/test_outputs.py::test_add")
        #expect(tasks[add]?.first?["error_class"] as? String == "AssertionError")
        #expect(tasks[add]?.first?["excerpt"] as? String == "AssertionError: wrong answer nothing (CTRFMARK-\(add))")

        let view = try #require(try JSONSerialization.jsonObject(with: Data(exp.file("workspace/failures.json").utf8)) as? [String: Any])
        let clusters = try #require(view["clusters"] as? [[String: Any]])
        let kinds = Set(split.train.map { $0.hasPrefix("add") ? "add" : "multiply" })
        #expect(clusters.count == kinds.count, "one cluster per operation: \(clusters)")
        #expect(clusters.allSatisfy { ($0["unresolved"] as? Bool) == true })
        #expect(try exp.file("workspace/failures.md").contains("AssertionError in `tests/test_outputs.py::test_add`"))

        let cli = try exp.run("failures", "--json")
        #expect(cli.status == 0 && cli.stdout.contains("CTRFMARK-\(add)"), "\(cli.stderr)")

        // Accepted: its promotion phase re-runs every failing train task, which now passes.
        try exp.setAgent(Agents.all)
        let g = try exp.run("gate")
        #expect(g.status == 0, "\(g.stdout) \(g.stderr)")
        let after = try #require(try JSONSerialization.jsonObject(with: Data(exp.file("workspace/failures.json").utf8)) as? [String: Any])
        let records = try #require(after["records"] as? [[String: Any]])
        #expect(records.count == split.train.count && records.allSatisfy { ($0["state"] as? String) == "resolved" && ($0["resolved_by_gate"] as? Int) == 1 },
                "\(records)")
        #expect(try exp.file("workspace/failures.md").contains("## Resolved"))

        // The held-out split ran twice (baseline, gate) with verifiers that wrote evidence:
        // none of it, nor any test id, is anywhere under the experiment or in an answer.
        for id in split.test {
            #expect(exp.filesContaining("CTRFMARK-\(id)").isEmpty, "\(id)'s evidence leaked into \(exp.filesContaining("CTRFMARK-\(id)"))")
            let page = try exp.run("failures").stdout
            let json = try exp.file("workspace/failures.json")
            #expect(!cli.stdout.contains("\"\(id)\"") && !page.contains(id + " ") && !json.contains("\"\(id)\""))
        }
        #expect(!exp.filesContaining("CTRFMARK-\(add)").isEmpty, "train evidence is kept")
    }
}
