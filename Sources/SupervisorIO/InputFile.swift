// Reading a file the supervisor is about to parse, never more than a cap.
//
// Every file the supervisor parses (experiment config, policy, task.toml, reward files, a
// benchmark tool's output) has a size cap. The size is checked with fstat before anything is
// read, and again while reading (a file can grow in between), so an oversized file costs one
// fstat rather than its size in memory plus a parser's multiple of it (a 100 MB config read
// whole took 353 MB of RSS). FIFOs and devices are refused (opened O_NONBLOCK, then fstat):
// one put where a config was expected must not hang the supervisor. Plain libc: policies are
// read on every sandbox launch.

import Glibc

public enum InputFile {
    /// Why a file could not be read.
    public enum Problem: Error, Equatable, Sendable {
        case missing
        /// A symlink where none may be followed, a directory, a FIFO or a device.
        case notRegular
        case tooLarge(size: Int, cap: Int)
        case failed(errno: Int32)
        /// Only from `read(at:...strict: true)`: a symlink (never followed), a second hard link.
        case symlink
        case hardLinked(count: Int)

        /// Says why, naming the size and the cap; `what` names the kind of file ("an
        /// experiment config"). The caller puts the path in front.
        public func explanation(_ what: String) -> String {
            switch self {
            case .missing: return "no such file"
            case .notRegular: return "not a regular file"
            case .tooLarge(let size, let cap):
                return "\(size) bytes (\(InputFile.describe(size))), over the \(InputFile.describe(cap)) cap for \(what)"
            case .failed(let e): return ErrnoName.describe(e)
            case .symlink: return "a symbolic link, which is never followed"
            case .hardLinked(let n): return "\(n) hard links"
            }
        }
    }

    /// Reads the regular file at `path` (symlinks followed: operator-owned files such as
    /// configs and policies), at most `cap` bytes.
    public static func read(_ path: String, cap: Int) -> Result<[UInt8], Problem> {
        read(at: AT_FDCWD, path, cap: cap, followSymlinks: true)
    }

    /// Reads regular file `name` relative to directory fd `dir`, at most `cap` bytes. Without
    /// `followSymlinks` (trees a sandbox wrote), a symlink is `.notRegular`, never followed.
    /// `strict` (a file the supervisor takes from a sandbox, such as the coding agent's
    /// agent.py) names a symlink `.symlink` and refuses a file with more than one hard link:
    /// another name for it could be changed after it was judged.
    public static func read(at dir: Int32, _ name: String, cap: Int, followSymlinks: Bool = false,
                            strict: Bool = false) -> Result<[UInt8], Problem> {
        let flags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC | (followSymlinks ? 0 : O_NOFOLLOW)
        var fd: Int32
        repeat { fd = openat(dir, name, flags) } while fd < 0 && errno == EINTR
        guard fd >= 0 else {
            switch errno {
            case ENOENT: return .failure(.missing)
            case ELOOP: return .failure(strict ? .symlink : .notRegular)
            default: return .failure(.failed(errno: errno))
            }
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return .failure(.failed(errno: errno)) }
        guard (st.st_mode & S_IFMT) == S_IFREG else { return .failure(.notRegular) }
        if strict && st.st_nlink != 1 { return .failure(.hardLinked(count: Int(st.st_nlink))) }
        guard Int(st.st_size) <= cap else { return .failure(.tooLarge(size: Int(st.st_size), cap: cap)) }
        return read(descriptor: fd, sizeHint: Int(st.st_size), cap: cap)
    }

    /// Reads an open file from its current offset to the end, at most `cap` bytes (for a
    /// caller that opened and judged the file itself).
    public static func read(descriptor fd: Int32, sizeHint: Int = 0, cap: Int) -> Result<[UInt8], Problem> {
        var out: [UInt8] = []
        out.reserveCapacity(min(sizeHint, cap))
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                return .failure(.failed(errno: errno))
            }
            if n == 0 { break }
            out += buffer[0..<n]
            if out.count > cap { return .failure(.tooLarge(size: out.count, cap: cap)) }
        }
        return .success(out)
    }

    /// At most the first `count` bytes of the file at `path` (a script's `#!` line), or nil.
    public static func prefix(_ path: String, count: Int) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { return nil }
        var out = [UInt8](repeating: 0, count: count)
        var done = 0
        while done < count {
            let n = out.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + done, count - done) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            done += n
        }
        return Array(out[0..<done])
    }

    /// `1 MiB`, `16 MiB`, `4096 bytes`: a cap or size as an operator reads it.
    public static func describe(_ bytes: Int) -> String {
        for (unit, shift) in [("GiB", 30), ("MiB", 20), ("KiB", 10)] where bytes >= 1 << shift {
            // One decimal, rounded down: a size just over a cap must not read as equal to it.
            let tenths = (bytes * 10) >> shift
            return tenths % 10 == 0 ? "\(tenths / 10) \(unit)" : "\(tenths / 10).\(tenths % 10) \(unit)"
        }
        return "\(bytes) bytes"
    }
}
