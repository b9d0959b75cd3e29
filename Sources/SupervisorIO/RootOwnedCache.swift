import Glibc
import WireCoding

/// Files the supervisor derives from its inputs and keeps between runs (compiled seccomp
/// programs, loaded policies), under `$AUTOHARNESS_CACHE_DIR` or `/var/cache/autoharness`.
///
/// A cache entry is trusted no more than the binary: it is used only if
/// - this process runs as root (no cache otherwise);
/// - its directory and the file are owned by root and writable by no one else, checked on open
///   descriptors (the file is opened relative to the directory's, neither through a symlink),
///   and every directory above is root's and writable by no one else or sticky, so no other
///   user can swap in another directory between the check and the use;
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
        guard let dir, let dfd = openDirectory(dir, create: false) else { return nil }
        defer { close(dfd) }
        let fd = openat(dfd, fileName(key, suffix: suffix), O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, st.st_uid == 0, st.st_mode & 0o022 == 0,
              case .success(let bytes) = InputFile.read(descriptor: fd, sizeHint: Int(st.st_size), cap: maxBytes) else { return nil }
        let header = Array(key.utf8) + [0]
        guard bytes.count >= header.count, bytes[0..<header.count].elementsEqual(header) else { return nil }
        var r = ByteReader(Array(bytes[header.count...]))
        guard let length = r.u64(), let body = r.bytes(Int(clamping: length)), r.u64() == hash(body), r.atEnd else { return nil }
        return body
    }

    /// Longest key stored (a key carries per-launch values such as a policy's variables).
    public static let maxKeyBytes = 16 << 10

    /// Writes the entry for `key` (atomically: a reader sees the old file or the new one).
    /// Failures are ignored: the cache is an optimisation.
    public static func store(key: String, suffix: String, body: [UInt8], in dir: String?) {
        guard let dir, !key.utf8.contains(0), key.utf8.count <= maxKeyBytes,
              let dfd = openDirectory(dir, create: true) else { return }
        defer { close(dfd) }
        let name = fileName(key, suffix: suffix)
        let tmp = name + ".tmp.\(getpid())"
        let fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        var w = ByteWriter()
        w.raw(Array(key.utf8) + [0])
        w.u64(UInt64(body.count))
        w.raw(body)
        w.u64(hash(body))
        let ok = w.bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == w.bytes.count
        close(fd)
        if !ok || renameat(dfd, tmp, dfd, name) != 0 {
            unlinkat(dfd, tmp, 0)
            return
        }
        prune(dfd, suffix: suffix)
    }

    /// Entries a directory may hold before the oldest half goes.
    public static let maxEntries = 256

    /// Past `maxEntries`, removes the oldest entries down to half; and always the temporary
    /// files of writers killed mid-store (more than a minute old).
    static func prune(_ dfd: Int32, suffix: String) {
        let listing = dup(dfd)
        guard listing >= 0, let d = fdopendir(listing) else {
            if listing >= 0 { close(listing) }
            return
        }
        defer { closedir(d) }
        var entries: [(name: String, mtime: Int)] = []
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        while let e = readdir(d) {
            let name = DirectoryEntry.name(e)
            var st = stat()
            guard fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
            if name.hasSuffix(suffix) {
                entries.append((name, st.st_mtim.tv_sec * 1_000_000_000 + st.st_mtim.tv_nsec))
            } else if name.contains(suffix + ".tmp."), now.tv_sec - st.st_mtim.tv_sec > 60 {
                unlinkat(dfd, name, 0)
            }
        }
        guard entries.count > maxEntries else { return }
        for e in entries.sorted(by: { $0.mtime < $1.mtime }).prefix(entries.count - maxEntries / 2) {
            unlinkat(dfd, e.name, 0)
        }
    }

    /// The cache directory, opened without following a symlink and checked on the descriptor
    /// (root's, writable by no one else), or nil. Every directory above it must be root's and
    /// writable by no one else unless sticky (`/tmp`): otherwise another user could swap the
    /// directory, or one above it, between our check and our use. `create`: makes the
    /// directory and its parent (0700) if missing.
    static func openDirectory(_ dir: String, create: Bool) -> Int32? {
        guard dir.hasPrefix("/"), let slash = dir.lastIndex(of: "/") else { return nil }
        let parent = slash == dir.startIndex ? "/" : String(dir[..<slash])
        if create {
            _ = mkdir(parent, 0o700)
            _ = mkdir(dir, 0o700)
        }
        guard ancestorsAreRoots(parent) else { return nil }
        let fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == 0, st.st_mode & 0o022 == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// Whether `path` and each directory above it is a directory (not a symlink: one in a
    /// directory another user can write could be pointed elsewhere later), root's, and
    /// writable by no one else or sticky.
    static func ancestorsAreRoots(_ path: String) -> Bool {
        var dir = path
        while true {
            var st = stat()
            guard lstat(dir, &st) == 0, (st.st_mode & S_IFMT) == S_IFDIR, st.st_uid == 0,
                  st.st_mode & 0o022 == 0 || st.st_mode & S_ISVTX != 0 else { return false }
            guard dir != "/", let slash = dir.lastIndex(of: "/") else { return true }
            dir = slash == dir.startIndex ? "/" : String(dir[..<slash])
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
    /// The change time is in it because no tool can set it: an in-place overwrite that keeps
    /// the size and the modification time (`cp -p` onto the same inode) still changes it.
    public static let binaryIdentity: String = identity(ofFile: "/proc/self/exe") ?? "unknown-\(getpid())-\(time(nil))"

    /// `binaryIdentity` of the executable at `path` (the `sandbox exec` front looks up what
    /// the full CLI stored), or nil if it cannot be read.
    public static func identity(ofFile path: String) -> String? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return "\(st.st_dev):\(st.st_ino):\(st.st_size):\(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec):\(st.st_ctim.tv_sec).\(st.st_ctim.tv_nsec)"
    }
}
