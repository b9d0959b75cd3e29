// Human-friendly sizes and durations as they appear in policy files (`64M`, `1.5G`, `10m`).
// Parsing is pure integer arithmetic so that a size is never off by a rounding error.

/// Byte sizes with binary units: `1024`, `512k`, `64M`, `64MiB`, `64MB`, `1.5G`, `2T`.
///
/// Every unit is a power of 1024 (`MB` means MiB here): sandbox limits are about memory
/// pages and disk blocks, and mixing decimal units in would make `64M` and `64MB` differ.
public enum ByteSize {
    private static let units: [(letter: Character, factor: UInt64)] = [
        ("K", 1 << 10), ("M", 1 << 20), ("G", 1 << 30), ("T", 1 << 40),
    ]

    /// The number of bytes `s` denotes, or nil if it is not a size or does not fit in 64 bits.
    ///
    /// Accepts digits with an optional fraction, then optionally a unit letter (K, M, G or T,
    /// any case) followed by an optional `i` and/or `B`; a bare `B` means bytes. A fraction
    /// that does not come out to whole bytes is rounded down.
    public static func parse(_ s: String) -> UInt64? {
        var rest = Substring(s)
        let integerDigits = rest.prefix(while: \.isASCIIDigit)
        rest = rest.dropFirst(integerDigits.count)
        var fractionDigits: Substring = ""
        if rest.first == "." {
            rest = rest.dropFirst()
            fractionDigits = rest.prefix(while: \.isASCIIDigit)
            rest = rest.dropFirst(fractionDigits.count)
            // "1." and ".5" are typos more often than intent.
            guard !fractionDigits.isEmpty else { return nil }
        }
        guard !integerDigits.isEmpty, fractionDigits.count <= 18 else { return nil }

        var factor: UInt64 = 1
        if let letter = rest.first?.uppercased().first, let unit = units.first(where: { $0.letter == letter }) {
            factor = unit.factor
            rest = rest.dropFirst()
            if rest.first == "i" { rest = rest.dropFirst() }
        }
        if rest.first == "B" || rest.first == "b" { rest = rest.dropFirst() }
        guard rest.isEmpty, let whole = UInt64(integerDigits) else { return nil }

        let (scaled, overflow) = whole.multipliedReportingOverflow(by: factor)
        guard !overflow else { return nil }
        guard let fraction = UInt64(fractionDigits.isEmpty ? "0" : fractionDigits) else { return nil }
        var scale: UInt64 = 1
        for _ in fractionDigits { scale *= 10 }
        // fraction < scale, so fraction * factor / scale < factor: the quotient always fits.
        let (fractionBytes, _) = scale.dividingFullWidth(factor.multipliedFullWidth(by: fraction))
        let (total, overflow2) = scaled.addingReportingOverflow(fractionBytes)
        return overflow2 ? nil : total
    }

    /// The shortest exact spelling of `v` in the largest unit that divides it (`64M`, `1536M`,
    /// `1000`); `parse(format(v)) == v` for every value.
    public static func format(_ v: UInt64) -> String {
        guard v > 0 else { return "0" }
        for unit in units.reversed() where v % unit.factor == 0 {
            return "\(v / unit.factor)\(unit.letter)"
        }
        return "\(v)"
    }
}

/// Wall-clock durations: a number of seconds (`600`, `2.5`) or a number with a unit
/// (`90s`, `10m`, `2h`).
public enum DurationString {
    /// Seconds, or nil if `s` is not a non-negative, finite duration.
    public static func parse(_ s: String) -> Double? {
        var number = Substring(s)
        var factor = 1.0
        if let unit = number.last, unit.isLetter {
            switch unit {
            case "s": factor = 1
            case "m": factor = 60
            case "h": factor = 3600
            default: return nil
            }
            number = number.dropLast()
        }
        guard let value = DecimalNumber.parse(number) else { return nil }
        let seconds = value * factor
        return seconds.isFinite ? seconds : nil
    }

    /// `600` → `10m`, `5400` → `90m`, `7200` → `2h`, `2.5` → `2.5s`.
    public static func format(_ seconds: Double) -> String {
        if seconds > 0, seconds.truncatingRemainder(dividingBy: 3600) == 0 { return "\(whole(seconds / 3600))h" }
        if seconds > 0, seconds.truncatingRemainder(dividingBy: 60) == 0 { return "\(whole(seconds / 60))m" }
        return seconds == seconds.rounded() ? "\(whole(seconds))s" : "\(seconds)s"
    }

    private static func whole(_ v: Double) -> String {
        v < 1e15 ? String(Int64(v)) : String(v)
    }
}

/// Plain decimal notation (`2`, `0.5`), the only number syntax policies use: `Double()` alone
/// would also take "nan", "inf", "1e3" and "0x1p3".
package enum DecimalNumber {
    package static func parse<S: StringProtocol>(_ s: S) -> Double? {
        let parts = s.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...2).contains(parts.count),
            parts.allSatisfy({ !$0.isEmpty && $0.allSatisfy(\.isASCIIDigit) }),
            let value = Double(String(s)), value.isFinite
        else { return nil }
        return value
    }
}

extension Character {
    /// `0`–`9` only; `Character.isNumber` would also accept digits from other scripts.
    package var isASCIIDigit: Bool { ("0"..."9").contains(self) }
}
