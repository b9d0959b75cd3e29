import CSeccomp
import Glibc

/// The seccomp program for an allowlist, written here instead of by libseccomp.
///
/// The kernel checks and compiles a filter in time proportional to its length on every load,
/// and every sandbox's payload loads one on the launch's critical path. libseccomp's program
/// for `benchmark-task` is a binary tree with one compare per allowed number and a rule per
/// argument form (the prctl complement alone is dozens of rules of two 32-bit compares, the
/// getsockopt allowlist one rule per option); this one is about a third as long (197
/// instructions against 734 when getsockopt had two refusals), with the same answer
/// for every input (test: SeccompEmitterTests.emitterMatchesLibseccomp runs both through a
/// BPF interpreter over every syscall number, both foreign ABIs and each conditional call's
/// argument forms):
/// - the architecture and the x32 bit first, as libseccomp does;
/// - a binary search over *runs* of syscall numbers with one answer (allow, notify, or one
///   conditional call's argument checks): 92 runs for the default profile, one `jge` each;
/// - per conditional call, its argument checks, each one or two loads and a compare per value
///   (two per range of values).
///
/// libseccomp still names every syscall (`SeccompCompiler.resolve`) and remains the program
/// for a policy whose search does not fit cBPF's 8-bit jumps (`emit` returns nil).
enum FilterEmitter {
    /// One test of a syscall argument. The kernel passes each as 64 bits: two 32-bit words.
    enum ArgCheck: Hashable {
        /// The low 32 bits are one of `values` (the kernel reads the argument as an int).
        case low(arg: Int, in: [UInt32])
        /// The low 32 bits are none of `values`.
        case lowNot(arg: Int, in: [UInt32])
        /// The low 32 bits are in one of `ranges` (disjoint).
        case lowRanges(arg: Int, [ClosedRange<UInt32>])
        /// All 64 bits are one of `values`.
        case full(arg: Int, in: [UInt64])
        /// No bit of `mask` is set, over 64 bits.
        case clear(arg: Int, mask: UInt64)
    }

    /// Allowed when any alternative holds; an alternative holds when each of its checks does.
    typealias Condition = [[ArgCheck]]

    /// The argument rules of `SyscallProfile.conditional` (and prctl when `seccomp` is
    /// denied), as `SeccompCompiler.build` gives them to libseccomp.
    static func condition(for name: String, netlinkRoute: Bool = true, seccompAllowed: Bool = false) -> Condition? {
        switch name {
        case "clone": return [[.clear(arg: 0, mask: ArgumentRules.namespaceFlags)]]
        case "ioctl": return [[.low(arg: 1, in: ArgumentRules.allowedIoctls.map(\.value))]]
        case "prctl":
            return [[.low(arg: 0, in: ArgumentRules.allowedPrctlOptions.map(\.value) + (seccompAllowed ? [ArgumentRules.prctlSetSeccomp] : []))]]
        case "fcntl": return [[.low(arg: 1, in: ArgumentRules.allowedFcntlCommands.map(\.value))]]
        case "personality": return [[.full(arg: 0, in: ArgumentRules.allowedPersonalities)]]
        case "ptrace": return [[.full(arg: 0, in: ArgumentRules.allowedPtraceRequests)]]
        case "fadvise64": return [[.full(arg: 3, in: ArgumentRules.allowedFadvice)]]
        case "preadv2", "pwritev2": return [[.clear(arg: 5, mask: ArgumentRules.rwfNowait)]]
        case "statx": return [[.clear(arg: 3, mask: ArgumentRules.statxUniqueMountID)]]
        case "inotify_add_watch": return [[.clear(arg: 2, mask: ArgumentRules.inotifyMoveEvents)]]
        case "socket":
            let families: Condition = [[.full(arg: 0, in: ArgumentRules.allowedSocketFamilies), .low(arg: 2, in: ArgumentRules.allowedSocketProtocols)]]
            return netlinkRoute ? families + [[.full(arg: 0, in: [ArgumentRules.netlinkFamily]), .full(arg: 2, in: [ArgumentRules.netlinkRoute])]] : families
        case "getsockopt", "setsockopt":
            // Any level but SOL_SOCKET, or an option SOL_SOCKET allows.
            return [[.lowNot(arg: 1, in: [ArgumentRules.solSocket])], [.lowRanges(arg: 2, ArgumentRules.allowedSocketOptionRanges)]]
        case "socketpair": return [[.full(arg: 0, in: ArgumentRules.allowedSocketpairFamilies)]]
        default: return nil
        }
    }

