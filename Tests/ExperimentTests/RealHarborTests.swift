import Foundation
import Testing
import TestSupport

/// The real Harbor (pinned, installed by `scripts/install-harbor` into a venv outside the
/// repository) running a generated Harbor dataset through init → prepare → benchmark → gate,
/// its tasks' commands in autoharness's sandbox (`env_provider: local`, no Docker). A missing
/// install fails the test: CI installs it first.
@Suite("Real Harbor: terminal-bench end to end", .serialized)
struct RealHarborTests {
    static func harbor() throws -> String {
        let r = try runProcess("/bin/bash", [Built.packageRoot + "/scripts/install-harbor", "--print"])
        let path = r.stdout.split(separator: " ").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        return try #require(path.flatMap { $0.isEmpty ? nil : $0 }, "harbor is not installed: run scripts/install-harbor (\(r.stderr))")
    }

    /// Six tasks in Harbor's layout: registry-style `[task] name` (`autoharness-test/...`) on
    /// all but one, environment/ with a Dockerfile (not built) and a seed file, a verifier
    /// that checks /app/out.txt against the seed. The `sleepy-*` tasks' agent timeout is 2 s:
    /// the solving agent writes its answer and then sleeps past it. hello-3 asks for half a CPU
    /// (harbor 0.25 accepts `cpus = 0.5`; the local environment applies no CPU count, and a
    /// refusal would end its whole `harbor run` with no trial).
    static func dataset(in dir: String) throws -> [String] {
        var ids: [String] = []
        for (k, kind) in ["hello", "hello", "hello", "sleepy", "sleepy", "sleepy"].enumerated() {
            let id = "\(kind)-\(k + 1)"
            ids.append(id)
            let t = dir + "/" + id
            for d in ["environment", "tests", "solution"] { try FileManager.default.createDirectory(atPath: t + "/" + d, withIntermediateDirectories: true) }
            let name = k == 0 ? "" : "[task]\nname = \"autoharness-test/\(id)\"\ndescription = \"generated\"\nkeywords = [\"test\", \"local\"]\n\n"
            let environment = k == 2 ? "\n[environment]\ncpus = 0.5\n" : ""
            try "schema_version = \"1.4\"\n\n\(name)[agent]\ntimeout_sec = \(kind == "sleepy" ? 2.0 : 60.0)\n\n[verifier]\ntimeout_sec = 30.0\n\(environment)"
                .write(toFile: t + "/task.toml", atomically: true, encoding: .utf8)
            try "Copy the word in /app/seed.txt into /app/out.txt.\(kind == "sleepy" ? " SLEEP" : "")\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
            try "FROM ubuntu:24.04\nWORKDIR /app\nCOPY seed.txt /app/seed.txt\n".write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
            try "word-\(k + 1)\n".write(toFile: t + "/environment/seed.txt", atomically: true, encoding: .utf8)
            // A failing run also leaves a CTRF report, as Terminal-Bench's pytest verifiers do
            // (pytest-json-ctrf), naming HARBORMARK-<id> so a held-out one can be looked for.
            try """
                #!/bin/bash
                if cmp -s /app/seed.txt /app/out.txt; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt
                cat > /logs/verifier/ctrf.json <<EOF
                {"results": {"tool": {"name": "pytest"}, "tests": [{"name": "tests/test_outputs.py::test_out_matches_seed", "status": "failed",
                  "message": "The test failed in the call phase due to an assertion error",
                  "trace": "E       AssertionError: /app/out.txt does not match the seed (HARBORMARK-\(id))\\ntests/test_outputs.py:7: AssertionError"}]}}
                EOF
                fi

                """.write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
            try "#!/bin/bash\ncp /app/seed.txt /app/out.txt\n".write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
        }
        return ids
    }

    /// A Harbor agent (harbor.agents.base.BaseAgent): runs its commands through the
    /// environment's exec, as Harbor's own agents do.
    /// `init --benchmark terminal-bench` over `dataset` with the real harbor, tasks in
    /// autoharness's sandbox (`env_provider: local`), no model and no network, gating with
    /// `min_improvement: 0`.
    static func localExperiment(harbor: String, dataset: String) throws -> Experiment {
        let exp = try Experiment(benchmark: "terminal-bench", extraArgs: ["--tool", harbor, "--dataset", dataset])
        try exp.set("env_provider", "local")
        try exp.set("agent_model", "none")
        try exp.set("env_pass", "[]", in: "runner")
        try exp.set("allow", "[]", in: "runner")
        try exp.set("min_improvement", "0")
        return exp
    }

    static func agent(solves: Bool) -> String {
        harborAgent(run: """
            context.n_input_tokens = 10
            context.cost_usd = 0.0125
            if \(solves ? "True" : "False"):
                r = await environment.exec("cp seed.txt out.txt && ls")
                print("exec:", r.return_code, r.stdout)
            if "SLEEP" in instruction:
                await environment.exec("sleep 30")
            """)
    }

