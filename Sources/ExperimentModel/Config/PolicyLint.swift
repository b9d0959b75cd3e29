import Foundation
import Sandbox
import SandboxPolicy

/// The sandbox a policy is written for (`policy lint --role`): what a role must not have
/// beyond the rules for every policy.
public enum PolicyRole: String, Sendable, CaseIterable {
    case task, verifier, runner, scorer, triage
    case codingAgent = "coding-agent"
}

/// `autoharness policy lint`: what a policy allows that no sandbox of autoharness should,
/// each at the line that allows it. `policy check` says whether a policy loads; this says
/// whether it is safe to load: every finding is something the escape suite or a held-out
/// channel test showed to matter, not a style rule.
public enum PolicyLint {
    /// Host paths no sandbox may see, nor any directory holding one (by the resolved path).
    static let hostSecrets: [(path: String, what: String)] = [
        ("/root", "root's home"), ("/home", "the users' homes"), ("/etc/shadow", "the password hashes"),
        ("/etc/gshadow", "the group password hashes"), ("/etc/ssh", "the host's SSH keys"), ("/etc/sudoers", "sudo's rules"),
        ("/etc/sudoers.d", "sudo's rules"), ("/var/cache/autoharness", "autoharness's caches (seccomp programs, loaded policies, the saved guest)"),
        ("/var/lib/autoharness", "autoharness's state"), ("/run", "the sockets of the host's services (container runtimes, systemd)"),
        ("/proc", "the host's processes"), ("/sys", "the kernel's controls"), ("/dev", "the host's devices"),
        ("/boot", "the kernel and its initramfs"),
    ]

    /// Syscalls the default profile leaves out for a reason a policy's `allow` or `quiet`
    /// would undo: the page-cache oracles (held-out sandboxes leave resident pages a later
    /// sandbox reads back) and clone3 (its namespace flags are in memory the filter cannot
    /// read; `clone`'s are checked).
    static var withheld: [String: String] {
        var out: [String: String] = [:]
        for name in SyscallProfile.pageCacheOracles {
            out[name] = "tells or changes which pages are in the page cache, which sandboxes share: a channel from held-out sandboxes to later ones"
        }
        for name in SyscallProfile.enosysFallback {
            out[name] = "takes its flags in memory the filter cannot read, so the namespace flags clone's rules refuse would pass"
        }
        return out
    }

    /// Syscalls the default profile leaves out as a channel between sandboxes that only an
    /// `allow` opens: refusing them quietly (`seccomp.quiet`) keeps the channel closed.
    static let neverAllowed: [String: String] = [
        "sched_setaffinity": "pins a process to one CPU, which makes the kernel's per-CPU counter batches (inode numbers) readable exactly: a channel from held-out sandboxes to later ones",
        "pidfd_open": "makes a pidfd, whose inode number is the host-wide count of processes created: a counter a held-out task moves and a later sandbox reads",
    ]

    /// Every finding for `input`, in the order of the file. `role` adds the rules for that
    /// sandbox; `experiment` (its config and directory) adds its protected paths (the
    /// experiment, the dataset, scorer-only answers) to what no bind may reach.
    public static func findings(_ input: PolicyLintInput, role: PolicyRole?, experiment: (config: ExperimentConfig, root: String)? = nil) -> [PolicyError] {
        let p = input.policy
        var out = input.widenings
        let anywhere = SourceLocation(file: input.file, line: 1)
        for m in p.mounts {
            guard let source = m.source, !source.contains("{") else { continue }  // the supervisor's to fill
            let at = m.location ?? anywhere
            let real = RunnerBinds.resolved(source)
            for s in hostSecrets {
                let secret = RunnerBinds.resolved(s.path)
                guard RunnerBinds.within(secret, real) || RunnerBinds.within(real, secret) else { continue }
                let how = real == secret ? "is" : RunnerBinds.within(real, secret) ? "lies inside" : "contains"
                out.append(PolicyError("\(m.kindName) \(source) \(how) \(s.path), \(s.what): no sandbox may see it", at: at))
                break
            }
            if case .readWrite = m.kind {
                out.append(PolicyError("rw \(source): a read-write bind of a host path lets the sandbox change the host; bind a directory the supervisor makes ({placeholder}) or use a tmpfs", at: at))
            }
        }
        if let e = experiment { out += protectedMounts(p, role: role, config: e.config, root: e.root) }
        for name in p.seccomp.allow + p.seccomp.quiet {
            guard let why = withheld[name] else { continue }
            let key = p.seccomp.allow.contains(name) ? "seccomp.allow" : "seccomp.quiet"
            out.append(PolicyError("\(key) \(name): \(why)", at: input.places["\(key).\(name)"] ?? anywhere))
        }
        for name in p.seccomp.allow {
            guard let why = neverAllowed[name] else { continue }
            out.append(PolicyError("seccomp.allow \(name): \(why) (seccomp.quiet refuses it without a report)", at: input.places["seccomp.allow.\(name)"] ?? anywhere))
        }
        if p.landlock == .off {
            out.append(PolicyError("filesystem.landlock off: the second wall under the mount table (writes only beneath read-write mounts) is gone", at: input.places["landlock"] ?? anywhere))
        }
        if p.limits.memory == nil {
            out.append(PolicyError("limits.memory: unlimited, so one sandbox can take the host's memory", at: input.places["limits.memory"] ?? anywhere))
        }
        if p.limits.pids == nil {
            out.append(PolicyError("limits.pids: unlimited, so a fork bomb in one sandbox reaches the host's process table", at: input.places["limits.pids"] ?? anywhere))
        }
        if let role { out += roleFindings(p, role: role, places: input.places, anywhere: anywhere) }
        // One line per place and key: a lifted limit is said once, as what the file took back.
        var seen: Set<String> = []
        out = out.filter { f in
            let key = f.message.prefix { $0 != " " && $0 != ":" }
            guard key == "filesystem.landlock" || key.hasPrefix("limits.") else { return true }
            return seen.insert("\(f.location.map(\.description) ?? ""):\(key)").inserted
        }
        // In the order of the files' lines.
        return out.enumerated().sorted { a, b in
            let (x, y) = (a.element.location, b.element.location)
            if x?.file != y?.file || x?.line == y?.line { return a.offset < b.offset }
            return (x?.line ?? 0) < (y?.line ?? 0)
        }.map(\.element)
    }

