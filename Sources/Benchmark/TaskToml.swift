// Harbor's task.toml, read by the one parser every task of every benchmark goes through
// (local benchmarks, a Harbor dataset's or registry's tasks). A task's timeouts, image,
// network and resources come from it, so the supervisor reads it itself.
//
// TOML 1.0 as Harbor's files use it: tables and arrays of tables (`[verifier.env]`,
// `[[environment.mcp_servers]]`), bare, quoted and dotted keys, basic and literal strings
// (one line or several), decimal numbers (with `_`, fraction, exponent), hexadecimal, octal
// and binary integers, `inf` and `nan`, booleans, arrays over several lines (comments
// between items), inline tables, dates and times (kept as their text). A key or table
// defined twice, a value that is none of these, or anything after a value but a comment is
// rejected with `file:line`, never half-understood; so is a table defined once by a header and
// again by dotted keys or an inline table, and arrays nested over `TomlReader.maxDepth` deep.
//
// A dotted key or table is stored under its full table name: `[environment]` then
// `healthcheck.interval = 5` is table "environment.healthcheck", key "interval"; the n-th
// `[[a.b]]` is table "a.b.n" (from 0), and a table under it `[a.b.c]` is "a.b.n.c" of the last
// one; an inline table's keys are its table's too (`environment = { memory_mb = 1 }` is table
// "environment", key "memory_mb").

/// One parsed `task.toml`.
struct TaskToml: Sendable {
    enum Value: Sendable, Equatable {
        case string(String)
        /// The number and its text as written (metadata keeps the text).
        case number(Double, text: String)
        case bool(Bool)
        case array([Value])
        /// An inline table, by key.
        case table([String: Value])
        /// A date, time or date-time, as written.
        case date(String)

        var metadataText: String {
            switch self {
            case .string(let s): return s
            case .number(_, let text): return text
            case .bool(let b): return b ? "true" : "false"
            case .array(let items): return items.map(\.metadataText).joined(separator: ", ")
            case .table(let t): return "{" + t.sorted { $0.key < $1.key }.map { "\($0.key) = \($0.value.metadataText)" }.joined(separator: ", ") + "}"
            case .date(let text): return text
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
        var reader = TomlReader(text: text, file: file)
        return try reader.document()
    }
}

/// The scanner: the whole text, a position in it and the line it is on.
private struct TomlReader {
    let s: [Unicode.Scalar]
    let file: String
    var i = 0
    var line = 1
    /// Arrays and inline tables open around the value being read: a file of a million `[`
    /// is refused at `maxDepth` rather than recursing until the stack runs out.
    var depth = 0
    static let maxDepth = 32

    init(text: String, file: String) {
        s = Array(text.unicodeScalars)
        self.file = file
    }

    func fail(_ message: String, line at: Int? = nil) -> BenchmarkError {
        BenchmarkError(.invalidTaskFile, "\(file):\(at ?? line): \(message)")
    }

    var peek: Unicode.Scalar? { i < s.count ? s[i] : nil }
    func peek(_ offset: Int) -> Unicode.Scalar? { i + offset < s.count ? s[i + offset] : nil }
    mutating func advance() {
        if s[i] == "\n" { line += 1 }
        i += 1
    }
    func starts(with text: String) -> Bool {
        let t = Array(text.unicodeScalars)
        return i + t.count <= s.count && Array(s[i..<(i + t.count)]) == t
    }

    mutating func skipSpace() { while let c = peek, c == " " || c == "\t" { advance() } }
    mutating func skipComment() throws(BenchmarkError) {
        guard peek == "#" else { return }
        while let c = peek, c != "\n" {
            if c == "\r", peek(1) == "\n" { return }
            if (c.value < 0x20 && c != "\t") || c.value == 0x7f { throw fail("control character in a comment") }
            advance()
        }
    }
    /// Spaces, comments and line breaks (between array items, between statements).
    mutating func skipBlank() throws(BenchmarkError) {
        while true {
            skipSpace()
            try skipComment()
            if peek == "\r", peek(1) == "\n" { advance() }
            guard peek == "\n" else { return }
            advance()
        }
    }
    /// Only spaces and a comment may follow a value or a header on its line.
    mutating func endOfLine() throws(BenchmarkError) {
        skipSpace()
        try skipComment()
        if peek == "\r", peek(1) == "\n" { advance() }
        guard let c = peek else { return }
        guard c == "\n" else { throw fail("unexpected '\(Self.shown(String(c)))' (only a comment may follow on the same line)") }
        advance()
    }

