import Foundation
import Testing
import TestSupport

// `autoharness run` end to end: the scripted coding agents of Fixtures/agents run in the
// real coding-agent sandbox and talk to the real broker.

enum Fixtures {
    static let root = Built.packageRoot + "/Tests/ExperimentTests/Fixtures"
    static let agents = root + "/agents"
    static let policies = root + "/policies"
}

extension Experiment {
    /// Points the config's coding_agent at `command` (the fixture agents are bound
    /// read-only at their host path) and sets `values` (`key: value` lines anywhere).
    func configureRun(command: [String], values: [String: String] = [:], allow: [String] = [], testPolicy: Bool = false) throws {
        let path = root + "/experiment_config.yaml"
        var text = try String(contentsOfFile: path, encoding: .utf8)
        func json(_ a: [String]) -> String { String(decoding: try! JSONSerialization.data(withJSONObject: a), as: UTF8.self) }
        if testPolicy {
            text = text.replacingOccurrences(of: "\n  coding_agent_policy: coding-agent", with: "\n  coding_agent_policy: coding-agent-test\n  policy_dir: \(Fixtures.policies)")
        }
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var values = values
        values["command"] = json(command)
        values["binds"] = json([Fixtures.agents])
        values["allow"] = json(allow)
        for (k, v) in values {
            // A nested key first (`budget` is gate.budget, not the top-level budget: section).
            func matches(_ l: String) -> Bool { l.trimmingCharacters(in: .whitespaces).hasPrefix("\(k):") }
            let i = try #require(lines.firstIndex { $0.hasPrefix(" ") && matches($0) } ?? lines.firstIndex(where: matches), "no key \(k) in the config")
            let indent = lines[i].prefix { $0 == " " }
            lines[i] = "\(indent)\(k): \(v)"
        }
        try lines.joined(separator: "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }

    /// `autoharness run` with the slow-gate agent, killed with SIGKILL once its gate started.
    func killRunMidGate(values: [String: String]) throws {
        try configureRun(command: ["python3", Fixtures.agents + "/slow_gate.py"], values: values)
        let p = try start("run", "--max-hours", "0.1")
        var started = false
        for _ in 0..<200 where !started {
            usleep(50_000)
            started = (try? rows("gate_started").count) == 1
        }
        try #require(started, "the gate never started: \(agentLog)")
        usleep(300_000)
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
    }

    var agentLog: String { (try? String(contentsOfFile: root + "/.autoharness/run/agent.log", encoding: .utf8)) ?? "" }

    /// `ATTEMPT name: outcome` lines the hostile agent printed.
    func attempts() -> [String: String] {
        var out: [String: String] = [:]
        for line in agentLog.split(separator: "\n") where line.hasPrefix("ATTEMPT ") {
            let rest = line.dropFirst(8)
            guard let colon = rest.firstIndex(of: ":") else { continue }
            out[String(rest[..<colon])] = rest[rest.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return out
    }

    func statusJSON(_ extra: String...) throws -> [String: Any] {
        let r = try autoharness(["status", "--json", "--operator"] + extra + ["-C", root])
        return try #require(JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any], "\(r.stdout) \(r.stderr)")
    }

    func violations() throws -> [[String: Any]] { try statusJSON()["violations"] as? [[String: Any]] ?? [] }

    /// Ledger rows of one kind, as (seq, payload JSON).
    func rows(_ kind: String) throws -> [[String: Any]] {
        let r = try runProcess("/usr/bin/python3", ["-c", """
            import sqlite3, sys, json
            c = sqlite3.connect(sys.argv[1])
            print(json.dumps([json.loads(p) for (p,) in c.execute("SELECT payload FROM records WHERE kind = ? ORDER BY seq", (sys.argv[2],))]))
            """, root + "/.autoharness/ledger.sqlite", kind])
        return try #require(JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [[String: Any]], "\(r.stderr)")
    }
}

/// What a run must leave behind: no processes of its sandboxes, no mounts, no socket.
func expectNothingLeft(_ exp: Experiment, marker: String) {
    let left = leftoverProcesses(containing: marker)
    #expect(left.isEmpty, "processes left: \(left.map { ($0, procText("/proc/\($0)/cmdline") ?? "") })")
    let mounts = procText("/proc/self/mountinfo") ?? ""
    #expect(!mounts.contains(exp.root), "mounts left under \(exp.root)")
    #expect(!FileManager.default.fileExists(atPath: exp.root + "/.autoharness/run/broker/broker.sock"))
}

@Suite("autoharness run: the supervised loop with scripted coding agents", .serialized)
struct RunTests {
    @Test("a benign agent reads traces, edits with an atomic save, gates, is restarted with the continuation prompt, and reaches two accepted iterations")
    func benignAgent() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.configureRun(command: ["python3", Fixtures.agents + "/benign.py"],
                             values: ["min_improvement": "0", "restart_backoff": "0.2", "continue_prompt": "\"CONTINUE-PROMPT\""])
        let r = try exp.run("run", "--max-iterations", "2", "--max-hours", "0.1")
        #expect(r.status == 0, "\(r.stdout)\n\(r.stderr)\n\(exp.agentLog)")
        #expect(r.stdout.contains("stopped: --max-iterations 2 reached"), "\(r.stdout)")
        #expect(r.stdout.contains("gates: 2 (2 accepted, 0 rejected)"))
        #expect(r.stdout.contains("coding agent started 2 time(s)"))
        let log = exp.agentLog
        #expect(log.contains("prompt: Read PROGRAM.md and start the optimization loop."))
        #expect(log.contains("prompt: CONTINUE-PROMPT"), "the restart must use the continuation prompt")
        #expect(log.contains("history: commit ") && log.contains("autoharness: iteration 1"), "the agent reads the accepted history")
        // The Ledger-Head trailer counts rows written during held-out runs: not for the agent.
        #expect(log.contains("history shows the ledger head: False"), "\(log)")
        #expect(log.contains("$ autoharness benchmark -> 0") && log.contains("train: 0/8 passed"))
        // `status` through the broker is the agent's view, not the operator's.
        #expect(log.contains("$ autoharness status -> 0") && log.contains("held-out runs' are withheld"), "\(log)")
        #expect(log.contains("gate attempt 1: ACCEPTED") && log.contains("gate attempt 2: ACCEPTED"), "\(log)")

        // The history: baseline + two iterations, committed by the supervisor, verifiable; the
        // second gate's message is its description and its commit's body.
        let rows = try exp.file("workspace/results.tsv").split(separator: "\n")
        #expect(rows.count == 4)
        #expect(rows.last?.hasSuffix("\tteach every operation") == true && rows[2].hasSuffix("\t"), "\(rows)")
        #expect(try runProcess("/usr/bin/git", ["-C", exp.root, "log", "-1", "--format=%b"]).stdout.hasPrefix("teach every operation\n"))
        // The note for a human: taken (not a violation), shown to the operator only.
        #expect(log.contains("$ autoharness needs-human a key for the held-out account, please -> 0"), "\(log)")
        #expect(try exp.run("status", "--operator").stdout.contains("a key for the held-out account, please"))
        let st = try exp.statusJSON("--verify")
        #expect((st["verify"] as? [String: Any])?["ok"] as? Bool == true)
        #expect(st["best"] as? Double == 1.0)
        let commits = try runProcess("/usr/bin/git", ["-C", exp.root, "log", "--format=%s"]).stdout
        #expect(commits.contains("iteration 1") && commits.contains("iteration 2"))
        let learned = try exp.file("workspace/learnings.md")
        #expect(learned.contains("learned: all operations") && learned.contains("still failing"))
        // The supervisor-owned agent/agent.py is the accepted one.
        #expect(try exp.file("agent/agent.py").contains("a * b"))
        let runs = try exp.rows("run_ended")
        #expect(runs.count == 1 && runs[0]["accepted"] as? Int == 2)
        let violations = try exp.violations()
        #expect(violations.isEmpty, "a benign agent commits no violations: \(violations)")
        expectNothingLeft(exp, marker: Fixtures.agents)

        // A second run counts its own gates: the first run's two accepted ones spend none of
        // its budget.
        let script = """
            import subprocess
            open('agent/agent.py', 'a').write('# no better\\n')
            print(subprocess.run(['autoharness', 'gate'], capture_output=True, text=True).stdout)
            """
        try exp.configureRun(command: ["python3", "-c", script], values: ["budget": "1"])
        let second = try exp.run("run", "--max-iterations", "2", "--max-hours", "0.1")
        #expect(second.stdout.contains("gates: 1 (0 accepted, 1 rejected)") && second.stdout.contains("gate budget 1 spent"), "\(second.stdout)")
        #expect(!second.stdout.contains("(resumed)"))
    }

    @Test("a hostile agent's every attempt fails, is recorded in the ledger, and the score history stays honest")
    func hostileAgent() throws {
        try requireRoot()
        let allowed = try HostEchoServer()
        let denied = try HostEchoServer()
        let exp = try Experiment()
        let split = try exp.split()
        try exp.configureRun(command: ["python3", Fixtures.agents + "/hostile.py"],
                             values: ["env_pass": "[ALLOWED_PORT, DENIED_PORT]", "budget": "3", "restart_backoff": "0.2"],
                             allow: ["127.0.0.1:\(allowed.port)"], testPolicy: true)
        var env = ProcessInfo.processInfo.environment
        env["ALLOWED_PORT"] = String(allowed.port)
        env["DENIED_PORT"] = String(denied.port)
        let r = try autoharness(["run", "-C", exp.root, "--max-hours", "0.1"], environment: env)
        let a = exp.attempts()
        let log = exp.agentLog
        #expect(r.status == 0, "\(r.stdout)\n\(r.stderr)\n\(log)")
        #expect(r.stdout.contains("stopped: gate budget 3 spent"), "\(r.stdout)")
        #expect(a["done"] == "yes", "the hostile script did not run to the end:\n\(log)")
        // 3 (nothing left to do), not 1, which reads as a rejected gate.
        #expect(a["after_stop"]?.hasPrefix("exit 3: autoharness: the run is stopping") == true, "\(a["after_stop"] ?? "none")")

        // Files: absent from the sandbox, and nothing can be created where they would be.
        #expect(a["read_split"] == "ENOENT")
        #expect(a["write_ledger"] == "EROFS" || a["write_ledger"] == "ENOENT", "\(a)")
        #expect(a["mkdir_private"] == "EROFS")
        // Views are root's files on a read-only mount: refused by permissions (EACCES) or, for
        // an open that needs no permission check first, by the mount (EROFS).
        let refusedWrite: Set<String> = ["EROFS", "EACCES"]
        #expect(refusedWrite.contains(a["edit_results_tsv"] ?? "") && refusedWrite.contains(a["edit_suite_json"] ?? ""), "\(a)")
        #expect(a["write_outside_staging"] == "EROFS" && refusedWrite.contains(a["write_workspace"] ?? ""), "\(a)")
        // Broker: test ids, symlinked agent.py, forged messages, unknown verbs all refused.
        #expect(a["test_ids"] == "exit 2")
        #expect(a["symlink_agent"] == "exit 2")
        // The exit frame: 'x', its length 1 (u32, little-endian), status 2.
        #expect(a["forged_bad_magic"]?.hasSuffix("x\\x01\\x00\\x00\\x002'") == true, "\(a["forged_bad_magic"] ?? "")")
        #expect(a["forged_oversized"]?.hasSuffix("x\\x01\\x00\\x00\\x002'") == true)
        #expect(a["broker_peer_pid"] == "0", "the supervisor must not be visible from the sandbox")
        #expect(a["unknown_verb"] == "exit 2" && a["status_operator"] == "exit 2")
        // A client that never sends is dropped after 5 s; the next request is answered.
        #expect(a["stalled_client"]?.hasPrefix("status exit 0 after ") == true, "\(a)")
        if let s = a["stalled_client"], let secs = Int(s.split(separator: " ").last?.dropLast() ?? "") { #expect(secs <= 8, "\(s)") }
        #expect(a["replace_socket"] == "EROFS", "the broker's directory is read-only inside")
        // Egress: only the allowlisted host, only through the proxy.
        #expect(a["egress_allowed"]?.contains("200") == true && a["egress_allowed"]?.contains("echo:ping") == true, "\(a)")
        #expect(a["egress_denied"]?.contains("403") == true, "\(a)")
        #expect(a["egress_direct"] == "ECONNREFUSED")
        // Syscalls and processes.
        #expect(a["ptrace_init"]?.hasPrefix("rc -1") == true && a["unshare_user"]?.hasPrefix("rc -1") == true, "\(a)")
        #expect(a["fork_bomb"]?.hasPrefix("EAGAIN") == true, "\(a)")
        #expect(a["inotify"]?.hasPrefix("rc -1") == true && a["mincore"]?.hasPrefix("rc -1") == true, "\(a)")
        // Gates: the same bytes twice are refused; the budget stops the loop.
        #expect(a["gate_same_0"] == "exit 1", "first gate of an unchanged agent.py runs and is rejected: \(a)")
        #expect(a["gate_same_1"] == "exit 2" && a["gate_same_2"] == "exit 2")
        #expect(a["gate_new_0"] == "exit 1" && a["gate_new_1"] == "exit 1")
        #expect(a["gate_new_2"] == "exit 2", "the fourth gate exceeds gate.budget 3: \(a)")

        // Every attempt is a ledger row by the coding agent.
        let v = try exp.violations().filter { $0["actor"] as? String == "coding agent" }
        let kinds = Set(v.compactMap { $0["kind"] as? String })
        for k in ["refused_task_ids", "copy_back_refused", "broker_protocol", "refused_request", "egress_denied", "syscall",
                  "pids_limit", "staging_extra_file", "repeat_gate", "gate_budget"] {
            #expect(kinds.contains(k), "no '\(k)' violation recorded; got \(kinds.sorted())")
        }
        let details = v.compactMap { $0["detail"] as? String }.joined(separator: "\n")
        #expect(details.contains("is a symbolic link"))
        #expect(details.contains("127.0.0.1:\(denied.port)"))
        #expect(details.contains("ptrace"))
        // Extra files: an import hook is a violation; a helper module only gets a notice;
        // Python's cache and an editor's swap file nothing.
        #expect(details.contains("agent/sitecustomize.py") && !details.contains("agent/helper.py") && !details.contains("__pycache__")
                && !details.contains(".swp"), "\(details)")
        #expect(a["extras_notice"]?.contains("only agent/agent.py is kept; not taken: agent/helper.py, agent/sitecustomize.py") == true,
                "\(a["extras_notice"] ?? "no notice")")
        #expect(details.contains("inotify_add_watch") && details.contains("mincore"), "\(details)")
        #expect(!details.contains("inotify_init1"), "inotify_init1 is refused quietly (seccomp.quiet): \(details)")
        #expect(a["inotify"] == "rc -1 ENOSYS" && a["inotify_watch"] == "rc -1 EPERM", "\(a)")

        // The honest history: nothing accepted, views and ledger agree, no test data anywhere.
        let st = try exp.statusJSON("--verify")
        #expect((st["verify"] as? [String: Any])?["ok"] as? Bool == true, "\(st)")
        #expect((st["iterations"] as? [Any])?.count == 1)
        #expect(try exp.file("workspace/results.tsv").split(separator: "\n").count == 2)
        for id in split.test { #expect(exp.filesContaining("MARKER-\(id)-a91f").isEmpty, "\(id) leaked") }
        #expect(!FileManager.default.fileExists(atPath: exp.root + "/evil.py"))
        // The agent's status view withholds nothing it may see and shows no held-out rows.
        #expect(r.stdout.contains("coding agent: refused_task_ids"))
        expectNothingLeft(exp, marker: Fixtures.agents)
    }

    @Test("kill -9 of the supervisor mid-gate, then `autoharness run` again: resumed, the gate recorded as interrupted, nothing lost or duplicated")
    func killDuringRunGate() throws {
        try requireRoot()
        var exp = try Experiment()
        // Its own cgroup: the frozen agent's cgroup waits there for the restart's sweep, not
        // another suite's supervisor's (CgroupEnclosure).
        exp.enclosure = try CgroupEnclosure()
        try exp.killRunMidGate(values: ["min_improvement": "0"])
        // The gate's sandboxes die with their supervisor. The coding agent was frozen for
        // the gate and stays frozen (not one of its threads runs) until the next supervisor
        // ends it.
        var running = hostProcesses(containing: "slow_gate.py").filter { !inFrozenCgroup($0) }
        for _ in 0..<50 where !running.isEmpty {
            usleep(100_000)
            running = hostProcesses(containing: "slow_gate.py").filter { !inFrozenCgroup($0) }
        }
        #expect(running.isEmpty, "part of the coding agent runs on after its supervisor died mid-gate")
        let frozen = hostProcesses(containing: "slow_gate.py")
        #expect(try exp.rows("run_ended").isEmpty)

        // The same experiment, an agent that writes a working agent.py and gates at once.
        let finisher = """
            import subprocess
            open('agent/agent.py', 'w').write(open('\(Fixtures.agents)/solver.py').read())
            print(subprocess.run(['autoharness', 'gate'], capture_output=True, text=True).stdout)
            """
        try exp.configureRun(command: ["python3", "-c", finisher], values: [:])
        let r = try exp.run("run", "--max-iterations", "1", "--max-hours", "0.1")
        #expect(r.status == 0, "\(r.stdout)\n\(r.stderr)\n\(exp.agentLog)")
        #expect(r.stdout.contains("(resumed)"), "\(r.stdout)")
        // The gate starts after the freeze, so the killed supervisor left a frozen agent.
        #expect(!frozen.isEmpty, "no frozen coding agent after kill -9 mid-gate")
        #expect(r.stderr.contains("left by a supervisor that is gone"), "\(r.stderr)")
        #expect(frozen.allSatisfy { kill($0, 0) != 0 }, "the frozen coding agent of the killed supervisor survived the restart")
        let starts = try exp.rows("run_started")
        #expect(starts.count == 2 && starts[1]["resumed"] as? Bool == true && starts[0]["runID"] as? String == starts[1]["runID"] as? String)
        let attempts = try exp.rows("gate_attempt")
        #expect(attempts.first?["reason"] as? String == "interrupted")
        #expect(attempts.filter { $0["accepted"] as? Bool == true }.count == 1)
        let iterations = try exp.rows("iteration").compactMap { $0["iteration"] as? Int }
        #expect(iterations == Array(0..<iterations.count), "iterations must be unique and contiguous: \(iterations)")
        #expect(try exp.statusJSON("--verify")["verify"].flatMap { ($0 as? [String: Any])?["ok"] as? Bool } == true)
        expectNothingLeft(exp, marker: Fixtures.agents)
    }

    @Test("a gate cut off by kill -9 still spends gate.budget: after the resume the next gate is refused")
    func interruptedGateSpendsBudget() throws {
        try requireRoot()
        var exp = try Experiment()
        exp.enclosure = try CgroupEnclosure()  // as in killDuringRunGate
        try exp.killRunMidGate(values: ["budget": "1", "min_improvement": "0"])

        let finisher = """
            import subprocess
            open('agent/agent.py', 'w').write(open('\(Fixtures.agents)/solver.py').read())
            r = subprocess.run(['autoharness', 'gate'], capture_output=True, text=True)
            print('GATE-EXIT', r.returncode, r.stderr.strip())
            """
        try exp.configureRun(command: ["python3", "-c", finisher], values: [:])
        let r = try exp.run("run", "--max-hours", "0.1")
        #expect(r.stdout.contains("(resumed)") && r.stdout.contains("stopped: gate budget 1 spent"), "\(r.stdout)")
        // Nothing was left to do: a distinct exit status and the reason as stderr's last line.
        #expect(r.status == 3, "\(r.stderr)")
        #expect(r.stderr.split(separator: "\n").last == "autoharness: nothing left to do: gate budget 1 spent", "\(r.stderr)")
        #expect(try exp.rows("run_ended").last?["nothingLeft"] as? Bool == true)
        #expect(!exp.agentLog.contains("GATE-EXIT"), "the agent was started again with the budget spent: \(exp.agentLog)")
        #expect(r.stderr.contains("left by a supervisor that is gone"), "the frozen agent was not ended: \(r.stderr)")
        #expect(try exp.rows("gate_started").count == 1, "a second gate ran beyond gate.budget 1")
        #expect(try exp.rows("gate_attempt").first?["reason"] as? String == "interrupted")
        expectNothingLeft(exp, marker: Fixtures.agents)
    }

    @Test("a flood of refused requests is recorded at most 30 rows a minute, the rest counted in one row; the broker keeps answering")
    func refusalFloodRateLimited() throws {
        try requireRoot()
        let exp = try Experiment()
        let script = """
            import subprocess
            codes = [subprocess.run(['autoharness', 'bogus-verb'], capture_output=True).returncode for _ in range(120)]
            print('FLOOD', sorted(set(codes)), flush=True)
            open('agent/agent.py', 'a').write('# changed\\n')
            r = subprocess.run(['autoharness', 'gate'], capture_output=True, text=True)
            print('GATE', r.returncode, flush=True)
            """
        try exp.configureRun(command: ["python3", "-c", script], values: ["budget": "1"])
        let r = try exp.run("run", "--max-hours", "0.1")
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        #expect(exp.agentLog.contains("FLOOD [2]") && exp.agentLog.contains("GATE "), "\(exp.agentLog)")
        let rows = try exp.violations().filter { $0["kind"] as? String == "refused_request" }
        let details = rows.compactMap { $0["detail"] as? String }
        #expect(rows.count <= 31, "\(rows.count) rows")
        #expect(details.contains { $0.hasPrefix("90 more refused requests") }, "\(details.suffix(3))")
    }

    @Test("SIGTERM stops the run cleanly: agent tree killed, run recorded as ended, no socket, mount or process left")
    func sigtermStopsCleanly() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.configureRun(command: ["python3", Fixtures.agents + "/sleeper.py"])
        let out = exp.root + "/../run.out"
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Built.autoharness)
        p.arguments = ["run", "-C", exp.root, "--max-hours", "0.1"]
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        p.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        p.standardError = FileHandle.nullDevice
        try p.run()
        var sleeping = false
        for _ in 0..<200 where !sleeping {
            usleep(50_000)
            sleeping = exp.agentLog.contains("sleeping")
        }
        try #require(sleeping, "the agent never started")
        #expect(FileManager.default.fileExists(atPath: exp.root + "/.autoharness/run/broker/broker.sock"))
        kill(p.processIdentifier, SIGTERM)
        let t0 = Date()
        p.waitUntilExit()
        #expect(Date().timeIntervalSince(t0) < 15)
        #expect(p.terminationStatus == 0)
        let report = try String(contentsOfFile: out, encoding: .utf8)
        #expect(report.contains("stopped: SIGTERM received"), "\(report)")
        let ended = try exp.rows("run_ended")
        #expect(ended.count == 1 && ended[0]["reason"] as? String == "SIGTERM received")
        expectNothingLeft(exp, marker: Fixtures.agents)
    }

    @Test("an agent.py that does not compile is refused before any task runs, with the compiler's message")
    func compileCheck() throws {
        try requireRoot()
        let exp = try Experiment()
        let script = """
            import subprocess
            open('agent/agent.py', 'w').write('class HarnessAgent:\\n    def run(self, instruction, workdir)\\n        pass\\n')
            r = subprocess.run(['autoharness', 'gate'], capture_output=True, text=True)
            print('GATE-EXIT', r.returncode, r.stderr)
            raise SystemExit(1)  # ends the run: a failing quick exit counts as a crash (max_crashes 1)
            """
        try exp.configureRun(command: ["python3", "-c", script], values: ["max_crashes": "1"])
        _ = try exp.run("run", "--max-hours", "0.1")
        let log = exp.agentLog
        #expect(log.contains("GATE-EXIT 2") && log.contains("does not compile") && log.contains("SyntaxError"), "\(log)")
        #expect(try exp.rows("gate_started").isEmpty, "nothing may run for an agent.py that does not compile")
    }

    @Test("the coding agent is frozen while a gate runs: none of its threads run while held-out tasks do")
    func frozenDuringGate() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.configureRun(command: ["python3", Fixtures.agents + "/ticker.py"], values: ["max_non_improving": "1"])
        let r = try exp.run("run", "--max-hours", "0.1")
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        let line = try #require(exp.agentLog.split(separator: "\n").first { $0.hasPrefix("GATE ") }, "\(exp.agentLog)")
        let f = line.split(separator: " ")
        let gate = try #require(Double(f[1])), gap = try #require(Double(f[3]))
        // Four held-out tasks of 1.5 s at concurrency 2: the gate takes over 3 s, and the
        // ticker (every 10 ms when it runs) must have been stopped for nearly all of it.
        #expect(gate > 3.0)
        #expect(gap > gate - 1.0, "max gap \(gap)s in a \(gate)s gate: the agent ran during the gate")
    }

