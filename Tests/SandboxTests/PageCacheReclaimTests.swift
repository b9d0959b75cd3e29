import Foundation
@testable import Sandbox
import SandboxPolicy
import Testing
import TestSupport

/// Held-out page cache taken back from the sandboxes' memory cgroups (`PageCacheEviction`):
/// what a held-out sandbox brought into the page cache is reclaimed, what was cached before it
/// stays, and the full walk is used whenever that cannot be shown to suffice.
@Suite("Held-out page cache reclaimed from the sandboxes' memory cgroups", .serialized)
struct PageCacheReclaimTests {
    static let size = 8 << 20

    /// A directory with two files: `read`, which the held-out sandbox reads whole, and
    /// `before`, which the host reads before the sandbox runs; both start out of the cache.
    struct Files {
        let dir: TempDir
        var read: String { dir.file("shared/read") }
        var before: String { dir.file("shared/before") }

        init() throws {
            dir = try TempDir()
            try FileManager.default.createDirectory(atPath: dir.file("shared"), withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
            for path in [dir.file("shared/read"), dir.file("shared/before")] {
                var bytes = [UInt8](repeating: 0, count: PageCacheReclaimTests.size)
                for i in stride(from: 0, to: bytes.count, by: 512) { bytes[i] = UInt8.random(in: 1...255) }
                try Data(bytes).write(to: URL(fileURLWithPath: path))
                chmod(path, 0o644)
                // Written pages are dirty: out to disk first, so that they can be dropped.
                let fd = open(path, O_RDONLY)
                fsync(fd)
                posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)
                close(fd)
            }
        }

        /// Held-out sandboxes recorded in `cache`, each reading `read` whole (their cgroups
        /// made under `host`'s, by default this process's).
        /// Runs `count` held-out sandboxes that read the file; returns their sandbox ids.
        @discardableResult
        func runHeldOut(_ cache: PageCacheEviction, count: Int = 1, host: CgroupHost? = nil) throws -> [String] {
            var ids: [String] = []
            var limits = Limits()
            limits.timeoutSeconds = 30
            let policy = Policy(name: "held-out-reader", mounts: minimalMounts + [MountSpec(kind: .readOnly(source: dir.file("shared")), destination: "/shared")],
                                limits: limits)
            for _ in 0..<count {
                // Also 256 KiB into the sandbox's own tmpfs (/dev/shm), charged to its cgroup
                // and freed only with its mount namespaces: the eviction must not read it as
                // left after the reclaim.
                let script = "open('/shared/read', 'rb').read(); open('/dev/shm/scratch', 'wb').write(b'x' * 262144)"
                let plan = try PlanCompiler.compile(policy: policy, command: ["/usr/bin/python3", "-c", script], hostEnvironment: [:])
                var options = RunOptions()
                options.pageCache = cache
                options.cgroupHost = host
                let r = try SandboxRunner.run(plan, options: options)
                #expect(r.termination == .exited(0), "\(r.termination)")
                ids.append(plan.sandboxID)
            }
            return ids
        }
    }

