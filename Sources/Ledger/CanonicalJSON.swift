import Foundation

/// How payloads become the exact text that is hashed. The text is stored, and the hash is
/// over the stored text, so verification never re-encodes anything; canonical form matters
/// only so that the same value always produces the same row (stable diffs, reproducible
/// hashes in tests, and dictionary order that does not depend on per-process hash seeds).
enum CanonicalJSON {
    /// JSONEncoder with sorted keys and unescaped slashes; dates as `Timestamp` text.
    /// The result must be a JSON object: a bare string or array cannot grow a field later
    /// without changing its meaning, and views decode payloads as keyed containers.
    static func encode(_ value: any Encodable) throws(LedgerError) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(Timestamp.format(date))
        }
        let data: Data
        do {
            data = try encoder.encode(value)
        } catch {
            throw LedgerError(.encoding, "cannot encode a \(type(of: value)) payload", cause: error)
        }
        guard data.first == UInt8(ascii: "{"), let text = String(data: data, encoding: .utf8) else {
            throw LedgerError(.encoding, "a \(type(of: value)) payload must encode as a JSON object, not \(String(decoding: data.prefix(40), as: UTF8.self))")
        }
        return text
    }

    static func decoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = Timestamp.parse(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not an RFC 3339 UTC time: \(text)")
            }
            return date
        }
        return decoder
    }

    /// True when `text` parses as a JSON object (used by `verify()` on stored rows).
    static func isObject(_ text: String) -> Bool {
        guard let object = try? JSONSerialization.jsonObject(with: Data(text.utf8)) else { return false }
        return object is [String: Any]
    }
}
