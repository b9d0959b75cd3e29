import Foundation
import Testing
import TestSupport

// The external benchmark adapters end to end: `autoharness init --benchmark X`, then prepare →
// benchmark → gate through the CLI, with fake tools (Fixtures/tools) that produce the real
// tools' file formats, run in the real benchmark-runner sandbox.

enum Tools {
    static let root = Fixtures.root + "/tools"
}

extension Experiment {
    /// `init --benchmark NAME` in a fresh directory, without prepare.
    init(benchmark: String, extraArgs: [String] = [], environment: [String: String]? = nil) throws {
        let temp = try TempDir()
        let root = temp.path + "/exp"
        let r = try autoharness(["init", root, "--benchmark", benchmark] + extraArgs, environment: environment)
        try #require(r.status == 0, "init failed: \(r.stderr)")
        self.init(existing: root, temp: temp)
        // Its own scratch root, so checks for leftovers see this experiment's runs only.
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
        try set("scratch", scratch, in: "sandbox")
        // Tests choose where held-out tasks run; the default (auto) would follow the host's KVM.
        try set("held_out_runtime", "host", in: "gate")
    }

    /// This experiment's scratch root (tmpfs), made by `init(benchmark:)`.
    var scratch: String { "/dev/shm/ah-test-" + (temp.path as NSString).lastPathComponent }

    /// Per-run tmpfs mounts still under this experiment's scratch root.
    func scratchMounts() -> [String] {
        let info = procText("/proc/self/mountinfo") ?? ""
        let prefix = scratch + "/"
        var out: [String] = []
        for line in info.split(separator: "\n") {
            let fields = line.split(separator: " ")
            if fields.count > 4 && fields[4].hasPrefix(prefix) { out.append(String(fields[4])) }
        }
        return out
    }

    /// Removes the scratch root (empty once every run is gone).
    func removeScratch() { rmdir(scratch) }

    /// Sets `key: value` in the config: under `section:` (a top-level mapping) if given,
    /// else the first line with that key.
    func set(_ key: String, _ value: String, in section: String? = nil) throws {
        let path = root + "/experiment_config.yaml"
        var lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        var start = 0
        if let section { start = try #require(lines.firstIndex(of: "\(section):"), "no section \(section)") }
        let i = try #require(lines[start...].firstIndex { $0.trimmingCharacters(in: .whitespaces).hasPrefix("\(key):") }, "no key \(key)")
        lines[i] = "\(lines[i].prefix { $0 == " " })\(key): \(value)"
        try lines.joined(separator: "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }

    func run(_ args: [String], environment: [String: String]) throws -> Run {
        var env = ProcessInfo.processInfo.environment
        for (k, v) in environment { env[k] = v }
        return try autoharness(args + ["-C", root], environment: env)
    }

    func traceFile(_ id: String, _ name: String) -> String? {
        try? String(contentsOfFile: root + "/workspace/traces/latest/\(id)/\(name)", encoding: .utf8)
    }

    func trainResults() throws -> [String: Any] {
        let data = try Data(contentsOf: URL(fileURLWithPath: root + "/workspace/train_results.json"))
        let obj = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        return try #require(obj["results"] as? [String: Any])
    }

    /// Statuses of the latest train run, from each trace's result.json.
    func statuses(_ ids: [String]) throws -> [String: String] {
        var out: [String: String] = [:]
        for id in ids {
            let text = try #require(traceFile(traceName(id), "result.json"), "no trace for \(id)")
            let obj = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
            out[id] = obj["status"] as? String
        }
        return out
    }
}

/// The trace directory name of a task id (the supervisor's TraceName.encode).
func traceName(_ id: String) -> String {
    var out = ""
    for (i, b) in id.utf8.enumerated() {
        let plain = (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F || b == 0x2D || (b == 0x2E && i > 0)
        out += plain ? String(UnicodeScalar(b)) : String(format: "%%%02X", b)
    }
    return out
}

/// Every regular file under `dir` whose contents include `needle`.
func files(under dir: String, containing needle: String) -> [String] {
    guard let e = FileManager.default.enumerator(atPath: dir) else { return [] }
    var hits: [String] = []
    while let rel = e.nextObject() as? String {
        let path = dir + "/" + rel
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDir), !isDir.boolValue,
              let data = FileManager.default.contents(atPath: path) else { continue }
        if data.range(of: Data(needle.utf8)) != nil { hits.append(path) }
    }
    return hits
}


enum SquareAgents {
    static let none = """
        class HarnessAgent:
            def run(self, instruction):
                return ""
        """
    /// Squares numbers up to `limit`.
    static func upTo(_ limit: Int) -> String {
        """
        class HarnessAgent:
            def run(self, instruction):
                n = int(instruction.split()[1])
                return str(n * n) if n <= \(limit) else "?"
        """
    }
}

@Suite("Adapters: benchmark: command", .serialized)
struct CommandAdapterTests {
    static let ids = (1...10).map { "sq-\($0)" }

    func make(mode: String = "") throws -> Experiment {
        try requireRoot()
        let exp = try Experiment(benchmark: "command")
        try exp.set("tasks", "[" + Self.ids.joined(separator: ", ") + "]")
        try exp.set("command", "[python3, \(Tools.root)/command_bench.py, --tasks, \"{task_ids_file}\", --out, \"{output}\"]", in: "runner")
        try exp.set("binds", "[\(Tools.root)]", in: "runner")
        try exp.set("env_pass", "[FAKE_MODE]", in: "runner")
        try exp.setAgent(SquareAgents.none)
        return exp
    }

    @Test("prepare → benchmark → gate: rewards from the command's output, traces for train tasks only, agent.py read-only in the runner")
    func loop() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        let env = ["FAKE_MODE": "normal"]
        let p = try exp.run(["prepare"], environment: env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/10 tasks pass"))
        let split = try exp.split()
        #expect(split.train.count + split.test.count == 10)

        let b = try exp.run(["benchmark"], environment: env)
        #expect(b.status == 0, "\(b.stderr)")
        for id in split.train {
            let answer = try #require(exp.traceFile(id, "answer.txt"), "no answer.txt in \(id)'s trace")
            #expect(answer.contains("id=\(id) "))
            #expect(answer.contains("agent_write=EROFS") || answer.contains("agent_write=EACCES"), "agent.py was writable in the runner: \(answer)")
            #expect(exp.traceFile(id, "tool.stdout")?.contains("fake tool: \(split.train.count) task(s)") == true)
        }

        try exp.setAgent(SquareAgents.upTo(10))
        let g = try exp.run(["gate"], environment: env)
        #expect(g.status == 0, "\(g.stdout)\(g.stderr)")
        #expect(g.stdout.contains("ACCEPTED"), "\(g.stdout)")
        #expect(try exp.file("workspace/results.tsv").contains("\n1\t1.0000\t"))

        // Held-out output never persisted: no file anywhere names a test task's answer, and
        // the run's tmpfs is gone.
        for id in split.test {
            #expect(files(under: exp.root, containing: "id=\(id) ").isEmpty)
            #expect(files(under: exp.scratch, containing: "id=\(id) ").isEmpty)
        }
        #expect(exp.scratchMounts().isEmpty, "scratch mounts left: \(exp.scratchMounts())")
        #expect((try? FileManager.default.contentsOfDirectory(atPath: exp.scratch)) == [])
        let v = try exp.run("status", "--operator", "--verify")
        #expect(v.status == 0, "\(v.stdout)\(v.stderr)")
    }

    @Test("missing, null, non-numeric and unparsable results score 0 with a status", arguments: [
        ("omit-odd", "missing_result"), ("null-first", "missing_result"), ("string", "invalid_reward"),
        ("garbage", "missing_result"), ("list", "missing_result"), ("crash", "missing_result"),
    ])
    func malformed(mode: String, status: String) throws {
        let exp = try make()
        defer { exp.removeScratch() }
        try exp.setAgent(SquareAgents.upTo(100))
        let p = try exp.run(["prepare"], environment: ["FAKE_MODE": "normal"])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 10/10 tasks pass"))
        let train = try exp.split().train
        let b = try exp.run(["benchmark"], environment: ["FAKE_MODE": mode])
        #expect(b.status == 0, "\(b.stderr)")
        let statuses = try exp.statuses(train)
        let rewards = try exp.trainResults()
        let affected: [String]
        switch mode {
        case "omit-odd": affected = train.filter { Int($0.dropFirst(3))! % 2 == 1 }
        case "null-first", "string": affected = [train.sorted()[0]]
        default: affected = train
        }
        try #require(!affected.isEmpty)
        for id in train {
            if affected.contains(id) {
                #expect(statuses[id] == status, "\(id): \(statuses[id] ?? "-")")
                #expect((rewards[id] as? Double) == 0, "\(id) scored \(rewards[id] ?? "nil")")
            } else {
                #expect(statuses[id] == "passed", "\(id): \(statuses[id] ?? "-")")
            }
        }
        if mode == "crash" {
            #expect(exp.traceFile(affected[0], "result.json")?.contains("exited 3") == true)
        }
    }

    @Test("a key passed into the runner does not reach a train trace verbatim")
    func secretRedacted() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        try exp.set("env_pass", "[FAKE_MODE, FAKE_SECRET]", in: "runner")
        // FAKE_SECRET is a key the template's model API could be reached with: its own account for held-out runs.
        try exp.set("held_out_runtime", "host\n  held_out_env: {FAKE_SECRET: FAKE_SECRET_HELD_OUT}", in: "gate")
        let secret = "sk-test-\(UUID().uuidString)"
        let p = try exp.run(["prepare"], environment: ["FAKE_MODE": "normal", "FAKE_SECRET": secret, "FAKE_SECRET_HELD_OUT": "sk-held-\(UUID().uuidString)"])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let b = try exp.run(["benchmark"], environment: ["FAKE_MODE": "leak", "FAKE_SECRET": secret, "FAKE_SECRET_HELD_OUT": "sk-held-out-x"])
        #expect(b.status == 0, "\(b.stderr)")
        let id = try exp.split().train[0]
        #expect(exp.traceFile(id, "answer.txt")?.contains("key=[FAKE_SECRET]") == true, "\(exp.traceFile(id, "answer.txt") ?? "")")
        #expect(files(under: exp.root, containing: secret).isEmpty)
    }

    @Test("a key named in runner.env_pass that is not set stops prepare with one clear message")
    func missingKey() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        try exp.set("env_pass", "[AUTOHARNESS_TEST_UNSET_KEY]", in: "runner")
        var env = ProcessInfo.processInfo.environment
        env["AUTOHARNESS_TEST_UNSET_KEY"] = nil
        let p = try autoharness(["prepare", "-C", exp.root], environment: env)
        #expect(p.status != 0)
        #expect(p.stderr.contains("AUTOHARNESS_TEST_UNSET_KEY is not set"), "\(p.stderr)")
    }
}

enum HarborAgents {
    /// Counts lines when there are at most `limit` (the fixture's tasks have 3, 6, ..., 30).
    static func counting(upTo limit: Int) -> String {
        """
        class HarnessAgent:
            def __init__(self, logs_dir=None, model_name=None, **kwargs):
                self.logs_dir = logs_dir

            @staticmethod
            def name():
                return "harness"

            async def run(self, instruction, environment, context):
                r = await environment.exec("n=$(wc -l < log.txt); if [ $n -le \(limit) ]; then echo $n > answer.txt; fi; echo counted $n")
                with open(self.logs_dir + "/steps.txt", "w") as f:
                    f.write(r.stdout)
        """
    }
}

@Suite("Adapters: terminal-bench (Harbor)", .serialized)
struct HarborAdapterTests {
    static let tasks = Tools.root + "/harbor-tasks"
    static let names = (1...10).map { String(format: "count-the-lines-of-the-log-file-variant-%02d", $0) }