    @Test("with candidates (loop.candidates) the coding agent is frozen from the ranking's first train task to the gate's answer; the gated candidate becomes its agent.py")
    func frozenDuringCandidates() throws {
        try requireRoot()
        let exp = try Experiment(config: ["candidates": "2", "on_reject": "keep"])
        try exp.configureRun(command: ["python3", Fixtures.agents + "/candidate_ticker.py"], values: ["max_non_improving": "1"])
        let r = try exp.run("run", "--max-hours", "0.1")
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        let log = exp.agentLog
        #expect(log.contains("CANDIDATE-EXIT 0 candidate 1 of at most 2") && log.contains("CANDIDATE-EXIT 0 candidate 2 of at most 2"), "\(log)")
        #expect(log.contains("2 candidates ran on the train split") && log.contains("AGENT-PY # candidate 1"), "\(log)")
        let line = try #require(log.split(separator: "\n").first { $0.hasPrefix("GATE ") }, "\(log)")
        let f = line.split(separator: " ")
        let gate = try #require(Double(f[1])), gap = try #require(Double(f[3]))
        // Two candidates on 8 train tasks and one on 4 held-out ones, 0.5 s each at
        // concurrency 2: over 4 s, during which the ticker must not have run.
        #expect(gate > 4.0)
        #expect(gap > gate - 1.0, "max gap \(gap)s in a \(gate)s gate: the agent ran during the gate")
        #expect(try exp.rows("candidates_ranked").count == 1 && exp.rows("gate_started").count == 1)
    }

