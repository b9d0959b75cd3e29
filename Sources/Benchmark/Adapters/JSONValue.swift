// Untrusted JSON written by a process that hosted agent.py, read without trusting its shape:
// a generic value, so one malformed entry costs that task (scored 0), never the whole run.

import FoundationEssentials

enum JSONValue: Codable, Equatable, Sendable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .null
        } else if let b = try? c.decode(Bool.self) {
            self = .bool(b)
        } else if let d = try? c.decode(Double.self) {
            self = .number(d)
        } else if let s = try? c.decode(String.self) {
            self = .string(s)
        } else if let a = try? c.decode([JSONValue].self) {
            self = .array(a)
        } else {
            self = .object(try c.decode([String: JSONValue].self))
        }
    }

    func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .number(let d):
            // Whole numbers stay integers (ids, counts, prices in cents).
            if d.rounded() == d, abs(d) < 9e15 { try c.encode(Int64(d)) } else { try c.encode(d) }
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }

    /// Deepest nesting accepted. The decoder recurses per level; a hostile file of a million
    /// `[` must be refused before it reaches it.
    static let maxDepth = 256

    /// nil for anything but one well-formed JSON value, including an object that names a key
    /// twice: Foundation's decoder keeps the first, Python's json (which the tools and
    /// verifiers writing these files use) the last, so such a file means two different things.
    static func parse(_ bytes: [UInt8]) -> JSONValue? {
        guard depth(bytes) <= maxDepth, firstDuplicateKey(bytes) == nil else { return nil }
        return try? JSONDecoder().decode(JSONValue.self, from: Data(bytes))
    }

    /// The first key repeated within one object, or nil. Keys are compared as Python compares
    /// them: escapes decoded (`"rew\u0061rd"` is `"reward"`), then code point by code point,
    /// with no Unicode normalisation. One pass with an explicit stack, for malformed input too
    /// (the decoder judges well-formedness afterwards).
    static func firstDuplicateKey(_ bytes: [UInt8]) -> String? {
        // Per open container: the keys seen so far (nil for an array) and whether the next
        // string is a key.
        var keys: [Set<[UInt8]>?] = []
        var expectingKey = false
        var i = 0
        while i < bytes.count {
            switch bytes[i] {
            case 0x22:  // "
                let (text, next) = decodeString(bytes, from: i + 1)
                i = next
                if expectingKey, keys.last != nil, keys[keys.count - 1] != nil {
                    expectingKey = false
                    if !keys[keys.count - 1]!.insert(text).inserted { return String(decoding: text, as: UTF8.self) }
                }
                continue
            case 0x7B:  // {
                keys.append([])
                expectingKey = true
            case 0x5B:  // [
                keys.append(nil)
                expectingKey = false
            case 0x7D, 0x5D:  // } ]
                if !keys.isEmpty { keys.removeLast() }
                expectingKey = false
            case 0x2C:  // ,
                expectingKey = keys.last.map { $0 != nil } ?? false
            default:
                break
            }
            i += 1
        }
        return nil
    }

    /// The UTF-8 of the JSON string starting at `start` (just past its opening quote), escapes
    /// decoded, and the index just past its closing quote. A lone surrogate escape is kept as
    /// its own 3-byte sequence, so it equals only itself, as in Python.
    private static func decodeString(_ bytes: [UInt8], from start: Int) -> ([UInt8], Int) {
        var out: [UInt8] = []
        var i = start
        func hex4(_ at: Int) -> UInt32? {
            guard at + 4 <= bytes.count else { return nil }
            var v: UInt32 = 0
            for b in bytes[at..<at + 4] {
                guard let d = hexValue(b) else { return nil }
                v = v << 4 | d
            }
            return v
        }
        func append(_ scalar: UInt32) {
            switch scalar {
            case 0..<0x80: out.append(UInt8(scalar))
            case 0x80..<0x800: out += [UInt8(0xC0 | scalar >> 6), UInt8(0x80 | scalar & 0x3F)]
            case 0x800..<0x10000: out += [UInt8(0xE0 | scalar >> 12), UInt8(0x80 | scalar >> 6 & 0x3F), UInt8(0x80 | scalar & 0x3F)]
            default: out += [UInt8(0xF0 | scalar >> 18), UInt8(0x80 | scalar >> 12 & 0x3F), UInt8(0x80 | scalar >> 6 & 0x3F), UInt8(0x80 | scalar & 0x3F)]
            }
        }
        while i < bytes.count {
            let b = bytes[i]
            if b == 0x22 { return (out, i + 1) }
            guard b == 0x5C, i + 1 < bytes.count else {
                out.append(b)
                i += 1
                continue
            }
            let e = bytes[i + 1]
            i += 2
            switch e {
            case 0x62: out.append(0x08)  // b
            case 0x66: out.append(0x0C)  // f
            case 0x6E: out.append(0x0A)  // n
            case 0x72: out.append(0x0D)  // r
            case 0x74: out.append(0x09)  // t
            case 0x75:  // u
                guard let high = hex4(i) else { continue }
                i += 4
                if (0xD800..<0xDC00).contains(high), i + 6 <= bytes.count, bytes[i] == 0x5C, bytes[i + 1] == 0x75,
                   let low = hex4(i + 2), (0xDC00..<0xE000).contains(low) {
                    i += 6
                    append(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00))
                } else {
                    append(high)
                }
            default: out.append(e)  // \" \\ \/ (and anything else the decoder will refuse)
            }
        }
        return (out, i)
    }

    private static func hexValue(_ b: UInt8) -> UInt32? {
        switch b {
        case 0x30...0x39: return UInt32(b - 0x30)
        case 0x41...0x46: return UInt32(b - 0x41 + 10)
        case 0x61...0x66: return UInt32(b - 0x61 + 10)
        default: return nil
        }
    }

    /// The deepest `[`/`{` nesting outside strings (an upper bound for malformed input).
    static func depth(_ bytes: [UInt8]) -> Int {
        var depth = 0, deepest = 0, inString = false, escaped = false
        for b in bytes {
            if inString {
                if escaped { escaped = false } else if b == 0x5C { escaped = true } else if b == 0x22 { inString = false }
                continue
            }
            switch b {
            case 0x22: inString = true
            case 0x5B, 0x7B:
                depth += 1
                deepest = max(deepest, depth)
            case 0x5D, 0x7D: depth -= 1
            default: break
            }
        }
        return deepest
    }

    subscript(key: String) -> JSONValue? {
        if case .object(let o) = self { return o[key] }
        return nil
    }

    /// `a.b.c` through nested objects.
    func path(_ keys: String...) -> JSONValue? {
        var v: JSONValue? = self
        for k in keys { v = v?[k] }
        return v
    }

    var string: String? {
        if case .string(let s) = self { return s }
        return nil
    }

    var number: Double? {
        if case .number(let d) = self { return d }
        return nil
    }

    var array: [JSONValue]? {
        if case .array(let a) = self { return a }
        return nil
    }

    var object: [String: JSONValue]? {
        if case .object(let o) = self { return o }
        return nil
    }

    var isNull: Bool { self == .null }

    /// A reward: a finite number in [0, 1] (booleans are not rewards).
    var reward: Double? {
        guard let d = number, d.isFinite, (0...1).contains(d) else { return nil }
        return d
    }

    /// Short text for a detail line.
    var brief: String {
        switch self {
        case .null: return "null"
        case .bool(let b): return String(b)
        case .number(let d): return String(d)
        case .string(let s): return "\"\(s.prefix(40))\""
        case .array: return "a list"
        case .object: return "an object"
        }
    }
}
