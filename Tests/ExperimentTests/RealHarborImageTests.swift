import Foundation
import Testing
import TestSupport

/// The real Harbor's agent phase on each task's own image (`env_provider: local`, after
/// `autoharness images`): Harbor and agent.py in the runner sandbox, the agent's commands in
/// the task's container (the image as its root, root inside, autoharness-exec serving them),
/// the verifier on the image plus what the agent changed, beside what the agent left running.
@Suite("Real Harbor on task images", .serialized)
struct RealHarborImageTests {
    /// Terminal-Bench-shaped tasks FROM the locally bootstrapped base: a WORKDIR other than
    /// /app, a file COPYed outside /app, an ENV, and an answer key in environment/ that the
    /// Dockerfile never copies. The tests query a server the agent left running, on port 80
    /// (root's inside the container).
    static func dataset(in dir: String, ids: [String]) throws {
        for id in ids {
            let t = dir + "/" + id
            for d in ["environment", "tests", "solution"] { try FileManager.default.createDirectory(atPath: t + "/" + d, withIntermediateDirectories: true) }
            try "schema_version = \"1.4\"\n\n[task]\nname = \"autoharness-test/\(id)\"\n\n[agent]\ntimeout_sec = 120.0\n\n[verifier]\ntimeout_sec = 60.0\n"
                .write(toFile: t + "/task.toml", atomically: true, encoding: .utf8)
            try "Serve /opt/task/data.txt's word as /srv/work/out.txt on port 80.\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
            try """
                FROM \(TaskImageTests.base)
                WORKDIR /srv/work
                COPY data.txt /opt/task/data.txt
                ENV TASK_MARK=from-the-image

                """.write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
            try "word-\(id)\n".write(toFile: t + "/environment/data.txt", atomically: true, encoding: .utf8)
            try "ANSWER-KEY-\(id)\n".write(toFile: t + "/environment/answer_key.txt", atomically: true, encoding: .utf8)
            // The toolbox's python3 asks the agent's server; the file itself is checked too.
            try """
                #!/bin/bash
                served=$(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://localhost/out.txt", timeout=5).read().decode().strip())' 2>&1)
                echo "served=$served cwd=$(pwd)" > /logs/verifier/out.txt
                if [ "$served" = "$(cat /opt/task/data.txt)" ] && cmp -s /opt/task/data.txt out.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

                """.write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
            try "#!/bin/bash\ncp /opt/task/data.txt out.txt\n".write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
        }
    }

    /// Runs its commands through Harbor's environment (exec, upload, download), prints what
    /// the container showed it, and solves the task unless `solves` is false.
    static func agent(solves: Bool, mirror: UInt16 = 9) -> String {
        RealHarborTests.harborAgent(preamble: "import os, tempfile", run: """
            r = await environment.exec("echo mark=$TASK_MARK cwd=$(pwd) uid=$(id -u); ls /app 2>&1; test -e answer_key.txt && echo LEAKED || echo no-key; ls /tests /solution 2>&1 | head -2")
            print("probe:", r.return_code, (r.stdout or "").replace(chr(10), " "))
            # A command that makes the exec server its tracer (an anti-debugging check), then
            # gets a signal: let go on, not left stopped until the call times out.
            t = await environment.exec("exec perl -e 'syscall(101, 0, 0, 0, 0) == 0 or die; $SIG{USR1} = sub { print q(usr1 ) }; kill USR1 => $$; print q(after)'", timeout_sec=20)
            print("traced:", t.return_code, (t.stdout or "").strip())
            with tempfile.TemporaryDirectory() as d:
                with open(d + "/up.txt", "w") as f:
                    f.write("uploaded")
                await environment.upload_file(d + "/up.txt", "/root/up/up.txt")
                await environment.download_file("/root/up/up.txt", d + "/back.txt")
                print("roundtrip:", open(d + "/back.txt").read())
            if \(solves ? "True" : "False"):
                await environment.exec("cp /opt/task/data.txt out.txt")
            else:
                await environment.exec("echo wrong > out.txt")
            await environment.exec("setsid python3 -m http.server 80 --bind 0.0.0.0 --directory /srv/work > /dev/null 2>&1 < /dev/null &")
            w = await environment.exec("for i in $(seq 100); do python3 -c 'import socket; socket.create_connection((\\"127.0.0.1\\", 80))' 2>/dev/null && exit 0; sleep 0.1; done; exit 1")
            print("server:", w.return_code)
            # A package mirror (task_network_allow), through the egress proxy: the only route out.
            m = await environment.exec("unset no_proxy NO_PROXY; python3 -c 'import urllib.request; print(\\"mirror:\\", urllib.request.urlopen(\\"http://127.0.0.1:\(mirror)/mirror.txt\\", timeout=10).read().decode().strip())' 2>&1 | tail -1")
            print("fetched", (m.stdout or "").strip())
            try:
                await environment.exec("sleep 30", timeout_sec=1)
                print("timeout: none")
            except RuntimeError as e:
                print("timeout:", e)
            """)
    }

