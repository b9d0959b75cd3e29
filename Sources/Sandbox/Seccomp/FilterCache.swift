import Glibc
import SupervisorIO

/// An on-disk cache of exported seccomp programs (libseccomp's rule database and BPF export
/// cost ~2 ms, paid by every `sandbox exec` otherwise).
///
/// The key is everything that determines the filter; `RootOwnedCache` says when an entry is
/// trusted. An entry that cannot be used safely is skipped: the filter is compiled afresh.
enum FilterCache {
    /// `RootOwnedCache`'s `seccomp/`.
    static var directory: String? { RootOwnedCache.directory("seccomp") }

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
        guard let bpf = RootOwnedCache.load(key: key, suffix: ".bpf", in: dir) else { return nil }
        return bpf.count % 8 == 0 && !bpf.isEmpty ? bpf : nil
    }

    static func store(key: String, bpf: [UInt8], in dir: String? = directory) {
        RootOwnedCache.store(key: key, suffix: ".bpf", body: bpf, in: dir)
    }

    static func fileName(_ key: String) -> String { RootOwnedCache.fileName(key, suffix: ".bpf") }
}