    /// A Harbor agent class (harbor.agents.base.BaseAgent) whose `run` is `body` (Python at
    /// no indentation), after the module-level `preamble`.
    static func harborAgent(preamble: String = "", run body: String) -> String {
        """
        from harbor.agents.base import BaseAgent
        \(preamble)

        class HarnessAgent(BaseAgent):
            @staticmethod
            def name():
                return "autoharness-test"

            def version(self):
                return "1"

            async def setup(self, environment):
                pass

            async def run(self, instruction, environment, context):
        \(body.split(separator: "\n", omittingEmptySubsequences: false).map { $0.isEmpty ? "" : "        " + $0 }.joined(separator: "\n"))

        """
    }

    @Test("prepare → benchmark → gate with the real harbor: tasks named by [task] name map to their directories, Harbor runs the agent phase and autoharness's verifier sandbox the tests, an agent timeout still scores its verifier's reward")
    func loop() throws {
        try requireRoot()
        let harbor = try Self.harbor()
        let data = try TempDir()
        let ids = try Self.dataset(in: data.path)
        let exp = try Self.localExperiment(harbor: harbor, dataset: data.path)
        defer { exp.removeScratch() }
        try exp.setAgent(Self.agent(solves: false))

        let p = try exp.run(["prepare"], environment: [:])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/6 tasks pass"), "\(p.stdout)\(p.stderr)")
        let split = try exp.split()
        #expect(Set(split.train + split.test) == Set(ids))

        // Failure records from Harbor's own results: the verifier's CTRF report for every
        // failed train task, and Harbor's exception_info for the sleepy ones (AgentTimeoutError).
        let failing = try exp.run(["benchmark"], environment: [:])
        #expect(failing.status == 0 && failing.stdout.contains("train: 0/\(split.train.count) passed"), "\(failing.stdout)\(failing.stderr)")
        let evidence = try #require(try exp.rows("failure_evidence").last?["tasks"] as? [String: [[String: Any]]])
        #expect(Set(evidence.keys) == Set(split.train))
        for id in split.train {
            let checks = evidence[id] ?? []
            #expect(checks.contains { $0["check"] as? String == "tests/test_outputs.py::test_out_matches_seed" && $0["error_class"] as? String == "AssertionError"
                && $0["excerpt"] as? String == "AssertionError: /app/out.txt does not match the seed (HARBORMARK-\(id))" }, "\(id): \(checks)")
            #expect(checks.contains { $0["check"] as? String == "trial" && $0["error_class"] as? String == "AgentTimeoutError" } == id.hasPrefix("sleepy"), "\(id): \(checks)")
        }
        #expect(try exp.run(["failures"], environment: [:]).stdout.contains("AssertionError in `tests/test_outputs.py::test_out_matches_seed`"))
        // Harbor's own record of the agent's spend (agent_result.cost_usd), summed per run.
        let spent = try #require(try exp.rows("train_run").last?["costUSD"] as? Double)
        #expect(abs(spent - 0.0125 * Double(split.train.count)) < 1e-9, "\(spent)")

        try exp.setAgent(Self.agent(solves: true))
        let b = try exp.run(["benchmark"], environment: [:])
        #expect(b.status == 0, "\(b.stdout)\(b.stderr)")
        let rewards = try exp.trainResults()
        let statuses = try exp.statuses(split.train)
        for id in split.train {
            #expect(rewards[id] as? Double == 1.0, "\(id): \(rewards[id] ?? "nil") \(b.stderr)")
            // What Harbor itself wrote for the trial, under Harbor's name: no verifier result
            // (Harbor ran the agent phase alone); the reward is autoharness's verifier's.
            let result = try #require(exp.traceFile(traceName(id), "harbor-result.json"), "no Harbor result for \(id)")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(result.utf8)) as? [String: Any])
            #expect(json["task_name"] as? String == (id == "hello-1" ? id : "autoharness-test/\(id)"), "\(json["task_name"] ?? "")")
            #expect(json["verifier_result"] == nil || json["verifier_result"] is NSNull, "\(json["verifier_result"] ?? "")")
            #expect(exp.traceFile(traceName(id), "reward.txt")?.trimmingCharacters(in: .whitespacesAndNewlines) == "1")
            if id.hasPrefix("sleepy") {
                #expect((json["exception_info"] as? [String: Any])?["exception_type"] as? String == "AgentTimeoutError", "\(result.prefix(800))")
                let ours = try #require(exp.traceFile(traceName(id), "result.json"))
                #expect(ours.contains("AgentTimeoutError") && ours.contains("the verifier still ran"), "\(ours)")
            }
            #expect(statuses[id] == "passed")
        }
        #expect(split.train.contains { $0.hasPrefix("sleepy") }, "no sleepy task in train: \(split)")

        let one = try #require(split.train.first)
        let single = try exp.run(["benchmark", "--task-ids", one], environment: [:])
        #expect(single.status == 0 && single.stdout.contains("train: 1/1 passed"), "\(single.stdout)\(single.stderr)")

        let g = try exp.run(["gate"], environment: [:])
        #expect(g.status == 0 && g.stdout.contains("ACCEPTED"), "\(g.stdout)\(g.stderr)")
        #expect(exp.scratchMounts().isEmpty)
        // Harbor's own traffic (its telemetry) is switched off, so nothing was refused and
        // blamed on agent.py.
        let violations = try exp.rows("violation")
        #expect(violations.isEmpty, "\(violations)")
        // The accepted gate resolved every record; the held-out split (run twice with the same
        // failing verifiers) left no evidence anywhere under the experiment.
        let view = try #require(try JSONSerialization.jsonObject(with: Data(try String(contentsOfFile: exp.root + "/workspace/failures.json", encoding: .utf8).utf8)) as? [String: Any])
        #expect((view["records"] as? [[String: Any]] ?? []).allSatisfy { $0["state"] as? String == "resolved" }, "\(view)")
        for id in split.test { #expect(exp.filesContaining("HARBORMARK-\(id)").isEmpty, "\(id)") }
        #expect(!exp.filesContaining("HARBORMARK-\(split.train[0])").isEmpty, "the scan finds train evidence")
    }

    @Test("gate.held_out_runtime: vm with the real harbor: the held-out tasks' agent phases (Harbor) and verifiers run in the guest's kernel, the train tasks on the host's; a gate accepted, nothing held-out on the host (a VM gate's tie is rejected: HeldOutVMTests)")
    func heldOutInTheVM() throws {
        try HeldOutVMTests.requireVM()
        let harbor = try Self.harbor()
        let data = try TempDir()
        // Emulated, an agent's few commands can take longer than the sleepy tasks' 2 s: every
        // task gets 120 s here (this test is about where tasks run, not about timeouts).
        for id in try Self.dataset(in: data.path) {
            let toml = data.path + "/" + id + "/task.toml"
            try String(contentsOfFile: toml, encoding: .utf8).replacingOccurrences(of: "[agent]\ntimeout_sec = 2.0", with: "[agent]\ntimeout_sec = 120.0")
                .write(toFile: toml, atomically: true, encoding: .utf8)
        }
        let exp = try Self.localExperiment(harbor: harbor, dataset: data.path)
        defer { exp.removeScratch() }
        try exp.set("held_out_runtime", "vm\n  vm: {accel: tcg, allow_emulation: true, memory_mib: 1536}", in: "gate")
        // Solves a task only where the kernel is not the host's, and leaves the task's
        // instruction (which names a marker) in /app, /tmp and /logs.
        try exp.setAgent(Self.harborAgent(run: """
            boot = (await environment.exec("cat /proc/sys/kernel/random/boot_id")).stdout.strip()
            await environment.exec("echo LEFT-BEHIND-$(cat /app/seed.txt) > /app/vm-mark.txt; cp /app/vm-mark.txt /tmp/vm-mark.txt")
            if boot != "\(HeldOutVMTests.hostBootID)":
                await environment.exec("cp seed.txt out.txt")
            """))
        let p = try exp.run(["prepare"], environment: [:])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/6 tasks pass"), "\(p.stdout)\(p.stderr)")
        let split = try exp.split()
        let g = try exp.run(["gate"], environment: [:])
        #expect(g.status == 0 && g.stdout.contains("ACCEPTED") && g.stdout.contains("val_score: 1.00"), "\(g.stdout)\n\(g.stderr)")
        #expect(g.stderr.contains("held-out VM: \(split.test.count) task(s) answered"), "\(g.stderr)")
        #expect(try exp.rows("violation").isEmpty)
        // Each held-out task's seed word (in its instruction's files) and its verifier's
        // HARBORMARK: nowhere under the experiment, its scratch root or /tmp.
        for id in split.test {
            let k = id.split(separator: "-").last.map(String.init) ?? ""
            #expect(exp.filesContaining("LEFT-BEHIND-word-\(k)").isEmpty, "\(id)")
            #expect(exp.filesContaining("HARBORMARK-\(id)").isEmpty, "\(id)")
            #expect(files(under: exp.scratch, containing: "LEFT-BEHIND-word-\(k)").isEmpty, "\(id)")
            #expect(!((try? String(contentsOfFile: "/tmp/vm-mark.txt", encoding: .utf8)) ?? "").contains("word-\(k)\n"), "\(id)")
        }
        #expect(exp.scratchMounts().isEmpty)
    }
}
