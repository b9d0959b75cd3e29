import CSystemCalls
import Glibc
import PolicyModel
import SupervisorIO

/// What this host offers the sandbox, read without changing anything: the facts behind
/// `autoharness doctor`.
public struct HostInspection: Sendable {
    /// One line of the report.
    public struct Finding: Sendable {
        public enum Status: String, Sendable { case ok, missing, info }
        public var topic: String
        public var status: Status
        public var detail: String
        /// What to do about a `missing` finding.
        public var fix: String?
    }

    public var kernel: String
    public var findings: [Finding] = []

    /// Kernel release as (major, minor), e.g. (6, 1).
    public var kernelVersion: (Int, Int) {
        let parts = kernel.split(whereSeparator: { !$0.isNumber }).prefix(2).compactMap { Int($0) }
        return (parts.first ?? 0, parts.count > 1 ? parts[1] : 0)
    }

    public static func inspect(host: CgroupHost = .detect()) -> HostInspection {
        var u = utsname()
        uname(&u)
        let release = withUnsafeBytes(of: u.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        var r = HostInspection(kernel: release)
        r.findings.append(r.privileges())
        r.findings.append(r.namespaces())
        r.findings.append(r.seccomp())
        r.findings.append(r.landlock())
        r.findings.append(contentsOf: r.cgroups(host))
        r.findings.append(binary())
        return r
    }

    /// How this binary is linked, and whether its name lookups (the egress proxy's
    /// `getaddrinfo`) can work here. A static binary carries its own glibc; a host whose
    /// `/etc/nsswitch.conf` sends host lookups to modules beyond `files` and `dns` (systemd's
    /// `resolve`, `myhostname`, `mdns`) makes it load them from the host's glibc, which must
    /// then be the same version.
    public static func binary(nsswitch: String = "/etc/nsswitch.conf",
                              hostLibraries: [String] = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6",
                                                         "/lib64/libc.so.6", "/usr/lib64/libc.so.6", "/lib/libc.so.6"],
                              linkedStatically: Bool = ahs_statically_linked() == 1,
                              version: String = String(cString: ahs_libc_version())) -> Finding {
        let mine = version
        guard linkedStatically else {
            return Finding(topic: "binary", status: .info, detail: "dynamically linked, glibc \(mine) (scripts/build-release makes the static one, which starts faster)")
        }
        let modules = hostsModules(SmallFile.contents(of: nsswitch))
        let extra = modules.filter { $0 != "files" && $0 != "dns" }
        let host = hostLibraries.lazy.compactMap(Self.glibcVersion(ofLibrary:)).first
        var detail = "static, glibc \(mine) inside; the host's glibc \(host ?? "not found"); host lookups: \(modules.isEmpty ? "files dns (default)" : modules.joined(separator: " "))"
        if !extra.isEmpty, host != mine {
            detail += ". The egress proxy's name lookups load \(extra.joined(separator: ", ")) from the host's glibc, "
                + "which differs: rebuild autoharness on this host (scripts/install), or give the proxy's hosts as addresses"
        }
        return Finding(topic: "binary", status: .info, detail: detail)
    }

    /// The modules of the `hosts:` line of an nsswitch.conf, without `[...]` actions.
    static func hostsModules(_ text: String) -> [String] {
        for line in text.split(separator: "\n") {
            let content = line.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first ?? ""
            let trimmed = content.drop { $0 == " " || $0 == "\t" }
            guard trimmed.hasPrefix("hosts:") else { continue }
            return trimmed.dropFirst("hosts:".count).split(whereSeparator: { $0 == " " || $0 == "\t" })
                .filter { !$0.hasPrefix("[") }.map(String.init)
        }
        return []
    }