    func make(limit: Int = 0) throws -> Experiment {
        try requireRoot()
        let exp = try Experiment(benchmark: "terminal-bench", extraArgs: ["--tool", Tools.root + "/bin/harbor", "--dataset", Self.tasks])
        try exp.set("env_provider", "daytona")
        try exp.set("binds", "[\(Tools.root)/bin]", in: "runner")
        try exp.set("env_pass", "[FAKE_MODE]", in: "runner")
        try exp.set("allow", "[]", in: "runner")
        try exp.setAgent(HarborAgents.counting(upTo: limit))
        return exp
    }

    @Test("prepare → benchmark → gate: rewards keyed on task_name (trial dirs truncated to 32 characters), verifier files in train traces only")
    func loop() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        let cfg = try exp.file("experiment_config.yaml")
        #expect(cfg.contains("dataset: \(Self.tasks)") && cfg.contains("agent_timeout_multiplier: 1.0") && cfg.contains("env_provider:"))
        #expect(try exp.file("PROGRAM.md").contains("Terminal-Bench 2.0 (Harbor)"))
        let env = ["FAKE_MODE": "normal"]
        let p = try exp.run(["prepare"], environment: env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/10 tasks pass"))
        let split = try exp.split()
        #expect(Set(split.train + split.test) == Set(Self.names))

        // Tasks with at most 15 lines (variants 01-05) pass, the rest fail: each task got
        // its own trial's reward although every trial directory starts with the same 32 characters.
        try exp.setAgent(HarborAgents.counting(upTo: 15))
        let b = try exp.run(["benchmark"], environment: env)
        #expect(b.status == 0, "\(b.stderr)")
        let rewards = try exp.trainResults()
        for id in split.train {
            let variant = Int(id.suffix(2))!
            #expect((rewards[id] as? Double) == (variant <= 5 ? 1 : 0), "\(id): \(rewards[id] ?? "nil")")
            #expect(exp.traceFile(id, "harbor-result.json")?.contains("\"task_name\": \"\(id)\"") == true)
            #expect(exp.traceFile(id, "verifier-reward.txt") != nil)
            #expect(exp.traceFile(id, "agent-steps.txt")?.contains("counted \(variant * 3)") == true)
            // Only the requested tasks were in the runner's dataset directory.
            #expect(exp.traceFile(id, "tool.stdout")?.contains("harbor: \(split.train.count) task(s) in the dataset directory") == true)
        }

        try exp.setAgent(HarborAgents.counting(upTo: 100))
        let g = try exp.run(["gate"], environment: env)
        #expect(g.stdout.contains("ACCEPTED"), "\(g.stdout)\(g.stderr)")
        for id in split.test {
            #expect(files(under: exp.root, containing: "\"task_name\": \"\(id)\"").isEmpty)
            #expect(files(under: exp.scratch, containing: id).isEmpty)
        }
        #expect(exp.scratchMounts().isEmpty)
        #expect((try? FileManager.default.contentsOfDirectory(atPath: exp.scratch)) == [])
    }

