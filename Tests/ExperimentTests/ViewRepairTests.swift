@testable import Experiment
@testable import Evidence
@testable import ExperimentModel
import Foundation
import Glibc
import Ledger
import Testing
import TestSupport

/// A prepared experiment's ledger and views, written directly (no tasks run): the states a
/// crash can leave between the ledger append and the views' publication, made by hand.
private struct Published {
    let temp: TempDir
    let layout: ExperimentLayout
    let ledger: Ledger
    let config: ExperimentConfig

    init() throws {
        temp = try TempDir()
        layout = ExperimentLayout(root: temp.path)
        try FileManager.default.createDirectory(atPath: layout.workspace, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: layout.privateDirectory, withIntermediateDirectories: true)
        ledger = try Ledger(path: layout.ledger, kinds: .experiment)
        config = try ExperimentConfig.parse("benchmark: local\ndataset: /x\n", file: "c.yaml")
        try ledger.appendAll([
            (.split, SplitRecord(train: ["t1", "t2"], test: ["h1"], seed: 42)),
            (.iteration, IterationRecord(iteration: 0, valScore: 0, commit: "baseline", evalsPassed: 0, evalsTotal: 0, timestamp: "T0", agentSHA256: "a")),
        ])
    }

    var records: [LedgerRecord] { get throws { try ledger.records() } }
    func state() throws -> ExperimentState { try ExperimentState(records: records) }

    /// What a gate appends when it accepts: an iteration and a suite promotion.
    func accept(_ iteration: Int) throws {
        try ledger.appendAll([
            (.iteration, IterationRecord(iteration: iteration, valScore: Double(iteration) / 10, commit: "c\(iteration)", evalsPassed: 1, evalsTotal: 1,
                                         timestamp: "T\(iteration)", agentSHA256: "a\(iteration)")),
            (.suitePromotion, SuitePromotionRecord(added: ["t\(iteration)"], lastResults: ["t\(iteration)": 1])),
        ])
    }

    /// What a train run appends (train_results.json changes).
    func trainRun(_ n: Int) throws {
        try ledger.append(.trainRun, TrainRunRecord(timestamp: "R\(n)", agentSHA256: "a", results: ["t1": Double(n)], statuses: ["t1": "passed"]))
    }

    func publish() throws { try Views.regenerate(layout, try state(), config: config) }
    func check() throws -> Views.Check { try Views.check(layout, records: try records, config: config) }
    func repair() throws -> Views.Check { try Views.repair(layout, records: try records, config: config) }
    func read(_ path: String) -> Data? { FileManager.default.contents(atPath: path) }
    func write(_ data: Data, _ path: String) throws { try data.write(to: URL(fileURLWithPath: path)) }
    /// The view as the ledger renders it now.
    func current(_ path: String) throws -> Data {
        try #require(try Views.rendered(layout, try state(), config: config).first { $0.path == path }).bytes
    }
}

