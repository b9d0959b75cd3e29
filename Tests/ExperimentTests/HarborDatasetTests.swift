@testable import Benchmark
@testable import ExperimentModel
import Foundation
import Testing
import TestSupport

/// terminal-bench datasets in each form Harbor takes, and tasks named in each form Harbor uses
/// (with the stand-in harbor of Fixtures/tools/bin).
@Suite("Adapters: terminal-bench datasets and task names", .serialized)
struct HarborDatasetTests {
    /// A copy of the fixture's ten tasks in `dir`; `declare` gives task k (0-based) a
    /// `[task] name`.
    static func copyTasks(to dir: String, declare: (Int, String) -> String? = { _, _ in nil }) throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for (k, id) in HarborAdapterTests.names.enumerated() {
            try FileManager.default.copyItem(atPath: HarborAdapterTests.tasks + "/" + id, toPath: dir + "/" + id)
            if let name = declare(k, id) {
                let toml = dir + "/" + id + "/task.toml"
                let text = try String(contentsOfFile: toml, encoding: .utf8)
                try (text.replacingOccurrences(of: "[metadata]", with: "[task]\nname = \"\(name)\"\n\n[metadata]"))
                    .write(toFile: toml, atomically: true, encoding: .utf8)
            }
        }
    }

    func make(dataset: String) throws -> Experiment {
        try requireRoot()
        let exp = try Experiment(benchmark: "terminal-bench", extraArgs: ["--tool", Tools.root + "/bin/harbor", "--dataset", dataset])
        try exp.set("env_provider", "daytona")
        try exp.set("binds", "[\(Tools.root)/bin]", in: "runner")
        try exp.set("env_pass", "[FAKE_MODE]", in: "runner")
        try exp.set("allow", "[]", in: "runner")
        try exp.setAgent(HarborAgents.counting(upTo: 15))
        return exp
    }

    @Test("only the environment provider in use needs its key: with E2B_API_KEY in env_pass and unset, env_provider e2b stops naming it and daytona (its own key set) runs")
    func providerKeys() throws {
        let temp = try TempDir()
        try Self.copyTasks(to: temp.path + "/tasks")
        let exp = try make(dataset: temp.path + "/tasks")
        defer { exp.removeScratch() }
        try exp.set("env_pass", "[FAKE_MODE, E2B_API_KEY, DAYTONA_API_KEY]", in: "runner")
        var env = ProcessInfo.processInfo.environment
        env["FAKE_MODE"] = "normal"
        env["E2B_API_KEY"] = nil
        env["DAYTONA_API_KEY"] = nil
        try exp.set("env_provider", "e2b")
        let refused = try autoharness(["prepare", "-C", exp.root], environment: env)
        #expect(refused.status != 0 && refused.stderr.contains("E2B_API_KEY is not set"), "\(refused.stderr)")
        #expect(!refused.stderr.contains("DAYTONA_API_KEY"), "\(refused.stderr)")
        env["DAYTONA_API_KEY"] = "k"
        // Held-out runs get an account of their own (gate.held_out_env; AdapterTests.heldOutAccount).
        env["DAYTONA_API_KEY_HELD_OUT"] = "k-held-out"
        let path = exp.root + "/experiment_config.yaml"
        try (try String(contentsOfFile: path, encoding: .utf8)).replacingOccurrences(of: "\ngate:\n", with: "\ngate:\n  held_out_env: {DAYTONA_API_KEY: DAYTONA_API_KEY_HELD_OUT}\n")
            .write(toFile: path, atomically: true, encoding: .utf8)
        try exp.set("env_provider", "daytona")
        let p = try autoharness(["prepare", "-C", exp.root], environment: env)
        #expect(p.status == 0, "\(p.stdout)\(p.stderr)")
    }

    @Test("init --dataset DIR as `harbor download -o DIR` writes it (DIR/<dataset>/<task>/): the config names the dataset directory and its tasks run")
    func downloadedLayout() throws {
        let temp = try TempDir()
        let dl = temp.path + "/downloads"
        try Self.copyTasks(to: dl + "/count-lines")
        let exp = try make(dataset: dl)
        defer { exp.removeScratch() }
        let config = try exp.file("experiment_config.yaml")
        #expect(config.contains("dataset: \(dl)/count-lines "), "\(config.prefix(400))")
        let p = try exp.run(["prepare"], environment: ["FAKE_MODE": "normal"])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 5/10 tasks pass"), "\(p.stdout)")
        let split = try exp.split()
        #expect(Set(split.train + split.test) == Set(HarborAdapterTests.names))

        // Two downloaded datasets side by side: which one is meant is not guessed.
        try Self.copyTasks(to: dl + "/other")
        let r = try autoharness(["init", temp.path + "/exp2", "--benchmark", "terminal-bench", "--tool", Tools.root + "/bin/harbor", "--dataset", dl])
        #expect(r.status != 0)
        #expect(r.stderr.contains("holds several downloaded datasets (count-lines, other)"), "\(r.stderr)")
        let empty = try TempDir()
        let e = try autoharness(["init", temp.path + "/exp3", "--benchmark", "terminal-bench", "--tool", Tools.root + "/bin/harbor", "--dataset", empty.path])
        #expect(e.status != 0 && e.stderr.contains("holds no Harbor tasks"), "\(e.stderr)")
    }

    @Test("--task-ids takes a task's directory name, its [task] name and org/name@version alike; a held-out or unknown name is refused the same way")
    func taskNames() throws {
        let temp = try TempDir()
        try Self.copyTasks(to: temp.path + "/tasks") { _, id in "autoharness-test/\(id)" }
        let exp = try make(dataset: temp.path + "/tasks")
        defer { exp.removeScratch() }
        let p = try exp.run(["prepare"], environment: ["FAKE_MODE": "normal"])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let split = try exp.split()
        let id = try #require(split.train.sorted().first)
        for given in [id, "autoharness-test/\(id)", "autoharness-test/\(id)@1.0"] {
            try? FileManager.default.removeItem(atPath: exp.root + "/workspace/traces/latest")
            let b = try exp.run(["benchmark", "--task-ids", given], environment: ["FAKE_MODE": "normal"])
            #expect(b.status == 0 && (b.stdout.contains("train: 1/1 passed") || b.stdout.contains("train: 0/1 passed")), "\(given): \(b.stdout)\(b.stderr)")
            // The run was of that task, under its canonical id.
            #expect(exp.traceFile(id, "harbor-result.json")?.contains("\"task_name\": \"\(id)\"") == true, "\(given)")
        }
        let held = try #require(split.test.first)
        for given in ["autoharness-test/\(held)", "autoharness-test/\(held)@1.0", "autoharness-test/no-such-task", "autoharness-test@1.0"] {
            let b = try exp.run(["benchmark", "--task-ids", given], environment: ["FAKE_MODE": "normal"])
            #expect(b.status != 0 && b.stderr.contains("not train tasks (unknown or held out): \(given)"), "\(given): \(b.stderr)")
        }
    }

    @Test("two tasks answering to one name are refused at init, naming both")
    func ambiguousNames() throws {
        let temp = try TempDir()
        // Task 1 declares task 0's directory name; 2 and 3 declare one name between them.
        try Self.copyTasks(to: temp.path + "/a") { k, _ in k == 1 ? HarborAdapterTests.names[0] : nil }
        try Self.copyTasks(to: temp.path + "/b") { k, _ in k == 2 || k == 3 ? "org/same" : nil }
        for (dir, name, a, b) in [("a", HarborAdapterTests.names[0], HarborAdapterTests.names[0], HarborAdapterTests.names[1]),
                                  ("b", "org/same", HarborAdapterTests.names[2], HarborAdapterTests.names[3])] {
            let r = try autoharness(["init", temp.path + "/exp-" + dir, "--benchmark", "terminal-bench", "--tool", Tools.root + "/bin/harbor",
                                     "--dataset", temp.path + "/" + dir])
            #expect(r.status != 0)
            #expect(r.stderr.contains("task name '\(name)' is ambiguous: tasks \(a) and \(b) both answer to it"), "\(r.stderr)")
        }
    }

    @Test("the name index: every alias maps to one id, org/name@ref to org/name's task, nothing else resolves")
    func nameIndex() throws {
        let names = try HarborTaskNames(ids: ["a", "b", "org/c"], declared: ["a": "org/a", "b": "b"])
        #expect(names.canonical("a") == "a" && names.canonical("org/a") == "a" && names.canonical("org/a@2.0") == "a")
        #expect(names.canonical("b") == "b" && names.canonical("org/c@sha256:00") == "org/c")
        #expect(names.canonical("a@1.0") == nil && names.canonical("org/a@") == nil && names.canonical("org/b") == nil)
        #expect(throws: BenchmarkError.self) { try HarborTaskNames(ids: ["a", "b"], declared: ["b": "a"]) }
        #expect(HarborTaskNames.harborName(taskID: JSONValue.parse(Array(#"{"org": "o", "name": "n", "ref": "3"}"#.utf8))) == "o/n")
        #expect(HarborTaskNames.harborName(taskID: JSONValue.parse(Array(#"{"path": "/data/tasks/t-1"}"#.utf8))) == "t-1")
    }

    @Test("--oracle's solution gets the task's [agent] timeout_sec, the verifier its [verifier] timeout_sec (Terminal-Bench 2.0's task.toml: tags arrays and all)")
    func oracleTimeouts() throws {
        let dir = try TempDir()
        let t = dir.path + "/t"
        try FileManager.default.createDirectory(atPath: t + "/tests", withIntermediateDirectories: true)
        try "#!/bin/bash\n".write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
        try """
            version = "1.0"
            [metadata]
            tags = ["compression", "rust"]
            [verifier]
            timeout_sec = 1200.0
            [agent]
            timeout_sec = 1_800.0
            [environment]
            docker_image = "alexgshaw/write-compressor:20251031"
            cpus = 1

            """.write(toFile: t + "/task.toml", atomically: true, encoding: .utf8)
        var a = HarborAdapter(taskIDs: ["t"], tool: ToolSettings(command: ["harbor"]))
        a.datasetPath = dir.path
        let task = a.localTask("t")
        #expect(task.problem == nil && task.agentTimeout == 1800 && task.agentTimeoutDeclared, "\(task)")
        #expect(task.verifierTimeout == 1200 && task.verifierTimeoutDeclared, "\(task)")
    }

    @Test("a Harbor dataset's task.toml goes through the one reader: a fuller file (an env table, MCP servers, hosts over several lines) gives its timeouts, image, network and memory; one that is not TOML costs that task with file:line")
    func oneTaskTomlReader() throws {
        let dir = try TempDir()
        for id in ["full", "broken"] {
            try FileManager.default.createDirectory(atPath: dir.path + "/\(id)/tests", withIntermediateDirectories: true)
            try "#!/bin/bash\n".write(toFile: dir.path + "/\(id)/tests/test.sh", atomically: true, encoding: .utf8)
        }
        try """
            schema_version = "1.4"
            [task]
            name = "org/full"
            [agent]
            timeout_sec = 300.0
            [verifier]
            timeout_sec = 60.0
            env = { LEVEL = "3" }
            [environment]
            docker_image = "org/full:1"
            memory_mb = 3072
            network_mode = "allowlist"
            allowed_hosts = [
                "pypi.org",
            ]
            [[environment.mcp_servers]]
            name = "tools"

            """.write(toFile: dir.path + "/full/task.toml", atomically: true, encoding: .utf8)
        try "[agent]\ntimeout_sec = 5\n[agent]\n".write(toFile: dir.path + "/broken/task.toml", atomically: true, encoding: .utf8)
        var a = HarborAdapter(taskIDs: ["full", "broken"], tool: ToolSettings(command: ["harbor"]))
        a.datasetPath = dir.path
        let full = a.localTask("full")
        #expect(full.problem == nil && full.agentTimeout == 300 && full.verifierTimeout == 60 && full.dockerImage == "org/full:1", "\(full)")
        #expect(full.memory == 3 << 30 && full.network == .allowlist(["pypi.org:443", "pypi.org:80"]), "\(full)")
        #expect(HarborAdapter.declaredName(taskToml: try String(contentsOfFile: dir.path + "/full/task.toml", encoding: .utf8)) == "org/full")
        let broken = a.localTask("broken")
        #expect(broken.problem == dir.path + "/broken/task.toml:3: table [agent] is defined twice", "\(broken)")
    }

    @Test("per_task_timeout reaches Harbor as the job config's agents[].override_timeout_sec, with the agent and model named there (not -a, which would replace it)")
    func perTaskTimeoutArgv() throws {
        var a = HarborAdapter(taskIDs: ["t"], tool: ToolSettings(command: ["harbor"]))
        a.model = "anthropic/claude-x"
        #expect(a.argv(["t"], jobs: "/j").contains("--agent") && a.jobConfig() == nil)
        a.agentTimeout = 42
        let argv = a.argv(["t"], jobs: "/j")
        #expect(!argv.contains("--agent") && !argv.contains("--model"), "\(argv)")
        #expect(argv.contains("-c") && argv.contains(HarborAdapter.jobConfigPath), "\(argv)")
        let bytes = try #require(a.jobConfig())
        let json = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
        let agent = try #require((json["agents"] as? [[String: Any]])?.first)
        #expect(agent["override_timeout_sec"] as? Double == 42 && agent["import_path"] as? String == "agent.agent:HarnessAgent"
                && agent["model_name"] as? String == "anthropic/claude-x", "\(json)")
    }

    @Test("Terminal-Bench 2.1's forms: its hub package pinned by digest is a reference (a short or upper-case digest, a digest on a legacy name, or a part harbor would take for an option, is not); its task.toml (schema 1.1: memory_mb, cpus, raised timeouts, allow_internet) gives the task's limits")
    func terminalBench21() throws {
        let digest = "sha256:7d7bdc1cbedad549fc1140404bd4dc45e5fd0ea7c4186773687d177ad3a0699a"
        #expect(HarborDataset.isReference("terminal-bench/terminal-bench-2-1@" + digest))
        #expect(HarborDataset.isReference("terminal-bench/terminal-bench-2-1@6") && HarborDataset.isReference("terminal-bench/terminal-bench-2-1"))
        for bad in ["terminal-bench/terminal-bench-2-1@sha256:7d7b", "terminal-bench/terminal-bench-2-1@" + digest.uppercased(),
                    "terminal-bench@" + digest, "terminal-bench/terminal-bench-2-1@sha256:" + String(repeating: "g", count: 64),
                    // harbor would take these for its options
                    "--dataset=-o/x@" + digest, "-otmp/x@" + digest, "org/-o@" + digest, "--help", "name@-v"] {
            #expect(!HarborDataset.isReference(bad), "\(bad)")
        }
        #expect(HarborDataset.aliases["terminal-bench@2.1"] == "terminal-bench/terminal-bench-2-1@" + digest)
        #expect(HarborDataset.isReference(try #require(HarborDataset.aliases["terminal-bench@2.1"])))

        // caffe-cifar-10 as 2.1 ships it (harbor-framework/terminal-bench-2-1, tasks/caffe-cifar-10/task.toml).
        let dir = try TempDir()
        try FileManager.default.createDirectory(atPath: dir.path + "/caffe-cifar-10/tests", withIntermediateDirectories: true)
        try "#!/bin/bash\n".write(toFile: dir.path + "/caffe-cifar-10/tests/test.sh", atomically: true, encoding: .utf8)
        try """
            schema_version = "1.1"

            [task]
            name = "terminal-bench/caffe-cifar-10"
            keywords = ["machine-learning"]

            [metadata]
            difficulty = "medium"

            [verifier]
            timeout_sec = 1200.0

            [agent]
            timeout_sec = 3600.0

            [environment]
            build_timeout_sec = 600.0
            docker_image = "alexgshaw/caffe-cifar-10:20260403"
            cpus = 4
            memory_mb = 8192
            storage_mb = 10240
            gpus = 0
            allow_internet = true
            mcp_servers = []

            """.write(toFile: dir.path + "/caffe-cifar-10/task.toml", atomically: true, encoding: .utf8)
        var a = HarborAdapter(taskIDs: ["caffe-cifar-10"], tool: ToolSettings(command: ["harbor"]))
        a.datasetPath = dir.path
        let task = a.localTask("caffe-cifar-10")
        #expect(task.problem == nil && task.agentTimeout == 3600 && task.verifierTimeout == 1200, "\(task)")
        #expect(task.memory == 8 << 30 && task.cpus == 4 && task.dockerImage == "alexgshaw/caffe-cifar-10:20260403", "\(task)")
        #expect(HarborAdapter.declaredName(taskToml: try String(contentsOfFile: dir.path + "/caffe-cifar-10/task.toml", encoding: .utf8)) == "terminal-bench/caffe-cifar-10")
    }
}