    @Test("the freeze holds a zombie-leader process that re-arms SIGCONT to itself and a fork loop for the whole gate")
    func freezeHoldsEvaders() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.configureRun(command: ["python3", Fixtures.agents + "/evader.py"], values: ["max_non_improving": "1"])
        let r = try exp.run("run", "--max-hours", "0.1")
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        let log = exp.agentLog
        // The attack was live: the leader is a zombie while its other thread ticks, and both
        // tickers ran before the gate and again after it.
        let setup = try #require(log.split(separator: "\n").first { $0.hasPrefix("LEADER ") }, "\(log)").split(separator: " ")
        #expect(setup[1] == "Z" && (Int(setup[3]) ?? 0) >= 2, "\(setup)")
        #expect((Int(setup[5]) ?? 0) > 20 && (Int(setup[7]) ?? 0) > 0, "\(setup)")
        let line = try #require(log.split(separator: "\n").first { $0.hasPrefix("GATE ") }, "\(log)")
        let f = line.split(separator: " ")
        let gate = try #require(Double(f[1])), gap = try #require(Double(f[3]))
        #expect(gate > 3.0)
        #expect(gap > gate - 1.0, "max gap \(gap)s in a \(gate)s gate: part of the agent ran during the gate")
    }

    @Test("without a cgroup freezer the coding agent is stopped for the gate, daemon and all, and restarted after it with the gate's answer")
    func stoppedWithoutFreezer() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.configureRun(command: ["python3", Fixtures.agents + "/stoppable.py"], values: ["max_non_improving": "2"])
        // A host without a freezer: this one with its v1 freezer and cgroup2 mount unmounted,
        // in a mount namespace of the test's own.
        let r = try runProcess("/usr/bin/unshare", [
            "-m", "--propagation", "private", "/bin/sh", "-c",
            RayClusterTests.dropLoopMounts + "; umount /sys/fs/cgroup/freezer && umount /sys/fs/cgroup/unified && exec \"$0\" \"$@\"",
            Built.autoharness, "run", "--max-hours", "0.1", "-C", exp.root,
        ])
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        #expect(r.stderr.contains("no cgroup freezer: the coding agent was stopped"), "\(r.stderr)")
        let log = exp.agentLog
        #expect(!log.contains("UNREACHABLE"), "a gate answered a live agent: \(log)")
        // Two gates ran, each with the agent stopped; the restart got the first answer.
        #expect(try exp.rows("gate_started").count == 2)
        #expect(try exp.rows("note").filter { ($0["text"] as? String)?.contains("no cgroup freezer") == true }.count == 2)
        let prompt = try #require(log.split(separator: "\n").first { $0.hasPrefix("PROMPT ") }, "no restart: \(log)")
        #expect(prompt.contains("answered while you were stopped") && prompt.contains("gate attempt 1: REJECTED"), "\(prompt)")
        // The daemon the first start left behind was killed with it: not one tick after the
        // first gate started, which the supervisor records only once every process of the
        // agent's sandbox is gone (a bound by cause, not by a delay a loaded host can exceed:
        // a surviving daemon would tick on through the whole gate).
        let ticks = ((try? String(contentsOfFile: exp.root + "/.autoharness/run/home/ticks", encoding: .utf8)) ?? "")
            .split(separator: "\n").compactMap { Double($0) }
        #expect(ticks.count > 10, "the daemon never ticked")
        let started = try runProcess("/usr/bin/python3", ["-c", """
            import sqlite3, sys, datetime
            c = sqlite3.connect(sys.argv[1])
            (t,) = c.execute("SELECT time FROM records WHERE kind = 'gate_started' ORDER BY seq LIMIT 1").fetchone()
            print(datetime.datetime.strptime(t, '%Y-%m-%dT%H:%M:%S.%fZ').replace(tzinfo=datetime.timezone.utc).timestamp())
            """, exp.root + "/.autoharness/ledger.sqlite"])
        let gateStarted = try #require(Double(started.stdout.trimmingCharacters(in: .whitespacesAndNewlines)), "\(started.stderr)")
        // The row's time is rounded to the millisecond.
        let late = ticks.filter { $0 > gateStarted + 0.002 }
        #expect(late.isEmpty, "the daemon ticked \(late.count) times after the gate started (\(gateStarted)): \(late.prefix(3))")
        expectNothingLeft(exp, marker: Fixtures.agents)
    }

    @Test("when the ledger cannot be written (a full disk), the agent is stopped: nothing happens unrecorded")
    func unrecordableStops() throws {
        try requireRoot()
        let dir = try TempDir()
        let mnt = dir.path + "/small"
        try FileManager.default.createDirectory(atPath: mnt, withIntermediateDirectories: true)
        let m = try runProcess("/bin/mount", ["-t", "tmpfs", "-o", "size=24m", "tmpfs", mnt])
        try #require(m.status == 0, "mount tmpfs: \(m.stderr)")
        defer { _ = try? runProcess("/bin/umount", ["-l", mnt]) }
        let root = mnt + "/exp"
        #expect(try autoharness(["init", root, "--benchmark", "local", "--dataset", Experiment.fixture]).status == 0)
        #expect(try autoharness(["prepare", "-C", root]).status == 0)
        let exp = Experiment(existing: root, temp: dir)
        // Fill the disk from $HOME, then make a request that must be recorded.
        let script = """
            import subprocess, time
            try:
                with open('/home/agent/fill', 'wb') as f:
                    while True: f.write(b'x' * (1 << 20))
            except OSError as e:
                print('FILLED', e.errno, flush=True)
            for i in range(20):
                subprocess.run(['autoharness', 'record'], capture_output=True)
                time.sleep(0.2)
            print('STILL RUNNING', flush=True)
            """
        try exp.configureRun(command: ["python3", "-c", script])
        let r = try exp.run("run", "--max-hours", "0.1")
        #expect(r.status == 5, "a run stopped by an unwritable ledger exits as an I/O or ledger error: \(r.status)")
        #expect(r.stderr.contains("could not record") && r.stderr.contains("stopping the coding agent"), "\(r.stderr)")
        // Not even the run's end could be recorded: the report is on stderr, saying so.
        #expect(r.stderr.contains("run ") && r.stderr.contains("NOT RECORDED:") && !r.stdout.contains("stopped:"), "\(r.stdout) \(r.stderr)")
        #expect(!exp.agentLog.split(separator: "\n").contains("STILL RUNNING"), "the agent went on after a violation could not be recorded")
        expectNothingLeft(exp, marker: "/home/agent/fill")
    }

    @Test("an agent that keeps exiting at once is a crash loop: the run stops with the reason and exit 1")
    func crashLoop() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.configureRun(command: ["python3", "-c", "import sys; print('no key'); sys.exit(3)"],
                             values: ["restart_backoff": "0.05", "max_crashes": "3"])
        let r = try exp.run("run", "--max-hours", "0.1")
        #expect(r.status == 1, "\(r.stdout) \(r.stderr)")
        #expect(r.stdout.contains("stopped: crash loop: the coding agent exited 3 times in a row"), "\(r.stdout)")
        #expect(r.stdout.contains("exited with code 3"))
        #expect(exp.agentLog.split(separator: "\n").filter { $0 == "no key" }.count == 3)
    }

    @Test("each session's reported usage is a ledger row; budget.max_cost_usd stops the run after the session that reaches it, and run, status and the report show tokens and cost")
    func costBudgetBetweenSessions() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.configureRun(command: ["python3", Fixtures.agents + "/spender.py", "claude"],
                             values: ["restart_backoff": "0.05", "max_cost_usd": "1.0"])
        let r = try exp.run("run", "--max-hours", "0.1")
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        #expect(r.stdout.contains("stopped: budget.max_cost_usd $1.0000 reached ($1.2000: the coding agent's and the benchmark's model spend as they reported it)"), "\(r.stdout)")
        #expect(r.stderr.contains("coding agent session 1 (claude-test-1): 3.6k tokens in (500 cached), 210 out, $0.6000"), "\(r.stderr)")
        #expect(r.stdout.contains("coding agent usage (as its CLI reported it): 7.2k tokens in (1.0k cached), 420 out, $1.2000"), "\(r.stdout)")
        let sessions = try exp.rows("agent_session")
        #expect(sessions.count == 2, "\(sessions)")
        let usage = try #require(sessions.first?["usage"] as? [String: Any])
        #expect(usage["inputTokens"] as? Int == 3100 && usage["cacheReadTokens"] as? Int == 500 && usage["outputTokens"] as? Int == 210, "\(usage)")
        #expect(usage["costUSD"] as? Double == 0.6 && usage["model"] as? String == "claude-test-1", "\(usage)")
        #expect(sessions.first?["exit"] as? String == "exited with code 0")
        let status = try exp.run("status", "--operator")
        #expect(status.stdout.contains("coding agent: 2 session(s), 7.2k tokens in (1.0k cached), 420 out, $1.2000"), "\(status.stdout)")
        let json = try exp.statusJSON()
        #expect((json["coding_agent_usage"] as? [String: Any])?["cost_usd"] as? Double == 1.2, "\(json)")
        // What the coding agent may see of status carries no account.
        #expect(!(try exp.run("status").stdout.contains("tokens")))
        #expect(try exp.run("report").status == 0)
        let html = try String(contentsOfFile: exp.root + "/report.html", encoding: .utf8)
        #expect(html.contains("coding agent: 2 session(s)"), "\(html.prefix(2000))")
    }

    @Test("budget.max_cost_usd stops a session that is still running once its priced tokens reach it")
    func costBudgetMidSession() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.configureRun(command: ["python3", Fixtures.agents + "/spender.py", "codex"], values: ["max_cost_usd": "1.0"])
        let path = exp.root + "/experiment_config.yaml"
        let text = try String(contentsOfFile: path, encoding: .utf8)
            .replacingOccurrences(of: "  # price_usd_per_mtok: {input: 1.25, output: 10, cache_read: 0.125}", with: "  price_usd_per_mtok: {input: 1, output: 10, cache_read: 0.5}")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let t0 = Date()
        let r = try exp.run("run", "--max-hours", "0.1")
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        // Each turn: 60k × $1 + 40k × $0.5 + 10k × $10 per million = $0.18.
        #expect(r.stdout.contains("stopped: budget.max_cost_usd $1.0000 reached"), "\(r.stdout)")
        #expect(Date().timeIntervalSince(t0) < 30)
        let sessions = try exp.rows("agent_session")
        #expect(sessions.count == 1, "\(sessions)")
        let cost = try #require((sessions.first?["usage"] as? [String: Any])?["costUSD"] as? Double)
        #expect(cost >= 1.0, "\(sessions)")
    }

    @Test("a rejected gate restores the last accepted agent.py in staging (on_reject: revert), and keep leaves it")
    func rejectReverts() throws {
        try requireRoot()
        for mode in ["revert", "keep"] {
            let exp = try Experiment()
            // Gate a regression-free but non-improving edit, then report what staging holds.
            let script = """
                import subprocess
                open('agent/agent.py', 'a').write('# no better\\n')
                print(subprocess.run(['autoharness', 'gate'], capture_output=True, text=True).stdout)
                print('STAGED-HAS-EDIT:', '# no better' in open('agent/agent.py').read())
                """
            try exp.configureRun(command: ["python3", "-c", script], values: ["on_reject": mode, "max_non_improving": "1"])
            let r = try exp.run("run", "--max-hours", "0.1")
            #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
            #expect(r.stdout.contains("1 consecutive gates without improvement"), "\(r.stdout)")
            let log = exp.agentLog
            #expect(log.contains("REJECTED"))
            if mode == "revert" {
                #expect(log.contains("restored to the last accepted version"))
                #expect(log.contains("STAGED-HAS-EDIT: False"), "\(log)")
                #expect(!(try exp.file("agent/agent.py")).contains("# no better"))
            } else {
                #expect(log.contains("STAGED-HAS-EDIT: True"), "\(log)")
                // keep: the supervisor's agent/agent.py is the last judged candidate.
                #expect((try exp.file("agent/agent.py")).contains("# no better"))
            }
        }
    }
}

