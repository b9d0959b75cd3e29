import CSystemCalls
import CSeccomp
import Glibc
import SupervisorIO
import PolicyModel

/// A seccomp program ready to hand to the launcher, plus what the supervisor needs to
/// answer its notifications.
public struct CompiledFilter: Sendable {
    /// `struct sock_filter` records, 8 bytes each.
    public var bpf: [UInt8]
    public var instructionCount: Int { bpf.count / 8 }
    /// Names allowed (unconditionally or with argument rules).
    public var allowedNames: Set<String>
    /// The same, sorted (for `policy show`; sorting 400 names is 0.1 ms no launch needs).
    public var allowed: [String] { allowedNames.sorted() }
    /// Names refused with EPERM (hard-denied plus the policy's `deny`), sorted.
    public var denied: [String]
    /// Profile names this libseccomp/kernel cannot resolve (left out; they fail like any
    /// unlisted syscall).
    public var unresolved: [String]
    /// Syscall numbers (native arch) refused with EPERM when they reach the supervisor.
    var eperm: Set<Int32>
    /// Syscall numbers (native arch) refused with ENOSYS so libc falls back.
    var enosys: Set<Int32>
    /// Syscall numbers (native arch) the supervisor answers itself (`SyscallProfile.emulated`).
    var emulated: Set<Int32> = []
    /// Names and numbers (native arch) refused with ENOSYS without a report (`seccomp.quiet`).
    public var quiet: [String] = []
    var quietNumbers: Set<Int32> = []
    public var defaultAction: SeccompAction
    /// symlink and symlinkat (native numbers) when `seccomp.watch_links` names directories:
    /// they reach the supervisor, which records a link into one of `watchLinks` and lets the
    /// call go on (`LinkWatch`).
    var linkWatched: Set<Int32> = []
    var watchLinks: [String] = []

    /// Whether a held payload can wait for its go-ahead (`recv` on a socket: recvfrom) with
    /// this filter loaded. recvfrom carries no argument rule in the profile, so allowed means
    /// allowed for that call.
    var allowsWaitingAfterLoad: Bool {
        allowedNames.contains("recvfrom") && !denied.contains("recvfrom") && !quiet.contains("recvfrom") && !bpf.isEmpty
    }

    static let socketNumber = SeccompCompiler.resolve("socket") ?? -1

    /// The errno to answer a refused call with, or nil when the sandbox is to be killed.
    func refusal(nr: Int32, nativeArch: Bool) -> Int32? {
        if nativeArch {
            // A socket family or protocol the filter refuses is one this kernel "lacks", as
            // the kernel itself answers for one it does: programs take that for "not here" and
            // go on (shadow's useradd, through libaudit, aborts a package install on EPERM
            // from a NETLINK_AUDIT socket and carries on after EAFNOSUPPORT). Still reported.
            if nr == Self.socketNumber && allowedNames.contains("socket") && !denied.contains("socket") { return EAFNOSUPPORT }
            if eperm.contains(nr) { return EPERM }
            if enosys.contains(nr) { return ENOSYS }
        } else {
            return ENOSYS  // i386/x32 entry points never run, whatever the default action
        }
        switch defaultAction {
        case .errno(let e): return e
        case .kill: return nil
        }
    }
}

public enum SeccompCompiler {
    /// Compiles a policy's seccomp section for the native architecture.
    ///
    /// Every syscall without an allow rule (and every call from another ABI: i386 via
    /// `int 0x80`, x32) becomes a user notification, so the supervisor reports it and picks
    /// the errno. An unknown name in the policy's `allow`/`deny` is an error.
    ///
    /// `chroot`: let `chroot` through. Never a policy's to say: the launch plan passes it where
    /// the payload's root keeps CAP_SYS_CHROOT, on a task's own image (`Capabilities.imageRoot`);
    /// everywhere else it is hard-denied.
    public static func compile(_ spec: SeccompSpec, chroot: Bool = false) throws(SandboxError) -> CompiledFilter {
        // A supervisor compiles the same few sections for every task: the result depends
        // only on the section (and this process's libseccomp), so it is kept.
        if let hit = compiled.withLock({ compiled.value.first { $0.spec == spec && $0.chroot == chroot }?.filter }) { return hit }
        // A one-shot launch (`sandbox exec`) finds the whole section's result on disk: the
        // 400 names resolved through libseccomp's tables cost 0.2 ms, the export more.
        let sectionKey = FilterCache.sectionKey(spec, chroot: chroot)
        let filter: CompiledFilter
        if let stored = FilterCache.loadSection(key: sectionKey) {
            filter = stored
        } else {
            filter = try compileUncached(spec, chroot: chroot)
            FilterCache.storeSection(key: sectionKey, filter: filter)
        }
        compiled.withLock {
            if compiled.value.count >= 16 { compiled.value.removeAll() }
            compiled.value.append((spec, chroot, filter))
        }
        return filter
    }

