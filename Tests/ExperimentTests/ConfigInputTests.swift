import Foundation
import Testing
import TestSupport
@testable import Experiment
@testable import ExperimentModel

@Suite("Config inputs")
struct ConfigInputTests {
    @Test("a duplicate key is refused at the repeat's file:line:column, naming the first, without quoting the file",
          arguments: [
            // top level
            ("benchmark: local\ndataset: d\nthreshold: 0.5\n# a comment\nthreshold: 0.9\n", 5, 1, 3),
            // nested, under runner:, after a blank line
            ("benchmark: local\ndataset: d\nrunner:\n  timeout: 10\n\n  timeout: 20\nthreshold: 0.5\n", 6, 3, 4),
          ])
    func duplicateKey(text: String, line: Int, column: Int, firstLine: Int) throws {
        do {
            _ = try ExperimentConfig.parse(text, file: "exp/experiment_config.yaml")
            Issue.record("a config with a duplicate key was accepted")
        } catch let e as ConfigErrors {
            let message = "\(e)"
            #expect(message.contains("exp/experiment_config.yaml:\(line):\(column): duplicate key"), "\(message)")
            #expect(message.contains("(first at line \(firstLine), column \(column))"), "\(message)")
            #expect(!message.contains("benchmark: local"), "the file is quoted: \(message)")
        }
    }
}

@Suite("network allowlists in the config")
struct NetworkAllowConfigTests {
    @Test("a pattern broader than one domain's hosts is refused at its line (it would take in the model APIs under it); *. and two labels pass",
          arguments: ["'*.com:443'", "'*:80'", "'*.:443'", "'a.*.example.com:443'", "'*.*.example.com:443'"])
    func broadPatternRefused(entry: String) throws {
        do {
            _ = try ExperimentConfig.parse("benchmark: local\ndataset: d\nrunner:\n  network:\n    allow: [\(entry)]\n", file: "exp/experiment_config.yaml")
            Issue.record("\(entry) was accepted")
        } catch let e as ConfigErrors {
            #expect("\(e)".contains("exp/experiment_config.yaml:5") && "\(e)".contains("too broad a pattern"), "\(e)")
        }
        let fine = try ExperimentConfig.parse("benchmark: local\ndataset: d\nrunner:\n  network:\n    allow: ['*.pythonhosted.org:443']\n", file: "f")
        #expect(fine.runner.networkAllow == ["*.pythonhosted.org:443"])
    }
}

@Suite("sandbox.verifier_tools")
struct VerifierToolsConfigTests {
    static func refusal(_ text: String) -> String? {
        do {
            _ = try ExperimentConfig.parse(text, file: "exp/experiment_config.yaml").makeAdapter(root: "/nonexistent-root", checkTools: false)
            return nil
        } catch {
            return "\(error)"
        }
    }

    @Test("refused where autoharness runs no verifier (it would be silently ignored), and where the directory holds no toolbox")
    func checked() throws {
        let command = Self.refusal("benchmark: command\ntasks: [a]\nrunner:\n  command: [python3, r.py, \"{output}\"]\nsandbox:\n  verifier_tools: /nonexistent\n")
        #expect(command?.contains("sandbox.verifier_tools: only the verifiers autoharness runs get it") == true
                    && command?.contains("benchmark: command grades elsewhere") == true, "\(command ?? "accepted")")
        let remote = Self.refusal("benchmark: terminal-bench\ndataset: /nonexistent\nenv_provider: e2b\nsandbox:\n  verifier_tools: /nonexistent\n")
        #expect(remote?.contains("benchmark: terminal-bench with env_provider: e2b grades elsewhere") == true, "\(remote ?? "accepted")")
        let empty = Self.refusal("benchmark: local\ndataset: \(Experiment.fixture)\nsandbox:\n  verifier_tools: /nonexistent\n")
        #expect(empty?.contains("/nonexistent/bin/uv (uv) is missing") == true && empty?.contains("scripts/install-verifier-tools") == true,
                "\(empty ?? "accepted")")
    }
}

