import Benchmark
import Foundation
import Testing
import TestSupport

@testable import Experiment
@testable import Execution
@testable import ExperimentModel

/// An experiment on the arith fixture whose `triage:` is Fixtures/tools/triage.py, its model
/// the fake vendor behind the inference gate.
func triageExperiment(_ model: FakeModel, after: String = "train_run", config: [String: String] = [:]) throws -> Experiment {
    let exp = try Experiment(config: config)
    let path = exp.root + "/experiment_config.yaml"
    var text = try String(contentsOfFile: path, encoding: .utf8)
    text += """

        triage:
          command: [python3, \(Fixtures.root)/tools/triage.py]
          binds: [\(Fixtures.root)/tools]
          env_pass: [OPENAI_API_KEY, MODEL_URL, TRIAGE_BAD]
          network:
            inference: ["\(model.address)"]
            upstream_ca: \(model.caFile)
          after: \(after)

        """
    try text.write(toFile: path, atomically: true, encoding: .utf8)
    return exp
}

/// What the triage needs in its environment (passed by name).
func triageEnvironment(_ model: FakeModel, bad: Bool = false) -> [String: String] {
    ["OPENAI_API_KEY": "sk-test-triage", "MODEL_URL": "https://\(model.address)/v1", "TRIAGE_BAD": bad ? "1" : "0"]
}

/// agent.py that crashes on additions and answers nothing to multiplications: two failure
/// clusters (the agent crashed; the reward is 0).
let twoWaysWrong = """
    class HarnessAgent:
        def run(self, instruction, workdir):
            _, op, a, b = instruction.splitlines()[0].split()
            if op == "add":
                raise ValueError("cannot add " + a)
    """

@Suite("Triage: a model's reading of the train failures, sandboxed and checked")
struct TriageTests {
    static func turn(_ label: String, _ hypothesis: String, _ severity: String) -> [[String: Any]] {
        [["tool": "triage", "input": ["label": label, "hypothesis": hypothesis, "severity": severity]]]
    }

    @Test("after a train run, through the inference gate: hypotheses, labels and severities recorded per record; failures.md and the report show them; the held-out split stays dark (no test marker readable in its sandbox)")
    func throughTheGate() throws {
        try requireRoot()
        let model = try FakeModel(turns: [Self.turn("agent writes no answer", "agent.py never writes answer.txt for some operations", "high"),
                                          Self.turn("Agent writes no answer", "the same root cause, seen from the verifier", "medium")])
        let exp = try triageExperiment(model)
        try exp.setAgent(twoWaysWrong)
        let b = try exp.run(["benchmark"], environment: triageEnvironment(model))
        #expect(b.status == 0, "\(b.stdout)\(b.stderr)")
        let rows = try exp.rows("triage")
        let row = try #require(rows.last, "no triage row: \(b.stderr)")
        let entries = try #require(row["entries"] as? [[String: Any]])
        #expect(row["trigger"] as? String == "train run" && row["refused"] as? Int == 0 && row["exit"] as? String == "exited 0", "\(row)")
        #expect(entries.count == 8 && entries.count == row["records"] as? Int, "\(entries)")
        // The model was reached, and only through the gate (its address is not on any allowlist).
        let asked = model.requests().filter { $0["path"] as? String == "/v1/chat/completions" }
        #expect(asked.count == 2, "\(model.requests())")

        // The held-out split stays dark: every train marker it could read, no test marker.
        let (train, test) = try exp.split()
        let first = try #require(entries.first?["hypothesis"] as? String)
        let seen = Set(first.components(separatedBy: "markers seen: ").last!.split(separator: ",").map(String.init))
        #expect(Set(train).isSubset(of: seen) && seen.isDisjoint(with: test), "seen \(seen); test \(test)")

        // Two clusters, one label (case aside): ranked together, each naming the other.
        let f = try #require(JSONSerialization.jsonObject(with: Data(try exp.file("workspace/failures.json").utf8)) as? [String: Any])
        let clusters = try #require(f["clusters"] as? [[String: Any]])
        #expect(clusters.count == 2 && clusters.allSatisfy { ($0["merged_with"] as? [String])?.count == 1 }, "\(clusters)")
        #expect(Set(clusters.compactMap { ($0["triage"] as? [String: Any])?["severity"] as? String }) == ["high", "medium"])
        let md = try exp.file("workspace/failures.md")
        #expect(md.contains("hypothesis: `agent.py never writes answer.txt") && md.contains("(the triage's label), ranked together"), "\(md)")
        #expect(try exp.run("report").status == 0)
        let html = try exp.file("report.html")
        #expect(html.contains("<h2>Triage</h2>") && html.contains("the same root cause, seen from the verifier"))
        // Benchmarking the same failures again gives the triage nothing new to read: however
        // often the coding agent runs the benchmark, each failure is triaged once.
        #expect(try exp.run(["benchmark", "--task-ids", train[0]], environment: triageEnvironment(model)).status == 0)
        #expect(try exp.rows("triage").count == 1 && model.requests().count == 2)
    }