    @Test("a trial whose result.json disagrees with its verifier's reward file, an exception, a missing trial, an extra trial, a crashed harbor", arguments: [
        "disagree", "exception", "omit", "extra", "crash",
    ])
    func malformed(mode: String) throws {
        let exp = try make(limit: 100)
        defer { exp.removeScratch() }
        let p = try exp.run(["prepare"], environment: ["FAKE_MODE": "normal"])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 10/10 tasks pass"))
        let train = try exp.split().train.sorted()
        let b = try exp.run(["benchmark"], environment: ["FAKE_MODE": mode])
        #expect(b.status == 0, "\(b.stderr)")
        let statuses = try exp.statuses(train)
        let rewards = try exp.trainResults()
        let expected: [String: String]
        switch mode {
        case "disagree": expected = [train[0]: "invalid_reward"]
        case "exception": expected = [train[0]: "agent_timeout"]
        case "omit": expected = [train.last!: "missing_result"]
        case "crash": expected = Dictionary(uniqueKeysWithValues: train.dropFirst().map { ($0, "missing_result") })
        default: expected = [:]  // the extra trial is for a task nobody asked about: ignored
        }
        for id in train {
            if let s = expected[id] {
                #expect(statuses[id] == s, "\(id): \(statuses[id] ?? "-")")
                #expect((rewards[id] as? Double) == 0)
            } else {
                #expect(statuses[id] == "passed", "\(id): \(statuses[id] ?? "-")")
            }
        }
        if mode == "disagree" {
            #expect(exp.traceFile(train[0], "result.json")?.contains("result.json says reward 0.0") == true)
        }
    }

    @Test("env_provider docker without the socket in runner.binds is refused with the reason")
    func dockerNeedsOptIn() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        try exp.set("env_provider", "docker")
        let p = try exp.run(["prepare"], environment: ["FAKE_MODE": "normal"])
        #expect(p.status != 0)
        #expect(p.stderr.contains("root on this host"), "\(p.stderr)")
    }

