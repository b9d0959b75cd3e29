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

    static func parse(_ bytes: [UInt8]) -> JSONValue? {
        guard depth(bytes) <= maxDepth else { return nil }
        return try? JSONDecoder().decode(JSONValue.self, from: Data(bytes))
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