    @Test("loop.review: operator: the triage's labels merge nothing until the operator accepts them (status --operator lists them); --split, --merge and --label are the operator's, each a row with its reason, in the report")
    func operatorReviewsMerges() throws {
        try requireRoot()
        let model = try FakeModel(turns: [Self.turn("no answer", "h1", "high"), Self.turn("No Answer", "h2", "low")])
        let exp = try triageExperiment(model, config: ["review": "operator"])
        try exp.setAgent(twoWaysWrong)
        #expect(try exp.run(["benchmark"], environment: triageEnvironment(model)).status == 0)
        func merged() throws -> [[String]] {
            let f = try #require(JSONSerialization.jsonObject(with: Data(try exp.file("workspace/failures.json").utf8)) as? [String: Any])
            return (f["clusters"] as? [[String: Any]] ?? []).map { $0["merged_with"] as? [String] ?? [] }
        }
        #expect(try merged() == [[], []], "pending, not merged")
        let ids = try #require(JSONSerialization.jsonObject(with: Data(try exp.file("workspace/failures.json").utf8)) as? [String: Any])["clusters"]
            .flatMap { $0 as? [[String: Any]] }!.compactMap { $0["id"] as? String }
        let op = try exp.run("status", "--operator").stdout
        #expect(op.contains("triage merges waiting for your review") && op.contains(ids.sorted().joined(separator: " + ")), "\(op)")
        #expect(try exp.run("failures", "--accept-triage").status != 0, "a decision needs a reason")
        let accept = try exp.run("failures", "--accept-triage", "--reason", "read both traces")
        #expect(accept.status == 0 && accept.stdout.contains("2 cluster(s)"), "\(accept.stdout)\(accept.stderr)")
        #expect(try merged().allSatisfy { $0.count == 1 })
        #expect(!(try exp.run("status", "--operator").stdout.contains("triage merges waiting")))
        #expect(try exp.run("failures", "--cluster", ids[0], "--split", "--reason", "different checks").status == 0)
        #expect(try merged() == [[], []])
        #expect(try exp.run("failures", "--cluster", ids[0], "--merge", ids[1], "--reason", "same bug after all").status == 0)
        #expect(try merged().allSatisfy { $0.count == 1 })
        let bad = try exp.run("failures", "--cluster", ids[0], "--merge", ids[0], "--reason", "x")
        #expect(bad.status == 2 && bad.stderr.contains("not another existing cluster"), "\(bad.stderr)")
        let rows = try exp.rows("cluster_review")
        #expect(rows.count == 4 && rows.last?["action"] as? String == "merge" && rows.last?["reason"] as? String == "same bug after all")
        #expect(try exp.run("report").status == 0)
        let html = try exp.file("report.html")
        #expect(html.contains("<h2>Cluster review</h2>") && html.contains("read both traces") && html.contains("merge with \(ids[1])"))
    }

