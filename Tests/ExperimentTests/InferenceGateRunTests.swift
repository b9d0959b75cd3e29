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

    /// Every task sends a long prompt naming its instruction to both vendors (Anthropic with a
    /// `cache_control` breakpoint). Then one train task probes every task's prompt and says
    /// which the vendors had cached.
    /// `carryingTrainKey`: each run also sends with the train keys written into agent.py.
    static func signaller(carryingTrainKey: Bool = false) -> String {
        "CARRY = \(carryingTrainKey ? "True" : "False")\n" + signaller
    }

    static let signaller = """
        import os, anthropic, openai

        def prompt(instruction):
            return "SIGNAL " + instruction + " " + "x" * 1100

        def clients(keys=None):
            addr = os.environ["FAKE_MODEL"]
            k1, k2 = keys or (os.environ["OPENAI_API_KEY"], os.environ["ANTHROPIC_API_KEY"])
            return (openai.OpenAI(base_url="https://%s/v1" % addr, api_key=k1, max_retries=0, timeout=30),
                    anthropic.Anthropic(base_url="https://%s" % addr, api_key=k2, max_retries=0, timeout=30))

        def send(o, a, instruction):
            text = prompt(instruction)
            r1 = o.chat.completions.create(model="gpt-fake", messages=[{"role": "user", "content": text}], prompt_cache_key="k")
            # The breakpoint nested in a document's own content blocks (a red team's: the gate
            # once removed only those at the levels it listed).
            r2 = a.messages.create(model="claude-fake", max_tokens=10, messages=[{"role": "user", "content": [
                {"type": "document", "source": {"type": "content", "content": [
                    {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]}}]}])
            return r1.usage.prompt_tokens_details.cached_tokens, r2.usage.cache_read_input_tokens

        class HarnessAgent:
            def run(self, instruction):
                o, a = clients()
                if os.environ.get("PROBE") != "1":
                    for c in [(o, a)] + ([clients(("sk-train", "sk-ant-train"))] if CARRY else []):
                        try:
                            send(*c, instruction)
                        except (openai.PermissionDeniedError, anthropic.PermissionDeniedError) as e:
                            print("refused:", e)
                    # What the run was given, reversed into the trace (traces are redacted verbatim).
                    return "keys=%s,%s" % (os.environ["OPENAI_API_KEY"][::-1], os.environ["ANTHROPIC_API_KEY"][::-1])
                if instruction != "square 1":
                    return ""
                hits = {"openai": [], "anthropic": []}
                for n in range(1, 11):
                    c1, c2 = send(o, a, "square %d" % n)
                    if c1: hits["openai"].append(n)
                    if c2: hits["anthropic"].append(n)
                return "openai=%s anthropic=%s" % (hits["openai"], hits["anthropic"])
        """

    /// prepare (its baseline runs every task as held out: the split is not made yet), a train
    /// run and a gate (each task signals through its run's gate), then a train run of sq-1
    /// that probes. Returns the held-out and train numbers, and what the probe saw.
    /// `carryingTrainKey`: agent.py sends with the train keys written into it (a coding agent
    /// that read them in a train trace), whatever its run was given.
    func cacheProbe(heldOutKeys: Bool, carryingTrainKey: Bool = false)
        throws -> (test: Set<Int>, train: Set<Int>, openai: Set<Int>, anthropic: Set<Int>, requests: [[String: Any]], violations: [[String: Any]]) {
        let model = try FakeModel(turns: [])
        let exp = try make(model, through: "inference")
        defer { exp.removeScratch() }
        try exp.set("env_pass", "[FAKE_MODEL, OPENAI_API_KEY, ANTHROPIC_API_KEY, PROBE]", in: "runner")
        try exp.set("held_out_runtime", heldOutKeys ? "host\n  held_out_env: {OPENAI_API_KEY: HELD_OUT_OPENAI_KEY, ANTHROPIC_API_KEY: HELD_OUT_ANTHROPIC_KEY}"
                                                  : "host\n  shared_vendor_account: true", in: "gate")
        try exp.setAgent(Self.signaller(carryingTrainKey: carryingTrainKey))
        var env = ["FAKE_MODEL": model.address, "OPENAI_API_KEY": "sk-train", "ANTHROPIC_API_KEY": "sk-ant-train",
                   "HELD_OUT_OPENAI_KEY": "sk-held-out", "HELD_OUT_ANTHROPIC_KEY": "sk-ant-held-out", "PROBE": "0"]
        let p = try exp.run(["prepare"], environment: env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let split = try exp.split()
        try #require(split.train.contains("sq-1"), "sq-1 is held out in this split: \(split)")
        let t = try exp.run(["benchmark"], environment: env)
        try #require(t.status == 0 || t.status == 1, "\(t.stdout)\(t.stderr)")
        // No sandbox held a key: the train traces show what each run was given, placeholders
        // (OpenAI's keeps its "sk-" prefix), never a key; the vendor got the keys.
        let real = ["sk-train", "sk-ant-train", "sk-held-out", "sk-ant-held-out"]
        for id in split.train {
            let given = try #require(exp.traceFile(id, "answer.txt"), "no trace for \(id)")
            let keys = String(given[try #require(given.range(of: "got=keys="), "\(given)").upperBound...].prefix { $0 != " " })
            let seen = keys.split(separator: ",").map { String($0.reversed()) }
            #expect(seen.count == 2 && seen.allSatisfy { $0.hasPrefix("sk-") && !real.contains($0) }, "\(id): \(given)")
        }
        let g = try exp.run(["gate"], environment: env)
        try #require(g.stdout.contains("REJECTED"), "\(g.stdout)\(g.stderr)")
        // The operator is told about the cache the gate cannot keep apart, unless separated.
        #expect(g.stderr.contains("OpenAI caches long prompts per organisation") == !heldOutKeys, "\(g.stderr)")
        env["PROBE"] = "1"
        let b = try exp.run(["benchmark", "--task-ids", "sq-1"], environment: env)
        try #require(b.status == 0 || b.status == 1, "\(b.stdout)\(b.stderr)")
        let seen = try #require(exp.traceFile("sq-1", "answer.txt"))
        func numbers(_ vendor: String) -> Set<Int> {
            guard let r = seen.range(of: vendor + "=[") else { return [] }
            let list = seen[r.upperBound...].prefix { $0 != "]" }
            return Set(list.split(separator: ",").compactMap { Int($0.trimmingCharacters(in: .whitespaces)) })
        }
        func n(_ ids: [String]) -> Set<Int> { Set(ids.compactMap { Int($0.dropFirst(3)) }) }
        let accounts = Set(model.requests().compactMap { $0["account"] as? String })
        let shown = Set(real.flatMap { ["Bearer " + $0, $0] })
        #expect(!accounts.isEmpty && accounts.isSubset(of: shown), "the vendor got \(accounts)")
        return (n(split.test), n(split.train), numbers("openai"), numbers("anthropic"), model.requests(), try exp.rows("violation"))
    }

    @Test("prompt cache: a held-out run's Anthropic breakpoints and OpenAI cache keys are removed, so its prompts are not cached for a train run; OpenAI's automatic cache still shows them within one account (the residual docs/benchmarks.md states)")
    func promptCacheSameAccount() throws {
        try requireRoot()
        let r = try cacheProbe(heldOutKeys: false)
        // The cache works through the gate: every train task's prompt was cached at both vendors.
        #expect(r.train.isSubset(of: r.anthropic) && r.train.isSubset(of: r.openai), "\(r.anthropic) \(r.openai)")
        // Held-out prompts reached Anthropic without a breakpoint: not cached.
        #expect(r.anthropic.isDisjoint(with: r.test), "held-out prompts cached at Anthropic: \(r.anthropic) ∩ \(r.test)")
        // OpenAI caches long prompts regardless, per account: the measured residual.
        #expect(r.test.isSubset(of: r.openai), "\(r.openai) \(r.test)")
        // What the gate removed never reached the vendor from a held-out run; train runs keep it.
        let anthropic = r.requests.filter { ($0["vendor"] as? String) == "anthropic" }
        #expect(anthropic.contains { ($0["cache_control"] as? Bool) == false } && anthropic.contains { ($0["cache_control"] as? Bool) == true })
        let chats = r.requests.filter { ($0["vendor"] as? String) == "openai-chat" }
        #expect(chats.contains { ($0["prompt_cache_key"] as? Bool) == false } && chats.contains { ($0["prompt_cache_key"] as? Bool) == true })
    }

    /// The agent.py of this test sends with its run's own keys first (as an honest one does),
    /// then with the train keys it carries.
    @Test("prompt cache: with another account for held-out runs (gate.held_out_env), neither vendor shows a held-out prompt to a train run; an agent.py that also carries the train keys (written into it) is refused at the gate, in held-out runs as a foreign key and in train runs as a leaked one, recorded, and leaves no prompt in the train account's cache; every run is given placeholders, which its trace shows, and the vendor gets the keys")
    func trainKeyCarriedIntoHeldOut() throws {
        try requireRoot()
        let r = try cacheProbe(heldOutKeys: true, carryingTrainKey: true)
        #expect(r.train.isSubset(of: r.openai) && r.train.isSubset(of: r.anthropic), "\(r.openai) \(r.anthropic)")
        #expect(r.openai.isDisjoint(with: r.test) && r.anthropic.isDisjoint(with: r.test), "\(r.openai) \(r.anthropic) \(r.test)")
        // Each held-out task's first request was refused: an egress violation of the gate's
        // held-out split per task, with no key in the ledger.
        let refused = r.violations.filter { ($0["kind"] as? String) == "egress" && ($0["actor"] as? String)?.contains("gate, held-out split") == true }
        #expect(refused.count == 1 && (refused.first?["count"] as? Int) == r.test.count, "\(r.violations)")
        #expect(!r.violations.contains { "\($0)".contains("sk-") }, "a key in the ledger: \(r.violations)")
        // No sandbox is given a key, so the carried one is refused in train runs too, as a leak.
        #expect(r.violations.contains { ($0["actor"] as? String) == "agent.py (train run)" && ($0["kind"] as? String) == "egress" && ($0["count"] as? Int) == r.train.count }, "\(r.violations)")
    }

    /// A scripted coding agent (the vendors' Python client, through the run's own gate with its
    /// placeholder): it runs the train split and a gate (agent.py's held-out runs put each task
    /// into a long, cacheable prompt), then asks the vendor with its own key which of the ten
    /// prompts are cached, and prints what it found. Its second start ends the run.
    static let cacheProber = """
        import json, os, subprocess, sys, openai
        if os.environ["AUTOHARNESS_AGENT_START"] != "1":
            sys.exit(0)
        for verb in ("benchmark", "gate"):
            r = subprocess.run(["autoharness", verb], capture_output=True, text=True)
            print(verb, r.returncode, r.stdout[-300:], flush=True)
        o = openai.OpenAI(base_url="https://%s/v1" % os.environ["FAKE_MODEL"], api_key=os.environ["OPENAI_API_KEY"], max_retries=0, timeout=30)
        hits = []
        for n in range(1, 11):
            text = "SIGNAL square %d " % n + "x" * 1100
            r = o.chat.completions.create(model="gpt-fake", messages=[{"role": "user", "content": text}])
            if r.usage.prompt_tokens_details.cached_tokens:
                hits.append(n)
        print("PROBE " + json.dumps({"hits": hits, "key": os.environ["OPENAI_API_KEY"]}), flush=True)
        """

    /// `autoharness run` with `cacheProber` as the coding agent (its key the train runs' own,
    /// as one OpenAI key for Codex and the runner would be): returns the split's numbers and
    /// the cached prompts the agent found.
    func codingAgentProbe(sharedAccount: Bool) throws -> (test: Set<Int>, train: Set<Int>, hits: Set<Int>, key: String) {
        let model = try FakeModel(turns: [])
        let exp = try make(model, through: "inference")
        defer { exp.removeScratch() }
        let venv = try ModelClients.venv()
        let dir = try TempDir(mode: 0o755)
        try Self.cacheProber.write(toFile: dir.path + "/probe.py", atomically: true, encoding: .utf8)
        chmod(dir.path + "/probe.py", 0o644)
        try exp.set("env_pass", "[FAKE_MODEL, OPENAI_API_KEY, ANTHROPIC_API_KEY, PROBE]", in: "runner")
        try exp.set("held_out_runtime", sharedAccount ? "host\n  shared_vendor_account: true"
                                                     : "host\n  held_out_env: {OPENAI_API_KEY: HELD_OUT_OPENAI_KEY, ANTHROPIC_API_KEY: HELD_OUT_ANTHROPIC_KEY}", in: "gate")
        try exp.set("inference", "[\"\(model.address)\"]\n    upstream_ca: \(model.caFile)", in: "sandbox")
        try exp.set("command", "[\(venv)/bin/python, \(dir.path)/probe.py]", in: "coding_agent")
        try exp.set("env_pass", "[OPENAI_API_KEY]", in: "coding_agent")
        try exp.set("env", "{FAKE_MODEL: \"\(model.address)\"}", in: "coding_agent")
        try exp.set("binds", "[\(venv), \(dir.path)]", in: "coding_agent")
        try exp.set("quick_exit_seconds", "0", in: "coding_agent")
        try exp.set("max_restarts", "0", in: "coding_agent")
        try exp.setAgent(Self.signaller())
        let env = ["FAKE_MODEL": model.address, "OPENAI_API_KEY": "sk-train", "ANTHROPIC_API_KEY": "sk-ant-train",
                   "HELD_OUT_OPENAI_KEY": "sk-held-out", "HELD_OUT_ANTHROPIC_KEY": "sk-ant-held-out", "PROBE": "0"]
        let p = try exp.run(["prepare"], environment: env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let r = try exp.run(["run", "--max-hours", "0.1"], environment: env)
        let log = (try? String(contentsOfFile: exp.root + "/.autoharness/run/agent.log", encoding: .utf8)) ?? ""
        // The second start made no progress: the run ends with "nothing left" (3).
        try #require(r.status == 3, "\(r.stdout)\(r.stderr)\(log.suffix(3000))")
        // The agent's gate ran every held-out task (each signalled through its run's gate).
        let attempts = try exp.rows("gate_attempt")
        #expect(attempts.count == 1 && attempts.first?["accepted"] as? Bool == false, "\(attempts) \(log.suffix(3000))")
        let line = try #require(log.split(separator: "\n").first { $0.hasPrefix("PROBE ") }, "no probe: \(log.suffix(3000))")
        let found = try #require(try JSONSerialization.jsonObject(with: Data(line.dropFirst(6).utf8)) as? [String: Any])
        let split = try exp.split()
        func n(_ ids: [String]) -> Set<Int> { Set(ids.compactMap { Int($0.dropFirst(3)) }) }
        return (n(split.test), n(split.train), Set(found["hits"] as? [Int] ?? []), found["key"] as? String ?? "")
    }

    @Test("prompt cache: the coding agent's own model calls pass its run's gate with a placeholder of its key; with a held-out account (held_out_env) it finds the train runs' prompts cached and no held-out one; with gate.shared_vendor_account: true (the control) it finds the held-out ones too")
    func codingAgentProbesTheCache() throws {
        try requireRoot()
        let own = try codingAgentProbe(sharedAccount: false)
        #expect(own.key != "sk-train" && own.key.hasPrefix("sk-"), "the agent held \(own.key), not a placeholder")
        #expect(!own.train.isEmpty && own.train.isSubset(of: own.hits), "the probe works: \(own.hits) ⊇ \(own.train)")
        #expect(own.hits.isDisjoint(with: own.test), "held-out prompts the coding agent found cached: \(own.hits) ∩ \(own.test)")
        let shared = try codingAgentProbe(sharedAccount: true)
        #expect(!shared.test.isEmpty && shared.test.isSubset(of: shared.hits), "control: \(shared.hits) ⊇ \(shared.test)")
    }
}
