import ArgumentParser
import Experiment
import ExperimentModel
import Foundation
import Sandbox
import SandboxCLI
import SandboxPolicy
import SupervisorIO

struct PolicyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "policy",
        abstract: "Check and inspect sandbox policies.",
        subcommands: [PolicyCheck.self, PolicyLintCommand.self, PolicyDiffCommand.self, PolicySuggestCommand.self, PolicyShow.self, PolicyExport.self]
    )
}

struct PolicyCheck: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Validate policy files; print file:line errors. Exit 0 if all are valid, 1 otherwise.",
        discussion: "Placeholders such as {workdir} may stay unresolved; syscall names are checked against this architecture."
    )

    @Option(name: .customLong("policy-dir"), help: "Directory searched for policies named by `extends:`.")
    var policyDirs: [String] = []

    @Argument(help: "Policy files or names.")
    var policies: [String]

    func run() throws {
        let loader = PolicyLocator.loader(policyDirs)
        try Self.judge(policies, loader) { name in
            let p = try loader.load(name, requireAllPlaceholders: false)
            _ = try SeccompCompiler.compile(p.effectiveSeccomp)
            print("\(name): ok (\(p.lineage.joined(separator: " <- ")))")
            return true
        }
    }

    /// Runs `body` on each policy (true: it passed), printing what does not load with its
    /// file:line; exits 1 when any failed or did not load.
    static func judge(_ names: [String], _ loader: PolicyLoader, _ body: (String) throws -> Bool) throws {
        var bad = 0
        for name in names {
            do {
                if try !body(name) { bad += 1 }
            } catch let d as PolicyDiagnostics {
                bad += 1
                for e in d.errors { printErr(e.description) }
            } catch let e as SandboxError {
                bad += 1
                printErr("\((try? loader.resolvePath(name)) ?? name): \(e.message)")
            }
        }
        if bad > 0 { throw ExitCode(Exit.failure) }
    }
}

struct PolicyLintCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lint",
        abstract: "Find what a policy allows that no autoharness sandbox should, each at its file:line. Exit 0 if none, 1 otherwise.",
        discussion: """
            Beyond `policy check` (does it load): a bind that is, contains or lies in a host secret (/, /etc as a \
            whole, /root, /home, /run, /proc, /sys, /dev, /boot, autoharness's caches), a read-write bind of a \
            host path, a syscall the default profile withholds for a reason (the page-cache oracles, clone3) \
            allowed or quieted, Landlock off, no memory or pids limit, and anything a file takes back from a \
            policy it extends (a denied syscall allowed, a read-only or hidden path made writable or visible, \
            Landlock lowered, a limit lifted). --role task|verifier adds: no network, a timeout. -C EXP adds \
            that experiment's protected paths (itself, its dataset, scorer-only answers) to what no bind may \
            reach. Placeholder sources ({workdir}) are the supervisor's to fill and are not judged.
            """
    )

    @Option(name: .customLong("policy-dir"), help: "Directory searched for policies named by `extends:`.")
    var policyDirs: [String] = []

    @Option(help: ArgumentHelp("The sandbox the policy is for: \(PolicyRole.allCases.map(\.rawValue).joined(separator: ", ")).", valueName: "ROLE"))
    var role: String?

    @Option(name: [.customShort("C"), .customLong("dir")], help: "An experiment whose protected paths no bind may reach.")
    var directory: String?

    @Argument(help: "Policy files or names.")
    var policies: [String]

    func run() throws {
        let chosen = try Self.role(role)
        let experiment = try directory.map(Self.experiment)
        let loader = PolicyLocator.loader(policyDirs)
        try PolicyCheck.judge(policies, loader) { name in
            let input = try loader.lintInput(name)
            _ = try SeccompCompiler.compile(input.policy.effectiveSeccomp)
            let findings = PolicyLint.findings(input, role: chosen, experiment: experiment)
            for f in findings { print(f.description) }
            print(findings.isEmpty ? "\(name): ok (\(input.policy.lineage.joined(separator: " <- ")))" : "\(name): \(findings.count) finding(s)")
            return findings.isEmpty
        }
    }
}

extension PolicyLintCommand {
    /// `-C DIR`: the experiment at or above DIR, its config and root.
    static func experiment(_ directory: String) throws -> (config: ExperimentConfig, root: String) {
        let start = directory.hasPrefix("/") ? directory : FileManager.default.currentDirectoryPath + "/" + directory
        guard let layout = ExperimentLayout.find(from: start) else { throw ValidationError("-C \(directory): no experiment_config.yaml here or above") }
        return (try ExperimentConfig.load(layout.config), layout.root)
    }

