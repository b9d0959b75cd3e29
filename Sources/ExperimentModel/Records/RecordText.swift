import Foundation

// How text someone else chose is kept in records and views.

/// The longest note kept (`gate -m`, `needs-human`, a suite review's reason), in characters.
package let maxNoteLength = 500

/// Someone's note as kept in rows and views (results.tsv's description among them): one line,
/// control characters (tabs and line breaks included, C1 too) made spaces, format characters
/// (bidi overrides, zero-width marks) dropped, runs of spaces folded, capped at
/// `maxNoteLength`; nil when nothing is left.
package func noteLine(_ text: String) -> String? {
    let kept = text.unicodeScalars.filter { $0.properties.generalCategory != .format }
    let flat = String(kept.map { $0.properties.generalCategory == .control || $0 == "\u{2028}" || $0 == "\u{2029}" ? " " : Character($0) })
    let words = flat.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ")
    return words.isEmpty ? nil : String(words.prefix(maxNoteLength))
}

/// Text a sandbox chose, as it may appear in a one-line record: control characters (C0, DEL,
/// C1: a terminal reads U+009B as CSI) escaped, and format characters (bidi overrides,
/// zero-width marks) and the Unicode line separators too; length capped (in characters).
package func printable(_ s: String, limit: Int = 200) -> String {
    var out = ""
    for u in s.unicodeScalars {
        if u.value < 0x20 || u.value == 0x7F {
            out += String(format: "\\x%02x", u.value)
        } else if (0x80...0x9F).contains(u.value) || u.properties.generalCategory == .format || u == "\u{2028}" || u == "\u{2029}" {
            out += String(format: "\\u{%04x}", u.value)
        } else {
            out.unicodeScalars.append(u)
        }
        if out.count >= limit { return out + "…" }
    }
    return out
}
