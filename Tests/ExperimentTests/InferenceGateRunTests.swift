import Foundation
import Testing
import TestSupport

/// OpenAI's and Anthropic's real Python clients, pinned (`scripts/install-model-clients`). A
/// missing install fails the test: CI installs them first.
enum ModelClients {
    static func python() throws -> String {
        let r = try runProcess("/bin/bash", [Built.packageRoot + "/scripts/install-model-clients", "--print"])
        let path = r.stdout.split(separator: " ").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        return try #require(path.flatMap { $0.isEmpty ? nil : $0 }, "the model clients are not installed: run scripts/install-model-clients (\(r.stderr))")
    }

    /// The venv's root (bin/python's grandparent), bound read-only into the runner.
    static func venv() throws -> String {
        URL(fileURLWithPath: try python()).deletingLastPathComponent().deletingLastPathComponent().path
    }
}

/// A held-out agent.py that tries to leave its instruction where a train agent.py can read it
/// back: at the model vendor (a stored completion, a stored response, a file), and through a
/// tool the vendor runs (web fetch). Each attempt's outcome goes into the return value, which
/// the tool writes into the task's trace.
private let stateAttacker = """
    import os

    class HarnessAgent:
        def run(self, instruction):
            import anthropic, openai
            addr = os.environ["FAKE_MODEL"]
            o = openai.OpenAI(base_url="https://%s/v1" % addr, api_key="sk-test", max_retries=0, timeout=30)
            a = anthropic.Anthropic(base_url="https://%s" % addr, api_key="sk-ant-test", max_retries=0, timeout=30)
            out = []

            def attempt(name, f):
                try:
                    r = f()
                    out.append("%s=ok%s" % (name, r if isinstance(r, str) else ""))
                except Exception as e:
                    out.append("%s=%s" % (name, type(e).__name__))

            say = [{"role": "user", "content": instruction}]
            attempt("store", lambda: o.chat.completions.create(model="gpt-fake", messages=say, store=True, metadata={"leak": instruction}) and "")
            attempt("respond", lambda: o.responses.create(model="gpt-fake", input=instruction, metadata={"leak": instruction}) and "")
            attempt("file", lambda: o.files.create(file=("n.txt", instruction.encode()), purpose="user_data") and "")
            attempt("list", lambda: "[" + ",".join(sorted(c.metadata.get("leak", "") for c in o.chat.completions.list().data)) + "]")
            attempt("files", lambda: "[" + ",".join(str(f.id) for f in o.files.list().data) + "]")
            attempt("messages", lambda: a.messages.create(model="claude-fake", max_tokens=10, messages=say).content[0].text and "")
            attempt("fetch", lambda: a.messages.create(model="claude-fake", max_tokens=10, messages=say,
                                                       tools=[{"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 1}]) and "")
            return " ".join(out)
    """

@Suite("Inference gate: a held-out run leaves nothing at the model vendor for a train run", .serialized)
struct InferenceGateRunTests {
    /// The command benchmark run by the vendors' clients, the fake vendor reached as a plain
    /// tunnel (`allow`) or through the gate (`inference`).
    func make(_ model: FakeModel, through: String) throws -> Experiment {
        try requireRoot()
        let venv = try ModelClients.venv()
        let exp = try Experiment(benchmark: "command")
        try exp.set("tasks", "[" + CommandAdapterTests.ids.joined(separator: ", ") + "]")
        try exp.set("command", "[\(venv)/bin/python, \(Tools.root)/command_bench.py, --tasks, \"{task_ids_file}\", --out, \"{output}\"]", in: "runner")
        try exp.set("binds", "[\(Tools.root), \(venv)]", in: "runner")
        try exp.set("env_pass", "[FAKE_MODEL]", in: "runner")
        if through == "inference" {
            try exp.set("inference", "[\"\(model.address)\"]\n    upstream_ca: \(model.caFile)", in: "runner")
        } else {
            // The tunnel's client must trust the fake vendor's own CA.
            try exp.set("env_pass", "[FAKE_MODEL, SSL_CERT_FILE]", in: "runner")
            try exp.set("binds", "[\(Tools.root), \(venv), \(model.certs)]", in: "runner")
            try exp.set("allow", "[\"\(model.address)\"]", in: "runner")
        }
        try exp.setAgent(stateAttacker)
        return exp
    }

