import CSystemCalls
import Glibc
import PolicyModel
import SupervisorIO

/// How one requested limit is enforced (for the start-up log and `policy show`).
public struct LimitEnforcement: Sendable, Equatable, CustomStringConvertible {
    public var limit: String
    public var value: String
    /// e.g. "cgroup v1 memory (/sys/fs/cgroup/memory/…/autoharness-sbx-…)", "rlimit", or
    /// "NOT ENFORCED: …".
    public var mechanism: String
    public var description: String { "\(limit)=\(value) via \(mechanism)" }
}

/// The per-sandbox cgroup(s): created inside the supervisor's own cgroup before launch,
/// removed after the sandbox is gone.
///
/// Directory names carry the creating supervisor (`autoharness-sbx-ID.oPID-STARTTIME`), so
/// a later supervisor can tell a sandbox whose supervisor died (kill -9 mid-gate leaves it
/// frozen) from a live sibling's, and end it: see `sweepOrphans`.
final class SandboxCgroup {
    private(set) var directories: [(controller: String, version: Int, path: String)] = []
    private(set) var enforcement: [LimitEnforcement] = []
    /// The directory whose freezer holds the whole sandbox, if it was made freezable.
    private(set) var freezer: (version: Int, path: String)?

    /// Creates the cgroups for `limits`. A requested limit no controller can enforce is an
    /// error unless `allowUnenforced`, in which case it is listed as NOT ENFORCED. With
    /// `freezable`, the sandbox also gets a freezer cgroup (v2 `cgroup.freeze` where the
    /// unified hierarchy is mounted, else the v1 freezer); `freezer` stays nil if the host
    /// has neither.
    /// With `accountPages` (a held-out sandbox), the sandbox gets a memory cgroup even
    /// without a memory limit: the page cache it brings in is charged there, and reclaimed
    /// from there once the held-out sandboxes are gone (`PageCacheEviction`).
    init(id: String, limits: Limits, host: CgroupHost = .current, allowUnenforced: Bool,
         freezable: Bool = false, accountPages: Bool = false) throws(SandboxError) {
        let name = "autoharness-\(id).\(Self.ownerTag)"
        let wanted = CgroupHost.requested(limits)
        var placed = host.plan(for: limits)
        if accountPages && !placed.contains(where: { $0.controller == "memory" }) {
            var memoryOnly = Limits()
            memoryOnly.memory = 0
            placed += host.plan(for: memoryOnly)
        }
        if freezable, let f = host.freezerParent() { placed.append(("freezer", f.version, f.parent)) }
        Self.sweepOrphans(host)
        for c in wanted where !placed.contains(where: { $0.controller == c }) {
            let msg = host.unusable(c)
            if !allowUnenforced {
                throw SandboxError(.cgroup, "limits.\(Self.key(c)) cannot be enforced: \(msg)")
            }
            enforcement.append(.init(limit: Self.key(c), value: Self.value(c, limits), mechanism: "NOT ENFORCED: \(msg)"))
        }
        do throws(SandboxError) {
            var made: Set<String> = []
            for p in placed {
                let dir = p.parent + "/" + name
                if !made.contains(dir) {
                    if mkdir(dir, 0o755) != 0 && errno != EEXIST {
                        throw SandboxError(.cgroup, "mkdir \(dir): \(String(cString: strerror(errno)))", errno: errno)
                    }
                    made.insert(dir)
                }
                directories.append((p.controller, p.version, dir))
                if p.controller == "freezer" {
                    // v2's freezer is a core file of every non-root cgroup since 5.2.
                    if p.version == 1 || access(dir + "/cgroup.freeze", F_OK) == 0 { freezer = (p.version, dir) }
                    continue
                }
                // A memory cgroup made only to account pages has no limit to apply.
                if p.controller == "memory" && limits.memory == nil { continue }
                try Self.apply(controller: p.controller, version: p.version, dir: dir, limits: limits)
                enforcement.append(.init(limit: Self.key(p.controller), value: Self.value(p.controller, limits),
                                         mechanism: "cgroup v\(p.version) \(p.controller) (\(dir))"))
            }
        } catch {
            remove()
            throw error
        }
    }

