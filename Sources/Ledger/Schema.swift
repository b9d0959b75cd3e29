import GRDB

/// The ledger's SQLite schema, in one place.
///
/// Triggers make UPDATE and DELETE fail and refuse inserts that do not extend the chain at
/// its head. They are a guard against *mistakes* (a stray `UPDATE` in supervisor code, a
/// hand-run `sqlite3` session, `INSERT OR REPLACE`, whose implicit delete fires no DELETE
/// trigger but whose seq is not the next one), not against an attacker with write access to
/// the file: such a person can drop them. What detects that person is the hash chain
/// (``Ledger/verify()``). The triggers are re-created on every open, so a dropped guard comes
/// back the next time the supervisor starts.
enum Schema {
    /// Marks the file as an autoharness ledger ("AHLG"), so that opening some other SQLite
    /// database by mistake fails instead of adding tables to it.
    static let applicationID: Int32 = 0x4148_4C47
    /// `PRAGMA user_version` of the schema below; a newer file is refused, not downgraded.
    static let version = 1

    static let create = """
        CREATE TABLE records (
            seq INTEGER PRIMARY KEY,
            kind TEXT NOT NULL,
            time TEXT NOT NULL,
            payload TEXT NOT NULL,
            prev_hash TEXT NOT NULL,
            hash TEXT NOT NULL
        );
        CREATE INDEX records_by_kind ON records (kind, seq);
        """

    static let guards = """
        CREATE TRIGGER IF NOT EXISTS records_no_update BEFORE UPDATE ON records
        BEGIN SELECT RAISE(ABORT, 'ledger records are append-only: UPDATE is not allowed'); END;
        CREATE TRIGGER IF NOT EXISTS records_no_delete BEFORE DELETE ON records
        BEGIN SELECT RAISE(ABORT, 'ledger records are append-only: DELETE is not allowed'); END;
        CREATE TRIGGER IF NOT EXISTS records_append_at_head BEFORE INSERT ON records
        WHEN NEW.seq IS NOT (SELECT COALESCE(MAX(seq), 0) + 1 FROM records)
          OR NEW.prev_hash IS NOT COALESCE((SELECT hash FROM records ORDER BY seq DESC LIMIT 1), '\(Ledger.genesisHash)')
        BEGIN SELECT RAISE(ABORT, 'ledger rows must extend the chain at its head'); END;
        """

    /// The columns every read selects. CAST keeps a tampered value of the wrong storage
    /// class (a blob in `kind`, say) readable, so that `verify()` reports it instead of the
    /// row decoder trapping.
    static let columns =
        "seq, CAST(kind AS TEXT) AS kind, CAST(time AS TEXT) AS time, CAST(payload AS TEXT) AS payload, "
        + "CAST(prev_hash AS TEXT) AS prev_hash, CAST(hash AS TEXT) AS hash"

    /// Creates the schema in an empty file, checks the identity of an existing one, and
    /// re-arms the guard triggers. Runs inside the caller's transaction.
    static func prepare(_ db: Database, path: String) throws {
        let applicationID = try Int32.fetchOne(db, sql: "PRAGMA application_id") ?? 0
        let version = try Int.fetchOne(db, sql: "PRAGMA user_version") ?? 0
        let objects = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM sqlite_master") ?? 0
        if applicationID == 0 && version == 0 && objects == 0 {
            try db.execute(sql: create)
            try db.execute(sql: "PRAGMA application_id = \(Self.applicationID)")
            try db.execute(sql: "PRAGMA user_version = \(Self.version)")
        } else if applicationID != Self.applicationID {
            throw LedgerError(.incompatible, "\(path) is a SQLite database but not an autoharness ledger (application_id \(applicationID))")
        } else if version != Self.version {
            throw LedgerError(.incompatible, "\(path) has ledger schema version \(version); this autoharness reads version \(Self.version)")
        }
        try db.execute(sql: guards)
    }
}
