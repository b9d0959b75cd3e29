// The one byte codec of autoharness's own formats: little-endian integers, length-prefixed
// strings and frames, a reader that returns nil on any malformed or truncated input instead of
// trapping, and no Foundation (the broker's in-sandbox client is a small static binary).
// Used by the supervisor's cache files (RootOwnedCache entries, policies, seccomp programs),
// the broker's wire (BrokerWire), the held-out VM's egress link (EgressLink) and the launch
// service's (LaunchService, whose C client, CFrontStart, writes the same little-endian u32s).
// The launcher's plan (plan_wire.c) is C on both ends and keeps its own packing.

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

/// Frames: a tag (a magic or a one-byte kind), a u32 length, the bytes.
public enum Frame {
    public static func u32(_ v: UInt32) -> [UInt8] {
        var w = ByteWriter()
        w.u32(v)
        return w.bytes
    }

    /// The u32 in the first four of `bytes`, or nil if there are fewer.
    public static func u32<C: Collection>(_ bytes: C) -> UInt32? where C.Element == UInt8 {
        var r = ByteReader(Array(bytes.prefix(4)))
        return r.u32()
    }

    public static func tagged(_ tag: [UInt8], _ body: [UInt8]) -> [UInt8] {
        var w = ByteWriter()
        w.raw(tag)
        w.count(body.count)
        w.raw(body)
        return w.bytes
    }
}
