import Glibc
import SandboxPolicy

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
final class SandboxCgroup {
    private(set) var directories: [(controller: String, version: Int, path: String)] = []
    private(set) var enforcement: [LimitEnforcement] = []

    /// Creates the cgroups for `limits`. A requested limit no controller can enforce is an
    /// error unless `allowUnenforced`, in which case it is listed as NOT ENFORCED.
    init(id: String, limits: Limits, host: CgroupHost = .current, allowUnenforced: Bool) throws(SandboxError) {
        let name = "autoharness-\(id)"
        let wanted = CgroupHost.requested(limits)
        let placed = host.plan(for: limits)
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
                    Self.sweepStale(in: p.parent)
                    if mkdir(dir, 0o755) != 0 && errno != EEXIST {
                        throw SandboxError(.cgroup, "mkdir \(dir): \(String(cString: strerror(errno)))", errno: errno)
                    }
                    made.insert(dir)
                }
                directories.append((p.controller, p.version, dir))
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
            if access(dir + "/memory.memsw.limit_in_bytes", F_OK) == 0 {
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

    /// The files the monitor writes "0" into to join its cgroups by itself, before it forks
    /// anything: v1 `tasks` (one thread: the monitor is single-threaded), v2 `cgroup.procs`.
    var selfJoinFiles: [String] {
        var seen: Set<String> = []
        return directories.filter { seen.insert($0.path).inserted }
            .map { $0.path + ($0.version == 1 ? "/tasks" : "/cgroup.procs") }
    }

    /// True when the memory controller OOM-killed something in this sandbox.
    func memoryLimitHit() -> Bool {
        for d in directories where d.controller == "memory" {
            let text = readText(d.path + (d.version == 1 ? "/memory.oom_control" : "/memory.events"))
            if let v = Self.field(text, "oom_kill"), v > 0 { return true }
            if d.version == 1, let v = Int(readText(d.path + "/memory.failcnt").trimmingCharacters(in: .whitespacesAndNewlines)), v > 0,
               Self.field(text, "under_oom") == 1 { return true }
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

    /// Processes still inside (there should be none once init has exited).
    func remainingProcesses() -> [pid_t] {
        var pids: Set<pid_t> = []
        for d in directories { pids.formUnion(Self.processes(in: d.path)) }
        return pids.sorted()
    }

    static func processes(in dir: String) -> [pid_t] {
        readText(dir + "/cgroup.procs").split(separator: "\n").compactMap { pid_t($0) }
    }

    /// Removes the cgroups. Every process in them descends from this sandbox's monitor; any
    /// straggler is killed by pid before the directory is removed. Returns what could not be
    /// removed.
    @discardableResult
    func remove() -> [String] {
        var failed: [String] = []
        var seen: Set<String> = []
        for d in directories.reversed() where seen.insert(d.path).inserted {
            // v2 (5.14+): one write kills every process in the cgroup, including any forked
            // after we listed them. The pid loop below stays for v1 and older kernels.
            if d.version == 2, !Self.processes(in: d.path).isEmpty {
                _ = CgroupHost.writeErrno(d.path + "/cgroup.kill", "1")
            }
            var ok = false
            for attempt in 0..<50 {
                if rmdir(d.path) == 0 || errno == ENOENT { ok = true; break }
                for p in remainingProcesses() { kill(p, SIGKILL) }
                usleep(useconds_t(attempt < 10 ? 1000 : 10_000))
            }
            if !ok { failed.append(d.path) }
        }
        directories.removeAll()
        return failed
    }

    /// Removes sandbox cgroups a killed supervisor left behind: named `autoharness-sbx-*`,
    /// empty, and older than a minute (a sibling supervisor's cgroup is empty only for the
    /// milliseconds between its mkdir and its monitor joining).
    static func sweepStale(in parent: String) {
        // Once per parent and process: what a killed supervisor left is there at start-up.
        guard swept.withLock({ swept.value.insert(parent).inserted }) else { return }
        guard let d = opendir(parent) else { return }
        defer { closedir(d) }
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        while let e = readdir(d) {
            let name = withUnsafeBytes(of: e.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard name.hasPrefix("autoharness-sbx-") else { continue }
            let path = parent + "/" + name
            var st = stat()
            guard stat(path, &st) == 0, now.tv_sec - st.st_mtim.tv_sec > 60,
                  processes(in: path).isEmpty else { continue }
            rmdir(path)
        }
    }

    private static let swept = Locked<Set<String>>([])

    static func field(_ text: String, _ key: String) -> Int? {
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 2, parts[0] == key { return Int(parts[1]) }
        }
        return nil
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

/// Small kernel-interface files (procfs, cgroupfs) and supervisor-owned state files.
public enum SmallFile {
    /// The whole file as text, without following a final symlink; empty on any error.
    public static func contents(of path: String) -> String {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { return "" }
        defer { close(fd) }
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buf.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            out.append(contentsOf: buf[0..<n])
        }
        return String(decoding: out, as: UTF8.self)
    }
}
