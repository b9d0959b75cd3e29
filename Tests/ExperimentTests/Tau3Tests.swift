import Foundation
import Testing
import TestSupport

/// tau2's τ³ domain banking_knowledge through `benchmark: tau-bench`, with the stand-in that
/// follows tau2-bench 1.0.1's code for it (Fixtures/tools/tau2: its task files, its
/// SandboxManager's PATH check and `srt --settings FILE "<command>"`): the agent's `shell` tool
/// calls run through autoharness's srt, each in a sandbox of its own, and the task is passed only
/// by the agent tool a knowledge-base document names.
@Suite("τ³ banking_knowledge: the shell tool in nested sandboxes", .serialized)
struct Tau3Tests {
    static let pkg = Tau2Agents.fixture + "/pkg"
    static let data = Tau2Agents.fixture + "/data"
    static let env = ["FAKE_MODE": "normal", "PYTHONPATH": pkg]

    /// Greps the knowledge base for the user's request, reads the document it finds, unlocks
    /// the agent tool the document names; prints each tool answer it got, and where it ran.
    static let searching = #"""
        import os, re
        from tau2.agent.llm_agent import LLMAgent
        from tau2.data_model.message import AssistantMessage, ToolCall

        class HarnessAgent(LLMAgent):
            def generate_next_message(self, message, state):
                if message.role == "user":
                    print("AGENT policy %r" % self.domain_policy.splitlines()[0], flush=True)
                    topic = re.search(r"I want to (.+)\.", message.content).group(1)
                    print("AGENT asks grep for %r" % topic, flush=True)
                    return AssistantMessage(content=None, tool_calls=[ToolCall(id="c1", name="shell", arguments={"command": "grep -l '%s' *.md" % topic}, requestor="assistant")]), state
                print("AGENT got %r" % message.content, flush=True)
                if message.content.endswith(".md\n") and "\n" not in message.content.strip():
                    return AssistantMessage(content=None, tool_calls=[ToolCall(id="c2", name="shell", arguments={"command": "cat " + message.content.strip() + "; cat '/work/agent/agent.py' 2>&1 | head -1; echo tmp=$TMPDIR"}, requestor="assistant")]), state
                m = re.search(r"agent tool `([a-z_0-9]+)`", message.content)
                if m:
                    return AssistantMessage(content=None, tool_calls=[ToolCall(id="c3", name="unlock_discoverable_agent_tool", arguments={"agent_tool_name": m.group(1)}, requestor="assistant")]), state
                return AssistantMessage(content="Done.", tool_calls=None), state
        """#

    @Test("prepare → benchmark on banking_knowledge: its 10 task files split here (no split_tasks.json), its shell tool's commands run through autoharness's srt in sandboxes of their own (the knowledge base readable, agent.py and the runner's TMPDIR not), the found agent tool passes each task, re-scored without agent.py")
    func bankingKnowledge() throws {
        try requireRoot()
        let exp = try Experiment(benchmark: "tau-bench", extraArgs: ["--tool", Tau2Agents.fixture + "/bin/tau2", "--dataset", Self.data])
        defer { exp.removeScratch() }
        try exp.set("domain", "banking_knowledge")
        try exp.set("binds", "[\(Self.pkg)]", in: "runner")
        try exp.set("env_pass", "[FAKE_MODE, PYTHONPATH]", in: "runner")
        try exp.set("allow", "[]", in: "runner")
        try exp.set("inference", "[]", in: "runner")
        try exp.set("min_improvement", "0", in: "gate")
        // tau2's default for the domain is alltools (an embeddings API); terminal_use is its shell only.
        let config = exp.root + "/experiment_config.yaml"
        try (try String(contentsOfFile: config, encoding: .utf8) + "\nretrieval_config: terminal_use\n").write(toFile: config, atomically: true, encoding: .utf8)
        let p = try exp.run(["prepare"], environment: Self.env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        // The template agent answers in text: every task 0; the split is the experiment's own.
        #expect(p.stdout.contains("baseline: 0/10 tasks pass"), "\(p.stdout)")
        #expect(p.stdout.contains("split: 7 train, 3 test"), "\(p.stdout)")
        let split = try exp.split()
        #expect(Set(split.train + split.test) == Set((1...10).map { String(format: "task_%03d", $0) }))

        try exp.setAgent(Self.searching)
        let b = try exp.run(["benchmark"], environment: Self.env)
        #expect(b.status == 0, "\(b.stderr)")
        // Two shell calls per task, each in a sandbox of its own.
        #expect(b.stderr.contains("tau2: 14 shell tool call(s) run in sandboxes of their own, 0 refused"), "\(b.stderr)")
        let rewards = try exp.trainResults()
        for id in split.train { #expect((rewards[id] as? Double) == 1, "\(id): \(rewards[id] ?? "nil")") }
        let id = split.train[0]
        let stdout = try #require(exp.traceFile(id, "tool.stdout"))
        // grep found the one document; cat read it; agent.py and the runner's TMPDIR were not there.
        #expect(stdout.contains("AGENT got 'doc_procedure_"), "\(stdout)")
        // The runner's environment was built with the configured variant (its policy)...
        #expect(stdout.contains("AGENT policy '# Banking agent policy, terminal_use (stand-in)'"), "\(stdout)")
        #expect(stdout.contains("unlock it with unlock_discoverable_agent_tool"), "\(stdout)")
        // (tau2's own filter refuses an absolute path outside quotes; this one is quoted.)
        #expect(stdout.contains("cat: /work/agent/agent.py: No such file or directory"), "\(stdout)")
        #expect(stdout.contains("tmp=\\n"), "\(stdout)")
        let info = try #require(exp.traceFile(id, "reward_info.json"))
        #expect(info.contains("\"action_match\": true"), "\(info)")
        // ...and so were the scorer's, as tau2's runner builds them for its evaluation
        // (_build_env_kwargs): the same variant, and the full task (with its criteria, which the
        // runner's copy lacks) from which the database's logged reads are derived.
        let built = try #require(((try JSONSerialization.jsonObject(with: Data(info.utf8)) as? [String: Any])?["info"] as? [String: Any])?["environment"] as? [String: Any], "\(info)")
        #expect(built["retrieval_variant"] as? String == "terminal_use" && built["task_has_criteria"] as? Bool == true, "\(built)")

        // A gate with the same agent.py: the held-out tasks' tool calls run the same way.
        let g = try exp.run(["gate"], environment: Self.env)
        #expect(g.stdout.contains("ACCEPTED"), "\(g.stdout)\(g.stderr)")
        let attempt = try #require(try exp.rows("gate_attempt").last)
        #expect((attempt["valScore"] as? Double) == 1.0, "\(attempt)")
        #expect(exp.scratchMounts().isEmpty)
    }

    @Test("a domain of tau2's data autoharness has no list for runs only with the operator's runner_data, which may not name the tasks; a name that is not a directory of the data, or a retrieval_config that is not one word, is refused")
    func unknownDomain() throws {
        try requireRoot()
        let exp = try Experiment(benchmark: "tau-bench", extraArgs: ["--tool", Tau2Agents.fixture + "/bin/tau2", "--dataset", Self.data])
        defer { exp.removeScratch() }
        try exp.set("binds", "[\(Self.pkg)]", in: "runner")
        try exp.set("env_pass", "[FAKE_MODE, PYTHONPATH]", in: "runner")
        try exp.set("inference", "[]", in: "runner")
        // retail's data, under a name autoharness has no list for: refused, saying what to do.
        let copy = try TempDir()
        try FileManager.default.createDirectory(atPath: copy.path + "/tau2/domains", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: Self.data + "/tau2/domains/retail", toPath: copy.path + "/tau2/domains/retail2")
        try FileManager.default.copyItem(atPath: Self.data + "/tau2/user_simulator", toPath: copy.path + "/tau2/user_simulator")
        try exp.set("domain", "retail2")
        try exp.set("tau2_data_dir", copy.path)
        var p = try exp.run(["prepare"], environment: Self.env)
        #expect(p.status != 0 && p.stderr.contains("not of retail2: list them in runner_data"), "\(p.stderr)")
        let path = exp.root + "/experiment_config.yaml"
        let text = try String(contentsOfFile: path, encoding: .utf8)
        try (text + "\nrunner_data: [db.json, tasks.json]\n").write(toFile: path, atomically: true, encoding: .utf8)
        p = try exp.run(["prepare"], environment: Self.env)
        #expect(p.status != 0 && p.stderr.contains("runner_data: tasks.json holds the tasks' answers"), "\(p.stderr)")
        try (text + "\nrunner_data: [db.json, policy.md]\n").write(toFile: path, atomically: true, encoding: .utf8)
        try exp.set("domain", "..")
        p = try exp.run(["prepare"], environment: Self.env)
        #expect(p.status != 0 && p.stderr.contains("domain: .. is not a directory name"), "\(p.stderr)")
        // retrieval_config reaches tau2 as one argument: a flag or a word with a space is refused.
        for bad in ["--help", "terminal use"] {
            try (text + "\nrunner_data: [db.json, policy.md]\nretrieval_config: \"\(bad)\"\n").write(toFile: path, atomically: true, encoding: .utf8)
            try exp.set("domain", "retail2")
            p = try exp.run(["prepare"], environment: Self.env)
            #expect(p.status != 0 && p.stderr.contains("retrieval_config: '\(bad)' is not a name of tau2's retrieval configs"), "\(p.stderr)")
        }
        try (text + "\nrunner_data: [db.json, policy.md]\n").write(toFile: path, atomically: true, encoding: .utf8)
        // Listed: it runs on tau2's own split of that data (retail's stand-in tasks, as retail2).
        try exp.set("domain", "retail2")
        p = try exp.run(["prepare"], environment: Self.env)
        #expect(p.status == 0 && p.stdout.contains("(the benchmark's own split, seed 300)"), "\(p.stdout)\(p.stderr)")
    }
}
