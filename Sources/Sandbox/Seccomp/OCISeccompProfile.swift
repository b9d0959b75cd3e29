import Glibc
import PolicyModel

/// A policy's seccomp section as an OCI runtime-spec seccomp profile (config-linux.md,
/// "Seccomp"), for runtimes that take one (runc, crun, podman, Kubernetes' localhost
/// profiles): the same allowlist and argument rules (`ArgumentRuleList`) our filter is built
/// from. What the format cannot say is in `notes`: our filter hands every refused call to the
/// supervisor, which records it; an OCI profile refuses it silently.
public struct OCISeccompProfile: Encodable, Sendable, Equatable {
    public struct Argument: Encodable, Sendable, Equatable {
        public var index: UInt32
        public var value: UInt64
        public var valueTwo: UInt64
        public var op: String
    }
    public struct Entry: Encodable, Sendable, Equatable {
        public var names: [String]
        public var action: String
        public var errnoRet: UInt32?
        public var args: [Argument]?
    }

    public var defaultAction: String
    public var defaultErrnoRet: UInt32?
    public var architectures: [String]
    public var syscalls: [Entry]

    public struct Export: Sendable {
        public var profile: OCISeccompProfile
        /// What the profile does differently from our filter, one line each.
        public var notes: [String]
    }

    #if arch(x86_64)
    static let nativeArchitecture = "SCMP_ARCH_X86_64"
    #elseif arch(arm64)
    static let nativeArchitecture = "SCMP_ARCH_AARCH64"
    #endif

    /// Calls an OCI runtime makes after it loads the filter, before the payload starts.
    static let runtimeCalls: Set<String> = ["fstatfs"]

    public static func export(_ spec: SeccompSpec) throws(SandboxError) -> Export {
        let rules = try SeccompCompiler.ruleSets(spec)
        let known = { (name: String) in SeccompCompiler.resolve(name) != nil }
        var entries: [Entry] = []
        // Watched links (`seccomp.watch_links`) are made as if allowed: here they simply are.
        let watched = spec.watchLinks.isEmpty ? [] : SyscallProfile.linkCalls.subtracting(rules.denied).subtracting(rules.quiet).filter(known)
        let unconditional = rules.allow.subtracting(rules.conditional).union(watched).filter(known).sorted()
        entries.append(Entry(names: unconditional, action: "SCMP_ACT_ALLOW"))
        let seccompAllowed = rules.allow.contains("seccomp")
        for rule in ArgumentRuleList.rules(conditional: rules.conditional, netlinkRoute: spec.netlinkRoute, seccompAllowed: seccompAllowed) where known(rule.name) {
            // MASKED_EQ: runc and crun pass `value` as libseccomp's first datum (the mask) and
            // `valueTwo` as the second (what the masked argument must equal).
            entries.append(Entry(names: [rule.name], action: "SCMP_ACT_ALLOW", args: rule.comparisons.map { c in
                c.mask.map { Argument(index: c.index, value: $0, valueTwo: c.value, op: "SCMP_CMP_MASKED_EQ") }
                    ?? Argument(index: c.index, value: c.value, valueTwo: 0, op: "SCMP_CMP_EQ")
            }))
        }
        // Refused with ENOSYS rather than the default, as our filter answers them: so that libc
        // falls back (clone3 to clone), and the policy's `quiet` names.
        let eperm = rules.denied.union(rules.conditional)
        let enosys = SyscallProfile.enosysFallback.union(rules.quiet).subtracting(eperm).subtracting(rules.allow).filter(known).sorted()
        if !enosys.isEmpty { entries.append(Entry(names: enosys, action: "SCMP_ACT_ERRNO", errnoRet: UInt32(ENOSYS))) }
        // Hard-denied and denied names fall to the default (EPERM); listed as well, so that a
        // runtime whose default differs still refuses them. Not one with an allowed argument
        // form (ptrace's PTRACE_TRACEME): an unconditional entry would refuse that too.
        let denied = rules.denied.subtracting(rules.quiet).subtracting(rules.conditional).filter(known).sorted()
        if !denied.isEmpty { entries.append(Entry(names: denied, action: "SCMP_ACT_ERRNO", errnoRet: UInt32(EPERM))) }

        // What the runtime itself calls between loading the filter and exec'ing the payload
        // (runc checks that /proc/self/fd is procfs with fstatfs before closing descriptors).
        let runtimeNeeds = runtimeCalls.subtracting(rules.allow).subtracting(rules.denied).filter(known).sorted()
        if !runtimeNeeds.isEmpty { entries.append(Entry(names: runtimeNeeds, action: "SCMP_ACT_ALLOW")) }

        var notes = [
            "load it with no_new_privileges (podman --security-opt no-new-privileges, Kubernetes allowPrivilegeEscalation: false): without it runc installs the filter before dropping capabilities, and the prctl that drops them is refused",
            "refused calls are refused silently: our filter hands each to the supervisor, which records it as a violation (the audit); no OCI action does",
            "a conditional syscall's refused argument forms (\(rules.conditional.filter(known).sorted().joined(separator: ", "))) get the default action; ours answers EPERM (socket's: EAFNOSUPPORT)",
            "calls from other ABIs (i386 through int 0x80, x32) get the runtime's action for an architecture not listed (runc: the process is killed, SIGSYS); ours answers ENOSYS",
        ]
        if !runtimeNeeds.isEmpty {
            notes.append("\(runtimeNeeds.joined(separator: ", ")): allowed for the runtime's own set-up after the filter is loaded; our supervisor answers it with the sandbox's own numbers, here the container sees the host's (free space and inodes of its file systems)")
        }
        let emulated = SyscallProfile.emulated.subtracting(rules.denied).subtracting(rules.allow).subtracting(rules.quiet).subtracting(runtimeCalls).filter(known).sorted()
        if !emulated.isEmpty {
            notes.append("\(emulated.joined(separator: ", ")): answered by our supervisor with the sandbox's own numbers (never the host's); refused in the profile (its default action), as no OCI action can answer them")
        }
        if !watched.isEmpty {
            notes.append("\(watched.sorted().joined(separator: ", ")): allowed; our supervisor also records a link made into \(spec.watchLinks.joined(separator: ", ")) as it is made (seccomp.watch_links), which no OCI action can")
        }
        if !rules.unresolved.isEmpty { notes.append("unknown to this host's libseccomp, left out (refused by the default action, as by our filter): \(rules.unresolved.joined(separator: ", "))") }
        let defaultAction: String
        let defaultErrno: UInt32?
        switch spec.defaultAction {
        case .errno(let e): (defaultAction, defaultErrno) = ("SCMP_ACT_ERRNO", UInt32(e))
        case .kill: (defaultAction, defaultErrno) = ("SCMP_ACT_KILL_PROCESS", nil)
        }
        return Export(profile: OCISeccompProfile(defaultAction: defaultAction, defaultErrnoRet: defaultErrno, architectures: [nativeArchitecture],
                                                 syscalls: entries),
                      notes: notes)
    }
}