@Suite("prepare warns of test scripts that fetch their judge")
struct VerifierToolsWarningTests {
    @Test("a task whose test.sh fetches uv: prepare says it scores 0 offline and how to provide the tools; with sandbox.verifier_tools set it says nothing")
    func fetchingScriptsWarned() throws {
        let bench = try EditableBenchmark()
        try bench.write("tasks/add-0/tests/test.sh", "#!/bin/bash\ncurl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh\nsource $HOME/.local/bin/env\n"
                        + "uvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA\n")
        let warned = try bench.experiment()
        let p = try warned.run("prepare")
        #expect(p.status == 0 && (p.stdout + p.stderr).contains("1 task(s) have test scripts that fetch uv or run uvx ("), "\(p.stdout)\(p.stderr)")
        #expect((p.stdout + p.stderr).contains("scripts/install-verifier-tools"))

        let r = try runProcess("/bin/bash", [Built.packageRoot + "/scripts/install-verifier-tools", "--print"])
        let tools = try #require(r.status == 0 ? r.stdout.split(separator: " ").last?.trimmingCharacters(in: .whitespacesAndNewlines) : nil,
                                 "the verifier tools are not installed: run scripts/install-verifier-tools")
        let quiet = try EditableBenchmark()
        try quiet.write("tasks/add-0/tests/test.sh", "#!/bin/bash\nuvx -p 3.13 -w pytest==8.4.1 pytest /tests/test_outputs.py -rA\n")
        let exp = try quiet.experiment()
        let path = exp.root + "/experiment_config.yaml"
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false).map { $0.contains("verifier_tools:") ? "  verifier_tools: \(tools)" : String($0) }
        try lines.joined(separator: "\n").write(toFile: path, atomically: true, encoding: .utf8)
        let q = try exp.run("prepare")
        #expect(q.status == 0 && !(q.stdout + q.stderr).contains("fetch uv or run uvx"), "\(q.stdout)\(q.stderr)")
    }
}

/// A copy of the `arith` fixture benchmark that a test may change, and an experiment on it.
struct EditableBenchmark {
    let temp: TempDir
    var directory: String { temp.path + "/bench" }

    init() throws {
        temp = try TempDir()
        let r = try runProcess("/bin/cp", ["-a", Experiment.fixture, directory])
        try #require(r.status == 0, "\(r.stderr)")
    }

    func write(_ relative: String, _ text: String) throws {
        try text.write(toFile: directory + "/" + relative, atomically: true, encoding: .utf8)
    }

    /// `init` on this benchmark (with `config` lines replaced, as `Experiment(config:)` does).
    func experiment(config: [String: String] = [:]) throws -> Experiment {
        let root = temp.path + "/exp"
        let r = try autoharness(["init", root, "--benchmark", "local", "--dataset", directory])
        try #require(r.status == 0, "init failed: \(r.stderr)")
        var text = try String(contentsOfFile: root + "/experiment_config.yaml", encoding: .utf8)
        for (k, v) in config { text = text.replacingOccurrences(of: "\n  \(k): ", with: "\n  \(k): \(v) #") }
        try text.write(toFile: root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
        return Experiment(existing: root, temp: temp)
    }
}

@Suite("Experiment inputs: caps, bounds, one broken task, who hit a limit")
struct ExperimentInputTests {
    @Test("a 100 MB experiment config is refused by its size before it is read, naming the file, the size and the cap")
    func oversizedConfig() throws {
        let exp = try Experiment(prepare: false)
        let path = exp.root + "/experiment_config.yaml"
        // Sparse: no disk used, and a reader that read it whole would spend 100 MB (and YAML 3x that).
        #expect(truncate(path, 100_000_000) == 0)
        let r = try exp.run("status")
        #expect(r.status != 0)
        #expect(r.stderr.contains("\(path): cannot read the experiment config: 100000000 bytes (95.3 MiB), over the 1 MiB cap for an experiment config"), "\(r.stderr)")
        #expect(r.stderr.utf8.count < 1000, "\(r.stderr.prefix(300))")
    }

