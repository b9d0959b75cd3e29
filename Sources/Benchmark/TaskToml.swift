// The `task.toml` subset a local benchmark may use.
//
// Harbor's task.toml is TOML; a task's timeouts come from it, so it is parsed by the
// supervisor. Rather than pull in a full TOML library for three keys, the supported
// language is a deliberately small subset, and anything outside it is rejected with
// `file:line` instead of being half-understood:
//
//   # comment
//   version = "1.0"          # top-level keys are allowed (and ignored)
//   [agent]
//   timeout_sec = 120        # integers and decimals (with exponent, `_` separators)
//   [verifier]
//   timeout_sec = 60.0
//   [metadata]
//   difficulty = "easy"      # "basic strings" with escapes, 'literal strings'
//   hard = false             # true / false
//   tags = ["a", "b"]        # an array of these on one line (Terminal-Bench 2.0's tags)
//   [environment]
//   docker_image = "org/name:tag"   # the task's image (`autoharness images`)
//
// Not supported (rejected): arrays over several lines or of arrays, inline tables, arrays of
// tables, dotted or quoted keys, multi-line strings, dates, hexadecimal/octal/binary
// integers, inf and nan.

/// One parsed `task.toml`.
struct TaskToml: Sendable {
    enum Value: Sendable, Equatable {
        case string(String)
        /// The number and its text as written (metadata keeps the text).
        case number(Double, text: String)
        case bool(Bool)
        /// One line's array of the scalars above.
        case array([Value])

        var metadataText: String {
            switch self {
            case .string(let s): return s
            case .number(_, let text): return text
            case .bool(let b): return b ? "true" : "false"
            case .array(let items): return items.map(\.metadataText).joined(separator: ", ")
            }
        }
    }

    struct Entry: Sendable {
        var value: Value
        var line: Int
    }

    /// Table name ("" for keys before the first header) → key → entry.
    var tables: [String: [String: Entry]] = [:]

    func entry(_ table: String, _ key: String) -> Entry? { tables[table]?[key] }

    /// Parses `text`; `file` is used only in error messages.
    /// - Throws: `BenchmarkError` (`.invalidTaskFile`) naming `file:line` of the first problem.
    static func parse(_ text: String, file: String) throws(BenchmarkError) -> TaskToml {
        var result = TaskToml()
        result.tables[""] = [:]
        var seenHeaders: Set<String> = []
        var table = ""
        var lineNumber = 0
        for rawLine in text.split(separator: "\n", omittingEmptySubsequences: false) {
            lineNumber += 1
            func fail(_ message: String) -> BenchmarkError {
                BenchmarkError(.invalidTaskFile, "\(file):\(lineNumber): \(message)")
            }
            var line = Substring.UnicodeScalarView(rawLine.unicodeScalars)
            if line.last == "\r" { line.removeLast() }
            var cursor = Cursor(line)
            cursor.skipSpace()
            if cursor.atEnd || cursor.peek == "#" { continue }

            if cursor.peek == "[" {
                cursor.advance()
                if cursor.peek == "[" { throw fail("arrays of tables ([[...]]) are not supported in task.toml") }
                cursor.skipSpace()
                let name = cursor.bareKey()
                cursor.skipSpace()
                if name.isEmpty { throw fail("expected a table name after '['") }
                if cursor.peek == "." { throw fail("dotted table names are not supported in task.toml") }
                guard cursor.peek == "]" else { throw fail("expected ']' after table name '\(name)'") }
                cursor.advance()
                try cursor.expectLineEnd(fail)
                guard seenHeaders.insert(name).inserted else { throw fail("table [\(name)] is defined twice") }
                table = name
                result.tables[name, default: [:]] = [:]
                continue
            }

            if cursor.peek == "\"" || cursor.peek == "'" { throw fail("quoted keys are not supported in task.toml") }
            let key = cursor.bareKey()
            if key.isEmpty { throw fail("expected a key (letters, digits, '_' or '-') or a [table] header") }
            cursor.skipSpace()
            if cursor.peek == "." { throw fail("dotted keys are not supported in task.toml") }
            guard cursor.peek == "=" else { throw fail("expected '=' after key '\(key)'") }
            cursor.advance()
            cursor.skipSpace()
            let value = try cursor.value(fail)
            try cursor.expectLineEnd(fail)
            if result.tables[table]?[key] != nil {
                throw fail("key '\(key)' is defined twice in \(table.isEmpty ? "the top level" : "[\(table)]")")
            }
            result.tables[table, default: [:]][key] = Entry(value: value, line: lineNumber)
        }
        return result
    }
}

