import PolicyModel

/// One comparison of a syscall argument: `args[index] & mask == value`, or `args[index] ==
/// value` when `mask` is nil.
public struct ArgumentComparison: Sendable, Equatable {
    public var index: UInt32
    public var mask: UInt64?
    public var value: UInt64
}

/// One way a conditional syscall is allowed: every comparison holds (a syscall with several
/// rules is allowed when any one holds).
public struct ArgumentRule: Sendable, Equatable {
    public var name: String
    public var comparisons: [ArgumentComparison]
}

/// The argument rules of a seccomp section, as one list: what libseccomp's program is built
/// from (`SeccompCompiler.build`) and what `policy export --format oci-seccomp` writes, so the
/// two cannot drift. Our own emitter (`FilterEmitter`) is held to libseccomp's program by
/// SeccompEmitterTests.
enum ArgumentRuleList {
    static func rules(conditional: Set<String>, netlinkRoute: Bool, seccompAllowed: Bool) -> [ArgumentRule] {
        var out: [ArgumentRule] = []
        func add(_ name: String, _ comparisons: ArgumentComparison...) { out.append(ArgumentRule(name: name, comparisons: comparisons)) }
        func eq(_ i: UInt32, _ v: UInt64) -> ArgumentComparison { ArgumentComparison(index: i, mask: nil, value: v) }
        func masked(_ i: UInt32, _ m: UInt64, _ v: UInt64) -> ArgumentComparison { ArgumentComparison(index: i, mask: m, value: v) }
        // The kernel reads these arguments as 32 bits, so only those are compared: garbage
        // above them cannot turn a refused request into an allowed one or back.
        let low32: UInt64 = 0xFFFF_FFFF
        if conditional.contains("clone") { add("clone", masked(0, ArgumentRules.namespaceFlags, 0)) }
        if conditional.contains("ioctl") {
            for r in ArgumentRules.allowedIoctls { add("ioctl", masked(1, low32, UInt64(r.value))) }
        }
        if conditional.contains("prctl") {
            for v in ArgumentRules.allowedPrctlOptions.map(\.value) + (seccompAllowed ? [ArgumentRules.prctlSetSeccomp] : []) {
                add("prctl", masked(0, low32, UInt64(v)))
            }
        }
        if conditional.contains("fcntl") {
            for v in ArgumentRules.allowedFcntlCommands.map(\.value) { add("fcntl", masked(1, low32, UInt64(v))) }
        }
        if conditional.contains("personality") {
            for v in ArgumentRules.allowedPersonalities { add("personality", eq(0, v)) }
        }
        if conditional.contains("ptrace") {
            for v in ArgumentRules.allowedPtraceRequests { add("ptrace", eq(0, v)) }
        }
        if conditional.contains("fadvise64") {
            for v in ArgumentRules.allowedFadvice { add("fadvise64", eq(3, v)) }
        }
        if conditional.contains("statx") { add("statx", masked(3, ArgumentRules.statxUniqueMountID, 0)) }
        if conditional.contains("inotify_add_watch") { add("inotify_add_watch", masked(2, ArgumentRules.inotifyMoveEvents, 0)) }
        for name in ["preadv2", "pwritev2"] where conditional.contains(name) { add(name, masked(5, ArgumentRules.rwfNowait, 0)) }
        if conditional.contains("socket") {
            for v in ArgumentRules.allowedSocketFamilies {
                for proto in ArgumentRules.allowedSocketProtocols { add("socket", eq(0, v), masked(2, low32, UInt64(proto))) }
            }
            if netlinkRoute { add("socket", eq(0, ArgumentRules.netlinkFamily), eq(2, ArgumentRules.netlinkRoute)) }
        }
        for name in ["getsockopt", "setsockopt"] where conditional.contains(name) {
            // Any level but SOL_SOCKET; or SOL_SOCKET with an option it allows.
            for r in ArgumentRules.complementPrefixes(excluding: [ArgumentRules.solSocket]) { add(name, masked(1, UInt64(r.mask), UInt64(r.match))) }
            for option in ArgumentRules.allowedSocketOptions {
                add(name, masked(1, low32, UInt64(ArgumentRules.solSocket)), masked(2, low32, UInt64(option)))
            }
        }
        if conditional.contains("socketpair") {
            for v in ArgumentRules.allowedSocketpairFamilies { add("socketpair", eq(0, v)) }
        }
        return out
    }
}