    static func key(_ c: String) -> String { c == "cpu" ? "cpus" : c }

    static func value(_ c: String, _ l: Limits) -> String {
        switch c {
        case "memory": return l.memory.map(ByteSize.format) ?? "-"
        case "pids": return l.pids.map { String($0) } ?? "-"
        default: return l.cpus.map { String($0) } ?? "-"
        }
    }

    private static func apply(controller: String, version: Int, dir: String, limits: Limits) throws(SandboxError) {
        switch (controller, version) {
        case ("memory", 1):
            try write(dir + "/memory.limit_in_bytes", "\(limits.memory!)")
            // Without a swap limit a hog could page out instead of being stopped.
            if hasMemsw(dir) {
                try write(dir + "/memory.memsw.limit_in_bytes", "\(limits.memory!)")
            }
        case ("memory", _):
            try write(dir + "/memory.max", "\(limits.memory!)")
            if access(dir + "/memory.swap.max", F_OK) == 0 { try write(dir + "/memory.swap.max", "0") }
        case ("pids", _):
            try write(dir + "/pids.max", "\(limits.pids!)")
        case ("cpu", 1):
            let period = 100_000
            try write(dir + "/cpu.cfs_period_us", "\(period)")
            try write(dir + "/cpu.cfs_quota_us", "\(max(1000, Int(limits.cpus! * Double(period))))")
        case ("cpu", _):
            let period = 100_000
            try write(dir + "/cpu.max", "\(max(1000, Int(limits.cpus! * Double(period)))) \(period)")
        default:
            break
        }
    }

    /// Whether v1 memory cgroups have `memory.memsw.*` (swap accounting, decided when the
    /// kernel boots): looked up in the first one made, then known.
    private static func hasMemsw(_ dir: String) -> Bool {
        memsw.withLock {
            if let known = memsw.value { return known }
            let found = access(dir + "/memory.memsw.limit_in_bytes", F_OK) == 0
            memsw.value = found
            return found
        }
    }
    private static let memsw = Locked<Bool?>(nil)

    /// The files the monitor writes "0" into to join its cgroups by itself, before it forks
    /// anything: v1 `tasks` (one thread: the monitor is single-threaded), v2 `cgroup.procs`.
    var selfJoinFiles: [String] {
        var seen: Set<String> = []
        return directories.filter { seen.insert($0.path).inserted }
            .map { $0.path + ($0.version == 1 ? "/tasks" : "/cgroup.procs") }
    }

    /// The v2 directory a monitor can be created in by clone3(CLONE_INTO_CGROUP), and which
    /// `selfJoinFiles` entry that makes unnecessary. v1 hierarchies are always joined by write.
    var cloneTarget: (directory: String, joinIndex: Int)? {
        guard let d = directories.first(where: { $0.version == 2 }),
              let i = selfJoinFiles.firstIndex(of: d.path + "/cgroup.procs") else { return nil }
        return (d.path, i)
    }

    /// True when the memory controller OOM-killed something in this sandbox.
    func memoryLimitHit() -> Bool {
        for d in directories where d.controller == "memory" {
            let text = readText(d.path + (d.version == 1 ? "/memory.oom_control" : "/memory.events"))
            if let v = Self.field(text, "oom_kill"), v > 0 { return true }
            // memory.failcnt is read only when the cgroup says it is under OOM.
            if d.version == 1, Self.field(text, "under_oom") == 1,
               let v = Int(Self.trimmed(readText(d.path + "/memory.failcnt"))), v > 0 { return true }
        }
        return false
    }