    @Test("runner.binds that contain the local dataset are refused: every run would see the held-out tasks")
    func datasetNeverBound() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        try exp.set("binds", "[\(Tools.root)]", in: "runner")
        let p = try exp.run(["prepare"], environment: ["FAKE_MODE": "normal"])
        #expect(p.status != 0)
        #expect(p.stderr.contains("experiment_config.yaml: runner.binds: \(Tools.root) contains the dataset"), "\(p.stderr)")
        // The same directory by another name: a symlink to it (compared as strings, it passed).
        let t = try TempDir()
        try FileManager.default.createSymbolicLink(atPath: t.path + "/tools", withDestinationPath: Tools.root)
        try exp.set("binds", "[\(t.path)/tools]", in: "runner")
        let q = try exp.run(["prepare"], environment: ["FAKE_MODE": "normal"])
        #expect(q.status != 0)
        #expect(q.stderr.contains("runner.binds: \(t.path)/tools contains the dataset"), "\(q.stderr)")
    }

    /// A command benchmark of three tasks whose runner scores every task 0 (for the checks of
    /// its keys, which come before any score matters).
    static func zeroScoring() throws -> Experiment {
        let exp = try Experiment(benchmark: "command")
        try exp.set("tasks", "[t1, t2, t3]")
        try exp.set("command", "[python3, -c, \"import json; json.dump({t: 0 for t in open('/work/in/task_ids.txt').read().split()}, open('/work/out/rewards.json', 'w'))\", \"{output}\"]", in: "runner")
        return exp
    }

    @Test("gate.held_out_env whose value is a key the coding agent or train runs hold, under another name, is refused at its config line; another account's key passes")
    func heldOutKeyComparedByValue() throws {
        let exp = try Self.zeroScoring()
        defer { exp.removeScratch() }
        try exp.set("env_pass", "[RUNNER_API_KEY]", in: "runner")
        try exp.set("env_pass", "[CODER_API_KEY]", in: "coding_agent")
        let path = exp.root + "/experiment_config.yaml"
        var text = try String(contentsOfFile: path, encoding: .utf8)
        text = text.replacingOccurrences(of: "\ngate:\n", with: "\ngate:\n  held_out_env: {RUNNER_API_KEY: HELD_OUT_API_KEY}\n")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        let line = (text.components(separatedBy: "\n").firstIndex { $0.contains("held_out_env:") } ?? -1) + 1
        // The held-out variable holds the coding agent's key: refused, naming the line.
        var env = ["RUNNER_API_KEY": "sk-train", "CODER_API_KEY": "sk-coder", "HELD_OUT_API_KEY": "sk-coder"]
        var p = try exp.run(["prepare"], environment: env)
        #expect(p.status != 0 && p.stderr.contains("experiment_config.yaml:\(line): gate.held_out_env: RUNNER_API_KEY comes from $HELD_OUT_API_KEY")
                && p.stderr.contains("same value as $CODER_API_KEY, which the coding agent hold"), "\(p.stderr)")
        // ... or the train runs' own key.
        env["HELD_OUT_API_KEY"] = "sk-train"
        p = try exp.run(["prepare"], environment: env)
        #expect(p.status != 0 && p.stderr.contains("same value as $RUNNER_API_KEY, which train runs hold"), "\(p.stderr)")
        // ... or a key the coding agent holds under a name no key suffix catches (its shape does).
        let odd = "sk-ant-api03-" + String(repeating: "Odd", count: 8)
        try exp.set("env_pass", "[CODER_API_KEY, CLAUDE_KEY_2]", in: "coding_agent")
        (env["CLAUDE_KEY_2"], env["HELD_OUT_API_KEY"]) = (odd, odd)
        p = try exp.run(["prepare"], environment: env)
        #expect(p.status != 0 && p.stderr.contains("same value as $CLAUDE_KEY_2, which the coding agent hold"), "\(p.stderr)")
        env["HELD_OUT_API_KEY"] = "sk-held-out"
        p = try exp.run(["prepare"], environment: env)
        #expect(p.status == 0, "\(p.stdout)\(p.stderr)")
    }

    @Test("a runner that reaches a model API needs gate.held_out_env for each key it passes (refused at runner.network.inference's line, then until its variable is set), or gate.shared_vendor_account: true, which status, the report and the evidence show")
    func heldOutAccountForModelAPIs() throws {
        let exp = try Self.zeroScoring()
        defer { exp.removeScratch() }
        // A model API the runner never calls here: the rule is about what it could reach.
        try exp.set("env_pass", "[RUNNER_API_KEY, RUNNER_MODE, HF_TOKEN]", in: "runner")
        // HF_TOKEN is for a plain tunnel's host, passed as it is: no held-out account needed.
        try exp.set("inference", "[\"127.0.0.1:9\"]\n    tunnelled_keys: [HF_TOKEN]", in: "runner")
        try exp.set("allow", "[huggingface.co:443]", in: "runner")
        let path = exp.root + "/experiment_config.yaml"
        let original = try String(contentsOfFile: path, encoding: .utf8)
        let line = (original.components(separatedBy: "\n").firstIndex { $0.contains("inference: [\"127.0.0.1:9\"]") } ?? -1) + 1
        var env = ["RUNNER_API_KEY": "sk-train", "RUNNER_MODE": "x", "HF_TOKEN": "hf_train"]
        var p = try exp.run(["prepare"], environment: env)
        #expect(p.status != 0 && p.stderr.contains("experiment_config.yaml:\(line): runner.network.inference: held-out runs would reach 127.0.0.1:9 with the train runs' $RUNNER_API_KEY")
                && p.stderr.contains("gate.held_out_env: {RUNNER_API_KEY: RUNNER_API_KEY_HELD_OUT}") && p.stderr.contains("gate.shared_vendor_account: true"), "\(p.stderr)")
        // Only keys count (RUNNER_MODE is not one); the held-out variable must be set.
        try original.replacingOccurrences(of: "\ngate:\n", with: "\ngate:\n  held_out_env: {RUNNER_API_KEY: RUNNER_API_KEY_HELD_OUT}\n")
            .write(toFile: path, atomically: true, encoding: .utf8)
        p = try exp.run(["prepare"], environment: env)
        #expect(p.status != 0 && p.stderr.contains("RUNNER_API_KEY_HELD_OUT is not set"), "\(p.stderr)")
        env["RUNNER_API_KEY_HELD_OUT"] = "sk-held-out"
        p = try exp.run(["benchmark"], environment: env)
        #expect(p.stderr.contains("not prepared") && !p.stderr.contains("held_out_env") && !p.stderr.contains("HF_TOKEN"), "\(p.stderr)")
        p = try exp.run(["status"], environment: env)
        #expect(p.status == 0 && !p.stdout.contains("vendor account"), "\(p.stdout)")

        // The operator's opt-in: accepted, and said wherever the experiment is read.
        try original.replacingOccurrences(of: "\ngate:\n", with: "\ngate:\n  shared_vendor_account: true\n")
            .write(toFile: path, atomically: true, encoding: .utf8)
        env["RUNNER_API_KEY_HELD_OUT"] = nil
        p = try exp.run(["prepare"], environment: env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("vendor account: SHARED (held-out and train runs reach 127.0.0.1:9 with one account's keys"), "\(p.stdout)")
        let status = try exp.run(["status"], environment: env)
        #expect(status.stdout.contains("vendor account: SHARED (held-out and train runs reach 127.0.0.1:9 with one account's keys (gate.shared_vendor_account: true)"), "\(status.stdout)")
        let statusJSON = try #require(try JSONSerialization.jsonObject(with: Data(try exp.run(["status", "--json"], environment: env).stdout.utf8)) as? [String: Any])
        #expect((statusJSON["shared_vendor_account"] as? String)?.contains("gate.shared_vendor_account: true") == true, "\(statusJSON)")
        #expect(try exp.run(["report"], environment: env).status == 0)
        #expect(try String(contentsOfFile: exp.root + "/report.html", encoding: .utf8).contains("<b>vendor account SHARED</b>"))
        let out = exp.temp.path + "/prepare.json"
        let e = try exp.run(["evidence", "export", "prepare", "-o", out], environment: env)
        try #require(e.status == 0, "\(e.stdout)\(e.stderr)")
        let verified = try runProcess(Built.autoharness, ["evidence", "verify", out, "--json", "--allow-untrusted-key"]).stdout
        let statement = try #require((try JSONSerialization.jsonObject(with: Data(verified.utf8)) as? [String: Any])?["statement"] as? [String: Any])
        let runtime = (statement["predicate"] as? [String: Any])?["heldOutRuntime"] as? [String: Any]
        #expect(runtime?["sharedVendorAccount"] as? Bool == true, "\(String(describing: runtime))")
        // Not a yes/no: refused at its line.
        try original.replacingOccurrences(of: "\ngate:\n", with: "\ngate:\n  shared_vendor_account: maybe\n")
            .write(toFile: path, atomically: true, encoding: .utf8)
        p = try exp.run(["status"], environment: env)
        #expect(p.status != 0 && p.stderr.contains("gate.shared_vendor_account"), "\(p.stderr)")
    }

    @Test("a template whose runner reaches a model API (tau-bench) starts refused: its gate section holds both choices commented; either uncommented, prepare runs")
    func templateChoosesAnAccount() throws {
        try requireRoot()
        let exp = try Experiment(benchmark: "tau-bench", extraArgs: ["--tool", Tau2Agents.fixture + "/bin/tau2", "--dataset", Tau2AdapterTests.data])
        defer { exp.removeScratch() }
        try exp.set("binds", "[\(Tau2AdapterTests.pkg)]", in: "runner")
        try exp.set("env_pass", "[FAKE_MODE, PYTHONPATH, OPENAI_API_KEY]", in: "runner")
        var env = Tau2AdapterTests.env
        env["OPENAI_API_KEY"] = "sk-train"
        let path = exp.root + "/experiment_config.yaml"
        let shipped = try String(contentsOfFile: path, encoding: .utf8)
        #expect(shipped.contains("  # held_out_env: {OPENAI_API_KEY: OPENAI_API_KEY_HELD_OUT}\n") && shipped.contains("  # shared_vendor_account: true"), "\(shipped)")
        var p = try exp.run(["prepare"], environment: env)
        #expect(p.status != 0 && p.stderr.contains("runner.network.inference: held-out runs would reach api.openai.com:443 with the train runs' $OPENAI_API_KEY"), "\(p.stderr)")
        try shipped.replacingOccurrences(of: "  # held_out_env:", with: "  held_out_env:").write(toFile: path, atomically: true, encoding: .utf8)
        p = try exp.run(["prepare"], environment: env)
        #expect(p.status != 0 && p.stderr.contains("OPENAI_API_KEY_HELD_OUT is not set"), "\(p.stderr)")
        env["OPENAI_API_KEY_HELD_OUT"] = "sk-held-out"
        p = try exp.run(["prepare"], environment: env)
        #expect(p.status == 0 && p.stdout.contains("baseline: 0/12 tasks pass"), "\(p.stdout)\(p.stderr)")
    }

    @Test("a remote provider's key passed to the runner needs gate.held_out_env: another account for held-out runs (missing, unset and same value refused); held-out runs then see it and train runs their own")
    func heldOutAccount() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        try exp.set("env_pass", "[FAKE_MODE, DAYTONA_API_KEY]", in: "runner")
        // agent.py solves a task only when the runner holds the held-out account's key.
        try exp.setAgent(HarborAgents.counting(upTo: 100).replacingOccurrences(of: "    async def run(self, instruction, environment, context):\n",
            with: "    async def run(self, instruction, environment, context):\n        import os\n        if os.environ.get('DAYTONA_API_KEY') != 'held-out-account': return\n"))
        var env = ["FAKE_MODE": "normal", "DAYTONA_API_KEY": "train-account"]
        var p = try exp.run(["prepare"], environment: env)
        #expect(p.status != 0 && p.stderr.contains("gate.held_out_env: {DAYTONA_API_KEY: VAR}"), "\(p.stderr)")
        let path = exp.root + "/experiment_config.yaml"
        let text = try String(contentsOfFile: path, encoding: .utf8)
        try text.replacingOccurrences(of: "\ngate:\n", with: "\ngate:\n  held_out_env: {DAYTONA_API_KEY: DAYTONA_API_KEY_HELD_OUT}\n")
            .write(toFile: path, atomically: true, encoding: .utf8)
        p = try exp.run(["prepare"], environment: env)
        #expect(p.status != 0 && p.stderr.contains("DAYTONA_API_KEY_HELD_OUT is not set"), "\(p.stderr)")
        env["DAYTONA_API_KEY_HELD_OUT"] = "train-account"
        p = try exp.run(["prepare"], environment: env)
        #expect(p.status != 0 && p.stderr.contains("holds the same value as $DAYTONA_API_KEY"), "\(p.stderr)")
        env["DAYTONA_API_KEY_HELD_OUT"] = "held-out-account"
        p = try exp.run(["prepare"], environment: env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        // The baseline runs every task as held-out (the split is drawn from it): all pass.
        #expect(p.stdout.contains("baseline: 10/10 tasks pass"), "\(p.stdout)")
        // Train runs have the train account: none passes.
        let b = try exp.run(["benchmark"], environment: env)
        #expect(b.status == 0, "\(b.stderr)")
        let results = try exp.trainResults()
        #expect(results.count == (try exp.split()).train.count && results.values.allSatisfy { ($0 as? Double) == 0 }, "\(results)")
        // A gate's held-out tasks have the held-out account: all pass (the baseline tied them,
        // so the gate is rejected, with the score shown).
        let g = try exp.run(["gate"], environment: env)
        #expect(g.stdout.contains("val_score: 1.00"), "\(g.stdout)\(g.stderr)")
    }

    @Test("init without harbor installed names the tool and how to install it")
    func missingTool() throws {
        let temp = try TempDir()
        var env = ProcessInfo.processInfo.environment
        env["PATH"] = "/usr/bin:/bin"
        let r = try autoharness(["init", temp.path + "/exp", "--benchmark", "terminal-bench"], environment: env)
        #expect(r.status != 0)
        #expect(r.stderr.contains("harbor not found") && r.stderr.contains("uv tool install harbor"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: temp.path + "/exp/experiment_config.yaml"))
    }
}

enum Tau2Agents {
    static let fixture = Tools.root + "/tau2"

