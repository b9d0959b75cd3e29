import Crypto
import Foundation

/// What a ledger row records, by name. The ledger does not know what the names mean: its
/// owner says which kinds it records when it opens it (``Ledger/init(path:kinds:busyTimeout:clock:)``)
/// and defines them (the experiment's are in `Experiment`). The name is what is stored and
/// hashed, so a kind may be added but never renamed.
public struct RecordKind: RawRepresentable, Hashable, Sendable, Codable, ExpressibleByStringLiteral, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }
    public var description: String { rawValue }
}

/// One row of the ledger, exactly as stored.
///
/// Each row's `hash` commits to its own content and, through `previousHash`, to every row
/// before it:
///
///     hash = hex(SHA-256(previousHash + "\n" + seq + "\n" + kind + "\n" + time + "\n" + payload))
///
/// where `seq` is in decimal, `kind` is the raw value, and the whole string is UTF-8 with no
/// trailing newline. The first row's `previousHash` is 64 zeros (``Ledger/genesisHash``).
/// An operator can recompute row 5's hash without autoharness:
///
///     printf '%s' "$(sqlite3 ledger.db "SELECT prev_hash || char(10) || seq || char(10) ||
///         kind || char(10) || time || char(10) || payload FROM records WHERE seq = 5")" | sha256sum
///
/// (`$(…)` strips sqlite3's trailing newline; payloads are single-line JSON ending in `}`, so
/// nothing else is lost) and compare it with `sqlite3 ledger.db "SELECT hash FROM records
/// WHERE seq = 5"`.
public struct LedgerRecord: Sendable, Equatable {
    /// Position in the chain, from 1, without gaps.
    public var seq: Int64
    public var kind: RecordKind
    /// When the supervisor appended the row: RFC 3339 UTC with milliseconds (``Timestamp``).
    public var time: String
    /// Canonical JSON object text (sorted keys, unescaped slashes): the hashed bytes.
    public var payload: String
    /// The previous row's `hash`, or ``Ledger/genesisHash`` for row 1.
    public var previousHash: String
    /// Lower-case hex SHA-256 as described above.
    public var hash: String

    public init(seq: Int64, kind: RecordKind, time: String, payload: String, previousHash: String, hash: String) {
        self.seq = seq
        self.kind = kind
        self.time = time
        self.payload = payload
        self.previousHash = previousHash
        self.hash = hash
    }

    /// Decodes the payload (dates as ``Timestamp`` text, like the encoder wrote them).
    public func decode<T: Decodable>(_ type: T.Type) throws(LedgerError) -> T {
        do {
            return try CanonicalJSON.decoder().decode(type, from: Data(payload.utf8))
        } catch {
            throw LedgerError(.decoding, "row \(seq) (\(kind.rawValue)) does not decode as \(type)", cause: error)
        }
    }

    /// True when `hash` matches the row's content and `previousHash`.
    public var hashIsValid: Bool {
        hash == Self.chainHash(previousHash: previousHash, seq: seq, kind: kind.rawValue, time: time, payload: payload)
    }

    /// The hash a row with these fields must carry (see the type's documentation). `kind` is
    /// a string so that `verify()` can hash rows whose kind this build does not know.
    public static func chainHash(previousHash: String, seq: Int64, kind: String, time: String, payload: String) -> String {
        let text = "\(previousHash)\n\(seq)\n\(kind)\n\(time)\n\(payload)"
        return hex(SHA256.hash(data: Array(text.utf8)))
    }

    private static func hex(_ digest: SHA256.Digest) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(64)
        for byte in digest {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