    // Classic BPF (linux/filter.h, linux/bpf_common.h) and seccomp_data's layout.
    static let ldAbs: UInt16 = 0x20       // BPF_LD | BPF_W | BPF_ABS
    static let jeq: UInt16 = 0x15         // BPF_JMP | BPF_JEQ | BPF_K
    static let jgt: UInt16 = 0x25         // BPF_JMP | BPF_JGT | BPF_K
    static let jge: UInt16 = 0x35         // BPF_JMP | BPF_JGE | BPF_K
    static let jset: UInt16 = 0x45        // BPF_JMP | BPF_JSET | BPF_K
    static let ja: UInt16 = 0x05          // BPF_JMP | BPF_JA
    static let ret: UInt16 = 0x06         // BPF_RET | BPF_K
    static let nrOffset: UInt32 = 0
    static let archOffset: UInt32 = 4
    /// args[i] at 16 + 8i; on a little-endian machine its low word first.
    static func low(_ arg: Int) -> UInt32 { 16 + 8 * UInt32(arg) }
    static func high(_ arg: Int) -> UInt32 { 20 + 8 * UInt32(arg) }
    /// __X32_SYSCALL_BIT: x32 calls enter the x86_64 table with it set.
    static let x32Bit: UInt32 = 0x4000_0000

    /// Where a jump goes before the program is laid out.
    enum Target: Hashable {
        case next, allow, notify
        /// A conditional call's checks.
        case block(Int32)
        /// A node of the search.
        case node(Int)
        /// An instruction, by index (inside a block: from the block's start until placed).
        case at(Int)
    }

    struct Insn {
        var code: UInt16
        var k: UInt32
        var jt: Target = .next
        var jf: Target = .next
    }

