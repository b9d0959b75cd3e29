import CSeccomp
import Glibc
import PolicyModel
import SupervisorIO
import WireCoding

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

    // MARK: - Whole sections

    /// The key of a policy's whole seccomp section: everything `SeccompCompiler` reads to
    /// compile it (the section as written, this binary, whose profile and argument rules are
    /// compiled in, and libseccomp's version and architecture, which map names to numbers).
    static func sectionKey(_ spec: SeccompSpec, chroot: Bool = false) -> String {
        let v = seccomp_version().pointee
        var key = "autoharness seccomp section v3 " + RootOwnedCache.frame(RootOwnedCache.binaryIdentity)
        key += "\nlibseccomp \(v.major).\(v.minor).\(v.micro) arch \(seccomp_arch_native())"
        key += "\nprofile " + RootOwnedCache.frame(spec.profile) + " default \(spec.defaultAction) netlink-route \(spec.netlinkRoute) chroot \(chroot)"
        for (name, list) in [("allow", spec.allow), ("deny", spec.deny), ("quiet", spec.quiet), ("watch-links", spec.watchLinks)] {
            key += "\n" + name + " " + list.map(RootOwnedCache.frame).joined()
        }
        return key
    }

    static func loadSection(key: String, in dir: String? = directory) -> CompiledFilter? {
        guard let body = RootOwnedCache.load(key: key, suffix: ".section", in: dir) else { return nil }
        var r = ByteReader(body)
        func numbers(_ r: inout ByteReader) -> Set<Int32>? {
            guard let n = r.count() else { return nil }
            var out: Set<Int32> = []
            for _ in 0..<n {
                guard let v = r.u32() else { return nil }
                out.insert(Int32(bitPattern: v))
            }
            return out
        }
        guard let bpfCount = r.count(), let bpf = r.bytes(bpfCount), bpf.count % 8 == 0, !bpf.isEmpty,
              let allowed = r.strings(), let denied = r.strings(), let unresolved = r.strings(),
              let eperm = numbers(&r), let enosys = numbers(&r), let emulated = numbers(&r),
              let quiet = r.strings(), let quietNumbers = numbers(&r), let kind = r.u8(), let errno = r.u32(),
              let linkWatched = numbers(&r), let watchLinks = r.strings(), r.atEnd,
              kind <= 1 else { return nil }
        return CompiledFilter(
            bpf: bpf, allowedNames: Set(allowed), denied: denied, unresolved: unresolved, eperm: eperm, enosys: enosys,
            emulated: emulated, quiet: quiet, quietNumbers: quietNumbers,
            defaultAction: kind == 0 ? .errno(Int32(bitPattern: errno)) : .kill, linkWatched: linkWatched, watchLinks: watchLinks)
    }

    static func storeSection(key: String, filter f: CompiledFilter, in dir: String? = directory) {
        var w = ByteWriter()
        func numbers(_ w: inout ByteWriter, _ set: Set<Int32>) {
            w.count(set.count)
            for v in set.sorted() { w.u32(UInt32(bitPattern: v)) }
        }
        w.count(f.bpf.count)
        w.raw(f.bpf)
        w.strings(f.allowedNames.sorted())
        w.strings(f.denied)
        w.strings(f.unresolved)
        numbers(&w, f.eperm)
        numbers(&w, f.enosys)
        numbers(&w, f.emulated)
        w.strings(f.quiet)
        numbers(&w, f.quietNumbers)
        switch f.defaultAction {
        case .errno(let e): w.u8(0); w.u32(UInt32(bitPattern: e))
        case .kill: w.u8(1); w.u32(0)
        }
        numbers(&w, f.linkWatched)
        w.strings(f.watchLinks)
        RootOwnedCache.store(key: key, suffix: ".section", body: w.bytes, in: dir)
    }
}
