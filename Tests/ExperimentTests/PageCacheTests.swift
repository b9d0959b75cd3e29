import Foundation
import Testing
import TestSupport

/// The page cache of a file that held-out and later train sandboxes can both read is a
/// channel: a held-out agent.py reads chosen pages, a later train agent.py times its reads
/// and prints what it found into a trace. These tests mount that attack for real.
@Suite("Held-out runs leave nothing in the page cache", .serialized)
struct PageCacheTests {
    static let pages = 1024

    /// The pages an agent.py derives from an instruction (16 per task, as many distinct as
    /// a SHA-256 gives): the same function in Python below.
    static func pages(for instruction: String) throws -> Set<Int> {
        let r = try runProcess("/usr/bin/python3", ["-c", """
            import hashlib, sys
            h = hashlib.sha256(sys.argv[1].encode()).digest()
            print(' '.join(str(int.from_bytes(h[i:i + 2], 'big') % \(pages)) for i in range(0, 32, 2)))
            """, instruction])
        return Set(r.stdout.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
    }

    /// The agent: solves the task (so the gate gets as far as the held-out split) and reads
    /// the pages its instruction names from /shared/blob.
    static let toucher = """
        import hashlib, os
        class HarnessAgent:
            def run(self, instruction, workdir):
                h = hashlib.sha256(instruction.encode()).digest()
                fd = os.open('/shared/blob', os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                for i in range(0, 32, 2):
                    os.pread(fd, 1, (int.from_bytes(h[i:i + 2], 'big') % \(pages)) * 4096)
                _, op, a, b = instruction.splitlines()[0].split()
                open(os.path.join(workdir, 'answer.txt'), 'w').write(str(int(a) + int(b) if op == 'add' else int(a) * int(b)))
        """

    /// The spy: times a one-byte read of every page, in a shuffled order with readahead off,
    /// and prints the nanoseconds per page (its trace is what the coding agent would read).
    static let spy = """
        import os, random, time
        class HarnessAgent:
            def run(self, instruction, workdir):
                fd = os.open('/shared/blob', os.O_RDONLY)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                order = list(range(\(pages)))
                random.Random(7).shuffle(order)
                lat = [0] * \(pages)
                for p in order:
                    t = time.perf_counter_ns()
                    os.pread(fd, 1, p * 4096)
                    lat[p] = time.perf_counter_ns() - t
                print('LAT ' + ' '.join(map(str, lat)))
        """

    /// Pages of `path` resident in the page cache, seen from the host (mincore over a
    /// mapping; the test runs as root outside any sandbox).
    static func resident(_ path: String) throws -> Set<Int> {
        let r = try runProcess("/usr/bin/python3", ["-c", """
            import ctypes, os, sys
            fd = os.open(sys.argv[1], os.O_RDONLY)
            size = os.fstat(fd).st_size
            libc = ctypes.CDLL(None, use_errno=True)
            libc.mmap.restype = ctypes.c_void_p
            p = libc.mmap(None, size, 1, 1, fd, 0)
            vec = (ctypes.c_ubyte * (size // 4096))()
            assert libc.mincore(ctypes.c_void_p(p), size, vec) == 0, ctypes.get_errno()
            print(' '.join(str(i) for i, v in enumerate(vec) if v & 1))
            """, path])
        try #require(r.status == 0, "mincore helper: \(r.stderr)")
        return Set(r.stdout.split(separator: " ").compactMap { Int($0.trimmingCharacters(in: .whitespacesAndNewlines)) })
    }

    static func evict(_ path: String) throws {
        let r = try runProcess("/usr/bin/python3", ["-c", "import os,sys; fd=os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)", path])
        try #require(r.status == 0, "\(r.stderr)")
    }

    /// An experiment whose task policy also mounts /shared/blob read-only (a file held-out and
    /// later train sandboxes can both read), with the pages each split's tasks touch.
    struct Setup {
        let dir: TempDir
        let exp: Experiment
        let blob: String
        let train: [String]
        let trainPages: Set<Int>
        let heldOutPages: Set<Int>
    }

    static func setUp(extraConfig: [String: String] = [:]) throws -> Setup {
        let dir = try TempDir()
        let shared = dir.path + "/shared"
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        let blob = shared + "/blob"
        var bytes = [UInt8](repeating: 0, count: Self.pages * 4096)
        for i in stride(from: 0, to: bytes.count, by: 64) { bytes[i] = UInt8.random(in: 0...255) }
        try Data(bytes).write(to: URL(fileURLWithPath: blob))
        chmod(blob, 0o644)
        _ = try dir.file("shared-task.yaml", "extends: benchmark-task\ndescription: \"benchmark-task plus a shared read-only file\"\nfilesystem:\n  mounts:\n    - ro: \"\(shared):/shared\"\n")
        let exp = try Experiment(config: ["task_policy": "shared-task\n  policy_dir: \(dir.path)"].merging(extraConfig) { a, _ in a })
        let (train, test) = try exp.split()
        func instruction(_ id: String) throws -> String {
            try String(contentsOfFile: Experiment.fixture + "/tasks/\(id)/instruction.md", encoding: .utf8)
        }
        var trainPages = Set<Int>(), heldOutPages = Set<Int>()
        for id in train { trainPages.formUnion(try Self.pages(for: try instruction(id))) }
        for id in test { heldOutPages.formUnion(try Self.pages(for: try instruction(id))) }
        heldOutPages.subtract(trainPages)  // train runs (suite, promotion) may read those
        try #require(heldOutPages.count >= 16, "too few pages only held-out tasks read")
        try Self.evict(blob)
        #expect(try Self.resident(blob).isEmpty, "the blob must start out of the page cache")
        return Setup(dir: dir, exp: exp, blob: blob, train: train, trainPages: trainPages, heldOutPages: heldOutPages)
    }

    /// Runs the spy on one train task and returns median(held-out pages) / median(untouched).
    /// `environment`: the supervisor's (a Ray cluster's token), else this process's.
    static func spyRatio(_ s: Setup, environment: [String: String]? = nil) throws -> (ratio: Double, stderr: String) {
        try s.exp.setAgent(Self.spy)
        let b = try environment.map { try autoharness(["benchmark", "--task-ids", s.train[0], "-C", s.exp.root], environment: $0) }
            ?? s.exp.run("benchmark", "--task-ids", s.train[0])
        #expect(b.status == 0 || b.status == 1, "\(b.stdout) \(b.stderr)")
        let trace = files(under: s.exp.root + "/workspace/traces/latest/\(s.train[0])", containing: "LAT ").first
        let text = try String(contentsOfFile: try #require(trace, "no trace with the spy's timings: \(b.stdout) \(b.stderr.suffix(2000))"), encoding: .utf8)
        let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("LAT ") })
        let lat = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        try #require(lat.count == Self.pages)
        func median(_ set: Set<Int>) -> Double {
            let v = set.map { lat[$0] }.sorted()
            return v[v.count / 2]
        }
        let untouched = Set(0..<Self.pages).subtracting(s.heldOutPages).subtracting(s.trainPages)
        return (median(s.heldOutPages) / median(untouched), b.stderr)
    }