    /// prepare (train and held-out runs), then a train run whose traces show what the
    /// held-out run left behind. Returns the train traces' text.
    func attack(_ exp: Experiment, _ model: FakeModel) throws -> (train: [String], test: [String], traces: [String: String]) {
        let env = ["FAKE_MODEL": model.address, "SSL_CERT_FILE": model.caFile]
        let p = try exp.run(["prepare"], environment: env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let b = try exp.run(["benchmark"], environment: env)
        try #require(b.status == 0, "\(b.stdout)\(b.stderr)")
        let split = try exp.split()
        var traces: [String: String] = [:]
        for id in split.train { traces[id] = exp.traceFile(id, "answer.txt") ?? "" }
        return (split.train, split.test, traces)
    }

    @Test("control: through a plain tunnel, a train trace lists the held-out tasks' stored completions")
    func tunnelLeaks() throws {
        let model = try FakeModel(turns: [])
        let exp = try make(model, through: "allow")
        defer { exp.removeScratch() }
        let (_, test, traces) = try attack(exp, model)
        let all = traces.values.joined(separator: "\n")
        // The attack is real: every held-out instruction is readable by a train agent.py.
        for id in test {
            let n = id.dropFirst(3)
            #expect(all.contains("square \(n),") || all.contains("square \(n)]"), "held-out \(id) not listed: \(all)")
        }
        #expect(model.requests().contains { ($0["method"] as? String) == "GET" })
    }

    @Test("through the inference gate: stored state is neither written nor read, server tools are refused, inference works, each refusal is recorded")
    func gateHolds() throws {
        let model = try FakeModel(turns: [])
        let exp = try make(model, through: "inference")
        defer { exp.removeScratch() }
        let (_, test, traces) = try attack(exp, model)
        for (id, text) in traces {
            #expect(text.contains("store=ok") && text.contains("respond=ok") && text.contains("messages=ok"), "\(id): \(text)")
            #expect(text.contains("list=PermissionDeniedError") && text.contains("files=PermissionDeniedError"), "\(id): \(text)")
            #expect(text.contains("file=PermissionDeniedError") && text.contains("fetch=PermissionDeniedError"), "\(id): \(text)")
        }
        let all = traces.values.joined(separator: "\n")
        for id in test { #expect(!all.contains("square \(id.dropFirst(3))"), "held-out \(id) in a train trace: \(all)") }
        let requests = model.requests()
        // Nothing refused reached the vendor; what did was judged and rewritten.
        #expect(!requests.contains { ($0["method"] as? String) == "GET" }, "\(requests)")
        #expect(!requests.contains { ($0["path"] as? String) == "/v1/files" }, "\(requests)")
        let chats = requests.filter { ($0["vendor"] as? String) == "openai-chat" }
        let responses = requests.filter { ($0["vendor"] as? String) == "openai" }
        #expect(!chats.isEmpty && chats.allSatisfy { ($0["store"] as? Bool) == false }, "\(chats)")
        #expect(!responses.isEmpty && responses.allSatisfy { ($0["store"] as? Bool) == false }, "\(responses)")
        #expect(requests.allSatisfy { ($0["host"] as? String) == model.address }, "\(requests)")
        let anthropic = requests.filter { ($0["vendor"] as? String) == "anthropic" }
        #expect(!anthropic.isEmpty && anthropic.allSatisfy { ($0["tools"] as? [Any])?.isEmpty != false }, "\(anthropic)")
        // Each refusal is a violation against agent.py, in train and held-out runs alike.
        let violations = try exp.rows("violation").filter { ($0["kind"] as? String) == "egress" }
        #expect(violations.contains { ($0["detail"] as? String)?.contains(model.address) == true }, "\(violations)")
        #expect(violations.contains { ($0["heldOut"] as? Bool) == true }, "\(violations)")
    }
}
