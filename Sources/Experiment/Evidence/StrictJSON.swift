/// What a verifier must refuse before it parses a bundle or a payload with a JSON library:
/// two members of one object with the same name. Parsers disagree on which one wins (Swift's
/// JSONDecoder keeps the first, Python's json the last), so one file would verify as two
/// different Statements. Names compare after unescaping ("a" and "\u0061" are the same name).
/// Also refuses nesting deeper than `maxDepth` and anything that is not JSON.
enum StrictJSON {
    static let maxDepth = 200

    /// nil when `bytes` is one JSON value with no repeated names; otherwise what is wrong.
    static func problem(_ bytes: [UInt8]) -> String? {
        var p = Parser(bytes: bytes)
        do {
            p.skipSpace()
            try p.value(depth: 0)
            p.skipSpace()
            guard p.i == bytes.count else { throw Failure(what: "text after the value at byte \(p.i)") }
            return nil
        } catch let f as Failure {
            return f.what
        } catch {
            return "\(error)"
        }
    }

    struct Failure: Error { var what: String }

    struct Parser {
        let bytes: [UInt8]
        var i = 0

        mutating func skipSpace() {
            while i < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[i]) { i += 1 }
        }

        mutating func expect(_ c: UInt8) throws {
            guard i < bytes.count, bytes[i] == c else { throw Failure(what: "expected '\(Character(Unicode.Scalar(c)))' at byte \(i)") }
            i += 1
        }

        mutating func value(depth: Int) throws {
            guard depth <= StrictJSON.maxDepth else { throw Failure(what: "nested deeper than \(StrictJSON.maxDepth)") }
            guard i < bytes.count else { throw Failure(what: "unexpected end") }
            switch bytes[i] {
            case UInt8(ascii: "{"):
                i += 1
                var names = Set<[UInt16]>()
                skipSpace()
                if i < bytes.count, bytes[i] == UInt8(ascii: "}") { i += 1; return }
                while true {
                    skipSpace()
                    let name = try string()
                    guard names.insert(name).inserted else {
                        throw Failure(what: "the name \"\(String(decoding: name, as: UTF16.self))\" appears twice in one object (byte \(i))")
                    }
                    skipSpace()
                    try expect(UInt8(ascii: ":"))
                    skipSpace()
                    try value(depth: depth + 1)
                    skipSpace()
                    if i < bytes.count, bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                    try expect(UInt8(ascii: "}"))
                    return
                }
            case UInt8(ascii: "["):
                i += 1
                skipSpace()
                if i < bytes.count, bytes[i] == UInt8(ascii: "]") { i += 1; return }
                while true {
                    skipSpace()
                    try value(depth: depth + 1)
                    skipSpace()
                    if i < bytes.count, bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                    try expect(UInt8(ascii: "]"))
                    return
                }
            case UInt8(ascii: "\""):
                _ = try string()
            default:
                // A number or a literal: its characters, checked by the JSON parser after.
                let start = i
                while i < bytes.count, !([0x2C, 0x5D, 0x7D, 0x20, 0x09, 0x0A, 0x0D] as [UInt8]).contains(bytes[i]) { i += 1 }
                guard i > start else { throw Failure(what: "a value expected at byte \(start)") }
            }
        }

        /// A string's UTF-16 code units after unescaping.
        mutating func string() throws -> [UInt16] {
            try expect(UInt8(ascii: "\""))
            var out: [UInt8] = []
            var units: [UInt16] = []
            func flush() {
                units += Array(String(decoding: out, as: UTF8.self).utf16)
                out.removeAll()
            }
            while true {
                guard i < bytes.count else { throw Failure(what: "unterminated string") }
                let c = bytes[i]
                i += 1
                if c == UInt8(ascii: "\"") { flush(); return units }
                guard c >= 0x20 else { throw Failure(what: "a control character in a string at byte \(i - 1)") }
                guard c == UInt8(ascii: "\\") else { out.append(c); continue }
                guard i < bytes.count else { throw Failure(what: "unterminated escape") }
                let e = bytes[i]
                i += 1
                let simple: [UInt8: UInt8] = [0x22: 0x22, 0x5C: 0x5C, 0x2F: 0x2F, 0x62: 0x08, 0x66: 0x0C, 0x6E: 0x0A, 0x72: 0x0D, 0x74: 0x09]
                if let s = simple[e] { out.append(s); continue }
                guard e == UInt8(ascii: "u"), i + 4 <= bytes.count, let v = UInt16(String(decoding: bytes[i..<i + 4], as: UTF8.self), radix: 16) else {
                    throw Failure(what: "a bad escape at byte \(i - 1)")
                }
                i += 4
                flush()
                units.append(v)
            }
        }
    }
}