    /// How each table name came to be, so that none is defined twice in two ways (TOML 1.0:
    /// a `[header]`, dotted keys, an inline table, a value, an array of tables).
    struct Names {
        var headers: Set<String> = []
        var arrays: [String: Int] = [:]
        /// Made by dotted keys (`a.b = 1` makes table `a`): extended only by more of them.
        var dotted: Set<String> = []
        /// Inline tables: closed once written.
        var inline: Set<String> = []

        func isTable(_ name: String) -> Bool {
            headers.contains(name) || arrays[name] != nil || dotted.contains(name) || inline.contains(name)
        }
        /// `name` with each prefix that is an array of tables replaced by its last element
        /// (`[[a]]` then `[a.b]` is a.<last>.b); `keepLast` leaves the final part as it is.
        func resolve(_ parts: [String], keepLast: Bool = false) -> String {
            var name = ""
            for (i, part) in parts.enumerated() {
                name = name.isEmpty ? part : name + "." + part
                if let n = arrays[name], !(keepLast && i == parts.count - 1) { name += ".\(n - 1)" }
            }
            return name
        }
    }

    mutating func document() throws(BenchmarkError) -> TaskToml {
        var out = TaskToml()
        out.tables[""] = [:]
        var table = ""
        var names = Names()
        /// Whether `name` ("T.k") is a key holding a value (not a table).
        func isValue(_ name: String) -> Bool {
            guard let dot = name.lastIndex(of: ".") else { return out.tables[""]?[name] != nil }
            return out.tables[String(name[..<dot])]?[String(name[name.index(after: dot)...])] != nil
        }
        while true {
            try skipBlank()
            guard let c = peek else { return out }
            let at = line
            if c == "[" {
                advance()
                let array = peek == "["
                if array { advance() }
                skipSpace()
                let parts = try keyParts(what: "a table name")
                let shown = Self.shown(parts.joined(separator: "."))
                skipSpace()
                guard peek == "]" else { throw fail("expected ']' after table name '\(shown)'") }
                advance()
                if array {
                    guard peek == "]" else { throw fail("expected ']]' after table name '\(shown)'") }
                    advance()
                }
                let path = names.resolve(parts, keepLast: true)
                if isValue(path) { throw fail("[\(shown)] names a key that already holds a value") }
                if names.dotted.contains(path) || names.inline.contains(path) { throw fail("table [\(shown)] was already defined by dotted keys or an inline table") }
                if array {
                    if names.headers.contains(path) { throw fail("[[\(shown)]] names a table already defined as [\(shown)]") }
                    let n = names.arrays[path, default: 0]
                    names.arrays[path] = n + 1
                    table = "\(path).\(n)"
                } else {
                    guard names.arrays[path] == nil, names.headers.insert(path).inserted else { throw fail("table [\(shown)] is defined twice") }
                    table = path
                }
                out.tables[table, default: [:]] = out.tables[table] ?? [:]
                try endOfLine()
                continue
            }
            let parts = try keyParts(what: "a key (letters, digits, '_' or '-') or a [table] header")
            // Each table a dotted key passes through: made here, or made by dotted keys before.
            var keyTable = table
            for part in parts.dropLast() {
                keyTable = keyTable.isEmpty ? part : keyTable + "." + part
                let shown = Self.shown(keyTable)
                if names.inline.contains(keyTable) { throw fail("the inline table '\(shown)' cannot be extended", line: at) }
                if isValue(keyTable) { throw fail("'\(shown)' already holds a value, so it cannot be a table", line: at) }
                if names.headers.contains(keyTable) || names.arrays[keyTable] != nil {
                    throw fail("table [\(shown)] was defined by a header, so dotted keys cannot add to it", line: at)
                }
                names.dotted.insert(keyTable)
            }
            let key = parts[parts.count - 1]
            skipSpace()
            guard peek == "=" else { throw fail("expected '=' after key '\(Self.shown(key))'") }
            advance()
            skipSpace()
            let value = try value()
            let full = keyTable.isEmpty ? key : keyTable + "." + key
            if out.tables[keyTable]?[key] != nil || names.isTable(full) {
                throw fail("key '\(Self.shown(key))' is defined twice in \(keyTable.isEmpty ? "the top level" : "[\(Self.shown(keyTable))]")", line: at)
            }
            out.tables[keyTable, default: [:]][key] = TaskToml.Entry(value: value, line: at)
            // An inline table is a table of its own too: `environment = { memory_mb = 8192 }`
            // says what `[environment]` with that key says.
            if case .table(let inner) = value { spread(inner, as: full, line: at, into: &out, names: &names) }
            try endOfLine()
        }
    }

