@testable import Benchmark
import Crypto
@testable import Experiment
@testable import ExperimentModel
import Foundation
import Sandbox
import SandboxPolicy
import Testing
import TestSupport

/// A task's agent phase with `runner.network.allow`: apt-get update and install from a
/// package mirror through the egress proxy (plain HTTP, as apt asks a proxy for http://
/// sources), here a flat repository served on this host's loopback.
@Suite(.serialized) struct ImageMirrorTests {
    /// A flat apt repository in `dir` holding one package, `mirror-hello`.
    static func makeRepository(_ dir: String) throws {
        let pkg = dir + "/build/mirror-hello"
        try FileManager.default.createDirectory(atPath: pkg + "/DEBIAN", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: pkg + "/usr/share/mirror-hello", withIntermediateDirectories: true)
        try "Package: mirror-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\nDescription: t\n"
            .write(toFile: pkg + "/DEBIAN/control", atomically: true, encoding: .utf8)
        try "from the mirror\n".write(toFile: pkg + "/usr/share/mirror-hello/greeting", atomically: true, encoding: .utf8)
        let repo = dir + "/repo"
        try FileManager.default.createDirectory(atPath: repo, withIntermediateDirectories: true)
        let built = try runProcess("/usr/bin/dpkg-deb", ["--build", "--root-owner-group", pkg, repo + "/mirror-hello_1.0_all.deb"])
        try #require(built.status == 0, "\(built.stderr)")
        let deb = try Data(contentsOf: URL(fileURLWithPath: repo + "/mirror-hello_1.0_all.deb"))
        let packages = """
            Package: mirror-hello
            Version: 1.0
            Architecture: all
            Maintainer: t <t@example.org>
            Filename: ./mirror-hello_1.0_all.deb
            Size: \(deb.count)
            SHA256: \(WorkDigest.hex(SHA256.hash(data: deb)))
            Description: t

            """
        try packages.write(toFile: repo + "/Packages", atomically: true, encoding: .utf8)
        let p = Data(packages.utf8)
        try "Date: Sat, 28 Nov 2026 00:00:00 UTC\nSHA256:\n \(WorkDigest.hex(SHA256.hash(data: p))) \(p.count) Packages\n"
            .write(toFile: repo + "/Release", atomically: true, encoding: .utf8)
    }

    /// Python's http.server on 127.0.0.1:`port` over `directory`: the caller kills it (SIGKILL:
    /// this process blocks the signals its sandboxes' supervision takes, and a child inherits
    /// the mask, so a SIGTERM would wait for ever) and waits for it.
    static func serve(_ directory: String, port: UInt16) throws -> Process {
        let server = Process()
        server.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        server.arguments = ["-m", "http.server", String(port), "--bind", "127.0.0.1", "--directory", directory]
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        try server.run()
        return server
    }