    /// The binds of `p` that reach what `config`'s experiment protects (itself, its dataset
    /// and task list, scorer-only answers but for the scorer), each at its line.
    static func protectedMounts(_ p: Policy, role: PolicyRole?, config: ExperimentConfig, root: String) -> [PolicyError] {
        var protected = config.experimentProtected(root: root)
        if role == .scorer { protected.removeAll { config.runner.scorerBinds.contains($0.path) } }
        var out: [PolicyError] = []
        for m in p.mounts {
            guard let source = m.source, !source.contains("{") else { continue }
            do {
                try RunnerBinds.refuse([("\(m.kindName) \(m.destination)", source)], exposing: protected)
            } catch {
                out.append(PolicyError("", cause: error, at: m.location))
            }
        }
        return out
    }

    /// Where agent.py runs (task) and where its work is judged (verifier) no network reaches
    /// out and nothing runs without an end.
    static func roleFindings(_ p: Policy, role: PolicyRole, places: [String: SourceLocation], anywhere: SourceLocation) -> [PolicyError] {
        guard role == .task || role == .verifier else { return [] }
        var out: [PolicyError] = []
        if p.network.mode != .none {
            out.append(PolicyError("network.mode \(p.network.mode.rawValue): a \(role.rawValue) sandbox has no network (a held-out run's would carry its task out; autoharness brings up loopback itself where a task's image needs it)", at: places["network.mode"] ?? anywhere))
        }
        if p.limits.timeoutSeconds == nil {
            out.append(PolicyError("limits.timeout: none, so a \(role.rawValue) that never ends holds its gate for ever", at: places["limits.timeout"] ?? anywhere))
        }
        return out
    }
}

extension ExperimentConfig {
    /// Every sandbox policy this experiment launches, by role.
    public var rolePolicies: [(role: PolicyRole, name: String)] {
        var out: [(PolicyRole, String)] = [(.task, taskPolicy), (.verifier, verifierPolicy), (.codingAgent, codingAgentPolicy)]
        if runner.command != nil { out.append((.runner, runner.policy)) }
        if runner.scorer != nil { out.append((.scorer, runner.scorerPolicy)) }
        if let t = triage { out.append((.triage, t.tool.policy)) }
        return out
    }

    /// The mounts of every role's policy (a custom one included) against what this
    /// experiment protects, before any sandbox starts: a policy that binds the dataset would
    /// hand every task, the held-out ones included, to whatever runs under it.
    package func checkPolicyMounts(root: String, loader: PolicyLoader) throws {
        for (role, name) in rolePolicies {
            guard let input = try? loader.lintInput(name) else { continue }  // a policy that does not load fails where it is used
            if let first = PolicyLint.protectedMounts(input.policy, role: role, config: self, root: root).first {
                throw ExperimentError(.usage, "the \(role.rawValue) policy \(name): \(first) (docs/operations.md: policy lint)")
            }
        }
    }
}
