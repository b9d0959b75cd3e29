/// A line diff of two texts as hunks with context, for the report's explorer (agent.py of a
/// gate attempt against the last accepted one). The edit script is the standard library's
/// (`CollectionDifference`, a Myers diff); this only walks it and groups it.
public struct LineDiff: Sendable, Equatable {
    public enum Kind: Sendable, Equatable { case same, added, removed }

    public struct Line: Sendable, Equatable {
        public var kind: Kind
        public var text: String
        /// 1-based line numbers in the old and new text (nil on the side it is not in).
        public var old: Int?
        public var new: Int?
    }

    public struct Hunk: Sendable, Equatable {
        public var lines: [Line]
        /// The `@@ -a,b +c,d @@` header.
        public var header: String
    }

    public var hunks: [Hunk]
    public var added: Int
    public var removed: Int
    /// The changed region was over `maxChanged` lines: no hunks, the counts are its sizes.
    public var tooLarge = false

    /// Lines of the changed region (after the common prefix and suffix) the diff works on at
    /// most: the edit script costs about (N+M)·D, quadratic for a rewrite.
    public static let maxChanged = 10_000

    public init(old: String, new: String, context: Int = 3) {
        let a = Self.lines(old), b = Self.lines(new)
        // The common prefix and suffix are unchanged lines whatever the script: only the
        // region between them is diffed.
        var prefix = 0
        while prefix < a.count && prefix < b.count && a[prefix] == b[prefix] { prefix += 1 }
        var suffix = 0
        while suffix < a.count - prefix && suffix < b.count - prefix && a[a.count - 1 - suffix] == b[b.count - 1 - suffix] { suffix += 1 }
        let midA = a[prefix..<(a.count - suffix)], midB = b[prefix..<(b.count - suffix)]
        guard midA.count + midB.count <= Self.maxChanged else {
            (hunks, added, removed, tooLarge) = ([], midB.count, midA.count, true)
            return
        }
        let diff = Array(midB).difference(from: Array(midA))
        var removedAt = Set<Int>(), insertedAt = Set<Int>()
        for change in diff {
            switch change {
            case .remove(let offset, _, _): removedAt.insert(prefix + offset)
            case .insert(let offset, _, _): insertedAt.insert(prefix + offset)
            }
        }
        // Removals index the old text, insertions the new: walking both in step gives the
        // merged sequence.
        var all: [Line] = []
        var i = 0, j = 0
        while i < a.count || j < b.count {
            if i < a.count && removedAt.contains(i) {
                all.append(Line(kind: .removed, text: a[i], old: i + 1, new: nil))
                i += 1
            } else if j < b.count && insertedAt.contains(j) {
                all.append(Line(kind: .added, text: b[j], old: nil, new: j + 1))
                j += 1
            } else if i < a.count && j < b.count {
                all.append(Line(kind: .same, text: a[i], old: i + 1, new: j + 1))
                i += 1
                j += 1
            } else {
                break  // not reached with a consistent edit script
            }
        }
        added = insertedAt.count
        removed = removedAt.count
        // Hunks: every change with `context` unchanged lines around it, merged when they touch.
        var keep = [Bool](repeating: false, count: all.count)
        for (k, l) in all.enumerated() where l.kind != .same {
            for m in max(0, k - context)...min(all.count - 1, k + context) { keep[m] = true }
        }
        var out: [Hunk] = []
        var k = 0
        while k < all.count {
            guard keep[k] else { k += 1; continue }
            var lines: [Line] = []
            while k < all.count && keep[k] { lines.append(all[k]); k += 1 }
            out.append(Hunk(lines: lines, header: Self.header(lines)))
        }
        hunks = out
    }

    static func lines(_ s: String) -> [String] {
        var parts = s.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        if parts.last == "" { parts.removeLast() }
        return parts
    }

    static func header(_ lines: [Line]) -> String {
        let olds = lines.compactMap(\.old), news = lines.compactMap(\.new)
        // A side with no line in the hunk starts after the line before it (unified diff's rule).
        let oldStart = olds.first ?? 0, newStart = news.first ?? 0
        return "@@ -\(oldStart),\(olds.count) +\(newStart),\(news.count) @@"
    }
}

/// Python source as HTML: escaped, with keywords, strings, comments, numbers and definitions'
/// names in spans (one line at a time: a string spanning lines is coloured on its first line
/// only). Nothing of the input survives as markup: every character is escaped or a span's text.
public enum PythonHighlight {
    static let keywords: Set<String> = [
        "False", "None", "True", "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
        "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is", "lambda", "nonlocal",
        "not", "or", "pass", "raise", "return", "try", "while", "with", "yield", "match", "case", "self",
    ]

    public static func html(_ line: String) -> String {
        var out = ""
        let cs = Array(line)
        var i = 0
        var afterDef = false
        func span(_ cls: String, _ text: String) { out += "<span class=\"\(cls)\">\(Report.esc(text))</span>" }
        while i < cs.count {
            let c = cs[i]
            if c == "#" {
                span("py-c", String(cs[i...]))
                break
            }
            if c == "\"" || c == "'" {
                // A triple quote, or a single one; up to its close on this line, escapes skipped.
                let triple = i + 2 < cs.count && cs[i + 1] == c && cs[i + 2] == c
                let q = triple ? String(repeating: String(c), count: 3) : String(c)
                var j = i + q.count
                while j < cs.count {
                    if cs[j] == "\\" { j += 2; continue }
                    if String(cs[j..<min(cs.count, j + q.count)]) == q { j += q.count; break }
                    j += 1
                }
                span("py-s", String(cs[i..<min(j, cs.count)]))
                i = min(j, cs.count)
                continue
            }
            if c.isLetter || c == "_" {
                var j = i
                while j < cs.count && (cs[j].isLetter || cs[j].isNumber || cs[j] == "_") { j += 1 }
                let word = String(cs[i..<j])
                if afterDef {
                    span("py-f", word)
                    afterDef = false
                } else if keywords.contains(word) {
                    span("py-k", word)
                    afterDef = word == "def" || word == "class"
                } else {
                    out += Report.esc(word)
                }
                i = j
                continue
            }
            if c.isNumber {
                var j = i
                while j < cs.count && (cs[j].isNumber || cs[j].isLetter || cs[j] == "." || cs[j] == "_") { j += 1 }
                span("py-n", String(cs[i..<j]))
                i = j
                continue
            }
            out += Report.esc(String(c))
            i += 1
        }
        return out
    }
}