    /// An inline table's keys under its own name, nested ones under theirs, all closed.
    func spread(_ inner: [String: TaskToml.Value], as name: String, line at: Int, into out: inout TaskToml, names: inout Names) {
        names.inline.insert(name)
        for (k, v) in inner {
            out.tables[name, default: [:]][k] = TaskToml.Entry(value: v, line: at)
            if case .table(let deeper) = v { spread(deeper, as: name + "." + k, line: at, into: &out, names: &names) }
        }
        if out.tables[name] == nil { out.tables[name] = [:] }
    }

    /// Text of the file quoted in an error: at most 60 characters, control characters escaped
    /// (a task file's bytes must not reach the operator's terminal as escape sequences).
    static func shown(_ text: String) -> String {
        var out = ""
        for (i, u) in text.unicodeScalars.enumerated() {
            if i == 60 { return out + "…" }
            out += u.value < 0x20 || (0x7f...0x9f).contains(u.value) ? String(format: "\\u{%02x}", u.value) : String(u)
        }
        return out
    }

    mutating func keyParts(what: String) throws(BenchmarkError) -> [String] {
        var parts: [String] = []
        while true {
            skipSpace()
            let part = try keyPart(what: what)
            // Table names are kept joined by dots: a quoted part that is empty or holds a dot
            // would name another table ([""] the top level, [a."b.c"] [a.b.c]).
            if part.isEmpty || part.contains(".") { throw fail("a quoted key that is empty or holds a '.' is not supported in task.toml") }
            parts.append(part)
            skipSpace()
            guard peek == "." else { return parts }
            advance()
        }
    }

    mutating func keyPart(what: String) throws(BenchmarkError) -> String {
        switch peek {
        case "\"":
            if starts(with: "\"\"\"") { throw fail("a key cannot be a multi-line string") }
            return try basicString()
        case "'":
            if starts(with: "'''") { throw fail("a key cannot be a multi-line string") }
            return try literalString()
        default:
            var key = String.UnicodeScalarView()
            while let c = peek, ("A"..."Z").contains(c) || ("a"..."z").contains(c) || ("0"..."9").contains(c) || c == "_" || c == "-" {
                key.append(c)
                advance()
            }
            if key.isEmpty { throw fail("expected \(what)") }
            return String(key)
        }
    }

    mutating func value() throws(BenchmarkError) -> TaskToml.Value {
        guard let c = peek, c != "\n", c != "#" else { throw fail("expected a value after '='") }
        if c == "[" || c == "{" {
            guard depth < Self.maxDepth else { throw fail("arrays and inline tables nested more than \(Self.maxDepth) deep") }
            depth += 1
            defer { depth -= 1 }
            return c == "[" ? try array() : try inlineTable()
        }
        switch c {
        case "\"": return .string(starts(with: "\"\"\"") ? try multiLine(basic: true) : try basicString())
        case "'": return .string(starts(with: "'''") ? try multiLine(basic: false) : try literalString())
        default: return try bareValue()
        }
    }

    /// `[v, v, ...]`, over as many lines as it takes, comments between items, a trailing comma
    /// allowed.
    mutating func array() throws(BenchmarkError) -> TaskToml.Value {
        let opened = line
        advance()
        var items: [TaskToml.Value] = []
        while true {
            try skipBlank()
            guard let c = peek else { throw fail("an array opened here never closes", line: opened) }
            if c == "]" { advance(); return .array(items) }
            items.append(try value())
            try skipBlank()
            guard let next = peek else { throw fail("an array opened here never closes", line: opened) }
            if next == "," { advance() } else if next != "]" { throw fail("expected ',' or ']' in the array") }
        }
    }

    /// `{ k = v, k.j = v }` on one line, no trailing comma (TOML 1.0).
    mutating func inlineTable() throws(BenchmarkError) -> TaskToml.Value {
        advance()
        var table: [String: TaskToml.Value] = [:]
        skipSpace()
        if peek == "}" { advance(); return .table([:]) }
        while true {
            skipSpace()
            if peek == "\n" || peek == "\r" { throw fail("an inline table must close on its own line") }
            let keyParts = try keyParts(what: "a key in the inline table")
            guard keyParts.count == 1 else { throw fail("dotted keys inside an inline table are not supported in task.toml") }
            let key = keyParts[0]
            skipSpace()
            guard peek == "=" else { throw fail("expected '=' after key '\(key)' in the inline table") }
            advance()
            skipSpace()
            let v = try value()
            guard table.updateValue(v, forKey: key) == nil else { throw fail("key '\(key)' is defined twice in the inline table") }
            skipSpace()
            switch peek {
            case ",": advance()
            case "}": advance(); return .table(table)
            default: throw fail("expected ',' or '}' in the inline table (it must close on its own line)")
            }
        }
    }