    /// True when a fork or clone in this sandbox failed because of the pids limit.
    func pidsLimitHit() -> Bool {
        for d in directories where d.controller == "pids" {
            if let v = Self.field(readText(d.path + "/pids.events"), "max"), v > 0 { return true }
        }
        return false
    }

    /// Freezes every task of the sandbox (every thread of every process, the monitor too)
    /// and returns once the kernel reports the whole cgroup frozen. Signals cannot undo it.
    func freeze(within seconds: Double = 2) throws(SandboxError) {
        guard let f = freezer else {
            throw SandboxError(.cgroup, "the sandbox has no cgroup freezer (neither cgroup v2 nor the v1 freezer is available)")
        }
        let deadline = monotonicNow() + seconds
        var attempt = 0
        while true {
            // v1 may stay FREEZING while a task is busy in the kernel; writing FROZEN again
            // retries the tasks that have not stopped yet.
            if attempt % 20 == 0 { try Self.write(f.path + (f.version == 2 ? "/cgroup.freeze" : "/freezer.state"), f.version == 2 ? "1" : "FROZEN") }
            if isFrozen { return }
            if monotonicNow() > deadline { break }
            attempt += 1
            usleep(500)
        }
        thaw()
        throw SandboxError(.cgroup, "the sandbox's cgroup \(f.path) did not report frozen within \(seconds)s")
    }

    /// What the kernel says right now: v2 `frozen 1` in cgroup.events, v1 `FROZEN`.
    var isFrozen: Bool {
        guard let f = freezer else { return false }
        if f.version == 2 { return Self.field(readText(f.path + "/cgroup.events"), "frozen") == 1 }
        return Self.trimmed(readText(f.path + "/freezer.state")) == "FROZEN"
    }

    func thaw() {
        guard let f = freezer else { return }
        _ = CgroupHost.writeErrno(f.path + (f.version == 2 ? "/cgroup.freeze" : "/freezer.state"), f.version == 2 ? "0" : "THAWED")
    }

    /// Kills every process of the sandbox, frozen or not, without letting a frozen one run
    /// a single instruction first: SIGKILL is queued while frozen and acted on as a thawed
    /// task returns to user space (v1); v2 kills frozen tasks outright.
    func killAll() {
        for d in directories where d.version == 2 { _ = CgroupHost.writeErrno(d.path + "/cgroup.kill", "1") }
        killListed()
        thaw()
    }

    /// SIGKILL to every process listed in the sandbox's cgroups, through a pidfd taken before
    /// the listing is read again: a pid that was listed, exited and was reused by some other
    /// process on the host in between is never signalled. Every one is stopped (SIGSTOP)
    /// before any is killed: killed one by one, a process could run between another's death
    /// and its own and act on it (a coding agent whose `autoharness gate` client died first
    /// went on and wrote, under load, after pids had wrapped and the client's was the lower).
    func killListed() {
        let fds = remainingProcesses().map { (pid: $0, fd: ahs_pidfd_open($0)) }.filter { $0.fd >= 0 }
        let listed = Set(remainingProcesses())
        let targets = fds.filter { listed.contains($0.pid) }
        for t in targets { _ = ahs_pidfd_kill(t.fd, SIGSTOP) }
        for t in targets { _ = ahs_pidfd_kill(t.fd, SIGKILL) }
        for f in fds { close(f.fd) }
    }

    /// Processes still inside (there should be none once init has exited).
    func remainingProcesses() -> [pid_t] {
        var pids: Set<pid_t> = []
        for d in directories { pids.formUnion(Self.processes(in: d.path)) }
        return pids.sorted()
    }

    /// Pids in `dir`, as this pid namespace sees them. A process outside our pid namespace
    /// is listed as 0, which must never reach kill(2) (0 is our own process group).
    static func processes(in dir: String) -> [pid_t] {
        readText(dir + "/cgroup.procs").split(separator: "\n").compactMap { pid_t($0) }.filter { $0 > 0 }
    }