    /// A free port on 127.0.0.1 (bound, read, released).
    static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var a = sockaddr_in(sin_family: sa_family_t(AF_INET), sin_port: 0, sin_addr: in_addr(s_addr: inet_addr("127.0.0.1")), sin_zero: (0, 0, 0, 0, 0, 0, 0, 0))
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        try withUnsafeMutablePointer(to: &a) { p in
            try p.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                try #require(bind(fd, $0, len) == 0 && getsockname(fd, $0, &len) == 0)
            }
        }
        return UInt16(bigEndian: a.sin_port)
    }

    @Test("runner.network.allow: a task's agent phase on its image runs apt-get update and install from an allowlisted mirror over plain HTTP through the egress proxy; a port not listed is refused; every request is in the audit; the verifier has no such network")
    func aptFromMirror() throws {
        try TaskImageTests.requireImageHost()
        let dir = NSTemporaryDirectory() + "ah-mirror-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try Self.makeRepository(dir)
        let port = try Self.freePort(), closed = try Self.freePort()
        let server = try Self.serve(dir + "/repo", port: port)
        defer { kill(server.processIdentifier, SIGKILL); server.waitUntilExit() }

        let t = dir + "/tasks/mirror"
        try TaskImageTests.makeTaskDirectories(t)
        try "Install mirror-hello.\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
        try "FROM \(TaskImageTests.base)\nWORKDIR /app\n".write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
        // The proxy is for every host the sandbox asks about; 127.0.0.1 is in no_proxy, which
        // a mirror on a real host name never is.
        try """
            #!/bin/bash
            set -e
            unset no_proxy NO_PROXY
            rm -f /etc/apt/sources.list /etc/apt/sources.list.d/*
            echo "deb [trusted=yes] http://127.0.0.1:\(port) ./" > /etc/apt/sources.list.d/mirror.list
            apt-get update > /tmp/apt.log 2>&1 || { cat /tmp/apt.log; exit 1; }
            apt-get install -y mirror-hello >> /tmp/apt.log 2>&1 || { cat /tmp/apt.log; exit 1; }
            python3 -c 'import urllib.request as u; u.urlopen("http://127.0.0.1:\(closed)/")' > /app/refused.txt 2>&1 || true

            """.write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
        try """
            #!/bin/bash
            { cat /usr/share/mirror-hello/greeting; tail -1 /app/refused.txt
              python3 -c 'import urllib.request as u; u.urlopen("http://127.0.0.1:\(port)/Packages", timeout=5)' 2>&1 | tail -1; } > /logs/verifier/out.txt
            [ "$(cat /usr/share/mirror-hello/greeting)" = "from the mirror" ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt

            """.write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
        let task = try #require(try LocalBenchmark(directory: dir).task("mirror"))
        let store = TaskImageStore(directory: dir + "/store")
        try #require(try store.prepare([task], ids: try ImageIDs.range()) { _ in }.isEmpty)

        let scratch = try TaskImageTests.scratchRoot()
        defer { rmdir(scratch) }
        let audit = AuditLog()
        var config = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: [Built.packageRoot + "/policies"]), agentDirectory: "",
                                          scratchRoot: scratch, audit: audit)
        config.oracle = true
        config.images = store.load([task]).images
        config.verifierTools = try TaskImageTests.toolbox()
        config.agentNetworkAllow = ["127.0.0.1:\(port)"]
        let box = VerifierOutput()
        config.scratchObserver = { _, path in box.text = (try? String(contentsOfFile: path + "/logs/out.txt", encoding: .utf8)) ?? "(no out.txt)" }
        let traces = dir + "/traces"
        let outcome = try TaskRunner(configuration: config).run(task, traceDirectory: traces)
        let agent = (try? String(contentsOfFile: traces + "/agent.stdout", encoding: .utf8)) ?? ""
        #expect(outcome.reward == 1, "\(outcome)\n\(agent)\n\(box.text)")
        let lines = box.text.split(separator: "\n").map(String.init)
        // The port not listed: the proxy answered 403.
        #expect(lines.count == 3 && lines[1].contains("403"), "\(box.text)")
        // The verifier has its own loopback and no proxy: nothing listens there.
        #expect(lines.count == 3 && lines[2].contains("Connection refused"), "\(box.text)")
        let egress = audit.events.filter { $0.kind == .egress }
        let fetched = egress.filter { $0.name == "127.0.0.1:\(port)" && $0.action == "allowed" && $0.detail == "GET over plain HTTP" }
        #expect(fetched.count >= 3, "the Release, Packages and the package: \(egress)")
        #expect(egress.contains { $0.name == "127.0.0.1:\(closed)" && $0.action == "denied" && ($0.detail ?? "").contains("not on the allowlist") }, "\(egress)")
    }

    @Test("a test script's apt-get install on a task's image: the image's apt-get installs it from the mirror before the verifier starts (flagged), the toolbox's apt-get then finds it installed (a no-network task's too); without a mirror it is not there and the task scores 0")
    func verifierInstallsPackages() throws {
        try TaskImageTests.requireImageHost()
        let dir = NSTemporaryDirectory() + "ah-vpkg-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try Self.makeRepository(dir)
        let port = try Self.freePort()
        let server = try Self.serve(dir + "/repo", port: port)
        defer { kill(server.processIdentifier, SIGKILL); server.waitUntilExit() }

        let t = dir + "/tasks/pkg"
        try TaskImageTests.makeTaskDirectories(t)
        try "Nothing to do.\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
        try """
            FROM \(TaskImageTests.base)
            WORKDIR /app
            RUN rm -f /etc/apt/sources.list /etc/apt/sources.list.d/* && echo "deb [trusted=yes] http://127.0.0.1:\(port) ./" > /etc/apt/sources.list.d/mirror.list

            """.write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
        try "#!/bin/bash\ntrue\n".write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
        // The task's agent phase has no network (task.toml); its verifier's packages still
        // come from the operator's mirror.
        try "[environment]\nnetwork_mode = \"no-network\"\n".write(toFile: t + "/task.toml", atomically: true, encoding: .utf8)
        // As Terminal-Bench 2.0's scripts that need a program: apt-get, then use it; here from
        // a script test.sh runs, as configure-git-webserver's verify.sh does.
        try """
            #!/bin/bash
            bash /tests/verify.sh
            [ "$(cat /usr/share/mirror-hello/greeting)" = "from the mirror" ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt

            """.write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
        try """
            #!/bin/bash
            apt-get update
            DEBIAN_FRONTEND=noninteractive apt-get install -y mirror-hello

            """.write(toFile: t + "/tests/verify.sh", atomically: true, encoding: .utf8)
        let task = try #require(try LocalBenchmark(directory: dir).task("pkg"))
        #expect(VerifierPackages.requested(in: t + "/tests/test.sh") == [])
        #expect(VerifierPackages.requested(inTests: t + "/tests") == ["mirror-hello"])
        let store = TaskImageStore(directory: dir + "/store")
        try #require(try store.prepare([task], ids: try ImageIDs.range()) { _ in }.isEmpty)

        for mirror in [true, false] {
            let scratch = try TaskImageTests.scratchRoot()
            defer { rmdir(scratch) }
            let audit = AuditLog()
            var config = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: [Built.packageRoot + "/policies"]), agentDirectory: "",
                                              scratchRoot: scratch, audit: audit)
            config.oracle = true
            config.images = store.load([task]).images
            config.verifierTools = try TaskImageTests.toolbox()
            if mirror { config.agentNetworkAllow = ["127.0.0.1:\(port)"] }
            let traces = dir + "/traces-\(mirror)"
            let outcome = try TaskRunner(configuration: config).run(task, traceDirectory: traces)
            let log = TaskImageTests.traceLog(traces, ["packages.stdout", "packages.stderr", "verifier.stdout", "verifier.stderr"])
            if mirror {
                #expect(outcome.reward == 1, "\(outcome)\n\(log)")
                #expect(outcome.verifierRanAgentCode?.first?.contains("the image's apt-get") == true
                        && outcome.verifierRanAgentCode?.first?.contains("mirror-hello: installed") == true, "\(String(describing: outcome.verifierRanAgentCode))")
                #expect(audit.events.contains { $0.kind == .egress && $0.name == "127.0.0.1:\(port)" && $0.action == "allowed" }, "\(audit.events)")
                // The toolbox's apt-get read dpkg's status file: no command is named mirror-hello.
                #expect(log.contains("apt-get install mirror-hello: already provided"), "\(log)")
            } else {
                #expect(outcome.reward == 0, "\(outcome)\n\(log)")
                #expect(log.contains("Unable to locate package mirror-hello"), "\(log)")
            }
        }
    }

    @Test("runner.network.allow naming a host the coding agent also reaches is refused, however spelled: a held-out run could leave its task there")
    func sharedHostRefused() throws {
        var config = ExperimentConfig(benchmark: "local", dataset: "/nonexistent")
        config.runner.networkAllow = ["deb.debian.org:80", "pypi.org:443"]
        config.networkAllow = ["PyPI.org:443"]
        #expect(throws: ExperimentError.self) { try LocalKind.agentNetwork(config) }
        config.networkAllow = ["api.example.com:443"]
        #expect(try LocalKind.agentNetwork(config) == ["deb.debian.org:80", "pypi.org:443"])
        // One host however it is spelled, whatever the port, a pattern against what it covers.
        for (mine, theirs) in [("pypi.org.:443", "pypi.org:443"), ("pypi.org:443", "PYPI.ORG.:8443"), ("*.pythonhosted.org:443", "files.pythonhosted.org:443"),
                               ("files.pythonhosted.org:443", "*.pythonhosted.org:443"), ("*.a.example:443", "*.example:443"), ("[::1]:80", "[0:0::1]:81"),
                               ("127.0.0.1:80", "127.0.0.1.:80")] {
            config.runner.networkAllow = [mine]
            config.networkAllow = [theirs]
            #expect(throws: ExperimentError.self, "\(mine) against \(theirs)") { try LocalKind.agentNetwork(config) }
        }
        config.runner.networkAllow = ["*.pythonhosted.org:443"]
        config.networkAllow = ["pythonhosted.org.evil.example:443", "api.example.com:443"]
        #expect(try LocalKind.agentNetwork(config) == ["*.pythonhosted.org:443"])
    }
}

private final class VerifierOutput: @unchecked Sendable {
    var text = ""
}