    @Test("Harbor's agent phase on each task's image: commands run as root in the image's WORKDIR and ENV, files copy in and out, the answer key never reaches the container, a server the agent left running is queried by the verifier; a wrong answer scores 0")
    func agentPhaseOnImage() throws {
        try requireRoot()
        try TaskImageTests.requireImageHost()
        let harbor = try RealHarborTests.harbor()
        let tools = try TaskImageTests.toolbox()
        let data = try TempDir()
        let ids = ["img-1", "img-2", "img-3"]
        try Self.dataset(in: data.path, ids: ids)
        // init's default where podman and the verifier tools are: each task's image made now,
        // env_provider: local and the tools in the config, nothing else to configure.
        let exp = try Experiment(benchmark: "terminal-bench", extraArgs: ["--tool", harbor, "--dataset", data.path, "--images", "auto"])
        defer { exp.removeScratch() }
        let config = try String(contentsOfFile: exp.root + "/experiment_config.yaml", encoding: .utf8)
        #expect(config.contains("\nenv_provider: local ") && config.contains("\n  verifier_tools: \(tools.directory) "), "\(config)")
        let index = try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: exp.root + "/.autoharness/images/index.json"))) as? [String: Any]
        #expect(Set(index?.keys.map { $0 } ?? []) == Set(ids), "\(index ?? [:])")
        try exp.set("agent_model", "none")
        try exp.set("env_pass", "[]", in: "runner")
        try exp.set("allow", "[]", in: "runner")
        // A second `images` builds nothing.
        let again = try exp.run(["images"], environment: [:])
        #expect(again.status == 0 && again.stdout.contains("images: 3 tasks on their own image") && !again.stderr.contains("podman build"), "\(again.stdout)\(again.stderr)")

        try exp.setAgent(Self.agent(solves: false))
        let p = try exp.run(["prepare"], environment: [:])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/3 tasks pass"), "\(p.stdout)\(p.stderr)")

        // The tasks' containers reach a mirror on this host's loopback (task_network_allow).
        let served = try TempDir(mode: 0o755)
        try "from the host mirror\n".write(toFile: served.path + "/mirror.txt", atomically: true, encoding: .utf8)
        let port = try ImageMirrorTests.freePort()
        let server = try ImageMirrorTests.serve(served.path, port: port)
        defer { kill(server.processIdentifier, SIGKILL); server.waitUntilExit() }
        let path = exp.root + "/experiment_config.yaml"
        let text = try String(contentsOfFile: path, encoding: .utf8)
        try #require(text.contains("# task_network_allow: [deb.debian.org:80]"), "\(text)")
        try text.replacingOccurrences(of: "# task_network_allow: [deb.debian.org:80]", with: "task_network_allow: [\"127.0.0.1:\(port)\"]")
            .write(toFile: path, atomically: true, encoding: .utf8)

        try exp.setAgent(Self.agent(solves: true, mirror: port))
        let b = try exp.run(["benchmark"], environment: [:])
        let train = try exp.split().train
        #expect(b.status == 0 && b.stdout.contains("train: \(train.count)/\(train.count) passed"), "\(b.stdout)\(b.stderr)")
        for id in train {
            let trace = ["tool.stdout", "harbor-trial.log", "verifier.stdout", "verifier.stderr", "agent.stderr"]
                .map { exp.traceFile(traceName(id), $0) ?? "" }.joined(separator: "\n")
            // The container: root inside, the image's WORKDIR and ENV, an empty /app (the
            // image has none), no answer key, no tests or solution.
            #expect(trace.contains("probe: 0 mark=from-the-image cwd=/srv/work uid=0"), "\(id): \(trace)")
            #expect(trace.contains("no-key") && !trace.contains("LEAKED"), "\(id): \(trace)")
            #expect(trace.contains("roundtrip: uploaded"), "\(id): \(trace)")
            #expect(trace.contains("traced: 0 usr1 after"), "\(id): \(trace)")
            #expect(trace.contains("server: 0"), "\(id): \(trace)")
            #expect(trace.contains("timeout: Command timed out after 1 seconds"), "\(id): \(trace)")
            #expect(trace.contains("fetched mirror: from the host mirror"), "\(id): \(trace)")
            // The verifier reached the server the agent left running, in the image's WORKDIR.
            let result = try #require(exp.traceFile(traceName(id), "result.json"))
            #expect(result.contains("relay"), "\(id): \(result)")
        }
        #expect(exp.scratchMounts().isEmpty)
        #expect(try exp.rows("violation").isEmpty)

        // The held-out tasks in the VM: Harbor's agent phase and each task's container on its
        // image in the guest (the store shared read-only), the server the agent left running
        // queried there by the verifier.
        try HeldOutVMTests.requireVM()
        let vm = try String(contentsOfFile: path, encoding: .utf8)
        try #require(vm.contains("\n  held_out_runtime: "), "\(vm)")
        try vm.replacingOccurrences(of: "\n  held_out_runtime: ", with: "\n  vm: {accel: tcg, allow_emulation: true, memory_mib: 1536}\n  held_out_runtime: vm #")
            .write(toFile: path, atomically: true, encoding: .utf8)
        let g = try exp.run(["gate"], environment: [:])
        let test = try exp.split().test
        #expect((g.status == 0 || g.status == 1) && g.stdout.contains("val_score: 1.00"), "\(g.stdout)\n\(g.stderr)")
        #expect(g.stderr.contains("held-out VM: \(test.count) task(s) answered"), "\(g.stderr)")
        #expect(exp.scratchMounts().isEmpty)
    }
}