    /// Sections compiled by this process, most 16.
    private static let compiled = Locked<[(spec: SeccompSpec, chroot: Bool, filter: CompiledFilter)]>([])

    /// What a section allows, and how.
    struct RuleSets {
        var allow: Set<String>
        /// Allowed with argument checks (`FilterEmitter.condition`).
        var conditional: Set<String>
        var denied: Set<String>
        var quiet: Set<String>
        /// The numbers allowed outright, sorted.
        var unconditional: [Int32]
        /// Names this host cannot resolve, sorted.
        var unresolved: [String]
    }

    static func ruleSets(_ spec: SeccompSpec, chroot: Bool = false) throws(SandboxError) -> RuleSets {
        guard spec.profile == "default" else {
            throw SandboxError(.invalidPolicy, "seccomp.profile: unknown profile '\(spec.profile)' (allowed: default)")
        }
        for name in spec.allow where SyscallProfile.hardDenied.contains(name) {
            throw SandboxError(.invalidPolicy, "seccomp.allow: '\(name)' is always denied and cannot be allowed")
        }
        for name in spec.quiet where SyscallProfile.hardDenied.contains(name) {
            throw SandboxError(.invalidPolicy, "seccomp.quiet: '\(name)' is always denied and always reported")
        }
        for name in spec.allow + spec.deny + spec.quiet where resolve(name) == nil {
            throw SandboxError(.invalidPolicy, "seccomp: unknown syscall '\(name)' on this architecture")
        }
        let quiet = Set(spec.quiet)
        let deny = Set(spec.deny).subtracting(quiet)
        var allow = Set(SyscallProfile.defaultAllow).union(spec.allow).subtracting(deny).subtracting(quiet)
        allow.subtract(SyscallProfile.hardDenied)
        // Root on a task's image with CAP_SYS_CHROOT (`compile`'s `chroot`, never a policy's).
        var hardDenied = SyscallProfile.hardDenied
        if chroot {
            allow.insert("chroot")
            hardDenied.remove("chroot")
        }
        // Watched: not allowed outright, so each call reaches the supervisor first.
        if !spec.watchLinks.isEmpty { allow.subtract(SyscallProfile.linkCalls) }
        var conditional = SyscallProfile.conditional.subtracting(deny).subtracting(quiet)
        // prctl by option (ArgumentRules.allowedPrctlOptions). Without `seccomp`,
        // prctl(PR_SET_SECCOMP) is the other way to stack a filter (one whose errno answers
        // would take precedence over ours and hide calls from the audit): not in the list then.
        conditional.formUnion(SyscallProfile.ruledWhenAllowed.intersection(allow))
        var unresolved: [String] = []
        var unconditional: [Int32] = []
        for name in allow where !conditional.contains(name) {
            if let nr = resolve(name) { unconditional.append(nr) } else { unresolved.append(name) }
        }
        // By number: the key and the rule order are the same for the same set, and sorting
        // integers is a fraction of sorting the names.
        unconditional.sort()
        unresolved.sort()
        return RuleSets(allow: allow, conditional: conditional, denied: hardDenied.union(deny), quiet: quiet,
                        unconditional: unconditional, unresolved: unresolved)
    }