    /// The memory cgroup's directory, if the sandbox has one.
    var memoryDirectory: (version: Int, path: String)? {
        directories.first { $0.controller == "memory" }.map { ($0.version, $0.path) }
    }

    /// Removes the cgroups. Every process in them descends from this sandbox's monitor; any
    /// straggler is killed by pid before the directory is removed. Returns what could not be
    /// removed. `keeping`: a directory left in place, emptied of processes (the memory
    /// cgroup whose charged pages are reclaimed later; on v2 it is the sandbox's one directory).
    @discardableResult
    func remove(keeping: String? = nil) -> [String] {
        var failed: [String] = []
        var seen: Set<String> = []
        if let keeping {
            seen.insert(keeping)
            if !Self.emptied(keeping, version: directories.first { $0.path == keeping }?.version ?? 1, killing: killListed, thawing: thaw) {
                failed.append(keeping)
            }
        }
        for d in directories.reversed() where seen.insert(d.path).inserted {
            // v2 (5.14+): one write kills every process in the cgroup, including any forked
            // after we listed them. The pid loop below stays for v1 and older kernels.
            if d.version == 2, !Self.processes(in: d.path).isEmpty {
                _ = CgroupHost.writeErrno(d.path + "/cgroup.kill", "1")
            }
            var ok = false
            for attempt in 0..<50 {
                if rmdir(d.path) == 0 || errno == ENOENT { ok = true; break }
                killListed()
                // A v1-frozen task acts on SIGKILL only once thawed.
                if attempt == 0 { thaw() }
                usleep(useconds_t(attempt < 10 ? 1000 : 10_000))
            }
            if !ok { failed.append(d.path) }
        }
        directories.removeAll()
        freezer = nil
        return failed
    }

    /// `remove()`, but a held-out sandbox's memory cgroup is kept, emptied, and handed to
    /// `cache`, which reclaims the page cache charged to it and removes it (`evict()`).
    @discardableResult
    func removeHandingOver(to cache: PageCacheEviction?) -> [String] {
        guard let cache else { return remove() }
        let memory = memoryDirectory
        let failed = remove(keeping: memory?.path)
        // A cgroup with a process left in it cannot be shown to hold only what it charged.
        cache.ended(charging: memory.flatMap { failed.contains($0.path) ? nil : $0 })
        return failed
    }

    /// Waits until `dir` holds no process, killing stragglers by pid (every process there
    /// descends from the sandbox's monitor); false if some remain after about half a second.
    static func emptied(_ dir: String, version: Int, killing: () -> Void, thawing: () -> Void) -> Bool {
        if version == 2, !processes(in: dir).isEmpty { _ = CgroupHost.writeErrno(dir + "/cgroup.kill", "1") }
        for attempt in 0..<50 {
            if processes(in: dir).isEmpty { return true }
            killing()
            if attempt == 0 { thawing() }
            usleep(useconds_t(attempt < 10 ? 1000 : 10_000))
        }
        return processes(in: dir).isEmpty
    }

    /// The file pages (page cache, not tmpfs) charged to the memory cgroup at `dir`, in bytes,
    /// as its `memory.stat` says; nil when that cannot be read. The kernel folds its per-CPU
    /// counts into these figures in batches (at the latest every 2 s), so a recent change
    /// can be missing from them: a figure for the log, never a proof.
    static func chargedFilePages(_ dir: String) -> UInt64? {
        let stat = readText(dir + "/memory.stat")
        // v1 names all file-backed pages `cache`, v2 `file`; both count tmpfs pages in them
        // too, which `shmem` counts alone (tmpfs pages are the sandbox's own, freed with it).
        guard let all = field(stat, "cache") ?? field(stat, "file"), let shmem = field(stat, "shmem") else { return nil }
        return UInt64(max(0, all - shmem))
    }

