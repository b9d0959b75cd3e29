import CSystemCalls
import Glibc
@testable import Sandbox
import SandboxPolicy
import Testing

@Suite("Seccomp compiler")
struct SeccompCompilerTests {
    @Test("the complement prefix rules (prctl) cover every 32-bit value except the excluded ones")
    func complementIsExact() {
        let excluded: [UInt32] = [0x5412, 0x541C]
        let rules = ArgumentRules.complementPrefixes(excluding: excluded)
        func allowed(_ v: UInt32) -> Bool { rules.contains { v & $0.mask == $0.match } }
        for v in excluded { #expect(!allowed(v)) }
        // every neighbour of the excluded values, and a spread of others
        for v: UInt32 in [0, 1, 0x5401, 0x5411, 0x5413, 0x541B, 0x541D, 0x5412 ^ 0x8000_0000, .max] {
            #expect(allowed(v), "\(String(v, radix: 16))")
        }
        var rng = SystemRandomNumberGenerator()
        for _ in 0..<10_000 {
            let v = UInt32.random(in: 0...UInt32.max, using: &rng)
            #expect(allowed(v) == !excluded.contains(v))
        }
        // No two rules overlap (a value matches at most one class).
        #expect(rules.count <= 64)
    }

    @Test("the ioctl allowlist holds terminal, pipe, socket and reflink requests and none of the dangerous ones")
    func ioctlAllowlist() {
        let allowed = Dictionary(uniqueKeysWithValues: ArgumentRules.allowedIoctls.map { ($0.value, $0.name) })
        // ... FIOASYNC too: nginx sets it on its worker channel (Terminal-Bench's nginx task).
        for v: UInt32 in [0x5401, 0x5413, 0x541B, 0x5421, 0x5452, 0x4004_9409] { #expect(allowed[v] != nil, "\(String(v, radix: 16))") }
        // TIOCSTI, TIOCLINUX, TIOCSETD, NS_GET_USERNS, NS_GET_PARENT, FS_IOC_GETFLAGS,
        // FS_IOC_SETFLAGS, SECCOMP_IOCTL_NOTIF_RECV, SIOCSIFFLAGS
        for v: UInt32 in [0x5412, 0x541C, 0x5423, 0xB701, 0xB702, 0x8008_6601, 0x4008_6602, 0xC050_2100, 0x8914] {
            #expect(allowed[v] == nil, "\(String(v, radix: 16)) is allowed")
        }
        for r in ArgumentRules.allowedIoctls { #expect(!r.reason.isEmpty, "\(r.name) has no reason") }
    }

    @Test("a hard-denied syscall cannot be re-allowed by a policy")
    func hardDeniedStaysDenied() {
        #expect(throws: SandboxError.self) {
            try SeccompCompiler.compile(SeccompSpec(allow: ["ptrace"]))
        }
        // nor hidden from the audit by seccomp.quiet
        #expect(throws: SandboxError.self) {
            try SeccompCompiler.compile(SeccompSpec(quiet: ["ptrace"]))
        }
    }

    @Test("chroot passes only a filter compiled for a payload that keeps CAP_SYS_CHROOT (on its image), kept apart from the others in the in-process and on-disk caches; a policy cannot ask for it")
    func chrootOnlyWhereAsked() throws {
        let spec = SeccompSpec()
        let with = try SeccompCompiler.compile(spec, chroot: true)
        let without = try SeccompCompiler.compile(spec)
        #expect(with.allowedNames.contains("chroot") && !with.denied.contains("chroot"))
        #expect(!without.allowedNames.contains("chroot") && without.denied.contains("chroot"))
        #expect(try SeccompCompiler.compile(spec, chroot: true).allowedNames.contains("chroot"))
        #expect(FilterCache.sectionKey(spec, chroot: true) != FilterCache.sectionKey(spec))
        #expect(throws: SandboxError.self) { try SeccompCompiler.compile(SeccompSpec(allow: ["chroot"])) }
    }

    @Test("unknown syscall names in a policy are errors")
    func unknownNameRejected() {
        #expect(throws: SandboxError.self) {
            try SeccompCompiler.compile(SeccompSpec(deny: ["not_a_syscall"]))
        }
    }

    @Test("policy deny removes a default-allowed syscall; allow adds one")
    func allowAndDeny() throws {
        let f = try SeccompCompiler.compile(SeccompSpec(allow: ["sysfs"].filter { _ in false } + [], deny: ["getcpu"]))
        #expect(!f.allowed.contains("getcpu"))
        #expect(f.denied.contains("getcpu"))
        #expect(f.allowed.contains("read"))
        #expect(!f.allowed.contains("mount"))
        #expect(f.denied.contains("mount"))
    }

    @Test("the default filter is a binary search over runs of numbers, not a linear list")
    func filterIsCompact() throws {
        let f = try SeccompCompiler.compile(SeccompSpec())
        #expect(f.instructionCount > 50)
        #expect(f.instructionCount < 300)
    }
}

