import Foundation
import Sandbox
import SandboxPolicy
import Testing
import TestSupport

@testable import Benchmark

/// What the verifier needs is provided, not fetched: Terminal-Bench 2.0's test
/// script, as its tasks ship it, runs offline on the verifier tools that
/// scripts/install-verifier-tools installs (uv 0.9.5, a Python 3.13, pytest 8.4.1 and
/// pytest-json-ctrf 0.3.5 wheels, curl and apt-get shims), and uv takes nothing agent.py left
/// in /app.
@Suite("The verifier tools: Terminal-Bench 2.0's test script runs offline, on nothing agent.py chose")
struct VerifierToolsTests {
    /// The test.sh of a Terminal-Bench 2.0 task, as the dataset has it (e.g.
    /// terminal-bench-2 `*/tests/test.sh`): apt-get, uv's installer through curl and sh, its
    /// env file, uvx on pinned pytest wheels, the reward from pytest's exit.
    static let tb2TestScript = """
        #!/bin/bash

        # Install curl
        apt-get update
        apt-get install -y curl

        # Install uv
        curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh

        source $HOME/.local/bin/env

        # Check if we're in a valid working directory
        if [ "$PWD" = "/" ]; then
            echo "Error: No working directory set. Please set a WORKDIR in your Dockerfile before running this script."
            exit 1
        fi

        uvx \\
          -p 3.13 \\
          -w pytest==8.4.1 \\
          -w pytest-json-ctrf==0.3.5 \\
          pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA


        if [ $? -eq 0 ]; then
          echo 1 > /logs/verifier/reward.txt
        else
          echo 0 > /logs/verifier/reward.txt
        fi

        """

    static let testOutputs = """
        from pathlib import Path


        def test_answer_exists():
            assert Path("/app/answer.txt").exists()


        def test_answer_is_right():
            assert Path("/app/answer.txt").read_text().strip() == "forty-two"

        """

    /// The installed toolbox; a test without it fails (scripts/test installs it).
    static func toolbox() throws -> VerifierTools {
        let r = try runProcess("/bin/bash", [Paths.packageRoot + "/scripts/install-verifier-tools", "--print"])
        let dir = r.stdout.split(separator: " ").last.map { String($0).trimmingCharacters(in: .whitespacesAndNewlines) }
        let path = try #require(r.status == 0 ? dir : nil, "the verifier tools are not installed: run scripts/install-verifier-tools (\(r.stderr))")
        return try VerifierTools(directory: path)
    }

    /// A benchmark whose tasks answer with the instruction's word; `script` is every task's test.sh.
    static func benchmark(_ dir: TempDir, script: String, tasks: [String: String]) throws -> LocalBenchmark {
        for (id, word) in tasks {
            try dir.file("tasks/\(id)/instruction.md", "Write the answer to /app/answer.txt.\nanswer: \(word)\n")
            try dir.file("tasks/\(id)/task.toml", "[verifier]\ntimeout_sec = 120.0\n")
            try dir.file("tasks/\(id)/tests/test.sh", script, mode: 0o755)
            try dir.file("tasks/\(id)/tests/test_outputs.py", testOutputs)
        }
        return try LocalBenchmark(directory: dir.path)
    }

    /// agent.py: writes the word its instruction names, then runs `extra` (Python).
    static func agent(extra: String = "") -> String {
        """
        import os, zipfile

        class HarnessAgent:
            def run(self, instruction, workdir):
                word = instruction.split("answer: ")[1].strip()
                open(os.path.join(workdir, "answer.txt"), "w").write(word + "\\n")
        \(extra.split(separator: "\n", omittingEmptySubsequences: false).map { $0.isEmpty ? "" : "        " + $0 }.joined(separator: "\n"))

        """
    }

