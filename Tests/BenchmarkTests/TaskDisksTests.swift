import Foundation
import Sandbox
import SandboxPolicy
import Testing

@testable import Benchmark

@Suite("A train run's task file systems on disk, for a task that declares its storage")
struct TaskDisksTests {
    /// One task declaring `storage` and 128 MB of memory: its solution writes `agentMB` into
    /// /app, then tries `overMB` more (the cap), and reports both and /app's file system type;
    /// its test writes `verifierMB` into its /tmp and passes on the solution's report.
    static func benchmark(_ dir: TempDir, storage: String, agentMB: Int, overMB: Int, verifierMB: Int) throws -> BenchmarkTask {
        try dir.file("tasks/big/task.toml", "[environment]\nmemory = \"128M\"\nstorage = \"\(storage)\"\n")
        try dir.file("tasks/big/instruction.md", "write\n")
        try dir.file("tasks/big/solution/solve.sh", """
            #!/bin/bash
            dd if=/dev/zero of=/app/kept bs=1M count=\(agentMB) status=none && echo kept > /app/kept.ok
            dd if=/dev/zero of=/app/over bs=1M count=\(overMB) status=none 2>/tmp/over.err
            echo "over $? $(grep -c 'No space left' /tmp/over.err)" > /app/report
            rm -f /app/over
            echo "type $(stat -f -c %T /app)" >> /app/report
            """, mode: 0o755)
        try dir.file("tasks/big/tests/test.sh", """
            #!/bin/bash
            dd if=/dev/zero of=/tmp/verifier-data bs=1M count=\(verifierMB) status=none || { echo 0 > /logs/verifier/reward.txt; exit 0; }
            echo "verifier tmp $(stat -f -c %T /tmp)" >> /logs/verifier/seen
            cat /app/report >> /logs/verifier/seen
            if [ -f /app/kept.ok ] && grep -q '^over 1 1$' /app/report && grep -q '^type ext2/ext3$' /app/report; then
                echo 1 > /logs/verifier/reward.txt
            else
                echo 0 > /logs/verifier/reward.txt
            fi
            """, mode: 0o755)
        return try #require(try LocalBenchmark(directory: dir.path).task("big"))
    }

    /// The type of the file system mounted at `path`, as /proc/self/mountinfo names it.
    static func mountType(_ path: String) -> String {
        let lines = (read("/proc/self/mountinfo") ?? "").split(separator: "\n")
        guard let line = lines.last(where: { $0.split(separator: " ").dropFirst(4).first.map(String.init) == path }),
              let dash = line.range(of: " - ") else { return "not mounted" }
        return String(line[dash.upperBound...].split(separator: " ").first ?? "")
    }

    /// Loop devices bound to a file under `directory` (its path as the kernel shows it).
    static func loopsBacked(by directory: String) -> [String] {
        let blocks = (try? FileManager.default.contentsOfDirectory(atPath: "/sys/block")) ?? []
        return blocks.filter { $0.hasPrefix("loop") }.filter { name in
            (try? String(contentsOfFile: "/sys/block/\(name)/loop/backing_file", encoding: .utf8))?.hasPrefix(directory + "/") == true
        }
    }

