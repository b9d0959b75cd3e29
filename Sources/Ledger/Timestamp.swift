import Foundation
import Glibc

/// The one time format of the ledger: RFC 3339, UTC, millisecond precision, e.g.
/// `2025-06-01T02:03:04.005Z`. Fixed width, so that text order is time order and an operator
/// can compare rows with `sqlite3` without parsing.
public enum Timestamp {
    /// Formats `date`, rounded to the nearest millisecond (`Date` is a binary double, so
    /// `.123` may be stored as `.12299999`: truncating would print `.122`).
    public static func format(_ date: Date) -> String {
        let totalMs = Int64((date.timeIntervalSince1970 * 1000).rounded())
        var seconds = time_t(totalMs.quotientAndRemainder(dividingBy: 1000).quotient)
        var ms = Int(totalMs % 1000)
        if ms < 0 { ms += 1000; seconds -= 1 }
        var t = tm()
        gmtime_r(&seconds, &t)
        return "\(pad(Int(t.tm_year) + 1900, 4))-\(pad(Int(t.tm_mon) + 1, 2))-\(pad(Int(t.tm_mday), 2))T"
            + "\(pad(Int(t.tm_hour), 2)):\(pad(Int(t.tm_min), 2)):\(pad(Int(t.tm_sec), 2)).\(pad(ms, 3))Z"
    }

    /// Parses exactly the form `format` writes (also accepted without the milliseconds).
    /// Anything else — offsets, lower-case `z`, out-of-range fields — is nil, so that
    /// `verify()` can insist every stored time is one the ledger could have written.
    public static func parse(_ text: String) -> Date? {
        let b = Array(text.utf8)
        guard b.count == 24 || b.count == 20 else { return nil }
        func digits(_ range: Range<Int>) -> Int? {
            var v = 0
            for i in range {
                guard b[i] >= 0x30, b[i] <= 0x39 else { return nil }
                v = v * 10 + Int(b[i] - 0x30)
            }
            return v
        }
        let separators: [(Int, UInt8)] = [(4, 0x2D), (7, 0x2D), (10, 0x54), (13, 0x3A), (16, 0x3A)]
        guard separators.allSatisfy({ b[$0.0] == $0.1 }), b[b.count - 1] == 0x5A else { return nil }
        guard let year = digits(0..<4), let month = digits(5..<7), let day = digits(8..<10),
              let hour = digits(11..<13), let minute = digits(14..<16), let second = digits(17..<19)
        else { return nil }
        var ms = 0
        if b.count == 24 {
            guard b[19] == 0x2E, let m = digits(20..<23) else { return nil }
            ms = m
        }
        var t = tm()
        t.tm_year = Int32(year - 1900)
        t.tm_mon = Int32(month - 1)
        t.tm_mday = Int32(day)
        t.tm_hour = Int32(hour)
        t.tm_min = Int32(minute)
        t.tm_sec = Int32(second)
        let seconds = timegm(&t)
        let date = Date(timeIntervalSince1970: Double(seconds) + Double(ms) / 1000)
        // timegm normalises 2025-02-30 to March 2nd: a round trip rejects such dates.
        let again = format(date)
        return (b.count == 24 ? again == text : again.prefix(19) == text.prefix(19)) ? date : nil
    }

    private static func pad(_ value: Int, _ width: Int) -> String {
        let s = String(value)
        return s.count >= width ? s : String(repeating: "0", count: width - s.count) + s
    }
}
