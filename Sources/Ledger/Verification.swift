import GRDB

/// One thing wrong with the ledger. `seq` is the row the problem was found at (nil for a
/// problem with the ledger as a whole); `message` says what is wrong in words an operator can
/// act on, and always names the row.
public struct LedgerProblem: Sendable, Equatable, CustomStringConvertible {
    public var seq: Int64?
    public var message: String

    public init(seq: Int64?, message: String) {
        self.seq = seq
        self.message = message
    }

    public var description: String { message }
}

/// The outcome of ``Ledger/verify()``.
public struct LedgerVerification: Sendable {
    /// Rows read.
    public var records: Int
    /// The last row's stored hash (``Ledger/genesisHash`` when empty).
    public var head: String
    /// Everything found wrong, in seq order; empty when the chain is intact.
    public var problems: [LedgerProblem]

    public init(records: Int, head: String, problems: [LedgerProblem]) {
        self.records = records
        self.head = head
        self.problems = problems
    }

    public var ok: Bool { problems.isEmpty }
}

/// Walks the chain once. Kept apart from `Ledger` because it is the code an auditor reads.
enum ChainVerifier {
    static func verify(_ db: Database, kinds: Set<RecordKind>, expectedHead: (seq: Int64, hash: String)?) throws -> LedgerVerification {
        // Which row carries each hash, so that a broken link can say where the row it
        // points at went (moved later = reordered; earlier = rows between were removed).
        var owner: [String: Int64] = [:]
        for row in try Row.fetchAll(db, sql: "SELECT seq, CAST(hash AS TEXT) AS hash FROM records") {
            if let hash: String = row["hash"] { owner[hash] = row["seq"] }
        }

        var problems: [LedgerProblem] = []
        func report(_ seq: Int64?, _ message: String) { problems.append(LedgerProblem(seq: seq, message: message)) }

        var count = 0
        var previousSeq: Int64 = 0
        var previousHash = Ledger.genesisHash
        var hashAtExpectedSeq: String?
        let cursor = try Row.fetchCursor(db, sql: "SELECT \(Schema.columns) FROM records ORDER BY seq")
        while let raw = try cursor.next() {
            let row = StoredRow(raw)
            let seq = row.seq
            count += 1

            let gap = seq != previousSeq + 1
            if gap {
                let missing = seq - previousSeq - 1
                let rows = missing == 1 ? "row \(previousSeq + 1) is" : "rows \(previousSeq + 1)–\(seq - 1) are"
                let from = previousSeq == 0 ? "the ledger starts at row \(seq)" : "seq jumps from \(previousSeq) to \(seq)"
                report(previousSeq + 1, "\(rows) missing (\(from))")
            }
            if !kinds.contains(RecordKind(rawValue: row.kind)) {
                report(seq, "row \(seq) has unknown kind '\(row.kind)'")
            }
            if Timestamp.parse(row.time) == nil {
                report(seq, "row \(seq) has a malformed time '\(row.time)'")
            }
            if !CanonicalJSON.isObject(row.payload) {
                report(seq, "row \(seq) payload is not a JSON object")
            }
            let recomputed = LedgerRecord.chainHash(
                previousHash: row.previousHash, seq: seq, kind: row.kind, time: row.time, payload: row.payload)
            if recomputed != row.hash {
                report(seq, "row \(seq) was edited (content does not match its hash)")
            }
            // A gap already explains a broken link; anything else is reported on its own.
            if row.previousHash != previousHash && !gap {
                report(seq, linkMessage(seq: seq, previousSeq: previousSeq, pointsAt: owner[row.previousHash]))
            }
            if let expectedHead, seq == expectedHead.seq { hashAtExpectedSeq = row.hash }
            previousSeq = seq
            previousHash = row.hash
        }

        if let expectedHead {
            if expectedHead.seq > previousSeq {
                let rows = expectedHead.seq == previousSeq + 1
                    ? "row \(expectedHead.seq) is" : "rows \(previousSeq + 1)–\(expectedHead.seq) are"
                report(previousSeq + 1, "\(rows) missing from the end (the ledger was truncated: expected head is row \(expectedHead.seq), last row is \(previousSeq))")
            } else if let hash = hashAtExpectedSeq, hash != expectedHead.hash {
                report(expectedHead.seq, "row \(expectedHead.seq) does not carry the expected head hash (the chain was rewritten up to there)")
            }
        }
        return LedgerVerification(records: count, head: previousHash, problems: problems)
    }

    private static func linkMessage(seq: Int64, previousSeq: Int64, pointsAt target: Int64?) -> String {
        if let target {
            if target >= seq {
                return "rows were reordered at row \(seq) (its prev_hash is the hash of row \(target), which comes after it)"
            }
            return "rows were deleted or reordered before row \(seq) (its prev_hash is row \(target)'s hash, not row \(previousSeq)'s)"
        }
        if previousSeq == 0 {
            return "rows were deleted or reordered before row \(seq) (prev_hash is not the genesis hash)"
        }
        return "rows were deleted, replaced or reordered before row \(seq) (prev_hash does not match row \(previousSeq)'s hash)"
    }
}