    /// The version a glibc shared library states ("... release version 2.36."), read from the
    /// file (doctor only: a few megabytes).
    static func glibcVersion(ofLibrary path: String) -> String? {
        guard case .success(let bytes) = InputFile.read(path, cap: 16 << 20) else { return nil }
        let needle = Array("release version ".utf8)
        guard bytes.count > needle.count else { return nil }
        var i = 0
        while i + needle.count < bytes.count {
            if bytes[i] == needle[0], bytes[i..<(i + needle.count)].elementsEqual(needle) {
                var j = i + needle.count
                var version: [UInt8] = []
                while j < bytes.count, (bytes[j] >= 0x30 && bytes[j] <= 0x39) || bytes[j] == 0x2e { version.append(bytes[j]); j += 1 }
                while version.last == 0x2e { version.removeLast() }
                return version.isEmpty ? nil : String(decoding: version, as: UTF8.self)
            }
            i += 1
        }
        return nil
    }

    func privileges() -> Finding {
        geteuid() == 0
            ? Finding(topic: "privileges", status: .ok, detail: "root (euid 0)")
            : Finding(topic: "privileges", status: .missing, detail: "euid \(geteuid())",
                      fix: "run autoharness as root: it builds namespaces, writes id maps and creates cgroups")
    }

    func namespaces() -> Finding {
        let max = SmallFile.contents(of: "/proc/sys/user/max_user_namespaces").split(whereSeparator: \.isWhitespace).first.flatMap { Int($0) } ?? -1
        if max == 0 {
            return Finding(topic: "namespaces", status: .missing, detail: "user namespaces disabled (user.max_user_namespaces = 0)",
                           fix: "sysctl -w user.max_user_namespaces=15000")
        }
        let kinds = ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"].filter { access("/proc/self/ns/\($0)", F_OK) == 0 }
        return Finding(topic: "namespaces", status: kinds.count == 7 ? .ok : .missing, detail: kinds.joined(separator: " "),
                       fix: kinds.count == 7 ? nil : "a kernel built with every namespace type")
    }

    func seccomp() -> Finding {
        let actions = Set(SmallFile.contents(of: "/proc/sys/kernel/seccomp/actions_avail").split(whereSeparator: { $0 == " " || $0 == "\n" }).map(String.init))
        let needed = ["errno", "user_notif", "log"]
        let absent = needed.filter { !actions.contains($0) }
        if actions.isEmpty {
            return Finding(topic: "seccomp", status: .missing, detail: "no seccomp filter support", fix: "a kernel with CONFIG_SECCOMP_FILTER")
        }
        return absent.isEmpty
            ? Finding(topic: "seccomp", status: .ok, detail: "filters with errno, user_notif (refusals observed), log")
            : Finding(topic: "seccomp", status: .missing, detail: "kernel lacks seccomp action(s) \(absent.joined(separator: " "))",
                      fix: "Linux 5.0 or later (user_notif)")
    }

    func landlock() -> Finding {
        let abi = ahs_landlock_abi()
        if abi > 0 {
            return Finding(topic: "landlock", status: .ok, detail: "ABI \(abi): a second wall under the mounts (writes only beneath read-write mounts)")
        }
        let why = abi == -EOPNOTSUPP ? "built in but disabled" : "not in this kernel"
        return Finding(topic: "landlock", status: .info, detail: "\(why): sandboxes rely on the mounts alone (a policy with `landlock: required` will not start)",
                       fix: abi == -EOPNOTSUPP ? "add landlock to the lsm= boot parameter" : nil)
    }

    func cgroups(_ host: CgroupHost) -> [Finding] {
        var out: [Finding] = []
        let version: String
        switch (host.v1.isEmpty, host.v2) {
        case (true, .some): version = "v2 (unified)"
        case (false, .some(let v2)): version = "hybrid: v1 \(host.v1.keys.sorted().joined(separator: " ")) + v2 at \(v2.ownDirectory)"
        case (false, .none): version = "v1 \(host.v1.keys.sorted().joined(separator: " "))"
        case (true, .none): version = "none mounted"
        }
        out.append(Finding(topic: "cgroups", status: .info, detail: version + placement(host)))
        for c in CgroupHost.controllersUsed + ["freezer"] {
            out.append(controller(c, host))
        }
        let (maj, min) = kernelVersion
        let atLeast = { (a: Int, b: Int) in maj > a || (maj == a && min >= b) }
        if host.v2 != nil {
            out.append(Finding(topic: "cgroup.kill", status: .info, detail: atLeast(5, 14)
                ? "available (Linux ≥ 5.14): whole-tree kill of v2 sandbox cgroups"
                : "not in this kernel: stragglers are killed by pid"))
            out.append(Finding(topic: "clone_into_cgroup", status: .info, detail: atLeast(5, 7)
                ? "available (Linux ≥ 5.7): each sandbox is created inside its v2 cgroup"
                : "not in this kernel: a sandbox's monitor joins its cgroups before it forks anything (same containment, one write more)"))
        }
        return out
    }

