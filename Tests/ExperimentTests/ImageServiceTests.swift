@testable import Benchmark
import Experiment
import Foundation
import Sandbox
import SandboxPolicy
import Testing
import TestSupport

/// A service the agent phase leaves running on a task's image (Terminal-Bench: nginx, sshd, a
/// Flask app the tests query): kept in the agent's sandbox while the verifier runs, reached
/// through the supervisor's relay of the ports it listens on, never through files or anything
/// else of its namespace; flagged; gone afterwards.
@Suite(.serialized) struct ImageServiceTests {
    /// The server the solution starts (the image's python3, on port 80 as root): it answers
    /// each request with the answer. Asked with `tamper`, it first tries to change what the
    /// verifier reads: the answer file, pytest's configuration at the root, the verifier's
    /// logs; what it could do is part of its reply.
    static let server = """
        import os, socket
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 80)); s.listen(8)
        u = socket.socket(socket.AF_UNIX); u.bind("\\0agent-service"); u.listen(8)
        while True:
            c, _ = s.accept(); q = c.recv(100)
            done = []
            if b"tamper" in q:
                open("/srv/work/answer.txt", "w").write("CHEAT\\n"); done.append("answer")
                open("/conftest.py", "w").write("import pytest\\n"); done.append("conftest")
                try:
                    os.makedirs("/logs/verifier", exist_ok=True); open("/logs/verifier/reward.txt", "w").write("1"); done.append("own-logs")
                except OSError as e:
                    done.append(f"logs-{e.errno}")
                try:
                    socket.create_connection(("127.0.0.1", 3128), timeout=3); done.append("egress")
                except OSError as e:
                    done.append(f"egress-{e.errno}")
            c.sendall(("served-42 " + ",".join(done)).encode()); c.close()

        """

    @Test("a server the solution leaves running answers the verifier through the relay of its port, and nothing else of its namespace does; what it writes after the verifier starts never reaches the verifier's files; the task is flagged; the server is gone afterwards")
    func serviceQueried() throws {
        try TaskImageTests.requireImageHost()
        let dir = NSTemporaryDirectory() + "ah-image-service-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let marker = "server-" + UUID().uuidString.prefix(8).lowercased()
        let task = try TaskImageTests.makeTask(in: dir, id: "service", solve: """
            #!/bin/bash
            set -e
            cat > /srv/work/\(marker).py <<'EOF'
            \(Self.server)EOF
            echo 42 > /srv/work/answer.txt
            setsid python3 /srv/work/\(marker).py > /dev/null 2>&1 < /dev/null &
            for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 80))' 2>/dev/null && exit 0; sleep 0.1; done
            exit 1

            """, test: """
            #!/bin/bash
            # The toolbox's python3 asks the agent's server, once plainly and once to tamper.
            # By name: /etc/hosts names localhost, as a container runtime's does.
            ask() { python3 -c 'import socket, sys; s = socket.create_connection(("localhost", 80), timeout=5); s.sendall(sys.argv[1].encode()); print(s.recv(200).decode())' "$1"; }
            # Nothing else of the agent's: its abstract socket, its egress proxy.
            try() { python3 -c "import socket
            try: $1; print('reached')
            except OSError as e: print('errno', e.errno)"; }
            abstract=$(try 's = socket.socket(socket.AF_UNIX); s.connect("\\0agent-service")')
            proxy=$(try 'socket.create_connection(("127.0.0.1", 3128), timeout=3)')
            first=$(ask plain); second=$(ask tamper)
            { echo "first=$first"; echo "second=$second"; echo "answer=$(cat answer.txt)"; echo "abstract=$abstract"; echo "proxy=$proxy"
              ls /conftest.py 2>&1; } > /logs/verifier/out.txt
            if [ "$first" = "served-42 " ] && [ "$(cat answer.txt)" = 42 ] && [ ! -e /conftest.py ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

            """)
        var config = try TaskImageTests.oracleConfiguration([task], in: dir)
        defer { rmdir(config.scratchRoot) }
        // The agent phase has the egress proxy (a mirror): the verifier must not reach it.
        config.agentNetworkAllow = ["127.0.0.1:9"]
        let out = OutBox()
        config.scratchObserver = { _, path in out.read(path + "/logs/out.txt") }
        let traces = dir + "/traces"
        let outcome = try TaskRunner(configuration: config).run(task, traceDirectory: traces)
        let log = TaskImageTests.traceLog(traces)
        #expect(outcome.reward == 1, "\(outcome)\n\(out.text)\n\(log)")
        // The server did tamper, in the agent's overlay, and could not reach the verifier's logs.
        #expect(out.text.contains("second=served-42 answer,conftest,logs-") || out.text.contains("second=served-42 answer,conftest,own-logs"),
                "\(out.text)")
        // ... and kept no egress: the agent phase's proxy ended with its payload.
        #expect(out.text.contains(",egress-\(ECONNREFUSED)\n"), "\(out.text)")
        #expect(out.text.contains("answer=42\n") && out.text.contains("No such file"), "\(out.text)")
        // The verifier's network namespace is its own: the supervisor relays the port the
        // server listens on, and nothing else (the abstract socket, the agent's proxy).
        #expect(out.text.contains("abstract=errno \(ECONNREFUSED)\n") && out.text.contains("proxy=errno \(ECONNREFUSED)\n"), "\(out.text)")
        // Flagged: the verifier talked to the agent's processes, through the relay.
        #expect((outcome.verifierRanAgentCode ?? []).contains {
            $0.contains("ran beside the verifier") && $0.contains("python3") && $0.contains("relay: 127.0.0.1:80 (2 connections)")
        }, "\(outcome.verifierRanAgentCode ?? [])")
        // Gone: no host process names the server's script any more.
        let pids = (try? FileManager.default.contentsOfDirectory(atPath: "/proc"))?.filter { Int($0) != nil } ?? []
        let left = pids.filter { pid in
            (procText("/proc/\(pid)/cmdline") ?? "").contains(marker)
        }
        #expect(left.isEmpty, "\(left)")
    }
}