    /// A number, boolean, date or time: a bare word up to a blank, a comment, `,`, `]` or `}`
    /// (a date-time's one space before its time included).
    mutating func bareValue() throws(BenchmarkError) -> TaskToml.Value {
        var word = String.UnicodeScalarView()
        func take() { while let c = peek, !" \t\r\n#,]}".unicodeScalars.contains(c) { word.append(c); advance() } }
        take()
        let text = String(word)
        if text == "true" { return .bool(true) }
        if text == "false" { return .bool(false) }
        if Self.isDate(text) {
            // "1979-05-27 07:32:00": a date, one space, then a time.
            if peek == " ", let d = peek(1), ("0"..."9").contains(d), let d2 = peek(2), ("0"..."9").contains(d2), peek(3) == ":" {
                advance()
                let date = String(word)
                word = String.UnicodeScalarView()
                take()
                guard text.count == 10, Self.isTime(String(word)) else { throw fail("'\(Self.shown(date + " " + String(word)))' is not a date and time") }
                return .date(date + " " + String(word))
            }
            return .date(String(word))
        }
        if Self.isTime(text) { return .date(text) }
        if let v = Self.number(text) { return .number(v, text: text) }
        throw fail("'\(Self.shown(text))' is not a supported value (a number, a \"string\", true, false, a date, an array or an inline table)")
    }

    static func digits(_ t: Substring) -> Bool { !t.isEmpty && t.unicodeScalars.allSatisfy { ("0"..."9").contains($0) } }
    /// `YYYY-MM-DD`, optionally `T`/`t` and a time.
    static func isDate(_ text: String) -> Bool {
        let parts = text.split(separator: "-", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3, parts[0].count == 4, digits(parts[0]), parts[1].count == 2, digits(parts[1]) else { return false }
        let day = parts[2].prefix(2)
        guard day.count == 2, digits(day) else { return false }
        let rest = parts[2].dropFirst(2)
        return rest.isEmpty || ((rest.first == "T" || rest.first == "t") && isTime(String(rest.dropFirst())))
    }
    /// `HH:MM:SS` with an optional fraction and offset (`Z`, `+HH:MM`).
    static func isTime(_ text: String) -> Bool {
        let u = Array(text.unicodeScalars)
        guard u.count >= 8, digits(Substring(String(String.UnicodeScalarView(u[0..<2])))), u[2] == ":",
              digits(Substring(String(String.UnicodeScalarView(u[3..<5])))), u[5] == ":",
              digits(Substring(String(String.UnicodeScalarView(u[6..<8])))) else { return false }
        return u[8...].allSatisfy { ("0"..."9").contains($0) || ".:+-Zz".unicodeScalars.contains($0) }
    }

    /// A TOML integer or float: decimal (sign, digits with single `_` between digits, no
    /// leading zero, optional fraction and exponent), `0x`/`0o`/`0b` integers, `inf`, `nan`
    /// (signed). nil for anything else.
    static func number(_ text: String) -> Double? {
        var body = Substring(text)
        var sign = 1.0
        if let f = body.first, f == "+" || f == "-" {
            sign = f == "-" ? -1 : 1
            body = body.dropFirst()
        }
        if body == "inf" { return sign * .infinity }
        if body == "nan" { return .nan }
        for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] where body.hasPrefix(prefix) {
            guard text.first != "+", text.first != "-" else { return nil }
            let digits = body.dropFirst(2)
            guard let cleaned = underscored(digits, { $0.properties.isASCIIHexDigit }), let v = UInt64(cleaned, radix: radix) else { return nil }
            return Double(v)
        }
        let s = Array(body.unicodeScalars)
        var i = 0
        var cleaned = sign < 0 ? "-" : ""
        func run(allowLeadingZero: Bool) -> Bool {
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
        guard run(allowLeadingZero: false) else { return nil }
        if i < s.count, s[i] == "." {
            cleaned += "."
            i += 1
            guard run(allowLeadingZero: true) else { return nil }
        }
        if i < s.count, s[i] == "e" || s[i] == "E" {
            cleaned += "e"
            i += 1
            if i < s.count, s[i] == "+" || s[i] == "-" {
                cleaned.unicodeScalars.append(s[i])
                i += 1
            }
            guard run(allowLeadingZero: true) else { return nil }
        }
        guard i == s.count, let value = Double(cleaned), value.isFinite else { return nil }
        return value
    }

    /// `digits` with single `_` between digits removed, or nil when empty or malformed.
    static func underscored(_ digits: Substring, _ isDigit: (Unicode.Scalar) -> Bool) -> String? {
        let u = Array(digits.unicodeScalars)
        guard let first = u.first, let last = u.last, isDigit(first), isDigit(last) else { return nil }
        var out = String.UnicodeScalarView()
        for (k, c) in u.enumerated() {
            if c == "_" {
                guard isDigit(u[k - 1]), isDigit(u[k + 1]) else { return nil }
            } else {
                guard isDigit(c) else { return nil }
                out.append(c)
            }
        }
        return String(out)
    }
}

// Strings: basic ("..." with escapes) and literal ('...' as written), on one line or, tripled,
// over several (a line break right after the opening quotes is dropped; in a basic one a
// backslash at a line's end joins it to the next non-blank text).
extension TomlReader {
    mutating func basicString() throws(BenchmarkError) -> String {
        advance()
        var out = String.UnicodeScalarView()
        while true {
            guard let c = peek, c != "\n" else { throw fail("unterminated string") }
            advance()
            if c == "\"" { return String(out) }
            if c == "\\" { try escape(into: &out); continue }
            try plain(c, lineBreaks: false)
            out.append(c)
        }
    }