    /// Refunds when the user gives an order and one of `reasons`; with `snoop`, first looks
    /// for answers it must not find and prints what it saw.
    static func refunding(reasons: [String], snoop: Bool = false) -> String {
        let list = reasons.map { "\"\($0)\"" }.joined(separator: ", ")
        return """
            import errno, json, os, re
            from tau2.agent.llm_agent import LLMAgent
            from tau2.data_model.message import AssistantMessage, ToolCall

            SNOOPED = []

            def snoop():
                if SNOOPED:
                    return
                SNOOPED.append(1)
                data = os.environ["TAU2_DATA_DIR"]
                tasks = json.load(open(os.path.join(data, "tau2", "domains", "retail", "tasks.json")))
                with_criteria = sum(1 for t in tasks if any(v for v in (t.get("evaluation_criteria") or {}).values()))
                print("SNOOP tasks=%d held_out_visible=%s" % (len(tasks), any(t["id"] in ("7", "8", "9") for t in tasks)), flush=True)
                print("SNOOP task_keys=%s" % ",".join(sorted({k for t in tasks for k in t})), flush=True)
                sims = os.listdir(os.path.join(data, "simulations")) if os.path.isdir(os.path.join(data, "simulations")) else []
                try:
                    open("\(fixture)/data/tau2/domains/retail/tasks.json").read()
                    real = "readable"
                except OSError as e:
                    real = errno.errorcode[e.errno]
                print("SNOOP criteria=%d simulations=%s real=%s" % (with_criteria, sims, real), flush=True)
                files = sorted(os.path.relpath(os.path.join(d, f), data) for d, _, fs in os.walk(data) for f in fs)
                print("SNOOP files=%s" % ",".join(files), flush=True)

            class HarnessAgent(LLMAgent):
                def generate_next_message(self, message, state):
                    if \(snoop ? "True" : "False"):
                        snoop()
                    m = re.search(r"order (#W[0-9]+), the reason is ([a-z_]+)", message.content or "")
                    calls = None
                    if m and m.group(2) in [\(list)]:
                        calls = [ToolCall(id="call_1", name="refund_order", arguments={"order_id": m.group(1), "reason": m.group(2)}, requestor="assistant")]
                    return AssistantMessage(content="Done." if calls else "Sorry.", tool_calls=calls), state
            """
    }
}

@Suite("Adapters: tau-bench (tau2)", .serialized)
struct Tau2AdapterTests {
    static let pkg = Tau2Agents.fixture + "/pkg"
    static let data = Tau2Agents.fixture + "/data"
    static let env = ["FAKE_MODE": "normal", "PYTHONPATH": pkg]
    static let train = ["0", "1", "2", "3", "4", "5", "6", "[refund]order_10|damaged"]
    static let test = ["7", "8", "9", "[refund]order_11|damaged"]

    func make() throws -> Experiment {
        try requireRoot()
        let exp = try Experiment(benchmark: "tau-bench", extraArgs: ["--tool", Tau2Agents.fixture + "/bin/tau2", "--dataset", Self.data])
        try exp.set("binds", "[\(Self.pkg)]", in: "runner")
        try exp.set("env_pass", "[FAKE_MODE, PYTHONPATH]", in: "runner")
        try exp.set("allow", "[]", in: "runner")
        return exp
    }

    @Test("prepare → benchmark → gate: tau2's own split, rewards re-scored without agent.py, answers absent from the runner")
    func loop() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        let cfg = try exp.file("experiment_config.yaml")
        #expect(cfg.contains("domain: retail") && cfg.contains("seed: 300") && cfg.contains("tau2_data_dir: \(Self.data)"))
        #expect(cfg.contains("command: [\"/usr/bin/python3\"]"), "the tool's interpreter: \(cfg)")