@Suite("Views are derived: behind the ledger is repaired, anything else is tampering")
struct ViewRepairTests {
    @Test("views a crash left before or during publication are behind, not tampered; a locked repair makes them current and records the head")
    func crashLeavesViewsBehind() throws {
        let p = try Published()
        try p.publish()
        #expect(try p.check().behind.isEmpty && p.check().tampered.isEmpty)
        // Appended, then stopped before publishing anything.
        try p.accept(1)
        var c = try p.check()
        #expect(c.behind == [p.layout.resultsTSV, p.layout.suiteJSON], "\(c)")
        #expect(c.tampered.isEmpty, "\(c)")
        // Stopped between two views: results.tsv is current, suite.json still behind.
        try p.write(try p.current(p.layout.resultsTSV), p.layout.resultsTSV)
        c = try p.check()
        #expect(c.behind == [p.layout.suiteJSON] && c.tampered.isEmpty, "\(c)")
        // Two appends without a publish in between (the next command crashed too).
        try p.trainRun(1)
        c = try p.check()
        #expect(c.behind == [p.layout.suiteJSON, p.layout.trainResultsJSON] && c.tampered.isEmpty, "\(c)")

        let repaired = try p.repair()
        #expect(repaired.behind == [p.layout.suiteJSON, p.layout.trainResultsJSON])
        c = try p.check()
        #expect(c.behind.isEmpty && c.tampered.isEmpty, "\(c)")
        for path in [p.layout.resultsTSV, p.layout.suiteJSON, p.layout.trainResultsJSON] { #expect(p.read(path) == (try p.current(path))) }
        #expect(Views.publishedHead(p.layout) == (try p.state()).head)
    }

    @Test("an older copy of a view put back after a complete publish is tampered, as are an edit and a deletion, and a repair leaves them")
    func oldButValidViewIsTampered() throws {
        let p = try Published()
        try p.publish()
        let old = try #require(p.read(p.layout.resultsTSV))
        try p.accept(1)
        // Still behind while no publish has completed since `old` was current...
        #expect(try p.check().behind.contains(p.layout.resultsTSV))
        try p.publish()
        // ...but once one has, the same bytes are a rollback, which only a hand puts there.
        try p.write(old, p.layout.resultsTSV)
        var c = try p.check()
        #expect(c.tampered == [p.layout.resultsTSV] && c.behind.isEmpty, "\(c)")
        try p.write(Data("iteration\tval_score\n".utf8), p.layout.suiteJSON)
        try FileManager.default.removeItem(atPath: p.layout.trainResultsJSON)
        c = try p.repair()
        #expect(c.tampered == [p.layout.resultsTSV, p.layout.suiteJSON, p.layout.trainResultsJSON] && c.behind.isEmpty, "\(c)")
        #expect(p.read(p.layout.resultsTSV) == old, "a tampered view was overwritten by the repair")
        #expect(p.read(p.layout.trainResultsJSON) == nil)
        // The next recorded change rewrites every view.
        try p.trainRun(1)
        try p.publish()
        c = try p.check()
        #expect(c.behind.isEmpty && c.tampered.isEmpty, "\(c)")
    }

    @Test("a view replaced by a FIFO, a link to a secret or an oversized file is tampered; the check neither blocks, follows nor reads it whole")
    func viewsReadAsUntrusted() throws {
        let p = try Published()
        try p.publish()
        // A FIFO nobody writes: a read that opened it blocking would never return.
        try FileManager.default.removeItem(atPath: p.layout.resultsTSV)
        #expect(mkfifo(p.layout.resultsTSV, 0o644) == 0)
        // A link to the current bytes of the view elsewhere: equal content, still not the view.
        let elsewhere = p.layout.root + "/copy-of-suite.json"
        try FileManager.default.copyItem(atPath: p.layout.suiteJSON, toPath: elsewhere)
        try FileManager.default.removeItem(atPath: p.layout.suiteJSON)
        try FileManager.default.createSymbolicLink(atPath: p.layout.suiteJSON, withDestinationPath: elsewhere)
        // Larger than any view is read back: a sparse file over the cap.
        let big = open(p.layout.trainResultsJSON, O_WRONLY | O_TRUNC)
        #expect(big >= 0 && ftruncate(big, off_t(Views.maxViewBytes + 1)) == 0)
        close(big)
        let c = try p.check()
        #expect(Set(c.tampered) == [p.layout.resultsTSV, p.layout.suiteJSON, p.layout.trainResultsJSON], "\(c)")
    }

    @Test("a recorded head the ledger does not hold vouches for nothing; with no head recorded only a view never written is behind")
    func headMustBeTheLedgers() throws {
        let p = try Published()
        // Never published (prepare stopped after recording): missing views are behind...
        var c = try p.check()
        #expect(c.behind == [p.layout.resultsTSV, p.layout.suiteJSON, p.layout.trainResultsJSON, p.layout.failuresJSON, p.layout.failuresMarkdown]
                && c.tampered.isEmpty, "\(c)")
        // ...one that exists without a publish having happened is not the ledger's.
        try p.write(Data("iteration\n".utf8), p.layout.resultsTSV)
        c = try p.check()
        #expect(c.tampered == [p.layout.resultsTSV], "\(c)")

        try p.publish()
        try p.accept(1)
        #expect(try p.check().behind == [p.layout.resultsTSV, p.layout.suiteJSON])
        // A head whose hash is not the ledger's row (rewritten, or planted): nothing is behind.
        let head = try #require(Views.publishedHead(p.layout))
        try p.write(try Views.encode(LedgerHead(seq: head.seq, hash: String(repeating: "f", count: 64))), p.layout.viewsHead)
        c = try p.check()
        #expect(c.behind.isEmpty && c.tampered == [p.layout.resultsTSV, p.layout.suiteJSON], "\(c)")
    }
}