    @Test("a train run's /app and verifier /tmp are ext4 of the declared size on a nameless file: 300 MB fits a 128 MB task, 600 MB more meets ENOSPC at the 512 MB cap, nothing in the directory has a name, and the loop devices let go of it after; the held-out run of the same task stays on its tmpfs and fails")
    func trainOnDisk() throws {
        try requireRoot()
        let dir = try TempDir()
        let backing = try TempDir()
        let disks = try TaskDisks.make(directory: backing.path + "/disks", reserve: 64 << 20).get()
        let task = try Self.benchmark(dir, storage: "512M", agentMB: 300, overMB: 600, verifierMB: 300)
        #expect(task.storage == 512 << 20)
        let seen = Captured()
        let disksDirectory = backing.path + "/disks"
        let h = try Harness(agent: nil, oracle: true, observer: { _, scratch in
            seen.append("scratch \(Self.mountType(scratch))")
            seen.append("named \(listing(disksDirectory).count)")
            seen.append("loops \(Self.loopsBacked(by: disksDirectory).count)")
            seen.append(read(scratch + "/logs/seen") ?? "no log")
        }, configure: { $0.disks = .success(disks) })
        let trace = try TempDir()
        let train = h.run(task, trace: trace.path)
        #expect(train.status == .passed && train.reward == 1, "\(train) \(seen.all)")
        // ext4's magic; the task directory and the verifier's /tmp each its own loop device.
        #expect(seen.all.prefix(3) == ["scratch ext4", "named 0", "loops 2"], "\(seen.all)")
        #expect(seen.all.dropFirst(3).first?.contains("verifier tmp ext2/ext3\nover 1 1\ntype ext2/ext3") == true, "\(seen.all)")
        // Autoclear follows the lazy unmount; the blocks go with the last reference.
        var left = Self.loopsBacked(by: backing.path + "/disks")
        // (A mount namespace made while the disk is mounted holds a copy of it: the Ray test
        // nodes and the other tests' `unshare --mount` shells let go of theirs at start,
        // RayClusterTests.dropLoopMounts; one another test makes still holds it for its life.)
        for _ in 0..<1800 where !left.isEmpty {
            usleep(100_000)
            left = Self.loopsBacked(by: backing.path + "/disks")
        }
        #expect(left.isEmpty, "loop devices still bound: \(left)")

        // Held out: memory only, whatever the task declares; 300 MB does not fit its 128 MB.
        let heldOutSeen = Captured()
        let h2 = try Harness(agent: nil, oracle: true, observer: { _, scratch in
            heldOutSeen.append("scratch \(Self.mountType(scratch))")
        }, configure: { $0.disks = .success(disks) })
        let heldOut = h2.run(task, trace: nil)
        #expect(heldOut.reward == 0, "\(heldOut)")
        #expect(heldOutSeen.all == ["scratch tmpfs"], "\(heldOutSeen.all)")
        left = Self.loopsBacked(by: backing.path + "/disks")
        for _ in 0..<200 where !left.isEmpty {
            usleep(100_000)
            left = Self.loopsBacked(by: backing.path + "/disks")
        }
        #expect(left.isEmpty, "loop devices still bound: \(left)")
    }

    @Test("a disk is given only while the backing file system has room for every disk in use at its full size plus the reserve: refused naming the sizes, the task set up failed, nothing left behind; without disks the task runs on its tmpfs, its result saying why")
    func noRoom() throws {
        try requireRoot()
        let dir = try TempDir()
        let small = try TempDir()
        #expect(mount("tmpfs", small.path, "tmpfs", 0, "size=96m") == 0)
        defer { umount2(small.path, Int32(MNT_DETACH)) }
        let disks = try TaskDisks.make(directory: small.path + "/disks", reserve: 16 << 20).get()
        // 64 MB fits 96 MB less 16 MB kept: taken; a second 64 MB while the first is in use is not.
        let mounted = try TempDir()
        let first = try disks.mount(size: 64 << 20, at: mounted.path, mode: 0o700, owner: (0, 0))
        let task = try Self.benchmark(dir, storage: "64M", agentMB: 1, overMB: 1, verifierMB: 1)
        let h = try Harness(agent: nil, oracle: true, configure: { $0.disks = .success(disks) })
        let refused = h.run(task, trace: try TempDir().path)
        #expect(refused.status == .setupFailed && refused.reward == 0, "\(refused)")
        #expect(refused.detail?.contains("no room for a task's 64 MiB disk in \(small.path)/disks") == true, "\(refused)")
        #expect(refused.detail?.contains("MiB promised to the disks in use, 16 MiB kept for the host") == true, "\(refused)")
        umount2(mounted.path, Int32(MNT_DETACH))
        first.close()
        #expect(listing(small.path + "/disks").isEmpty)
        // A host that cannot make disks runs the task on its tmpfs and says why in its result.
        let fallback = try Harness(agent: nil, oracle: true, configure: { $0.disks = .failure(BenchmarkError(.configuration, "/dev/loop-control: absent")) })
        let onTmpfs = fallback.run(task, trace: try TempDir().path)
        #expect(onTmpfs.detail?.contains("storage: the task declares 64 MiB; it ran on its 2g tmpfs (no task disks here: /dev/loop-control: absent)") == true, "\(onTmpfs)")
        // With the first one gone there is room again.
        let second = try disks.mount(size: 64 << 20, at: mounted.path, mode: 0o700, owner: (0, 0))
        umount2(mounted.path, Int32(MNT_DETACH))
        second.close()
    }
}