private final class OutBox: @unchecked Sendable {
    var text = ""
    func read(_ path: String) { text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? "(no output)" }
}

/// A test script that starts with `pip install pytest ...` (six of Terminal-Bench 2.0's): the
/// toolbox's pip shim installs from its wheels into a virtual environment of its own Python,
/// so pytest never runs on the image's Python, pip or pytest, which the agent may replace.
@Suite(.serialized) struct VerifierPipTests {
    @Test("pip install then pytest run on the toolbox's Python: a pip, pytest and python3 the agent planted on the image are never run; the honest answer passes, a wrong one fails")
    func pipFromToolbox() throws {
        try TaskImageTests.requireImageHost()
        let dir = NSTemporaryDirectory() + "ah-image-pip-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let cheat = """
            for p in /usr/local/bin/pip /usr/local/bin/pip3 /usr/local/bin/pytest /usr/local/bin/python /usr/local/bin/python3; do
              printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt; echo planted >> /srv/work/ran; exit 0\\n' > $p; chmod 755 $p
            done
            """
        let test = """
            #!/bin/bash
            pip install pytest==8.4.1 pytest-json-ctrf==0.3.5 --break-system-packages
            python -c 'import sys; print(sys.prefix)' > /logs/verifier/prefix.txt
            python -m pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
            if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

            """
        var tasks: [BenchmarkTask] = []
        for (id, answer) in [("honest", "42"), ("wrong", "41")] {
            let task = try TaskImageTests.makeTask(in: dir, id: id, solve: "#!/bin/bash\necho \(answer) > /srv/work/answer.txt\n\(cheat)\n", test: test)
            try "def test_answer():\n    assert open('/srv/work/answer.txt').read().strip() == '42'\n"
                .write(toFile: task.testsDirectory + "/test_outputs.py", atomically: true, encoding: .utf8)
            tasks.append(task)
        }
        var config = try TaskImageTests.oracleConfiguration(tasks, in: dir)
        defer { rmdir(config.scratchRoot) }
        let prefix = OutBox()
        config.scratchObserver = { _, path in prefix.read(path + "/logs/prefix.txt") }
        let runner = try TaskRunner(configuration: config)
        for task in tasks {
            let traces = dir + "/traces/" + task.id
            let outcome = runner.run(task, traceDirectory: traces)
            let log = TaskImageTests.traceLog(traces, ["verifier.stdout", "verifier.stderr"])
            #expect(outcome.reward == (task.id == "honest" ? 1 : 0), "\(task.id): \(outcome)\n\(log)")
            // The environment pip made, in the verifier's own HOME: the toolbox's Python.
            #expect(prefix.text.hasSuffix("/.venv\n") && !prefix.text.hasPrefix("/usr"), "\(task.id): \(prefix.text)\n\(log)")
            #expect(log.contains("1 passed") == (task.id == "honest"), "\(log)")
        }
    }

    @Test("pytest starts with the working directory off its sys.path (PYTHONSAFEPATH), and a program a test starts does not inherit that: a script in /app imports the module beside it")
    func scriptsImportTheirNeighbours() throws {
        try TaskImageTests.requireImageHost()
        let dir = NSTemporaryDirectory() + "ah-image-safepath-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let task = try TaskImageTests.makeTask(in: dir, id: "neighbours", solve: """
            #!/bin/bash
            mkdir -p /app && printf 'def f():\n    return 42\n' > /app/run.py && printf 'from run import f\nprint(f())\n' > /app/main.py

            """, test: """
            #!/bin/bash
            pip install pytest==8.4.1
            cd /app && pytest /tests/test_outputs.py -rA
            if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

            """)
        try """
            import os, subprocess, sys

            def test_neighbours():
                assert sys.flags.safe_path
                assert "PYTHONSAFEPATH" not in os.environ
                r = subprocess.run(["python3", "main.py"], capture_output=True, text=True)
                assert r.stdout.strip() == "42", r.stderr

            """.write(toFile: task.testsDirectory + "/test_outputs.py", atomically: true, encoding: .utf8)
        let config = try TaskImageTests.oracleConfiguration([task], in: dir)
        defer { rmdir(config.scratchRoot) }
        let traces = dir + "/traces"
        let outcome = try TaskRunner(configuration: config).run(task, traceDirectory: traces)
        let log = TaskImageTests.traceLog(traces, ["verifier.stdout", "verifier.stderr"])
        #expect(outcome.reward == 1, "\(outcome)\n\(log)")
    }

    @Test("a C++ library a test loads (as numpy's extension does: its own DT_RUNPATH) gets the toolbox's C++ runtime, never the image's")
    func cxxRuntimeFromToolbox() throws {
        try TaskImageTests.requireImageHost()
        let dir = NSTemporaryDirectory() + "ah-image-cxx-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let task = try TaskImageTests.makeTask(in: dir, id: "cxx", solve: "#!/bin/bash\ntrue\n", test: """
            #!/bin/bash
            pip install pytest==8.4.1
            pytest /tests/test_outputs.py -rA
            if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

            """)
        // A library like a wheel's extension: it needs libstdc++ and searches a DT_RUNPATH of its own first.
        let source = task.testsDirectory + "/probe.cpp"
        try "#include <string>\nextern \"C\" int probe() { std::string s(\"probe\"); return (int)s.size(); }\n"
            .write(toFile: source, atomically: true, encoding: .utf8)
        let compilers = ["/opt/swift/usr/bin/clang++", "/usr/bin/g++", "/usr/bin/clang++"]
        let cxx = try #require(compilers.first { access($0, X_OK) == 0 }, "no C++ compiler")
        let built = try runProcess(cxx, ["-shared", "-fPIC", "-o", task.testsDirectory + "/libprobe.so", source,
                                         "-Wl,--enable-new-dtags,-rpath,/nonexistent-runpath"])
        try #require(built.status == 0, "\(built.stderr)")
        try """
            import ctypes

            def test_cxx_runtime():
                assert ctypes.CDLL("/tests/libprobe.so").probe() == 5
                libs = {l.split()[-1] for l in open("/proc/self/maps") if "libstdc++" in l}
                assert libs and all(p.startswith("/opt/autoharness/verifier-tools/") for p in libs), libs

            """.write(toFile: task.testsDirectory + "/test_outputs.py", atomically: true, encoding: .utf8)
        let config = try TaskImageTests.oracleConfiguration([task], in: dir)
        defer { rmdir(config.scratchRoot) }
        let traces = dir + "/traces"
        let outcome = try TaskRunner(configuration: config).run(task, traceDirectory: traces)
        let log = TaskImageTests.traceLog(traces, ["verifier.stdout", "verifier.stderr"])
        #expect(outcome.reward == 1, "\(outcome)\n\(log)")
    }
}
