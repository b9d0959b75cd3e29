import CSeccomp
import Glibc
@testable import Sandbox
import SandboxPolicy
import Testing

/// The seccomp program written here (`FilterEmitter`) must answer every call as libseccomp's
/// program for the same rules does: these run both through a classic-BPF interpreter.
@Suite("Seccomp program written here")
struct SeccompEmitterTests {
    /// seccomp_data: nr, arch, instruction pointer, six 64-bit arguments (little-endian).
    struct Call: CustomStringConvertible {
        var nr: UInt32
        var arch: UInt32
        var args: [UInt64] = Array(repeating: 0, count: 6)
        var bytes: [UInt8] {
            var b: [UInt8] = []
            func put32(_ v: UInt32) { b += (0..<4).map { UInt8(truncatingIfNeeded: v >> (8 * $0)) } }
            func put64(_ v: UInt64) { b += (0..<8).map { UInt8(truncatingIfNeeded: v >> (8 * $0)) } }
            put32(nr)
            put32(arch)
            put64(0x4000_1000)
            for a in args { put64(a) }
            return b
        }
        var description: String { "nr \(nr) arch \(String(arch, radix: 16)) args \(args.map { String($0, radix: 16) })" }
    }

    enum Outcome: Equatable { case ret(UInt32), fault(String) }

    /// Runs a classic-BPF program as the kernel's seccomp does (the instructions seccomp
    /// accepts; anything else is a fault, which fails the comparison).
    static func run(_ program: [UInt8], _ call: Call) -> Outcome {
        let data = call.bytes
        var a: UInt32 = 0, x: UInt32 = 0
        var mem = [UInt32](repeating: 0, count: 16)
        var pc = 0
        let count = program.count / 8
        func word(_ at: UInt32) -> UInt32? {
            guard at % 4 == 0, Int(at) + 4 <= data.count else { return nil }
            return (0..<4).reduce(0) { $0 | UInt32(data[Int(at) + $1]) << (8 * UInt32($1)) }
        }
        for _ in 0..<10_000 {
            guard pc < count else { return .fault("ran off the end") }
            let i = program[(pc * 8)..<(pc * 8 + 8)].map { $0 }
            let code = UInt16(i[0]) | UInt16(i[1]) << 8
            let jt = Int(i[2]), jf = Int(i[3])
            let k = (4..<8).reduce(UInt32(0)) { $0 | UInt32(i[$1]) << (8 * UInt32($1 - 4)) }
            pc += 1
            func jump(_ c: Bool) { pc += c ? jt : jf }
            switch code {
            case 0x20: guard let w = word(k) else { return .fault("load \(k)") }; a = w
            case 0x00: a = k
            case 0x01: x = k
            case 0x60: guard k < 16 else { return .fault("mem") }; a = mem[Int(k)]
            case 0x61: guard k < 16 else { return .fault("mem") }; x = mem[Int(k)]
            case 0x02: guard k < 16 else { return .fault("mem") }; mem[Int(k)] = a
            case 0x03: guard k < 16 else { return .fault("mem") }; mem[Int(k)] = x
            case 0x04: a = a &+ k
            case 0x14: a = a &- k
            case 0x54: a &= k
            case 0x44: a |= k
            case 0xa4: a ^= k
            case 0x64: a = k < 32 ? a << k : 0
            case 0x74: a = k < 32 ? a >> k : 0
            case 0x07: x = a
            case 0x87: a = x
            case 0x05: pc += Int(k)
            case 0x15: jump(a == k)
            case 0x25: jump(a > k)
            case 0x35: jump(a >= k)
            case 0x45: jump(a & k != 0)
            case 0x1d: jump(a == x)
            case 0x2d: jump(a > x)
            case 0x3d: jump(a >= x)
            case 0x4d: jump(a & x != 0)
            case 0x06: return .ret(k)
            case 0x16: return .ret(a)
            default: return .fault("opcode \(String(code, radix: 16))")
            }
        }
        return .fault("no end")
    }

