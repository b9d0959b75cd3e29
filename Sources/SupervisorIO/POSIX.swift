import Glibc

/// Path-based system calls on the supervisor's own files (the ledger, the lock, views) that
/// retry EINTR, fail with the path (`IOFailure`), and open file descriptors close-on-exec:
/// the supervisor forks sandboxes, and a ledger or lock descriptor leaking into one would
/// hand the agent a handle on the private directory.
public enum POSIX {
    static func failure(_ action: String, _ path: String) -> IOFailure {
        IOFailure(action, path, errno: errno)
    }

    /// The corresponding C function is `open`; `O_CLOEXEC` is always added.
    public static func open(_ path: String, _ flags: Int32, mode: mode_t = 0) throws(IOFailure) -> Int32 {
        while true {
            let fd = Glibc.open(path, flags | O_CLOEXEC, mode)
            if fd >= 0 { return fd }
            if errno != EINTR { throw failure("cannot open", path) }
        }
    }

    public static func close(_ fd: Int32) {
        // Linux releases the descriptor even when close reports EINTR: never retry.
        _ = Glibc.close(fd)
    }

    /// The corresponding C function is `fstat`.
    public static func fstat(_ fd: Int32, _ path: String) throws(IOFailure) -> stat {
        var st = stat()
        guard Glibc.fstat(fd, &st) == 0 else { throw failure("cannot stat", path) }
        return st
    }

    /// The corresponding C function is `fchmod`.
    public static func fchmod(_ fd: Int32, _ mode: mode_t, _ path: String) throws(IOFailure) {
        guard Glibc.fchmod(fd, mode) == 0 else { throw failure("cannot chmod", path) }
    }

    /// The corresponding C function is `fsync`.
    public static func fsync(_ fd: Int32, _ path: String) throws(IOFailure) {
        while Glibc.fsync(fd) != 0 {
            if errno != EINTR { throw failure("cannot fsync", path) }
        }
    }

    /// The corresponding C function is `ftruncate`.
    public static func ftruncate(_ fd: Int32, _ length: off_t, _ path: String) throws(IOFailure) {
        while Glibc.ftruncate(fd, length) != 0 {
            if errno != EINTR { throw failure("cannot truncate", path) }
        }
    }

    /// Writes all of `bytes` at `offset`, looping over short writes. The corresponding C
    /// function is `pwrite`.
    public static func pwriteAll(_ fd: Int32, _ bytes: [UInt8], at offset: off_t, _ path: String) throws(IOFailure) {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Glibc.pwrite(fd, $0.baseAddress! + done, $0.count - done, offset + off_t(done)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw failure("cannot write", path)
            }
            done += n
        }
    }

    /// Reads up to `limit` bytes from the start of the file. The corresponding C function is `pread`.
    public static func pread(_ fd: Int32, limit: Int, _ path: String) throws(IOFailure) -> [UInt8] {
        var buffer = [UInt8](repeating: 0, count: limit)
        var done = 0
        while done < limit {
            let n = buffer.withUnsafeMutableBytes { Glibc.pread(fd, $0.baseAddress! + done, limit - done, off_t(done)) }
            if n < 0 {
                if errno == EINTR { continue }
                throw failure("cannot read", path)
            }
            if n == 0 { break }
            done += n
        }
        return Array(buffer[..<done])
    }

    /// The corresponding C function is `rename`.
    public static func rename(_ from: String, _ to: String) throws(IOFailure) {
        guard Glibc.rename(from, to) == 0 else { throw failure("cannot rename \(from) to", to) }
    }

    /// Best-effort cleanup; the corresponding C function is `unlink`.
    public static func unlink(_ path: String) {
        _ = Glibc.unlink(path)
    }

    /// What the symbolic link `path` holds (for /proc's magic links, the kernel's name of the
    /// file), or nil.
    public static func readLink(_ path: String) -> String? {
        var buf = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = Glibc.readlink(path, &buf, Int(PATH_MAX))
        guard n > 0 else { return nil }
        return String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Splits `path` into its directory ("." when there is none) and last component.
    public static func split(_ path: String) -> (directory: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return (".", path) }
        let dir = String(path[..<slash])
        return (dir.isEmpty ? "/" : dir, String(path[path.index(after: slash)...]))
    }
}

/// CLOCK_MONOTONIC in seconds: deadlines and intervals that a change of the wall clock must
/// not move.
public func monotonicNow() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}