    /// The program: native-architecture calls numbered in `allow` pass, those in
    /// `conditional` pass when their argument checks hold, everything else (another ABI
    /// included) goes to the supervisor as a user notification. Nil when a jump would not
    /// fit in 8 bits (then libseccomp's program is used).
    static func emit(allow: [Int32], conditional: [Int32: Condition], arch: UInt32 = seccomp_arch_native()) -> [UInt8]? {
        guard 1.littleEndian == 1 else { return nil }
        var answer: [Int32: Target] = [:]
        for nr in allow { answer[nr] = .allow }
        // Calls with the same checks (getsockopt and setsockopt) share one block: the lowest
        // number of them names it.
        var shared: [Int32: Int32] = [:]
        for nr in conditional.keys.sorted() {
            shared[nr] = conditional.keys.sorted().first { conditional[$0]! == conditional[nr]! }!
            answer[nr] = .block(shared[nr]!)
        }
        // Runs of numbers with one answer, each from its first number; from 0, the last one
        // (above the highest number listed) notifying.
        var runs: [(from: UInt32, to: Target)] = []
        let highest = answer.keys.max() ?? -1
        if highest >= 0 {
            for nr in 0...highest {
                let a = answer[nr] ?? .notify
                if runs.last?.to != a { runs.append((UInt32(nr), a)) }
            }
        }
        if runs.last?.to != .notify { runs.append((UInt32(highest + 1), .notify)) }

        var code: [Insn] = [
            Insn(code: ldAbs, k: archOffset),
            Insn(code: jeq, k: arch, jt: .next, jf: .notify),
            Insn(code: ldAbs, k: nrOffset),
        ]
        if arch == ahs_arch_x86_64() { code.append(Insn(code: jge, k: x32Bit, jt: .notify, jf: .next)) }
        var places: [Target: Int] = [:]
        var nodes = 0
        // A balanced search: each node a `jge` the first number of its upper half, the lower
        // half laid out right after it.
        func search(_ lo: Int, _ hi: Int) -> Target {
            if lo == hi { return runs[lo].to }
            let mid = (lo + hi + 1) / 2
            let node = Target.node(nodes)
            nodes += 1
            let at = code.count
            places[node] = at
            code.append(Insn(code: jge, k: runs[mid].from))
            let lower = search(lo, mid - 1)
            let upper = search(mid, hi)
            if case .node = lower { code[at].jf = .next } else { code[at].jf = lower }
            code[at].jt = upper
            return node
        }
        let root = search(0, runs.count - 1)
        if case .node = root {} else { code.append(Insn(code: ja, k: 0, jt: root)) }

        places[.allow] = code.count
        code.append(Insn(code: ret, k: ahs_act_allow()))
        places[.notify] = code.count
        code.append(Insn(code: ret, k: ahs_act_notify()))
        for nr in conditional.keys.sorted() where shared[nr] == nr {
            guard let block = checks(conditional[nr]!) else { return nil }
            let base = code.count
            places[.block(nr)] = base
            for var i in block {
                if case .at(let n) = i.jt { i.jt = .at(base + n) }
                if case .at(let n) = i.jf { i.jf = .at(base + n) }
                code.append(i)
            }
        }

        var bytes: [UInt8] = []
        bytes.reserveCapacity(code.count * 8)
        for (i, insn) in code.enumerated() {
            var jt: UInt8 = 0, jf: UInt8 = 0
            var k = insn.k
            if insn.code == ja {
                guard let to = distance(insn.jt, places, from: i) else { return nil }
                k = UInt32(to)
            } else if insn.code & 0x07 == 0x05 {
                guard let t = distance(insn.jt, places, from: i), let f = distance(insn.jf, places, from: i), t <= 255, f <= 255 else { return nil }
                (jt, jf) = (UInt8(t), UInt8(f))
            }
            bytes += [UInt8(insn.code & 0xff), UInt8(insn.code >> 8), jt, jf,
                      UInt8(k & 0xff), UInt8(k >> 8 & 0xff), UInt8(k >> 16 & 0xff), UInt8(k >> 24)]
        }
        return bytes
    }

    /// How far forward `target` is from instruction `i` (0: the next one); nil if backwards.
    private static func distance(_ target: Target, _ places: [Target: Int], from i: Int) -> Int? {
        let at: Int
        switch target {
        case .next: return 0
        case .at(let n): at = n
        default:
            guard let p = places[target] else { return nil }
            at = p
        }
        return at > i ? at - (i + 1) : nil
    }

    /// `values` as runs of consecutive numbers, highest first.
    static func runs(_ values: [UInt32]) -> [ClosedRange<UInt32>] {
        var out: [ClosedRange<UInt32>] = []
        for v in Set(values).sorted(by: >) {
            if let r = out.last, r.lowerBound > 0, r.lowerBound - 1 == v { out[out.count - 1] = v...r.upperBound } else { out.append(v...v) }
        }
        return out
    }

    /// Where a check's compare goes: on to the instruction after the check, to the next
    /// alternative (or the refusal), or to the next instruction.
    private enum Way { case pass, fail, next }