    @Test("numeric keys the adapters read are bounded at file:line, naming the value and the bound", arguments: [
        ("agent_timeout_multiplier: 1e300\n", "agent_timeout_multiplier: must be a number from 0.01 to 100 (got '1e300')"),
        ("seed: 99999999999999999999\n", "seed: must be a whole number from 0 to 4294967295 (got '99999999999999999999')"),
        ("pg_port: 70000\n", "pg_port: must be a whole number from 1 to 65535 (got '70000')"),
        ("patience: -1\n", "patience: must be a whole number from 0 to 100 (got '-1')"),
        ("per_task_timeout: 1e300\n", "per_task_timeout: must be a number from 1 to 86400 (got '1e300')"),
        ("system_agent_port: 80\n", "system_agent_port: must be a whole number from 1024 to 65535 (got '80')"),
    ])
    func boundedUpstreamNumbers(line: String, message: String) throws {
        #expect(try Self.refusal(line) == "exp/experiment_config.yaml:3: \(message)")
    }

    @Test("a benchmark's own keys are typed by its settings type where they are read: a choice outside its list is refused at file:line even for another benchmark; values reach only the configured benchmark's fields")
    func typedUpstreamKeys() throws {
        let refused = try #require(try Self.refusal("mode: x-interact\n"))
        #expect(refused.hasPrefix("exp/experiment_config.yaml:3: mode:") && refused.contains("a-interact") && refused.contains("c-interact"), "\(refused)")
        // Harbor's provider is a choice too, refused at its line rather than when the adapter is
        // made. tau2's domain is any domain of the installed tau2's data (Tau3Tests.unknownDomain).
        #expect(try Self.refusal("env_provider: k8s\n") == "exp/experiment_config.yaml:3: env_provider: 'k8s' is not allowed (allowed: local, docker, daytona, e2b, modal, runloop)")
        #expect(try Self.refusal("domain: mall\n") == nil)
        // BFCL's categories: a list, each one BFCL's, none twice, not empty.
        #expect(try Self.refusal("categories: [simple_python, simple_java]\n")?.hasPrefix("exp/experiment_config.yaml:3: categories: 'simple_java' is not allowed (allowed: simple_python, multiple,") == true)
        #expect(try Self.refusal("categories: [irrelevance, irrelevance]\n") == "exp/experiment_config.yaml:3: categories: 'irrelevance' is listed twice")
        #expect(try Self.refusal("categories: []\n")?.hasPrefix("exp/experiment_config.yaml:3: categories: expected at least one of simple_python") == true)
        #expect(try Self.refusal("tasks_per_category: 0\n") == "exp/experiment_config.yaml:3: tasks_per_category: must be a whole number from 1 to 100000 (got '0')")
        let bfcl = try ExperimentConfig.parse("benchmark: bfcl\ncategories: [multi_turn_base, irrelevance]\ntasks_per_category: 7\nbfcl_python: /v/bin/python3\n", file: "f")
        #expect(BfclKind().settings(bfcl) == BfclKind.Settings(categories: ["multi_turn_base", "irrelevance"], tasksPerCategory: 7, bfclPython: "/v/bin/python3"))
        let keys = """
            mode: c-interact
            seed: 300
            pg_port: 5433
            agent_timeout_multiplier: 2.5
            env_provider: local
            user_model: m
            reasoning_effort: high
            """
        let bird = try ExperimentConfig.parse("benchmark: bird-interact\n" + keys, file: "f")
        var expected = BirdInteractKind.Settings()
        (expected.mode, expected.pgPort, expected.userModel) = ("c-interact", 5433, "m")
        #expect(BirdInteractKind().settings(bird) == expected)
        #expect(bird.reasoningEffort == "high")
        let tau = try ExperimentConfig.parse("benchmark: tau-bench\n" + keys, file: "f")
        #expect(TauBenchKind().settings(tau).seed == 300 && TauBenchKind().settings(tau).userModel == "m")
        let harbor = try ExperimentConfig.parse("benchmark: terminal-bench\n" + keys, file: "f")
        #expect(TerminalBenchKind().settings(harbor).agentTimeoutMultiplier == 2.5 && TerminalBenchKind().settings(harbor).provider == "local")
        #expect(TerminalBenchKind().configured(harbor) == "benchmark: terminal-bench with env_provider: local")
        // Another benchmark's settings are not the configured one's: the defaults.
        #expect(BirdInteractKind().settings(harbor) == BirdInteractKind.Settings())
        let local = try ExperimentConfig.parse("benchmark: local\ndataset: d\n" + keys, file: "f")
        #expect(local.benchmarkSettings == BenchmarkSettingsBox(NoSettings()) && local != harbor)
    }

