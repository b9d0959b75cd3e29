// Little-endian, length-prefixed binary writing and reading, for the supervisor's own cache
// files (RootOwnedCache entries): no Foundation, and a reader that returns nil on any
// malformed or truncated input instead of trapping.

public struct ByteWriter {
    public private(set) var bytes: [UInt8] = []
    public init() {}
    public mutating func u8(_ v: UInt8) { bytes.append(v) }
    public mutating func u32(_ v: UInt32) { integer(v) }
    public mutating func u64(_ v: UInt64) { integer(v) }
    private mutating func integer<T: FixedWidthInteger>(_ v: T) {
        for i in 0..<MemoryLayout<T>.size { bytes.append(UInt8(truncatingIfNeeded: v >> (8 * i))) }
    }
    public mutating func count(_ n: Int) { u32(UInt32(n)) }
    public mutating func bool(_ b: Bool) { u8(b ? 1 : 0) }
    public mutating func raw(_ b: [UInt8]) { bytes.append(contentsOf: b) }
    public mutating func string(_ s: String) {
        count(s.utf8.count)
        bytes.append(contentsOf: s.utf8)
    }
    public mutating func strings(_ a: [String]) {
        count(a.count)
        for s in a { string(s) }
    }
    public mutating func optional<T>(_ v: T?, _ body: (inout ByteWriter, T) -> Void) {
        if let v { u8(1); body(&self, v) } else { u8(0) }
    }
}

public struct ByteReader {
    public let bytes: [UInt8]
    public private(set) var at = 0
    public init(_ b: [UInt8]) { bytes = b }
    public var atEnd: Bool { at == bytes.count }
    /// What is left, consumed.
    public mutating func rest() -> [UInt8] {
        defer { at = bytes.count }
        return Array(bytes[at...])
    }

    public mutating func u8() -> UInt8? {
        guard at < bytes.count else { return nil }
        defer { at += 1 }
        return bytes[at]
    }
    public mutating func u32() -> UInt32? { integer() }
    public mutating func u64() -> UInt64? { integer() }
    /// The next `n` bytes, or nil if fewer are left.
    public mutating func bytes(_ n: Int) -> [UInt8]? {
        guard n >= 0, bytes.count - at >= n else { return nil }
        defer { at += n }
        return Array(bytes[at..<at + n])
    }
    private mutating func integer<T: FixedWidthInteger & UnsignedInteger>() -> T? {
        let size = MemoryLayout<T>.size
        guard bytes.count - at >= size else { return nil }
        var v: T = 0
        for i in 0..<size { v |= T(bytes[at + i]) << (8 * i) }
        at += size
        return v
    }
    /// A count no larger than the bytes left (each element takes at least one).
    public mutating func count() -> Int? {
        guard let n = u32(), Int(n) <= bytes.count - at else { return nil }
        return Int(n)
    }
    public mutating func bool() -> Bool? {
        switch u8() {
        case 0: return false
        case 1: return true
        default: return nil
        }
    }
    public mutating func string() -> String? {
        guard let n = count() else { return nil }
        defer { at += n }
        return String(validating: bytes[at..<at + n], as: UTF8.self)
    }
    public mutating func strings() -> [String]? {
        guard let n = count() else { return nil }
        var out: [String] = []
        out.reserveCapacity(n)
        for _ in 0..<n {
            guard let s = string() else { return nil }
            out.append(s)
        }
        return out
    }
    /// `.some(nil)` for an absent value, nil for malformed bytes.
    public mutating func optional<T>(_ body: (inout ByteReader) -> T?) -> T?? {
        switch u8() {
        case 0: return .some(nil)
        case 1: return body(&self).map { .some($0) }
        default: return nil
        }
    }
}