    static func role(_ name: String?) throws -> PolicyRole? {
        guard let name else { return nil }
        guard let r = PolicyRole(rawValue: name) else {
            throw ValidationError("--role \(name): one of \(PolicyRole.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return r
    }
}

struct PolicyDiffCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "diff",
        abstract: "What one policy allows that the other does not. Exit 0 if they allow the same, 1 otherwise.",
        discussion: """
            Both policies are resolved (every `extends:` merged) and their seccomp programs compiled for this \
            architecture. A line each: `+` what B allows and A does not (a system call, a mount made visible or \
            writable, a network mode or host, a larger or absent limit, Landlock lowered, a variable passed in), \
            `-` the same of A over B, `~` what differs without either allowing more (a mount's source, a \
            constant, the ids, the working directory).
            """
    )

    @Option(name: .customLong("policy-dir"), help: "Directory searched for policies named by `extends:`.")
    var policyDirs: [String] = []

    @Argument(help: "The policy compared against (a file or name).")
    var a: String

    @Argument(help: "The policy compared (a file or name).")
    var b: String

    func run() throws {
        let loader = PolicyLocator.loader(policyDirs)
        var loaded: [(Policy, Set<String>)] = []
        try PolicyCheck.judge([a, b], loader) { name in
            let p = try loader.load(name, requireAllPlaceholders: false)
            loaded.append((p, try SeccompCompiler.compile(p.effectiveSeccomp).allowedNames))
            return true
        }
        let lines = PolicyDiff.lines(loaded[0].0, loaded[1].0, allowedA: loaded[0].1, allowedB: loaded[1].1)
        for l in lines { print(l.description) }
        let (plus, minus) = (lines.filter { $0.side == .onlyB }.count, lines.filter { $0.side == .onlyA }.count)
        print(lines.isEmpty ? "\(a) and \(b) allow the same" : "\(b) allows \(plus) thing(s) \(a) does not; \(a) allows \(minus) \(b) does not; \(lines.count - plus - minus) differ otherwise")
        if !lines.isEmpty { throw ExitCode(Exit.failure) }
    }
}

