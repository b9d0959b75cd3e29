@testable import Benchmark
import Experiment
import ExperimentModel
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
        try TaskImageTests.makeTaskDirectories(t)
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

    /// Root and the debootstrap base image, which every image test builds FROM.
    static func requireImageHost() throws {
        try #require(getuid() == 0, "image tests build with podman's root storage and mount overlays: run as root")
        try #require(try ChildProcess.run(["/usr/bin/podman", "image", "exists", base]).succeeded,
                     "\(base) is missing: scripts/build-images makes it (CI runs it before the tests)")
    }

    /// A task's environment/, tests/ and solution/ under `t`.
    static func makeTaskDirectories(_ t: String) throws {
        for sub in ["environment", "tests", "solution"] {
            try FileManager.default.createDirectory(atPath: t + "/" + sub, withIntermediateDirectories: true)
        }
    }

    /// The verifier tools scripts/install-verifier-tools installed (CI installs them first).
    static func toolbox() throws -> VerifierTools {
        let r = try runProcess("/bin/bash", [Built.packageRoot + "/scripts/install-verifier-tools", "--print"])
        let dir = r.stdout.split(separator: "\n").last.map { String($0.dropFirst("verifier-tools ".count)) } ?? ""
        try #require(r.status == 0, "the verifier tools are not installed: run scripts/install-verifier-tools (\(r.stderr))")
        return try VerifierTools(directory: dir)
    }

    /// An oracle run of `tasks` on their images, built into `dir`/store now, with the verifier
    /// tools; its scratch root is the caller's to remove (`rmdir`).
    static func oracleConfiguration(_ tasks: [BenchmarkTask], in dir: String) throws -> TaskRunConfiguration {
        let store = TaskImageStore(directory: dir + "/store")
        let problems = try store.prepare(tasks, ids: try ImageIDs.range()) { _ in }
        try #require(problems.isEmpty, "\(problems)")
        var config = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: [Built.packageRoot + "/policies"]), agentDirectory: "",
                                          scratchRoot: try scratchRoot())
        config.oracle = true
        config.images = store.load(tasks).images
        config.verifierTools = try toolbox()
        return config
    }

    /// What a task's trace holds of its sandboxes' output, for failure messages.
    static func traceLog(_ traces: String, _ names: [String] = ["agent.stderr", "verifier.stdout", "verifier.stderr"]) -> String {
        names.map { (try? String(contentsOfFile: traces + "/" + $0, encoding: .utf8)) ?? "" }.joined(separator: "\n")
    }

    static func scratchRoot() throws -> String {
        let path = "/dev/shm/ah-image-" + UUID().uuidString.prefix(8).lowercased()
        try #require(mkdir(path, 0o700) == 0)
        return path
    }

    @Test("a task runs on its image: root inside owns the image's files, the WORKDIR and ENV are the image's, environment/ files the image lacks never reach the task, and the verifier sees what the agent changed")
    func oracleOnImage() throws {
        try Self.requireImageHost()
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
              chown 1:1 /etc/task.conf && echo chown-mapped-ok
              chown 70000:70000 /etc/task.conf 2>&1 || echo chown-unmapped-refused
              mount -t tmpfs none /mnt 2>&1 || echo mount-refused
              chroot / /bin/true && echo chroot-ok
              perl -e 'mkdir "/srv/jail"; chroot("/srv/jail") or die "chroot: $!\\n"; chdir("..") for 1..40; chroot(".") or die "chroot back: $!\\n";
                  print((-e "/srv/work/built.txt") ? "escaped-to-the-image\\n" : "escaped-elsewhere\\n");
                  print((-e "\(Built.packageRoot)/Package.swift") ? "host-visible\\n" : "host-hidden\\n")'; } > /srv/work/seen.txt 2>&1

            """, test: """
            #!/bin/bash
            # The verifier starts in the image's WORKDIR and sees the agent's changes.
            { pwd; task-tool; cat /etc/task.conf; cat seen.txt; } > /logs/verifier/out.txt 2>&1
            # A link made from a jail, where /tests is not to be seen: it may lead to the key
            # from the sandbox's own root, so it is recorded as it is made (and removed here, so
            # that only its making can tell).
            perl -e 'chroot("/srv/jail") or die "chroot: $!"; chdir("/") or die; symlink("/tests/test.sh", "/made-in-jail") or die "symlink: $!"; unlink("/made-in-jail")' 2>> /logs/verifier/out.txt
            echo 1 > /logs/verifier/reward.txt

            """)
        let store = TaskImageStore(directory: dir + "/store")
        var lines: [String] = []
        let problems = try store.prepare([task], ids: try ImageIDs.range()) { lines.append($0) }
        #expect(problems.isEmpty, "\(problems)")
        #expect(lines.contains { $0.contains("podman build") }, "\(lines)")
        let (images, missing) = store.load([task])
        #expect(missing.isEmpty)
        let image = try #require(images.byTask[task.id])
        #expect(image.workingDirectory == "/srv/work")
        // A second prepare of the same context builds nothing.
        var again: [String] = []
        _ = try store.prepare([task], ids: try ImageIDs.range()) { again.append($0) }
        #expect(again.isEmpty, "\(again)")

        let scratch = try Self.scratchRoot()
        defer { rmdir(scratch) }
        let seenBox = SeenBox()
        var config = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: [Built.packageRoot + "/policies"]), agentDirectory: "",
                                          scratchRoot: scratch)
        config.oracle = true
        config.images = images
        config.verifierTools = try Self.toolbox()
        config.scratchObserver = { _, path in seenBox.read(path) }
        let runner = try TaskRunner(configuration: config)
        let outcome = runner.run(task, traceDirectory: nil)
        #expect(outcome.reward == 1, "\(outcome)")
        let planted = config.audit.events.filter { $0.kind == .plantedLink }
        #expect(planted.contains { ($0.name + " " + ($0.detail ?? "")).contains("made-in-jail") }, "\(planted)")
        let seen = seenBox.seen
        let verifier = seenBox.verifier
        // The solution: root inside, in the image's WORKDIR, with its ENV and its files.
        let first = seen.split(separator: "\n").map(String.init)
        #expect(first.prefix(6) == ["0", "/srv/work", "from-the-image", "input-on-image", "seed-on-image", "built-at-image-time"], "\(seen)")
        // Nothing of environment/ the Dockerfile does not copy: not in /app, not anywhere.
        #expect(!seen.contains("ANSWER-KEY"), "\(seen)")
        #expect(seen.contains("cannot access '/app/answer_key.txt': No such file"), "\(seen)")
        // Root of its namespace, with a container root's few capabilities over its own ids
        // (0-65535) only: a chown to one of them works, past them and a mount are refused.
        #expect(seen.contains("CapEff:\t00000000000400fb"), "\(seen)")
        #expect(seen.contains("chown-mapped-ok") && seen.contains("chown-unmapped-refused") && seen.contains("mount-refused"), "\(seen)")
        // chroot passes on its image (CAP_SYS_CHROOT, the filter lets it through there only),
        // and the classic climb out of a jail ends at the image's root, never the host's.
        #expect(seen.contains("chroot-ok\nescaped-to-the-image\nhost-hidden"), "\(seen)")
        // The verifier: in the WORKDIR, with what the agent installed and wrote; running a
        // program the agent installed is flagged as agent code run.
        #expect(verifier.hasPrefix("/srv/work\ntool-ok\nconfigured\n0\n"), "\(verifier)")
        #expect((outcome.verifierRanAgentCode ?? []).contains { $0.hasPrefix("executed /usr/local/bin/task-tool") },
                "\(outcome.verifierRanAgentCode ?? [])")
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

/// A task that names its image (task.toml's `[environment] docker_image`) and has no Dockerfile.
@Suite(.serialized) struct NamedImageTests {
    @Test("a task's docker_image that this host's podman holds is used as it is (no pull, no build); nothing of environment/ reaches /app, with or without the image")
    func namedImage() throws {
        try TaskImageTests.requireImageHost()
        let dir = NSTemporaryDirectory() + "ah-named-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let t = dir + "/tasks/named"
        try TaskImageTests.makeTaskDirectories(t)
        try "x\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
        try "[environment]\ndocker_image = \"\(TaskImageTests.base)\"\n".write(toFile: t + "/task.toml", atomically: true, encoding: .utf8)
        try "ANSWER-KEY\n".write(toFile: t + "/environment/answer_key.txt", atomically: true, encoding: .utf8)
        try "#!/bin/bash\n{ cat /etc/debian_version; ls -A /app; } > /tmp/seen && mv /tmp/seen /app/seen.txt\n"
            .write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
        try "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n".write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
        let task = try #require(try LocalBenchmark(directory: dir).task("named"))
        #expect(task.dockerImage == TaskImageTests.base)
        let store = TaskImageStore(directory: dir + "/store")
        var lines: [String] = []
        let problems = try store.prepare([task], ids: try ImageIDs.range()) { lines.append($0) }
        #expect(problems.isEmpty, "\(problems)")
        #expect(lines.contains { $0.contains("podman image \(TaskImageTests.base)") } && !lines.contains { $0.contains("podman build") }, "\(lines)")
        let image = try #require(store.load([task]).images.byTask["named"])
        #expect(image.origin == "the image \(TaskImageTests.base)")
        for onImage in [true, false] {
            let scratch = try TaskImageTests.scratchRoot()
            defer { rmdir(scratch) }
            let seen = ProbeBox()
            var config = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: [Built.packageRoot + "/policies"]), agentDirectory: "",
                                              scratchRoot: scratch)
            config.oracle = true
            config.verifierTools = try TaskImageTests.toolbox()
            if onImage { config.images = TaskImages(["named": image]) }
            config.scratchObserver = { _, path in seen.read(path + (onImage ? "/root/app/seen.txt" : "/app/seen.txt")) }
            let outcome = try TaskRunner(configuration: config).run(task, traceDirectory: nil)
            #expect(outcome.reward == 1, "\(outcome)")
            // On the image: Debian's version file, and an /app holding only what the solution wrote.
            #expect(seen.text.hasPrefix(onImage ? "12." : "") && !seen.text.contains("answer_key"), "\(onImage): \(seen.text)")
        }
        // On its image a task is verified only with the verifier tools: without them every
        // program the verifier would run is one the agent could have changed. Refused, not run.
        let scratch = try TaskImageTests.scratchRoot()
        defer { rmdir(scratch) }
        var bare = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: [Built.packageRoot + "/policies"]), agentDirectory: "",
                                        scratchRoot: scratch)
        bare.oracle = true
        bare.images = TaskImages(["named": image])
        let refused = try TaskRunner(configuration: bare).run(task, traceDirectory: nil)
        #expect(refused.status == .setupFailed && refused.detail?.contains("verified with the verifier tools") == true, "\(refused)")
    }

    @Test("a task whose image could not be built is refused with podman's reason (setup_failed), never run on the host's userland; once its Dockerfile builds, it runs on its image")
    func failedImageRefused() throws {
        try TaskImageTests.requireImageHost()
        let dir = NSTemporaryDirectory() + "ah-failed-image-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let marker = "BUILD-BROKE-" + UUID().uuidString.prefix(6)
        let t = dir + "/tasks/broken"
        try TaskImageTests.makeTaskDirectories(t)
        try "x\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
        try "FROM \(TaskImageTests.base)\nRUN echo \(marker) >&2; exit 3\n".write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
        // It would pass anywhere, the host's userland included: only the refusal stops it.
        try "#!/bin/bash\necho done > /app/out.txt\n".write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
        try "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n".write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
        let task = try #require(try LocalBenchmark(directory: dir).task("broken"))
        let store = TaskImageStore(directory: dir + "/store")
        let problems = try store.prepare([task], ids: try ImageIDs.range()) { _ in }
        #expect(problems["broken"]?.contains(marker) == true, "\(problems)")
        let loaded = store.load([task]).images
        #expect(loaded.byTask.isEmpty && loaded.refused["broken"]?.contains(marker) == true, "\(loaded.refused)")
        let scratch = try TaskImageTests.scratchRoot()
        defer { rmdir(scratch) }
        var config = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: [Built.packageRoot + "/policies"]), agentDirectory: "",
                                          scratchRoot: scratch)
        config.oracle = true
        config.verifierTools = try TaskImageTests.toolbox()
        config.images = loaded
        let refused = try TaskRunner(configuration: config).run(task, traceDirectory: nil)
        #expect(refused.status == .setupFailed && refused.reward == 0 && refused.detail?.contains(marker) == true, "\(refused)")
        // Fixed: built, the record of the failure gone, and the task runs on its image.
        try "FROM \(TaskImageTests.base)\nWORKDIR /srv/work\n".write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
        #expect(try store.prepare([task], ids: try ImageIDs.range()) { _ in }.isEmpty)
        config.images = store.load([task]).images
        #expect(config.images?.refused.isEmpty == true && config.images?.byTask["broken"] != nil)
        let ran = try TaskRunner(configuration: config).run(task, traceDirectory: nil)
        #expect(ran.reward == 1, "\(ran)")
    }

    @Test("the supervisor looks into the agent's upper layer without following a link the agent made there")
    func upperLayerLinksNotFollowed() throws {
        let upper = try TempDir()
        try FileManager.default.createSymbolicLink(atPath: upper.path + "/etc", withDestinationPath: "/etc")
        try FileManager.default.createDirectory(atPath: upper.path + "/opt", withIntermediateDirectories: true)
        try "x".write(toFile: upper.path + "/opt/tool", atomically: true, encoding: .utf8)
        #expect(access("/etc/passwd", F_OK) == 0)
        #expect(TaskImage.inUpper(upper.path, "etc/passwd") == nil)
        #expect(TaskImage.inUpper(upper.path, "opt/tool") != nil)
        #expect(AgentCodeRuns.inUpper("/etc/passwd", upper: upper.path) == nil && AgentCodeRuns.inUpper("/opt/tool", upper: upper.path) == "/opt/tool")
        try "".write(toFile: upper.path + "/conftest.py", atomically: true, encoding: .utf8)
        #expect(TaskImage.hiddenFromVerifier(upper: upper.path).map(\.destination) == ["/conftest.py"])
    }
}

/// The command line: `autoharness images` builds, and the experiment's runs use, the images.
@Suite(.serialized) struct ImagesCommandTests {
    /// `init` of a local benchmark of four tasks whose solution works only on their image
    /// (/opt/data and WORKDIR /srv/work exist nowhere else), the verifier tools set and
    /// `gate.held_out_runtime: runtime`.
    static func fourTasks(runtime: String) throws -> (Experiment, TempDir) {
        try TaskImageTests.requireImageHost()
        let tools = try TaskImageTests.toolbox()
        let temp = try TempDir()
        let dataset = temp.path + "/bench"
        for k in 1...4 {
            _ = try TaskImageTests.makeTask(in: dataset, id: "t\(k)", solve: "#!/bin/bash\ncp /opt/data/input.txt /srv/work/out.txt\n",
                                            test: "#!/bin/bash\ncmp -s /opt/data/input.txt out.txt && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n")
        }
        let root = temp.path + "/exp"
        let i = try autoharness(["init", root, "--benchmark", "local", "--dataset", dataset])
        try #require(i.status == 0, "\(i.stderr)")
        var config = try String(contentsOfFile: root + "/experiment_config.yaml", encoding: .utf8)
        config = config.replacingOccurrences(of: "# verifier_tools: \(tools.directory)", with: "verifier_tools: \(tools.directory)")
            .replacingOccurrences(of: "\n  held_out_runtime: ", with: "\n  held_out_runtime: \(runtime) #")
        try config.write(toFile: root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
        return (Experiment(existing: root, temp: temp), temp)
    }
    @Test("autoharness images builds each Dockerfile task's image once (a second run builds nothing), and benchmark --oracle then runs every train task on it")
    func imagesThenOracle() throws {
        let (exp, _) = try Self.fourTasks(runtime: "host")
        let built = try exp.run(["images"])
        #expect(built.status == 0 && built.stdout.contains("images: 4 tasks on their own image"), "\(built.stdout)\(built.stderr)")
        #expect(built.stderr.contains("images: 1 of 4: t1: podman build"), "\(built.stderr)")
        let again = try exp.run(["images"])
        #expect(again.status == 0 && !again.stderr.contains("podman build"), "\(again.stderr)")
        let p = try exp.run(["prepare"])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let o = try exp.run(["benchmark", "--oracle"])
        let train = try exp.split().train
        #expect(o.status == 0 && o.stdout.contains("train: \(train.count)/\(train.count) passed"), "\(o.stdout)\(o.stderr)")
    }

    @Test("a gate's held-out tasks on their images run in the held-out VM: the store's images shared read-only, each task's overlay in the guest, its package mirror (runner.network.allow) reached through the host's proxy; the held-out answer right only where the task ran on its image and reached the mirror")
    func heldOutImagesInTheVM() throws {
        try HeldOutVMTests.requireVM()
        let (exp, temp) = try Self.fourTasks(runtime: "vm\n  vm: {accel: tcg, allow_emulation: true, memory_mib: 1536}")
        // A mirror on the host's loopback holding each task's answer under its input's name.
        let mirror = temp.path + "/mirror"
        try FileManager.default.createDirectory(atPath: mirror, withIntermediateDirectories: true)
        for k in 1...4 { try "input-t\(k)\n".write(toFile: mirror + "/input-t\(k)", atomically: true, encoding: .utf8) }
        let port = try ImageMirrorTests.freePort()
        let server = try ImageMirrorTests.serve(mirror, port: port)
        defer {
            kill(server.processIdentifier, SIGKILL)
            server.waitUntilExit()
        }
        let config = try String(contentsOfFile: exp.root + "/experiment_config.yaml", encoding: .utf8)
        try (config + "runner:\n  network:\n    allow: [\"127.0.0.1:\(port)\"]\n").write(toFile: exp.root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
        let built = try exp.run(["images"])
        try #require(built.status == 0, "\(built.stdout)\(built.stderr)")
        let p = try exp.run(["prepare"])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let test = try exp.split().test
        // /opt/data and /srv/work exist only on the image, the answer only on the mirror: the
        // VM's answer can be right only where the guest ran each held-out task on its image and
        // reached the mirror (through the host's proxy: the guest has no network).
        try exp.setAgent("""
            import os, urllib.request

            class HarnessAgent:
                def run(self, instruction, workdir):
                    # 127.0.0.1 is in no_proxy, which a mirror on a real host name never is.
                    os.environ.pop("no_proxy", None)
                    os.environ.pop("NO_PROXY", None)
                    name = open("/opt/data/input.txt").read().strip()
                    proxy = urllib.request.ProxyHandler({"http": os.environ.get("http_proxy") or os.environ["HTTP_PROXY"]})
                    answer = urllib.request.build_opener(proxy).open("http://127.0.0.1:\(port)/" + name, timeout=60).read()
                    open("/srv/work/out.txt", "wb").write(answer)
            """)
        // (Accepted or not: four tasks leave one held out, which no margin can beat.)
        let g = try exp.run(["gate"])
        #expect((g.status == 0 || g.status == 1) && g.stdout.contains("val_score: 1.00"), "\(g.stdout)\n\(g.stderr)")
        #expect(g.stderr.contains("held-out VM: \(test.count) task(s) answered"), "\(g.stderr)")
        #expect(exp.scratchMounts().isEmpty)
    }
}

/// Cheats on the image path: each solution runs as root on the task's image, leaves a wrong
/// answer, and attacks what the verifier's chain runs or reads (Terminal-Bench 2.0's test
/// script: apt-get, uv's installer piped into sh, its env file sourced, pytest through uvx).
/// Each must score 0; the honest solution scores 1 on the same chain.
@Suite(.serialized) struct TaskImageCheatTests {
    static let testScript = """
        #!/bin/bash
        apt-get update >/dev/null 2>&1
        apt-get install -y curl >/dev/null 2>&1
        curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
        source $HOME/.local/bin/env
        uvx -p 3.13 -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA
        if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

        """

    /// (task id, what the solution does after writing a wrong answer). `evil.so` is in /app:
    /// a library that makes any process that loads it exit with status 0 (an atexit handler).
    static let cheats: [(String, String)] = [
        ("honest", "echo SECRET > /app/answer.txt"),
        // test.sh's shell, and the sh uv's installer is piped into, replaced.
        ("trojan-shell", """
            for b in /bin/bash /usr/bin/bash /bin/sh /usr/bin/sh /bin/dash /usr/bin/dash; do
              [ -e "$b" ] && printf '#!/usr/bin/perl\\nopen(F, ">/logs/verifier/reward.txt"); print F "1\\\\n"; exit 0;\\n' > "$b.new" && chmod 755 "$b.new"
            done
            for b in /bin/bash /usr/bin/bash /bin/sh /usr/bin/sh /bin/dash /usr/bin/dash; do [ -e "$b.new" ] && mv -f "$b.new" "$b"; done
            """),
        // A library preloaded into every dynamically linked program the verifier runs.
        ("preload", "cp /app/evil.so /usr/lib/evil.so && echo /usr/lib/evil.so > /etc/ld.so.preload"),
        // pytest's configuration above /tests: a conftest.py that turns failure into success.
        ("conftest", """
            printf 'def pytest_sessionfinish(session, exitstatus):\\n    session.exitstatus = 0\\n' > /conftest.py
            printf '[pytest]\\naddopts = -p no:cacheprovider\\n' > /pytest.ini
            """),
        // What the test script sources, and the uv it would run, where the image's HOME is.
        ("home-env", """
            mkdir -p /root/.local/bin
            printf 'echo 1 > /logs/verifier/reward.txt; exit 0\\n' > /root/.local/bin/env
            printf '#!/bin/sh\\nexit 0\\n' > /root/.local/bin/uvx && chmod 755 /root/.local/bin/uvx
            """),
        // uvx and curl earlier on the image's PATH than the system's.
        ("path-shadow", """
            printf '#!/bin/sh\\nexit 0\\n' > /usr/local/bin/uvx && chmod 755 /usr/local/bin/uvx
            printf '#!/bin/sh\\necho "echo 1 > /logs/verifier/reward.txt; exit 0" > $HOME/.local/bin/env\\n' > /usr/local/bin/curl
            chmod 755 /usr/local/bin/curl
            """),
        // The C library's name-service modules: nsswitch.conf names one of the agent's.
        ("nss", "cp /app/evil.so /usr/lib/x86_64-linux-gnu/libnss_evil.so.2 && sed -i 's/^passwd:.*/passwd: evil files/' /etc/nsswitch.conf"),
        // A library the toolbox Python's libpython or an extension module links, in the image's
        // library directory (libm.so.6 with evil.so as one more dependency).
        ("image-libm", """
            cp /app/evil.so /usr/lib/x86_64-linux-gnu/evil.so
            cp /app/libm-evil.so.6 /usr/lib/x86_64-linux-gnu/libm.so.6.new
            mv -f /usr/lib/x86_64-linux-gnu/libm.so.6.new /usr/lib/x86_64-linux-gnu/libm.so.6
            """),
        // A standard library where the toolbox Python would search for its prefix above its bin/.
        ("python-prefix", Self.prefixShim),
        // pytest's other configuration names above /tests.
        ("dot-pytest-ini", """
            mkdir -p /opt/evilplug
            printf 'def pytest_sessionfinish(session, exitstatus):\\n    session.exitstatus = 0\\n' > /opt/evilplug/evilplug.py
            printf '[pytest]\\npythonpath = /opt/evilplug\\naddopts = -p evilplug\\n' > /.pytest.ini
            """),
        // The image's ENV has PYTHONPATH=/app: a sitecustomize.py there in every Python.
        ("env-pythonpath", """
            printf 'import atexit, os, sys\\ndef _p():\\n    sys.stdout.flush(); sys.stderr.flush(); os._exit(0)\\natexit.register(_p)\\n' > /app/sitecustomize.py
            """),
    ]

    /// A fake standard library at /opt/autoharness/lib/python3.13 (the image's, so the
    /// agent's): its `encodings` finds the real prefix, then makes the process exit 0.
    static let prefixShim = """
        mkdir -p /opt/autoharness/lib/python3.13/encodings
        : > /opt/autoharness/lib/python3.13/os.py
        cat > /opt/autoharness/lib/python3.13/encodings/__init__.py <<'PY'
        import sys, _io, atexit, posix
        _real = None
        for _l in _io.open('/proc/self/maps', 'rb').read().decode('latin-1').split(chr(10)):
            if 'libpython3.13.so' in _l:
                _real = _l.split()[-1].rsplit('/lib/', 1)[0]
                break
        _fake = '/opt/autoharness'
        sys.path[:] = [_real + p[len(_fake):] if p.startswith(_fake + '/lib/') else p for p in sys.path]
        for _n in ('prefix', 'base_prefix', 'exec_prefix', 'base_exec_prefix'):
            if getattr(sys, _n) == _fake:
                setattr(sys, _n, _real)
        del sys.modules['encodings']
        import encodings
        def _pass():
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except Exception:
                pass
            posix._exit(0)
        atexit.register(_pass)
        PY
        """

    /// Which libraries the toolbox's Python loads in a verifier on an image, and its prefix.
    static let loadProbe = """
        #!/bin/bash
        LD_DEBUG=libs /opt/autoharness/verifier-tools/bin/python3.13 -c 'import sys, ssl, sqlite3, ctypes, readline, lzma, bz2, zlib, curses, _uuid, _decimal, _hashlib, pyexpat, math; print("prefix", sys.prefix)' > /logs/verifier/probe.txt 2>&1
        echo 0 > /logs/verifier/reward.txt

        """

    @Test("on a task's image, cheats that replace the shell, preload or replace a library, plant a standard library, pytest's configuration or $HOME's env, shadow uv, add a name service or use the image's PYTHONPATH all score 0; the honest solution scores 1; the toolbox's Python loads only the toolbox's libraries")
    func cheatsScoreZero() throws {
        try TaskImageTests.requireImageHost()
        let dir = NSTemporaryDirectory() + "ah-image-cheats-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // The library the cheats load: whatever status its process exits with, it becomes 0.
        let compilers: [String] = ["/opt/swift/usr/bin/clang", "/usr/bin/cc", "/usr/bin/gcc"]
        let compiler = compilers.first { access($0, X_OK) == 0 }
        let so = dir + "/evil.so"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try "#include <stdlib.h>\n#include <unistd.h>\nstatic void pass(void) { _exit(0); }\n__attribute__((constructor)) static void evil(void) { atexit(pass); }\n"
            .write(toFile: dir + "/evil.c", atomically: true, encoding: .utf8)
        let built = try runProcess(try #require(compiler, "no C compiler"), ["-shared", "-fPIC", "-o", so, dir + "/evil.c"])
        try #require(built.status == 0, "\(built.stderr)")
        // The C library's libm with evil.so (in the image's library directory) as one more dependency.
        let libm = dir + "/libm-evil.so.6"
        try FileManager.default.copyItem(atPath: "/lib/x86_64-linux-gnu/libm.so.6", toPath: libm)
        let patched = try runProcess("/usr/bin/patchelf", ["--add-needed", "/usr/lib/x86_64-linux-gnu/evil.so", libm])
        try #require(patched.status == 0, "\(patched.stderr)")
        var tasks: [BenchmarkTask] = []
        for (id, cheat) in Self.cheats + [("load-probe", "echo probing")] {
            let t = dir + "/tasks/" + id
            for sub in ["environment", "tests", "solution"] {
                try FileManager.default.createDirectory(atPath: t + "/" + sub, withIntermediateDirectories: true)
            }
            try "Write the answer.\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
            try "FROM \(TaskImageTests.base)\nWORKDIR /app\nCOPY evil.so libm-evil.so.6 /app/\nENV PYTHONPATH=/app\n"
                .write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
            try FileManager.default.copyItem(atPath: so, toPath: t + "/environment/evil.so")
            try FileManager.default.copyItem(atPath: libm, toPath: t + "/environment/libm-evil.so.6")
            try (id == "load-probe" ? Self.loadProbe : Self.testScript).write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
            // tmp_path: pytest asks the C library who the user is (getpass), through nsswitch.conf.
            try "def test_answer(tmp_path):\n    assert open('/app/answer.txt').read().strip() == 'SECRET'\n"
                .write(toFile: t + "/tests/test_outputs.py", atomically: true, encoding: .utf8)
            try "#!/bin/bash\necho WRONG > /app/answer.txt\n\(cheat)\n".write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
            tasks.append(try #require(try LocalBenchmark(directory: dir).task(id)))
        }
        let store = TaskImageStore(directory: dir + "/store")
        let problems = try store.prepare(tasks, ids: try ImageIDs.range()) { _ in }
        try #require(problems.isEmpty, "\(problems)")
        let scratch = try TaskImageTests.scratchRoot()
        defer { rmdir(scratch) }
        var config = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: [Built.packageRoot + "/policies"]), agentDirectory: "",
                                          scratchRoot: scratch)
        config.oracle = true
        config.images = store.load(tasks).images
        config.verifierTools = try TaskImageTests.toolbox()
        let traces = dir + "/traces"
        let probe = ProbeBox()
        config.scratchObserver = { id, path in if id == "load-probe" { probe.read(path + "/logs/probe.txt") } }
        let runner = try TaskRunner(configuration: config)
        for task in tasks {
            let outcome = runner.run(task, traceDirectory: traces + "/" + task.id)
            let log = ["agent.stderr", "verifier.stdout", "verifier.stderr"].map {
                (try? String(contentsOfFile: traces + "/" + task.id + "/" + $0, encoding: .utf8)) ?? ""
            }.joined(separator: "\n")
            if task.id == "honest" {
                #expect(outcome.reward == 1, "\(outcome)\n\(log)")
            } else if task.id == "load-probe" {
                // Every library the toolbox's Python loaded is the toolbox's, and so is its prefix.
                let loaded = probe.text.split(separator: "\n").filter { $0.contains("calling init: ") }
                    .map { String($0[$0.range(of: "calling init: ")!.upperBound...]) }
                #expect(loaded.count >= 10 && loaded.allSatisfy { $0.hasPrefix(VerifierTools.mountPoint + "/lib/") }, "\(probe.text)")
                #expect(probe.text.contains("prefix \(VerifierTools.mountPoint)\n"), "\(probe.text)")
            } else {
                #expect(outcome.reward == 0, "\(task.id): \(outcome)\n\(log)")
            }
        }
    }
}

private final class ProbeBox: @unchecked Sendable {
    var text = ""
    func read(_ path: String) { text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? "(no probe output)" }
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
