import Foundation
import GRDB
import Glibc
import SupervisorIO

/// The supervisor's tamper-evident record of an experiment: iterations, gate attempts,
/// per-task train results, suite membership, violations.
///
/// It is the single source of truth. Only the privileged supervisor writes it, in a private
/// directory no sandbox mounts; the files the agent may read (results.tsv, suite.json,
/// train_results.json) are views regenerated from it with ``AtomicFile``.
///
/// Every row is hash-chained to the one before (see ``LedgerRecord`` for the formula and how
/// to recompute it by hand), so editing, deleting or reordering rows is detected by
/// ``verify()``, which names the rows at fault. Appends run in an IMMEDIATE transaction that
/// reads the head inside the transaction: two writers — threads, or two `Ledger` values on the
/// same file in different processes — are serialised by SQLite and can never fork the chain.
///
/// The database runs in WAL mode with `synchronous = FULL`: a committed append is on disk
/// when `append` returns, and a supervisor killed mid-append (even `kill -9`) leaves either
/// the whole transaction or none of it.
///
/// SQLite triggers also refuse UPDATE and DELETE on the table (``Schema``): a guard against
/// mistakes, not against an attacker with access to the file, who can drop them. The chain is
/// what catches that attacker; call ``verify(expectedHead:)`` at start-up.
public final class Ledger: Sendable {
    /// `prev_hash` of row 1.
    public static let genesisHash = String(repeating: "0", count: 64)

    /// The database file.
    public let path: String
    private let pool: DatabasePool
    private let clock: @Sendable () -> Date
    /// The kinds this ledger's owner records; a row of any other kind is damage.
    public let kinds: Set<RecordKind>

    /// Opens the ledger at `path`, creating it (mode 0600, schema, guard triggers) if it does
    /// not exist. An existing file is made 0600 if it was more open than that; a symbolic
    /// link, a non-regular file, or a SQLite database that is not a ledger is refused.
    ///
    /// - Parameters:
    ///   - path: The database file; its directory must exist (and should be private).
    ///   - kinds: The kinds of row its owner records: `append` refuses others, `records`
    ///     refuses a stored row of another kind, and `verify` reports it.
    ///   - busyTimeout: How long an append waits for another writer before failing.
    ///   - clock: Source of `time` for new rows (tests pin it).
    /// - Throws: ``LedgerError`` with code `.io`, `.database` or `.incompatible`.
    public init(path: String, kinds: Set<RecordKind>, busyTimeout: TimeInterval = 30,
                clock: @escaping @Sendable () -> Date = { Date() }) throws(LedgerError) {
        self.path = path
        self.kinds = kinds
        self.clock = clock
        try Self.createPrivateFile(path)

        var config = Configuration()
        config.label = "autoharness.ledger"
        config.busyMode = .timeout(busyTimeout)
        config.foreignKeysEnabled = true
        config.prepareDatabase { db in
            // FULL: in WAL mode NORMAL may lose the last commits on power loss, and a lost
            // commit here is a lost gate decision whose git commit already exists.
            try db.execute(sql: "PRAGMA synchronous = FULL")
            // Schema objects (the triggers) may not call functions with side effects.
            try db.execute(sql: "PRAGMA trusted_schema = OFF")
        }
        do {
            pool = try DatabasePool(path: path, configuration: config)
        } catch {
            throw LedgerError(.database, "cannot open the ledger at \(path)", cause: error)
        }
        try withDatabase("initialise") {
            try pool.writeWithoutTransaction { db in
                try db.inTransaction(.immediate) {
                    try Schema.prepare(db, path: path)
                    return .commit
                }
            }
        }
    }

    /// Appends one row. The payload is encoded as canonical JSON and must be an object.
    ///
    /// - Returns: The stored row, with its `seq` and `hash`.
    /// - Throws: ``LedgerError`` `.encoding` (nothing is written: also for a kind not in
    ///   `kinds`) or `.database`.
    @discardableResult
    public func append<T: Encodable>(_ kind: RecordKind, _ payload: T) throws(LedgerError) -> LedgerRecord {
        try appendAll([(kind, payload)])[0]
    }

