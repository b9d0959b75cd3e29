import Benchmark
import Crypto

// A failure's fingerprint: what two failures with one root cause have in common. Error
// trackers group events the same way (the exception type, where it was raised, and the
// message with its variable parts replaced by placeholders); here the "where" is the failing
// check the benchmark names. Deterministic: the same evidence gives the same signature on
// every machine and in every replay of the ledger.

public enum FailureSignature {
    /// `error class | check | normalised excerpt`.
    public static func of(_ e: FailureEvidence) -> String {
        "\(e.errorClass) | \(e.check) | \(normalise(e.excerpt))"
    }

    /// A short stable name for a signature: `c` and the first 8 hex digits of its SHA-256.
    public static func clusterID(_ signature: String) -> String {
        "c" + SHA256.hash(data: Array(signature.utf8)).prefix(4).map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()
    }

    /// Longest normalised message kept, in characters.
    static let maxNormalised = 300
    /// How much of a message is read (Unicode scalars), and how far one word is looked at for
    /// a URL: each of the at most 300 pieces kept costs at most this much.
    static let maxScanned = 1 << 16
    static let maxWord = 2048

    /// The message with what varies between occurrences of one failure replaced: quoted
    /// values `<str>`, URLs `<url>`, e-mail addresses `<email>`, UUIDs `<uuid>`, IPv4
    /// addresses `<ip>`, dates and times `<date>`, paths `<path>`, hex ids and digests `<hex>`,
    /// numbers `<num>`; whitespace collapsed.
    public static func normalise(_ message: String) -> String {
        // What can reach the 300 characters kept: a message's start (a test's output can be
        // megabytes without a space).
        let s = Array(message.unicodeScalars.prefix(Self.maxScanned))
        var out = ""
        var i = 0
        func emit(_ piece: String) {
            if piece == " " {
                if out.isEmpty || out.hasSuffix(" ") { return }
            }
            out += piece
        }
        while i < s.count && out.count < maxNormalised {
            let c = s[i]
            if c.properties.isWhitespace {
                emit(" ")
                i += 1
                continue
            }
            // A quoted value: '…', "…", `…` closed on the same line. An apostrophe inside a
            // word (don't) opens nothing.
            if c == "\"" || c == "`" || (c == "'" && (i == 0 || !isWordScalar(s[i - 1]))) {
                if let end = s[(i + 1)...].prefix(400).firstIndex(where: { $0 == c || $0 == "\n" }), s[end] == c {
                    emit("<str>")
                    i = end + 1
                    continue
                }
            }
            // A URL runs to the next space, whatever separators its query holds.
            var w = i
            while w < s.count, w - i < Self.maxWord, !s[w].properties.isWhitespace { w += 1 }
            let word = String(String.UnicodeScalarView(s[i..<w]))
            if let scheme = word.range(of: "://"), word[..<scheme.lowerBound].allSatisfy({ $0.isLetter }) && scheme.lowerBound > word.startIndex {
                emit(token(word))
                i = w
                continue
            }
            if isSeparator(c) {
                emit(String(c))
                i += 1
                continue
            }
            var j = i
            while j < s.count, !s[j].properties.isWhitespace, !isSeparator(s[j]), s[j] != "\"", s[j] != "`" { j += 1 }
            if j == i {
                // A quote that closes nothing on its line (`"abc` then a newline): itself. Without
                // this the loop never moved on (tb2-oracle: `benchmark` spun after a task).
                emit(String(c))
                i += 1
                continue
            }
            emit(token(String(String.UnicodeScalarView(s[i..<j]))))
            i = j
        }
        while out.hasSuffix(" ") { out.removeLast() }
        return out
    }

    static func isSeparator(_ c: Unicode.Scalar) -> Bool { "()[]{},;<>=|".unicodeScalars.contains(c) }

    static func isWordScalar(_ c: Unicode.Scalar) -> Bool { c.properties.isAlphabetic || ("0"..."9").contains(c) || c == "_" }

    /// One run of non-space, non-separator text, classified as a whole where it is one
    /// variable value, else with its numbers replaced. Trailing `.`, `:` and `!` stay.
    static func token(_ raw: String) -> String {
        var body = Substring(raw)
        var tail = ""
        while let last = body.last, last == "." || last == ":" || last == "!" || last == "?" {
            tail = String(last) + tail
            body.removeLast()
        }
        let t = String(body)
        guard !t.isEmpty else { return tail }
        if t.contains("://") { return "<url>" + tail }
        if isEmail(t) { return "<email>" + tail }
        if isUUID(t) { return "<uuid>" + tail }
        if isIPv4(t) { return "<ip>" + tail }
        if isDate(t) { return "<date>" + tail }
        if isPath(t) { return "<path>" + tail }
        if isHexID(t) { return "<hex>" + tail }
        return numbersReplaced(t) + tail
    }