    /// Reclaims what the empty memory cgroup at `dir` holds: v1 `memory.force_empty`; v2
    /// `memory.reclaim` where the kernel has it (5.19), then `memory.high` set to 0 (the writer
    /// reclaims down to it before the write returns, on every v2 kernel). Each reclaims until
    /// nothing is charged or nothing more can be; neither reports what it could not take, so
    /// what stays charged is read back (`leftCharged`). Returns the file pages it held
    /// (`chargedFilePages`) and why the reclaim is not shown complete (nil: it is).
    static func reclaimFilePages(_ dir: String, version: Int) -> (bytes: UInt64, failure: String?) {
        guard let before = chargedFilePages(dir) else { return (0, "\(dir)/memory.stat cannot be read") }
        var failure: String?
        for attempt in 0..<4 {
            if version == 1 {
                let e = CgroupHost.writeErrno(dir + "/memory.force_empty", "0")
                if e != 0 { return (before, "\(dir)/memory.force_empty: \(String(cString: strerror(e)))") }
            } else {
                // memory.reclaim drains the CPUs' page batches on its way; EAGAIN: less than
                // asked could be reclaimed (tmpfs, kernel memory), as expected.
                if access(dir + "/memory.reclaim", F_OK) == 0 {
                    let e = CgroupHost.writeErrno(dir + "/memory.reclaim", "1G")
                    if e != 0 && e != EAGAIN { return (before, "\(dir)/memory.reclaim: \(String(cString: strerror(e)))") }
                }
                // The cgroup is removed right after: this limit never applies to anything.
                let e = CgroupHost.writeErrno(dir + "/memory.high", "0")
                if e != 0 { return (before, "\(dir)/memory.high: \(String(cString: strerror(e)))") }
            }
            failure = leftCharged(dir, version: version)
            if failure == nil { break }
            usleep(useconds_t(1000 << attempt))
        }
        return (before, failure)
    }

    /// What is still charged to the emptied memory cgroup at `dir` besides kernel memory, or
    /// nil if nothing is. v1: `memory.usage_in_bytes` less `memory.kmem.usage_in_bytes`, both
    /// exact page counters. v2 has no exact counter without kernel memory in it: `memory.stat`'s
    /// file pages (less tmpfs'), which the kernel brings up to date at least every 2 s.
    static func leftCharged(_ dir: String, version: Int) -> String? {
        if version == 1 {
            guard let usage = UInt64(trimmed(readText(dir + "/memory.usage_in_bytes"))) else { return "\(dir)/memory.usage_in_bytes cannot be read" }
            let kernel = UInt64(trimmed(readText(dir + "/memory.kmem.usage_in_bytes"))) ?? 0
            return usage > kernel ? "\((usage - kernel) >> 10) KiB stayed charged to \(dir) after its reclaim" : nil
        }
        guard let file = chargedFilePages(dir) else { return "\(dir)/memory.stat cannot be read" }
        return file > 0 ? "\(file >> 10) KiB of page cache stayed charged to \(dir) after its reclaim" : nil
    }