struct PolicyShow: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "show",
        abstract: "Print a resolved policy: mount table, syscall allowlist, limits and how they are enforced, network, environment."
    )

    @Option(name: .customLong("policy-dir"), help: "Directory of policy files, searched first.")
    var policyDirs: [String] = []

    @Option(name: .customLong("var"), help: ArgumentHelp("Value for a placeholder; with all values given, sources are resolved on this host.", valueName: "NAME=VALUE"))
    var variables: [String] = []

    @Flag(help: "Machine-readable output.")
    var json = false

    @Argument(help: "Policy name or file.")
    var policy: String

    func run() throws {
        var vars: [String: String] = [:]
        for v in variables {
            guard let eq = v.firstIndex(of: "=") else { throw ValidationError("--var \(v): expected NAME=VALUE") }
            vars[String(v[..<eq])] = String(v[v.index(after: eq)...])
        }
        let loader = PolicyLocator.loader(policyDirs)
        let p = try loader.load(policy, variables: vars, requireAllPlaceholders: false)
        let filter: CompiledFilter
        do { filter = try SeccompCompiler.compile(p.effectiveSeccomp) } catch {
            // A syscall this architecture lacks is a mistake in the policy, not in a sandbox.
            throw PolicyError("\(policy)", cause: error)
        }
        // Resolve against this host when every placeholder has a value.
        let plan = PolicyLoader.placeholders(in: p).isEmpty
            ? try? PlanCompiler.compile(policy: p, command: ["/bin/true"], hostEnvironment: [:]) : nil
        let host = CgroupHost.detect()
        var limitRows: [(String, String, String)] = []
        let l = p.limits
        func row(_ k: String, _ v: String?, _ how: String) { if let v { limitRows.append((k, v, how)) } }
        // Read-only: a controller the first launch would enable (v2 delegation) counts.
        let placed = host.plan(for: l, assumingDelegation: true)
        func cg(_ c: String) -> String {
            guard let p = placed.first(where: { $0.controller == c }) else { return "NOT ENFORCEABLE on this host: \(host.unusable(c))" }
            let pending = p.version == 2 && host.v2?.controllers.contains(c) == false ? " (enabled by the first launch)" : ""
            return "cgroup v\(p.version) \(c) under \(p.parent)\(pending)"
        }
        row("memory", l.memory.map(ByteSize.format), cg("memory"))
        row("pids", l.pids.map { String($0) }, cg("pids"))
        row("cpus", l.cpus.map { String($0) }, cg("cpu"))
        row("nofile", l.nofile.map { String($0) }, "rlimit")
        row("nproc", l.nproc.map { String($0) }, "rlimit")
        row("fsize", l.fsize.map(ByteSize.format), "rlimit")
        row("cpu_seconds", l.cpuSeconds.map { String($0) }, "rlimit")
        row("core", "0", "rlimit (always)")
        row("timeout", l.timeoutSeconds.map { DurationString.format($0) }, "supervisor kills the pid namespace")

        let mounts: [(String, String, String, String)] = plan.map { pl in
            pl.mounts.map { m in
                switch m.kind {
                case .bind(let s, let ro, _, _, _, let nosym): return (ro ? "ro" : "rw", m.destination, s + (nosym ? " (no symlinks)" : ""), m.origin)
                case .tmpfs(let size, let mode): return ("tmpfs", m.destination, "size=\(ByteSize.format(size)) mode=\(String(mode, radix: 8))", m.origin)
                case .hide: return ("hide", m.destination, "", m.origin)
                case .symlink(let t): return ("symlink", m.destination, t, m.origin)
                }
            }
        } ?? p.mounts.map { m in
            let detail: String
            switch m.kind {
            case .readOnly(let s), .readWrite(let s): detail = s + (m.optional ? " (optional)" : "")
            case .tmpfs(let size, let mode): detail = "size=\(size.map(ByteSize.format) ?? "64M") mode=\(String(mode, radix: 8))"
            case .hide: detail = ""
            case .symlink(let t): detail = t
            }
            return (m.kindName, m.destination, detail, m.location.map { "\($0)" } ?? "")
        }
        let always: [(String, String, String, String)] = [
            ("proc", "/proc", "fresh procfs (sys, sysrq-trigger, irq, bus, fs read-only)", "built in"),
            ("dev", "/dev", "tmpfs: null zero full random urandom tty, pts, shm", "built in"),
        ]

        if json {
            let obj: [String: Any] = [
                "name": p.name, "lineage": p.lineage, "description": p.description ?? "",
                "chdir": p.chdir,
                "identity": ["uid": p.identity.uid, "gid": p.identity.gid, "host_uid": p.identity.hostUID,
                             "host_gid": p.identity.hostGID, "hostname": p.identity.hostname],
                "mounts": (mounts + always).map { ["type": $0.0, "destination": $0.1, "source": $0.2, "origin": $0.3] },
                "skipped_mounts": plan?.skippedMounts ?? [],
                "network": ["mode": p.network.mode.rawValue, "allow": p.network.allow],
                "seccomp": ["profile": p.seccomp.profile, "default_action": p.seccomp.defaultAction.description, "watch_links": p.seccomp.watchLinks,
                            "allowed": filter.allowed, "denied_eperm": filter.denied,
                            "argument_rules": argumentRules(p), "bpf_instructions": filter.instructionCount,
                            "unresolved_on_this_host": filter.unresolved],
                "limits": limitRows.map { ["limit": $0.0, "value": $0.1, "enforced_by": $0.2] },
                "env": ["set": p.env.set, "pass": p.env.pass],
            ]
            let data = try JSONSerialization.data(withJSONObject: obj, options: [.prettyPrinted, .sortedKeys])
            print(String(decoding: data, as: UTF8.self))
            return
        }
        print("policy \(p.name)  (\(p.lineage.joined(separator: " <- ")))")
        if let d = p.description { print("  \(d)") }
        print("\nidentity: uid \(p.identity.uid) gid \(p.identity.gid) inside -> host \(p.identity.hostUID):\(p.identity.hostGID); hostname \(p.identity.hostname); no capabilities; no_new_privs")
        print("working directory: \(p.chdir)")
        print("\nfilesystem (root is an empty read-only tmpfs; binds are nosuid,nodev):")
        for m in mounts + always { print("  \(pad(m.0, 8)) \(pad(m.1, 28)) \(m.2)\(m.3.isEmpty ? "" : "   [\(m.3)]")") }
        for s in plan?.skippedMounts ?? [] { print("  (skipped, source missing: \(s))") }
        print("\nnetwork: \(p.network.mode.rawValue)\(p.network.allow.isEmpty ? "" : " allow " + p.network.allow.joined(separator: ", "))")
        print("\nlimits:")
        for r in limitRows { print("  \(pad(r.0, 12)) \(pad(r.1, 8)) \(r.2)") }
        print("\nseccomp: profile \(p.seccomp.profile), default \(p.seccomp.defaultAction), \(filter.instructionCount) BPF instructions; refused calls are reported")
        print("  allowed (\(filter.allowed.count)): \(filter.allowed.joined(separator: " "))")
        print("  argument rules: \(argumentRules(p).joined(separator: "; "))")
        print("  denied with EPERM (\(filter.denied.count)): \(filter.denied.joined(separator: " "))")
        let emulated = SyscallProfile.emulated.subtracting(filter.denied).subtracting(filter.allowed).sorted()
        if !filter.quiet.isEmpty { print("  refused with ENOSYS, not reported (seccomp.quiet): \(filter.quiet.joined(separator: " "))") }
        if !emulated.isEmpty { print("  answered by the supervisor with constants, not reported: \(emulated.joined(separator: " "))") }
        if !p.seccomp.watchLinks.isEmpty {
            print("  symlink symlinkat: made, and recorded when the link leads into \(p.seccomp.watchLinks.joined(separator: " or ")) (seccomp.watch_links)")
        }
        print("  other ABIs (i386, x32): refused with ENOSYS and reported")
        if !filter.unresolved.isEmpty { print("  not known to this libseccomp (left out): \(filter.unresolved.joined(separator: " "))") }
        print("\nenvironment (nothing else is inherited):")
        for (k, v) in p.env.set.sorted(by: { $0.key < $1.key }) { print("  \(k)=\(v)") }
        if !p.env.pass.isEmpty { print("  passed from the supervisor: \(p.env.pass.joined(separator: " "))") }
    }

    private func argumentRules(_ p: Policy) -> [String] {
        [
            "clone only without namespace flags",
            "clone3 -> ENOSYS (libc falls back to clone)",
            "ioctl only " + ArgumentRules.allowedIoctls.map(\.name).joined(separator: ", "),
            "personality only PER_LINUX, ADDR_NO_RANDOMIZE or query",
            "socket only AF_UNIX, AF_INET, AF_INET6 with protocol 0, ICMP, TCP, UDP, ICMPv6 or MPTCP" + (p.effectiveSeccomp.netlinkRoute ? ", AF_NETLINK with NETLINK_ROUTE" : " (no netlink: network none)"),
            "socketpair only AF_UNIX",
            "prctl only " + ArgumentRules.allowedPrctlOptions.map(\.name).joined(separator: ", ") + (p.seccomp.deny.contains("seccomp") ? "" : ", PR_SET_SECCOMP"),
            "fcntl only " + ArgumentRules.allowedFcntlCommands.map(\.name).joined(separator: ", "),
            "getsockopt, setsockopt at SOL_SOCKET only options " + ArgumentRules.allowedSocketOptionRanges.map { "\($0.lowerBound)-\($0.upperBound)" }.joined(separator: ", "),
            "fadvise64 without WILLNEED/DONTNEED; preadv2/pwritev2 without RWF_NOWAIT",
        ]
    }

    private func pad(_ s: String, _ n: Int) -> String { s.count >= n ? s : s + String(repeating: " ", count: n - s.count) }
}

