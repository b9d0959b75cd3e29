import Foundation
import Sandbox
import SandboxPolicy
import Testing
import class TestSupport.LiveProcess
import func TestSupport.procText

@testable import Benchmark

/// A hostile agent.py attacks the benchmark from inside its sandbox; each test checks the
/// errno it got and that the score stayed honest.
@Suite("A hostile agent cannot reach the scorer, other tasks, or the split")
struct IsolationTests {
    /// agent.py that tries everything and prints a JSON report of what happened.
    static func hostileAgent(benchmark: String, scratchRoot: String, marker: String) -> String {
        """
        import errno, json, os, subprocess, sys, time

        def attempt(fn):
            try:
                fn()
                return "ok"
            except OSError as e:
                return errno.errorcode.get(e.errno, str(e.errno))

        def write(path, text="1\\n"):
            with open(path, "w") as f:
                f.write(text)

        class HarnessAgent:
            def run(self, instruction, workdir):
                r = {}
                r["read_tests"] = attempt(lambda: open("/tests/test.sh").read())
                r["list_tests"] = attempt(lambda: os.listdir("/tests"))
                r["read_solution"] = attempt(lambda: open("/solution/solve.sh").read())
                r["read_other_task_tests"] = attempt(lambda: open("\(benchmark)/tasks/seeded-sum/tests/test.sh").read())
                r["read_other_task_solution"] = attempt(lambda: open("\(benchmark)/tasks/json-reward/solution/solve.sh").read())
                r["list_scratch_root"] = attempt(lambda: os.listdir("\(scratchRoot)"))
                r["list_logs"] = attempt(lambda: os.listdir("/logs"))
                r["forge_reward"] = attempt(lambda: write("/logs/verifier/reward.txt"))
                r["make_logs_dir"] = attempt(lambda: os.makedirs("/logs/verifier"))
                r["write_agent"] = attempt(lambda: write("/agent/agent.py", "hacked"))
                r["write_agent_new"] = attempt(lambda: write("/agent/extra.py"))
                r["write_root"] = attempt(lambda: write("/reward.txt"))
                # Plant a reward where a naive verifier might look, and answer wrongly.
                write("/app/reward.txt")
                write("/app/answer.txt", "41\\n")
                # Something for a later task to find, if /tmp were shared.
                write("/tmp/leak-\(marker).txt", "secret from an earlier task")
                # A daemon that tries to outlive the task (double fork, new session).
                subprocess.Popen(["python3", "-c", "import os, time\\nif os.fork() == 0:\\n    os.setsid()\\n    time.sleep(120)\\n", "\(marker)"],
                                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.3)
                print(json.dumps(r, sort_keys=True))
        """
    }