/// A real SIGKILL of a supervisor between its ledger append and the views' publication: the
/// child is this test binary running `publishKillChild`, stopped by `beforeViewWrite` at the
/// chosen write and killed there by the parent.
@Suite("Crash between append and publish", .serialized)
struct PublishKillTests {
    static let childKey = "AUTOHARNESS_PUBLISH_KILL_CHILD"

    @Test("child supervisor for the publish-kill test (runs only when that test spawns it)",
          .enabled(if: ProcessInfo.processInfo.environment[PublishKillTests.childKey] != nil))
    func publishKillChild() throws {
        // root, operation, index of the write to stop before, file to create when there
        let spec = try #require(ProcessInfo.processInfo.environment[Self.childKey]).components(separatedBy: "\n")
        try #require(spec.count == 4)
        let stopAt = try #require(Int(spec[2]))
        let s = try ExperimentSupervisor(layout: ExperimentLayout(root: spec[0]), policySearchPaths: [Built.packageRoot + "/policies"], purpose: "test")
        var writes = 0
        s.beforeViewWrite = { _ in
            if writes == stopAt {
                _ = FileManager.default.createFile(atPath: spec[3], contents: Data())
                while true { pause() }  // until the parent's SIGKILL
            }
            writes += 1
        }
        if spec[1] == "gate" { _ = try s.gate() } else { _ = try s.runBenchmark(taskIDs: nil) }
        Issue.record("the supervisor finished without reaching write \(stopAt)")
    }

    /// Runs `operation` in a child supervisor and kills it with SIGKILL just before its
    /// write number `stopAt` (results.tsv, suite.json, train_results.json, the head record).
    func killChild(_ exp: Experiment, _ operation: String, before stopAt: Int) throws {
        let ready = exp.temp.path + "/stopped-\(UUID().uuidString.prefix(8))"
        let child = try spawnTestChild("publishKillChild", Self.childKey, [exp.root, operation, String(stopAt), ready].joined(separator: "\n"))
        defer {
            if child.isRunning { kill(child.processIdentifier, SIGKILL) }
            child.waitUntilExit()
        }
        let deadline = Date().addingTimeInterval(300)
        while !FileManager.default.fileExists(atPath: ready) {
            try #require(child.isRunning, "the child supervisor ended (status \(child.terminationStatus)) before reaching write \(stopAt) of \(operation)")
            try #require(Date() < deadline, "the child supervisor did not reach write \(stopAt) of \(operation) in 300 s")
            usleep(20_000)
        }
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        #expect(child.terminationReason == .uncaughtSignal && child.terminationStatus == SIGKILL)
    }

    func verify(_ exp: Experiment) throws -> (status: Int32, text: String, ok: Bool?, behind: [String], edited: [String]) {
        let j = try exp.run("status", "--verify", "--json")
        let obj = try #require(JSONSerialization.jsonObject(with: Data(j.stdout.utf8)) as? [String: Any], "\(j.stdout) \(j.stderr)")
        let v = try #require(obj["verify"] as? [String: Any])
        let text = try exp.run("status", "--verify")
        #expect(text.status == j.status)
        return (j.status, text.stdout, v["ok"] as? Bool, v["behind_views"] as? [String] ?? [], v["edited_views"] as? [String] ?? [])
    }

