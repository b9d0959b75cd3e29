import Foundation
import GRDB
import Ledger
import Testing

/// A payload whose encoding fails, like a score that came out NaN.
struct FailingPayload: Encodable {
    struct Refused: Error {}
    func encode(to encoder: any Encoder) throws { throw Refused() }
}

@Suite("Append-only guards and atomicity")
struct AtomicityTests {
    @Test("triggers make UPDATE, DELETE and off-head inserts fail")
    func triggersBlockEdits() throws {
        let dir = try TempDir()
        let path = dir.file("ledger.db")
        let ledger = try ledger(in: dir, rows: 3)
        let attempts = [
            "UPDATE records SET payload = '{}' WHERE seq = 2",
            "DELETE FROM records WHERE seq = 3",
            "DELETE FROM records",
            "INSERT OR REPLACE INTO records VALUES (2, 'note', 'x', '{}', 'x', 'x')",
            "INSERT INTO records VALUES (9, 'note', 'x', '{}', 'x', 'x')",
        ]
        for sql in attempts {
            let error = #expect(throws: DatabaseError.self, "\(sql)") { try rawSQL(path, sql) }
            #expect(error?.message?.hasPrefix("ledger") == true, "\(sql): \(String(describing: error))")
        }
        #expect(try ledger.verify().ok)
        #expect(try ledger.records().count == 3)
    }

    @Test("dropped triggers are re-armed the next time the ledger is opened")
    func triggersRearmedOnOpen() throws {
        let dir = try TempDir()
        let path = dir.file("ledger.db")
        _ = try ledger(in: dir, rows: 2)
        try tamper(path) // drops them
        _ = try Ledger(path: path, kinds: .test)
        #expect(throws: DatabaseError.self) { try rawSQL(path, "DELETE FROM records") }
    }

    /// A gate encodes its rows before the instant it holds its record to: their time must be
    /// the append's, so work done before it never shows in them.
    @Test("rows encoded ahead take the time of their append, in order with rows encoded at it; an unknown kind is refused when encoded")
    func encodedAheadTakeTheAppendsTime() throws {
        let dir = try TempDir()
        final class Now: @unchecked Sendable { var t = Date(timeIntervalSince1970: 1_800_000_000) }
        let now = Now()
        let ledger = try Ledger(path: dir.file("ledger.db"), kinds: .test, clock: { now.t })
        let early = try ledger.encode([(.note, ["n": 1]), (.note, ["n": 2])])
        now.t = now.t.addingTimeInterval(3600)
        let rows = try ledger.appendAll(try ledger.encode([(.note, ["n": 0])]) + early)
        #expect(rows.map(\.time) == Array(repeating: Timestamp.format(now.t), count: 3))
        #expect(rows.map(\.payload) == [#"{"n":0}"#, #"{"n":1}"#, #"{"n":2}"#])
        #expect(try ledger.verify().ok)
        let refused = #expect(throws: LedgerError.self) { try Ledger(path: dir.file("other.db"), kinds: [.note]).encode([(.iteration, ["score": 1])]) }
        #expect(refused?.code == .encoding)
    }

    @Test("appendAll whose second payload fails to encode writes nothing")
    func appendAllEncodingFailureWritesNothing() throws {
        let dir = try TempDir()
        let ledger = try ledger(in: dir, rows: 2)
        let error = #expect(throws: LedgerError.self) {
            try ledger.appendAll([(.note, ["n": 3]), (.note, FailingPayload()), (.note, ["n": 4])])
        }
        #expect(error?.code == .encoding)
        #expect(try ledger.head.seq == 2)

        let nan = #expect(throws: LedgerError.self) {
            try ledger.appendAll([(.iteration, ["score": 0.5]), (.iteration, ["score": Double.nan])])
        }
        #expect(nan?.code == .encoding)
        #expect(try ledger.head.seq == 2)
    }

    @Test("appendAll that fails inside the transaction rolls back the rows it already inserted")
    func appendAllRollsBack() throws {
        let dir = try TempDir()
        let path = dir.file("ledger.db")
        let ledger = try ledger(in: dir, rows: 2)
        // A trigger that aborts the insert of one particular payload, so the failure happens
        // after the first row of the batch is already in the transaction.
        try rawSQL(path, """
            CREATE TRIGGER poison BEFORE INSERT ON records WHEN instr(NEW.payload, 'poison') > 0
            BEGIN SELECT RAISE(ABORT, 'poisoned'); END
            """)
        let error = #expect(throws: LedgerError.self) {
            try ledger.appendAll([(.note, ["n": "fine"]), (.note, ["n": "poison"]), (.note, ["n": "fine"])])
        }
        #expect(error?.code == .database)
        #expect(try ledger.head.seq == 2)

        let batch = try ledger.appendAll([(.split, ["a": 1]), (.baseline, ["b": 2]), (.note, ["c": 3])])
        #expect(batch.map(\.seq) == [3, 4, 5])
        #expect(Set(batch.map(\.time)).count == 1, "one transaction, one time")
        #expect(try ledger.verify().ok)
        #expect(try ledger.appendAll([]).isEmpty)
    }

    @Test("4 threads appending through one Ledger produce one contiguous, valid chain")
    func concurrentAppendsSharedLedger() throws {
        let dir = try TempDir()
        let ledger = try Ledger(path: dir.file("ledger.db"), kinds: .test)
        try onThreads(4) { thread in
            for i in 0..<50 { try ledger.append(.note, ["thread": thread, "i": i]) }
        }
        try expectContiguousValid(ledger, count: 200)
    }

    @Test("4 threads each with their own Ledger on one file (like 4 processes) never fork the chain")
    func concurrentAppendsSeparateConnections() throws {
        let dir = try TempDir()
        let path = dir.file("ledger.db")
        _ = try Ledger(path: path, kinds: .test)
        try onThreads(4) { thread in
            let mine = try Ledger(path: path, kinds: .test)
            for i in 0..<50 {
                if i % 10 == 0 {
                    try mine.appendAll([(.trainRun, ["thread": thread, "i": i]), (.note, ["thread": thread, "i": i])])
                } else {
                    try mine.append(.note, ["thread": thread, "i": i])
                }
            }
        }
        try expectContiguousValid(try Ledger(path: path, kinds: .test), count: 220)
    }

    private func expectContiguousValid(_ ledger: Ledger, count: Int) throws {
        let rows = try ledger.records()
        #expect(rows.map(\.seq) == (1...Int64(count)).map { $0 })
        for (a, b) in zip(rows, rows.dropFirst()) { #expect(b.previousHash == a.hash) }
        let v = try ledger.verify()
        #expect(v.ok, "\(v.problems)")
        #expect(v.records == count)
    }
}