    /// A condition's checks: its alternatives in turn, a failed check going on to the next
    /// alternative and every check of one holding allowing. Targets are `.at(n)`, n counted
    /// from the block's first instruction.
    static func checks(_ condition: Condition) -> [Insn]? {
        var out: [Insn] = []
        for (n, alternative) in condition.enumerated() {
            var failing: [(Int, jt: Bool)] = []  // jumps to the next alternative, fixed below
            for check in alternative {
                var part: [(Insn, jt: Way, jf: Way)] = []
                func load(_ offset: UInt32) { part.append((Insn(code: ldAbs, k: offset), .next, .next)) }
                switch check {
                case .low(let arg, let values):
                    // Highest first; three or more consecutive values are one range of two
                    // compares: above it fails, as every higher value was compared already.
                    load(low(arg))
                    let runs = Self.runs(values)
                    for (i, r) in runs.enumerated() {
                        let last = i == runs.count - 1
                        if r.upperBound - r.lowerBound >= 2 {
                            part.append((Insn(code: jgt, k: r.upperBound), .fail, .next))
                            part.append((Insn(code: jge, k: r.lowerBound), .pass, last ? .fail : .next))
                        } else {
                            for v in [r.upperBound, r.lowerBound].uniqued() {
                                part.append((Insn(code: jeq, k: v), .pass, last && v == r.lowerBound ? .fail : .next))
                            }
                        }
                    }
                case .lowNot(let arg, let values):
                    load(low(arg))
                    for v in values { part.append((Insn(code: jeq, k: v), .fail, .next)) }
                case .lowRanges(let arg, let ranges):
                    // From the highest range down: above it fails, in it passes, below it is
                    // the next range's question (or fails, below the lowest).
                    load(low(arg))
                    let sorted = ranges.sorted { $0.lowerBound > $1.lowerBound }
                    for (i, r) in sorted.enumerated() {
                        part.append((Insn(code: jgt, k: r.upperBound), .fail, .next))
                        part.append((Insn(code: jge, k: r.lowerBound), .pass, i == sorted.count - 1 ? .fail : .next))
                    }
                case .full(let arg, let values):
                    // The rules' values share their high word (0); a rule whose do not is
                    // left to libseccomp.
                    let high = Set(values.map { UInt32($0 >> 32) })
                    guard high.count == 1, let h = high.first else { return nil }
                    load(Self.high(arg))
                    part.append((Insn(code: jeq, k: h), .next, .fail))
                    load(low(arg))
                    for (i, v) in values.enumerated() {
                        part.append((Insn(code: jeq, k: UInt32(truncatingIfNeeded: v)), .pass, i == values.count - 1 ? .fail : .next))
                    }
                case .clear(let arg, let mask):
                    if UInt32(truncatingIfNeeded: mask) != 0 {
                        load(low(arg))
                        part.append((Insn(code: jset, k: UInt32(truncatingIfNeeded: mask)), .fail, .next))
                    }
                    if mask >> 32 != 0 {
                        load(high(arg))
                        part.append((Insn(code: jset, k: UInt32(mask >> 32)), .fail, .next))
                    }
                }
                let end = out.count + part.count
                for (insn, jt, jf) in part {
                    var i = insn
                    func target(_ w: Way, _ isTrue: Bool) -> Target {
                        switch w {
                        case .next: return .next
                        case .pass: return .at(end)
                        case .fail:
                            failing.append((out.count, isTrue))
                            return .next  // fixed below
                        }
                    }
                    i.jt = target(jt, true)
                    i.jf = target(jf, false)
                    out.append(i)
                }
            }
            // Every check held.
            out.append(Insn(code: ret, k: ahs_act_allow()))
            // A failure goes on to the next alternative, or to the refusal after the last.
            if n == condition.count - 1 { out.append(Insn(code: ret, k: ahs_act_notify())) }
            let failAt = n == condition.count - 1 ? out.count - 1 : out.count
            for (at, isTrue) in failing {
                if isTrue { out[at].jt = .at(failAt) } else { out[at].jf = .at(failAt) }
            }
        }
        return out
    }
}

private extension Array where Element == UInt32 {
    /// The elements without repeats, in order.
    func uniqued() -> [UInt32] {
        var seen = Set<UInt32>()
        return filter { seen.insert($0).inserted }
    }
}