    mutating func literalString() throws(BenchmarkError) -> String {
        advance()
        var out = String.UnicodeScalarView()
        while true {
            guard let c = peek, c != "\n" else { throw fail("unterminated string") }
            advance()
            if c == "'" { return String(out) }
            try plain(c, lineBreaks: false)
            out.append(c)
        }
    }

    /// `"""..."""` (`basic`) or `'''...'''`.
    mutating func multiLine(basic: Bool) throws(BenchmarkError) -> String {
        let quote: Unicode.Scalar = basic ? "\"" : "'"
        let opened = line
        for _ in 0..<3 { advance() }
        if peek == "\n" { advance() } else if peek == "\r", peek(1) == "\n" { advance(); advance() }
        var out = String.UnicodeScalarView()
        while true {
            guard let c = peek else { throw fail("a string opened here never closes", line: opened) }
            if c == quote, peek(1) == quote, peek(2) == quote {
                // Up to two more quotes belong to the string.
                var quotes = 3
                while peek(quotes) == quote, quotes < 5 { quotes += 1 }
                for _ in 0..<(quotes - 3) { out.append(quote) }
                for _ in 0..<quotes { advance() }
                return String(out)
            }
            advance()
            if basic && c == "\\" {
                // A line-ending backslash: the break and the blanks after it are dropped.
                var k = 0
                while let b = peek(k), b == " " || b == "\t" { k += 1 }
                if peek(k) == "\n" || (peek(k) == "\r" && peek(k + 1) == "\n") {
                    while let b = peek, b == " " || b == "\t" || b == "\n" || b == "\r" { advance() }
                } else {
                    try escape(into: &out)
                }
                continue
            }
            if c == "\r" && peek != "\n" { throw fail("a carriage return not followed by a line feed in a string") }
            try plain(c, lineBreaks: true)
            out.append(c)
        }
    }

    /// TOML refuses control characters in strings but tab (and line breaks in multi-line ones).
    func plain(_ c: Unicode.Scalar, lineBreaks: Bool) throws(BenchmarkError) {
        if (c.value < 0x20 && c != "\t" && !(lineBreaks && (c == "\n" || c == "\r"))) || c.value == 0x7f {
            throw fail("control character in string")
        }
    }

    /// The escape after a backslash (consumed): \" \\ \n \t \r \b \f \uXXXX \UXXXXXXXX.
    mutating func escape(into out: inout String.UnicodeScalarView) throws(BenchmarkError) {
        guard let e = peek, e != "\n" else { throw fail("unterminated string") }
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
            guard let v = UInt32(hex, radix: 16), let scalar = Unicode.Scalar(v) else { throw fail("\\\(e)\(hex) is not a Unicode scalar value") }
            out.append(scalar)
        default:
            throw fail("unsupported escape '\\\(e)' in string")
        }
    }
}