@Suite("autoharness report")
struct ReportTests {
    @Test("the report is one self-contained HTML file with the charts and tables the history calls for")
    func reportAfterRun() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.configureRun(command: ["python3", Fixtures.agents + "/benign.py"], values: ["min_improvement": "0", "restart_backoff": "0.1"])
        #expect(try exp.run("run", "--max-iterations", "2", "--max-hours", "0.1").status == 0)
        try exp.setAgent(Agents.all + "\n# same behaviour, new bytes\n")
        _ = try exp.run("gate")  // a scored, rejected attempt (a tie)
        _ = try exp.run("benchmark", "--task-ids", try exp.split().test[0])  // a recorded refusal
        let r = try exp.run("report")
        #expect(r.status == 0, "\(r.stderr)")
        let path = r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(path == exp.root + "/report.html")
        let html = try String(contentsOfFile: path, encoding: .utf8)
        // Self-contained: no scripts, no external references.
        #expect(!html.contains("<script") && !html.contains("http://www.w3.org/1999") && !html.contains("src=") && !html.contains("href="))
        #expect(html.components(separatedBy: "<svg").count - 1 == 4, "four charts")
        // Two accepted and one rejected scored attempt, as points of their class.
        #expect(html.components(separatedBy: "<circle class=\"ok\"").count - 1 >= 2)
        #expect(html.components(separatedBy: "<circle class=\"no\"").count - 1 == 1)
        #expect(html.contains("attempt 3: 1.0000 rejected"))
        // The record-keeping: the gate's message as its explorer title and its iteration's
        // description, the coding agent's note for a human, learnings.md (as text).
        #expect(html.contains("<b>#2</b> “teach every operation” · accepted") && html.contains("<td>teach every operation</td>"), "\(html)")
        #expect(html.contains("<h2>Needs from a human</h2>") && html.contains("a key for the held-out account, please"))
        #expect(html.contains("<h2>Learnings</h2>") && html.contains("learned: all operations"))
        // Tables: every iteration with its commit and diff stat; the violation.
        let st = try exp.statusJSON()
        for it in st["iterations"] as? [[String: Any]] ?? [] {
            #expect(html.contains("<code>\(it["commit"] as? String ?? "?")</code>"))
        }
        #expect(html.contains("<td>+"), "diff line counts of accepted commits")
        // The explorer: every attempt, collapsed, with its diff against the last accepted one.
        let attempts = try exp.rows("gate_attempt")
        #expect(html.components(separatedBy: "<details class=\"att ").count - 1 == attempts.count)
        #expect(html.contains("<details class=\"att no\" id=\"attempt-3\">"))
        #expect(html.contains("<span class=\"d-a\">") && html.contains("# same behaviour, new bytes"), "attempt 3 adds one comment line")
        #expect(html.contains("refused_task_ids"))
        // Well-formed enough for a strict XML parser once the doctype is dropped.
        let check = try runProcess("/usr/bin/python3", ["-c", """
            import sys, xml.dom.minidom
            t = open(sys.argv[1]).read().split('\\n', 1)[1]
            xml.dom.minidom.parseString(t); print('ok')
            """, path])
        #expect(check.stdout.contains("ok"), "\(check.stderr)")
        // Look at it: scripts/render-report screenshots it in headless Chromium.
    }

    @Test("the explorer in headless Chromium: one collapsed block per attempt, the diff coloured, and agent.py's markup only ever text")
    func explorerInChromium() throws {
        try requireRoot()
        let chromium = "/usr/bin/chromium"
        try #require(FileManager.default.isExecutableFile(atPath: chromium), "Debian's chromium is missing: scripts/bootstrap installs it")
        let exp = try Experiment(config: ["min_improvement": "0"])
        try exp.setAgent(Agents.addOnly)
        #expect(try exp.run("gate").status == 0)
        // A candidate whose source tries to become markup in the operator's report.
        try exp.setAgent(Agents.all + """

            # </pre></details><script>document.title="PWNED"</script><img src=x onerror="document.title='PWNED'">
            NOTE = "</span><b id='injected'>bold</b>"
            X = 1  # \u{0600}<script \u{0600}>document.title='PWNED'//\u{0600}</script \u{0600}>

            """)
        #expect(try exp.run("gate").status == 0)
        #expect(try exp.run("report").status == 0)
        let dom = try runProcess(chromium, ["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", "file://" + exp.root + "/report.html"])
        try #require(dom.status == 0 && dom.stdout.contains("<h2>Explorer</h2>"), "\(dom.stderr.suffix(2000))")
        // As the browser built it: two attempt blocks, no element from agent.py.
        #expect(dom.stdout.components(separatedBy: "<details class=\"att ok\"").count - 1 == 2)
        #expect(!dom.stdout.contains("<script") && !dom.stdout.contains("<img") && !dom.stdout.contains("id=\"injected\""))
        #expect(!dom.stdout.contains("PWNED</title>") && dom.stdout.contains("<title>autoharness report"))
        #expect(dom.stdout.contains("&lt;script&gt;document.title=\"PWNED\"&lt;/script&gt;"), "shown as text")
        // Python coloured: a keyword, a string, a comment; the added lines marked.
        #expect(dom.stdout.contains("<span class=\"py-k\">def</span>") && dom.stdout.contains("<span class=\"py-c\">#"))
        #expect(dom.stdout.contains("<span class=\"py-s\">\"&lt;/span&gt;&lt;b id='injected'&gt;bold&lt;/b&gt;\"</span>"))
        #expect(dom.stdout.components(separatedBy: "<span class=\"d-a\">").count - 1 >= 3)

        // The second wall: were anything to get past the escaping, the page's CSP runs no
        // script. A copy of the report with a script planted in its body keeps its title.
        let html = try exp.file("report.html")
        let planted = exp.root + "/planted.html"
        try html.replacingOccurrences(of: "<h2>Explorer</h2>", with: "<script>document.title='CSP-BROKEN'</script><h2>Explorer</h2>")
            .write(toFile: planted, atomically: true, encoding: .utf8)
        let wall = try runProcess(chromium, ["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", "file://" + planted])
        #expect(wall.status == 0 && wall.stdout.contains("<script>document.title='CSP-BROKEN'</script>"), "the planted script is in the page")
        #expect(!wall.stdout.contains("<title>CSP-BROKEN</title>") && wall.stdout.contains("<title>autoharness report"), "it did not run")
    }
}