    /// Appends several rows in one transaction: all of them or none. Every payload is encoded
    /// before the transaction starts, so an encoding failure writes nothing and holds no lock.
    ///
    /// - Returns: The stored rows, in order.
    @discardableResult
    public func appendAll(_ items: [(RecordKind, any Encodable)]) throws(LedgerError) -> [LedgerRecord] {
        try appendAll(try encode(items))
    }

    /// Rows encoded ahead of their append; their time is read when they are appended. A caller
    /// that holds its record to an instant encodes before it, so the rows' time does not grow
    /// with their size.
    public struct EncodedRows: Sendable {
        fileprivate var rows: [(RecordKind, String)]

        public static func + (a: EncodedRows, b: EncodedRows) -> EncodedRows { EncodedRows(rows: a.rows + b.rows) }
    }

    /// `items` encoded for `appendAll(_:)`, refused as it refuses them.
    public func encode(_ items: [(RecordKind, any Encodable)]) throws(LedgerError) -> EncodedRows {
        if let stranger = items.first(where: { !kinds.contains($0.0) }) {
            throw LedgerError(.encoding, "'\(stranger.0)' is not a kind this ledger records; nothing was appended")
        }
        return EncodedRows(rows: try items.map { item throws(LedgerError) in (item.0, try CanonicalJSON.encode(item.1)) })
    }

    /// Appends rows `encode(_:)` made, in order, under one time.
    public func appendAll(_ rows: EncodedRows) throws(LedgerError) -> [LedgerRecord] {
        let encoded = rows.rows
        guard !encoded.isEmpty else { return [] }
        return try withDatabase("append to") {
            try pool.writeWithoutTransaction { db in
                var appended: [LedgerRecord] = []
                // IMMEDIATE takes the write lock before the head is read: no other writer can
                // append between our read of the head and our insert.
                try db.inTransaction(.immediate) {
                    appended = []
                    var (seq, previous) = try Self.head(db)
                    // Read the clock after taking the lock, so time never runs backwards
                    // along the chain because of lock waits (only if the clock itself does).
                    let time = Timestamp.format(clock())
                    for (kind, payload) in encoded {
                        seq += 1
                        let hash = LedgerRecord.chainHash(previousHash: previous, seq: seq, kind: kind.rawValue, time: time, payload: payload)
                        try db.execute(
                            sql: "INSERT INTO records (seq, kind, time, payload, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?)",
                            arguments: [seq, kind.rawValue, time, payload, previous, hash])
                        appended.append(LedgerRecord(seq: seq, kind: kind, time: time, payload: payload, previousHash: previous, hash: hash))
                        previous = hash
                    }
                    return .commit
                }
                return appended
            }
        }
    }

    /// All rows, or all rows of one kind, in seq order.
    ///
    /// - Throws: ``LedgerError`` `.corrupt` if a row's kind is unknown (run ``verify()``).
    public func records(kind: RecordKind? = nil) throws(LedgerError) -> [LedgerRecord] {
        let rows = try withDatabase("read") {
            try pool.read { db in
                if let kind {
                    return try StoredRow.fetchAll(db, where: "WHERE kind = ? ORDER BY seq", [kind.rawValue])
                }
                return try StoredRow.fetchAll(db, where: "ORDER BY seq", [])
            }
        }
        return try rows.map { row throws(LedgerError) in try row.record(kinds: kinds) }
    }

    /// The newest row of `kind`, or nil if there is none.
    public func last(_ kind: RecordKind) throws(LedgerError) -> LedgerRecord? {
        let row = try withDatabase("read") {
            try pool.read { db in
                try StoredRow.fetchAll(db, where: "WHERE kind = ? ORDER BY seq DESC LIMIT 1", [kind.rawValue]).first
            }
        }
        return try row?.record(kinds: kinds)
    }

    /// The last row's seq and hash; `(0, genesisHash)` for an empty ledger. The supervisor
    /// writes this into git commit trailers so that a truncated tail can be detected
    /// (see ``verify(expectedHead:)``).
    public var head: (seq: Int64, hash: String) {
        get throws(LedgerError) {
            try withDatabase("read") { try pool.read { db in try Self.head(db) } }
        }
    }