    /// Pages of `path` in the page cache now, by mincore(2) from the host.
    static func resident(_ path: String) -> Int {
        let fd = open(path, O_RDONLY)
        guard fd >= 0 else { return -1 }
        defer { close(fd) }
        guard let p = mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0), p != MAP_FAILED else { return -1 }
        defer { munmap(p, size) }
        var vector = [UInt8](repeating: 0, count: size / 4096)
        guard mincore(p, size, &vector) == 0 else { return -1 }
        return vector.filter { $0 & 1 != 0 }.count
    }

    static func readWhole(_ path: String) {
        _ = FileManager.default.contents(atPath: path)
    }

    /// A v1 memory cgroup made for a test inside this process's own (the caller removes it).
    static func memoryCgroup(_ name: String) throws -> String {
        let own = try #require(CgroupHost.current.v1["memory"], "this test needs the cgroup v1 memory controller (CI's host)")
        let dir = own.ownDirectory + "/ah-test-\(name)-" + String(UUID().uuidString.prefix(8))
        try #require(mkdir(dir, 0o755) == 0, "mkdir \(dir): \(errno)")
        return dir
    }

    /// The memory cgroups of this process's sandboxes now.
    static func sandboxMemoryCgroups() -> [String] {
        guard let parent = CgroupHost.current.plan(for: Limits(memory: 1)).first?.parent else { return [] }
        return ((try? FileManager.default.contentsOfDirectory(atPath: parent)) ?? [])
            .filter { $0.hasPrefix("autoharness-") && $0.hasSuffix("." + SandboxCgroup.ownerTag) }
    }

    @Test("what held-out sandboxes read is reclaimed from their memory cgroups and nothing is walked: the file they read is out of the page cache, a file cached before they ran is still cached, and their cgroups are gone")
    func reclaimedProportionally() throws {
        try requireRoot()
        let f = try Files()
        Self.readWhole(f.before)
        try #require(Self.resident(f.before) == Self.size / 4096 && Self.resident(f.read) == 0, "the files did not start as set up")
        // The kernel's reclaim counter held still: memory pressure from tests running beside
        // this one must not turn it into a walk (that rule has a test of its own below).
        let cache = PageCacheEviction(untrustedMemory: 1 << 30, reclaimCounter: { 0 })
        let ids = try f.runHeldOut(cache, count: 2)
        // This test's sandboxes' cgroups only: other tests of this process launch beside it.
        func ours() -> [String] { Self.sandboxMemoryCgroups().filter { name in ids.contains { name.hasPrefix("autoharness-\($0).") } } }
        #expect(Self.resident(f.read) == Self.size / 4096, "the sandboxes did not read the file")
        // Kept, emptied, until the eviction.
        #expect(ours().count == 2, "\(ours())")
        let report = cache.evict()
        #expect(report.reclaimedSandboxes == 2 && report.files == 0 && report.bytes >= UInt64(Self.size), "\(report)")
        #expect(report.description.contains("charged to 2 held-out sandbox(es) from the page cache in "), "\(report)")
        #expect(Self.resident(f.read) == 0, "held-out pages left in the page cache")
        #expect(Self.resident(f.before) == Self.size / 4096, "a file cached before the held-out sandboxes was dropped")
        #expect(ours().isEmpty, "a held-out sandbox's cgroup was left behind: \(ours())")
    }

    @Test("the sources are walked instead when the kernel reclaimed pages outside the cgroups meanwhile (memory pressure could have dropped other files' pages), and when a held-out VM read them: both files out of the page cache")
    func walkedWhenReclaimIsNotEnough() throws {
        try requireRoot()
        let f = try Files()
        let counter = Counter()
        let cache = PageCacheEviction(untrustedMemory: 1 << 30, reclaimCounter: { counter.next() })
        Self.readWhole(f.before)
        try f.runHeldOut(cache)
        let report = cache.evict()
        #expect(report.reclaimedSandboxes == nil && report.walked?.contains("reclaimed pages outside the sandboxes") == true && report.files >= 2, "\(report)")
        #expect(Self.resident(f.read) == 0 && Self.resident(f.before) == 0)

        // A held-out sandbox and a VM's shares in one phase: qemu's reads are charged to no
        // sandbox, so the shares are walked.
        let vm = PageCacheEviction(untrustedMemory: 1 << 30)
        Self.readWhole(f.before)
        try f.runHeldOut(vm)
        try vm.record(sources: [f.dir.file("shared")])
        let walked = vm.evict()
        #expect(walked.reclaimedSandboxes == nil && walked.walked?.contains("VM") == true && walked.files >= 2, "\(walked)")
        #expect(Self.resident(f.read) == 0 && Self.resident(f.before) == 0)
    }

    @Test("the sources are walked when a cgroup above the held-out sandboxes has a memory limit (its reclaim takes other cgroups' pages too, and is counted nowhere global): both files out of the page cache, the sandboxes' cgroups gone")
    func walkedUnderALimitedAncestor() throws {
        try requireRoot()
        // A parent with a limit, made for this test inside this process's own cgroup.
        let parent = try Self.memoryCgroup("limited")
        defer { rmdir(parent) }
        try "\(1 << 30)".write(toFile: parent + "/memory.limit_in_bytes", atomically: false, encoding: .utf8)
        let host = CgroupHost(v1: ["memory": CgroupHost.Hierarchy(ownDirectory: parent, controllers: ["memory"])], v2: nil)
        let f = try Files()
        Self.readWhole(f.before)
        let cache = PageCacheEviction(untrustedMemory: 1 << 30)
        try f.runHeldOut(cache, host: host)
        let report = cache.evict()
        #expect(report.reclaimedSandboxes == nil && report.walked?.contains("memory.limit_in_bytes") == true && report.files >= 2, "\(report)")
        #expect(Self.resident(f.read) == 0 && Self.resident(f.before) == 0)
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: parent)) ?? []).allSatisfy { !$0.hasPrefix("autoharness-") }, "a sandbox cgroup was left")
    }

    @Test("the sources are walked when later untrusted runs could fill the host's free memory (reclaim across the host would read back the order the held-out runs left), or when what they can hold is unbounded")
    func walkedWithoutFreeMemory() throws {
        try requireRoot()
        let f = try Files()
        let total = try #require(hostMemory("MemTotal"))
        for (bound, why) in [(Optional(total), "free memory"), (nil, "not bounded")] {
            Self.readWhole(f.before)
            let cache = PageCacheEviction(untrustedMemory: bound)
            try f.runHeldOut(cache)
            let report = cache.evict()
            #expect(report.reclaimedSandboxes == nil && report.walked?.contains(why) == true, "\(report)")
            #expect(Self.resident(f.read) == 0 && Self.resident(f.before) == 0)
        }
    }

    @Test("a reclaim that leaves pages charged is not taken for complete: file pages a process outside still holds (spliced into its pipe) are read back as left")
    func pagesLeftAreSeen() throws {
        try requireRoot()
        let dir = try Self.memoryCgroup("pinned")
        defer { rmdir(dir) }
        let f = try Files()
        // A process in the cgroup reads 64 KiB of the file into a pipe whose other end this
        // test holds: those pages stay pinned after it exits.
        let pipe = Pipe()
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/sh")
        p.arguments = ["-c", "echo $$ > \(dir)/cgroup.procs && exec /usr/bin/python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.splice(fd, 1, 65536)' \(f.read)"]
        p.standardOutput = pipe
        try p.run()
        p.waitUntilExit()
        #expect(p.terminationStatus == 0)
        #expect(SandboxCgroup.processes(in: dir).isEmpty)
        let r = SandboxCgroup.reclaimFilePages(dir, version: 1)
        #expect(r.failure?.contains("stayed charged") == true, "\(r)")
        // Released, they go.
        _ = pipe.fileHandleForReading.readData(ofLength: 65536)
        try? pipe.fileHandleForReading.close()
        #expect(SandboxCgroup.reclaimFilePages(dir, version: 1).failure == nil)
    }

    @Test("the counter that must not move during the held-out phase: reclaim outside any cgroup's limit (kswapd, direct, khugepaged, proactive) and huge-page collapses, not the per-type totals cgroup-aimed reclaim also adds to")
    func globalReclaimCounted() {
        let vmstat = """
            nr_free_pages 100
            pgsteal_kswapd 1
            pgsteal_direct 20
            pgsteal_khugepaged 300
            pgsteal_proactive 4000
            pgsteal_anon 50000
            pgsteal_file 600000
            thp_collapse_alloc 7000000
            thp_collapse_alloc_failed 80000000
            """
        #expect(PageCacheEviction.globalReclaim(in: vmstat) == 7_004_321)
        #expect(PageCacheEviction.globalReclaim(in: "nr_free_pages 1\n") == nil)
    }

    /// A kernel counter that moves at every read.
    final class Counter: @unchecked Sendable {
        private let lock = NSLock()
        private var value: UInt64 = 0
        func next() -> UInt64? {
            lock.lock()
            defer { lock.unlock() }
            value += 1
            return value
        }
    }
}