    @Test("Terminal-Bench 2.0's test script, offline: the right answer scores 1, a wrong one 0 with pytest's failing test; without the tools both score 0")
    func tb2ScriptRunsOffline() throws {
        try requireRoot()
        let tools = try Self.toolbox()
        let dir = try TempDir()
        let bench = try Self.benchmark(dir, script: Self.tb2TestScript, tasks: ["right": "forty-two", "wrong": "forty-one"])
        let traces = try TempDir()
        let h = try Harness(agent: Self.agent(), configure: {
            $0.verifierTools = tools
            $0.collectFailures = true
        })
        let right = h.run(try #require(bench.task("right")), trace: traces.path + "/right")
        #expect(right.status == .passed && right.reward == 1, "\(right.status) \(right.detail ?? "")\n\(read(traces.path + "/right/verifier.stdout") ?? "")\(read(traces.path + "/right/verifier.stderr") ?? "")")
        let stdout = read(traces.path + "/right/verifier.stdout") ?? ""
        // The judge is the pinned pytest on the toolbox's Python, installed by uv's stand-in installer.
        #expect(stdout.contains("Python 3.13") && stdout.contains("pytest-8.4.1") && stdout.contains("json-ctrf-0.3.5"), "\(stdout)")
        #expect(stdout.contains("installing to /tmp/.local/bin"), "\(stdout)")
        #expect((read(traces.path + "/right/verifier.stderr") ?? "").contains("apt-get install curl: already provided"))

        let wrong = h.run(try #require(bench.task("wrong")), trace: traces.path + "/wrong")
        #expect(wrong.status == .failed && wrong.reward == 0, "\(wrong.status) \(wrong.detail ?? "")")
        // pytest-json-ctrf's report names the failing test: the failure record a coding agent reads.
        #expect(wrong.failures?.map(\.check) == ["test_outputs.py::test_answer_is_right"], "\(String(describing: wrong.failures))")

        // Without the tools the same script has no uv to run (no network): 0 for the right answer.
        let bare = try Harness(agent: Self.agent())
        let offline = bare.run(try #require(bench.task("right")), trace: traces.path + "/bare")
        #expect(offline.reward == 0, "\(offline.status) \(offline.detail ?? "")")
        let said = (read(traces.path + "/bare/verifier.stdout") ?? "") + (read(traces.path + "/bare/verifier.stderr") ?? "")
        #expect(said.contains("uvx: command not found"), "\(said)")
    }

    /// A test that runs uv from /app (`cd /app && uv run ... pytest`): uv would read the
    /// uv.toml agent.py left there, whose index is agent.py's wheels, so its own "pytest".
    /// (uvx reads no configuration from the working directory: checked by hand, uv 0.9.5.)
    static let uvRunFromApp = """
        #!/bin/bash
        curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh
        source $HOME/.local/bin/env
        cd /app
        uv run -p 3.13 --with pytest==8.4.1 --with pytest-json-ctrf==0.3.5 pytest /tests/test_outputs.py -rA
        if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

        """

    /// agent.py's side: a pytest 8.4.1 wheel whose pytest passes everything, and the uv.toml
    /// and pyproject.toml that make /app/wheels uv's only index.
    static let plantIndex = plantedUvIndex(marker: "PLANTED PYTEST") + "print(\"planted an index in /app\")\n"

    @Test("uv run from /app takes no index, wheels or settings from a uv.toml agent.py left there (UV_NO_CONFIG); against a verifier without it, the planted pytest passes the task")
    func uvReadsNoConfigFromApp() throws {
        try requireRoot()
        let tools = try Self.toolbox()
        let dir = try TempDir()
        let bench = try Self.benchmark(dir, script: Self.uvRunFromApp, tasks: ["wrong": "forty-one"])
        let task = try #require(bench.task("wrong"))
        let traces = try TempDir()
        let shipped = try Harness(agent: Self.agent(extra: Self.plantIndex), configure: { $0.verifierTools = tools })
        let outcome = shipped.run(task, trace: traces.path + "/shipped")
        let out = read(traces.path + "/shipped/verifier.stdout") ?? ""
        #expect((read(traces.path + "/shipped/agent.stdout") ?? "").contains("planted an index in /app"))
        #expect(outcome.status == .failed && outcome.reward == 0, "\(outcome.status) \(outcome.detail ?? "")\n\(out)")
        #expect(out.contains("pytest-8.4.1") && !out.contains("PLANTED PYTEST"), "\(out)")

        // The control: the same verifier with uv's configuration files read again.
        let weak = try TempDir()
        try weak.file("uv-config-verifier.yaml", """
            extends: verifier
            description: "the verifier with uv reading configuration files (test control only)"
            env:
              set:
                UV_NO_CONFIG: "0"
            """)
        let control = try Harness(agent: Self.agent(extra: Self.plantIndex), configure: {
            $0.verifierTools = tools
            $0.policyLoader = PolicyLoader(searchPaths: [weak.path, Paths.policies])
            $0.verifierPolicy = "uv-config-verifier"
        })
        let fooled = control.run(task, trace: traces.path + "/control")
        #expect(fooled.reward == 1, "the planted index was not used even without UV_NO_CONFIG, so this test proves nothing: \(fooled.status) \(read(traces.path + "/control/verifier.stdout") ?? "")\(read(traces.path + "/control/verifier.stderr") ?? "")")
        #expect((read(traces.path + "/control/verifier.stdout") ?? "").contains("PLANTED PYTEST"))
    }

    /// agent.py's /app/.venv: a python3 that is the toolbox's 3.13 (after whatever agent code
    /// it would run first), so uv would take it as a Python 3.13 environment.
    static let plantVenv = #"""
        os.makedirs("/app/.venv/bin", exist_ok=True)
        open("/app/.venv/pyvenv.cfg", "w").write("home = /usr/bin\nversion_info = 3.13.0\n")
        for name in ["python", "python3", "python3.13"]:
            p = "/app/.venv/bin/" + name
            open(p, "w").write("#!/bin/sh\nexec /opt/autoharness/verifier-tools/bin/python3.13 \"$@\"\n")
            os.chmod(p, 0o755)
        print("planted a venv in /app")
        """#

    @Test("uv run from /app never runs the interpreter of a /app/.venv agent.py left (the tools' empty environment is VIRTUAL_ENV); without it uv runs it, and the flag shows that")
    func uvRunIgnoresAppVenv() throws {
        try requireRoot()
        let tools = try Self.toolbox()
        #expect(tools.hasVirtualEnvironment)
        let dir = try TempDir()
        let task = try #require(try Self.benchmark(dir, script: Self.uvRunFromApp, tasks: ["wrong": "forty-one"]).task("wrong"))
        let traces = try TempDir()
        let shipped = try Harness(agent: Self.agent(extra: Self.plantVenv), configure: { $0.verifierTools = tools })
        let outcome = shipped.run(task, trace: traces.path + "/shipped")
        let said = (read(traces.path + "/shipped/verifier.stdout") ?? "") + (read(traces.path + "/shipped/verifier.stderr") ?? "")
        #expect((read(traces.path + "/shipped/agent.stdout") ?? "").contains("planted a venv in /app"))
        #expect(outcome.status == .failed && said.contains("pytest-8.4.1"), "\(outcome.status)\n\(said)")
        #expect(!(outcome.verifierRanAgentCode ?? []).contains { $0.contains("/app/.venv") }, "\(outcome.verifierRanAgentCode ?? [])")

        // The control: a copy of the same tools without their environment.
        let bare = try TempDir()
        for name in ["bin", "lib", "share", "etc", "home", "wheels"] {
            let r = try runProcess("/bin/cp", ["-a", tools.directory + "/" + name, bare.path + "/"])
            try #require(r.status == 0, "\(r.stderr)")
        }
        let noVenv = try VerifierTools(directory: bare.path)
        #expect(!noVenv.hasVirtualEnvironment)
        let control = try Harness(agent: Self.agent(extra: Self.plantVenv), configure: { $0.verifierTools = noVenv })
        let ran = control.run(task, trace: traces.path + "/control")
        // uv runs the interpreter to ask what it is (its output is uv's, not the log's): the flag sees the run.
        #expect((ran.verifierRanAgentCode ?? []).contains { $0.hasPrefix("executed /app/.venv/bin/python") },
                "uv did not run the planted interpreter even without VIRTUAL_ENV, so this test proves nothing: \(ran.verifierRanAgentCode ?? [])")
    }

    @Test("the shims: apt-get installs nothing and names what it cannot provide; curl hands out uv's installer alone and passes other URLs to the host's curl")
    func shims() throws {
        let tools = try Self.toolbox()
        let bin = tools.directory + "/bin/"
        // Their interpreter is the toolbox's static shell at the mount point, which only
        // sandboxes have: on this host it is named.
        func shim(_ name: String, _ args: [String]) throws -> Run { try runProcess(bin + "bash", [bin + name] + args) }
        let update = try shim("apt-get", ["update"])
        #expect(update.status == 0)
        let install = try shim("apt-get", ["install", "-y", "--no-install-recommends", "bash", "no-such-package-xyz"])
        #expect(install.status == 100 && install.stderr.contains("Unable to locate package no-such-package-xyz"), "\(install.stderr)")
        #expect(!install.stderr.contains("bash (the verifier"), "\(install.stderr)")
        let options = try shim("apt-get", ["-o", "Dpkg::Options::=--force-confdef", "install", "-y", "bash"])
        #expect(options.status == 0, "\(options.stderr)")
        #expect(try String(contentsOfFile: bin + "apt-get", encoding: .utf8).hasPrefix("#!" + VerifierTools.mountPoint + "/bin/bash\n"))
        // curl answers uv's installer from the toolbox at its mount point: run where it is mounted.
        func sandboxed(_ script: String, writable: String) throws -> Run {
            try runProcess(Built.autoharness, ["sandbox", "exec", "--policy-dir", Paths.policies, "--policy", "base",
                                               "--ro", tools.directory + ":" + VerifierTools.mountPoint, "--rw", writable + ":/out",
                                               "--ro", tools.directory + "/etc/nsswitch.conf:/etc/nsswitch.conf",
                                               "--env", "PATH=" + VerifierTools.mountPoint + "/bin:/usr/bin:/bin",
                                               "--", VerifierTools.mountPoint + "/bin/bash", "-c", script])
        }
        let out = try TempDir()
        chown(out.path, 65534, 65534)
        let installer = try sandboxed("curl -LsSf https://astral.sh/uv/0.9.5/install.sh", writable: out.path)
        #expect(installer.status == 0 && installer.stdout.contains(VerifierTools.mountPoint) && !installer.stdout.contains("@TOOLS@"),
                "\(installer.stdout)\(installer.stderr)")
        let saved = try sandboxed("curl -sSf https://astral.sh/uv/install.sh -o /out/i.sh", writable: out.path)
        #expect(saved.status == 0 && (read(out.path + "/i.sh") ?? "").contains("everything's installed"), "\(saved.stderr)")
        // Anything else is the host's curl's business (here: a file URL it reads).
        try out.file("data.txt", "plain\n")
        let other = try shim("curl", ["-s", "file://" + out.path + "/data.txt"])
        #expect(other.status == 0 && other.stdout == "plain\n", "\(other.stdout)\(other.stderr)")
    }

    @Test("a toolbox that is not installed, whose Python is not its own, or whose programs a sandbox could read, is refused naming what is missing and the install script")
    func toolboxChecked() throws {
        #expect(throws: BenchmarkError.self) { try VerifierTools(directory: "relative/tools") }
        let dir = try TempDir()
        do {
            _ = try VerifierTools(directory: dir.path)
            Issue.record("an empty directory was taken as a toolbox")
        } catch {
            #expect(error.message.contains("\(dir.path)/bin/uv") && error.message.contains("scripts/install-verifier-tools"), "\(error.message)")
        }
        let tools = try Self.toolbox()
        // A copy of the real toolbox (links to its files) whose Python is not its own.
        for name in ["bin", "share", "wheels", "etc", "home"] { try FileManager.default.createSymbolicLink(atPath: dir.path + "/" + name, withDestinationPath: tools.directory + "/" + name) }
        do {
            _ = try VerifierTools(directory: dir.path)
            Issue.record("a toolbox without its own standard library was taken")
        } catch {
            #expect(error.message.contains("holds no Python of its own") && error.message.contains("scripts/install-verifier-tools"), "\(error.message)")
        }
        try FileManager.default.createSymbolicLink(atPath: dir.path + "/lib", withDestinationPath: tools.directory + "/lib")
        let copy = try VerifierTools(directory: dir.path)
        #expect(copy.mounts(home: "/tmp").first?.destination == VerifierTools.mountPoint)

        // A shell a sandbox can read: its processes would be dumpable (agent code a test
        // starts could write into the test script's memory). Refused, naming the file.
        let readable = try TempDir()
        for name in ["share", "wheels", "etc", "home", "lib"] { try FileManager.default.createSymbolicLink(atPath: readable.path + "/" + name, withDestinationPath: tools.directory + "/" + name) }
        try #require(try runProcess("/bin/cp", ["-a", tools.directory + "/bin", readable.path + "/bin"]).status == 0)
        #expect(chmod(readable.path + "/bin/bash", 0o755) == 0)
        do {
            _ = try VerifierTools(directory: readable.path)
            Issue.record("a toolbox whose shell a sandbox can read was taken")
        } catch {
            #expect(error.message.contains("\(readable.path)/bin/bash must be root's and mode 0711"), "\(error.message)")
        }
    }
}

/// The report's flag on tasks whose verifier ran agent code (`AgentCodeRuns`): what a test
/// executes or imports from /app is listed with the program that did it; what it reads as
/// data, and what git reads, is not.
@Suite("Verifiers that ran agent code are flagged")
struct AgentCodeRunsTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var id: String
        /// test.sh's check (exit 0 → reward 1).
        var test: String
        /// What the flag must list (substrings), or empty: no flag.
        var flagged: [String]
        var testDescription: String { id }
    }

    static let cases: [Case] = [
        .init(id: "imports-solution", test: "python3 -c 'import sys; sys.path.insert(0, \"/app\"); import solution; sys.exit(0 if solution.answer() == 42 else 1)'",
              flagged: ["opened /app/solution.py (python3"]),
        // Agent code that covers its tracks as it runs (a review's evasions of a watch that
        // read the path and the program after the open): each open is held until both are read.
        .init(id: "renames-itself", test: "python3 -c 'import sys; sys.path.insert(0, \"/app\"); import hiding'",
              flagged: ["opened /app/hiding.py (python3"]),
        .init(id: "execs-git", test: "python3 -c 'import sys; sys.path.insert(0, \"/app\"); import becomes_git'; true",
              flagged: ["opened /app/becomes_git.py (python3"]),
        .init(id: "runs-program", test: "/app/prog", flagged: ["executed /app/prog (bash)"]),
        .init(id: "sources-script", test: "source /app/env.sh && test \"$ANSWER\" = 42", flagged: ["opened /app/env.sh (bash)"]),
        .init(id: "compiles-c", test: "gcc -o /tmp/sol /app/solution.c && /tmp/sol", flagged: ["opened /app/solution.c (cc1)"]),
        .init(id: "runs-make", test: "make -s -C /app answer", flagged: ["opened /app/Makefile (make)"]),
        .init(id: "loads-through-ld-so", test: "{ /lib64/ld-linux-x86-64.so.2 /app/prog || true; } && test \"$(cat /app/answer.txt)\" = 42",
              flagged: ["opened /app/prog (ld-linux-x86-64.so.2)"]),
        .init(id: "unpickles", test: "python3 -c 'import pickle; pickle.load(open(\"/app/model.pkl\", \"rb\"))'", flagged: ["opened /app/model.pkl (python3"]),
        // A checkpoint is a pickle by another name (torch.load), compressed ones too.
        .init(id: "loads-checkpoint", test: "python3 -c 'import gzip, pickle; pickle.load(open(\"/app/model.pt\", \"rb\")); pickle.load(gzip.open(\"/app/m.pkl.gz\"))'",
              flagged: ["opened /app/model.pt (python3", "opened /app/m.pkl.gz (python3"]),
        .init(id: "long-path", test: "python3 /app/\(String(repeating: "d", count: 200))/\(String(repeating: "e", count: 200))/\(String(repeating: "f", count: 200))/\(String(repeating: "g", count: 200))/\(String(repeating: "h", count: 200))/\(String(repeating: "i", count: 200))/deep.py",
              flagged: ["opened /app/dddd"]),
        // Whatever its name: a file a shell runs, a script handed to sed or awk with -f.
        .init(id: "bash-runs-file", test: "bash /app/run", flagged: ["opened /app/run (bash)"]),
        .init(id: "python-runs-file", test: "python3 /app/runpy", flagged: ["opened /app/runpy (python3"]),
        .init(id: "sed-script", test: "sed -f /app/fix.sed /app/answer.txt >/dev/null", flagged: ["opened /app/fix.sed (sed)"]),
        .init(id: "awk-script", test: "awk -f /app/calc /app/answer.txt >/dev/null", flagged: ["opened /app/calc ("]),
        // A copy run from the verifier's /tmp, which is on the watched file system: its bytes
        // are agent.py's program's. A program of the test's own there is not flagged.
        .init(id: "copy-then-exec", test: "cp /app/prog /tmp/p && /tmp/p", flagged: ["executed /tmp/p (bash), a copy of /app/prog"]),
        .init(id: "copy-in-logs", test: "cp /app/prog /logs/verifier/p && /logs/verifier/p && rm -f /logs/verifier/p",
              flagged: ["executed /logs/verifier/p (bash), a copy of /app/prog"]),
        .init(id: "copy-then-import", test: "cp /app/solution.py /tmp/s.py && python3 /tmp/s.py", flagged: ["opened /tmp/s.py (python3", "a copy of /app/solution.py"]),
        .init(id: "own-program-in-tmp", test: "printf '#!/bin/bash\\nexit 0 # the test\\x27s own\\n' > /tmp/h && chmod +x /tmp/h && /tmp/h && cp /app/answer.txt /tmp/a && test \"$(cat /tmp/a)\" = 42",
              flagged: []),
        .init(id: "sed-reads-data", test: "test \"$(sed -n 1p /app/answer.txt)\" = 42", flagged: []),
        .init(id: "reads-data", test: "test \"$(cat /app/answer.txt)\" = 42", flagged: []),
        .init(id: "git-reads-code", test: "git -C /app add -A && test \"$(cat /app/answer.txt)\" = 42", flagged: []),
        .init(id: "checksums-code", test: "sha256sum /app/solution.py >/dev/null && grep -q def /app/solution.py", flagged: []),
    ]

    static let agent = """
        import os, pickle, subprocess

        class HarnessAgent:
            def run(self, instruction, workdir):
                open("/app/answer.txt", "w").write("42\\n")
                open("/app/solution.py", "w").write("def answer():\\n    return 42\\n")
                open("/app/hiding.py", "w").write("import os\\nos.rename('/app/hiding.py', '/app/notes.txt')\\n")
                open("/app/becomes_git.py", "w").write("import os\\nos.execv('/usr/bin/git', ['git', '--version'])\\n")
                open("/app/env.sh", "w").write("ANSWER=42\\n")
                open("/app/run", "w").write("exit 0\\n")
                open("/app/runpy", "w").write("pass\\n")
                open("/app/fix.sed", "w").write("s/4/4/\\n")
                open("/app/calc", "w").write("{ print }\\n")
                open("/app/prog", "w").write("#!/bin/bash\\nexit 0\\n")
                os.chmod("/app/prog", 0o755)
                open("/app/solution.c", "w").write("int main(void) { return 0; }\\n")
                open("/app/Makefile", "w").write("answer:\\n\\t@true\\n")
                pickle.dump({"answer": 42}, open("/app/model.pkl", "wb"))
                pickle.dump({"answer": 42}, open("/app/model.pt", "wb"))
                import gzip
                pickle.dump({"answer": 42}, gzip.open("/app/m.pkl.gz", "wb"))
                deep = "/app/" + "/".join(c * 200 for c in "defghi")
                os.makedirs(deep)
                open(deep + "/deep.py", "w").write("pass\\n")
                subprocess.run(["git", "init", "-q", "/app"], check=True)
        """

    @Test("on this kernel the watch holds each open until it is read (fanotify permission events), and allows it")
    func opensAreHeld() throws {
        try requireRoot()
        let scratch = try makeScratchRoot()
        // A tmpfs of its own, as a task's scratch is.
        let dir = scratch.path + "/fs"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        #expect(mount("tmpfs", dir, "tmpfs", 0, "size=1m") == 0)
        defer { umount2(dir, Int32(MNT_DETACH)) }
        try "print(1)\n".write(toFile: dir + "/x.py", atomically: false, encoding: .utf8)
        let watch = try OpenWatch(directory: dir) { _, _ in true }
        // Opened and renamed at once by the same process: the name seen is the one it was opened by.
        let r = try runProcess("/usr/bin/python3", ["-c", "import os; open('\(dir)/x.py').read(); os.rename('\(dir)/x.py', '\(dir)/y.txt')"])
        let seen = watch.stop()
        #expect(r.status == 0, "\(r.stderr)")
        #expect(seen.blocking, "this kernel has no fanotify permission events: the flag would be read after the fact")
        #expect(seen.opens.contains { $0.path == dir + "/x.py" && $0.exe.hasPrefix("python3") }, "\(seen.opens)")
    }

    @Test("comparing a copy, the supervisor reopens agent.py's files through no link the verifier made since: a link to a host directory holding the same bytes is not followed")
    func copiesComparedBeneathTheTree() throws {
        try requireRoot()
        let host = try TempDir(mode: 0o755)
        try host.file("x", "#!/bin/bash\n#BBBB\nexit 0\n", mode: 0o755)
        let dir = try TempDir()
        try dir.file("tasks/deputy/instruction.md", "Answer 42.\n")
        // The index is made at the first copy run (/tmp/p); then /app/d, a directory when it was
        // indexed, becomes a link to the host's directory, whose x has /tmp/q's bytes.
        try dir.file("tasks/deputy/tests/test.sh", """
            #!/bin/bash
            cp /app/prog /tmp/p && /tmp/p && rm -rf /app/d && ln -s \(host.path) /app/d && printf '#!/bin/bash\\n#BBBB\\nexit 0\\n' > /tmp/q \
              && chmod +x /tmp/q && /tmp/q && echo 1 > /logs/verifier/reward.txt
            """, mode: 0o755)
        let bench = try LocalBenchmark(directory: dir.path)
        let h = try Harness(agent: """
            import os
            class HarnessAgent:
                def run(self, instruction, workdir):
                    open("/app/prog", "w").write("#!/bin/bash\\nexit 0\\n")
                    os.chmod("/app/prog", 0o755)
                    os.makedirs("/app/d")
                    open("/app/d/x", "w").write("#!/bin/bash\\n#AAAA\\nexit 0\\n")
            """)
        let outcome = h.run(try #require(bench.task("deputy")))
        #expect(outcome.status == .passed, "\(outcome.status) \(outcome.detail ?? "")")
        let lines = outcome.verifierRanAgentCode ?? []
        #expect(lines.contains { $0.hasPrefix("executed /tmp/p (bash), a copy of /app/prog") }, "\(lines)")
        #expect(!lines.contains { $0.contains("/tmp/q") }, "the supervisor followed the verifier's link to the host: \(lines)")
    }

    @Test("the verifier's /tmp is a file system of its own: agent.py filling the task's (every inode) does not fail the test's writes there")
    func verifierTmpNotStarved() throws {
        try requireRoot()
        let dir = try TempDir()
        try dir.file("tasks/full/instruction.md", "Answer 42.\n")
        // Passes only when the task's file system is full (the attack ran) and /tmp still takes a write.
        try dir.file("tasks/full/tests/test.sh", """
            #!/bin/bash
            if ! touch /app/probe 2>/dev/null && echo 42 > /tmp/expected && test "$(cat /tmp/expected)" = 42; then
              echo 1 > /logs/verifier/reward.txt
            else
              echo 0 > /logs/verifier/reward.txt
            fi
            """, mode: 0o755)
        let bench = try LocalBenchmark(directory: dir.path)
        let h = try Harness(agent: """
            import os
            class HarnessAgent:
                def run(self, instruction, workdir):
                    os.makedirs("/app/fill")
                    i = 0
                    try:
                        while True:
                            open("/app/fill/%d" % i, "w").close()
                            i += 1
                    except OSError:
                        pass
            """)
        let outcome = h.run(try #require(bench.task("full")))
        #expect(outcome.status == .passed, "\(outcome.status) \(outcome.detail ?? "")")
    }

    @Test("a verifier that times out while running agent code is recorded against agent.py too; one that times out on its own is not")
    func timeoutBlamed() throws {
        try requireRoot()
        let dir = try TempDir()
        for (id, test) in [("spins", "python3 /app/spin.py"), ("own", "sleep 30")] {
            try dir.file("tasks/\(id)/instruction.md", "Answer 42.\n")
            try dir.file("tasks/\(id)/task.toml", "[verifier]\ntimeout_sec = 3.0\n")
            try dir.file("tasks/\(id)/tests/test.sh", "#!/bin/bash\n\(test)\necho 1 > /logs/verifier/reward.txt\n", mode: 0o755)
        }
        let bench = try LocalBenchmark(directory: dir.path)
        let audit = AuditLog()
        let h = try Harness(agent: """
            class HarnessAgent:
                def run(self, instruction, workdir):
                    open("/app/spin.py", "w").write("while True:\\n    pass\\n")
            """, configure: {
                $0.audit = audit
                $0.verifierAudit = AuditLog()  // the verifier's own events (its timeout) go there
            })
        let spins = h.run(try #require(bench.task("spins")))
        #expect(spins.status == .verifierTimeout, "\(spins.status) \(spins.detail ?? "")")
        #expect(audit.events.contains { $0.kind == .timeout && $0.name == "verifier" && ($0.detail ?? "").contains("/app/spin.py") }, "\(audit.events)")
        let before = audit.events.count
        let own = h.run(try #require(bench.task("own")))
        #expect(own.status == .verifierTimeout, "\(own.status)")
        #expect(audit.events.count == before, "\(audit.events)")
    }

    @Test("the flag lists what the verifier executed or imported from /app, with the program; data reads and git's reads are not flagged", arguments: cases)
    func flagged(_ c: Case) throws {
        try requireRoot()
        let dir = try TempDir()
        try dir.file("tasks/\(c.id)/instruction.md", "Answer 42.\n")
        try dir.file("tasks/\(c.id)/tests/test.sh", "#!/bin/bash\nif \(c.test); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n", mode: 0o755)
        let bench = try LocalBenchmark(directory: dir.path)
        let h = try Harness(agent: Self.agent)
        let outcome = h.run(try #require(bench.task(c.id)))
        // Each task passes: the flag is about how, not whether.
        #expect(outcome.status == .passed, "\(c.id): \(outcome.status) \(outcome.detail ?? "")")
        let lines = outcome.verifierRanAgentCode ?? []
        if c.flagged.isEmpty {
            #expect(lines.isEmpty, "\(c.id): \(lines)")
        } else {
            for want in c.flagged { #expect(lines.contains { $0.hasPrefix(want) || (!want.hasPrefix("opened") && !want.hasPrefix("executed") && $0.contains(want)) }, "\(c.id): \(lines)") }
        }
    }
}
