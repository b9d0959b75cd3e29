/// JSON exactly as RFC 8259 defines it, for the inference gate's request bodies: no
/// duplicate keys at any depth, no lone surrogates, no invalid UTF-8, no comments, no NaN, no
/// trailing bytes, nesting at most 128 deep. What the gate judged is what it forwards: the
/// body the vendor receives is `serialized()` of the parsed value, never the sandbox's bytes,
/// so two parsers can never read one body two ways (a second `"store": true` that the
/// vendor's parser would keep and ours would not, an escaped key spelled `"st\u006fre"`).
/// Numbers keep their original text.
indirect enum StrictJSON: Equatable {
    case null
    case bool(Bool)
    case number(String)
    case string(String)
    case array([StrictJSON])
    case object([Member])

    struct Member: Equatable {
        var key: String
        var value: StrictJSON
    }

    struct Malformed: Error, Equatable {
        var offset: Int
        var reason: String
    }

    static let maxDepth = 128
    /// Values in one body: a 32 MiB `[0,0,…]` is 16 million of them, about 1 GiB parsed.
    static let maxValues = 1_000_000

    static func parse(_ bytes: [UInt8]) throws(Malformed) -> StrictJSON {
        var p = Parser(bytes: bytes)
        p.skipSpace()
        let v = try p.value(depth: 0)
        p.skipSpace()
        guard p.i == bytes.count else { throw Malformed(offset: p.i, reason: "bytes after the JSON value") }
        return v
    }

    subscript(key: String) -> StrictJSON? {
        guard case .object(let members) = self else { return nil }
        return members.first { $0.key == key }?.value
    }

    /// The same object with `key` set to `value` (replaced in place, or appended).
    func setting(_ key: String, to value: StrictJSON) -> StrictJSON {
        guard case .object(var members) = self else { return self }
        if let i = members.firstIndex(where: { $0.key == key }) {
            members[i].value = value
        } else {
            members.append(Member(key: key, value: value))
        }
        return .object(members)
    }

    func serialized() -> [UInt8] {
        var out: [UInt8] = []
        write(into: &out)
        return out
    }

    private func write(into out: inout [UInt8]) {
        switch self {
        case .null: out += Array("null".utf8)
        case .bool(let b): out += Array((b ? "true" : "false").utf8)
        case .number(let n): out += Array(n.utf8)
        case .string(let s): Self.writeString(s, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (i, item) in items.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (i, m) in members.enumerated() {
                if i > 0 { out.append(UInt8(ascii: ",")) }
                Self.writeString(m.key, into: &out)
                out.append(UInt8(ascii: ":"))
                m.value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    private static func writeString(_ s: String, into out: inout [UInt8]) {
        let hex = Array("0123456789abcdef".utf8)
        out.append(UInt8(ascii: "\""))
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "\""): out += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0..<0x20: out += Array("\\u00".utf8) + [hex[Int(b >> 4)], hex[Int(b & 15)]]
            default: out.append(b)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    private struct Parser {
        let bytes: [UInt8]
        var i = 0
        var values = 0

        init(bytes: [UInt8]) { self.bytes = bytes }

        mutating func skipSpace() {
            while i < bytes.count, bytes[i] == 0x20 || bytes[i] == 0x09 || bytes[i] == 0x0A || bytes[i] == 0x0D { i += 1 }
        }

        func fail(_ reason: String) -> Malformed { Malformed(offset: i, reason: reason) }

        mutating func value(depth: Int) throws(Malformed) -> StrictJSON {
            guard depth < StrictJSON.maxDepth else { throw fail("nested deeper than \(StrictJSON.maxDepth)") }
            values += 1
            guard values <= StrictJSON.maxValues else { throw fail("more than \(StrictJSON.maxValues) values") }
            guard i < bytes.count else { throw fail("unexpected end") }
            switch bytes[i] {
            case UInt8(ascii: "{"): return try object(depth: depth)
            case UInt8(ascii: "["): return try array(depth: depth)
            case UInt8(ascii: "\""): return .string(try string())
            case UInt8(ascii: "t"): try literal("true"); return .bool(true)
            case UInt8(ascii: "f"): try literal("false"); return .bool(false)
            case UInt8(ascii: "n"): try literal("null"); return .null
            default: return .number(try number())
            }
        }

        mutating func literal(_ word: String) throws(Malformed) {
            let w = Array(word.utf8)
            guard i + w.count <= bytes.count, bytes[i..<(i + w.count)].elementsEqual(w) else { throw fail("not a JSON value") }
            i += w.count
        }

        mutating func object(depth: Int) throws(Malformed) -> StrictJSON {
            i += 1
            var members: [Member] = []
            var seen = Set<String>()
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "}") {
                i += 1
                return .object([])
            }
            while true {
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else { throw fail("expected a key") }
                let key = try string()
                guard seen.insert(key).inserted else { throw fail("duplicate key \"\(key.prefix(60))\"") }
                skipSpace()
                guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw fail("expected ':'") }
                i += 1
                skipSpace()
                members.append(Member(key: key, value: try value(depth: depth + 1)))
                skipSpace()
                guard i < bytes.count else { throw fail("unexpected end") }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
                throw fail("expected ',' or '}'")
            }
        }

        mutating func array(depth: Int) throws(Malformed) -> StrictJSON {
            i += 1
            var items: [StrictJSON] = []
            skipSpace()
            if i < bytes.count, bytes[i] == UInt8(ascii: "]") {
                i += 1
                return .array([])
            }
            while true {
                skipSpace()
                items.append(try value(depth: depth + 1))
                skipSpace()
                guard i < bytes.count else { throw fail("unexpected end") }
                if bytes[i] == UInt8(ascii: ",") { i += 1; continue }
                if bytes[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
                throw fail("expected ',' or ']'")
            }
        }

        mutating func hex4() throws(Malformed) -> UInt32 {
            guard i + 4 <= bytes.count else { throw fail("short \\u escape") }
            var v: UInt32 = 0
            for _ in 0..<4 {
                let c = bytes[i]
                let d: UInt32
                switch c {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): d = UInt32(c - UInt8(ascii: "0"))
                case UInt8(ascii: "a")...UInt8(ascii: "f"): d = UInt32(c - UInt8(ascii: "a") + 10)
                case UInt8(ascii: "A")...UInt8(ascii: "F"): d = UInt32(c - UInt8(ascii: "A") + 10)
                default: throw fail("bad \\u escape")
                }
                v = v << 4 | d
                i += 1
            }
            return v
        }

        mutating func string() throws(Malformed) -> String {
            i += 1
            var out: [UInt8] = []
            while true {
                guard i < bytes.count else { throw fail("unterminated string") }
                let c = bytes[i]
                if c == UInt8(ascii: "\"") {
                    i += 1
                    break
                }
                if c < 0x20 { throw fail("control character in a string") }
                if c != UInt8(ascii: "\\") {
                    out.append(c)
                    i += 1
                    continue
                }
                i += 1
                guard i < bytes.count else { throw fail("unterminated escape") }
                let e = bytes[i]
                i += 1
                switch e {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): out.append(e)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var scalar = try hex4()
                    if (0xD800...0xDBFF).contains(scalar) {
                        guard i + 2 <= bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else {
                            throw fail("lone high surrogate")
                        }
                        i += 2
                        let low = try hex4()
                        guard (0xDC00...0xDFFF).contains(low) else { throw fail("lone high surrogate") }
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                    } else if (0xDC00...0xDFFF).contains(scalar) {
                        throw fail("lone low surrogate")
                    }
                    guard let u = Unicode.Scalar(scalar) else { throw fail("not a Unicode scalar") }
                    out += Array(String(Character(u)).utf8)
                default: throw fail("unknown escape")
                }
            }
            guard let s = String(validating: out, as: UTF8.self) else { throw fail("invalid UTF-8 in a string") }
            return s
        }

        /// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
        mutating func number() throws(Malformed) -> String {
            let start = i
            func digits(_ p: inout Parser) -> Int {
                let s = p.i
                while p.i < p.bytes.count, (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(p.bytes[p.i]) { p.i += 1 }
                return p.i - s
            }
            if i < bytes.count, bytes[i] == UInt8(ascii: "-") { i += 1 }
            guard i < bytes.count else { throw fail("not a JSON value") }
            if bytes[i] == UInt8(ascii: "0") {
                i += 1
            } else {
                guard digits(&self) > 0 else { throw fail("not a JSON value") }
            }
            if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
                i += 1
                guard digits(&self) > 0 else { throw fail("digits expected after '.'") }
            }
            if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
                i += 1
                if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
                guard digits(&self) > 0 else { throw fail("digits expected in the exponent") }
            }
            return String(decoding: bytes[start..<i], as: UTF8.self)
        }
    }
}

