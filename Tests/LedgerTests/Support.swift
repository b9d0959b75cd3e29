import Foundation
import GRDB
import Ledger
import Testing
import TestSupport

/// A private scratch directory, removed when the value goes away.
final class TempDir: Sendable {
    let path: String

    init() throws {
        var template = Array((NSTemporaryDirectory() + "/ledger-test-XXXXXX").utf8CString)
        let made = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        path = try #require(made.map { String(cString: $0) })
    }

    deinit { try? FileManager.default.removeItem(atPath: path) }

    func file(_ name: String) -> String { path + "/" + name }

    /// Directory entries, sorted (hidden ones included).
    func entries() throws -> [String] { try FileManager.default.contentsOfDirectory(atPath: path).sorted() }
}

/// A pinned clock: 2025-06-15T15:06:40.123Z.
let pinnedTime = Date(timeIntervalSince1970: 1_750_000_000.123)
let pinnedClock: @Sendable () -> Date = { pinnedTime }

/// A ledger with `count` `note` rows `{"n":i}` (i from 1).
func ledger(in dir: TempDir, rows count: Int, name: String = "ledger.db") throws -> Ledger {
    let ledger = try Ledger(path: dir.file(name), kinds: .test, clock: pinnedClock)
    for i in 1...max(count, 1) where count > 0 {
        try ledger.append(.note, ["n": i])
    }
    return ledger
}

/// What an attacker with write access to the file can do: open it with plain SQLite, drop the
/// guard triggers, and run SQL.
func tamper(_ path: String, _ statements: String...) throws {
    let db = try DatabaseQueue(path: path)
    try db.writeWithoutTransaction { db in
        try db.execute(sql: """
            DROP TRIGGER IF EXISTS records_no_update;
            DROP TRIGGER IF EXISTS records_no_delete;
            DROP TRIGGER IF EXISTS records_append_at_head;
            """)
        for sql in statements { try db.execute(sql: sql) }
    }
    try db.close()
}

/// Runs SQL on the file *without* dropping the triggers (a careless operator or a bug).
func rawSQL(_ path: String, _ sql: String) throws {
    let db = try DatabaseQueue(path: path)
    defer { try? db.close() }
    try db.write { db in try db.execute(sql: sql) }
}

/// Calls `body` on `count` threads at once and waits for all; rethrows the first error.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) throws -> Void) throws {
    let done = DispatchSemaphore(value: 0)
    let errors = SharedValue<[any Error]>([])
    for i in 0..<count {
        let thread = Thread {
            do { try body(i) } catch { errors.withLock { $0.append(error) } }
            done.signal()
        }
        thread.start()
    }
    for _ in 0..<count { done.wait() }
    if let first = errors.withLock({ $0.first }) { throw first }
}

// The kinds these tests record: the ledger knows none of its own.
extension RecordKind {
    static let note: RecordKind = "note"
    static let split: RecordKind = "split"
    static let baseline: RecordKind = "baseline"
    static let trainRun: RecordKind = "train_run"
    static let gateAttempt: RecordKind = "gate_attempt"
    static let iteration: RecordKind = "iteration"
    static let violation: RecordKind = "violation"
}

extension Set<RecordKind> {
    static let test: Set<RecordKind> = [.note, .split, .baseline, .trainRun, .gateAttempt, .iteration, .violation]
}
