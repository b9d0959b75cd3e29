import Glibc

/// What confines a process as far as a launch goes: its namespaces and root directory (where
/// its paths lead, which network it has, which cgroup it is in) and what it may do (effective
/// capabilities, no_new_privs, seccomp filters). A launch service serves a client only when
/// the two are equal: another confinement's launch is the client's own to make.
public struct PeerConfinement: Sendable {
    /// (st_dev, st_ino) of each namespace, then of the root directory.
    var identities: [UInt64]
    /// The CapEff, NoNewPrivs, Seccomp and Seccomp_filters lines of /proc/PID/status.
    var status: [String]
    /// The process's cgroup v2 path (where `CgroupFilters` apply) and v1 `devices` path.
    var v2Cgroup: String?
    var devicesCgroup: String?

    static let namespaces = ["mnt", "net", "pid", "user", "ipc", "uts", "cgroup"]
    static let statusFields = ["CapEff:", "NoNewPrivs:", "Seccomp:", "Seccomp_filters:"]

    /// The confinement of /proc/`pid` (a number, or "self"), or nil if any part is unreadable.
    public static func of(_ pid: String) -> PeerConfinement? {
        var identities: [UInt64] = []
        for entry in namespaces.map({ "ns/" + $0 }) + ["root"] {
            var st = stat()
            guard stat("/proc/\(pid)/\(entry)", &st) == 0 else { return nil }
            identities += [UInt64(st.st_dev), UInt64(st.st_ino)]
        }
        let fd = open("/proc/\(pid)/status", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes = [UInt8](repeating: 0, count: 8192)
        let n = read(fd, &bytes, bytes.count)
        guard n > 0 else { return nil }
        let lines = String(decoding: bytes[..<n], as: UTF8.self).split(separator: "\n")
        let status = statusFields.map { field in lines.first { $0.hasPrefix(field) }.map(String.init) ?? "" }
        let cgroups = CgroupHost.memberships(of: pid)
        return PeerConfinement(identities: identities, status: status, v2Cgroup: cgroups[""], devicesCgroup: cgroups["devices"])
    }

    /// Whether process `pid`, confined as `client`, is confined as this one (the service's,
    /// read from "self"): same namespaces, root, capabilities and filters; the same v1
    /// `devices` cgroup, or the root one (which nothing restricts: a cgroup's `devices.list`
    /// does not show what it denies when it allows by default, so lists cannot be compared);
    /// and, when its v2 cgroup is not the service's, the same BPF programs in effect there.
    public func admits(_ client: PeerConfinement, pid: pid_t) -> Bool {
        guard client.identities == identities, client.status == status else { return false }
        guard client.devicesCgroup == devicesCgroup || client.devicesCgroup == "/" else { return false }
        if client.v2Cgroup == v2Cgroup { return true }
        let mounts = CgroupHost.mounts()
        guard let theirs = CgroupFilters.of(client.v2Cgroup, in: mounts), let ours = CgroupFilters.of(v2Cgroup, in: mounts) else { return false }
        return theirs == ours
    }
}
