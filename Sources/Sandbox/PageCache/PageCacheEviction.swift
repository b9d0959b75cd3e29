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
public final class PageCacheEviction: @unchecked Sendable {
    private let lock = Mutex()
    private var sources: Set<String> = []
    private let journal: String?

    /// `journal`: a file in the supervisor's private directory (created on first use,
    /// removed by `evict()`).
    public init(journal: String? = nil) {
        self.journal = journal
    }

    /// Records the read-only bind sources of a sandbox about to run, in the journal too,
    /// before the sandbox exists. A journal that cannot be written (a full disk) refuses the
    /// sandbox: a held-out run that a crash could leave un-evicted does not start.
    func record(_ plan: LaunchPlan) throws(SandboxError) {
        try record(sources: plan.mounts.compactMap { m -> String? in
            if case .bind(let source, true, _, _, _, _) = m.kind { return source }
            return nil
        })
    }

    /// Records host paths something held-out will read through the host's page cache (the
    /// held-out VM's read-only shares, which qemu reads on the guest's behalf), in the
    /// journal too, before that starts.
    public func record(sources ro: [String]) throws(SandboxError) {
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

    /// Evicts what a dead supervisor's journal names, if there is one, and removes it.
    /// Returns the report, or nil when there was nothing to do.
    public static func evictLeftover(journal: String) -> Report? {
        let text = SmallFile.contents(of: journal)
        guard access(journal, F_OK) == 0 else { return nil }
        let cache = PageCacheEviction(journal: journal)
        cache.lock.withLock {
            for line in text.split(separator: "\n") where line.hasPrefix("/") { cache.sources.insert(String(line)) }
        }
        return cache.evict()
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
        public var description: String {
            let hundredths = Int((seconds * 100).rounded())
            let time = "\(hundredths / 100).\(hundredths % 100 < 10 ? "0" : "")\(hundredths % 100)"
            return "dropped \(files) files (\(bytes >> 20) MiB) from the page cache in \(time) s"
                + (failures.isEmpty ? "" : "; could not: \(failures.joined(separator: ", "))")
        }
    }

    /// Drops the cached pages of every regular file under the recorded sources, then
    /// forgets them. Never follows a symbolic link (inside a sandbox a link resolves within
    /// its own root, to a path that is a source of its own if it is readable at all).
    public func evict() -> Report {
        let start = monotonicNow()
        var report = Report()
        var seenDirectories: Set<DeviceInode> = []
        for source in recordedSources {
            let fd = open(source, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
            guard fd >= 0 else {
                if errno != ENOENT && errno != ELOOP { Self.note(&report, source, errno) }
                continue
            }
            Self.drop(fd: fd, path: { source }, depth: 0, report: &report, seen: &seenDirectories)
        }
        lock.withLock { sources = [] }
        // Only now: a supervisor that dies during the walk leaves the journal for the next.
        if let journal { unlink(journal) }
        report.seconds = monotonicNow() - start
        return report
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