@Suite("autoharness demo")
struct DemoTests {
    @Test("the offline demo improves on its baseline only with what train traces teach, has a rejected gate, and reports blocked cheats")
    func demo() throws {
        try requireRoot()
        let dir = try TempDir()
        let root = dir.path + "/demo"
        let r = try autoharness(["demo", "--dir", root])
        #expect(r.status == 0, "\(r.stdout)\n\(r.stderr)")
        let exp = Experiment(existing: root + "/exp", temp: dir)
        let st = try exp.statusJSON("--verify")
        #expect((st["verify"] as? [String: Any])?["ok"] as? Bool == true)
        let iterations = st["iterations"] as? [[String: Any]] ?? []
        let baseline = try #require(iterations.first?["val_score"] as? Double)
        let best = try #require(st["best"] as? Double)
        #expect(best > baseline, "val_score must rise: \(baseline) -> \(best)")
        let attempts = try exp.rows("gate_attempt")
        #expect(attempts.contains { $0["accepted"] as? Bool == false && $0["reason"] as? String != "interrupted" })
        let reported = try exp.violations().filter { $0["actor"] as? String == "coding agent" }
        #expect(reported.count >= 5, "\(reported)")
        #expect(FileManager.default.fileExists(atPath: root + "/exp/report.html"))
        #expect(r.stdout.contains("demo: report: \(root)/exp/report.html"))
        // The decision layer: three candidates per gate, only the best gated; a
        // triage after each batch whose model (the demo's stand-in) was reached through the
        // inference gate; the operator's review rows.
        let rankings = try exp.rows("candidates_ranked")
        #expect(!rankings.isEmpty && rankings.allSatisfy { ($0["ranked"] as? [Any])?.count == 3 }, "\(rankings)")
        let triages = try exp.rows("triage")
        #expect(!triages.isEmpty && triages.allSatisfy { $0["refused"] as? Int == 0 && !($0["entries"] as? [Any] ?? []).isEmpty }, "\(triages)")
        let asked = (try? String(contentsOfFile: root + "/model/requests.log", encoding: .utf8))?.split(separator: "\n").count ?? 0
        #expect(asked > 0, "the demo's model was never asked")
        #expect(try exp.rows("cluster_review").count > 0 && exp.rows("suite_review").count == 1)
        let html = try exp.file("report.html")
        #expect(html.contains("explored candidate") && html.contains("<h2>Triage</h2>") && html.contains("<h2>Cluster review</h2>"))
        #expect(html.contains("(triage): "), "the explorer shows no hypothesis beside a cluster an attempt resolved")

        // Honest improvement: every conversion the final agent.py knows beyond the baseline's
        // three occurs in a train task (the only traces the agent was shown).
        let split = try exp.split()
        var trainPairs: Set<String> = []
        for id in split.train {
            let text = try String(contentsOfFile: root + "/benchmark/tasks/\(id)/instruction.md", encoding: .utf8)
            let w = text.split(separator: " ")
            trainPairs.insert("\(w[2])->\(w[4].dropLast(1).split(separator: ".")[0])")
        }
        let agent = try exp.file("agent/agent.py")
        let known = agent.split(separator: "\n").compactMap { line -> String? in
            let parts = line.split(separator: "\"")
            return parts.count >= 4 && line.contains("):") ? "\(parts[1])->\(parts[3])" : nil
        }
        let baselineKnown: Set<String> = ["km->m", "kg->g", "h->min"]
        #expect(known.count > baselineKnown.count)
        for k in known where !baselineKnown.contains(k) {
            #expect(trainPairs.contains(k), "\(k) was not in any train task")
        }
    }
}