    static func isEmail(_ t: String) -> Bool {
        let parts = t.split(separator: "@", omittingEmptySubsequences: false)
        return parts.count == 2 && !parts[0].isEmpty && parts[1].contains(".") && !parts[1].hasPrefix(".")
    }

    static func isHex(_ c: Character) -> Bool { c.isHexDigit }

    static func isUUID(_ t: String) -> Bool {
        let groups = t.split(separator: "-", omittingEmptySubsequences: false)
        return groups.map(\.count) == [8, 4, 4, 4, 12] && groups.allSatisfy { $0.allSatisfy(isHex) }
    }

    static func isIPv4(_ t: String) -> Bool {
        let base = t.split(separator: ":", maxSplits: 1).first.map(String.init) ?? t  // 10.0.0.1:8080
        let parts = base.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count == 4 && parts.allSatisfy { !$0.isEmpty && $0.count <= 3 && $0.allSatisfy(\.isASCIIDigit) && Int($0)! <= 255 }
    }

    /// `2026-11-25`, `2026-11-25T12:00:00Z`, `12:30:05` and the like.
    static func isDate(_ t: String) -> Bool {
        let c = Array(t)
        if c.count >= 10, c[0...3].allSatisfy(\.isASCIIDigit), c[4] == "-", c[5...6].allSatisfy(\.isASCIIDigit), c[7] == "-",
           c[8...9].allSatisfy(\.isASCIIDigit) { return true }
        if c.count >= 8, c[0...1].allSatisfy(\.isASCIIDigit), c[2] == ":", c[3...4].allSatisfy(\.isASCIIDigit), c[5] == ":" { return true }
        return false
    }

    /// An absolute or relative path with at least two components (`/app/out.txt`,
    /// `tests/test_outputs.py`, `./x/y`, `~/z`); not a ratio such as `3/4`.
    static func isPath(_ t: String) -> Bool {
        guard t.contains("/"), t.count > 1 else { return false }
        if t.hasPrefix("/") || t.hasPrefix("./") || t.hasPrefix("../") || t.hasPrefix("~/") { return true }
        let parts = t.split(separator: "/")
        return parts.count >= 2 && parts.contains { $0.contains { $0.isLetter } }
    }

    /// `0x1f…`, or 7+ hex digits with both a digit and a letter (a commit, a digest, an id).
    static func isHexID(_ t: String) -> Bool {
        if t.hasPrefix("0x") || t.hasPrefix("0X") { return t.count > 2 && t.dropFirst(2).allSatisfy(isHex) }
        return t.count >= 7 && t.allSatisfy(isHex) && t.contains(where: \.isASCIIDigit) && t.contains(where: \.isLetter)
    }

    /// Every number in `t` (digits with an optional sign, decimals and exponent) as `<num>`.
    static func numbersReplaced(_ t: String) -> String {
        let c = Array(t)
        var out = ""
        var i = 0
        while i < c.count {
            let signed = (c[i] == "-" || c[i] == "+") && i + 1 < c.count && c[i + 1].isASCIIDigit && (i == 0 || !c[i - 1].isLetter)
            if c[i].isASCIIDigit || signed {
                var j = i + (signed ? 1 : 0)
                while j < c.count, c[j].isASCIIDigit || c[j] == "_" { j += 1 }
                if j + 1 < c.count, c[j] == ".", c[j + 1].isASCIIDigit {
                    j += 1
                    while j < c.count, c[j].isASCIIDigit { j += 1 }
                }
                if j + 1 < c.count, c[j] == "e" || c[j] == "E", c[j + 1].isASCIIDigit || ((c[j + 1] == "-" || c[j + 1] == "+") && j + 2 < c.count && c[j + 2].isASCIIDigit) {
                    j += 2
                    while j < c.count, c[j].isASCIIDigit { j += 1 }
                }
                out += "<num>"
                i = j
            } else {
                out.append(c[i])
                i += 1
            }
        }
        return out
    }
}

private extension Character {
    var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}