    /// Recomputes every hash and checks every link; see ``verify(expectedHead:)``.
    public func verify() throws(LedgerError) -> LedgerVerification {
        try verify(expectedHead: nil)
    }

    /// Recomputes every row's hash and checks every link of the chain, reporting each
    /// problem with the row it concerns. Detects edited rows (content or hash), deleted
    /// rows, rows reordered by renumbering, unknown kinds, malformed times and payloads that
    /// are not JSON objects.
    ///
    /// Deleting rows from the *end* leaves a shorter chain that is still valid: the chain
    /// alone cannot detect truncation. Pass the head recorded elsewhere (the `Ledger-Head`
    /// trailer of the latest git commit) as `expectedHead` to detect it.
    ///
    /// - Throws: Only if the database cannot be read at all; damage is reported in the
    ///   result's `problems`, never thrown.
    public func verify(expectedHead: (seq: Int64, hash: String)?) throws(LedgerError) -> LedgerVerification {
        try withDatabase("verify") {
            try pool.read { db in try ChainVerifier.verify(db, kinds: kinds, expectedHead: expectedHead) }
        }
    }

    // MARK: - Internals

    static func head(_ db: Database) throws -> (seq: Int64, hash: String) {
        guard let row = try Row.fetchOne(db, sql: "SELECT seq, CAST(hash AS TEXT) AS hash FROM records ORDER BY seq DESC LIMIT 1") else {
            return (0, genesisHash)
        }
        return (row["seq"], row["hash"] ?? "")
    }

    /// Runs a GRDB call, turning whatever it throws into a ``LedgerError`` that names the
    /// file and the operation.
    private func withDatabase<R>(_ what: String, _ body: () throws -> R) throws(LedgerError) -> R {
        do {
            return try body()
        } catch let error as LedgerError {
            throw error
        } catch {
            throw LedgerError(.database, "cannot \(what) the ledger at \(path)", cause: error)
        }
    }

    /// Creates the file 0600 before SQLite sees it (SQLite would create it 0644 minus umask,
    /// and its -wal and -shm files copy the main file's mode), refusing symbolic links so that
    /// a link planted in the directory cannot redirect the ledger.
    private static func createPrivateFile(_ path: String) throws(LedgerError) {
        do throws(IOFailure) {
            let fd = try POSIX.open(path, O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o600)
            defer { POSIX.close(fd) }
            let st = try POSIX.fstat(fd, path)
            guard st.st_mode & S_IFMT == S_IFREG else { throw IOFailure("cannot use", path, reason: "not a regular file") }
            if st.st_mode & 0o7077 != 0 { try POSIX.fchmod(fd, 0o600, path) }
        } catch {
            throw error.reason == nil ? LedgerError(error) : LedgerError(.io, "\(path) is not a regular file")
        }
    }
}

/// A row as stored, before its kind is checked: `verify()` must be able to look at rows this
/// build cannot represent as a ``LedgerRecord``.
struct StoredRow: Sendable {
    var seq: Int64
    var kind: String
    var time: String
    var payload: String
    var previousHash: String
    var hash: String

    init(_ row: Row) {
        seq = row["seq"]
        kind = row["kind"] ?? ""
        time = row["time"] ?? ""
        payload = row["payload"] ?? ""
        previousHash = row["prev_hash"] ?? ""
        hash = row["hash"] ?? ""
    }

    static func fetchAll(_ db: Database, where clause: String, _ arguments: StatementArguments) throws -> [StoredRow] {
        try Row.fetchAll(db, sql: "SELECT \(Schema.columns) FROM records \(clause)", arguments: arguments).map(StoredRow.init)
    }

    func record(kinds: Set<RecordKind>) throws(LedgerError) -> LedgerRecord {
        let kind = RecordKind(rawValue: kind)
        guard kinds.contains(kind) else {
            throw LedgerError(.corrupt, "row \(seq) has unknown kind '\(self.kind)' (run verify)")
        }
        return LedgerRecord(seq: seq, kind: kind, time: time, payload: payload, previousHash: previousHash, hash: hash)
    }
}