    @Test("gate.accept: margin or at_least_best; min_improvement only with margin, refused at its own line")
    func acceptRule() throws {
        #expect(try Self.refusal("gate:\n  accept: at_least_best\n") == nil)
        #expect(try Self.refusal("gate:\n  accept: sometimes\n")?.hasPrefix("exp/experiment_config.yaml:4: gate.accept:") == true)
        let both = try Self.refusal("gate:\n  accept: at_least_best\n  min_improvement: 0.1\n")
        #expect(both?.hasPrefix("exp/experiment_config.yaml:5: gate.min_improvement: only with gate.accept: margin") == true, "\(both ?? "accepted")")
        let c = try ExperimentConfig.parse("benchmark: local\ndataset: d\ngate:\n  accept: at_least_best\n", file: "f")
        #expect(c.gate.accept == .atLeastBest)
        #expect(GateRules.ruleText(testTasks: 4, config: c).contains("a tie passes"))
        #expect(GateRules.ruleText(testTasks: 0, config: ExperimentConfig(benchmark: "local")) == "gate.accept: margin: the test split is empty, so no gate can be accepted")
        #expect(GateRules.ruleText(testTasks: 4, config: ExperimentConfig(benchmark: "local"))
            == "gate.accept: margin (min_improvement auto = 1/4): a gate is accepted when at least 2 more held-out task(s) pass than under the best accepted agent.py (a tie fails)")
    }

    @Test("gate.trials from 1 to 20; gate.accept: paired with gate.alpha; gate.disclosure: ladder with gate.ladder_step; each refused at its line under another rule")
    func trialsAndPaired() throws {
        let c = try ExperimentConfig.parse("benchmark: local\ndataset: d\ngate:\n  accept: paired\n  trials: 3\n  alpha: 0.01\n", file: "f")
        #expect(c.gate.accept == .paired && c.gate.trials == 3 && c.gate.alpha == 0.01)
        #expect(GateRules.ruleText(testTasks: 4, config: c).hasPrefix("gate.accept: paired (alpha 0.01, 3 trial(s) per held-out task)"))
        #expect(try ExperimentConfig.parse("benchmark: local\ndataset: d\n", file: "f").gate.trials == 1)
        #expect(try Self.refusal("gate:\n  trials: 0\n")?.hasPrefix("exp/experiment_config.yaml:4: gate.trials:") == true)
        #expect(try Self.refusal("gate:\n  trials: 21\n")?.hasPrefix("exp/experiment_config.yaml:4: gate.trials:") == true)
        let alpha = try Self.refusal("gate:\n  trials: 3\n  alpha: 0.05\n")
        #expect(alpha?.hasPrefix("exp/experiment_config.yaml:5: gate.alpha: only with gate.accept: paired") == true, "\(alpha ?? "accepted")")
        #expect(try Self.refusal("gate:\n  accept: paired\n  alpha: 0.9\n")?.hasPrefix("exp/experiment_config.yaml:5: gate.alpha:") == true)
        #expect(try ExperimentConfig.parse("benchmark: local\ndataset: d\ngate:\n  disclosure: ladder\n  ladder_step: 0.05\n", file: "f").gate.ladderStep == 0.05)
        let step = try Self.refusal("gate:\n  disclosure: rounded\n  ladder_step: 0.05\n")
        #expect(step?.hasPrefix("exp/experiment_config.yaml:5: gate.ladder_step: only with gate.disclosure: ladder") == true, "\(step ?? "accepted")")
        let margin = try Self.refusal("gate:\n  accept: paired\n  min_improvement: 0.1\n")
        #expect(margin?.hasPrefix("exp/experiment_config.yaml:5: gate.min_improvement: only with gate.accept: margin (paired") == true, "\(margin ?? "accepted")")
    }

