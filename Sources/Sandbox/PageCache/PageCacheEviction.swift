import Glibc
import PolicyModel
import SupervisorIO

/// What held-out sandboxes could bring into the page cache, and its removal afterwards.
///
/// Sandboxes share the page cache of every file they can all read (/usr, the runtime, tool
/// directories). A held-out task that reads chosen pages of such a file leaves a pattern a
/// later sandbox could read back by timing its own reads (the direct residency oracles are
/// refused by seccomp: `SyscallProfile.pageCacheOracles`). So while held-out sandboxes run,
/// every read-only bind source of theirs is recorded here, and once the last of them is gone
/// and before anything untrusted runs again, `evict()` drops the cached pages of every
/// regular file under those sources (POSIX_FADV_DONTNEED, from the host).
///
/// The kernel keeps pages that some process has mapped, and dirty pages. Neither carries
/// held-out information: no held-out process is alive when `evict()` runs, the read-only
/// sources cannot be dirtied from a sandbox, and a page mapped by a live process (the
/// supervisor, the frozen coding agent) was mapped, hence resident, before the held-out runs
/// began, since the processes that map it could not fault in new pages meanwhile.
///
/// A supervisor can die with held-out sandboxes running (kill -9, a second ^C): then nothing
/// evicts. So each source is also appended to a journal before the sandbox that reads it
/// starts, and the next supervisor of the experiment evicts what a journal left behind
/// (`evictLeftover`) before it runs anything untrusted.
///
/// Proportional eviction: each held-out sandbox has a memory cgroup, so the pages it brings
/// into the page cache are charged there (pages cached before it ran stay charged where they
/// were). Its cgroup is kept, emptied of processes, until `evict()`, which reclaims what each
/// holds and walks nothing: the page cache is then as it was before the held-out sandboxes
/// ran, for every file, at a cost proportional to what they read. The walk above is the
/// fallback whenever that cannot be shown (the conditions are `evict()`'s), after anything a
/// held-out VM read (`record(sources:)`), and after a supervisor died (its journal).
public final class PageCacheEviction: @unchecked Sendable {
    private let lock = Mutex()
    private var sources: Set<String> = []
    private let journal: String?
    /// Held-out sandboxes recorded, and the memory cgroups handed over after they ended (nil:
    /// a sandbox without one).
    private var sandboxes = 0
    private var charged: [(version: Int, path: String)?] = []
    /// The global reclaim counter when the first held-out sandbox was recorded.
    private var globalReclaimAtStart: UInt64?
    /// Why the walk is needed whatever the cgroups hold.
    private var walkReason: String?

    /// Reads the kernel's count of pages reclaimed outside cgroup limits (`globalReclaim`).
    private let reclaimCounter: @Sendable () -> UInt64?

    /// The most memory untrusted processes can hold at once after the held-out phase (every
    /// sandbox of the experiment at its `limits.memory`); nil: unbounded, or not known.
    private let untrustedMemory: UInt64?

    /// `journal`: a file in the supervisor's private directory (created on first use,
    /// removed by `evict()`). `untrustedMemory`: what later untrusted runs can allocate at
    /// once; without it (nil) the walk is always used. `reclaimCounter`: tests stand in for
    /// the kernel's counter.
    public init(journal: String? = nil, untrustedMemory: UInt64? = nil,
                reclaimCounter: @escaping @Sendable () -> UInt64? = PageCacheEviction.globalReclaim) {
        self.journal = journal
        self.untrustedMemory = untrustedMemory
        self.reclaimCounter = reclaimCounter
    }

    /// Cgroups handed over but never reclaimed (no `evict()`): removed, their pages then
    /// charged to the parent (the journal, left in place, has the next supervisor walk them).
    deinit {
        for case let c? in charged { _ = rmdir(c.path) }
    }

    /// Records the read-only bind sources of a sandbox about to run, in the journal too,
    /// before the sandbox exists. A journal that cannot be written (a full disk) refuses the
    /// sandbox: a held-out run that a crash could leave un-evicted does not start.
    func record(_ plan: LaunchPlan) throws(SandboxError) {
        try journal(plan.mounts.compactMap { m -> String? in
            if case .bind(let source, true, _, _, _, _) = m.kind { return source }
            return nil
        } + (plan.imageFiles.map { [$0] } ?? []))
        lock.withLock {
            if sandboxes == 0 { globalReclaimAtStart = reclaimCounter() }
            sandboxes += 1
        }
    }