    @Test("pages a held-out task read of a shared file are gone from the page cache after the gate, and a later train task's read timing does not single them out")
    func heldOutPagesEvicted() throws {
        try requireRoot()
        let s = try Self.setUp()
        try s.exp.setAgent(Self.toucher)
        let g = try s.exp.run("gate")
        #expect(g.stderr.contains("held-out sandboxes done; dropped "), "\(g.stderr)")
        // What the gate made ahead and the template roots it built carry when they were made,
        // which the held-out sandboxes' ends decided: thrown away (the held-out tasks used one).
        let discarded = g.stderr.split(separator: "\n").first { $0.contains("discarded (they carry when they were made)") }
        let roots = discarded.flatMap { line in line.split(separator: " ").firstIndex(of: "template").map { Int(line.split(separator: " ")[$0 - 1]) ?? 0 } } ?? 0
        #expect(roots >= 1, "\(g.stderr)")
        let left = try Self.resident(s.blob)
        #expect(left.isDisjoint(with: s.heldOutPages), "held-out pages still cached after the gate: \(left.intersection(s.heldOutPages).sorted())")
        // What a later train run can measure: every page cold, touched by a held-out task or not.
        // Cached pages read in about a microsecond, cold ones take tens: a ratio near 1 is
        // what eviction gives; left cached, the held-out pages come out many times faster.
        let ratio = try Self.spyRatio(s).ratio
        #expect(ratio > 0.5, "held-out pages read \(String(format: "%.2f", ratio))× as long as untouched ones")
    }

    @Test("a supervisor killed during the held-out phase leaves a journal; the next one drops those pages before it runs anything")
    func killedMidHeldOutStillEvicted() throws {
        try requireRoot()
        let s = try Self.setUp()
        // Touch, then linger, so the kill lands while held-out tasks are running.
        try s.exp.setAgent(Self.toucher.replacingOccurrences(of: "open(os.path.join(workdir, 'answer.txt')", with: "__import__('time').sleep(20); open(os.path.join(workdir, 'answer.txt')"))
        let gate = try s.exp.start("gate")
        let journal = s.exp.root + "/.autoharness/held-out-sources"
        var cached = Set<Int>()
        for _ in 0..<300 {
            usleep(100_000)
            if FileManager.default.fileExists(atPath: journal) {
                cached = try Self.resident(s.blob).intersection(s.heldOutPages)
                if !cached.isEmpty { break }
            }
        }
        try #require(!cached.isEmpty, "the held-out phase never read its pages")
        kill(gate.processIdentifier, SIGKILL)
        gate.waitUntilExit()
        usleep(500_000)
        #expect(!(try Self.resident(s.blob).intersection(s.heldOutPages)).isEmpty, "the killed supervisor's held-out pages should still be cached")

        let (ratio, stderr) = try Self.spyRatio(s)
        #expect(stderr.contains("a held-out run was cut off; dropped "), "\(stderr)")
        #expect(!FileManager.default.fileExists(atPath: journal))
        #expect(ratio > 0.5, "held-out pages read \(String(format: "%.2f", ratio))× as long as untouched ones after the kill")
    }
}
