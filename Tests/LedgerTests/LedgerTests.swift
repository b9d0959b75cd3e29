import Foundation
import GRDB
import Ledger
import Testing
import TestSupport

struct IterationPayload: Codable, Equatable {
    var iteration: Int
    var valScore: Double
    var commit: String
    var url: String
    var at: Date
    var note: String?
}

@Suite("Ledger basics")
struct LedgerBasicsTests {
    @Test("a Codable payload round-trips through append and records")
    func appendReadRoundTrip() throws {
        let dir = try TempDir()
        let ledger = try Ledger(path: dir.file("ledger.db"), kinds: .test)
        let payload = IterationPayload(iteration: 3, valScore: 0.8125, commit: "abc123", url: "agent/agent.py",
                                       at: Date(timeIntervalSince1970: 1_700_000_000.5), note: "line\nbreak \"quoted\" é")
        let appended = try ledger.append(.iteration, payload)
        try ledger.append(.note, ["text": "hello"])

        #expect(appended.seq == 1)
        #expect(appended.previousHash == Ledger.genesisHash)
        #expect(appended.hashIsValid)
        #expect(Timestamp.parse(appended.time) != nil)
        #expect(!appended.payload.contains("\n"), "payloads are single-line JSON")
        #expect(appended.payload.contains("\"url\":\"agent/agent.py\""), "slashes are not escaped")

        let all = try ledger.records()
        #expect(all.map(\.seq) == [1, 2])
        #expect(all[0] == appended)
        #expect(try all[0].decode(IterationPayload.self) == payload)
        #expect(all[1].previousHash == all[0].hash)

        #expect(try ledger.records(kind: .iteration) == [appended])
        #expect(try ledger.records(kind: .violation).isEmpty)
        #expect(try ledger.last(.note)?.seq == 2)
        #expect(try ledger.last(.gateAttempt) == nil)
        let head = try ledger.head
        #expect(head.seq == 2 && head.hash == all[1].hash)
    }