/// A position in one line of the file.
private struct Cursor {
    let scalars: Substring.UnicodeScalarView
    var index: Substring.UnicodeScalarView.Index

    init(_ scalars: Substring.UnicodeScalarView) {
        self.scalars = scalars
        index = scalars.startIndex
    }

    var atEnd: Bool { index == scalars.endIndex }
    var peek: Unicode.Scalar? { atEnd ? nil : scalars[index] }
    mutating func advance() { index = scalars.index(after: index) }

    mutating func skipSpace() {
        while let c = peek, c == " " || c == "\t" { advance() }
    }

    static func isBareKeyScalar(_ c: Unicode.Scalar) -> Bool {
        ("A"..."Z").contains(c) || ("a"..."z").contains(c) || ("0"..."9").contains(c) || c == "_" || c == "-"
    }

    mutating func bareKey() -> String {
        var s = String.UnicodeScalarView()
        while let c = peek, Self.isBareKeyScalar(c) {
            s.append(c)
            advance()
        }
        return String(s)
    }

    /// Only whitespace and a comment may follow a value or header.
    mutating func expectLineEnd(_ fail: (String) -> BenchmarkError) throws(BenchmarkError) {
        skipSpace()
        if let c = peek, c != "#" { throw fail("unexpected '\(c)' (only a comment may follow on the same line)") }
    }

    mutating func value(_ fail: (String) -> BenchmarkError) throws(BenchmarkError) -> TaskToml.Value {
        guard let c = peek else { throw fail("expected a value after '='") }
        switch c {
        case "[": return try array(fail)
        case "{": throw fail("inline tables are not supported in task.toml")
        default: return try scalar(fail, stoppingAt: [])
        }
    }

    /// A string, number or boolean; a bare word ends at a blank, a comment or `stop`.
    mutating func scalar(_ fail: (String) -> BenchmarkError, stoppingAt stop: Set<Unicode.Scalar>) throws(BenchmarkError) -> TaskToml.Value {
        switch peek {
        case "\"": return .string(try basicString(fail))
        case "'": return .string(try literalString(fail))
        default: break
        }
        var word = String.UnicodeScalarView()
        while let c = peek, c != " " && c != "\t" && c != "#" && !stop.contains(c) {
            word.append(c)
            advance()
        }
        let text = String(word)
        if text == "true" { return .bool(true) }
        if text == "false" { return .bool(false) }
        guard let number = Self.number(text) else {
            throw fail("'\(text)' is not a supported value (a decimal number, a \"string\", true or false)")
        }
        return .number(number, text: text)
    }

    /// `[v, v, ...]` on one line, `v` a string, number or boolean; a trailing comma is allowed.
    mutating func array(_ fail: (String) -> BenchmarkError) throws(BenchmarkError) -> TaskToml.Value {
        advance()
        var items: [TaskToml.Value] = []
        while true {
            skipSpace()
            guard let c = peek else { throw fail("an array must close on its own line (arrays over several lines are not supported)") }
            if c == "]" { advance(); return .array(items) }
            if c == "[" || c == "{" { throw fail("an array may hold only strings, numbers and booleans") }
            items.append(try scalar(fail, stoppingAt: [",", "]"]))
            skipSpace()
            guard let next = peek else { throw fail("an array must close on its own line (arrays over several lines are not supported)") }
            if next == "," { advance() } else if next != "]" { throw fail("expected ',' or ']' in the array") }
        }
    }

