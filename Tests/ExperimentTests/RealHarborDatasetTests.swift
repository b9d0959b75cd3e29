import Foundation
import Testing
import TestSupport

/// The real Harbor (scripts/install-harbor) with a registry dataset from a local registry.json
/// (Harbor's JsonRegistryClient: no network), per_task_timeout, task names in Harbor's forms,
/// and the template agent.py against a fake model server. A missing install fails the test.
@Suite("Real Harbor: registry datasets, per_task_timeout, the template agent", .serialized)
struct RealHarborDatasetTests {
    /// `count` tasks like RealHarborTests' (verifier compares /app/out.txt with the seed),
    /// `[task] name = "autoharness-test/<id>"`, an agent timeout of 60 s.
    static func tasks(in dir: String, prefix: String, count: Int, sleep: Bool) throws -> [String] {
        var ids: [String] = []
        for k in 1...count {
            let id = "\(prefix)-\(k)"
            ids.append(id)
            let t = dir + "/" + id
            for d in ["environment", "tests"] { try FileManager.default.createDirectory(atPath: t + "/" + d, withIntermediateDirectories: true) }
            try "schema_version = \"1.4\"\n\n[task]\nname = \"autoharness-test/\(id)\"\n\n[agent]\ntimeout_sec = 60.0\n\n[verifier]\ntimeout_sec = 30.0\n"
                .write(toFile: t + "/task.toml", atomically: true, encoding: .utf8)
            try "Copy the word in /app/seed.txt into /app/out.txt.\(sleep ? " SLEEP" : "")\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
            try "FROM ubuntu:24.04\nWORKDIR /app\nCOPY seed.txt /app/seed.txt\n".write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
            try "word-\(k)\n".write(toFile: t + "/environment/seed.txt", atomically: true, encoding: .utf8)
            try "#!/bin/bash\nif cmp -s /app/seed.txt /app/out.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n"
                .write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
        }
        return ids
    }

    func configure(_ exp: Experiment) throws {
        try exp.set("env_provider", "local")
        try exp.set("env_pass", "[]", in: "runner")
        try exp.set("allow", "[]", in: "runner")
        try exp.set("min_improvement", "0")
    }