/// The same strictness for readers outside the gate (`evidence verify`: a bundle and its signed
/// payload, where two parsers reading one file two ways would be two different Statements).
public enum StrictJSONCheck {
    /// nil when `bytes` is strict JSON; otherwise what is wrong and where.
    public static func problem(_ bytes: [UInt8]) -> String? {
        do {
            _ = try StrictJSON.parse(bytes)
            return nil
        } catch {
            return "\(error.reason) at byte \(error.offset)"
        }
    }

    /// The members named in `keys`, at any depth, whose value is a number written with a
    /// fraction or an exponent (`1.0`, `1e0`). JSON has one number type: Swift's decoder takes
    /// `1.0` as the integer 1 where Python's takes a float, so a reader that wants an integer
    /// refuses both spellings rather than read one file two ways. Empty for a malformed text.
    public static func nonIntegers(_ bytes: [UInt8], keys: Set<String>) -> [String] {
        guard let root = try? StrictJSON.parse(bytes) else { return [] }
        var found: [String] = []
        func walk(_ v: StrictJSON) {
            switch v {
            case .array(let items): items.forEach(walk)
            case .object(let members):
                for m in members {
                    if keys.contains(m.key), case .number(let text) = m.value, text.contains(where: { ".eE".contains($0) }) {
                        found.append("\(m.key): \(text)")
                    }
                    walk(m.value)
                }
            default: break
            }
        }
        walk(root)
        return found
    }
}