        // The template agent answers in text only. tau2 in the runner grades every simulation
        // 1.0 (it has no criteria there); the re-scoring says 0.
        let p = try exp.run(["prepare"], environment: Self.env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/12 tasks pass"), "\(p.stdout)")
        #expect(p.stdout.contains("split: 8 train, 4 test (the benchmark's own split, seed 300)"), "\(p.stdout)")
        let split = try exp.split()
        #expect(split.train == Self.train.sorted() && split.test == Self.test.sorted())

        try exp.setAgent(Tau2Agents.refunding(reasons: ["broken"], snoop: true))
        let b = try exp.run(["benchmark"], environment: Self.env)
        #expect(b.status == 0, "\(b.stderr)")
        let rewards = try exp.trainResults()
        // Orders 0, 3, 6 have reason "broken"; the others (order 10 among them: "late") fail.
        for id in Self.train {
            #expect((rewards[id] as? Double) == (["0", "3", "6"].contains(id) ? 1 : 0), "\(id): \(rewards[id] ?? "nil")")
        }
        let odd = "%5Brefund%5Dorder_10%7Cdamaged"
        #expect(traceName("[refund]order_10|damaged") == odd)
        #expect(exp.traceFile(odd, "task.json")?.contains("\"reason\": \"late\"") == true)
        #expect(exp.traceFile(odd, "simulation.json")?.contains("Please refund order #W1010") == true)
        #expect(exp.traceFile("0", "simulation.json")?.contains("refund_order") == true)
        #expect(exp.traceFile("1", "reward_info.json")?.contains("\"action_match\": false") == true)
        // Failure records from tau2's reward breakdown: DB is what these tasks' reward_basis
        // counts, so the database mismatch is the failing check (not the action check).
        let failures = try exp.file("workspace/failures.json")
        let book = try #require(try JSONSerialization.jsonObject(with: Data(failures.utf8)) as? [String: Any])
        let records = try #require(book["records"] as? [[String: Any]])
        #expect(Set(records.map { $0["task"] as? String ?? "" }) == Set(Self.train.filter { !["0", "3", "6"].contains($0) }), "\(records)")
        #expect(records.allSatisfy { $0["check"] as? String == "db" && $0["error_class"] as? String == "db_mismatch" }, "\(records)")
        let stdout = try #require(exp.traceFile("0", "tool.stdout"))
        // simulations/ holds only this run's (still empty) checkpoint directory, not old runs
        #expect(stdout.contains("SNOOP criteria=0 simulations=['autoharness'] real=ENOENT"), "\(stdout)")
        // tau2 ran to its end (its metrics over every task included): a sanitized task that
        // breaks them fails the run, which the operator would see as "tau2 exited 1"
        #expect(!(b.stdout + b.stderr).contains("tau2 exited"), "\(b.stdout)\(b.stderr)")
        #expect(stdout.contains("autoharness: 8 simulation(s) saved"), "\(stdout)")
        #expect(stdout.contains("SNOOP tasks=8 held_out_visible=False"), "\(stdout)")
        // The runner's copy of tau2's data is built by allowlist: the domain's db and policy,
        // the user simulator's guidelines, and the two files written for this run. Not the
        // shipped results, task issues, voice tasks, other domains or old simulations, all
        // of which the fixture has.
        let copied = [
            "tau2/domains/retail/db.json", "tau2/domains/retail/policy.md", "tau2/domains/retail/split_tasks.json",
            "tau2/domains/retail/tasks.json", "tau2/user_simulator/simulation_guidelines.md",
            "tau2/user_simulator/simulation_guidelines_tools.md",
        ]
        #expect(stdout.contains("SNOOP files=\(copied.joined(separator: ","))\n"), "\(stdout)")
        #expect(stdout.contains("SNOOP task_keys=evaluation_criteria,id,initial_state,user_scenario\n"), "\(stdout)")

        try exp.setAgent(Tau2Agents.refunding(reasons: ["broken", "late", "wrong_size"]))
        let g = try exp.run(["gate"], environment: Self.env)
        #expect(g.stdout.contains("ACCEPTED"), "\(g.stdout)\(g.stderr)")
        #expect(try exp.file("workspace/results.tsv").contains("\n1\t1.0000\t"))
        for k in [7, 8, 9, 11] {
            let order = String(format: "#W%04d", 1000 + k)
            #expect(files(under: exp.root, containing: order).isEmpty, "\(order) persisted")
        }
        for id in Self.test { #expect(!(try exp.file("workspace/failures.json")).contains("\"task\" : \"\(id)\""), "held-out \(id) has a record") }
        #expect(exp.scratchMounts().isEmpty)

        // tau2's own cost of each simulation (agent_cost + user_cost: the stand-in reports
        // $0.0125 + $0.0025) joins the ledger as totals: 12 baseline tasks, 8 train tasks,
        // the gate's suite and promotions on train and its 4 held-out tasks.
        let perTask = 0.015
        #expect(abs((try exp.rows("baseline").first?["costUSD"] as? Double ?? 0) - 12 * perTask) < 1e-9)
        #expect(abs((try exp.rows("train_run").first?["costUSD"] as? Double ?? 0) - 8 * perTask) < 1e-9)
        let attempt = try #require(try exp.rows("gate_attempt").last)
        #expect(abs((attempt["heldOutCostUSD"] as? Double ?? 0) - 4 * perTask) < 1e-9, "\(attempt)")
        let gateTrain = Double((attempt["suiteTotal"] as? Int ?? 0) + (attempt["promoted"] as? [String] ?? []).count)
        #expect((attempt["trainCostUSD"] as? Double ?? 0) >= gateTrain * perTask - 1e-9)
        // The operator's status shows the totals; the coding agent's shows no dollars.
        let op = try exp.run(["status", "--operator"], environment: Self.env)
        #expect(op.stdout.contains("benchmark model spend: train $"), "\(op.stdout)")
        #expect(op.stdout.contains("held-out $\(String(format: "%.4f", 16 * perTask))"), "\(op.stdout)")
        let agentView = try exp.run(["status"], environment: Self.env)
        #expect(!agentView.stdout.contains("$") && !agentView.stdout.contains("benchmark model spend"), "\(agentView.stdout)")
    }

    @Test("a missing simulation, a premature termination, an unparsable results file and a crashed run score 0; a run that fails late keeps its checkpointed simulations", arguments: [
        "omit", "max_steps", "garbage", "crash", "crash_after",
    ])
    func malformed(mode: String) throws {
        let exp = try make()
        defer { exp.removeScratch() }
        try exp.setAgent(Tau2Agents.refunding(reasons: ["broken", "late", "wrong_size"]))
        let p = try exp.run(["prepare"], environment: Self.env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 12/12 tasks pass"), "\(p.stdout)")
        var env = Self.env
        env["FAKE_MODE"] = mode
        let b = try exp.run(["benchmark"], environment: env)
        #expect(b.status == 0, "\(b.stderr)")
        let rewards = try exp.trainResults()
        let train = Self.train.sorted()
        let zero: Set<String>
        switch mode {
        case "omit": zero = [train.last!]
        case "max_steps": zero = [train.first!]
        // tau2 fails after checkpointing two simulations: those two are still scored
        case "crash_after": zero = Set(train.dropFirst(2))
        default: zero = Set(train)
        }
        for id in train {
            #expect((rewards[id] as? Double) == (zero.contains(id) ? 0 : 1), "\(mode) \(id): \(rewards[id] ?? "nil")")
        }
        let statuses = try exp.statuses(train.map { $0 })
        for id in zero where mode != "max_steps" {
            #expect(statuses[id] == "missing_result", "\(id): \(statuses[id] ?? "-")")
        }
    }

    @Test("a failing tool's stderr reaches the operator in prepare's baseline (escape sequences made visible), never from a gate's held-out run")
    func heldOutToolErrors() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        // Refunds every order, but dies with a marker on stderr when it meets a test task's order.
        let agent = Tau2Agents.refunding(reasons: ["broken", "late", "wrong_size"]) + """

            import sys
            _generate = HarnessAgent.generate_next_message
            def generate(self, message, state):
                if any(o in (message.content or "") for o in ("#W1007", "#W1008", "#W1009", "#W1011")):
                    sys.stderr.write("MARKER held-out order seen \\x1b[2J\\n")
                    sys.stderr.flush()
                    os._exit(3)
                return _generate(self, message, state)
            HarnessAgent.generate_next_message = generate
            """
        try exp.setAgent(agent)
        // prepare's baseline runs every task in one tau2 process: it dies, and says why
        let p = try exp.run(["prepare"], environment: Self.env)
        #expect(p.status == 2, "a baseline the benchmark's setup broke is refused as a state error: \(p.stdout)\(p.stderr)")
        #expect(p.stderr.contains("tau2 exited 3: "), "\(p.stderr)")
        #expect(p.stderr.contains("MARKER held-out order seen \\u{1b}[2J"), "\(p.stderr)")
        #expect(!p.stderr.contains("\u{1B}[2J"), "a raw escape sequence reached the terminal")

        try exp.setAgent(Tau2Agents.refunding(reasons: ["broken"]))
        let ok = try exp.run(["prepare"], environment: Self.env)
        try #require(ok.status == 0, "\(ok.stdout)\(ok.stderr)")
        try exp.setAgent(agent)
        let g = try exp.run(["gate"], environment: Self.env)
        #expect(g.stderr.contains("tau2 exited 3"), "the held-out run did fail: \(g.stderr)")
        #expect(!(g.stdout + g.stderr).contains("MARKER"), "a held-out run's stderr reached the gate's output: \(g.stdout)\(g.stderr)")
    }

    @Test("a tool from a venv with an editable install (pip install -e, as tau2's README says) binds the project's source directory")
    func editableInstall() throws {
        try requireRoot()
        let venv = try TempDir()
        let made = try runProcess("/usr/bin/python3", ["-m", "venv", "--without-pip", venv.path + "/v"])
        try #require(made.status == 0, "\(made.stderr)")
        let version = try runProcess("/usr/bin/python3", ["-c", "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')"]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines)
        // hatchling's editable install: a .pth naming the project's src/ (here, the stand-in's pkg/)
        _ = try venv.file("v/lib/\(version)/site-packages/_editable_impl_tau2.pth", Self.pkg + "\n")
        let exp = try Experiment(benchmark: "tau-bench", extraArgs: ["--tool", venv.path + "/v/bin/python3", "--dataset", Self.data])
        defer { exp.removeScratch() }
        let config = try exp.file("experiment_config.yaml")
        #expect(config.contains("\"\(Self.pkg)\""), "the editable source is not bound: \(config)")
        try exp.set("env_pass", "[FAKE_MODE]", in: "runner")
        try exp.set("allow", "[]", in: "runner")
        // No PYTHONPATH: tau2 is importable in the sandbox only through the venv's .pth.
        let p = try exp.run(["prepare"], environment: ["FAKE_MODE": "normal"])
        #expect(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/12 tasks pass"), "\(p.stdout)\(p.stderr)")
    }

    @Test("a refused syscall in the scorer's sandbox (no agent.py there) is recorded against the benchmark tool, not agent.py")
    func scorerViolationsAttributed() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        let p = try exp.run(["prepare"], environment: Self.env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        var env = Self.env
        env["FAKE_MODE"] = "scorer_probe"
        let b = try exp.run(["benchmark"], environment: env)
        #expect(b.status == 0, "\(b.stderr)")
        let rows = try exp.rows("violation").filter { ($0["actor"] as? String)?.hasSuffix("(train run)") == true }
        let tool = rows.filter { ($0["actor"] as? String) == "benchmark tool (train run)" }
        #expect(tool.contains { ($0["detail"] as? String)?.hasPrefix("syscall pivot_root ×") == true }, "\(rows)")
        #expect(!rows.contains { ($0["actor"] as? String)?.hasPrefix("agent.py") == true }, "blamed on agent.py: \(rows)")
    }

    @Test("binding tau2's data directory into the runner or the coding agent is refused: it holds every test task's expected actions")
    func dataNeverBound() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        try exp.set("binds", "[\(Self.pkg), \(Tau2Agents.fixture)]", in: "runner")
        let p = try exp.run(["prepare"], environment: Self.env)
        #expect(p.status != 0)
        #expect(p.stderr.contains("contains tau2_data_dir"), "\(p.stderr)")
        // The coding agent's binds too, at their line (CodingAgentBindsTests).
        try exp.set("binds", "[\(Self.pkg)]", in: "runner")
        try exp.set("binds", "[\(Tau2Agents.fixture)]", in: "coding_agent")
        let c = try exp.run(["prepare"], environment: Self.env)
        #expect(c.status == 2 && c.stderr.contains("coding_agent.binds: \(Tau2Agents.fixture) contains tau2_data_dir"), "\(c.stderr)")
    }
}