@Suite("Audit log folding")
struct AuditFoldingTests {
    @Test("beyond 20 events per kind, action and name, the rest are counted in one repeated line that says what it counts: allowed and refused connections to the same host stay apart")
    func repeatedKeepsKindAndAction() {
        let log = AuditLog()
        for _ in 0..<25 {
            log.record(AuditEvent(sandbox: "s", kind: .egress, name: "127.0.0.2:443", action: "allowed"))
            log.record(AuditEvent(sandbox: "s", kind: .egress, name: "127.0.0.2:443", action: "denied"))
        }
        log.finish(sandbox: "s")
        let folded = log.events.filter { $0.kind == .repeated }
        #expect(folded.count == 2)
        #expect(Set(folded.compactMap(\.detail)) == ["egress allowed", "egress denied"])
        #expect(folded.allSatisfy { $0.name == "127.0.0.2:443" && $0.count == 5 })
        #expect(log.events.filter { $0.kind == .egress }.count == 40)
        // Allowed connections, and counts of them, are not violations; refused ones are.
        #expect(log.events.filter(\.isViolation).allSatisfy { $0.action == "denied" || $0.detail == "egress denied" })
        #expect(log.events.filter(\.isViolation).count == 21)
        #expect(folded.allSatisfy { $0.countedKind == .egress })
    }
}

@Suite("sysinfo emulation")
struct SysinfoEmulationTests {
    @Test("the supervisor writes sysinfo only into writable mappings, across adjacent ones, never across a gap or a read-only one")
    func writableRanges() {
        let maps = """
            1000-2000 rw-p 00000000 00:00 0
            2000-3000 rw-p 00000000 00:00 0
            3000-4000 r--p 00000000 00:00 0
            5000-6000 rw-s 00000000 00:00 0 /dev/shm/x
            """
        #expect(mappingsWritable(maps: maps, from: 0x1000, count: 112))
        #expect(mappingsWritable(maps: maps, from: 0x1FF0, count: 112))   // spans two rw mappings
        #expect(!mappingsWritable(maps: maps, from: 0x2FF0, count: 112))  // runs into r--
        #expect(!mappingsWritable(maps: maps, from: 0x3800, count: 112))  // read-only
        #expect(!mappingsWritable(maps: maps, from: 0x4800, count: 112))  // unmapped gap
        #expect(mappingsWritable(maps: maps, from: 0x5000, count: 112))
        #expect(!mappingsWritable(maps: maps, from: 0x5FF0, count: 112))  // past the end
        #expect(!mappingsWritable(maps: maps, from: UInt64.max - 8, count: 112))
    }

    @Test("the PROCMAP_QUERY check agrees on a real process: writable, adjoining writable, read-only, unmapped")
    func procmapQuery() throws {
        // Three pages: rw, rw, then r-- (split by mprotect into adjoining mappings), and the
        // page after them unmapped.
        let page = UInt64(sysconf(Int32(_SC_PAGESIZE)))
        let base = try #require(mmap(nil, Int(page * 4), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0))
        defer { munmap(base, Int(page * 4)) }
        let a = UInt64(UInt(bitPattern: base))
        #expect(mprotect(base + Int(page), Int(page), PROT_READ | PROT_WRITE | PROT_EXEC) == 0)  // its own mapping
        #expect(mprotect(base + Int(page * 2), Int(page), PROT_READ) == 0)
        #expect(munmap(base + Int(page * 3), Int(page)) == 0)
        let maps = open("/proc/self/maps", O_RDONLY | O_CLOEXEC)
        defer { close(maps) }
        let answers = [
            ahs_range_writable(maps, a, 112),
            ahs_range_writable(maps, a + page - 16, 112),      // across two writable mappings
            ahs_range_writable(maps, a + 2 * page - 16, 112),  // into the read-only one
            ahs_range_writable(maps, a + 2 * page, 112),
            ahs_range_writable(maps, a + 3 * page, 112),       // unmapped
        ]
        var u = utsname()
        uname(&u)
        let release = withUnsafeBytes(of: &u.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let v = release.split(separator: ".").prefix(2).compactMap { Int($0.prefix { $0.isNumber }) }
        if v.count == 2, v[0] > 6 || (v[0] == 6 && v[1] >= 11) {
            #expect(answers == [1, 1, 0, 0, 0], "kernel \(release)")
        } else {
            #expect(answers.allSatisfy { $0 == -1 }, "kernel \(release) predates PROCMAP_QUERY: \(answers)")
        }
    }

    @Test("the byte parser skips lines it cannot read and never takes a garbled line for a writable mapping")
    func garbledMaps() {
        let maps = Array("""
            garbage without an address
            1000-2000 rw-p 00000000 00:00 0
            20000000000000000-30000000000000000 rw-p 00000000 00:00 0
            3000-zz00 rw-p 00000000 00:00 0
            4000-5000
            7FFF0000-7FFF1000 rw-p 00000000 00:00 0 [stack]
            """.utf8)
        #expect(mappingsWritable(maps: maps, from: 0x1000, count: 112))
        #expect(!mappingsWritable(maps: maps, from: 0x3000, count: 112))      // unparsable end address
        #expect(!mappingsWritable(maps: maps, from: 0x4000, count: 112))      // no permissions
        #expect(mappingsWritable(maps: maps, from: 0x7FFF0F00, count: 112))   // upper-case hex, no final newline
        #expect(!mappingsWritable(maps: maps, from: 0x7FFF0FF0, count: 112))  // runs past the last line
        #expect(!mappingsWritable(maps: [], from: 0x1000, count: 112))
    }
}