    @Test("clusters whose records a triage labelled alike (case aside) rank as one, each naming the others; severity ranks before open records; without triage the old order")
    func mergeByLabel() throws {
        let ev = { (check: String) in FailureEvidence(check: check, errorClass: "AssertionError", excerpt: "expected 1, got 2") }
        let run = FailureEvent.evidence(seq: 1, time: "t1", FailureEvidenceRecord(source: "train run", attempt: nil, agentSHA256: "v0", tasks: [
            "a": [ev("x"), ev("y")], "b": [ev("y"), ev("z")], "c": [ev("z")], "d": [ev("z")],
        ]))
        var s = try ExperimentState(records: [])
        s.split = SplitRecord(train: ["a", "b", "c", "d"], test: ["h"], seed: 1)
        s.failureEvents = [run]
        let plain = FailureBook(s)
        let id = { (check: String) in plain.clusters.first { $0.check == check }!.id }
        #expect(plain.clusters.map(\.check) == ["z", "y", "x"], "open records first: z 3, y 2, x 1")
        for (check, task, label, severity) in [("x", "a", "Wrong unit", TriageSeverity.high), ("y", "a", "wrong unit", .low), ("y", "b", "wrong UNIT", .low)] {
            s.triage[TriageEntry.key(cluster: id(check), task: task)] = TriageEntry(task: task, cluster: id(check), hypothesis: "h", label: label, severity: severity)
        }
        let book = FailureBook(s)
        #expect(book.clusters.map(\.check) == ["x", "y", "z"], "the labelled group ranks by its highest severity, x before y within it")
        #expect(book.cluster(id("x"))?.mergedWith == [id("y")] && book.cluster(id("y"))?.mergedWith == [id("x")])
        #expect(book.cluster(id("y"))?.triage?.label?.lowercased() == "wrong unit" && book.cluster(id("z"))?.triage == nil)
    }

    @Test("the supervisor checks what the triage wrote: unknown records, a record twice, a severity outside the list and an unknown key refused and counted with their reasons; control and bidi characters flattened")
    func schemaChecked() throws {
        try requireRoot()
        let model = try FakeModel(turns: [Self.turn("a", "one", "low"), Self.turn("b", "two", "low")])
        let exp = try triageExperiment(model, after: "batch")
        try exp.setAgent(twoWaysWrong)
        #expect(try exp.run(["benchmark"], environment: triageEnvironment(model, bad: true)).status == 0)
        #expect(try exp.rows("triage").isEmpty, "triage.after: batch does not run after a train run")
        let t = try exp.run(["triage"], environment: triageEnvironment(model, bad: true))
        #expect(t.status == 0 && t.stdout.contains("4 refused"), "\(t.stdout)\(t.stderr)")
        let row = try #require(try exp.rows("triage").last)
        let problems = try #require(row["problems"] as? [String])
        #expect(problems.contains { $0.contains("c0000000/not-a-record is not a record of this triage's input") }, "\(problems)")
        #expect(problems.contains { $0.contains("a second time") } && problems.contains { $0.contains("severity must be one of low, medium, high, critical") }
                && problems.contains { $0.contains("unknown key score") }, "\(problems)")
        let entries = try #require(row["entries"] as? [[String: Any]])
        #expect(entries.count == 7 && row["trigger"] as? String == "operator")
        let flat = try #require(entries.first?["hypothesis"] as? String)
        #expect(flat.hasPrefix("line one line two reversed "), "\(flat.debugDescription)")
        #expect(!flat.unicodeScalars.contains { $0.properties.generalCategory == .control || $0.properties.generalCategory == .format })
    }

    @Test("a triage bind that reaches the dataset (the held-out tasks), the experiment or the scorer's answers is refused before anything runs, naming the bind")
    func bindsChecked() throws {
        try requireRoot()
        let model = try FakeModel(turns: [])
        let exp = try triageExperiment(model)
        let path = exp.root + "/experiment_config.yaml"
        let text = try String(contentsOfFile: path, encoding: .utf8)
        try text.replacingOccurrences(of: "  binds: [\(Fixtures.root)/tools]", with: "  binds: [\(Fixtures.root)/tools, \(Experiment.fixture)]")
            .write(toFile: path, atomically: true, encoding: .utf8)
        try exp.setAgent(twoWaysWrong)
        _ = try exp.run(["benchmark"], environment: triageEnvironment(model))
        let t = try exp.run(["triage"], environment: triageEnvironment(model))
        #expect(t.status == 2 && t.stderr.contains("triage.binds: \(Experiment.fixture) contains the benchmark's tasks"), "\(t.stdout)\(t.stderr)")
        #expect(try exp.rows("triage").isEmpty && model.requests().isEmpty)
        // The per-benchmark check (RunnerBinds, as for runner.binds) names the setting too.
        #expect(throws: ExperimentError.self) {
            try RunnerBinds.refuse([("triage.binds", Experiment.fixture + "/tasks")], exposing: [.init(path: Experiment.fixture, what: "contains the data")])
        }
    }

    @Test("triage: is read and checked, naming the line (a command is required; after: batch | train_run)")
    func config() throws {
        let c = try ExperimentConfig.parse("benchmark: local\ndataset: d\ntriage:\n  command: [python3, t.py]\n  network: {inference: [\"api.openai.com:443\"]}\n  after: train_run\n", file: "c.yaml")
        #expect(c.triage?.tool.command == ["python3", "t.py"] && c.triage?.after == .trainRun && c.triage?.tool.policy == "triage")
        #expect(c.triage?.tool.networkInference == ["api.openai.com:443"] && c.triage?.maxRecords == 200)
        #expect(try ExperimentConfig.parse("benchmark: local\ndataset: d\ntriage:\n  preset: claude\n  max_records: 50\n", file: "c.yaml").triage?.maxRecords == 50)
        let missing = #expect(throws: ConfigErrors.self) { try ExperimentConfig.parse("benchmark: local\ndataset: d\ntriage:\n  after: batch\n", file: "c.yaml") }
        #expect(missing?.description.contains("triage.command") == true, "\(String(describing: missing))")
        let tunnel = #expect(throws: ConfigErrors.self) {
            try ExperimentConfig.parse("benchmark: local\ndataset: d\ntriage:\n  command: [t]\n  network: {allow: [\"api.openai.com:443\"]}\n", file: "c.yaml")
        }
        #expect(tunnel?.description.contains("triage.network.allow: api.openai.com:443 is a model API") == true, "\(String(describing: tunnel))")
    }
}

