import Foundation
import Sandbox
import SandboxPolicy
import Testing

@testable import Benchmark

@Suite("Running tasks and scoring them")
struct TaskRunnerTests {
    @Test("a correct agent passes every fixture task; runAll keeps input order and reports progress serially")
    func correctAgentPasses() throws {
        try requireRoot()
        let bench = try fixtureBenchmark("basic")
        let h = try Harness(agent: solverAgentSource())
        let traces = try TempDir()

        // Reverse order in, so "results in input order" is not just "sorted by id".
        let tasks = Array(bench.tasks.reversed())
        var seen: [(Int, Int, String)] = []
        let outcomes = h.runAll(tasks, concurrency: 2, trace: { traces.path + "/" + $0.id }) { done, total, last in
            seen.append((done, total, last.id))
        }
        #expect(outcomes.map(\.id) == tasks.map(\.id))
        #expect(seen.map(\.0) == [1, 2, 3, 4] && seen.allSatisfy { $0.1 == 4 })
        #expect(Set(seen.map(\.2)) == Set(tasks.map(\.id)))
        let byID = Dictionary(uniqueKeysWithValues: outcomes.map { ($0.id, $0) })
        for id in ["answer-42", "seeded-sum", "timeouts"] {
            #expect(byID[id]?.status == .passed && byID[id]?.reward == 1 && byID[id]?.passed == true, "\(String(describing: byID[id]))")
        }
        #expect(byID["json-reward"]?.reward == 0.75 && byID["json-reward"]?.status == .passed)
        #expect(outcomes.allSatisfy { $0.detail == nil && $0.agentSeconds > 0 && $0.verifierSeconds > 0 })

        // The train trace: bounded named files, the outcome as JSON, no work directory.
        let trace = traces.path + "/answer-42"
        #expect(listing(trace) == ["agent.stderr", "agent.stdout", "instruction.md", "result.json", "reward.txt",
                                   "verifier.stderr", "verifier.stdout"])
        #expect(read(trace + "/agent.stdout") == "handled: Write the number 42 to /app/answer.txt.\n")
        #expect(read(trace + "/instruction.md") == read(bench.task("answer-42")!.directory + "/instruction.md"))
        #expect(read(trace + "/reward.txt") == "1\n")
        let decoded = try JSONDecoder().decode(TaskOutcome.self, from: Data(contentsOf: URL(fileURLWithPath: trace + "/result.json")))
        #expect(decoded == byID["answer-42"])
        let json = try #require(read(trace + "/result.json"))
        #expect(json.contains("\"status\" : \"passed\"") && json.contains("\"agent_seconds\""))
        #expect(read(traces.path + "/json-reward/reward.txt") == "{\"reward\": 0.75, \"note\": \"greeting ok\"}\n")
        var st = stat()
        #expect(stat(trace, &st) == 0 && st.st_mode & 0o777 == 0o755 && st.st_uid == 0)
        #expect(listing(h.scratch.path).isEmpty)
    }

    @Test("a wrong agent fails with reward 0")
    func wrongAgentFails() throws {
        try requireRoot()
        let bench = try fixtureBenchmark("basic")
        let outcomes = try Harness(agent: solverAgentSource(wrong: true)).runAll(bench.tasks, concurrency: 4)
        for o in outcomes {
            #expect(o.status == .failed && o.reward == 0 && !o.passed && o.detail == nil, "\(o)")
        }
    }

    @Test("reward files are read strictly: garbage, out of range, NaN, symlinks, FIFOs and oversize score 0", arguments: [
        ("garbage", TaskStatus.invalidReward, 0.0),
        ("out-of-range", .invalidReward, 0),
        ("negative", .invalidReward, 0),
        ("nan", .invalidReward, 0),
        ("infinity", .invalidReward, 0),
        ("hex", .invalidReward, 0),
        ("symlink", .invalidReward, 0),
        ("oversized", .invalidReward, 0),
        ("fifo", .invalidReward, 0),
        ("json-nan", .invalidReward, 0),
        ("json-no-key", .invalidReward, 0),
        ("json-duplicate", .invalidReward, 0),  // Python's json reads 0, Foundation's 1: refused
        ("missing", .noReward, 0),
        ("missing-nonzero", .verifierCrashed, 0),
        ("json-bare", .passed, 1),
        ("json-wins", .passed, 1.0),  // Harbor reads reward.json first
        ("reward-then-exit-1", .passed, 0.6),
        ("verifier-signal", .verifierCrashed, 0),
        ("verifier-timeout", .verifierTimeout, 0),
    ])
    func rewardVerdicts(id: String, status: TaskStatus, reward: Double) throws {
        try requireRoot()
        let task = try #require(try fixtureBenchmark("verdicts").task(id))
        let h = try Harness(agent: "class HarnessAgent:\n    def run(self, i, w): pass\n")
        let o = h.run(task)
        #expect(o.status == status, "\(o)")
        #expect(o.reward == reward && o.passed == (reward >= 0.5), "\(o)")
        if status != .passed && status != .failed { #expect(o.detail != nil) }
        #expect(listing(h.scratch.path).isEmpty)
    }

    @Test("only the test script's own process writes the reward: a child's write, rename, chmod, removal or open (a write through a mapping raises no modify event) voids it and is recorded against agent.py; the script's own write, an exec'd grader and a child's other logs count", arguments: [
        ("echo 1 > /logs/verifier/reward.txt", TaskStatus.passed, nil as String?),
        ("exec python3 -c 'open(\"/logs/verifier/reward.txt\", \"w\").write(\"1\")'", .passed, nil),
        ("python3 -c 'open(\"/logs/verifier/ctrf.json\", \"w\").write(\"{}\")'; echo 1 > /logs/verifier/reward.txt", .passed, nil),
        ("r=$(python3 -c 'print(1)'); echo \"$r\" > /logs/verifier/reward.txt", .passed, nil),
        ("python3 -c 'print(1)' > /logs/verifier/reward.txt", .invalidReward, "/logs/verifier/reward.txt created by pid"),
        ("sh -c 'echo 1 > /logs/verifier/reward.json'; echo 0 > /logs/verifier/reward.txt", .invalidReward, "/logs/verifier/reward.json created by pid"),
        ("echo 1 > /logs/verifier/reward.txt; chmod 444 /logs/verifier/reward.txt", .invalidReward, "/logs/verifier/reward.txt changed (metadata) by pid"),
        ("echo 1 > /logs/verifier/x; mv /logs/verifier/x /logs/verifier/reward.txt", .invalidReward, "/logs/verifier/reward.txt renamed by pid"),
        ("echo 1 > /logs/verifier/reward.txt; mkdir /logs/verifier/d; ln /logs/verifier/reward.txt /logs/verifier/d/r; echo 1 >> /logs/verifier/d/r", .invalidReward, "/logs/verifier/reward.txt"),
        ("echo 1 > /logs/verifier/reward.json; rm /logs/verifier/reward.json; echo 1 > /logs/verifier/reward.txt", .invalidReward, "/logs/verifier/reward.json removed by pid"),
        ("(sleep 0.2; echo 1 > /logs/verifier/reward.json) & echo 0 > /logs/verifier/reward.txt; wait", .invalidReward, "/logs/verifier/reward.json created by pid"),
        // A write through a shared mapping raises no modify event; its close does (merged with
        // the open here), but a close can be put off past the verifier's end: the corpus's
        // post-grading-mmap, where only the open names the writer. A plain read counts too.
        ("echo 0 > /logs/verifier/reward.txt; python3 -c 'import mmap, os; m = mmap.mmap(os.open(\"/logs/verifier/reward.txt\", os.O_RDWR), 1); m[0:1] = b\"1\"'",
         .invalidReward, "/logs/verifier/reward.txt written by pid"),
        ("echo 1 > /logs/verifier/reward.txt; cat /logs/verifier/reward.txt", .invalidReward, "/logs/verifier/reward.txt opened by pid"),
    ])
    func onlyTheTestScriptWritesTheReward(script: String, status: TaskStatus, detail: String?) throws {
        try requireRoot()
        let bench = try TempDir()
        try bench.file("tasks/t/instruction.md", "Nothing to do.\n")
        try bench.file("tasks/t/tests/test.sh", "#!/bin/bash\n\(script)\n", mode: 0o755)
        let audit = AuditLog()
        let h = try Harness(agent: "class HarnessAgent:\n    def run(self, i, w): pass\n", configure: { $0.audit = audit })
        let o = h.run(try #require(try LocalBenchmark(directory: bench.path).task("t")))
        #expect(o.status == status, "\(script): \(o)")
        let tampering = audit.events.filter { $0.kind == .rewardTampering }
        if let detail {
            #expect(o.reward == 0 && (o.detail ?? "").contains(detail) && (o.detail ?? "").contains("only the test script's own process"), "\(o)")
            #expect(tampering.count == 1 && tampering.first.map { detail.hasPrefix($0.name) } == true, "\(tampering)")
        } else {
            #expect(o.reward == 1 && tampering.isEmpty, "\(o) \(tampering)")
        }
        #expect(listing(h.scratch.path).isEmpty)
    }

    @Test("details say why: verifier exit codes and invalid reward text are reported")
    func verdictDetails() throws {
        try requireRoot()
        let bench = try fixtureBenchmark("verdicts")
        let h = try Harness(agent: "class HarnessAgent:\n    def run(self, i, w): pass\n")
        func detail(_ id: String) -> String { h.run(bench.task(id)!).detail ?? "" }
        #expect(detail("garbage") == "reward.txt: \"yes\" is not a number")
        #expect(detail("out-of-range") == "reward.txt: 1.5 is outside [0, 1]")
        #expect(detail("symlink") == "reward.txt is not a regular file")
        #expect(detail("oversized").hasPrefix("reward.txt is 5002 bytes"))
        #expect(detail("json-duplicate") == "reward.json: key \"reward\" appears twice in one object (which one counts is ambiguous)")
        #expect(detail("missing-nonzero") == "verifier exited 3 without a reward")
        #expect(detail("reward-then-exit-1") == "verifier exited 1")
        #expect(detail("verifier-timeout") == "verifier timed out after 1s")
        #expect(detail("verifier-signal") == "verifier killed by signal 9")
    }

    @Test("an agent that times out scores 0, its whole process tree is killed and the verifier does not run")
    func agentTimeout() throws {
        try requireRoot()
        let marker = uniqueMarker("ah-timeout")
        let h = try Harness(agent: """
            import os, subprocess, time
            class HarnessAgent:
                def run(self, instruction, workdir):
                    # The right answer, then a tree that ignores SIGTERM and outlives its parent.
                    open("/app/answer.txt", "w").write("42\\n")
                    for _ in range(3):
                        subprocess.Popen(["python3", "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)", "\(marker)"],
                                         start_new_session=True)
                    time.sleep(300)
            """)
        var task = try #require(try fixtureBenchmark("basic").task("answer-42"))
        task.agentTimeout = 1.5
        task.agentTimeoutDeclared = true
        let traces = try TempDir()
        let o = h.run(task, trace: traces.path + "/t")
        #expect(o.status == .agentTimeout && o.reward == 0 && !o.passed, "\(o)")
        #expect(o.detail == "agent timed out after 1.5s")
        #expect(o.agentSeconds >= 1.5 && o.agentSeconds < 10)
        #expect(o.verifierSeconds == 0)
        #expect(hostProcesses(containing: marker).isEmpty)
        // The trace has the agent's output, and no verifier output or reward.
        #expect(listing(traces.path + "/t") == ["agent.stderr", "agent.stdout", "instruction.md", "result.json"])
    }

    @Test("the verifier's sandbox is built while the agent runs and still grades the agent's last write; built after it, the outcome is the same",
          arguments: [true, false])
    func verifierBuiltAhead(ahead: Bool) throws {
        try requireRoot()
        let h = try Harness(agent: """
            import time
            class HarnessAgent:
                def run(self, instruction, workdir):
                    time.sleep(1.0)  # the verifier's build, if ahead, is long done by now
                    open("/app/answer.txt", "w").write("42\\n")
            """, configure: { $0.buildVerifierAhead = ahead })
        let task = try #require(try fixtureBenchmark("basic").task("answer-42"))
        let traces = try TempDir()
        let outcome = Locked<TaskOutcome?>(nil)
        let runner = h.runner, trace = traces.path + "/t"
        let worker = Thread {
            let o = runner.run(task, traceDirectory: trace)
            outcome.withLock { outcome.value = o }
        }
        worker.start()
        // The sandboxes of this test alive at once (seen by their monitors, our children, which
        // hold the payload's output files): the agent's, and the verifier's when built ahead.
        var both = false
        while outcome.withLock({ outcome.value == nil }) {
            let outputs = Self.monitorOutputs(under: h.scratch.path)
            both = both || (outputs.contains("agent.stdout") && outputs.contains("verifier.stdout"))
            usleep(20_000)
        }
        let o = try #require(withExtendedLifetime(h) { outcome.withLock { outcome.value } })
        #expect(o.status == .passed && o.reward == 1, "\(o)")
        #expect(both == ahead, "the agent's and the verifier's sandbox seen at once: \(both)")
        #expect(listing(traces.path + "/t") == ["agent.stderr", "agent.stdout", "instruction.md", "result.json", "reward.txt",
                                                "verifier.stderr", "verifier.stdout"])
    }

    @Test("a verifier binding something inside the agent's /app is not built ahead: it grades what the agent finally left there, even a directory replaced by rename")
    func bindInsideWorkdirNotAhead() throws {
        try requireRoot()
        let dir = try TempDir()
        try dir.file("tasks/renamed/instruction.md", "Leave 2 in data/v.\n")
        try dir.file("tasks/renamed/environment/data/v", "1")
        try dir.file("tasks/renamed/tests/test.sh", """
            #!/bin/bash
            [ "$(cat /data/v)" = 2 ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt
            """)
        let policies = try TempDir()
        try policies.file("data-verifier.yaml", """
            extends: verifier
            description: "the verifier plus {workdir}/data at /data (test only)"
            filesystem:
              mounts:
                - ro: "{workdir}/data:/data"
            """)
        // data/ is there from the start (the task's environment seeds /app), and is replaced
        // by rename after the agent has been quiet long enough for a verifier to be built ahead.
        let h = try Harness(agent: """
            import os, time
            class HarnessAgent:
                def run(self, instruction, workdir):
                    time.sleep(0.5)
                    os.rename("/app/data", "/app/old"); os.makedirs("/app/data"); open("/app/data/v", "w").write("2")
            """, configure: {
                $0.verifierPolicy = "data-verifier"
                $0.policyLoader = PolicyLoader(searchPaths: [policies.path, Paths.policies])
            })
        let task = try #require(try LocalBenchmark(directory: dir.path).task("renamed"))
        let o = h.run(task)
        #expect(o.status == .passed && o.reward == 1, "\(o)")
    }

    /// Names of the files under `root` that this process's children (sandbox monitors among
    /// them) hold open. procfs files are read with read(2): they report a size of 0.
    static func monitorOutputs(under root: String) -> Set<String> {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        let pids = Set(tasks.flatMap { SmallFile.contents(of: "/proc/self/task/\($0)/children").split(separator: " ") })
        var names: Set<String> = []
        for pid in pids {
            for fd in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd")) ?? [] {
                guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/\(fd)"),
                      target.hasPrefix(root + "/") else { continue }
                names.insert(String(target.split(separator: "/").last ?? ""))
            }
        }
        return names
    }

    @Test("the task's declared agent timeout is the one applied when no override is given")
    func declaredTimeoutApplies() throws {
        try requireRoot()
        let task = try #require(try fixtureBenchmark("basic").task("timeouts"))
        let o = try Harness(agent: "import time\nclass HarnessAgent:\n    def run(self, i, w): time.sleep(60)\n").run(task)
        #expect(o.status == .agentTimeout && o.detail == "agent timed out after 5s", "\(o)")
        #expect(o.agentSeconds >= 5 && o.agentSeconds < 15)
    }

    @Test("a crashing agent is still graded: its finished work passes, unfinished work is agent_crashed")
    func crashingAgent() throws {
        try requireRoot()
        let task = try #require(try fixtureBenchmark("basic").task("answer-42"))
        let finished = try Harness(agent: """
            class HarnessAgent:
                def run(self, instruction, workdir):
                    open("/app/answer.txt", "w").write("42")
                    raise RuntimeError("model API unreachable")
            """)
        let a = finished.run(task)
        #expect(a.status == .passed && a.reward == 1 && a.detail == "agent exited 1", "\(a)")

        let unfinished = try Harness(agent: "import os\nclass HarnessAgent:\n    def run(self, i, w): os.kill(os.getpid(), 9)\n",
                                     scratch: finished.scratch)
        let b = unfinished.run(task)
        #expect(b.status == .agentCrashed && b.reward == 0 && b.detail == "agent killed by signal 9; verifier reward 0.0", "\(b)")

        let syntax = try Harness(agent: "def broken(:\n", scratch: finished.scratch)
        let traces = try TempDir()
        let c = syntax.run(task, trace: traces.path)
        #expect(c.status == .agentCrashed && c.detail == "agent exited 1; verifier reward 0.0", "\(c)")
        #expect(read(traces.path + "/agent.stderr")?.contains("SyntaxError") == true)
    }

    @Test("the agent gets the instruction on stdin, an async run() is awaited, and /app holds the environment seed minus its Dockerfile")
    func agentProtocol() throws {
        try requireRoot()
        let task = try #require(try fixtureBenchmark("basic").task("seeded-sum"))
        let h = try Harness(agent: """
            import json, os, sys
            class HarnessAgent:
                async def run(self, instruction, workdir):
                    seen = {}
                    for root, dirs, files in os.walk(workdir):
                        for name in dirs + files:
                            p = os.path.join(root, name)
                            st = os.lstat(p)
                            seen[os.path.relpath(p, workdir)] = [st.st_uid, st.st_gid, oct(st.st_mode & 0o7777)]
                    print(json.dumps({"instruction": instruction, "workdir": workdir, "cwd": os.getcwd(),
                                      "files": seen, "app": [os.stat("/app").st_uid, oct(os.stat("/app").st_mode & 0o777)],
                                      "agent_module": sys.modules[type(self).__module__].__name__, "path": sys.path}))
                    open("/app/sum.txt", "w").write("12")
            """)
        let traces = try TempDir()
        let o = h.run(task, trace: traces.path)
        #expect(o.status == .passed, "\(o)")
        let view = try #require(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: traces.path + "/agent.stdout"))) as? [String: Any])
        #expect(view["instruction"] as? String == "Add up the numbers in /app/data/numbers.txt (one per line) and write the sum to /app/sum.txt.\n")
        #expect(view["workdir"] as? String == "/app" && view["cwd"] as? String == "/app")
        #expect(view["agent_module"] as? String == "agent")
        let files = try #require(view["files"] as? [String: [Any]])
        #expect(Set(files.keys) == ["data", "data/numbers.txt", "README.txt"])
        #expect(files.values.allSatisfy { ($0[0] as? Int) == 1000 && ($0[1] as? Int) == 1000 })
        #expect(files["data/numbers.txt"]?[2] as? String == "0o644")
        #expect((view["app"] as? [Any])?.first as? Int == 1000)
        #expect(!((view["path"] as? [String]) ?? [""]).contains { $0 == "" || $0 == "/app" })
    }

    @Test("oracle mode runs solution/solve.sh and passes every fixture task")
    func oracle() throws {
        try requireRoot()
        let bench = try fixtureBenchmark("basic")
        let h = try Harness(agent: nil, oracle: true)
        let outcomes = h.runAll(bench.tasks, concurrency: 2)
        #expect(outcomes.map(\.id) == bench.tasks.map(\.id))
        for o in outcomes { #expect(o.passed && (o.status == .passed), "\(o)") }
        // A task without a solution cannot be run as an oracle.
        let none = h.run(try #require(try fixtureBenchmark("verdicts").task("missing")))
        #expect(none.status == .setupFailed && none.detail?.contains("no solution/solve.sh") == true)
        #expect(listing(h.scratch.path).isEmpty)
    }

    @Test("a task whose task.toml does not load is not run: it scores 0 as setup_failed with the reason, and the others run as usual")
    func brokenTaskToml() throws {
        try requireRoot()
        let copy = try TempDir()
        let cp = Process()
        cp.executableURL = URL(fileURLWithPath: "/bin/cp")
        cp.arguments = ["-a", Paths.fixture("basic") + "/tasks", copy.path + "/tasks"]
        try cp.run()
        cp.waitUntilExit()
        let toml = try copy.file("tasks/seeded-sum/task.toml", "[agent]\ntimeout_sec = 1e300\n")
        let bench = try LocalBenchmark(directory: copy.path)
        let h = try Harness(agent: solverAgentSource())
        let traces = try TempDir()
        let outcomes = h.runAll(bench.tasks, concurrency: 2, trace: { traces.path + "/" + $0.id })
        for o in outcomes where o.id != "seeded-sum" { #expect(o.status == .passed, "\(o)") }
        let broken = try #require(outcomes.first { $0.id == "seeded-sum" })
        #expect(broken.status == .setupFailed && broken.reward == 0, "\(broken)")
        #expect(broken.detail == "\(toml):2: [agent] timeout_sec must be a positive number of seconds, at most 86400 (got 1e300)")
        #expect(broken.agentSeconds == 0 && broken.verifierSeconds == 0, "it ran: \(broken)")
        #expect(read(traces.path + "/seeded-sum/result.json")?.contains("setup_failed") == true)
        #expect(listing(h.scratch.path).isEmpty)
    }

    @Test("a configuration that cannot be run safely is refused up front")
    func configurationChecks() throws {
        try requireRoot()
        let agent = try makeAgent(solverAgentSource())
        let loader = PolicyLoader(searchPaths: [Paths.policies])
        func error(_ config: TaskRunConfiguration) throws -> String {
            try #require(throws: BenchmarkError.self) { try TaskRunner(configuration: config) }.message
        }
        // Not tmpfs: test-split work would reach a disk.
        #expect(try error(TaskRunConfiguration(policyLoader: loader, agentDirectory: agent.path, scratchRoot: Paths.testsDirectory))
            .contains("is not on tmpfs"))
        let scratch = try makeScratchRoot()
        chmod(scratch.path, 0o777)
        #expect(try error(TaskRunConfiguration(policyLoader: loader, agentDirectory: agent.path, scratchRoot: scratch.path))
            .contains("not writable by others"))
        chmod(scratch.path, 0o1777)
        _ = try TaskRunner(configuration: TaskRunConfiguration(policyLoader: loader, agentDirectory: agent.path, scratchRoot: scratch.path))
        chmod(scratch.path, 0o700)
        let empty = try TempDir()
        #expect(try error(TaskRunConfiguration(policyLoader: loader, agentDirectory: empty.path, scratchRoot: scratch.path))
            .contains("holds no agent.py"))
        var badPolicy = TaskRunConfiguration(policyLoader: loader, agentDirectory: agent.path, scratchRoot: scratch.path)
        badPolicy.taskPolicy = "no-such-policy"
        #expect(try error(badPolicy).contains("no policy named 'no-such-policy'"))
        // A policy with a placeholder the runner never fills would fail every task.
        let policies = try TempDir()
        try policies.file("needs-more.yaml", "extends: \(Paths.policies)/benchmark-task.yaml\nfilesystem:\n  mounts:\n    - ro: \"{secret_dir}:/secret\"\n")
        var extra = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: [policies.path, Paths.policies]),
                                         agentDirectory: agent.path, scratchRoot: scratch.path)
        extra.taskPolicy = "needs-more"
        #expect(try error(extra).contains("secret_dir"))
    }

    @Test("sandboxes launched while other threads of the process are being created neither deadlock nor fail")
    func launchesDuringThreadCreation() throws {
        try requireRoot()
        let task = try #require(try fixtureBenchmark("basic").task("answer-42"))
        let h = try Harness(agent: "class HarnessAgent:\n    def run(self, i, w): open('/app/answer.txt', 'w').write('42')\n")
        let churn = ThreadChurn()
        let before = DeadlockWatchdog.killed
        let outcomes = h.runAll(Array(repeating: task, count: 16), concurrency: 4)
        churn.stop()
        #expect(DeadlockWatchdog.killed == before,
                "a sandbox monitor deadlocked in glibc's setxid broadcast after _Fork (CSandboxLaunch must call setgroups/setresgid/setresuid as raw syscalls in its forked children)")
        for o in outcomes { #expect(o.status == .passed, "\(o)") }
        #expect(listing(h.scratch.path).isEmpty)
    }

    @Test("long sandbox output is capped in the trace with a marker, keeping its start and end")
    func traceCap() throws {
        try requireRoot()
        let task = try #require(try fixtureBenchmark("basic").task("answer-42"))
        let h = try Harness(agent: """
            import sys
            class HarnessAgent:
                def run(self, instruction, workdir):
                    sys.stdout.write("BEGIN" + "x" * (3 << 20) + "END")
            """)
        let traces = try TempDir()
        _ = h.run(task, trace: traces.path)
        let out = try #require(read(traces.path + "/agent.stdout"))
        #expect(out.hasPrefix("BEGINxxx") && out.hasSuffix("xxxEND"))
        #expect(out.contains("[autoharness: \((3 << 20) + 8 - (1 << 20)) bytes of \((3 << 20) + 8) left out]"))
        #expect(out.utf8.count < (1 << 20) + 100)
    }
}