    static func compileUncached(_ spec: SeccompSpec, chroot: Bool = false) throws(SandboxError) -> CompiledFilter {
        let rules = try ruleSets(spec, chroot: chroot)
        let (allow, conditional, denied, quiet, unconditional, unresolved) =
            (rules.allow, rules.conditional, rules.denied, rules.quiet, rules.unconditional, rules.unresolved)
        let refusedForms = denied.union(conditional)  // conditional: their refused argument forms
        let v = seccomp_version().pointee
        let key = """
            autoharness seccomp v3 \(RootOwnedCache.frame(RootOwnedCache.binaryIdentity))
            libseccomp \(v.major).\(v.minor).\(v.micro) arch \(seccomp_arch_native())
            allow \(unconditional.map(String.init).joined(separator: " "))
            conditional \(conditional.sorted().joined(separator: " "))
            clone-mask \(ArgumentRules.namespaceFlags) ioctl-allow \(ArgumentRules.allowedIoctls.map { String($0.value) }.joined(separator: ","))
            personality \(ArgumentRules.allowedPersonalities.map { String($0) }.joined(separator: ",")) ptrace \(ArgumentRules.allowedPtraceRequests.map { String($0) }.joined(separator: ","))
            socket \(ArgumentRules.allowedSocketFamilies.map { String($0) }.joined(separator: ",")) protocols \(ArgumentRules.allowedSocketProtocols.map { String($0) }.joined(separator: ",")) netlink \(spec.netlinkRoute ? "\(ArgumentRules.netlinkFamily)/\(ArgumentRules.netlinkRoute)" : "none") socketpair \(ArgumentRules.allowedSocketpairFamilies.map { String($0) }.joined(separator: ","))
            fadvise \(ArgumentRules.allowedFadvice.map { String($0) }.joined(separator: ",")) rwf-nowait \(ArgumentRules.rwfNowait) statx-refused \(ArgumentRules.statxUniqueMountID) inotify-refused \(ArgumentRules.inotifyMoveEvents)
            prctl-allow \(ArgumentRules.allowedPrctlOptions.map { String($0.value) }.joined(separator: ","))
            fcntl-allow \(ArgumentRules.allowedFcntlCommands.map { String($0.value) }.joined(separator: ","))
            getsockopt-setsockopt-allowed \(ArgumentRules.solSocket):\(ArgumentRules.allowedSocketOptionRanges.map { "\($0.lowerBound)-\($0.upperBound)" }.joined(separator: ","))
            """
        let bpf: [UInt8]
        if let cached = FilterCache.lookup(key: key) {
            bpf = cached
        } else {
            let seccompAllowed = allow.contains("seccomp")
            if let own = emit(unconditional: unconditional, conditional: conditional, netlinkRoute: spec.netlinkRoute, seccompAllowed: seccompAllowed) {
                bpf = own
            } else {
                bpf = try build(unconditional: unconditional, conditional: conditional, netlinkRoute: spec.netlinkRoute, seccompAllowed: seccompAllowed)
            }
            FilterCache.store(key: key, bpf: bpf)
            FilterCache.remember(key: key, bpf: bpf)
        }
        return CompiledFilter(
            bpf: bpf,
            allowedNames: allow.union(conditional),
            denied: denied.sorted(),
            unresolved: unresolved,
            eperm: Set(refusedForms.compactMap(resolve)),
            enosys: Set(SyscallProfile.enosysFallback.compactMap(resolve)),
            emulated: Set(SyscallProfile.emulated.subtracting(denied).subtracting(allow).subtracting(quiet).compactMap(resolve)),
            quiet: quiet.sorted(),
            quietNumbers: Set(quiet.compactMap(resolve)),
            defaultAction: spec.defaultAction,
            linkWatched: spec.watchLinks.isEmpty ? [] : Set(SyscallProfile.linkCalls.subtracting(denied).subtracting(quiet).compactMap(resolve)),
            watchLinks: spec.watchLinks
        )
    }

    /// The program written here (`FilterEmitter`), or nil where it does not fit (libseccomp's
    /// is used then).
    static func emit(unconditional: [Int32], conditional: Set<String>, netlinkRoute: Bool = true, seccompAllowed: Bool = false) -> [UInt8]? {
        var conditions: [Int32: FilterEmitter.Condition] = [:]
        for name in conditional {
            guard let nr = resolve(name) else { continue }
            guard let c = FilterEmitter.condition(for: name, netlinkRoute: netlinkRoute, seccompAllowed: seccompAllowed) else { return nil }
            conditions[nr] = c
        }
        return FilterEmitter.emit(allow: unconditional, conditional: conditions)
    }