    @Test("killed between append and publish (before, between and after the views): status --verify is clean, the next locked command makes the views current, and an edited view still fails")
    func killBetweenAppendAndPublish() throws {
        try requireRoot()
        let exp = try Experiment(config: ["min_improvement": "0"])
        let results = exp.root + "/workspace/results.tsv", suite = exp.root + "/workspace/suite.json", train = exp.root + "/workspace/train_results.json"
        let failures = [exp.root + "/workspace/failures.json", exp.root + "/workspace/failures.md"]
        // (operation, agent, write to stop before, the views that are then behind); a train
        // run and a gate's train phases both change the failure views.
        let rounds: [(String, String, Int, [String])] = [
            ("benchmark", Agents.none, 0, [train] + failures),
            ("gate", Agents.addOnly, 1, [suite] + failures),          // results.tsv already written
            ("benchmark", Agents.addOnly, 5, []),                     // every view written, the head not
            ("gate", Agents.all, 0, [results, suite] + failures),
        ]
        var previousResults = ""
        for (i, (operation, agent, stopAt, behind)) in rounds.enumerated() {
            try exp.setAgent(agent)
            previousResults = try exp.file("workspace/results.tsv")
            try killChild(exp, operation, before: stopAt)
            let v = try verify(exp)
            #expect(v.status == 0 && v.ok == true, "round \(i): \(v.text)")
            #expect(v.behind == behind && v.edited.isEmpty, "round \(i): \(v.text)")
            for path in behind { #expect(v.text.contains("view behind the ledger, not tampered: \(path)"), "round \(i): \(v.text)") }

            // prepare takes the lock (and is then refused: already prepared): opening repairs.
            let p = try exp.run("prepare")
            #expect(p.status == 2, "round \(i): \(p.stderr)")
            #expect(behind.isEmpty || p.stderr.contains("regenerated workspace/"), "round \(i): \(p.stderr)")
            let after = try verify(exp)
            #expect(after.status == 0 && after.behind.isEmpty && after.edited.isEmpty, "round \(i): \(after.text)")
        }
        // The last round was an accepted gate: the ledger has 3 iterations, and so has the view.
        #expect(try exp.file("workspace/results.tsv").split(separator: "\n").count == 4)

        // An older copy put back after the repair is tampering: it fails, and no locked command hides it.
        try previousResults.write(toFile: results, atomically: true, encoding: .utf8)
        let rolledBack = try verify(exp)
        #expect(rolledBack.status == 1 && rolledBack.ok == false && rolledBack.edited == [results] && rolledBack.behind.isEmpty, "\(rolledBack.text)")
        #expect(rolledBack.text.contains("view differs from the ledger (tampered): \(results)"), "\(rolledBack.text)")
        let p = try exp.run("prepare")
        #expect(p.stderr.contains("workspace/results.tsv differ from the ledger and were left for `status --verify`"), "\(p.stderr)")
        #expect(try exp.file("workspace/results.tsv") == previousResults)
        try "edited\n".write(toFile: suite, atomically: true, encoding: .utf8)
        #expect(try verify(exp).edited == [results, suite])
    }
}

@Suite("The experiment's record kinds")
struct RecordKindReplayTests {
    @Test("every kind an experiment's ledger accepts has a replay in ExperimentState (a kind without one is refused as corrupt)")
    func everyKindReplays() throws {
        for (i, kind) in Set<RecordKind>.experiment.sorted(by: { $0.rawValue < $1.rawValue }).enumerated() {
            let row = LedgerRecord(seq: Int64(i + 1), kind: kind, time: "2026-01-01T00:00:00.000Z", payload: "{}",
                                   previousHash: Ledger.genesisHash, hash: "")
            do {
                _ = try ExperimentState(records: [row])
            } catch let e as LedgerError {
                // An empty payload may not decode as the kind's record; that is the replay running.
                #expect(e.code == .decoding, "\(kind): \(e)")
            }
        }
        let stranger = LedgerRecord(seq: 1, kind: "bogus", time: "2026-01-01T00:00:00.000Z", payload: "{}",
                                    previousHash: Ledger.genesisHash, hash: "")
        let error = #expect(throws: LedgerError.self) { _ = try ExperimentState(records: [stranger]) }
        #expect(error?.code == .corrupt)
    }
}