/// The coding-agent presets as the triage command: the real CLIs (scripts/install-agents),
/// their vendor's wire format from the fake server, reached only through the inference gate.
@Suite("Triage with the real coding-agent CLIs", .serialized)
struct RealTriageTests {
    /// A prepared experiment whose train split failed in two clusters, and the entries a
    /// triage should write for its records (what the fake model tells the CLI to write).
    func failed() throws -> (Experiment, String) {
        let exp = try Experiment()
        try exp.setAgent(twoWaysWrong)
        #expect(try exp.run("benchmark").status == 0)
        let f = try #require(JSONSerialization.jsonObject(with: Data(try exp.file("workspace/failures.json").utf8)) as? [String: Any])
        let records = try #require(f["records"] as? [[String: Any]])
        let entries = records.map { r -> [String: Any] in
            let cluster = r["cluster"] as! String, task = r["task"] as! String
            let crashed = (r["error_class"] as? String) == "agent_crashed"
            return ["record": "\(cluster)/\(task)", "hypothesis": crashed ? "agent.py raises on additions" : "agent.py writes no answer for multiplications",
                    "label": crashed ? "crash" : "no answer", "severity": crashed ? "critical" : "high"]
        }
        let json = String(decoding: try JSONSerialization.data(withJSONObject: ["triage": entries], options: [.sortedKeys]), as: UTF8.self)
        return (exp, json)
    }

