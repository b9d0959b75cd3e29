import Glibc

/// The fields of a `readdir` record, read in place.
///
/// A record is only as long as its name (`d_reclen`), not `sizeof(struct dirent)`: Swift's
/// `e.pointee.d_name` copies the whole 256-byte array the C header declares, reading past
/// the record, and past the end of glibc's directory buffer when the record is its last one.
/// That read crashed the supervisor (SIGSEGV in memcpy) while it walked a tree to evict it
/// from the page cache. Everything here reads through the record's own address and stops at
/// the name's NUL.
public enum DirectoryEntry {
    static let nameOffset = MemoryLayout<dirent>.offset(of: \dirent.d_name)!
    static let typeOffset = MemoryLayout<dirent>.offset(of: \dirent.d_type)!

    /// The entry's name in place, NUL-terminated, valid until the next `readdir` on its
    /// stream (for a walk that opens each entry and keeps nothing: no copy is made).
    public static func namePointer(_ e: UnsafeMutablePointer<dirent>) -> UnsafePointer<CChar> {
        UnsafePointer((UnsafeRawPointer(e) + nameOffset).assumingMemoryBound(to: CChar.self))
    }

    /// The entry's name as bytes, NUL-terminated (for `openat` and friends).
    public static func cName(_ e: UnsafeMutablePointer<dirent>) -> [CChar] {
        let p = (UnsafeRawPointer(e) + nameOffset).assumingMemoryBound(to: CChar.self)
        return Array(UnsafeBufferPointer(start: p, count: strlen(p) + 1))
    }

    /// The entry's name (invalid UTF-8 repaired: for names the supervisor only compares or
    /// reports; use ``cName(_:)`` to open one).
    public static func name(_ e: UnsafeMutablePointer<dirent>) -> String {
        let p = (UnsafeRawPointer(e) + nameOffset).assumingMemoryBound(to: UInt8.self)
        return String(decoding: UnsafeBufferPointer(start: p, count: strlen(UnsafeRawPointer(p).assumingMemoryBound(to: CChar.self))), as: UTF8.self)
    }

    /// `d_type` (`DT_REG`, `DT_DIR`, ..., `DT_UNKNOWN` where the filesystem does not say).
    public static func type(_ e: UnsafeMutablePointer<dirent>) -> UInt8 {
        (UnsafeRawPointer(e) + typeOffset).load(as: UInt8.self)
    }
}