    @Test("dataset name@version from a local registry.json: Harbor runs the registry's tasks; per_task_timeout stops an agent Harbor would have let run 60 s; --task-ids in Harbor's name forms")
    func registryAndTimeout() throws {
        try requireRoot()
        let harbor = try RealHarborTests.harbor()
        let data = try TempDir(mode: 0o755)
        let ids = try Self.tasks(in: data.path + "/tasks", prefix: "slow", count: 4, sleep: true)
        let registry: [[String: Any]] = [["name": "ah-local", "version": "1.0", "description": "generated",
                                          "tasks": ids.map { ["name": $0, "path": data.path + "/tasks/" + $0] }],
                                         ["name": "ah-local", "version": "0.9", "description": "older", "tasks": [] as [Any]]]
        try JSONSerialization.data(withJSONObject: registry).write(to: URL(fileURLWithPath: data.path + "/registry.json"))

        let exp = try Experiment(benchmark: "terminal-bench", extraArgs: ["--tool", harbor, "--dataset", "ah-local@1.0", "--registry-path", data.path + "/registry.json"])
        defer { exp.removeScratch() }
        let config = try exp.file("experiment_config.yaml")
        #expect(config.contains("dataset: ah-local@1.0") && config.contains("registry_path: \(data.path)/registry.json"), "\(config.prefix(600))")
        try configure(exp)
        try exp.set("agent_model", "none")
        try (try exp.file("experiment_config.yaml")).replacingOccurrences(of: "# per_task_timeout: 600", with: "per_task_timeout: 3")
            .write(toFile: exp.root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
        // Writes its answer, then sleeps 30 s: within the tasks' own 60 s, past per_task_timeout.
        try exp.setAgent(RealHarborTests.agent(solves: true))

        let started = Date()
        let p = try exp.run(["prepare"], environment: [:])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 4/4 tasks pass"), "\(p.stdout)\(p.stderr)")
        #expect(Date().timeIntervalSince(started) < 4 * 30, "the agents were not stopped at per_task_timeout")
        let split = try exp.split()
        #expect(Set(split.train + split.test) == Set(ids))

        let b = try exp.run(["benchmark"], environment: [:])
        #expect(b.status == 0, "\(b.stdout)\(b.stderr)")
        for id in split.train {
            let result = try #require(exp.traceFile(traceName(id), "harbor-result.json"), "no Harbor result for \(id): \(b.stderr)")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(result.utf8)) as? [String: Any])
            #expect(json["task_name"] as? String == "autoharness-test/\(id)")
            #expect(json["source"] as? String == "ah-local", "a registry run: \(json["source"] ?? "nil")")
            let e = json["exception_info"] as? [String: Any]
            #expect(e?["exception_type"] as? String == "AgentTimeoutError", "\(result.prefix(600))")
            #expect((e?["exception_message"] as? String)?.contains("timed out after 3.0 seconds") == true, "\(e ?? [:])")
        }

        let one = try #require(split.train.sorted().first)
        for given in ["autoharness-test/\(one)", "autoharness-test/\(one)@1.0"] {
            let r = try exp.run(["benchmark", "--task-ids", given], environment: [:])
            #expect(r.status == 0 && r.stdout.contains("train: 1/1 passed"), "\(given): \(r.stdout)\(r.stderr)")
        }
        #expect(exp.scratchMounts().isEmpty)
        let violations = try exp.rows("violation")
        #expect(violations.isEmpty, "\(violations)")
    }

    @Test("the template agent.py under the real harbor: without a key each trial fails with 'no API key'; with one it solves tasks through the model's bash tool calls")
    func templateAgent() throws {
        try requireRoot()
        let harbor = try RealHarborTests.harbor()
        let data = try TempDir(mode: 0o755)
        _ = try Self.tasks(in: data.path, prefix: "hello", count: 3, sleep: false)
        let exp = try Experiment(benchmark: "terminal-bench", extraArgs: ["--tool", harbor, "--dataset", data.path])
        defer { exp.removeScratch() }
        #expect(try exp.file("agent/agent.py").contains("class HarnessAgent(BaseAgent)"))
        try configure(exp)
        try exp.set("agent_model", "anthropic/claude-fake")

        let p = try exp.run(["prepare"], environment: [:])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/3 tasks pass"), "\(p.stdout)\(p.stderr)")
        let train = try exp.split().train
        var b = try exp.run(["benchmark"], environment: [:])
        #expect(b.status == 0, "\(b.stdout)\(b.stderr)")
        for id in train {
            let ours = try #require(exp.traceFile(traceName(id), "result.json"), "no trace for \(id)")
            #expect(ours.contains("no API key: ANTHROPIC_API_KEY is not set"), "\(ours)")
        }

        // Each task: one bash call that solves it, then a final answer. The fake model answers
        // in order, so the tasks run one at a time (each has a Harbor of its own otherwise).
        try exp.set("max_concurrency", "1")
        let solve: [[String: Any]] = [["tool": "bash", "input": ["command": "cp seed.txt out.txt && cat out.txt"]]]
        let model = try FakeModel(turns: Array(repeating: [solve, [["text": "done"]]], count: 10).flatMap { $0 })
        var config = try exp.file("experiment_config.yaml")
        config = config.replacingOccurrences(of: "\n  binds: [", with: "\n  binds: [\"\(model.certs)\", ")
        try config.write(toFile: exp.root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
        try exp.set("env_pass", "[ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, SSL_CERT_FILE]", in: "runner")
        // The model API through the inference gate, as the template routes it: the real Harbor
        // and the template agent's client speak to the fake vendor through it.
        try exp.set("inference", "[\"\(model.address)\"]\n    upstream_ca: \(model.caFile)", in: "runner")
        try exp.set("held_out_runtime", "host\n  held_out_env: {ANTHROPIC_API_KEY: ANTHROPIC_API_KEY_HELD_OUT}", in: "gate")
        let env = ["ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_API_KEY_HELD_OUT": "test-key-held-out", "ANTHROPIC_BASE_URL": "https://\(model.address)", "SSL_CERT_FILE": model.caFile]
        b = try exp.run(["benchmark"], environment: env)
        #expect(b.status == 0, "\(b.stdout)\(b.stderr)")
        let rewards = try exp.trainResults()
        for id in train {
            #expect(rewards[id] as? Double == 1.0, "\(id): \(rewards[id] ?? "nil") \(exp.traceFile(traceName(id), "result.json") ?? "")")
            #expect(exp.traceFile(traceName(id), "agent-trajectory.jsonl")?.contains("cp seed.txt out.txt") == true)
        }
        let requests = model.requests().filter { $0["main"] as? Bool == true }
        #expect(requests.count == 2 * train.count, "\(requests)")
        #expect(requests.allSatisfy { $0["model"] as? String == "claude-fake" && ($0["tools"] as? [String]) == ["bash"] }, "\(requests)")
        #expect(model.toolResults().filter { $0.contains("exit code 0") && $0.contains("word-") }.count == train.count, "\(model.toolResults())")
    }

    /// A registry served over HTTP on loopback (Harbor's JsonRegistryClient by URL) whose
    /// tasks live in a git repository (Harbor clones them, as it clones Terminal-Bench's from
    /// GitHub): what `init --dataset name@version` meets online, without the internet.
    final class RegistryServer {
        let process = Process()
        let port: Int
        /// Serves `directory` as files.
        convenience init(directory: String) throws {
            try self.init(script: """
                import functools, http.server, os, sys
                h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
                s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), h)
                open(sys.argv[2] + ".part", "w").write(str(s.server_address[1]))
                os.rename(sys.argv[2] + ".part", sys.argv[2])
                s.serve_forever()
                """, directory: directory)
        }
        /// Runs `script` with `directory` and the port file it writes its port to.
        init(script: String, directory: String) throws {
            let portFile = directory + "/.port"
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = ["-c", script, directory, portFile]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            var p: Int?
            for _ in 0..<200 where p == nil {
                p = (try? String(contentsOfFile: portFile, encoding: .utf8)).flatMap { Int($0) }
                if p == nil { usleep(25_000) }
            }
            port = try #require(p, "the registry server did not start")
        }
        func stop() {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
        deinit { stop() }
    }

    @Test("dataset name@version with no local registry: init downloads it once with the real `harbor download` (registry by URL, tasks cloned from git) into the private directory; runs need no registry host and run the downloaded tasks")
    func downloadedAtInit() throws {
        try requireRoot()
        let harbor = try RealHarborTests.harbor()
        let data = try TempDir(mode: 0o755)
        let repo = data.path + "/repo"
        let ids = try Self.tasks(in: repo + "/tasks", prefix: "remote", count: 3, sleep: false)
        for args in [["init", "-q", repo], ["-C", repo, "add", "-A"],
                     ["-C", repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "tasks"]] {
            let g = try runProcess("/usr/bin/git", args)
            try #require(g.status == 0, "git \(args): \(g.stderr)")
        }
        let commit = try runProcess("/usr/bin/git", ["-C", repo, "rev-parse", "HEAD"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let served = data.path + "/www"
        try FileManager.default.createDirectory(atPath: served, withIntermediateDirectories: true)
        let registry: [[String: Any]] = [["name": "ah-remote", "version": "1.0", "description": "generated",
                                          "tasks": ids.map { ["name": $0, "git_url": "file://" + repo, "git_commit_id": commit, "path": "tasks/" + $0] }]]
        try JSONSerialization.data(withJSONObject: registry).write(to: URL(fileURLWithPath: served + "/registry.json"))
        let server = try RegistryServer(directory: served)

        let exp = try Experiment(benchmark: "terminal-bench", extraArgs: ["--tool", harbor, "--dataset", "ah-remote@1.0",
                                                                          "--registry-url", "http://127.0.0.1:\(server.port)/registry.json"])
        defer { exp.removeScratch() }
        // The registry is gone from here on: every run below works from the downloaded copy.
        server.stop()
        let downloaded = exp.root + "/.autoharness/dataset/ah-remote"
        let config = try exp.file("experiment_config.yaml")
        #expect(config.contains("dataset: \(downloaded)"), "\(config.prefix(800))")
        #expect(!config.contains("supabase") && !config.contains("github.com"), "a run must not need the registry: \(config)")
        for id in ids {
            #expect(FileManager.default.fileExists(atPath: "\(downloaded)/\(id)/tests/test.sh"), "\(id) was not downloaded")
        }
        try configure(exp)
        try exp.set("agent_model", "none")
        try exp.setAgent(RealHarborTests.agent(solves: true))
        let p = try exp.run(["prepare"], environment: [:])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 3/3 tasks pass"), "\(p.stdout)\(p.stderr)")
        // Known by [task] name too, as Harbor names them.
        let b = try exp.run(["benchmark", "--task-ids", "autoharness-test/" + (try exp.split().train[0])], environment: [:])
        #expect(b.status == 0, "\(b.stdout)\(b.stderr)")
    }

    @Test("init of a registry dataset whose registry cannot be reached fails with harbor's own error and the offline alternatives, and leaves no directory behind")
    func downloadFailure() throws {
        try requireRoot()
        let harbor = try RealHarborTests.harbor()
        let temp = try TempDir()
        // A port nothing listens on: bound, then closed.
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var addr = sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: 0, sin_addr: in_addr(s_addr: inet_addr("127.0.0.1")), sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        close(fd)
        let url = "http://127.0.0.1:\(UInt16(bigEndian: addr.sin_port))/registry.json"
        let r = try autoharness(["init", temp.path + "/exp", "--benchmark", "terminal-bench", "--tool", harbor,
                                 "--dataset", "ah-remote@1.0", "--registry-url", url])
        #expect(r.status != 0)
        #expect(r.stderr.contains("harbor download ah-remote@1.0") && r.stderr.contains("Without the network"), "\(r.stderr)")
        #expect(r.stderr.contains("Connection refused") || r.stderr.contains("ConnectionError"), "harbor's own error is shown: \(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: temp.path + "/exp"), "a failed init leaves nothing behind")
    }

    /// Harbor's hub as harbor 0.25.0 reads it (Supabase's REST API, HARBOR_SUPABASE_URL,
    /// harbor/db/client.py): every request logged to DIR/requests.jsonl; the dataset package
    /// exists, no version of it does.
    static let hub = """
        import http.server, json, os, sys
        class H(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                with open(os.path.join(sys.argv[1], "requests.jsonl"), "a") as f:
                    f.write(json.dumps(self.path) + "\\n")
                rows = [{"id": "00000000-0000-0000-0000-000000000001", "type": "dataset", "visibility": "public",
                         "org": {"name": "terminal-bench"}}] if self.path.startswith("/rest/v1/package?") else []
                out = json.dumps(rows).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
            def log_message(self, *a): pass
        s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        open(sys.argv[2] + ".part", "w").write(str(s.server_address[1]))
        os.rename(sys.argv[2] + ".part", sys.argv[2])
        s.serve_forever()
        """

    @Test("init --dataset terminal-bench@2.1 (no legacy registry entry) has the real harbor ask Harbor's hub for the package terminal-bench/terminal-bench-2-1 at its pinned digest; a hub without that version fails init with harbor's error and the offline alternatives, leaving nothing behind")
    func terminalBench21FromHub() throws {
        try requireRoot()
        let harbor = try RealHarborTests.harbor()
        let temp = try TempDir(mode: 0o755)
        let hub = try RegistryServer(script: Self.hub, directory: temp.path)
        defer { hub.stop() }
        var env = ProcessInfo.processInfo.environment
        env["HARBOR_SUPABASE_URL"] = "http://127.0.0.1:\(hub.port)"
        let r = try autoharness(["init", temp.path + "/exp", "--benchmark", "terminal-bench", "--tool", harbor, "--dataset", "terminal-bench@2.1"], environment: env)
        let digest = "7d7bdc1cbedad549fc1140404bd4dc45e5fd0ea7c4186773687d177ad3a0699a"
        let package = "terminal-bench/terminal-bench-2-1@sha256:" + digest
        #expect(r.status != 0)
        #expect(r.stderr.contains("init: terminal-bench@2.1 is Harbor's hub package \(package)"), "\(r.stderr)")
        #expect(r.stderr.contains("Without the network: run `harbor download \(package) -o DIR`"), "\(r.stderr)")
        #expect(r.stderr.contains("Dataset 'terminal-bench/terminal-bench-2-1'") && r.stderr.contains("not found"), "harbor's own error: \(r.stderr)")
        // What harbor asked the hub: the package by org and name, then its version by digest.
        let asked = (try? String(contentsOfFile: temp.path + "/requests.jsonl", encoding: .utf8)) ?? ""
        #expect(asked.contains("/rest/v1/package?") && asked.contains("name=eq.terminal-bench-2-1&org.name=eq.terminal-bench"), "\(asked)")
        #expect(asked.contains("/rest/v1/dataset_version?") && asked.contains("content_hash=eq.\(digest)"), "\(asked)")
        #expect(!FileManager.default.fileExists(atPath: temp.path + "/exp"), "a failed init leaves nothing behind")
    }
}