enum BirdAgents {
    static let fixture = Tools.root + "/bird"
    static let adk = fixture + "/BIRD-Interact/BIRD-Interact-ADK"
    static let tables = ["aliens", "comets", "stars", "moons", "planets", "nebulae", "quasars", "pulsars", "asteroids", "galaxies"]

    /// A system agent service (`agent.agent:app`): health and session routes, and for each
    /// `/run_session` the user asked which table is meant, then `session` (Python at no
    /// indentation, with `tid`, `answer` and `table` set; it returns the session's reply).
    /// `first`: a line run before that (no indentation).
    static func systemAgent(imports: String, session: String, before: String = "", first: String = "") -> String {
        """
        \(imports)
        from shared import client

        \(before)

        def app(method, path, body):
            if path == "/health":
                return 200, {"status": "ok"}
            if path == "/init_session":
                return 200, {"status": "ok"}
            if path != "/run_session":
                return 404, {}
            \(first)
            tid = body["task_id"]
            answer = client.user("/ask", {"task_id": tid, "question": "Which table do you mean?"})["answer"]
            table = answer.rsplit(" ", 1)[-1]
        \(session.split(separator: "\n", omittingEmptySubsequences: false).map { $0.isEmpty ? "" : "    " + $0 }.joined(separator: "\n"))
        """
    }

    /// A system agent service that asks the user which table is meant and submits a count
    /// for the tables it knows (and the follow-up when `followUp`).
    static func solver(tables: [String], followUp: Bool = true, snoop: Bool = false) -> String {
        let list = tables.map { "\"\($0)\"" }.joined(separator: ", ")
        return systemAgent(imports: "import errno, os", session: """
            total, p1, p2, traj = 0.0, False, False, []
            if table in [\(list)]:
                v = client.db("/submit", {"task_id": tid, "sql": "SELECT COUNT(*) FROM %s" % table})
                traj.append({"type": "tool", "tool": "submit_sql", "result": v["message"]})
                total, p1 = total + v["reward"], v["passed"]
                if v.get("has_follow_up") and \(followUp ? "True" : "False"):
                    w = client.db("/submit", {"task_id": tid, "sql": "SELECT MAX(id) FROM %s" % table})
                    traj.append({"type": "tool", "tool": "submit_sql", "result": w["message"]})
                    total, p2 = total + w["reward"], w["passed"]
            return 200, {"state": {"total_reward": total, "phase1_completed": p1, "phase2_completed": p2},
                         "dialogue_history": [{"role": "agent", "content": "Which table do you mean?"}, {"role": "user", "content": answer}],
                         "tool_trajectory": traj, "final_response": "done"}
            """, before: """
            def snoop():
                try:
                    open("\(adk)/bird-interact-lite/bird_interact_data.jsonl").read()
                    gold = "readable"
                except OSError as e:
                    gold = errno.errorcode[e.errno]
                tasks = open("/work/in/tasks.jsonl").read()
                print("SNOOP gold=%s tasks_have_sol_sql=%s tasks_have_query=%s adk_data=%s" % (
                    gold, "sol_sql" in tasks, "count the rows" in tasks, os.path.exists("/work/adk/bird-interact-lite")), flush=True)
                served = []
                for i, t in enumerate([\(BirdAgents.tables.map { "\"\($0)\"" }.joined(separator: ", "))]):
                    tid = "%s_%d" % (t, i + 1)
                    try:
                        client.user("/init_task", {"task_id": tid, "task_data": {"instance_id": tid}})
                        served.append(tid)
                    except Exception:
                        pass
                print("SNOOP served=%s" % ",".join(sorted(served)), flush=True)
            """, first: snoop ? "snoop()" : "")
    }
}

@Suite("Adapters: bird-interact", .serialized)
struct BirdAdapterTests {
    static let site = BirdAgents.fixture + "/site"
    static let env = ["FAKE_MODE": "normal", "PYTHONPATH": site]
    static func id(_ k: Int) -> String { "\(BirdAgents.tables[k])_\(k + 1)" }

    @Test("init names the ADK requirements the tool's Python lacks (by distribution name, X-binary satisfied by X), and accepts a Python that has them")
    func requirementsChecked() throws {
        try requireRoot()
        let temp = try TempDir()
        let repo = temp.path + "/BIRD-Interact"
        let cp = try runProcess("/bin/cp", ["-a", BirdAgents.fixture + "/BIRD-Interact", repo])
        try #require(cp.status == 0, "\(cp.stderr)")
        let requirements = repo + "/BIRD-Interact-ADK/requirements.txt"
        try "# Core\nautoharness-absent-dist>=1.0  # not installed anywhere\npip>=1\n-r other.txt\n\nuvicorn[standard]>=0.29\n"
            .write(toFile: requirements, atomically: true, encoding: .utf8)
        let r = try autoharness(["init", temp.path + "/exp", "--benchmark", "bird-interact", "--repo", repo, "--tool", "/usr/bin/python3"])
        #expect(r.status != 0)
        #expect(r.stderr.contains("lacks autoharness-absent-dist") && r.stderr.contains(requirements), "\(r.stderr)")
        #expect(!r.stderr.contains("lacks autoharness-absent-dist, pip") && !r.stderr.contains("other.txt,"), "pip is installed; options are not names: \(r.stderr)")
        try "pip>=1\npip-binary>=1  # as psycopg2-binary is met by psycopg2\n".write(toFile: requirements, atomically: true, encoding: .utf8)
        let ok = try autoharness(["init", temp.path + "/exp2", "--benchmark", "bird-interact", "--repo", repo, "--tool", "/usr/bin/python3"])
        #expect(ok.status == 0, "\(ok.stderr)")
    }

    func make() throws -> Experiment {
        try requireRoot()
        let exp = try Experiment(benchmark: "bird-interact", extraArgs: ["--repo", BirdAgents.fixture + "/BIRD-Interact", "--tool", "/usr/bin/python3"])
        try exp.set("pg_host", BirdAgents.fixture + "/pg")
        try exp.set("binds", "[\(Self.site)]", in: "runner")
        try exp.set("env_pass", "[FAKE_MODE, PYTHONPATH]", in: "runner")
        try exp.set("allow", "[]", in: "runner")
        return exp
    }