    /// libseccomp's program for the same rules.
    static func build(unconditional: [Int32], conditional: Set<String>, netlinkRoute: Bool = true, seccompAllowed: Bool = false) throws(SandboxError) -> [UInt8] {
        guard let ctx = seccomp_init(ahs_act_notify()) else {
            throw SandboxError(.seccomp, "seccomp_init failed")
        }
        defer { seccomp_release(ctx) }
        try check(seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, ahs_act_notify()), "set bad-arch action")
        // A binary search over syscall numbers keeps the per-call cost flat as the list grows.
        try check(seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2), "enable binary-tree optimisation")
        for nr in unconditional {
            try check(seccomp_rule_add_array(ctx, ahs_act_allow(), nr, 0, nil), "allow syscall \(nr)")
        }
        for rule in ArgumentRuleList.rules(conditional: conditional, netlinkRoute: netlinkRoute, seccompAllowed: seccompAllowed) {
            guard let nr = resolve(rule.name) else { continue }
            try addRule(ctx, nr, rule.name, rule.comparisons.map { c in
                c.mask.map { ahs_arg(c.index, SCMP_CMP_MASKED_EQ, $0, c.value) } ?? ahs_arg(c.index, SCMP_CMP_EQ, c.value, 0)
            })
        }
        return try export(ctx)
    }

    /// The native syscall number for a name, or nil if this architecture has none.
    public static func resolve(_ name: String) -> Int32? {
        let nr = seccomp_syscall_resolve_name_arch(ahs_arch_native(), name)
        return nr < 0 ? nil : nr
    }

    /// The name of syscall `nr` for an AUDIT_ARCH value (as seccomp notifications carry).
    public static func name(nr: Int32, arch: UInt32) -> String {
        func lookup(_ token: UInt32, _ n: Int32) -> String? {
            guard let cname = seccomp_syscall_resolve_num_arch(token, n) else { return nil }
            defer { free(cname) }
            return String(cString: cname)
        }
        if arch == ahs_arch_x86_64() && nr & 0x4000_0000 != 0 {
            let n = lookup(ahs_arch_x32(), nr) ?? lookup(ahs_arch_x86_64(), nr & ~0x4000_0000)
            return "x32:" + (n ?? "syscall_\(nr & ~0x4000_0000)")
        }
        if arch == ahs_arch_x86() {
            return "i386:" + (lookup(arch, nr) ?? "syscall_\(nr)")
        }
        return lookup(arch, nr) ?? "syscall_\(nr)"
    }

    /// Whether an AUDIT_ARCH value is the one this supervisor was built for (and not x32).
    static func isNative(arch: UInt32, nr: Int32) -> Bool {
        arch == seccomp_arch_native() && nr & 0x4000_0000 == 0
    }

    private static func addRule(_ ctx: scmp_filter_ctx, _ nr: Int32, _ what: String, _ args: [scmp_arg_cmp]) throws(SandboxError) {
        let rc = args.withUnsafeBufferPointer { buf in
            seccomp_rule_add_array(ctx, ahs_act_allow(), nr, UInt32(buf.count), buf.baseAddress)
        }
        try check(rc, "argument rule for \(what)")
    }

    private static func check(_ rc: Int32, _ what: String) throws(SandboxError) {
        if rc != 0 {
            throw SandboxError(.seccomp, "libseccomp: \(what): \(String(cString: strerror(-rc)))")
        }
    }

    private static func export(_ ctx: scmp_filter_ctx) throws(SandboxError) -> [UInt8] {
        // libseccomp 2.5 exports to a file descriptor only; an anonymous memory file keeps
        // the program off disk.
        let fd = ahs_memfd("autoharness-bpf")
        guard fd >= 0 else { throw SandboxError(.seccomp, "memfd_create: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        try check(seccomp_export_bpf(ctx, fd), "export BPF")
        let size = lseek(fd, 0, SEEK_END)
        guard size > 0, size % 8 == 0, lseek(fd, 0, SEEK_SET) == 0 else {
            throw SandboxError(.seccomp, "exported BPF has unexpected size \(size)")
        }
        var bytes = [UInt8](repeating: 0, count: Int(size))
        let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, Int(size), 0) }
        guard n == size else { throw SandboxError(.seccomp, "reading exported BPF failed") }
        guard size / 8 <= 4096 else { throw SandboxError(.seccomp, "filter too long (\(size / 8) instructions)") }
        return bytes
    }
}
