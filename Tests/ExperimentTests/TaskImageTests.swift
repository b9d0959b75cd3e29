@testable import Benchmark
import Experiment
import Foundation
import Sandbox
import SandboxPolicy
import Testing
import TestSupport

/// Tasks on their own image: built with the real podman from a Dockerfile FROM the locally
/// bootstrapped base (`scripts/build-images`), unpacked into a private store, and run by the
/// TaskRunner with the image as both sandboxes' root.
@Suite(.serialized) struct TaskImageTests {
    static let base = "localhost/autoharness-base:bookworm"

    /// A Terminal-Bench-shaped task: files COPYed outside /app, a WORKDIR other than /app, a
    /// build step, and an answer key in environment/ that the Dockerfile never copies.
    static func makeTask(in dir: String, id: String, solve: String, test: String) throws -> BenchmarkTask {
        let t = dir + "/tasks/" + id
        for sub in ["environment", "tests", "solution"] {
            try FileManager.default.createDirectory(atPath: t + "/" + sub, withIntermediateDirectories: true)
        }
        try "Do the thing.\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
        try """
            FROM \(base)
            WORKDIR /srv/work
            COPY input.txt /opt/data/input.txt
            COPY app-seed.txt /app/seed.txt
            RUN echo built-at-image-time > /srv/work/built.txt
            ENV TASK_MARK=from-the-image

            """.write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
        try "input-\(id)\n".write(toFile: t + "/environment/input.txt", atomically: true, encoding: .utf8)
        try "seed-\(id)\n".write(toFile: t + "/environment/app-seed.txt", atomically: true, encoding: .utf8)
        try "ANSWER-KEY-\(id)\n".write(toFile: t + "/environment/answer_key.txt", atomically: true, encoding: .utf8)
        try solve.write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
        try test.write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
        return try #require(try LocalBenchmark(directory: dir).task(id))
    }

    static func scratchRoot() throws -> String {
        let path = "/dev/shm/ah-image-" + UUID().uuidString.prefix(8).lowercased()
        try #require(mkdir(path, 0o700) == 0)
        return path
    }

    @Test("a task runs on its image: root inside owns the image's files, the WORKDIR and ENV are the image's, environment/ files the image lacks never reach the task, and the verifier sees what the agent changed")
    func oracleOnImage() throws {
        try #require(getuid() == 0, "image tests build with podman's root storage and mount overlays: run as root")
        let podman = try ChildProcess.run(["/usr/bin/podman", "image", "exists", Self.base])
        try #require(podman.succeeded, "\(Self.base) is missing: scripts/build-images makes it (CI runs it before the tests)")
        let dir = NSTemporaryDirectory() + "ah-image-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // The solution runs as root: it installs into /usr/local and /etc (root-owned in the
        // image), writes in its WORKDIR, and records what it saw.
        let task = try Self.makeTask(in: dir, id: "on-image", solve: """
            #!/bin/bash
            set -e
            printf '#!/bin/sh\\necho tool-ok\\n' > /usr/local/bin/task-tool
            chmod 755 /usr/local/bin/task-tool
            echo configured > /etc/task.conf
            { id -u; pwd; echo "$TASK_MARK"; cat /opt/data/input.txt; cat /app/seed.txt; cat built.txt
              ls /app; ls /app/answer_key.txt /answer_key.txt 2>&1 || true
              grep CapEff /proc/self/status
              chown 1:1 /etc/task.conf 2>&1 || echo chown-refused
              mount -t tmpfs none /mnt 2>&1 || echo mount-refused; } > /srv/work/seen.txt 2>&1

            """, test: """
            #!/bin/bash
            # The verifier starts in the image's WORKDIR and sees the agent's changes.
            { pwd; task-tool; cat /etc/task.conf; cat seen.txt; } > /logs/verifier/out.txt 2>&1
            echo 1 > /logs/verifier/reward.txt

            """)
        let store = TaskImageStore(directory: dir + "/store")
        var lines: [String] = []
        let problems = try store.prepare([task], uid: 65534, gid: 65534) { lines.append($0) }
        #expect(problems.isEmpty, "\(problems)")
        #expect(lines.contains { $0.contains("podman build") }, "\(lines)")
        let (images, missing) = store.load([task])
        #expect(missing.isEmpty)
        let image = try #require(images.byTask[task.id])
        #expect(image.workingDirectory == "/srv/work")
        // A second prepare of the same context builds nothing.
        var again: [String] = []
        _ = try store.prepare([task], uid: 65534, gid: 65534) { again.append($0) }
        #expect(again.isEmpty, "\(again)")

        let scratch = try Self.scratchRoot()
        defer { rmdir(scratch) }
        let seenBox = SeenBox()
        var config = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: [Built.packageRoot + "/policies"]), agentDirectory: "",
                                          scratchRoot: scratch)
        config.oracle = true
        config.images = images
        config.scratchObserver = { _, path in seenBox.read(path) }
        let runner = try TaskRunner(configuration: config)
        let outcome = runner.run(task, traceDirectory: nil)
        #expect(outcome.reward == 1, "\(outcome)")
        let seen = seenBox.seen
        let verifier = seenBox.verifier
        // The solution: root inside, in the image's WORKDIR, with its ENV and its files.
        let first = seen.split(separator: "\n").map(String.init)
        #expect(first.prefix(6) == ["0", "/srv/work", "from-the-image", "input-on-image", "seed-on-image", "built-at-image-time"], "\(seen)")
        // Nothing of environment/ the Dockerfile does not copy: not in /app, not anywhere.
        #expect(!seen.contains("ANSWER-KEY"), "\(seen)")
        #expect(seen.contains("cannot access '/app/answer_key.txt': No such file"), "\(seen)")
        // Root of its namespace only: no capability, and what would need one is refused.
        #expect(seen.contains("CapEff:\t0000000000000000"), "\(seen)")
        #expect(seen.contains("chown-refused") && seen.contains("mount-refused"), "\(seen)")
        // The verifier: in the WORKDIR, with what the agent installed and wrote.
        #expect(verifier.hasPrefix("/srv/work\ntool-ok\nconfigured\n0\n"), "\(verifier)")
        // The image's own files are untouched: the task wrote into its upper layer.
        #expect(access(image.rootfs + "/usr/local/bin/task-tool", F_OK) != 0)
        #expect(access(image.rootfs + "/srv/work/seen.txt", F_OK) != 0)

        // Held out: the image's files are journaled for eviction before the task starts (a
        // supervisor that dies mid-run leaves them for the next one to evict).
        let journal = dir + "/page-cache-journal"
        config.pageCache = PageCacheEviction(journal: journal)
        config.scratchObserver = nil
        let heldOut = try TaskRunner(configuration: config).run(task, traceDirectory: nil)
        #expect(heldOut.reward == 1, "\(heldOut)")
        let journaled = (try? String(contentsOfFile: journal, encoding: .utf8)) ?? ""
        #expect(journaled.split(separator: "\n").contains { $0 == image.rootfs }, "\(journaled)")
        _ = config.pageCache?.evict()
    }
}

/// What a task's scratch directory held just before it was removed.
private final class SeenBox: @unchecked Sendable {
    var seen = ""
    var verifier = ""
    func read(_ path: String) {
        seen = (try? String(contentsOfFile: path + "/root/srv/work/seen.txt", encoding: .utf8)) ?? "(no seen.txt)"
        verifier = (try? String(contentsOfFile: path + "/logs/out.txt", encoding: .utf8)) ?? "(no out.txt)"
    }
}