struct PolicyExport: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write a policy's seccomp allowlist for another engine: an OCI runtime-spec seccomp profile (JSON).",
        discussion: """
            The same allowlist and argument rules the sandbox's own filter is built from, as a \
            profile runc, crun, podman (--security-opt seccomp=FILE) and Kubernetes (a localhost \
            profile) load. What the format cannot express is printed on standard error: refused \
            calls are not recorded (no supervisor sees them), the syscalls our supervisor answers \
            itself are refused, calls from other ABIs get the runtime's action. Checked under \
            podman against our own refusals on the escape suite's syscalls (test: \
            OCISeccompTests.swift, podmanRefusesWhatWeRefuse).
            """)

    @Option(name: .customLong("policy-dir"), help: "Directory of policy files, searched first.")
    var policyDirs: [String] = []

    @Option(help: "The output format; only oci-seccomp.")
    var format: String = "oci-seccomp"

    @Option(name: [.customShort("o"), .customLong("out")], help: "Where to write it (default: standard output).")
    var out: String?

    @Argument(help: "Policy name or file.")
    var policy: String

    func run() throws {
        guard format == "oci-seccomp" else { throw ValidationError("--format \(format): the only format is oci-seccomp") }
        let p = try PolicyLocator.loader(policyDirs).load(policy, requireAllPlaceholders: false)
        let export: OCISeccompProfile.Export
        do { export = try OCISeccompProfile.export(p.effectiveSeccomp) } catch { throw PolicyError("\(policy)", cause: error) }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        let bytes = Array(try encoder.encode(export.profile)) + [0x0A]
        for n in export.notes { printErr("policy export: \(p.name): \(n)") }
        if let out { try AtomicFile.write(bytes, to: out, mode: 0o644) } else { FileHandle.standardOutput.write(Data(bytes)) }
    }
}