    /// Both programs for `spec`'s rules.
    static func programs(_ spec: SeccompSpec) throws -> (own: [UInt8], libseccomp: [UInt8]) {
        let rules = try SeccompCompiler.ruleSets(spec)
        let seccomp = rules.allow.contains("seccomp")
        let own = try #require(SeccompCompiler.emit(unconditional: rules.unconditional, conditional: rules.conditional,
                                                    netlinkRoute: spec.netlinkRoute, seccompAllowed: seccomp))
        let reference = try SeccompCompiler.build(unconditional: rules.unconditional, conditional: rules.conditional,
                                                  netlinkRoute: spec.netlinkRoute, seccompAllowed: seccomp)
        return (own, reference)
    }

    /// Values worth trying in an argument: each rule's values, their neighbours, the same with
    /// garbage in the high word, single bits, and the extremes.
    static let interesting: [UInt64] = {
        var low: Set<UInt64> = [0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 15, 16, 17, 21, 22, 23, 56, 57, 58, 70, 71, 72,
                                0x4_0000, 0x7FFF_FFFF, 0xFFFF_FFFF, 0xFFFF_FFFE]
        for r in ArgumentRules.allowedIoctls + ArgumentRules.allowedPrctlOptions + ArgumentRules.allowedFcntlCommands {
            low.formUnion([UInt64(r.value), UInt64(r.value) + 1, UInt64(r.value) &- 1])
        }
        for v in ArgumentRules.allowedSocketProtocols { low.formUnion([UInt64(v), UInt64(v) + 1, UInt64(v) | 0x1_0000_0000]) }
        for v in ArgumentRules.allowedPersonalities + ArgumentRules.allowedFadvice + ArgumentRules.allowedSocketFamilies {
            low.formUnion([v, v + 1])
        }
        for bit in 0..<32 { low.insert(UInt64(1) << UInt64(bit)) }
        for r in ArgumentRules.allowedSocketOptionRanges {
            low.formUnion([UInt64(max(r.lowerBound, 1) - 1), UInt64(r.lowerBound), UInt64(r.upperBound), UInt64(r.upperBound) + 1])
        }
        low.insert(ArgumentRules.namespaceFlags)
        low.insert(0x0001_1200)  // CLONE_VM|CLONE_FS-style flags without namespaces
        var all = low
        for v in low { all.formUnion([v | 0x1_0000_0000, v | 0xFFFF_FFFF_0000_0000]) }
        return all.sorted()
    }()

    /// Compares the two programs on every native and x32 number below 1024 (plain
    /// arguments), every call from the i386 ABI, and each conditional call's argument forms:
    /// each argument alone over `interesting`, then random combinations.
    static func compare(_ spec: SeccompSpec, randomPerCall: Int = 4000) throws -> (calls: Int, differences: [String]) {
        let (own, reference) = try programs(spec)
        let native = seccomp_arch_native()
        var calls = 0
        var differences: [String] = []
        func check(_ call: Call) {
            calls += 1
            let a = run(own, call), b = run(reference, call)
            if a != b || { if case .fault = a { return true } else { return false } }() {
                if differences.count < 20 { differences.append("\(call): own \(a), libseccomp \(b)") }
            }
        }
        for nr in UInt32(0)..<1024 {
            check(Call(nr: nr, arch: native))
            check(Call(nr: nr | FilterEmitter.x32Bit, arch: native))
            check(Call(nr: nr, arch: ahs_arch_x86()))
        }
        for nr in [UInt32.max, 0x7FFF_FFFF, 0x8000_0000] { check(Call(nr: nr, arch: native)) }
        let rules = try SeccompCompiler.ruleSets(spec)
        var rng = SplitMix(seed: 0x5ecc0)
        for name in rules.conditional.sorted() {
            let nr = UInt32(try #require(SeccompCompiler.resolve(name)))
            for position in 0..<6 {
                for v in interesting {
                    var c = Call(nr: nr, arch: native)
                    c.args[position] = v
                    check(c)
                }
            }
            for _ in 0..<randomPerCall {
                var c = Call(nr: nr, arch: native)
                for position in 0..<6 { c.args[position] = interesting[Int(rng.next() % UInt64(interesting.count))] }
                check(c)
            }
        }
        return (calls, differences)
    }

    struct SplitMix {
        var state: UInt64
        init(seed: UInt64) { state = seed }
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE5_E4B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    @Test("the program written here answers every call as libseccomp's does, at about a third of its length (34% or less)")
    func emitterMatchesLibseccomp() throws {
        let (own, reference) = try Self.programs(SeccompSpec())
        #expect(own.count * 100 <= reference.count * 34, "\(own.count / 8) instructions against libseccomp's \(reference.count / 8)")
        let r = try Self.compare(SeccompSpec())
        #expect(r.calls > 50_000)
        #expect(r.differences.isEmpty, "\(r.differences.joined(separator: "\n"))")
    }

    /// Policies that deny, quiet or add calls change which numbers a program allows, not how
    /// it compares arguments (those rules are the default's, checked above with 4,000 random
    /// combinations per call): each runs on its own, with fewer random combinations.
    static let policySpecs = [
        SeccompSpec(deny: ["seccomp"]),
        SeccompSpec(netlinkRoute: false),
        SeccompSpec(deny: ["getcpu", "ioctl", "socket", "read"], quiet: ["clone"]),
        SeccompSpec(allow: ["sysfs"].filter { SeccompCompiler.resolve($0) != nil && !SyscallProfile.hardDenied.contains($0) }, quiet: ["getsockopt", "prctl"]),
        SeccompSpec(allow: ["seccomp"].filter { !SyscallProfile.hardDenied.contains($0) }),
    ]

    @Test("so do the programs of policies that deny, quiet or add calls, conditional ones among them, and one that allows seccomp",
          arguments: policySpecs.indices)
    func emitterMatchesForPolicies(_ index: Int) throws {
        let spec = Self.policySpecs[index]
        let r = try Self.compare(spec, randomPerCall: 500)
        #expect(r.calls > 10_000)
        #expect(r.differences.isEmpty, "\(spec): \(r.differences.joined(separator: "\n"))")
    }

    @Test("a search too wide for 8-bit jumps is not written here (libseccomp's program is used), and one that fits answers by its runs")
    func tooWideFallsBack() throws {
        // Every other number allowed up to 1200: 1200 runs, jumps past 255 instructions.
        #expect(FilterEmitter.emit(allow: stride(from: 0, to: 1200, by: 2).map { Int32($0) }, conditional: [:]) == nil)
        let small = try #require(FilterEmitter.emit(allow: [0, 1, 2, 10, 11, 400], conditional: [:]))
        let native = seccomp_arch_native()
        for nr: UInt32 in [0, 1, 2, 10, 11, 400] { #expect(Self.run(small, Call(nr: nr, arch: native)) == .ret(ahs_act_allow())) }
        for nr: UInt32 in [3, 9, 12, 399, 401, 1023, FilterEmitter.x32Bit] { #expect(Self.run(small, Call(nr: nr, arch: native)) == .ret(ahs_act_notify())) }
        #expect(Self.run(small, Call(nr: 0, arch: ahs_arch_x86())) == .ret(ahs_act_notify()))
    }

    @Test("the interpreter is strict: a changed answer, jump or compare in the program written here is a difference")
    func comparisonCatchesChanges() throws {
        let (own, _) = try Self.programs(SeccompSpec())
        // Flip the first `jge` of the search (a wrong boundary), the first allow into a
        // notify, and an argument compare's constant: each must show.
        func mutated(_ change: (inout [UInt8], Int) -> Bool) -> [UInt8]? {
            var p = own
            for i in 0..<(p.count / 8) where change(&p, i) { return p }
            return nil
        }
        let boundary = try #require(mutated { p, i in
            guard p[i * 8] == 0x35, p[i * 8 + 4] != 0 || p[i * 8 + 5] != 0, i > 4 else { return false }
            p[i * 8 + 4] &+= 1
            return true
        })
        let allow = seccomp_arch_native()
        var differs = 0
        for nr in UInt32(0)..<512 where Self.run(boundary, Call(nr: nr, arch: allow)) != Self.run(own, Call(nr: nr, arch: allow)) { differs += 1 }
        #expect(differs == 1, "moving one boundary by one changes exactly one number's answer (\(differs))")
        let ioctl = UInt32(try #require(SeccompCompiler.resolve("ioctl")))
        // TIOCSCTTY..TIOCOUTQ (0x540E-0x5411) is one range, the first below TIOCSTI (0x5412):
        // its upper bound moved up by one.
        let tcgets = try #require(mutated { p, i in
            guard p[i * 8] == 0x25, p[i * 8 + 4] == 0x11, p[i * 8 + 5] == 0x54, p[i * 8 + 6] == 0, p[i * 8 + 7] == 0 else { return false }
            p[i * 8 + 4] = 0x12  // TIOCOUTQ -> TIOCSTI
            return true
        })
        var call = Call(nr: ioctl, arch: allow)
        call.args[1] = 0x5412
        #expect(Self.run(own, call) == .ret(ahs_act_notify()))
        #expect(Self.run(tcgets, call) == .ret(ahs_act_allow()))
    }
}