    @Test("executor: ray is refused without its address, for a benchmark that runs its own tool other than command, bfcl, tau-bench, inspect and bird-interact (and their held-out VM), and with the verifier tools in a node's held-out VM; with a held-out VM, or with the verifier tools, it is taken")
    func rayExecutorChecked() throws {
        #expect(try Self.refusal("executor:\n  kind: ray\n")?.hasPrefix("exp/experiment_config.yaml:4: executor.address: missing") == true)
        #expect(try Self.refusal("executor:\n  kind: ray\n  address: 10.0.0.5:6379\ngate:\n  held_out_runtime: vm\n") == nil)
        #expect(try Self.refusal("executor:\n  kind: ray\n  address: 10.0.0.5:6379\n") == nil)
        #expect(try Self.refusal("executor:\n  kind: kubernetes\n")?.contains("executor.kind") == true)
        // The verifier tools go to the nodes' sandboxes (a request names them), not yet into a node's VM.
        #expect(try Self.refusal("sandbox:\n  verifier_tools: /opt/tools\nexecutor:\n  kind: ray\n  address: 10.0.0.5:6379\n") == nil)
        #expect(try Self.refusal("sandbox:\n  verifier_tools: /opt/tools\nexecutor:\n  kind: ray\n  address: 10.0.0.5:6379\ngate:\n  held_out_runtime: vm\n")?
            .hasPrefix("exp/experiment_config.yaml:6: executor: ray with sandbox.verifier_tools and gate.held_out_runtime: vm") == true)
        // A command, BFCL, tau-bench, inspect or bird-interact benchmark's shards run on the nodes, and Terminal-Bench's tasks (not in a node's VM).
        let command = "benchmark: command\nrunner:\n  command: [x, '{output}']\ntasks: [a]\nexecutor:\n  kind: ray\n  address: h:1\n"
        #expect((try? ExperimentConfig.parse(command, file: "f")) != nil, "a command benchmark on Ray")
        #expect((try? ExperimentConfig.parse(command + "gate:\n  held_out_runtime: vm\n", file: "f")) == nil, "a command benchmark's held-out VM on Ray")
        #expect((try? ExperimentConfig.parse("benchmark: bfcl\nexecutor:\n  kind: ray\n  address: h:1\n", file: "f")) != nil, "a bfcl benchmark on Ray")
        #expect((try? ExperimentConfig.parse("benchmark: tau-bench\nexecutor:\n  kind: ray\n  address: h:1\n", file: "f")) != nil, "a tau-bench benchmark on Ray")
        #expect((try? ExperimentConfig.parse("benchmark: inspect\nexecutor:\n  kind: ray\n  address: h:1\n", file: "f")) != nil, "an inspect benchmark on Ray")
        #expect((try? ExperimentConfig.parse("benchmark: bird-interact\nexecutor:\n  kind: ray\n  address: h:1\n", file: "f")) != nil, "a bird-interact benchmark on Ray")
        #expect((try? ExperimentConfig.parse("benchmark: bird-interact\nexecutor:\n  kind: ray\n  address: h:1\ngate:\n  held_out_runtime: vm\n", file: "f")) == nil,
                "a bird-interact benchmark's held-out VM on Ray")
        #expect((try? ExperimentConfig.parse("benchmark: terminal-bench\nexecutor:\n  kind: ray\n  address: h:1\n", file: "f")) != nil, "a terminal-bench benchmark on Ray")
        #expect((try? ExperimentConfig.parse("benchmark: terminal-bench\nexecutor:\n  kind: ray\n  address: h:1\ngate:\n  held_out_runtime: vm\n", file: "f")) == nil,
                "a terminal-bench benchmark's held-out VM on Ray")
    }

    @Test("gate.infra_retries: off by default; 0 to 5; refused where no inference gate counts a task's vendor failures (a local benchmark, a runner with no model API); a held-out VM and a Ray node count them too")
    func infraRetries() throws {
        let command = "benchmark: command\ntasks: [a]\nrunner:\n  command: [x, '{output}']\n  network: {inference: [api.openai.com:443]}\n"
        func parse(_ gate: String, runner: String = command) throws -> ExperimentConfig {
            try ExperimentConfig.parse(runner + "gate:\n" + gate, file: "exp/experiment_config.yaml")
        }
        func refused(_ gate: String, runner: String = command) -> String? {
            do {
                _ = try parse(gate, runner: runner)
                return nil
            } catch {
                return "\(error)"
            }
        }
        #expect(try parse("  held_out_runtime: host\n").gate.infraRetries == 0)
        #expect(try parse("  held_out_runtime: host\n  infra_retries: 2\n").gate.infraRetries == 2)
        #expect(refused("  held_out_runtime: host\n  infra_retries: 6\n")?.contains("gate.infra_retries") == true)
        // A held-out VM counts them per task too (the guest tags each task's streams).
        #expect(try parse("  held_out_runtime: vm\n  infra_retries: 1\n").gate.infraRetries == 1)
        let none = refused("  held_out_runtime: host\n  infra_retries: 1\n", runner: "benchmark: command\ntasks: [a]\nrunner:\n  command: [x, '{output}']\n")
        #expect(none?.contains("gate.infra_retries: needs runner.network.inference") == true, "\(none ?? "accepted")")
        let local = try Self.refusal("gate:\n  held_out_runtime: host\n  infra_retries: 1\n")
        #expect(local?.contains("gate.infra_retries: needs runner.network.inference") == true, "\(local ?? "accepted")")
        // A command benchmark on Ray: each task's run on its node counts its vendor failures,
        // and the node's held-out answer carries the count (RayToolTests, infraRetriesOnTheCluster).
        #expect(try parse("  held_out_runtime: host\n  infra_retries: 1\n", runner: command + "executor:\n  kind: ray\n  address: h:1\n").gate.infraRetries == 1)
        // A local benchmark's tasks on Ray reach no model API through a gate of autoharness's: still refused.
        let localRay = try Self.refusal("gate:\n  held_out_runtime: host\n  infra_retries: 1\nexecutor:\n  kind: ray\n  address: h:1\n")
        #expect(localRay?.contains("gate.infra_retries: needs runner.network.inference") == true, "\(localRay ?? "accepted")")
    }

    /// The errors a local config with `yaml` after its first two lines is refused with (nil:
    /// accepted), as `exp/experiment_config.yaml:LINE: message` lines.
    static func refusal(_ yaml: String) throws -> String? {
        do {
            _ = try ExperimentConfig.parse("benchmark: local\ndataset: d\n" + yaml, file: "exp/experiment_config.yaml")
            return nil
        } catch let e as ConfigErrors {
            return "\(e)"
        }
    }

    @Test("a malformed task.toml costs that task (0, setup_failed, with file:line), while status, benchmark and gate keep working")
    func brokenTaskToml() throws {
        try requireRoot()
        let bench = try EditableBenchmark()
        let exp = try bench.experiment()
        let p = try exp.run("prepare")
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        try exp.setAgent(Agents.all)
        let broken = try #require(try exp.split().train.first)
        let toml = bench.directory + "/tasks/\(broken)/task.toml"
        try bench.write("tasks/\(broken)/task.toml", "[agent]\ntimeout_sec = 1e300\n")
        let why = "\(toml):2: [agent] timeout_sec must be a positive number of seconds, at most 86400 (got 1e300)"

        let s = try exp.run("status")
        #expect(s.status == 0, "\(s.stdout)\(s.stderr)")
        #expect(s.stderr.contains("warning: \(why)"), "\(s.stderr)")

        let b = try exp.run("benchmark")
        #expect(b.status == 0, "\(b.stdout)\(b.stderr)")
        #expect(b.stdout.contains("FAIL  \(broken)  reward 0.00 (setup_failed: \(why))"), "\(b.stdout)")
        let others = try exp.split().train.filter { $0 != broken }
        for id in others { #expect(b.stdout.contains("PASS  \(id)  reward 1.00"), "\(id): \(b.stdout)") }
        let trace = try exp.file("workspace/traces/latest/\(broken)/result.json")
        #expect(trace.contains("setup_failed"), "\(trace)")

        let g = try exp.run("gate")
        #expect(g.stdout.contains("gate attempt 1: "), "\(g.stdout)\(g.stderr)")
        #expect(g.stdout.contains("suite: "), "\(g.stdout)")
    }

    @Test("a verifier that hits its pids limit and one that times out are recorded against the verifier, not agent.py")
    func verifierLimitsAttributed() throws {
        try requireRoot()
        let bench = try EditableBenchmark()
        // Every task's test starts 64 threads (each a task for the pids controller) under a
        // pids limit of 16, then writes its reward; add-0's verifier outlives its 1 s timeout.
        let test = """
            #!/bin/bash
            python3 -c '
            import threading, time
            started = 0
            try:
                for _ in range(64):
                    threading.Thread(target=time.sleep, args=(1,), daemon=True).start()
                    started += 1
            except RuntimeError:
                pass
            print("threads started:", started)
            '
            echo 1 > /logs/verifier/reward.txt

            """
        for id in try FileManager.default.contentsOfDirectory(atPath: bench.directory + "/tasks") {
            try bench.write("tasks/\(id)/tests/test.sh", test)
        }
        try bench.write("tasks/add-0/task.toml", "[verifier]\ntimeout_sec = 1\n")
        try bench.write("tasks/add-0/tests/test.sh", "#!/bin/bash\nsleep 30\n")
        let policy = bench.temp.path + "/small-verifier.yaml"
        try "extends: verifier\nlimits:\n  pids: 16\n".write(toFile: policy, atomically: true, encoding: .utf8)
        let exp = try bench.experiment(config: ["verifier_policy": policy])
        let p = try exp.run("prepare")
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let b = try exp.run("benchmark")
        #expect(b.status == 0, "\(b.stdout)\(b.stderr)")

        let rows = try exp.rows("violation")
        let actors = rows.map { "\($0["actor"] ?? "?"): \($0["detail"] ?? "?")" }
        #expect(actors.contains { $0.hasPrefix("verifier (train run): pids_limit ×") }, "\(actors)")
        #expect(actors.contains { $0.hasPrefix("verifier (baseline): pids_limit ×") }, "\(actors)")
        #expect(actors.contains { $0.hasPrefix("verifier (baseline): timeout ×1") }, "\(actors)")
        #expect(!actors.contains { $0.hasPrefix("agent.py") }, "blamed on agent.py: \(actors)")
    }
}