    func configure(_ exp: Experiment, preset: String, binary: String, model: FakeModel, env: [String: String], command: [String]? = nil) throws {
        let path = exp.root + "/experiment_config.yaml"
        var text = try String(contentsOfFile: path, encoding: .utf8)
        text += "\ntriage:\n  preset: \(preset)\n  bin: \(binary)\n"
        if let command { text += "  command: [\(command.map { "'" + $0.replacingOccurrences(of: "'", with: "''") + "'" }.joined(separator: ", "))]\n" }
        text += "  env:\n"
        for (k, v) in env.sorted(by: { $0.key < $1.key }) { text += "    \(k): \"\(v)\"\n" }
        text += "  network:\n    inference: [\"\(model.address)\"]\n    upstream_ca: \(model.caFile)\n"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
    }

    func expectTriaged(_ exp: Experiment, _ r: Run, key: String) throws {
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        let row = try #require(try exp.rows("triage").last)
        let entries = try #require(row["entries"] as? [[String: Any]])
        #expect(entries.count == row["records"] as? Int && row["refused"] as? Int == 0, "\(row)")
        #expect(Set(entries.compactMap { $0["severity"] as? String }) == ["critical", "high"])
        let md = try exp.file("workspace/failures.md")
        #expect(md.contains("hypothesis: `agent.py raises on additions") && md.contains("severity critical"), "\(md)")
        let grep = try runProcess("/bin/grep", ["-rla", "--", key, exp.root])
        #expect(grep.stdout.isEmpty, "the API key was written to: \(grep.stdout)")
    }

    @Test("triage.preset: claude: the real Claude Code, its prompt the triage's, writes triage.json with its own Write tool through the inference gate; every entry kept; its key written nowhere")
    func claude() throws {
        try requireRoot()
        let (exp, json) = try failed()
        let model = try FakeModel(turns: [
            [["text": "I will read the records."], ["tool": "Read", "input": ["file_path": "/work/in/records.json"]]],
            [["tool": "Write", "input": ["file_path": "/work/out/triage.json", "content": json]]],
        ])
        try configure(exp, preset: "claude", binary: try RealAgent.binary("claude-code"), model: model,
                      env: ["ANTHROPIC_BASE_URL": "https://\(model.address)"])
        let key = "sk-ant-triage-" + UUID().uuidString
        let r = try exp.run(["triage"], environment: ["ANTHROPIC_API_KEY": key])
        try expectTriaged(exp, r, key: key)
        let asked = model.requests().filter { ($0["path"] as? String)?.hasSuffix("/v1/messages") == true }
        #expect(asked.count >= 2, "\(model.requests())")
        #expect(model.toolResults().contains { $0.contains("records") }, "Claude Code never read the records: \(model.toolResults())")
    }

    @Test("triage.preset: codex: the real Codex CLI (its config.toml put in its home, the gate's CA through CODEX_CA_CERTIFICATE) writes triage.json with its shell through the inference gate; every entry kept; its key written nowhere")
    func codex() throws {
        try requireRoot()
        let (exp, json) = try failed()
        let model = try FakeModel(turns: [
            [["tool": "exec_command", "input": ["cmd": "head -c 300 /work/in/records.json"]]],
            [["tool": "exec_command", "input": ["cmd": "cat > /work/out/triage.json <<'EOF'\n\(json)\nEOF\necho written-$?"]]],
            [["text": "The triage is written."]],
        ])
        let binary = try RealAgent.binary("codex")
        // The preset's command, pointed at the fake vendor (a Responses provider of its own).
        let command = [binary, "exec", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check", "--json",
                       "-c", "model=\"gpt-5-codex\"", "-c", "model_provider=\"fake\"",
                       "-c", "model_providers.fake={ name = \"fake\", base_url = \"https://\(model.address)/v1\", env_key = \"OPENAI_API_KEY\", wire_api = \"responses\" }",
                       "{prompt}"]
        try configure(exp, preset: "codex", binary: binary, model: model, env: [:], command: command)
        let key = "sk-triage-" + UUID().uuidString
        let r = try exp.run(["triage"], environment: ["OPENAI_API_KEY": key])
        try expectTriaged(exp, r, key: key)
        #expect(model.requests().contains { ($0["path"] as? String)?.hasSuffix("/v1/responses") == true }, "\(model.requests())")
        #expect(model.toolResults().contains { $0.contains("written-0") }, "\(model.toolResults())")
    }
}