    @Test("tests, solution, logs, other tasks and the scratch root are invisible; /agent is read-only; the reward stays honest; daemons die; /tmp does not carry over")
    func hostileAgentIsConfined() throws {
        try requireRoot()
        let bench = try fixtureBenchmark("basic")
        let scratch = try makeScratchRoot()
        let marker = uniqueMarker("ah-hostile")
        let h = try Harness(agent: Self.hostileAgent(benchmark: bench.directory, scratchRoot: scratch.path, marker: marker), scratch: scratch)
        let agent = try #require(h.agent)
        let agentBefore = try String(contentsOfFile: agent.path + "/agent.py", encoding: .utf8)
        let traces = try TempDir()
        let o = h.run(try #require(bench.task("answer-42")), trace: traces.path)
        #expect(o.status == .failed && o.reward == 0, "\(o)")
        #expect(read(traces.path + "/reward.txt") == "0\n")

        let stdout = try #require(read(traces.path + "/agent.stdout"), "\(read(traces.path + "/agent.stderr") ?? "")")
        let report = try #require(JSONSerialization.jsonObject(with: Data(stdout.utf8)) as? [String: String])
        for key in ["read_tests", "list_tests", "read_solution", "read_other_task_tests", "read_other_task_solution",
                    "list_scratch_root", "list_logs", "forge_reward"] {
            #expect(report[key] == "ENOENT", "\(key): \(report[key] ?? "nil")")
        }
        for key in ["make_logs_dir", "write_agent", "write_agent_new", "write_root"] {
            #expect(report[key] == "EROFS", "\(key): \(report[key] ?? "nil")")
        }
        #expect(try String(contentsOfFile: agent.path + "/agent.py", encoding: .utf8) == agentBefore)
        #expect(listing(agent.path) == ["agent.py"])
        #expect(hostProcesses(containing: marker).isEmpty, "a daemon outlived its task")
        #expect(listing(scratch.path).isEmpty)

        // A later task, in the same scratch root, sees nothing the hostile one left.
        let snoop = try Harness(agent: """
            import json, os
            class HarnessAgent:
                def run(self, instruction, workdir):
                    print(json.dumps({"tmp": sorted(os.listdir("/tmp")), "app": sorted(os.listdir("/app")),
                                      "leak": os.path.exists("/tmp/leak-\(marker).txt")}))
            """, scratch: scratch)
        let later = try TempDir()
        _ = snoop.run(try #require(bench.task("answer-42")), trace: later.path)
        let seen = try #require(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: later.path + "/agent.stdout"))) as? [String: Any])
        #expect(seen["leak"] as? Bool == false)
        #expect((seen["tmp"] as? [String])?.isEmpty == true)
        #expect((seen["app"] as? [String])?.isEmpty == true)
    }

    /// agent.py that prints everything it can observe about where it runs.
    static let introspectionAgent = """
        import json, os, socket
        def ls(path):
            out = []
            for name in sorted(os.listdir(path)):
                st = os.lstat(os.path.join(path, name))
                link = os.readlink(os.path.join(path, name)) if os.path.islink(os.path.join(path, name)) else ""
                out.append("%s %o %d:%d %s" % (name, st.st_mode, st.st_uid, st.st_gid, link))
            return out
        def fd(n):
            try: return os.readlink("/proc/self/fd/%d" % n)
            except OSError as e: return "error %d" % e.errno
        class HarnessAgent:
            def run(self, instruction, workdir):
                print(json.dumps({
                    "env": dict(os.environ), "cwd": os.getcwd(), "ids": [os.getuid(), os.getgid(), os.getgroups()],
                    "hostname": socket.gethostname(), "root": ls("/"), "app": ls("/app"), "tmp": ls("/tmp"),
                    "dev": ls("/dev"), "agent": ls("/agent"), "mountinfo": open("/proc/self/mountinfo").read().splitlines(),
                    "cgroup": open("/proc/self/cgroup").read().splitlines(), "fds": [fd(0), fd(1), fd(2)],
                    "open_fds": sorted(os.listdir("/proc/self/fd")), "pid": os.getpid(),
                    "limits": open("/proc/self/limits").read().splitlines(), "status": [l for l in open("/proc/self/status")
                        if l.split(":")[0] in ("CapEff", "CapBnd", "NoNewPrivs", "Seccomp", "Uid", "Gid")],
                    "instruction": instruction,
                }, sort_keys=True, indent=1))
        """

    /// Replaces what legitimately differs between two runs: the scratch directory's random
    /// name, sandbox ids, and the mount ids and anonymous device numbers the kernel hands
    /// out from global counters (mountinfo lines start `ID PARENT MAJOR:MINOR`).
    static func normalize(_ view: String) -> [String] {
        var s = view
        s = s.replacingOccurrences(of: #"/[0-9a-f]{16}/"#, with: "/<random>/", options: .regularExpression)
        s = s.replacingOccurrences(of: #"sbx-[0-9a-f]{12}"#, with: "<sandbox-id>", options: .regularExpression)
        s = s.replacingOccurrences(of: #"(?m)^(\s*")\d+ \d+ \d+:\d+ "#, with: "$1<ids> ", options: .regularExpression)
        return s.split(separator: "\n").map(String.init)
    }

    @Test("a train run and a test run look identical from inside agent.py")
    func trainAndTestLookIdentical() throws {
        try requireRoot()
        let bench = try fixtureBenchmark("basic")
        let task = try #require(bench.task("seeded-sum"))
        let captured = Captured()
        let h = try Harness(agent: Self.introspectionAgent) { _, dir in
            captured.append(read(dir + "/out/agent.stdout") ?? "")
        }
        let traces = try TempDir()
        let train = h.run(task, trace: traces.path + "/seeded-sum")
        let test = h.run(task)
        #expect(train.status == .failed && test.status == .failed)
        let views = captured.all
        try #require(views.count == 2)
        let trainView = views[0], testView = views[1]
        #expect(read(traces.path + "/seeded-sum/agent.stdout") == trainView)
        #expect(trainView.contains("\"mountinfo\"") && trainView.contains("/app"), "\(trainView)")
        #expect(trainView != testView, "the views should differ at least in the random scratch name")
        let a = Self.normalize(trainView), b = Self.normalize(testView)
        #expect(a == b, "train only: \(a.filter { !b.contains($0) }); test only: \(b.filter { !a.contains($0) })")
        // /app is the root of the task's own tmpfs: mountinfo names no host path for it.
        #expect(a.contains { $0.contains("<ids> /app /app rw,") && $0.contains(" - tmpfs ") }, "\(a)")
        // Nothing inside names the benchmark, the task, the trace directory, or a split.
        for view in [trainView, testView] {
            #expect(!view.contains(bench.directory))
            #expect(!view.contains(traces.path))
            #expect(!view.contains("seeded-sum"))
            for word in ["train", "test", "split", "trace"] { #expect(!view.lowercased().contains(word), "\(word)") }
        }
    }

    @Test("a test-split run leaves no file anywhere: no trace, empty scratch root, benchmark and agent untouched")
    func testSplitLeavesNothing() throws {
        try requireRoot()
        let bench = try fixtureBenchmark("basic")
        let seenScratch = Captured()
        let h = try Harness(agent: """
            import os
            class HarnessAgent:
                def run(self, instruction, workdir):
                    for d in ("/app", "/tmp", "/dev/shm"):
                        try:
                            os.makedirs(d + "/persist/me", exist_ok=True)
                            open(d + "/persist/me/data", "w").write("x" * 100000)
                        except OSError:
                            pass
                    open("/app/answer.txt", "w").write("42")
            """) { _, dir in
            seenScratch.append(listing(dir).joined(separator: ","))
        }
        let benchBefore = listing(bench.directory), agentBefore = listing(h.agent!.path)
        // Top-level names only: a recursive listing fails whole when a concurrent test removes
        // a directory under it, and an empty "before" made everything look new.
        func shmNames() -> Set<String> { Set((try? FileManager.default.contentsOfDirectory(atPath: "/dev/shm")) ?? []) }
        let shmBefore = shmNames()
        let outcomes = h.runAll(bench.tasks, concurrency: 2)
        #expect(outcomes.first { $0.id == "answer-42" }?.status == .passed)
        // The scratch directories existed while the tasks ran, and are gone now.
        #expect(seenScratch.all.count == 4 && seenScratch.all.allSatisfy { $0.contains("app/persist/me/data") })
        #expect(listing(h.scratch.path).isEmpty)
        #expect(listing(bench.directory) == benchBefore)
        #expect(listing(h.agent!.path) == agentBefore)
        // Nothing new in /dev/shm next to the scratch root (tests running meanwhile may add their
        // own roots: ah-bench-*, adapter tests' ah-test-*, and experiments' default /dev/shm/autoharness).
        let shmNew = shmNames().subtracting(shmBefore)
        #expect(shmNew.allSatisfy { $0.hasPrefix("ah-bench-") || $0.hasPrefix("ah-test-") || $0 == "autoharness" }, "\(shmNew)")
    }

    @Test("a hostile tree (deep nesting, symlinks to host files, unreadable dirs, non-UTF-8 names) is removed without touching the host")
    func hostileTreeIsRemoved() throws {
        try requireRoot()
        let canary = try TempDir()
        let canaryFile = try canary.file("canary.txt", "keep me\n")
        let h = try Harness(agent: """
            import os
            class HarnessAgent:
                def run(self, instruction, workdir):
                    os.chdir("/app")
                    os.symlink("\(canaryFile)", "canary-link")
                    os.symlink("\(canary.path)", "canary-dir-link")
                    os.mkdir(b"bad-\\xff-name")
                    open(b"bad-\\xff-name/f\\xfe", "w").write("x")
                    for i in range(3000):
                        os.mkdir("d")
                        os.chdir("d")
                    os.symlink("/", "root-link")
                    os.chdir("/app")
                    os.makedirs("locked/inner")
                    open("locked/inner/file", "w").write("x")
                    os.chmod("locked/inner", 0)
                    os.chmod("locked", 0)
            """)
        let o = h.run(try #require(try fixtureBenchmark("basic").task("answer-42")))
        // 3000 levels are more than the verifier's git rewrite looks through: not graded.
        #expect(o.status == .setupFailed && o.reward == 0 && (o.detail ?? "").contains("deeper than 128 levels"), "\(o)")
        #expect(listing(h.scratch.path).isEmpty)
        #expect(read(canaryFile) == "keep me\n")
        #expect(listing(canary.path) == ["canary.txt"])
    }

    @Test("an agent's stdout file cannot be reopened for reading through /proc/self/fd")
    func outputFilesAreWriteOnly() throws {
        try requireRoot()
        let h = try Harness(agent: """
            import errno, sys
            class HarnessAgent:
                def run(self, instruction, workdir):
                    try:
                        open("/proc/self/fd/1", "r").read()
                        print("reopened")
                    except OSError as e:
                        print(errno.errorcode[e.errno])
            """)
        let traces = try TempDir()
        _ = h.run(try #require(try fixtureBenchmark("basic").task("answer-42")), trace: traces.path)
        #expect(read(traces.path + "/agent.stdout") == "EACCES\n")
    }
}

@Suite("Cross-task channels")
struct CrossTaskChannelTests {
    @Test("a verifier given no input cannot stamp the host's /dev/null: its stdin is /dev/null through a read-only mount")
    func emptyStdinIsNotTheHostsDevNull() throws {
        try requireRoot()
        // futimens(0, NULL) needs only write permission (/dev/null is 0666); on a descriptor
        // of the host's /dev/null it would set times every later sandbox's /dev/null shows.
        let bench = try TempDir()
        try bench.file("tasks/stamp/instruction.md", "Nothing to do.\n")
        try bench.file("tasks/stamp/tests/test.sh", """
            #!/bin/bash
            r=$(python3 -c '
            import errno, os, stat
            try:
                os.utime(0)
                print(0)  # stamped
            except OSError as e:
                print(1 if e.errno == errno.EROFS and stat.S_ISCHR(os.fstat(0).st_mode) else 0)')
            echo "$r" > /logs/verifier/reward.txt
            """, mode: 0o755)
        var before = stat()
        try #require(stat("/dev/null", &before) == 0)
        let h = try Harness(agent: """
            class HarnessAgent:
                def run(self, instruction, workdir):
                    pass
            """)
        let o = h.run(try #require(try LocalBenchmark(directory: bench.path).task("stamp")))
        // Reward 1: the call ran and the kernel refused it (EROFS) on a character device;
        // on the host's /dev/null as opened on the host it succeeds.
        #expect(o.status == .passed && o.reward == 1, "\(o)")
        var after = stat()
        try #require(stat("/dev/null", &after) == 0)
        #expect(after.st_mtim.tv_sec == before.st_mtim.tv_sec && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec,
                "the host's /dev/null was stamped: \(before.st_mtim) -> \(after.st_mtim)")
    }

    /// Prints the inode number a new file in /app gets, after making `count` files.
    static func agent(files count: Int) -> String {
        """
        import os
        class HarnessAgent:
            def run(self, instruction, workdir):
                for i in range(\(count)):
                    open(os.path.join(workdir, f"f{i}"), "w").close()
                    os.unlink(os.path.join(workdir, f"f{i}"))
                p = os.path.join(workdir, "probe")
                open(p, "w").close()
                print("INODE", os.stat(p).st_ino, os.statvfs(workdir).f_ffree)
        """
    }

    @Test("what one task does to its filesystem is invisible to the next (per-task tmpfs; gate review F4)")
    func filesystemCountersAreNotShared() throws {
        try requireRoot()
        let scratch = try makeScratchRoot()
        let bench = try LocalBenchmark(directory: Paths.fixture("basic"))
        let task = try #require(bench.task("answer-42"))
        func probe() throws -> String {
            final class Out: @unchecked Sendable { var text = "" }
            let out = Out()
            let h = try Harness(agent: Self.agent(files: 0), scratch: scratch) { _, dir in
                out.text = (try? String(contentsOfFile: dir + "/out/agent.stdout", encoding: .utf8)) ?? ""
            }
            _ = h.run(task)
            return out.text.split(separator: "\n").first { $0.hasPrefix("INODE") }.map(String.init) ?? "missing"
        }
        let before = try probe()
        // A "held-out" task churns through thousands of inodes...
        _ = try Harness(agent: Self.agent(files: 3000), scratch: scratch).run(task)
        // ...and the next task sees exactly what it would have seen anyway.
        let after = try probe()
        #expect(before != "missing")
        #expect(before == after, "before: \(before), after: \(after)")
    }
}

@Suite("Scratch hygiene")
struct ScratchHygieneTests {
    @Test("scratch whose owner (pid + start time) is gone is removed, mounted or not, with its marker; a live owner's stays; a reused pid protects nothing")
    func scratchSweptByOwnerIdentity() throws {
        try requireRoot()
        let root = try makeScratchRoot()
        // A live owner (a process of this test), a dead one (a reaped child), and this
        // process's pid with another start time (the pid reused after its owner died).
        let sleeper = try LiveProcess()
        let live = try #require(ProcessIdentity.of(sleeper.pid))
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/true")
        try p.run()
        p.waitUntilExit()
        let me = ProcessIdentity.current
        let dead = ProcessIdentity(pid: p.processIdentifier, startTime: me.startTime, pidNamespace: me.pidNamespace)
        let reused = ProcessIdentity(pid: me.pid, startTime: me.startTime - 1, pidNamespace: me.pidNamespace)

        func leftover(_ owner: ProcessIdentity?, mounted: Bool) throws -> String {
            let hex = String(UInt64.random(in: 1 << 60...UInt64.max), radix: 16)
            let dir = root.path + "/" + hex
            if let owner { try #require(FileManager.default.createFile(atPath: dir + "." + owner.tag, contents: nil)) }
            try #require(mkdir(dir, 0o700) == 0)
            if mounted {
                try #require(mount("tmpfs", dir, "tmpfs", 0, "size=1m") == 0)
                try FileManager.default.createDirectory(atPath: dir + "/app/deep", withIntermediateDirectories: true)
                try "x".write(toFile: dir + "/app/deep/f", atomically: false, encoding: .utf8)
            }
            return dir
        }
        let gone = [try leftover(dead, mounted: true), try leftover(reused, mounted: true),
                    // a supervisor that ran in a mount namespace of its own leaves only the directory
                    try leftover(dead, mounted: false)]
        let kept = [try leftover(live, mounted: true), try leftover(live, mounted: false)]
        // No owner recorded (an older autoharness, or not ours): not provably a leftover.
        let unowned = try leftover(nil, mounted: false)
        defer { for d in kept { umount2(d, Int32(MNT_DETACH)); rmdir(d); unlink(d + "." + live.tag) } }

        let lines = TaskRunner.sweepScratch(root: root.path)
        let mounts = try #require(procText("/proc/self/mountinfo"))
        for d in gone {
            #expect(!mounts.contains(" \(d) "), "\(d) still mounted")
            #expect(!FileManager.default.fileExists(atPath: d), "\(d) still there")
        }
        for d in kept { #expect(FileManager.default.fileExists(atPath: d + "." + live.tag)) }
        #expect(mounts.contains(" \(kept[0]) ") && FileManager.default.fileExists(atPath: kept[0] + "/app/deep/f"))
        #expect(FileManager.default.fileExists(atPath: kept[1]) && FileManager.default.fileExists(atPath: unowned))
        // Only the live owner's markers are left beside the directories.
        let markers = ((try? FileManager.default.contentsOfDirectory(atPath: root.path)) ?? []).filter { $0.contains(".") }.sorted()
        #expect(markers == kept.map { String($0.dropFirst(root.path.count + 1)) + "." + live.tag }.sorted(), "\(markers)")
        #expect(lines.first?.hasPrefix("removed 3 scratch directories (2 mounted) under \(root.path) left by supervisors that are gone") == true, "\(lines)")
        rmdir(unowned)
        withExtendedLifetime(sleeper) {}
    }

    @Test("task tmpfs mounts of a dead supervisor are unmounted; a live one's are left alone")
    func staleTaskMountsSwept() throws {
        try requireRoot()
        let root = try makeScratchRoot()
        func fakeMount(owner: Int32) throws -> String {
            let dir = root.path + "/" + String(UInt64.random(in: 0...UInt64.max), radix: 16)
            try #require(mkdir(dir, 0o700) == 0 && mount("tmpfs", dir, "tmpfs", 0, "size=1m") == 0)
            try FileManager.default.createDirectory(atPath: dir + "/out", withIntermediateDirectories: false)
            try "\(owner)".write(toFile: dir + "/out/owner", atomically: false, encoding: .utf8)
            return dir
        }
        // A pid that no longer exists: a child that has been reaped.
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/true")
        try p.run()
        p.waitUntilExit()
        let dead = try fakeMount(owner: p.processIdentifier)
        let live = try fakeMount(owner: getpid())
        defer { umount2(live, Int32(MNT_DETACH)); rmdir(live) }
        _ = try Harness(agent: "class HarnessAgent:\n    def run(self, i, w): pass\n", scratch: root)  // the runner sweeps on start
        let mounts = try #require(procText("/proc/self/mountinfo"))
        #expect(!mounts.contains(" \(dead) "))
        #expect(!FileManager.default.fileExists(atPath: dead))
        #expect(mounts.contains(" \(live) "))
    }
}