extension ConfigInputTests {
    @Test("gate.held_out_env: names must be variables, and each must be passed to the runner", arguments: [
        ("runner:\n  env_pass: [A]\ngate:\n  held_out_env: {B: C}\n", "gate.held_out_env: B is not in runner.env_pass"),
        ("runner:\n  env_pass: [A]\ngate:\n  held_out_env: {A: not-a-name}\n", "gate.held_out_env: 'not-a-name' is not a variable name"),
    ])
    func heldOutEnv(yaml: String, message: String) throws {
        let refused = try ExperimentInputTests.refusal(yaml)
        #expect(refused?.contains(message) == true, "\(refused ?? "accepted")")
        let ok = try ExperimentConfig.parse("benchmark: local\ndataset: d\nrunner:\n  env_pass: [A]\ngate:\n  held_out_env: {A: A_HELD_OUT}\n", file: "f")
        #expect(ok.gate.heldOutEnv == ["A": "A_HELD_OUT"])
    }
}

extension ConfigInputTests {
    @Test("runner.network.inference: exact host:port pairs, never a host also in allow (however spelled); a model API in allow is refused, naming inference; tunnelled keys need an allow list", arguments: [
        ("runner:\n  network:\n    inference: [\"*.openai.com:443\"]\n", "exp/experiment_config.yaml:5: runner.network.inference: '*.openai.com:443' is a pattern"),
        ("runner:\n  network:\n    inference: [api.openai.com]\n", "runner.network.inference: 'api.openai.com' is not host:port"),
        ("runner:\n  network:\n    allow: [a.test:443]\n    inference: [a.test:443]\n", "exp/experiment_config.yaml:5: runner.network: a.test:443 in inference and a.test:443 in allow reach one host"),
        ("runner:\n  network:\n    allow: [\"A.test.:8443\"]\n    inference: [a.test:443]\n", "runner.network: a.test:443 in inference and A.test.:8443 in allow reach one host"),
        ("sandbox:\n  network:\n    allow: [\"*.test:443\"]\n    inference: [llm.test:443]\n", "sandbox.network: llm.test:443 in inference and *.test:443 in allow reach one host"),
        ("runner:\n  env_pass: [HF_TOKEN]\n  network:\n    inference: [a.test:443]\n    tunnelled_keys: [HF_TOKEN]\n", "runner.network.tunnelled_keys: keys passed as they are, for hosts of runner.network.allow, which is empty"),
        ("runner:\n  network:\n    allow: [api.openai.com:443]\n", "runner.network.allow: api.openai.com:443 is a model API: list it under runner.network.inference"),
        ("runner:\n  network:\n    allow: [API.Anthropic.com:443]\n", "runner.network.allow: API.Anthropic.com:443 is a model API"),
        ("runner:\n  network:\n    allow: [\"eu.api.openai.com.:8443\"]\n", "runner.network.allow: eu.api.openai.com.:8443 is a model API"),
        ("runner:\n  network:\n    allow: [a.test:0443]\n", "runner.network.allow: 'a.test:0443' is not host:port"),
        ("runner:\n  network:\n    upstream_ca: certs/ca.pem\n", "runner.network.upstream_ca: must be an absolute path"),
    ])
    func inferenceTargets(yaml: String, message: String) throws {
        let refused = try ExperimentInputTests.refusal(yaml)
        #expect(refused?.contains(message) == true, "\(refused ?? "accepted")")
    }