    /// The first cgroup from `dir`'s parent up to its hierarchy's root with a memory limit, and
    /// the limit, or nil if none has one. Reclaim a limit forces on a cgroup takes pages of
    /// every cgroup below it, and is not counted where global reclaim is (/proc/vmstat).
    static func limitedAncestor(of dir: String, version: Int) -> String? {
        var path = String(dir[..<(dir.lastIndex(of: "/") ?? dir.endIndex)])
        let unlimited: UInt64 = 1 << 62
        while path.count > 1 {
            if version == 1 {
                guard access(path + "/memory.limit_in_bytes", F_OK) == 0 else { return nil }
                for name in ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"] {
                    if let v = UInt64(trimmed(readText(path + "/" + name))), v < unlimited { return "\(path)/\(name) is \(v)" }
                }
            } else {
                guard access(path + "/cgroup.controllers", F_OK) == 0 else { return nil }
                for name in ["memory.max", "memory.high"] {
                    let v = trimmed(readText(path + "/" + name))
                    if !v.isEmpty && v != "max" { return "\(path)/\(name) is \(v)" }
                }
            }
            path = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
        }
        return nil
    }

    /// `oPID-STARTTIME-PIDNS` of this process (`ProcessIdentity.tag`): names every sandbox
    /// cgroup it creates. The pid namespace matters: a supervisor in another one (a container
    /// sharing the cgroup tree) cannot check a pid of ours, so it must leave our sandboxes alone.
    static let ownerTag = ProcessIdentity.current.tag

    /// What the last sweep ended (for the caller's log), once per process.
    static let sweepReport = Locked<[String]>([])

    /// Runs the sweep now (once per process) and returns what it ended: for a supervisor's
    /// start-up, so a dead supervisor's frozen sandboxes end even if no sandbox is launched.
    static func sweepNow(_ host: CgroupHost) -> [String] {
        sweepOrphans(host)
        return sweepReport.withLock {
            defer { sweepReport.value = [] }
            return sweepReport.value
        }
    }

    /// Ends and removes sandbox cgroups whose supervisor is gone: a supervisor killed while
    /// a sandbox was frozen leaves it frozen (and its monitor with it) until someone thaws
    /// it. Their processes were started by that supervisor; they are killed before the thaw
    /// can let them run. Legacy names without an owner are removed only when empty and over
    /// a minute old. Runs once per process, before its first sandbox cgroup is made.
    static func sweepOrphans(_ host: CgroupHost) {
        guard swept.withLock({ let first = !swept.value; swept.value = true; return first }) else { return }
        var parents: [(version: Int, path: String)] = []
        if let v2 = host.v2 { parents.append((2, v2.ownDirectory)) }
        for c in ["memory", "pids", "cpu", "freezer"] { if let h = host.v1[c] { parents.append((1, h.ownDirectory)) } }
        var groups: [String: [(version: Int, path: String)]] = [:]
        var seen: Set<String> = []
        for p in parents where seen.insert(p.path).inserted {
            for name in directoryEntries(p.path) where name.hasPrefix("autoharness-sbx-") {
                groups[name, default: []].append((p.version, p.path + "/" + name))
            }
        }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        for (name, dirs) in groups.sorted(by: { $0.key < $1.key }) {
            guard let owner = ownerAlive(name) else {
                // Legacy name: only an empty, old directory is certainly nobody's.
                for d in dirs {
                    var st = stat()
                    if stat(d.path, &st) == 0, now.tv_sec - st.st_mtim.tv_sec > 60, processes(in: d.path).isEmpty { rmdir(d.path) }
                }
                continue
            }
            if owner { continue }
            let orphan = SandboxCgroup(orphan: dirs)
            let victims = orphan.remainingProcesses()
            orphan.killAll()
            let left = orphan.remove()
            sweepReport.withLock {
                sweepReport.value.append("ended sandbox cgroup \(name) left by a supervisor that is gone (\(victims.count) process\(victims.count == 1 ? "" : "es") killed\(left.isEmpty ? "" : "; could not remove \(left.joined(separator: ", "))"))")
            }
        }
    }

    /// nil for a name without an owner tag; else whether that supervisor still runs.
    static func ownerAlive(_ name: String) -> Bool? {
        guard let dot = name.lastIndex(of: "."), let owner = ProcessIdentity(tag: name[name.index(after: dot)...]) else { return nil }
        return owner.isAlive
    }

    /// An existing sandbox's directories, to end it.
    private init(orphan dirs: [(version: Int, path: String)]) {
        for d in dirs {
            let isFreezer = d.version == 2 ? access(d.path + "/cgroup.freeze", F_OK) == 0 : access(d.path + "/freezer.state", F_OK) == 0
            directories.append((isFreezer ? "freezer" : "", d.version, d.path))
            if isFreezer && (freezer == nil || d.version == 1) { freezer = (d.version, d.path) }
        }
    }

    static func directoryEntries(_ path: String) -> [String] {
        guard let d = opendir(path) else { return [] }
        defer { closedir(d) }
        var out: [String] = []
        while let e = readdir(d) {
            out.append(DirectoryEntry.name(e))
        }
        return out
    }

    private static let swept = Locked<Bool>(false)

    /// A one-value cgroupfs file's text without its surrounding whitespace (no Foundation:
    /// this runs for every sandbox).
    static func trimmed(_ text: String) -> Substring {
        let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\n" || $0 == "\t" }
        guard let first = text.firstIndex(where: { !isSpace($0) }), let last = text.lastIndex(where: { !isSpace($0) }) else { return "" }
        return text[first...last]
    }

    /// The value of the line `KEY N` in a cgroup file (`memory.events`, `pids.events`,
    /// `memory.stat`), or nil. Read as bytes: every launch reads two such files on its way out,
    /// and splitting them into Swift strings cost more than reading them.
    static func field(_ text: String, _ key: String) -> Int? {
        var text = text
        return text.withUTF8 { bytes -> Int? in
            let k = Array(key.utf8)
            var i = 0
            while i < bytes.count {
                var end = i
                while end < bytes.count && bytes[end] != UInt8(ascii: "\n") { end += 1 }
                // KEY, one space, then digits to the line's end.
                if end - i > k.count + 1, bytes[i + k.count] == UInt8(ascii: " "), k.indices.allSatisfy({ bytes[i + $0] == k[$0] }) {
                    var value = 0
                    var j = i + k.count + 1
                    guard j < end else { return nil }
                    while j < end {
                        let d = bytes[j]
                        guard d >= UInt8(ascii: "0"), d <= UInt8(ascii: "9") else { return nil }
                        let (m, o1) = value.multipliedReportingOverflow(by: 10)
                        let (a, o2) = m.addingReportingOverflow(Int(d - UInt8(ascii: "0")))
                        guard !o1, !o2 else { return nil }
                        value = a
                        j += 1
                    }
                    return value
                }
                i = end + 1
            }
            return nil
        }
    }

    static func write(_ path: String, _ value: String) throws(SandboxError) {
        let fd = open(path, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { throw SandboxError(.cgroup, "open \(path): \(String(cString: strerror(errno)))", errno: errno) }
        defer { close(fd) }
        let n = value.withCString { Glibc.write(fd, $0, strlen($0)) }
        guard n >= 0 else { throw SandboxError(.cgroup, "write \(value) to \(path): \(String(cString: strerror(errno)))", errno: errno) }
    }
}

/// Reads a small text file (procfs, cgroupfs); empty on error.
func readText(_ path: String) -> String { SmallFile.contents(of: path) }

/// A field of /proc/meminfo (`MemTotal`, `MemFree`, ...) in bytes; nil if it is not there.
func hostMemory(_ key: String) -> UInt64? {
    guard let line = readText("/proc/meminfo").split(separator: "\n").first(where: { $0.hasPrefix(key + ":") }),
          let kb = UInt64(line.split(separator: " ").dropFirst().first ?? "") else { return nil }
    return kb << 10
}

/// Small kernel-interface files (procfs, cgroupfs) and supervisor-owned state files.
public enum SmallFile {
    /// The whole file as text, without following a final symlink; empty on any error.
    public static func contents(of path: String) -> String {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        // A 4 KiB buffer on the stack, not a zeroed 64 KiB array: these files are a few
        // hundred bytes, and a launch reads several.
        var out: [UInt8] = []
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 4096) { buf in
            while true {
                let n = Glibc.read(fd, buf.baseAddress, buf.count)
                if n <= 0 { break }
                out.append(contentsOf: buf[0..<n])
            }
        }
        return String(decoding: out, as: UTF8.self)
    }
}