    @Test("a --tool that is a virtual environment's python (a link to the base interpreter) binds the venv: its packages are there in the sandbox")
    func venvTool() throws {
        try requireRoot()
        let venv = try TempDir()
        let made = try runProcess("/usr/bin/python3", ["-m", "venv", "--without-pip", venv.path + "/v"])
        try #require(made.status == 0, "\(made.stderr)")
        let version = try runProcess("/usr/bin/python3", ["-c", "import sys; print(f'python{sys.version_info[0]}.{sys.version_info[1]}')"]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines)
        // The graders' web server stand-in, installed only in the venv.
        let site = venv.path + "/v/lib/\(version)/site-packages"
        _ = try runProcess("/bin/cp", ["-r", Self.site + "/uvicorn", site + "/"])
        let exp = try Experiment(benchmark: "bird-interact", extraArgs: ["--repo", BirdAgents.fixture + "/BIRD-Interact", "--tool", venv.path + "/v/bin/python3"])
        defer { exp.removeScratch() }
        let config = try exp.file("experiment_config.yaml")
        #expect(config.contains("\"\(venv.path)/v\""), "the venv is not bound: \(config)")
        try exp.set("pg_host", BirdAgents.fixture + "/pg")
        try exp.set("allow", "[]", in: "runner")
        try exp.set("env_pass", "[FAKE_MODE]", in: "runner")
        let p = try exp.run(["prepare"], environment: ["FAKE_MODE": "normal"])
        #expect(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/10 tasks pass"), "\(p.stdout)\(p.stderr)")
    }

    @Test("graders that die before they are ready fail the run with the reason; the supervisor does not die of SIGPIPE signalling them")
    func servicesDieAtOnce() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        let site = try TempDir()
        try FileManager.default.createDirectory(atPath: site.path + "/uvicorn", withIntermediateDirectories: true)
        _ = try site.file("uvicorn/__init__.py", "raise SystemExit('grader start-up failed')\n")
        try exp.set("binds", "[\(site.path)]", in: "runner")
        let p = try exp.run(["prepare"], environment: ["FAKE_MODE": "normal", "PYTHONPATH": site.path])
        #expect(p.status == 2, "exit \(p.status) (141 is SIGPIPE): \(p.stdout)\(p.stderr)")
        #expect(p.stderr.contains("bird services did not become ready"), "\(p.stderr)")
        #expect(p.stderr.contains("every task of the baseline failed before agent.py could be judged (10 missing_result)"), "\(p.stderr)")
        #expect(!p.stdout.contains("baseline:"))
        #expect(try exp.rows("split").isEmpty, "a broken baseline was recorded")
    }

    @Test("prepare → benchmark → gate: rewards from the DB environment's record, gold never on the agent's side")
    func loop() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        #expect(try exp.file("experiment_config.yaml").contains("mode: a-interact"))
        // The stock system agent submits SELECT 1: nothing passes.
        let p = try exp.run(["prepare"], environment: Self.env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/10 tasks pass"), "\(p.stdout)")
        let split = try exp.split()

        // Knows aliens..planets, skips follow-ups: those tasks get 0.7 (pass), the rest 0.
        try exp.setAgent(BirdAgents.solver(tables: Array(BirdAgents.tables.prefix(5)), followUp: false, snoop: true))
        let b = try exp.run(["benchmark"], environment: Self.env)
        #expect(b.status == 0, "\(b.stderr)")
        let rewards = try exp.trainResults()
        for id in split.train {
            let k = BirdAgents.tables.firstIndex { id.hasPrefix($0 + "_") }!
            #expect((rewards[id] as? Double) == (k < 5 ? 0.7 : 0), "\(id): \(rewards[id] ?? "nil")")
            #expect(exp.traceFile(id, "session.json")?.contains("Which table do you mean?") == true)
            if k < 5 { #expect(exp.traceFile(id, "submissions.json")?.contains("\"passed\" : true") == true) }
        }
        // No trace carries gold: sol_sql and test cases stay with the graders (the clear query
        // reaches traces only as the user's answers in the dialogue).
        #expect(files(under: exp.root + "/workspace", containing: "\"sol_sql\"").isEmpty)
        #expect(files(under: exp.root + "/workspace", containing: "\"test_cases\"").isEmpty)
        #expect(files(under: exp.root + "/workspace", containing: "SELECT MAX(id)").isEmpty)
        let stdout = try #require(exp.traceFile(split.train[0], "tool.stdout"))
        #expect(stdout.contains("SNOOP gold=ENOENT tasks_have_sol_sql=False tasks_have_query=False adk_data=False"), "\(stdout)")
        // The graders serve this run's tasks only: no held-out task can be opened from a train run.
        #expect(stdout.contains("SNOOP served=\(split.train.sorted().joined(separator: ","))\n"), "\(stdout)")

        // All tables and follow-ups: 1.0 on every task (0.7 + 0.3 where there is a follow-up).
        try exp.setAgent(BirdAgents.solver(tables: BirdAgents.tables))
        let g = try exp.run(["gate"], environment: Self.env)
        #expect(g.stdout.contains("ACCEPTED"), "\(g.stdout)\(g.stderr)")
        for id in split.test { #expect(files(under: exp.root, containing: "\"task_id\": \"\(id)\"").isEmpty) }
        #expect(exp.scratchMounts().isEmpty)
    }

    @Test("the orchestrator's own numbers are not the score; missing and crashed runs score 0", arguments: ["lie", "omit", "crash"])
    func untrusted(mode: String) throws {
        let exp = try make()
        defer { exp.removeScratch() }
        let p = try exp.run(["prepare"], environment: Self.env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        try exp.setAgent(BirdAgents.solver(tables: BirdAgents.tables, followUp: false))
        var env = Self.env
        env["FAKE_MODE"] = mode
        let b = try exp.run(["benchmark"], environment: env)
        #expect(b.status == 0, "\(b.stderr)")
        let train = try exp.split().train.sorted()
        let rewards = try exp.trainResults()
        let statuses = try exp.statuses(train)
        for id in train {
            let zero = mode == "crash" || (mode == "omit" && id == train.last!)
            // "lie": the orchestrator reports 1.0 everywhere; the DB environment granted 0.7.
            #expect((rewards[id] as? Double) == (zero ? 0 : 0.7), "\(mode) \(id): \(rewards[id] ?? "nil")")
            if zero { #expect(statuses[id] == "missing_result", "\(id): \(statuses[id] ?? "-")") }
        }
    }

    @Test("pg_host must be a socket directory, and runner.binds may not expose the ADK or its data")
    func configuration() throws {
        let exp = try make()
        defer { exp.removeScratch() }
        try exp.set("pg_host", "127.0.0.1")
        var p = try exp.run(["prepare"], environment: Self.env)
        #expect(p.status != 0 && p.stderr.contains("Unix socket"), "\(p.stderr)")
        try exp.set("pg_host", BirdAgents.fixture + "/pg")
        try exp.set("binds", "[\(Self.site), \(BirdAgents.fixture)]", in: "runner")
        p = try exp.run(["prepare"], environment: Self.env)
        #expect(p.status != 0 && p.stderr.contains("exposes the BIRD-Interact data"), "\(p.stderr)")
    }
}

@Suite("Adapters: init names what is missing and how to get it")
struct AdapterInitTests {
    @Test("tau-bench without its data and bird-interact without its checkout", arguments: [
        (["--benchmark", "tau-bench", "--tool", Tools.root + "/tau2/bin/tau2"], "tau2's data directory"),
        (["--benchmark", "bird-interact", "--tool", "/usr/bin/python3"], "BIRD-Interact checkout"),
        (["--benchmark", "bird-interact", "--tool", "/usr/bin/python3", "--repo", "/nonexistent"], "git clone"),
        (["--benchmark", "tau-bench", "--tool", "/nonexistent/tau2", "--dataset", Tools.root + "/tau2/data"], "pip install"),
        (["--benchmark", "nonsense"], "one of: local, terminal-bench, tau-bench, bird-interact, command, bfcl"),
    ])
    func missing(args: [String], hint: String) throws {
        let temp = try TempDir()
        var env = ProcessInfo.processInfo.environment
        env["TAU2_DATA_DIR"] = nil
        env["BIRD_REPO"] = nil
        let r = try autoharness(["init", temp.path + "/exp"] + args, environment: env)
        #expect(r.status != 0)
        #expect(r.stderr.contains(hint), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: temp.path + "/exp/experiment_config.yaml"))
    }
}
