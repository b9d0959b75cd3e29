import Glibc

/// An on-disk cache of exported seccomp programs (libseccomp's rule database and BPF export
/// cost ~2 ms, paid by every `sandbox exec` otherwise).
///
/// A cached program is only ever used if the file's first bytes are exactly the key text —
/// everything that determines the filter — and both the file and its directory are owned by
/// root and writable by no one else. A cache that cannot be used safely is skipped, never
/// trusted: the filter is then compiled afresh.
enum FilterCache {
    /// `$AUTOHARNESS_CACHE_DIR` or `/var/cache/autoharness`, with `seccomp/` below it.
    static var directory: String? {
        guard geteuid() == 0 else { return nil }
        if let d = getenv("AUTOHARNESS_CACHE_DIR") {
            let s = String(cString: d)
            return s.isEmpty ? nil : s + "/seccomp"
        }
        return "/var/cache/autoharness/seccomp"
    }

    /// Programs this process already loaded or built: a supervisor compiles the same policy
    /// for every task it runs.
    private static let memo = Locked<[String: [UInt8]]>([:])

    /// The program for `key`: from this process's memo, else the disk cache (else nil).
    static func lookup(key: String) -> [UInt8]? {
        if let hit = memo.withLock({ memo.value[key] }) { return hit }
        guard let bpf = load(key: key) else { return nil }
        remember(key: key, bpf: bpf)
        return bpf
    }

    static func remember(key: String, bpf: [UInt8]) {
        memo.withLock { memo.value[key] = bpf }
    }

    static func load(key: String, in dir: String? = directory) -> [UInt8]? {
        guard let dir, trustworthy(dir, directory: true) else { return nil }
        let path = dir + "/" + fileName(key)
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, st.st_uid == 0, st.st_mode & 0o022 == 0,
              st.st_size < 1 << 20 else { return nil }
        var bytes = [UInt8](repeating: 0, count: Int(st.st_size))
        guard bytes.withUnsafeMutableBytes({ read(fd, $0.baseAddress, $0.count) }) == Int(st.st_size) else { return nil }
        let header = Array(key.utf8) + [0]
        guard bytes.count > header.count, Array(bytes[0..<header.count]) == header else { return nil }
        let bpf = Array(bytes[header.count...])
        return bpf.count % 8 == 0 && !bpf.isEmpty ? bpf : nil
    }

    static func store(key: String, bpf: [UInt8], in dir: String? = directory) {
        guard let dir else { return }
        let parent = String(dir[..<dir.lastIndex(of: "/")!])
        _ = mkdir(parent, 0o700)
        _ = mkdir(dir, 0o700)
        guard trustworthy(dir, directory: true) else { return }
        let path = dir + "/" + fileName(key)
        let tmp = path + ".tmp.\(getpid())"
        let fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { return }
        let bytes = Array(key.utf8) + [0] + bpf
        let ok = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) } == bytes.count && fsync(fd) == 0
        close(fd)
        if !ok || rename(tmp, path) != 0 { unlink(tmp) }
    }

    private static func trustworthy(_ path: String, directory: Bool) -> Bool {
        var st = stat()
        guard lstat(path, &st) == 0, st.st_uid == 0, st.st_mode & 0o022 == 0 else { return false }
        return (st.st_mode & S_IFMT) == (directory ? S_IFDIR : S_IFREG)
    }

    /// FNV-1a of the key picks the file; the full key inside the file decides a hit.
    static func fileName(_ key: String) -> String {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for b in key.utf8 {
            h ^= UInt64(b)
            h &*= 0x100_0000_01b3
        }
        return String(h, radix: 16) + ".bpf"
    }
}