    /// A TOML decimal integer or float: sign, digits with single `_` between digits, no
    /// leading zero, optional fraction, optional exponent. nil for anything else, including
    /// `inf`, `nan`, `0x…` and dates.
    static func number(_ text: String) -> Double? {
        let s = Array(text.unicodeScalars)
        var i = 0
        var cleaned = ""
        func digits(allowLeadingZero: Bool) -> Bool {
            let start = i
            while i < s.count {
                let c = s[i]
                if ("0"..."9").contains(c) {
                    cleaned.unicodeScalars.append(c)
                    i += 1
                } else if c == "_", i > start, i + 1 < s.count, ("0"..."9").contains(s[i - 1]), ("0"..."9").contains(s[i + 1]) {
                    i += 1
                } else {
                    break
                }
            }
            guard i > start else { return false }
            if !allowLeadingZero, s[start] == "0", i - start > 1 { return false }
            return true
        }
        if i < s.count, s[i] == "+" || s[i] == "-" {
            if s[i] == "-" { cleaned += "-" }
            i += 1
        }
        guard digits(allowLeadingZero: false) else { return nil }
        if i < s.count, s[i] == "." {
            cleaned += "."
            i += 1
            guard digits(allowLeadingZero: true) else { return nil }
        }
        if i < s.count, s[i] == "e" || s[i] == "E" {
            cleaned += "e"
            i += 1
            if i < s.count, s[i] == "+" || s[i] == "-" {
                cleaned.unicodeScalars.append(s[i])
                i += 1
            }
            guard digits(allowLeadingZero: true) else { return nil }
        }
        guard i == s.count, let value = Double(cleaned), value.isFinite else { return nil }
        return value
    }

    mutating func basicString(_ fail: (String) -> BenchmarkError) throws(BenchmarkError) -> String {
        advance()  // opening quote
        if peek == "\"" {
            advance()
            if peek == "\"" { throw fail("multi-line strings are not supported in task.toml") }
            return ""
        }
        var out = String.UnicodeScalarView()
        while true {
            guard let c = peek else { throw fail("unterminated string") }
            advance()
            if c == "\"" { return String(out) }
            if c.value < 0x20 && c != "\t" { throw fail("control character in string") }
            guard c == "\\" else {
                out.append(c)
                continue
            }
            guard let e = peek else { throw fail("unterminated string") }
            advance()
            switch e {
            case "\"": out.append("\"")
            case "\\": out.append("\\")
            case "n": out.append("\n")
            case "t": out.append("\t")
            case "r": out.append("\r")
            case "b": out.append("\u{08}")
            case "f": out.append("\u{0C}")
            case "u", "U":
                let width = e == "u" ? 4 : 8
                var hex = ""
                for _ in 0..<width {
                    guard let h = peek, h.properties.isASCIIHexDigit else { throw fail("bad \\\(e) escape: expected \(width) hex digits") }
                    hex.unicodeScalars.append(h)
                    advance()
                }
                guard let v = UInt32(hex, radix: 16), let scalar = Unicode.Scalar(v) else {
                    throw fail("\\\(e)\(hex) is not a Unicode scalar value")
                }
                out.append(scalar)
            default:
                throw fail("unsupported escape '\\\(e)' in string")
            }
        }
    }

    mutating func literalString(_ fail: (String) -> BenchmarkError) throws(BenchmarkError) -> String {
        advance()  // opening quote
        if peek == "'" {
            advance()
            if peek == "'" { throw fail("multi-line strings are not supported in task.toml") }
            return ""
        }
        var out = String.UnicodeScalarView()
        while true {
            guard let c = peek else { throw fail("unterminated string") }
            advance()
            if c == "'" { return String(out) }
            if c.value < 0x20 && c != "\t" { throw fail("control character in string") }
            out.append(c)
        }
    }
}
