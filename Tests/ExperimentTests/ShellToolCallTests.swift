import Foundation
import Testing
import TestSupport

/// `runner.srt_shim`: a runner's shell tool calls through autoharness's `srt` (what tau2's
/// banking_knowledge runs its `shell` tool with), each in a sandbox of the supervisor's, on a
/// read-only copy of its working directory. A `command` benchmark whose runner makes a knowledge
/// base under its TMPDIR, as tau2's SandboxManager does, and calls srt as tau2 calls it
/// (`srt --settings FILE "<command>"`, cwd the knowledge base), then speaks the socket's
/// protocol itself for what srt would never send.
@Suite("Shell tool calls: each in a sandbox of its own, on a copy of its directory", .serialized)
struct ShellToolCallTests {
    /// Python: one request on the socket at `path`, the whole answer decoded.
    static let ask = """
        def ask(path, request):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            s.sendall(json.dumps(request).encode())
            s.shutdown(socket.SHUT_WR)
            answer = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                answer += chunk
            return json.loads(answer)
        """

    static let runner = #"""
        import base64, json, os, socket, subprocess, sys, time
        out = sys.argv[1]
        tmp = os.environ["TMPDIR"]
        kb = os.path.join(tmp, "agentic_search_t1", "knowledge_base")
        os.makedirs(kb)
        open(os.path.join(kb, "INDEX.md"), "w").write("# Index\n- doc_1\n")
        open(os.path.join(kb, "doc_1.md"), "w").write("# Fees\n\nThe monthly fee is 7 dollars.\n")
        open(os.path.join(out, "secret.txt"), "w").write("RUNNER-ONLY\n")
        settings = os.path.join(tmp, "agentic_search_t1", "srt-settings.json")
        json.dump({"network": {"allowedDomains": [], "deniedDomains": []},
                   "filesystem": {"denyRead": [], "allowWrite": [], "denyWrite": [settings]}}, open(settings, "w"))
        results = {}
        def srt(name, command, settings_file=settings, cwd=kb):
            r = subprocess.run(["srt", "--settings", settings_file, command], capture_output=True, text=True, cwd=cwd, timeout=60)
            results[name] = {"exit": r.returncode, "stdout": r.stdout, "stderr": r.stderr}
        \#(ShellToolCallTests.ask)
        def raw(name, request):
            results[name] = ask(os.environ["AUTOHARNESS_SRT_SOCKET"], request)
        srt("read", "grep -l fee *.md && cat doc_1.md && pwd")
        srt("secret", "cat /work/out/secret.txt; cat ../../secret.txt; ls /work/agent /work/in")
        srt("environment", "echo tmp=$TMPDIR key=$RUNNER_KEY socket=$AUTOHARNESS_SRT_SOCKET")
        srt("write", "echo x > new.md")
        srt("network", "exec 3<>/dev/tcp/127.0.0.1/22")
        srt("status", "exit 3")
        writable = os.path.join(tmp, "writable.json")
        json.dump({"network": {"allowedDomains": [], "deniedDomains": []},
                   "filesystem": {"denyRead": [], "allowWrite": [kb], "denyWrite": []}}, open(writable, "w"))
        srt("allow-write", "echo x > new.md", settings_file=writable)
        os.symlink("/", os.path.join(tmp, "root-link"))
        raw("link", {"command": "ls", "cwd": "/work/out/tmp/root-link"})
        raw("outside", {"command": "ls", "cwd": "/work/agent"})
        raw("dotdot", {"command": "ls", "cwd": "/work/out/tmp/../../agent"})
        os.symlink("/work/in/task_ids.txt", os.path.join(kb, "ids.md"))
        srt("inner-link", "cat ids.md")
        os.remove(os.path.join(kb, "ids.md"))
        # A review's attacks: a link whose name ends in a character that joins the '/' after it
        # into one Swift character (U+0600), a NUL that cut '..x' to '..', a tree deeper than the
        # budget, a sparse file bigger than it.
        os.symlink("/", os.path.join(out, "L\u0600"))
        raw("joined-slash", {"command": "ls", "cwd": "/work/out/L\u0600/etc"})
        raw("nul", {"command": "ls", "cwd": "/work/out/..\u0000x/etc"})
        deep = os.path.join(tmp, "deep")
        os.makedirs(os.path.join(deep, *["d"] * 40))
        raw("deep", {"command": "ls", "cwd": "/work/out/tmp/deep"})
        sparse = os.path.join(tmp, "sparse")
        os.makedirs(sparse)
        with open(os.path.join(sparse, "big"), "wb") as f:
            f.truncate(1 << 30)
        raw("sparse", {"command": "ls", "cwd": "/work/out/tmp/sparse"})
        wide = os.path.join(tmp, "wide")
        os.makedirs(wide)
        for n in range(20001):
            open(os.path.join(wide, "f%d" % n), "w").close()
        raw("wide", {"command": "ls", "cwd": "/work/out/tmp/wide"})
        # A client that sends a long command and goes (tau2's timeout killing srt): its call is
        # not run, or killed, and frees its slot.
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(os.environ["AUTOHARNESS_SRT_SOCKET"])
        s.sendall(json.dumps({"command": "sleep 25", "cwd": kb}).encode())
        s.close()
        time.sleep(1)
        srt("after-abandon", "echo free")
        os.makedirs(os.path.join(out, "traces", "t1"))
        json.dump(results, open(os.path.join(out, "traces", "t1", "calls.json"), "w"), indent=1)
        json.dump({"t1": 1.0}, open(os.path.join(out, "rewards.json"), "w"))
        """#

    /// A `command` benchmark of one task whose runner is `script` (in a directory bound into it,
    /// kept alive with the returned TempDir), with autoharness's srt first on its PATH.
    static func make(_ script: String) throws -> (Experiment, TempDir) {
        try requireRoot()
        let exp = try Experiment(benchmark: "command")
        let tools = try TempDir()
        try script.write(toFile: tools.path + "/runner.py", atomically: true, encoding: .utf8)
        try exp.set("tasks", "[t1]")
        try exp.set("command", "[python3, \(tools.path)/runner.py, \"{output_dir}\", \"{output}\"]", in: "runner")
        try exp.set("binds", "[\(tools.path)]", in: "runner")
        let path = exp.root + "/experiment_config.yaml"
        try String(contentsOfFile: path, encoding: .utf8)
            .replacingOccurrences(of: "\nrunner:\n", with: "\nrunner:\n  srt_shim: \(Built.packageRoot)/templates/tau-bench/srt-shim\n")
            .write(toFile: path, atomically: true, encoding: .utf8)
        return (exp, tools)
    }

    @Test("srt's commands run in a sandbox of their own: the knowledge base readable at its path, nothing else of the runner (its files, agent.py, /work/in, its environment), no network, read-only; a link, a path outside the output or a '..' refused; a writable directory refused by the shim")
    func narrowerSandbox() throws {
        let (exp, tools) = try Self.make(Self.runner)
        defer { exp.removeScratch() }
        defer { withExtendedLifetime(tools) {} }
        try exp.set("env_pass", "[RUNNER_KEY]", in: "runner")
        let p = try exp.run(["prepare"], environment: ["RUNNER_KEY": "sk-runner-only-value"])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stderr.contains("shell tool call(s) run in sandboxes of their own"), "\(p.stderr)")
        let b = try exp.run(["benchmark"], environment: ["RUNNER_KEY": "sk-runner-only-value"])
        #expect(b.status == 0, "\(b.stderr)")
        // Nine calls through srt (allow-write never reaches the supervisor) and nine raw ones:
        // 7 run, 9 refused (link, outside, dotdot, inner-link and the reviews' five), one
        // abandoned, in the run's log line.
        #expect(b.stderr.contains("7 shell tool call(s) run in sandboxes of their own, 9 refused, 1 abandoned by their client"), "\(b.stderr)")
        let text2 = try #require(exp.traceFile("t1", "calls.json"), "no trace")
        let calls = try #require(try JSONSerialization.jsonObject(with: Data(text2.utf8)) as? [String: [String: Any]])
        func field(_ name: String, _ key: String) -> String { "\(calls[name]?[key] ?? "")" }
        #expect(field("read", "exit") == "0" && field("read", "stdout") == "doc_1.md\n# Fees\n\nThe monthly fee is 7 dollars.\n/work/out/tmp/agentic_search_t1/knowledge_base\n",
                "\(calls["read"] ?? [:])")
        // The runner's own files are not there: its output, agent.py, its inputs.
        #expect(!field("secret", "stdout").contains("RUNNER-ONLY"))
        #expect(field("secret", "stderr").contains("/work/out/secret.txt: No such file or directory")
                && field("secret", "stderr").contains("ls: cannot access '/work/agent': No such file or directory")
                && field("secret", "stderr").contains("ls: cannot access '/work/in': No such file or directory"), "\(calls["secret"] ?? [:])")
        // Nothing of the runner's environment: its TMPDIR, its key, the socket.
        #expect(field("environment", "stdout") == "tmp= key= socket=\n", "\(calls["environment"] ?? [:])")
        #expect(field("write", "exit") == "1" && field("write", "stderr").contains("Read-only file system"), "\(calls["write"] ?? [:])")
        #expect(field("network", "exit") == "1" && field("network", "stderr").contains("/dev/tcp/127.0.0.1/22"), "\(calls["network"] ?? [:])")
        #expect(field("status", "exit") == "3")
        #expect(field("allow-write", "exit") == "1" && field("allow-write", "stderr").contains("allowWrite"), "\(calls["allow-write"] ?? [:])")
        #expect(field("link", "error").contains("root-link") && field("link", "error").contains("a link, or a mount, is never followed"), "\(calls["link"] ?? [:])")
        #expect(field("outside", "error").contains("is not under /work/out"), "\(calls["outside"] ?? [:])")
        #expect(field("dotdot", "error").contains("has a . or .. component"), "\(calls["dotdot"] ?? [:])")
        #expect(field("inner-link", "exit") == "1" && field("inner-link", "stderr").contains("ids.md"), "\(calls["inner-link"] ?? [:])")
        #expect(field("joined-slash", "error").contains("a link, or a mount, is never followed"), "\(calls["joined-slash"] ?? [:])")
        #expect(field("nul", "error").contains("is not under /work/out"), "\(calls["nul"] ?? [:])")
        #expect(field("deep", "error").contains("deeper than 32 directories"), "\(calls["deep"] ?? [:])")
        #expect(field("sparse", "error").contains("more than 256 MiB in all"), "\(calls["sparse"] ?? [:])")
        #expect(field("after-abandon", "stdout") == "free\n", "\(calls["after-abandon"] ?? [:])")
        #expect(field("wide", "error").contains("more than 20000 entries"), "\(calls["wide"] ?? [:])")
        #expect(exp.scratchMounts().isEmpty)
    }

    /// A runner that starts six 25-second calls and exits after 3 s: four run (the slots), two
    /// wait in the listen backlog, and the runner's end kills the four and drops the two.
    static let leaving = #"""
        import json, os, subprocess, sys, threading, time
        out = sys.argv[1]
        kb = os.path.join(os.environ["TMPDIR"], "kb")
        os.makedirs(kb)
        for n in range(6):
            threading.Thread(target=lambda: subprocess.run(["srt", "sleep 25"], cwd=kb), daemon=True).start()
        time.sleep(3)
        json.dump({"t1": 1.0}, open(os.path.join(out, "rewards.json"), "w"))
        os._exit(0)
        """#

    @Test("when the runner's sandbox ends, the calls it started are killed and the ones waiting for a slot dropped: the run does not outlive its runner by the calls' time")
    func runnerEndKillsCalls() throws {
        let (exp, tools) = try Self.make(Self.leaving)
        defer { exp.removeScratch() }
        defer { withExtendedLifetime(tools) {} }
        let p = try exp.run(["prepare"], environment: [:])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        // The slots were full when the runner left: its four calls end at once, each killed
        // either by the runner's end (counted as run and killed) or, its client already gone
        // with the runner's processes, as abandoned; none waiting is served.
        let line = try #require(p.stderr.split(separator: "\n").first { $0.contains("shell tool call(s)") }.map(String.init), "\(p.stderr)")
        let numbers = line.matches(of: /(\d+) (shell tool call|refused|killed|abandoned)/).reduce(into: [String: Int]()) { $0[String($1.2)] = Int($1.1) }
        let run = numbers["shell tool call"] ?? -1, abandoned = numbers["abandoned"] ?? 0
        #expect(run + abandoned == 4 && (numbers["killed"] ?? 0) == run && numbers["refused"] == 0, "\(line)")
        #expect(exp.scratchMounts().isEmpty)
    }

    /// A runner that waits (up to 60 s) for `probed` in its TMPDIR, which the test writes after
    /// knocking on the socket from outside, then makes one call of its own.
    static let waiting = #"""
        import json, os, subprocess, sys, time
        out = sys.argv[1]
        kb = os.path.join(os.environ["TMPDIR"], "kb")
        os.makedirs(kb)
        for _ in range(600):
            if os.path.exists(os.path.join(os.environ["TMPDIR"], "probed")):
                break
            time.sleep(0.1)
        r = subprocess.run(["srt", "echo mine"], cwd=kb, capture_output=True, text=True)
        json.dump({"t1": 1.0 if r.stdout == "mine\n" else 0.0}, open(os.path.join(out, "rewards.json"), "w"))
        """#

    @Test("the socket answers only the runner's user: a process of the host's root, and one of another user, that reach it while the runner waits are refused ('not the runner's connection'), and the runner's own call then runs")
    func onlyTheRunnersUser() throws {
        let (exp, tools) = try Self.make(Self.waiting)
        defer { exp.removeScratch() }
        defer { withExtendedLifetime(tools) {} }
        let probe = #"""
            import json, os, socket, sys
            # From the socket's own directory (0755): the scratch root above it is root's alone.
            os.chdir(os.path.dirname(sys.argv[1]))
            if sys.argv[2] != "0":
                os.setgroups([]); os.setgid(65534); os.setuid(65534)
            \#(Self.ask)
            print(ask(os.path.basename(sys.argv[1]), {"command": "echo intruder", "cwd": "/work/out/tmp/kb"}).get("error"), os.getuid())
            """#
        final class Answers: @unchecked Sendable { var list: [String] = [] }  // written by the prober, read after it ends
        let answers = Answers()
        let scratch = exp.scratch
        let prober = Thread {
            // The run's socket (and the runner's output beside it), once the runner is up.
            for _ in 0..<600 {
                let runs = (try? FileManager.default.contentsOfDirectory(atPath: scratch)) ?? []
                if let run = runs.first(where: { FileManager.default.fileExists(atPath: "\(scratch)/\($0)/calls/srt.sock")
                                                 && FileManager.default.fileExists(atPath: "\(scratch)/\($0)/app/tmp/kb") }) {
                    for uid in ["0", "65534"] {
                        let r = try? runProcess("/usr/bin/python3", ["-c", probe, "\(scratch)/\(run)/calls/srt.sock", uid])
                        answers.list.append((r?.stdout ?? "") + (r?.stderr ?? ""))
                    }
                    FileManager.default.createFile(atPath: "\(scratch)/\(run)/app/tmp/probed", contents: Data())
                    return
                }
                usleep(100_000)
            }
        }
        prober.start()
        let p = try exp.run(["prepare"], environment: [:])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        while !prober.isFinished { usleep(50_000) }
        #expect(answers.list == ["not the runner's connection 0\n", "not the runner's connection 65534\n"], "\(answers.list)")
        #expect(p.stderr.contains("1 shell tool call(s) run in sandboxes of their own, 2 refused"), "\(p.stderr)")
        // The runner's own call answered it (the task passes only then).
        #expect(p.stdout.contains("baseline: 1/1 tasks pass"), "\(p.stdout)")
        #expect(exp.scratchMounts().isEmpty)
    }
}
