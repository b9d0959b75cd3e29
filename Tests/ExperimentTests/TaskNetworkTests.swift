@testable import Benchmark
@testable import Experiment
@testable import ExperimentModel
import Foundation
import Sandbox
import SandboxPolicy
import Testing
import TestSupport

/// task.toml's `network_mode` and `allowed_hosts` (Harbor's words) on the agent phase's proxy.
@Suite(.serialized) struct TaskNetworkTests {
    /// A task `id` under `dir` whose task.toml is `toml`, its solution `solve`, its test `test`.
    static func task(_ dir: String, _ id: String, toml: String, solve: String = "#!/bin/bash\n",
                     test: String = "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n") throws {
        let t = dir + "/tasks/" + id
        for sub in ["tests", "solution"] { try FileManager.default.createDirectory(atPath: t + "/" + sub, withIntermediateDirectories: true) }
        try "Fetch.\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
        try toml.write(toFile: t + "/task.toml", atomically: true, encoding: .utf8)
        try solve.write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
        try test.write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
    }

    @Test("task.toml's network: modes, Harbor's older allow_internet, [agent] over [environment], hosts on 443 and 80; what the proxy cannot allow is the task's problem at its file:line")
    func parsed() throws {
        let temp = try TempDir()
        let cases: [(String, String, TaskNetwork?)] = [
            ("silent", "[agent]\ntimeout_sec = 10\n", nil),
            ("public", "[environment]\nnetwork_mode = \"public\"\n", nil),
            ("none", "[environment]\nnetwork_mode = \"no-network\"\n", .noNetwork),
            ("legacy-off", "[environment]\nallow_internet = false\n", .noNetwork),
            ("legacy-on", "[environment]\nallow_internet = true\n", nil),
            ("list", "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"PyPI.org.\", \"*.pythonhosted.org\", \"1.1.1.1\", \"2606:4700::1111\"]\n",
             .allowlist(["pypi.org:443", "pypi.org:80", "*.pythonhosted.org:443", "*.pythonhosted.org:80", "1.1.1.1:443", "1.1.1.1:80",
                         "[2606:4700::1111]:443", "[2606:4700::1111]:80"])),
            ("agent-closes", "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org\"]\n[agent]\nnetwork_mode = \"no-network\"\n", .noNetwork),
            ("agent-opens", "[environment]\nnetwork_mode = \"no-network\"\n[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"a.example\"]\n",
             .allowlist(["a.example:443", "a.example:80"])),
        ]
        for (id, toml, _) in cases { try Self.task(temp.path, id, toml: toml) }
        let refused: [(String, String, String)] = [
            ("mode", "[environment]\nnetwork_mode = \"open\"\n", ":2: [environment] network_mode must be"),
            ("stray", "[environment]\nallowed_hosts = [\"pypi.org\"]\n", ":2: [environment] allowed_hosts is only valid with network_mode = \"allowlist\""),
            ("cidr", "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"10.0.0.0/8\"]\n", ":3: [environment] allowed_hosts: '10.0.0.0/8' is not a host"),
            ("loopback", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"127.0.0.1\"]\n", ":3: [agent] allowed_hosts: '127.0.0.1'"),
            ("metadata", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"169.254.169.254\"]\n", "'169.254.169.254'"),
            ("private-v6", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"fd00::1\"]\n", "'fd00::1'"),
            ("port", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"pypi.org:8080\"]\n", "'pypi.org:8080'"),
            ("broad", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"*.com\"]\n", "'*.com'"),
            ("short", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"127.1\"]\n", "'127.1'"),
            ("star", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"*\"]\n", "'*'"),
            ("hex", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"0x7f.1\"]\n", "'0x7f.1'"),
            ("decimal", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"0x7f000001\"]\n", "'0x7f000001'"),
            ("localhost", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"LOCALHOST.\"]\n", "'LOCALHOST.'"),
            ("label", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"metadata\"]\n", "'metadata'"),
            ("internal", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"metadata.google.internal\"]\n", "'metadata.google.internal'"),
            ("mdns", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"*.local\"]\n", "'*.local'"),
            ("azure", "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"168.63.129.16\"]\n", "'168.63.129.16'"),
        ]
        for (id, toml, _) in refused { try Self.task(temp.path, id, toml: toml) }
        let bench = try LocalBenchmark(directory: temp.path)
        for (id, _, expected) in cases {
            let t = try #require(bench.task(id))
            #expect(t.problem == nil && t.network == expected, "\(id): \(String(describing: t.network)) \(t.problem ?? "")")
        }
        for (id, _, message) in refused {
            let t = try #require(bench.task(id))
            #expect(t.problem?.contains(temp.path + "/tasks/\(id)/task.toml") == true && t.problem?.contains(message) == true,
                    "\(id): \(t.problem ?? "accepted")")
        }
        // A task's own host that the coding agent also reaches is refused, naming the file.
        var config = ExperimentConfig(benchmark: "local", dataset: temp.path)
        config.networkAllow = ["files.pythonhosted.org:443"]
        #expect(throws: ExperimentError.self) { try LocalKind.checkTaskNetworks(config, bench.tasks) }
        config.networkAllow = ["api.example.com:443"]
        try LocalKind.checkTaskNetworks(config, bench.tasks)
        #expect(TaskNetwork.allow(nil, operator: ["m:80"]) == ["m:80"])
        #expect(TaskNetwork.allow(.noNetwork, operator: ["m:80"]) == [])
        #expect(TaskNetwork.allow(.allowlist(["a.example:443", "m:80"]), operator: ["m:80"]) == ["m:80", "a.example:443"])
    }

    @Test("the agent phase's proxy follows task.toml: no-network takes even the operator's mirror away (the fetch is refused in the sandbox), allowlist adds the task's hosts (asked for through the proxy, passed its allowlist) and nothing else")
    func onTheProxy() throws {
        try requireRoot()
        let temp = try TempDir()
        let site = temp.path + "/site"
        try FileManager.default.createDirectory(atPath: site, withIntermediateDirectories: true)
        try "from the mirror\n".write(toFile: site + "/file", atomically: true, encoding: .utf8)
        let port = try ImageMirrorTests.freePort()
        let server = try ImageMirrorTests.serve(site, port: port)
        defer { kill(server.processIdentifier, SIGKILL); server.waitUntilExit() }
        // Fetch from the mirror through whatever proxy the sandbox has; ask the proxy (if any)
        // for a tunnel to a host only the task lists and to one nobody lists.
        let solve = """
            #!/bin/bash
            unset no_proxy NO_PROXY
            python3 - > /app/out.txt 2>&1 <<'EOF'
            import os, socket, urllib.request
            try:
                print(urllib.request.urlopen("http://127.0.0.1:\(port)/file", timeout=10).read().decode().strip())
            except Exception as e:
                print("fetch failed:", type(e).__name__, e)
            for target in ["1.1.1.1:443", "8.8.8.8:443"]:
                try:
                    s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
                    s.sendall(("CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n" % (target, target)).encode())
                    print(target, s.recv(200).split(b"\\r\\n")[0].decode())
                except Exception as e:
                    print(target, "no proxy:", type(e).__name__)
            EOF

            """
        let test = "#!/bin/bash\ncp /app/out.txt /logs/verifier/out.txt\ngrep -q 'from the mirror' /app/out.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
        try Self.task(temp.path, "closed", toml: "[environment]\nnetwork_mode = \"no-network\"\n", solve: solve, test: test)
        try Self.task(temp.path, "listed", toml: "[agent]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"1.1.1.1\"]\n", solve: solve, test: test)
        try Self.task(temp.path, "silent", toml: "[agent]\ntimeout_sec = 120\n", solve: solve, test: test)
        let bench = try LocalBenchmark(directory: temp.path)
        let scratch = try TaskImageTests.scratchRoot()
        defer { rmdir(scratch) }
        var results: [String: (TaskOutcome, String, [AuditEvent])] = [:]
        for id in ["closed", "listed", "silent"] {
            let audit = AuditLog()
            var config = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: [Built.packageRoot + "/policies"]), agentDirectory: "",
                                              scratchRoot: scratch, audit: audit)
            config.oracle = true
            config.agentNetworkAllow = ["127.0.0.1:\(port)"]
            let box = CopiedOut()
            config.scratchObserver = { _, path in box.read(path + "/logs/out.txt") }
            let outcome = try TaskRunner(configuration: config).run(try #require(bench.task(id)), traceDirectory: nil)
            results[id] = (outcome, box.text, audit.events.filter { $0.kind == .egress })
        }
        let closed = try #require(results["closed"]), listed = try #require(results["listed"]), silent = try #require(results["silent"])
        // no-network: the fetch was made and failed in the sandbox; no proxy answered anything.
        #expect(closed.0.reward == 0 && closed.1.contains("fetch failed") && closed.1.contains("1.1.1.1:443 no proxy"), "\(closed.1)")
        #expect(closed.2.isEmpty, "\(closed.2)")
        // Silent: the operator's mirror, and neither other host.
        #expect(silent.0.reward == 1, "\(silent.1)")
        #expect(silent.2.contains { $0.name == "1.1.1.1:443" && $0.action == "denied" && ($0.detail ?? "").contains("not on the allowlist") }, "\(silent.2)")
        // allowlist: the mirror and the task's host; the host nobody lists still refused.
        #expect(listed.0.reward == 1, "\(listed.1)")
        #expect(!listed.2.contains { $0.name == "1.1.1.1:443" && ($0.detail ?? "").contains("not on the allowlist") }, "\(listed.2)")
        #expect(listed.2.contains { $0.name == "1.1.1.1:443" }, "the tunnel was asked for: \(listed.2)")
        #expect(listed.2.contains { $0.name == "8.8.8.8:443" && $0.action == "denied" && ($0.detail ?? "").contains("not on the allowlist") }, "\(listed.2)")
    }
}

/// What a task's verifier copied out, read just before its scratch goes.
private final class CopiedOut: @unchecked Sendable {
    var text = "(nothing copied)"
    func read(_ path: String) { text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? "(no \(path))" }
}