    @Test("runner.network.inference and upstream_ca reach the tool's settings")
    func inferenceSettings() throws {
        let c = try ExperimentConfig.parse("benchmark: local\ndataset: d\nrunner:\n  network:\n    allow: [api.e2b.app:443]\n    inference: [api.openai.com:443]\n    upstream_ca: /etc/corp-ca.pem\n", file: "f")
        #expect(c.runner.networkAllow == ["api.e2b.app:443"])
        #expect(c.runner.networkInference == ["api.openai.com:443"])
        #expect(c.runner.upstreamCA == "/etc/corp-ca.pem")
    }
}

@Suite("runner.network.tunnelled_keys")
struct TunnelledKeysTests {
    @Test("names only variables the section passes, wherever env_pass stands; the runner's tool settings pass them as they are")
    func tunnelledKeys() throws {
        do {
            _ = try ExperimentConfig.parse("benchmark: local\ndataset: d\nrunner:\n  network:\n    tunnelled_keys: [HF_TOKEN]\n  env_pass: [OPENAI_API_KEY]\n", file: "f")
            Issue.record("a tunnelled key not in env_pass was accepted")
        } catch {
            #expect("\(error)".contains("runner.network.tunnelled_keys: HF_TOKEN is not in runner.env_pass"), "\(error)")
        }
        let c = try ExperimentConfig.parse("benchmark: local\ndataset: d\nrunner:\n  network:\n    inference: [api.openai.com:443]\n    allow: [huggingface.co:443]\n    tunnelled_keys: [HF_TOKEN]\n  env_pass: [OPENAI_API_KEY, HF_TOKEN]\n", file: "f")
        let tool = c.toolSettings(["x"])
        #expect(tool.tunnelledKeys.contains("HF_TOKEN") && !tool.tunnelledKeys.contains("OPENAI_API_KEY"))
        #expect(c.vendorAccounts.modelCredentials == ["OPENAI_API_KEY"])
    }
}
