import CSeccomp
import CSystemCalls
import Glibc

/// `statfs` and `fstatfs`, answered by the supervisor through the seccomp notifier.
///
/// The kernel's answer for a read-only bind of the host (`/usr`, the agent's directory) is
/// the host filesystem's exact free blocks and inodes, which every write on the host moves,
/// the ledger rows of a held-out phase's violations included: a review read appends of
/// 20-80 KB to within a block from a sandbox with no network. So the supervisor resolves the
/// file the caller named, in the caller's own view (its root, its working directory or its
/// descriptor), asks the kernel for the filesystem's type, block size, name length, flags and
/// id, and answers with constant sizes: as much space and as many inodes as programs checking
/// for room could want, none used. Writes still fail with ENOSPC where a filesystem is full.
enum StatfsAnswer {
    static let statfsNumber = SeccompCompiler.resolve("statfs") ?? -1
    static let fstatfsNumber = SeccompCompiler.resolve("fstatfs") ?? -1
    /// The sizes every answer gives, in blocks of the filesystem's own size and in inodes.
    static let bytesReported: UInt64 = 1 << 40
    static let inodesReported: UInt64 = 1 << 24
    static let pathMax = 4096
    /// O_PATH (linux/fcntl.h), which the Glibc module does not export. A magic link
    /// (/proc/PID/root, cwd, fd/N) is followed: that is what reaches the caller's view.
    static let oPath: Int32 = 0o10000000

    /// The errno to answer with (0: the caller's buffer holds the answer). `path`: statfs
    /// (args[0] is the caller's path), else fstatfs (args[0] its descriptor); args[1] the
    /// caller's struct statfs.
    static func answer(pid: UInt32, path: Bool, args: [UInt64], notifyFD: Int32, id: UInt64) -> Int32 {
        let fd: Int32
        if path {
            guard let name = readPath(pid: pid, address: args[0]) else { return EFAULT }
            guard !name.isEmpty else { return ENOENT }
            // Beneath the caller's root, or its working directory for a relative name: the
            // directory it would have resolved from, as its own root (no way above it).
            let base = open("/proc/\(pid)/\(name.first == 0x2F ? "root" : "cwd")", oPath | O_DIRECTORY | O_CLOEXEC)
            guard base >= 0 else { return ESRCH }
            fd = (name + [0]).withUnsafeBufferPointer { p in
                p.withMemoryRebound(to: CChar.self) { ahs_open_path_in_root(base, $0.baseAddress) }
            }
            let e = errno
            close(base)
            guard fd >= 0 else { return e }
        } else {
            // The caller's descriptor, as a path to its file (an O_PATH descriptor answers
            // fstatfs for any kind of file, a pipe's or a socket's too).
            fd = open("/proc/\(pid)/fd/\(Int32(truncatingIfNeeded: args[0]))", oPath | O_CLOEXEC)
            guard fd >= 0 else { return EBADF }
        }
        defer { close(fd) }
        // Opened through the caller's pid: still the caller (the pid not reused meanwhile).
        guard seccomp_notify_id_valid(notifyFD, id) == 0 else { return ESRCH }
        var reply = [UInt8](repeating: 0, count: 256)
        let n = ahs_statfs_sizes_constant(fd, &reply, Int32(reply.count), bytesReported, inodesReported)
        guard n > 0 else { return -n }
        return Session.writeCaller(pid: pid, address: args[1], bytes: Array(reply.prefix(Int(n))), notifyFD: notifyFD, id: id) ? 0 : EFAULT
    }

    /// The NUL-terminated path at `address` in the caller's memory (its bytes, without the
    /// NUL), at most `pathMax` bytes.
    static func readPath(pid: UInt32, address: UInt64) -> [UInt8]? {
        let fd = open("/proc/\(pid)/mem", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 256)
        while out.count < pathMax {
            let at = address &+ UInt64(out.count)
            let n = chunk.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 256 - Int(at % 256), off_t(Int64(bitPattern: at))) }
            guard n > 0 else { return nil }
            if let end = chunk[..<n].firstIndex(of: 0) { return out + chunk[..<end] }
            out += chunk[..<n]
        }
        return nil
    }
}
