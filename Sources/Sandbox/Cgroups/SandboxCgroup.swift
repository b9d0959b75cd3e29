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

/// The cgroup hierarchies visible to this process and where this process sits in them.
public struct CgroupHost: Sendable {
    public struct Hierarchy: Sendable {
        /// Directory of *our own* cgroup in this hierarchy.
        public var ownDirectory: String
        public var controllers: Set<String>
        public init(ownDirectory: String, controllers: Set<String>) {
            self.ownDirectory = ownDirectory
            self.controllers = controllers
        }
    }
    /// cgroup v1 hierarchies keyed by controller.
    public var v1: [String: Hierarchy]
    /// The cgroup v2 (unified) hierarchy, if mounted; `controllers` are those usable in a
    /// child cgroup (enabled in our cgroup's `cgroup.subtree_control`).
    public var v2: Hierarchy?

    public init(v1: [String: Hierarchy], v2: Hierarchy?) {
        self.v1 = v1
        self.v2 = v2
    }

    /// This process's hierarchies, read once: a supervisor does not move between cgroups.
    public static let current = detect()

    /// Reads /proc/self/cgroup and /proc/self/mountinfo.
    public static func detect() -> CgroupHost {
        var own: [String: String] = [:]  // "memory" or "" (v2) -> path
        for line in readText("/proc/self/cgroup").split(separator: "\n") {
            let f = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard f.count == 3 else { continue }
            let path = String(f[2])
            if f[1].isEmpty { own[""] = path } else {
                for c in f[1].split(separator: ",") { own[String(c)] = path }
            }
        }
        var v1: [String: Hierarchy] = [:]
        var v2: Hierarchy?
        for line in readText("/proc/self/mountinfo").split(separator: "\n") {
            let halves = line.components(separatedBy: " - ")
            guard halves.count == 2 else { continue }
            let pre = halves[0].split(separator: " ")
            let post = halves[1].split(separator: " ")
            guard pre.count >= 5, post.count >= 3 else { continue }
            let root = String(pre[3]), mountPoint = String(pre[4])
            func dir(_ path: String) -> String? {
                // The mount shows the hierarchy from `root` down; our path must lie inside it.
                guard path == root || path.hasPrefix(root == "/" ? "/" : root + "/") else { return nil }
                let rel = root == "/" ? path : String(path.dropFirst(root.count))
                return rel == "/" || rel.isEmpty ? mountPoint : mountPoint + rel
            }
            if post[0] == "cgroup2", v2 == nil, let p = own[""], let d = dir(p) {
                let enabled = Set(readText(d + "/cgroup.subtree_control").split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init))
                v2 = Hierarchy(ownDirectory: d, controllers: enabled)
            } else if post[0] == "cgroup" {
                let opts = post[2].split(separator: ",").map(String.init)
                for c in ["memory", "pids", "cpu", "freezer"] where opts.contains(c) {
                    if let p = own[c], let d = dir(p), v1[c] == nil {
                        v1[c] = Hierarchy(ownDirectory: d, controllers: Set(opts))
                    }
                }
            }
        }
        return CgroupHost(v1: v1, v2: v2)
    }

    /// Where each requested limit would be enforced, without creating anything.
    public func plan(for limits: Limits) -> [(controller: String, version: Int, parent: String)] {
        var out: [(String, Int, String)] = []
        for c in Self.requested(limits) {
            if let v2, v2.controllers.contains(c) {
                out.append((c, 2, v2.ownDirectory))
            } else if let h = v1[c] {
                out.append((c, 1, h.ownDirectory))
            }
        }
        return out
    }

    static func requested(_ limits: Limits) -> [String] {
        var r: [String] = []
        if limits.memory != nil { r.append("memory") }
        if limits.pids != nil { r.append("pids") }
        if limits.cpus != nil { r.append("cpu") }
        return r
    }
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
            let msg = "no usable \(c) controller (cgroup v2: \(host.v2.map { "enabled here: \($0.controllers.sorted().joined(separator: " "))" } ?? "not mounted"); cgroup v1 \(c): not mounted)"
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

    /// cgroup v1 `tasks` files the monitor writes "0" into to join by itself (fast path).
    var selfJoinFiles: [String] {
        var seen: Set<String> = []
        return directories.filter { $0.version == 1 && seen.insert($0.path).inserted }.map { $0.path + "/tasks" }
    }

    /// Moves `pid` (the sandbox's monitor, before it forks anything) into every cgroup it
    /// did not join itself.
    func attach(pid: pid_t) throws(SandboxError) {
        var seen: Set<String> = []
        for d in directories where d.version != 1 && seen.insert(d.path).inserted {
            try Self.write(d.path + "/cgroup.procs", "\(pid)")
        }
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
        for d in directories {
            for l in readText(d.path + "/cgroup.procs").split(separator: "\n") {
                if let p = pid_t(l) { pids.insert(p) }
            }
        }
        return pids.sorted()
    }

    /// Removes the cgroups. Every process in them descends from this sandbox's monitor; any
    /// straggler is killed by pid before the directory is removed. Returns what could not be
    /// removed.
    @discardableResult
    func remove() -> [String] {
        var failed: [String] = []
        var seen: Set<String> = []
        for d in directories.reversed() where seen.insert(d.path).inserted {
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
                  readText(path + "/cgroup.procs").isEmpty else { continue }
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
