import Glibc

/// Files the supervisor derives from its inputs and keeps between runs (compiled seccomp
/// programs, loaded policies), under `$AUTOHARNESS_CACHE_DIR` or `/var/cache/autoharness`.
///
/// A cache entry is trusted no more than the binary: it is used only if
/// - this process runs as root (no cache otherwise);
/// - its directory and the file are owned by root and writable by no one else (checked on the
///   open descriptor for the file, so a swapped path cannot slip in another owner's file);
/// - the file begins with exactly the key, every input that determines the entry, followed by
///   a NUL. Keys are text without NUL (command-line words, paths); callers frame their fields
///   so that different inputs cannot spell the same key;
/// - the body that follows has the length and the FNV-1a hash recorded with it: a file cut
///   short (a crash mid-write; entries are not fsynced) or damaged is never read as a shorter
///   entry (a seccomp program cut at an instruction boundary would still look like one).
///
/// An entry that fails any check is a miss, never an error: the caller computes afresh and
/// stores the result over it. A directory past `maxEntries` loses its oldest half when the
/// next entry is stored (keys that carry per-launch values, such as a policy's variables,
/// would otherwise accumulate).
public enum RootOwnedCache {
    /// The directory for `kind` (`seccomp`, `policy`), or nil when not running as root.
    public static func directory(_ kind: String) -> String? {
        guard geteuid() == 0 else { return nil }
        if let d = getenv("AUTOHARNESS_CACHE_DIR") {
            let s = String(cString: d)
            return s.isEmpty ? nil : s + "/" + kind
        }
        return "/var/cache/autoharness/" + kind
    }

    /// The bytes after `key` in the entry for `key` in `dir`, or nil (a miss).
    public static func load(key: String, suffix: String, in dir: String?, maxBytes: Int = 1 << 20) -> [UInt8]? {
        guard let dir, trustworthy(dir, directory: true) else { return nil }
        let fd = open(dir + "/" + fileName(key, suffix: suffix), O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, st.st_uid == 0, st.st_mode & 0o022 == 0,
              st.st_size < maxBytes else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(st.st_size))
        guard bytes.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) == Int(st.st_size) else { return nil }
        let header = Array(key.utf8) + [0]
        guard bytes.count >= header.count + 16, bytes[0..<header.count].elementsEqual(header) else { return nil }
        var r = ByteReader(Array(bytes[header.count...]))
        guard let length = r.u64(), length == UInt64(bytes.count - header.count - 16) else { return nil }
        let body = Array(bytes[(header.count + 8)..<(bytes.count - 8)])
        var tail = ByteReader(Array(bytes[(bytes.count - 8)...]))
        guard tail.u64() == hash(body) else { return nil }
        return body
    }

    /// Writes the entry for `key` (atomically: a reader sees the old file or the new one).
    /// Failures are ignored: the cache is an optimisation.
    public static func store(key: String, suffix: String, body: [UInt8], in dir: String?) {
        guard let dir, !key.utf8.contains(0) else { return }
        if let slash = dir.lastIndex(of: "/"), slash != dir.startIndex { _ = mkdir(String(dir[..<slash]), 0o700) }
        _ = mkdir(dir, 0o700)
        guard trustworthy(dir, directory: true) else { return }
        let path = dir + "/" + fileName(key, suffix: suffix)
        let tmp = path + ".tmp.\(getpid())"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        var w = ByteWriter()
        w.raw(Array(key.utf8) + [0])
        w.u64(UInt64(body.count))
        w.raw(body)
        w.u64(hash(body))
        let ok = w.bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == w.bytes.count
        close(fd)
        if !ok || rename(tmp, path) != 0 {
            unlink(tmp)
            return
        }
        prune(dir, suffix: suffix)
    }

    /// Entries a directory may hold before the oldest half goes.
    public static let maxEntries = 256

    static func prune(_ dir: String, suffix: String) {
        guard let d = opendir(dir) else { return }
        var entries: [(name: String, mtime: Int)] = []
        while let e = readdir(d) {
            let name = DirectoryEntry.name(e)
            var st = stat()
            guard name.hasSuffix(suffix), fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) == 0 else { continue }
            entries.append((name, st.st_mtim.tv_sec * 1_000_000_000 + st.st_mtim.tv_nsec))
        }
        let fd = dirfd(d)
        defer { closedir(d) }
        guard entries.count > maxEntries else { return }
        for e in entries.sorted(by: { $0.mtime < $1.mtime }).prefix(entries.count - maxEntries / 2) {
            unlinkat(fd, e.name, 0)
        }
    }

    /// FNV-1a, 64 bits.
    static func hash<S: Sequence>(_ bytes: S) -> UInt64 where S.Element == UInt8 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in bytes {
            h ^= UInt64(b)
            h &*= 0x100_0000_01b3
        }
        return h
    }

    /// FNV-1a of the key picks the file; the full key inside the file decides a hit.
    public static func fileName(_ key: String, suffix: String) -> String {
        String(hash(key.utf8), radix: 16) + suffix
    }

    /// `field` framed for a key: its length, a colon, the text (so no sequence of fields can
    /// be read as another).
    public static func frame(_ field: String) -> String { "\(field.utf8.count):\(field)" }

    /// What identifies the running binary (device, inode, size, modification time of
    /// /proc/self/exe): part of every key, so that a rebuilt or upgraded binary, whose
    /// loader or compiler may differ, never reuses an older one's entries.
    public static let binaryIdentity: String = {
        var st = stat()
        guard stat("/proc/self/exe", &st) == 0 else { return "unknown-\(getpid())-\(time(nil))" }
        return "\(st.st_dev):\(st.st_ino):\(st.st_size):\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)"
    }()

    private static func trustworthy(_ path: String, directory: Bool) -> Bool {
        var st = stat()
        guard lstat(path, &st) == 0, st.st_uid == 0, st.st_mode & 0o022 == 0 else { return false }
        return (st.st_mode & S_IFMT) == (directory ? S_IFDIR : S_IFREG)
    }
}