    /// A recorded held-out sandbox ended: its memory cgroup (emptied of processes, not yet
    /// removed), or nil if it had none. `evict()` reclaims and removes it.
    func ended(charging cgroup: (version: Int, path: String)?) {
        lock.withLock { charged.append(cgroup) }
    }

    /// Records host paths something held-out will read through the host's page cache (the
    /// held-out VM's read-only shares, which qemu reads on the guest's behalf), in the
    /// journal too, before that starts. Their pages are charged to no sandbox of ours, so
    /// `evict()` walks them.
    public func record(sources ro: [String]) throws(SandboxError) {
        try journal(ro)
        lock.withLock { walkReason = walkReason ?? "a held-out VM read them through qemu" }
    }

    private func journal(_ ro: [String]) throws(SandboxError) {
        var failure: SandboxError?
        lock.withLock {
            let new = ro.filter { !sources.contains($0) }
            if let journal, !new.isEmpty {
                let text = new.map { $0 + "\n" }.joined()
                let fd = open(journal, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0o600)
                let written = fd < 0 ? -1 : text.withCString { Glibc.write(fd, $0, strlen($0)) }
                let e = errno
                if fd >= 0 && close(fd) != 0 && written >= 0 { failure = SandboxError(.io, "page-cache journal \(journal): \(ErrnoName.describe(errno))", errno: errno) }
                if written != text.utf8.count {
                    failure = SandboxError(.io, "page-cache journal \(journal): \(ErrnoName.describe(written < 0 ? e : ENOSPC)); the held-out sandbox was not started", errno: e)
                    return
                }
            }
            sources.formUnion(new)
        }
        if let failure { throw failure }
    }

    /// Evicts what a dead supervisor's journal names, if there is one, and removes it (unless
    /// `keepingJournal`: `HeldOutSettle` removes it once the counters are moved too).
    /// Returns the report, or nil when there was nothing to do.
    public static func evictLeftover(journal: String, keepingJournal: Bool = false) -> Report? {
        let text = SmallFile.contents(of: journal)
        guard access(journal, F_OK) == 0 else { return nil }
        let cache = PageCacheEviction(journal: journal)
        cache.lock.withLock {
            for line in text.split(separator: "\n") where line.hasPrefix("/") { cache.sources.insert(String(line)) }
        }
        return cache.evict(keepingJournal: keepingJournal)
    }

