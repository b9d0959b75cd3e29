import CSystemCalls
import Glibc
import SupervisorIO

/// The cgroup limits a client has and the service does not. A one-shot launch's sandbox is
/// made under its caller's cgroup, so inside every limit of that cgroup and its ancestors; a
/// served one under the service's. A client is served only where no limit of its path is
/// tighter than the service's path's, in each hierarchy that limits: v2, and v1 memory,
/// pids, cpu, blkio and hugetlb.
public enum CgroupLimits {
    /// The first limit of the client's that is tighter than the service's, as "FILE is VALUE
    /// (the service's: ...)", or why the client's cgroups cannot be checked; nil when there is
    /// none.
    public static func between(client: [String: String], service: [String: String], mounts: @autoclosure () -> [CgroupHost.Mount] = CgroupHost.mounts()) -> String? {
        var shown: [CgroupHost.Mount]?
        for key in ["", "memory", "pids", "cpu", "blkio", "hugetlb"] {
            guard let path = client[key] else { continue }
            let theirs = path.split(separator: "/").map(String.init)
            let ours = (service[key] ?? "/").split(separator: "/").map(String.init)
            // The client's cgroup is the service's or an ancestor of it: its limits hold the
            // service's sandboxes too.
            if theirs.count <= ours.count && Array(ours.prefix(theirs.count)) == theirs { continue }
            let m = shown ?? mounts()
            shown = m
            let hierarchy = key.isEmpty ? "v2" : key
            guard let clientDirs = directories(theirs, key: key, in: m) else {
                return "its \(hierarchy) cgroup \(path) is not visible here"
            }
            // The service's own cgroup, when it cannot be read, has no limit to compare with.
            let serviceDirs = directories(ours, key: key, in: m) ?? []
            for limit in limits(key, in: clientDirs + serviceDirs) {
                guard let theirs = tightest(limit, clientDirs) else { continue }
                let oursValue = tightest(limit, serviceDirs)
                if theirs.value < oursValue?.value ?? .infinity {
                    return "\(theirs.file) is \(theirs.text) (the service's: \(oursValue.map { "\($0.file) is \($0.text)" } ?? "none"))"
                }
            }
            // Per-device I/O limits are not one number: any below where the paths part.
            var parted = 0
            while parted < min(theirs.count, ours.count) && theirs[parted] == ours[parted] { parted += 1 }
            for dir in clientDirs[parted...] {
                for name in ["io.max", "blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
                             "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"] {
                    if let v = value(dir, name), !v.isEmpty { return "\(dir)/\(name) is \(v.split(separator: "\n").first ?? "")" }
                }
            }
        }
        return nil
    }

    /// A limit of one number per cgroup, smaller being tighter (nil: unlimited).
    struct Limit {
        var name: String
        var read: (_ dir: String) -> (value: Double, text: String)??
    }

    /// The limits of hierarchy `key` ("" for v2), those named per huge page size found in `dirs`.
    static func limits(_ key: String, in dirs: [String]) -> [Limit] {
        let bytes = { (name: String) in
            Limit(name: name) { dir in value(dir, name).map { v in UInt64(v).map { $0 >= 1 << 62 ? nil : (Double($0), String(v)) } ?? (0, String(v)) } }
        }
        let maxOrNumber = { (name: String) in
            Limit(name: name) { dir in value(dir, name).map { v in v == "max" ? nil : (Double(UInt64(v) ?? 0), String(v)) } }
        }
        let hugePages = { (suffix: String, make: (String) -> Limit) -> [Limit] in
            Set(dirs.flatMap { dir in directoryNames(dir).filter { $0.hasPrefix("hugetlb.") && $0.hasSuffix(suffix) } }).sorted().map(make)
        }
        switch key {
        case "memory":
            return ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.kmem.tcp.limit_in_bytes"].map(bytes)
        case "pids":
            return [maxOrNumber("pids.max")]
        case "cpu":
            return [Limit(name: "cpu.cfs_quota_us") { dir in
                guard let q = value(dir, "cpu.cfs_quota_us") else { return nil }
                guard let quota = Double(q), quota >= 0 else { return .some(nil) }
                let period = value(dir, "cpu.cfs_period_us").flatMap { Double($0) } ?? 100_000
                return (quota / max(period, 1), "\(q) of \(Int(period)) us")
            }]
        case "hugetlb":
            return hugePages(".limit_in_bytes", bytes)
        case "":
            return ["memory.max", "memory.high", "memory.swap.max", "pids.max"].map(maxOrNumber) + hugePages(".max", maxOrNumber) + [
                Limit(name: "cpu.max") { dir in
                    guard let v = value(dir, "cpu.max") else { return nil }
                    let f = v.split(separator: " ")
                    guard let q = f.first, q != "max" else { return .some(nil) }
                    let quota = Double(q) ?? 0, period = f.count > 1 ? Double(f[1]) ?? 100_000 : 100_000
                    return (quota / max(period, 1), String(v))
                }]
        default:
            return []
        }
    }