    @Test("a kind its owner did not name is refused on append and nothing is written; reopened with it, the row is read")
    func unnamedKindRefused() throws {
        let dir = try TempDir()
        let ledger = try Ledger(path: dir.file("ledger.db"), kinds: [.note])
        let error = #expect(throws: LedgerError.self) { try ledger.appendAll([(.note, ["n": 1]), (.iteration, ["n": 2])]) }
        #expect(error?.code == .encoding && error?.message.contains("'iteration' is not a kind this ledger records") == true,
                "\(String(describing: error))")
        #expect(try ledger.records().isEmpty)
        try ledger.append(.note, ["n": 1])
        #expect(try ledger.records().map(\.kind) == [.note])
        // The same file opened by an owner that does not record notes: the row is damage.
        let stranger = try Ledger(path: dir.file("ledger.db"), kinds: [.iteration])
        #expect(throws: LedgerError.self) { try stranger.records() }
        #expect(try stranger.verify().problems.map(\.message) == ["row 1 has unknown kind 'note'"])
    }

    @Test("an empty ledger's head is row 0 with the genesis hash")
    func emptyHead() throws {
        let dir = try TempDir()
        let ledger = try Ledger(path: dir.file("ledger.db"), kinds: .test)
        let head = try ledger.head
        #expect(head.seq == 0 && head.hash == String(repeating: "0", count: 64))
        let verification = try ledger.verify()
        #expect(verification.ok && verification.records == 0 && verification.head == Ledger.genesisHash)
    }

    @Test("the same payload gives the same text and hash, whatever the key order")
    func canonicalJSONIsStable() throws {
        struct AB: Encodable { var b = "x/y"; var a = 1; var c = [1, 2] }
        struct BA: Encodable { var c = [1, 2]; var a = 1; var b = "x/y" }
        let dir = try TempDir()
        let first = try Ledger(path: dir.file("one.db"), kinds: .test, clock: pinnedClock)
        let second = try Ledger(path: dir.file("two.db"), kinds: .test, clock: pinnedClock)
        let r1 = try first.append(.note, AB())
        let r2 = try second.append(.note, BA())
        // Dictionaries iterate in per-process random order; the encoding must not.
        var dict: [String: AnyCodableValue] = [:]
        for key in ["c", "b", "a"] { dict[key] = key == "a" ? .int(1) : key == "b" ? .string("x/y") : .ints([1, 2]) }
        let third = try Ledger(path: dir.file("three.db"), kinds: .test, clock: pinnedClock)
        let r3 = try third.append(.note, dict)

        let expected = #"{"a":1,"b":"x/y","c":[1,2]}"#
        #expect(r1.payload == expected && r2.payload == expected && r3.payload == expected)
        #expect(r1.time == "2025-06-15T15:06:40.123Z")
        // Fixed vector, computed with coreutils: printf '%s' "$(printf '0…0\n1\nnote\n…')" | sha256sum
        #expect(r1.hash == "f9638f5ba5b6add875a946f0a4c18b482f8ea91f9c5ff35a3251df7a921750fa")
        #expect(r2.hash == r1.hash && r3.hash == r1.hash)
    }

    @Test("a payload that is not a JSON object is refused and nothing is written")
    func nonObjectPayloadRefused() throws {
        let dir = try TempDir()
        let ledger = try Ledger(path: dir.file("ledger.db"), kinds: .test)
        for payload in [5, [1, 2]] as [any Encodable] {
            let error = #expect(throws: LedgerError.self) { try ledger.appendAll([(.note, payload)]) }
            #expect(error?.code == .encoding)
        }
        #expect(throws: LedgerError.self) { try ledger.append(.note, "text") }
        #expect(try ledger.head.seq == 0)
    }

    @Test("the database and its WAL files are created mode 0600, in WAL mode")
    func privateFileMode() throws {
        let dir = try TempDir()
        let path = dir.file("ledger.db")
        let ledger = try Ledger(path: path, kinds: .test)
        try ledger.append(.note, ["x": 1])
        #expect(try permissions(path) == 0o600)
        for suffix in ["-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            #expect(try permissions(path + suffix) == 0o600, "\(suffix)")
        }
        let mode = try DatabaseQueue(path: path).read { db in try String.fetchOne(db, sql: "PRAGMA journal_mode") }
        #expect(mode == "wal")
    }

    @Test("an existing ledger file that is group- or world-readable is made 0600")
    func existingFileTightened() throws {
        let dir = try TempDir()
        let path = dir.file("ledger.db")
        #expect(FileManager.default.createFile(atPath: path, contents: nil, attributes: [.posixPermissions: 0o644]))
        _ = try Ledger(path: path, kinds: .test)
        #expect(try permissions(path) == 0o600)
    }

    @Test("a symbolic link in place of the ledger is refused")
    func symlinkRefused() throws {
        let dir = try TempDir()
        try FileManager.default.createSymbolicLink(atPath: dir.file("ledger.db"), withDestinationPath: dir.file("elsewhere.db"))
        let error = #expect(throws: LedgerError.self) { _ = try Ledger(path: dir.file("ledger.db"), kinds: .test) }
        #expect(error?.code == .io && error?.errno == ELOOP)
        #expect(!FileManager.default.fileExists(atPath: dir.file("elsewhere.db")))
    }

    @Test("a SQLite database that is not a ledger is refused, not modified")
    func foreignDatabaseRefused() throws {
        let dir = try TempDir()
        let path = dir.file("other.db")
        try rawSQL(path, "CREATE TABLE things (x)")
        let error = #expect(throws: LedgerError.self) { _ = try Ledger(path: path, kinds: .test) }
        #expect(error?.code == .incompatible)
        let tables = try DatabaseQueue(path: path).read { db in try String.fetchAll(db, sql: "SELECT name FROM sqlite_master") }
        #expect(tables == ["things"])
    }

    @Test("reopening a ledger continues the same chain")
    func reopenContinuesChain() throws {
        let dir = try TempDir()
        do { _ = try ledger(in: dir, rows: 3) }
        let reopened = try Ledger(path: dir.file("ledger.db"), kinds: .test)
        let next = try reopened.append(.note, ["n": 4])
        #expect(next.seq == 4)
        #expect(try reopened.verify().ok)
    }

    @Test("timestamps are fixed-width RFC 3339 UTC with milliseconds, and parse strictly")
    func timestampFormat() {
        #expect(Timestamp.format(Date(timeIntervalSince1970: 0)) == "1970-01-01T00:00:00.000Z")
        #expect(Timestamp.format(pinnedTime) == "2025-06-15T15:06:40.123Z")
        #expect(Timestamp.parse("2025-06-15T15:06:40.123Z").map(Timestamp.format) == "2025-06-15T15:06:40.123Z")
        #expect(Timestamp.parse("2025-06-15T15:06:40Z") != nil)
        for bad in ["2025-02-30T00:00:00.000Z", "2025-06-15T15:06:40.123+00:00", "2025-06-15 15:06:40.123Z", "", "x"] {
            #expect(Timestamp.parse(bad) == nil, "\(bad)")
        }
    }
}

/// A tiny heterogeneous JSON value for the dictionary-order test.
enum AnyCodableValue: Encodable {
    case int(Int), string(String), ints([Int])
    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .int(let v): try c.encode(v)
        case .string(let v): try c.encode(v)
        case .ints(let v): try c.encode(v)
        }
    }
}