    /// Makes the journal exist (empty if nothing was recorded): the mark that the held-out
    /// phase's clean-up is owed, until `removeJournal`.
    func markOwed() {
        guard let journal else { return }
        let fd = open(journal, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if fd >= 0 { close(fd) }
    }

    /// Removes the journal: the held-out phase's clean-up is done.
    func removeJournal() {
        if let journal { unlink(journal) }
    }

    /// The recorded sources, outermost only (a source inside another is walked with it).
    public var recordedSources: [String] {
        let all = lock.withLock { sources }.sorted()
        var out: [String] = []
        for s in all where !out.contains(where: { s == $0 || s.hasPrefix($0 == "/" ? "/" : $0 + "/") }) {
            out.append(s)
        }
        return out
    }

    public struct Report: Sendable, CustomStringConvertible {
        public var files = 0
        public var bytes: UInt64 = 0
        public var seconds = 0.0
        /// Paths that could not be opened or advised, with the errno name (at most 20).
        public var failures: [String] = []
        /// Proportional: the held-out sandboxes whose charged pages were reclaimed (nothing
        /// was walked). Nil: the sources were walked.
        public var reclaimedSandboxes: Int?
        /// Why the sources were walked although held-out sandboxes were accounted.
        public var walked: String?
        /// After a walk: "" when the host's dentry and inode caches were dropped, else why not;
        /// nil when they were not to be.
        public var namesDropped: String?
        public var description: String {
            let hundredths = Int((seconds * 100).rounded())
            let time = "\(hundredths / 100).\(hundredths % 100 < 10 ? "0" : "")\(hundredths % 100)"
            if let n = reclaimedSandboxes {
                return "dropped \(bytes >> 10) KiB charged to \(n) held-out sandbox(es) from the page cache in \(time) s "
                    + "(reclaimed from their memory cgroups, nothing else reclaimed meanwhile)"
            }
            return "dropped \(files) files (\(bytes >> 20) MiB) from the page cache in \(time) s"
                + (walked.map { " (every file under their sources: \($0))" } ?? "")
                + (namesDropped.map { $0.isEmpty ? ", and the host's dentry and inode caches" : "; the host's dentry cache NOT dropped: \($0)" } ?? "")
                + (failures.isEmpty ? "" : "; could not: \(failures.joined(separator: ", "))")
        }
    }

    /// Takes out of the page cache what the held-out sandboxes brought in: by reclaiming
    /// their memory cgroups where that provably suffices, else by dropping the cached pages
    /// of every regular file under the recorded sources (see the type's comment). Then
    /// forgets them and removes the cgroups.
    public func evict(keepingJournal: Bool = false) -> Report {
        let start = monotonicNow()
        // Finished sandboxes' mount namespaces may still be held (`NamespaceRelease`); their
        // tmpfs pages, charged to the same cgroups, would read as left after the reclaim.
        NamespaceRelease.releaseNow()
        let (count, cgroups, reclaimAtStart, reason) = lock.withLock { (sandboxes, charged, globalReclaimAtStart, walkReason) }
        var why = reason
        if why == nil, cgroups.count != count { why = "\(count - cgroups.count) held-out sandbox(es) were not handed over" }
        if why == nil, cgroups.contains(where: { $0 == nil }) { why = "a held-out sandbox had no memory cgroup" }
        // Reclaim across the whole host after this reads back which cached pages the held-out
        // runs touched (their LRU order, which the reclaim keeps and the walk erases): untrusted
        // runs must not be able to cause it, with free memory to spare.
        if why == nil { why = Self.notEnoughFree(for: untrustedMemory) }
        // A limit above the sandboxes makes the kernel reclaim every cgroup below it, other
        // files' pages too, in an order their use sets, and it is counted nowhere global: a
        // pattern a later run could read. Only the walk leaves none.
        if why == nil, let c = cgroups.first ?? nil, let limited = SandboxCgroup.limitedAncestor(of: c.path, version: c.version) {
            why = "a memory limit above the sandboxes (\(limited)) reclaims other cgroups' pages too"
        }
        var reclaimed: UInt64 = 0
        for case let c? in cgroups {
            let r = SandboxCgroup.reclaimFilePages(c.path, version: c.version)
            reclaimed += r.bytes
            if why == nil, let failure = r.failure { why = failure }
            _ = rmdir(c.path)
        }
        // Read after the reclaims (theirs are aimed at cgroups: not counted there).
        let reclaimNow = reclaimCounter()
        if why == nil, reclaimAtStart == nil || reclaimNow == nil { why = "/proc/vmstat has no reclaim counters" }
        if why == nil, reclaimAtStart != reclaimNow {
            why = "the kernel reclaimed pages outside the sandboxes' own limits, or collapsed pages into huge pages, meanwhile (so other files' pages may have gone)"
        }
        var report = Report()
        if count > 0 && why == nil {
            report.reclaimedSandboxes = count
            report.bytes = reclaimed
        } else {
            report.walked = count > 0 ? why : nil
            walk(&report)
            // The names they looked up stay cached too, as dentries, the absent ones included
            // (a negative dentry makes the next lookup of that name faster: a later run can time
            // which names a held-out run tried, one bit per name). Only the reclaim frees them
            // per cgroup; after the walk they are dropped host-wide, with the inodes.
            if !recordedSources.isEmpty { report.namesDropped = Self.dropNameCaches() }
        }
        lock.withLock {
            sources = []
            sandboxes = 0
            charged = []
            globalReclaimAtStart = nil
            walkReason = nil
        }
        // Only now: a supervisor that dies meanwhile leaves the journal for the next.
        if !keepingJournal { removeJournal() }
        report.seconds = monotonicNow() - start
        return report
    }

    /// Drops every unused dentry and inode on the host (`vm.drop_caches` = 2): "" or why not.
    static func dropNameCaches() -> String {
        let e = CgroupHost.writeErrno("/proc/sys/vm/drop_caches", "2")
        return e == 0 ? "" : "/proc/sys/vm/drop_caches: \(ErrnoName.describe(e))"
    }

    /// Why untrusted runs holding `untrusted` bytes could push this host into reclaim across all
    /// its cgroups, or nil if they cannot: free memory (not counting the page cache) must hold
    /// it with a twentieth of the host's memory to spare (the kernel's watermarks are below that).
    static func notEnoughFree(for untrusted: UInt64?) -> String? {
        guard let untrusted else { return "the memory later untrusted runs can hold is not bounded (a policy without limits.memory)" }
        guard let free = hostMemory("MemFree"), let total = hostMemory("MemTotal") else { return "/proc/meminfo cannot be read" }
        guard free >= untrusted + total / 20 else {
            return "free memory (\(free >> 20) MiB) cannot hold what untrusted runs may allocate (\(untrusted >> 20) MiB) without reclaim across the host"
        }
        return nil
    }

    /// Pages the kernel reclaimed outside any cgroup's own limit since boot (kswapd, direct
    /// reclaim under global pressure, khugepaged, system-wide proactive reclaim), plus huge
    /// pages made by collapsing small ones (khugepaged, MADV_COLLAPSE: one made from a file's
    /// pages, some cached before, would be charged, and reclaimed, whole). Reclaim aimed at a
    /// cgroup (its limit, `memory.force_empty`, `memory.high`) is not counted.
    public static func globalReclaim() -> UInt64? { globalReclaim(in: SmallFile.contents(of: "/proc/vmstat")) }

    /// `globalReclaim()` from the text of /proc/vmstat.
    static func globalReclaim(in vmstat: String) -> UInt64? {
        var total: UInt64 = 0, found = false
        for line in vmstat.split(separator: "\n") {
            let parts = line.split(separator: " ")
            guard parts.count == 2, (parts[0].hasPrefix("pgsteal_") && parts[0] != "pgsteal_anon" && parts[0] != "pgsteal_file")
                    || parts[0] == "thp_collapse_alloc",
                  let n = UInt64(parts[1]) else { continue }
            total &+= n
            found = true
        }
        return found ? total : nil
    }

    /// Drops the cached pages of every regular file under the recorded sources. Never follows
    /// a symbolic link (inside a sandbox a link resolves within its own root, to a path that
    /// is a source of its own if it is readable at all).
    private func walk(_ report: inout Report) {
        var seenDirectories: Set<DeviceInode> = []
        for source in recordedSources {
            let fd = open(source, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else {
                if errno != ENOENT && errno != ELOOP { Self.note(&report, source, errno) }
                continue
            }
            Self.drop(fd: fd, path: { source }, depth: 0, report: &report, seen: &seenDirectories)
        }
    }

    /// Takes ownership of `fd`. `path` is made only when a failure is noted: the walk
    /// visits every file under the sources (122 544 under this host's /usr), and building
    /// each one's path cost more than the three system calls that evict it.
    private static func drop(fd: Int32, path: () -> String, depth: Int, report: inout Report, seen: inout Set<DeviceInode>) {
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            close(fd)
            return
        }
        switch st.st_mode & S_IFMT {
        case S_IFREG:
            let rc = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)
            close(fd)
            if rc == 0 {
                report.files += 1
                report.bytes += UInt64(st.st_size)
            } else {
                note(&report, path(), rc)
            }
        case S_IFDIR:
            // A bind mount can place a directory inside itself: each (device, inode) once.
            guard depth < 128, seen.insert(DeviceInode(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))).inserted,
                  let dir = fdopendir(fd) else {
                close(fd)
                return
            }
            defer { closedir(dir) }
            let dfd = dirfd(dir)
            while let e = readdir(dir) {
                let name = DirectoryEntry.namePointer(e)
                // "." and ".."
                if name[0] == 0x2E && (name[1] == 0 || (name[1] == 0x2E && name[2] == 0)) { continue }
                let type = DirectoryEntry.type(e)
                guard type == UInt8(DT_REG) || type == UInt8(DT_DIR) || type == UInt8(DT_UNKNOWN) else { continue }
                let child = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | noAccessTime)
                // Made only if needed, and before the next readdir reuses the name's buffer.
                func childPath() -> String { path() + "/" + String(cString: name) }
                guard child >= 0 else {
                    if errno != ELOOP && errno != ENOENT { note(&report, childPath(), errno) }
                    continue
                }
                drop(fd: child, path: childPath, depth: depth + 1, report: &report, seen: &seen)
            }
        default:
            close(fd)
        }
    }

    struct DeviceInode: Hashable {
        var device: UInt64
        var inode: UInt64
    }

    /// O_NOATIME (hidden by the Glibc module): reading for eviction must not touch atimes.
    private static let noAccessTime: Int32 = 0o1000000

    private static func note(_ report: inout Report, _ path: String, _ err: Int32) {
        if report.failures.count < 20 { report.failures.append("\(path) (\(String(cString: strerror(err))))") }
    }
}