    /// The tightest value of `limit` along `dirs`, and the file that sets it.
    static func tightest(_ limit: Limit, _ dirs: [String]) -> (value: Double, text: String, file: String)? {
        var best: (value: Double, text: String, file: String)?
        for dir in dirs {
            guard let read = limit.read(dir), let v = read else { continue }
            if v.value < best?.value ?? .infinity { best = (v.value, v.text, dir + "/" + limit.name) }
        }
        return best
    }

    /// The directory of each cgroup on `path` (its components), root excluded, or nil when one
    /// is not a directory any mount shows.
    static func directories(_ path: [String], key: String, in mounts: [CgroupHost.Mount]) -> [String]? {
        var dirs: [String] = []
        for depth in stride(from: 1, through: path.count, by: 1) {
            let cgroup = "/" + path[..<depth].joined(separator: "/")
            var st = stat()
            guard let dir = CgroupHost.directory(of: cgroup, controller: key.isEmpty ? nil : key, in: mounts),
                  stat(dir, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else { return nil }
            dirs.append(dir)
        }
        return dirs
    }

    /// The text of `dir/name` without surrounding blanks; nil when there is no such file.
    static func value(_ dir: String, _ name: String) -> Substring? {
        guard access(dir + "/" + name, F_OK) == 0 else { return nil }
        let text = SmallFile.contents(of: dir + "/" + name)
        let isSpace = { (c: Character) in c == " " || c == "\n" }
        guard let first = text.firstIndex(where: { !isSpace($0) }), let last = text.lastIndex(where: { !isSpace($0) }) else { return "" }
        return text[first...last]
    }

    static func directoryNames(_ dir: String) -> [String] {
        guard let d = opendir(dir) else { return [] }
        defer { closedir(d) }
        var out: [String] = []
        while let e = readdir(d) { out.append(DirectoryEntry.name(e)) }
        return out
    }
}

/// The BPF programs a process's cgroup v2 cgroup applies to it and to every process it starts
/// (systemd's `IPAddressDeny=`, `DeviceAllow=`, `SocketBindDeny=` and
/// `RestrictNetworkInterfaces=` are such programs). A one-shot launch's sandbox is made under
/// its caller's cgroup, where they apply; a served one under the service's, so a client whose
/// programs differ is declined. Limits (memory, pids, cpu) are not filters: each sandbox has
/// the policy's own.
struct CgroupFilters: Equatable {
    /// Per attach type: the program ids in effect, or the query's errno.
    var programs: [UInt32: [UInt32]]

    /// The cgroup attach types (enum bpf_attach_type, include/uapi/linux/bpf.h; the kernel's
    /// bpf_prog_query answers these for a cgroup): INET_INGRESS 0 to SOCK_OPS 3, DEVICE 6,
    /// INET4/6_BIND 8-9, INET4/6_CONNECT 10-11, INET4/6_POST_BIND 12-13, UDP4/6_SENDMSG 14-15,
    /// SYSCTL 18, UDP4/6_RECVMSG 19-20, GET/SETSOCKOPT 21-22, INET4/6_GETPEERNAME and
    /// GETSOCKNAME 29-32, INET_SOCK_RELEASE 34, LSM_CGROUP 43, UNIX_CONNECT to
    /// UNIX_GETSOCKNAME 49-53 (Linux 6.7). A kernel without one answers EINVAL for both sides
    /// alike. Other types' queries take the descriptor as an interface index: never asked.
    static let attachTypes: [UInt32] = [0, 1, 2, 3, 6, 8, 9, 10, 11, 12, 13, 14, 15, 18, 19, 20, 21, 22,
                                        29, 30, 31, 32, 34, 43, 49, 50, 51, 52, 53]

    /// The programs in effect for the v2 cgroup at `path` (none without one), or nil if they
    /// cannot be read: a cgroup none of `mounts` shows, a query refused.
    static func of(_ path: String?, in mounts: [CgroupHost.Mount]) -> CgroupFilters? {
        var programs: [UInt32: [UInt32]] = [:]
        if let path {
            guard let dir = CgroupHost.directory(of: path, in: mounts) else { return nil }
            let fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            guard fd >= 0 else { return nil }
            defer { close(fd) }
            for type in attachTypes {
                var ids = [UInt32](repeating: 0, count: 64)
                var count = UInt32(ids.count)
                var r = ahs_cgroup_bpf_effective(fd, type, &ids, &count)
                if r == -ENOSPC {
                    ids = [UInt32](repeating: 0, count: Int(count))
                    r = ahs_cgroup_bpf_effective(fd, type, &ids, &count)
                }
                if r == -EPERM || r == -EBADF || r == -ENOSPC { return nil }
                programs[type] = r == 0 ? Array(ids.prefix(Int(count))) : [UInt32(bitPattern: r)]
            }
        }
        return CgroupFilters(programs: programs)
    }
}