    func placement(_ host: CgroupHost) -> String {
        guard let v2 = host.v2 else { return "" }
        let own = SmallFile.contents(of: "/proc/self/cgroup").split(separator: "\n")
            .first { $0.hasPrefix("0::") }.map { String($0.dropFirst(3)) } ?? "?"
        let leaf = own.hasSuffix("/" + CgroupHost.supervisorLeaf) ? " (the supervisor's leaf; sandboxes go beside it)" : ""
        return "; this process in \(own)\(leaf), sandboxes under \(v2.ownDirectory)"
    }

    func controller(_ c: String, _ host: CgroupHost) -> Finding {
        let fixV2 = "give the supervisor a cgroup with \(c) delegated: `systemd-run -p Delegate=yes --scope autoharness …` "
            + "or a service with Delegate=yes; in a container: its own cgroup namespace and a writable /sys/fs/cgroup (container/README.md)"
        let v2File = c == "freezer" ? "cgroup.freeze" : nil
        if let v2 = host.v2 {
            if let v2File {
                // The v2 freezer is part of the core, present in every non-root cgroup.
                let (maj, min) = kernelVersion
                if maj > 5 || (maj == 5 && min >= 2) {
                    return Finding(topic: "  freezer", status: .ok, detail: "cgroup v2 core (\(v2File), Linux ≥ 5.2)")
                }
            } else if v2.controllers.contains(c) {
                return Finding(topic: "  \(c)", status: .ok, detail: "cgroup v2, enabled for children of \(v2.ownDirectory)")
            } else if v2.available.contains(c) && host.v1[c] == nil, let problem = host.delegationProblem {
                return Finding(topic: "  \(c)", status: .missing, detail: "cgroup v2, available in \(v2.ownDirectory) but could not be enabled: \(problem)",
                               fix: "give the supervisor a writable cgroup filesystem (in a container: `--privileged`, or mount /sys/fs/cgroup read-write; see container/README.md)")
            } else if v2.available.contains(c) && host.v1[c] == nil {
                return Finding(topic: "  \(c)", status: .ok, detail: "cgroup v2, available in \(v2.ownDirectory); the first sandbox launch enables it (moving this process into \(CgroupHost.supervisorLeaf) if the cgroup holds processes)")
            }
        }
        if let h = host.v1[c] {
            return Finding(topic: "  \(c)", status: .ok, detail: "cgroup v1 under \(h.ownDirectory)")
        }
        if c == "freezer" {
            return Finding(topic: "  freezer", status: .info, detail: "no cgroup freezer (\(host.v2 == nil ? "mount cgroup2 or the v1 freezer" : "Linux 5.2 or later")): the coding agent is stopped for each gate and restarted after it")
        }
        let why = host.unusable(c)
        return Finding(topic: "  \(c)", status: .missing, detail: why.firstRange(of: ". Fix:").map { String(why[..<$0.lowerBound]) } ?? why, fix: fixV2)
    }

    /// Which of `limits` cannot be enforced here, as `limits.KEY (why)` strings.
    public static func unenforceable(_ limits: Limits, host: CgroupHost) -> [String] {
        // A delegation that was tried and failed assumes nothing.
        let placed = host.plan(for: limits, assumingDelegation: host.delegationProblem == nil)
        return CgroupHost.requested(limits).filter { c in !placed.contains { $0.controller == c } }
            .map { "limits.\(SandboxCgroup.key($0))" }
    }
}
