import Foundation
import Ledger
import Testing
import TestSupport
import SupervisorIO

/// A real `kill -9` of a process in the middle of appending; the writer is a child process
/// (see `spawnTestChild`).
@Suite("Crash safety")
struct KillTests {
    static let childKey = "AUTOHARNESS_LEDGER_KILL_CHILD"

    struct BatchRow: Codable {
        var batch: String
        var index: Int
        var size: Int
    }

    @Test("child writer for the kill -9 test (runs only when that test spawns it)",
          .enabled(if: ProcessInfo.processInfo.environment[KillTests.childKey] != nil))
    func killChildWriter() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.childKey])
        let ledger = try Ledger(path: path, kinds: .test)
        var n = 0
        while true { // until killed
            n += 1
            let size = n % 4 + 1 // batches of 1–4 rows, so kills land inside multi-row transactions
            let id = "\(getpid())-\(n)"
            try ledger.appendAll((0..<size).map { (RecordKind.trainRun, BatchRow(batch: id, index: $0, size: size)) })
        }
    }

    @Test("a writer killed with SIGKILL mid-append leaves a valid chain of whole transactions")
    func survivesKillNine() throws {
        let dir = try TempDir()
        let path = dir.file("ledger.db")
        let ledger = try Ledger(path: path, kinds: .test)
        for round in 1...8 {
            let before = try ledger.head.seq
            let child = try spawnTestChild("killChildWriter", Self.childKey, path)

            // Let it append a varying number of rows, then kill it wherever it is.
            let target = before + 20 + Int64.random(in: 0..<80)
            let deadline = Date().addingTimeInterval(60)
            while try ledger.head.seq < target {
                try #require(child.isRunning, "round \(round): the child writer exited (status \(child.terminationStatus)) instead of appending")
                try #require(Date() < deadline, "round \(round): the child writer made no progress in 60 s")
                usleep(2_000)
            }
            kill(child.processIdentifier, SIGKILL)
            child.waitUntilExit()
            #expect(child.terminationReason == .uncaughtSignal && child.terminationStatus == SIGKILL)

            let reopened = try Ledger(path: path, kinds: .test)
            let v = try reopened.verify()
            #expect(v.ok, "round \(round): \(v.problems)")
            let rows = try reopened.records()
            #expect(rows.map(\.seq) == (1...Int64(rows.count)).map { $0 }, "round \(round): seqs are contiguous")
            // Every batch is all there: a transaction is never half-committed.
            var batches: [String: (seen: Int, size: Int)] = [:]
            for row in rows {
                let b = try row.decode(BatchRow.self)
                batches[b.batch, default: (0, b.size)].seen += 1
            }
            let partial = batches.filter { $0.value.seen != $0.value.size }
            #expect(partial.isEmpty, "round \(round): partial batches \(partial)")
        }
    }

    static let viewChildKey = "AUTOHARNESS_VIEW_KILL_CHILD"

    @Test("child view writer for the temporary-file test (runs only when that test spawns it)",
          .enabled(if: ProcessInfo.processInfo.environment[KillTests.viewChildKey] != nil))
    func killChildViewWriter() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.viewChildKey])
        var n = 0
        while true { // until killed
            n += 1
            try AtomicFile.write("view \(n)\n", to: path)
        }
    }

    @Test("a view writer killed before its rename leaves a temporary file; removeTemporaries removes exactly those of other processes")
    func killedWriterTemporaryRemoved() throws {
        let dir = try TempDir()
        let view = dir.file("results.tsv")
        // Killed wherever it is until one kill lands between creating and renaming.
        var left: [String] = []
        for _ in 0..<100 where left.isEmpty {
            unlink(view)
            let child = try spawnTestChild("killChildViewWriter", Self.viewChildKey, view)
            let deadline = Date().addingTimeInterval(30)
            while access(view, F_OK) != 0 {
                try #require(child.isRunning && Date() < deadline, "the child writer wrote nothing (status \(child.terminationStatus))")
                usleep(1_000)
            }
            usleep(useconds_t.random(in: 0...5_000))
            kill(child.processIdentifier, SIGKILL)
            child.waitUntilExit()
            left = try dir.entries().filter { $0 != "results.tsv" }
            #expect(left.allSatisfy { AtomicFile.temporaryOwner($0) == child.processIdentifier }, "\(left)")
        }
        try #require(!left.isEmpty, "no kill in 100 landed between a temporary file's creation and its rename")

        // Not removed: this process's own, a directory and a link with such names, other names.
        let own = ".suite.json.tmp-\(getpid())-abc"
        #expect(FileManager.default.createFile(atPath: dir.file(own), contents: nil))
        try FileManager.default.createDirectory(atPath: dir.file(".x.tmp-1-a"), withIntermediateDirectories: false)
        try FileManager.default.createSymbolicLink(atPath: dir.file(".y.tmp-1-a"), withDestinationPath: view)
        for other in [".notes.tmp", ".z.tmp-1-ABC", "z.tmp-1-a", ".tmp-1-a", ".z.tmp-0-a", ".z.tmp-1-"] {
            #expect(FileManager.default.createFile(atPath: dir.file(other), contents: nil))
        }
        let before = try dir.entries()
        #expect(AtomicFile.removeTemporaries(in: dir.path) == left)
        #expect(try dir.entries() == before.filter { !left.contains($0) })
        #expect(try String(contentsOfFile: view, encoding: .utf8).hasPrefix("view "))
    }
}
