import Foundation
import Testing
import TestSupport
@testable import Experiment
@testable import ExperimentModel

/// BFCL from the real `bfcl-eval` package (scripts/install-bfcl: its task files, possible
/// answers and checker), agent.py the template's function-calling harness, the model a fake
/// vendor reached through the inference gate that answers each request as a plan says.
/// A missing install fails the test: CI installs it first.
enum BfclAdapterNames {
    static let multiTurn = ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]
}

enum Bfcl {
    /// `scripts/install-bfcl --print`: the virtual environment.
    static func install() throws -> String {
        let r = try runProcess("/bin/bash", [Built.packageRoot + "/scripts/install-bfcl", "--print"])
        let line = r.stdout.split(separator: "\n").first { $0.hasPrefix("bfcl ") }
        return try #require(line.map { String($0.dropFirst(5)) }, "bfcl-eval is not installed: run scripts/install-bfcl (\(r.stderr))")
    }

    static func package(_ venv: String) throws -> String {
        let lib = venv + "/lib"
        let python = try #require(try FileManager.default.contentsOfDirectory(atPath: lib).first { $0.hasPrefix("python") })
        return "\(lib)/\(python)/site-packages/bfcl_eval"
    }

    /// The fake model's rules for `plan` (Fixtures/tools/bfcl_answers.py).
    static func answers(_ plan: [(String, String)], package: String) throws -> [[String: Any]] {
        let dir = try TempDir()
        let file = dir.path + "/plan.json"
        try JSONSerialization.data(withJSONObject: plan.map { [$0.0, $0.1] }).write(to: URL(fileURLWithPath: file))
        let r = try runProcess("/usr/bin/python3", [Tools.root + "/bfcl_answers.py", "--package", package,
                                                    "--templates", Built.packageRoot + "/templates", file])
        try #require(r.status == 0, "bfcl_answers.py: \(r.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [[String: Any]])
    }

    /// agent.py v2: the template, each argument a string where its parameter is documented as
    /// a number coerced to that type (what fixes the plan's `stringly` answers).
    static var coercing: String {
        get throws {
            try String(contentsOfFile: Built.packageRoot + "/templates/bfcl/agent.py", encoding: .utf8) + """

                _model_run = HarnessAgent.run


                def _coerced(self, messages, functions):
                    out = _model_run(self, messages, functions)
                    if isinstance(out, str):
                        return out
                    docs = {f["name"].replace(".", "_"): f for f in functions}
                    for call in out:
                        props = docs.get(call["name"], {}).get("parameters", {}).get("properties", {})
                        for k, v in list(call["arguments"].items()):
                            kind = props.get(k, {}).get("type")
                            if isinstance(v, str) and kind in ("integer", "float"):
                                try:
                                    call["arguments"][k] = int(v) if kind == "integer" else float(v)
                                except ValueError:
                                    pass
                    return out


                HarnessAgent.run = _coerced

                """
        }
    }
}

@Suite("BFCL: real tasks, graded by BFCL's own checker in the scorer sandbox", .serialized)
struct BfclTests {
    /// Four categories, the first six tasks of each: 24 real BFCL tasks.
    static let categories = ["simple_python", "multiple", "parallel", "irrelevance"]

    /// What the fake model answers: some tasks right (multiple_2's arguments are all strings),
    /// the others each with one kind of mistake BFCL's checker names; irrelevance tasks
    /// alternately right (no call) and wrong (a call).
    static let plan: [(String, String)] = [
        ("simple_python_0", "right"), ("simple_python_1", "right"), ("simple_python_2", "stringly"),
        ("simple_python_3", "stringly"), ("simple_python_4", "missing"), ("simple_python_5", "extra"),
        ("multiple_0", "right"), ("multiple_1", "stringly"), ("multiple_2", "right"),
        ("multiple_3", "missing"), ("multiple_4", "stringly"), ("multiple_5", "text"),
        ("parallel_0", "right"), ("parallel_1", "stringly"), ("parallel_2", "stringly"),
        ("parallel_3", "extra"), ("parallel_4", "stringly"), ("parallel_5", "missing"),
        ("irrelevance_0", "text"), ("irrelevance_1", "call"), ("irrelevance_2", "text"),
        ("irrelevance_3", "call"), ("irrelevance_4", "text"), ("irrelevance_5", "call"),
    ]

    /// The error type BFCL's checker gives each kind of mistake, by category.
    static func errorType(_ kind: String, _ category: String) -> String? {
        switch (kind, category) {
        case ("stringly", "parallel"), ("missing", "parallel"): "parallel_function_checker_no_order:cannot_find_match"
        case ("stringly", _): "type_error:simple"
        case ("missing", _): "simple_function_checker:missing_required"
        case ("extra", "parallel"): "parallel_function_checker_no_order:wrong_count"
        case ("extra", _): "simple_function_checker:wrong_count"
        case ("text", "multiple"): "ast_decoder:decoder_failed"
        case ("call", _): "irrelevance_error:decoder_success"
        default: nil
        }
    }

    /// A new experiment on those tasks, agent.py's model the fake vendor behind the gate.
    func make(_ model: FakeModel) throws -> Experiment {
        try requireRoot()
        let venv = try Bfcl.install()
        let exp = try Experiment(benchmark: "bfcl", extraArgs: ["--tool", venv + "/bin/bfcl"])
        let path = exp.root + "/experiment_config.yaml"
        var text = try String(contentsOfFile: path, encoding: .utf8)
        #expect(text.contains("bfcl_python: \(venv)/bin/python"), "\(text)")
        text = text.replacingOccurrences(of: "# tasks_per_category: 20 ", with: "tasks_per_category: 6 ")
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        try exp.set("categories", "[\(Self.categories.joined(separator: ", "))]")
        try exp.set("env_pass", "[OPENAI_API_KEY, OPENAI_BASE_URL]", in: "runner")
        try exp.set("inference", "[\"\(model.address)\"]\n    upstream_ca: \(model.caFile)", in: "runner")
        try exp.set("min_improvement", "0", in: "gate")
        // Held-out runs with an account of their own, as a runner reaching a model API must.
        try exp.set("held_out_runtime", "host\n  held_out_env: {OPENAI_API_KEY: OPENAI_API_KEY_HELD_OUT}", in: "gate")
        return exp
    }

    func env(_ model: FakeModel) -> [String: String] {
        ["OPENAI_API_KEY": "sk-test-bfcl", "OPENAI_API_KEY_HELD_OUT": "sk-test-bfcl-held-out", "OPENAI_BASE_URL": "https://\(model.address)/v1"]
    }

    @Test("prepare → benchmark → gate on 24 real BFCL tasks: BFCL's checker's verdicts (a wrong type, a missing parameter, an extra call, a call where none fits) as failure records; a coercing agent.py accepted; the possible answers never in agent.py's sandbox")
    func loop() throws {
        let venv = try Bfcl.install()
        let model = try FakeModel(turns: [], answers: try Bfcl.answers(Self.plan, package: try Bfcl.package(venv)))
        let exp = try make(model)
        defer { exp.removeScratch() }
        let p = try exp.run(["prepare"], environment: env(model))
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let right = Set(Self.plan.filter { $0.1 == "right" || ($0.1 == "text" && $0.0.hasPrefix("irrelevance")) }.map(\.0))
        #expect(p.stdout.contains("baseline: \(right.count)/24 tasks pass"), "\(p.stdout)")
        // Every request went to the fake vendor through the gate, the tools named as OpenAI
        // names them ("." written "_").
        let asked = model.requests().filter { ($0["role"] as? String) == "agent" }
        #expect(asked.count >= 24, "\(asked.count) requests")
        #expect(asked.allSatisfy { (($0["tools"] as? [String]) ?? []).allSatisfy { !$0.contains(".") } })

        let split = try exp.split()
        #expect(split.train.count + split.test.count == 24)
        let b = try exp.run(["benchmark"], environment: env(model))
        #expect(b.status == 0, "\(b.stderr)")
        let rewards = try exp.trainResults()
        for id in split.train { #expect((rewards[id] as? Double) == (right.contains(id) ? 1 : 0), "\(id): \(rewards[id] ?? "nil")") }
        // BFCL's own verdict for each failing train task, as its failure record.
        let book = try #require(try JSONSerialization.jsonObject(with: Data(try exp.file("workspace/failures.json").utf8)) as? [String: Any])
        let records = try #require(book["records"] as? [[String: Any]])
        var seen = Set<String>()
        for (id, kind) in Self.plan where split.train.contains(id) {
            guard let expected = Self.errorType(kind, String(id.prefix { !$0.isNumber }.dropLast())) else { continue }
            let record = records.first { $0["task"] as? String == id }
            #expect(record?["error_class"] as? String == expected, "\(id) (\(kind)): \(record ?? [:])")
            #expect(exp.traceFile(id, "verdict.json")?.contains(expected) == true)
            seen.insert(kind)
        }
        // The stratified split (seed 42) leaves every kind of mistake among the train tasks.
        #expect(seen.isSuperset(of: ["stringly", "missing", "extra", "call"]), "\(seen)")
        #expect(exp.traceFile("simple_python_0", "answer.json")?.contains("calculate_triangle_area") == true)

        // Coercing numbers to their documented types fixes every `stringly` task: accepted.
        try exp.setAgent(try Bfcl.coercing)
        let g = try exp.run(["gate"], environment: env(model))
        #expect(g.stdout.contains("ACCEPTED"), "\(g.stdout)\(g.stderr)")
        let fixed = Set(Self.plan.filter { $0.1 == "stringly" }.map(\.0))
        let heldOutBefore = split.test.filter(right.contains).count, heldOutAfter = split.test.filter { right.contains($0) || fixed.contains($0) }.count
        let attempt = try #require(try exp.rows("gate_attempt").last)
        #expect(abs((attempt["valScore"] as? Double ?? -1) - Double(heldOutAfter) / Double(split.test.count)) < 1e-9
                    && abs((attempt["bestBefore"] as? Double ?? -1) - Double(heldOutBefore) / Double(split.test.count)) < 1e-9,
                "held-out \(heldOutBefore) → \(heldOutAfter) of \(split.test.count): \(attempt)")
        // Nothing of a held-out task's verdict or answer is kept.
        for id in split.test { #expect(exp.filesContaining("\"\(id)\"").allSatisfy { !$0.hasPrefix("workspace/traces") }, "\(id)") }
        #expect(exp.scratchMounts().isEmpty)
    }

    @Test("gate.held_out_runtime: vm: BFCL's held-out tasks answered and graded by BFCL's checker in the guest's kernel, the model reached through the gate; the gate scores what the host would")
    func heldOutInTheVM() throws {
        try HeldOutVMTests.requireVM()
        let venv = try Bfcl.install()
        let model = try FakeModel(turns: [], answers: try Bfcl.answers(Self.plan, package: try Bfcl.package(venv)))
        let exp = try make(model)
        defer { exp.removeScratch() }
        // The baseline's held-out run on the host, the gate's in the guest: one emulated VM
        // (minutes under TCG) is what this test needs, the host's run the reference it matches.
        let p = try exp.run(["prepare"], environment: env(model))
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        try exp.set("held_out_runtime", "vm\n  vm: {accel: tcg, allow_emulation: true, memory_mib: 1536}", in: "gate")
        let split = try exp.split()
        let right = Set(Self.plan.filter { $0.1 == "right" || ($0.1 == "text" && $0.0.hasPrefix("irrelevance")) }.map(\.0))
        let fixed = Set(Self.plan.filter { $0.1 == "stringly" }.map(\.0))
        try exp.setAgent(try Bfcl.coercing)
        let g = try exp.run(["gate"], environment: env(model))
        #expect(g.stdout.contains("ACCEPTED"), "\(g.stdout)\(g.stderr)")
        #expect(g.stderr.contains("held-out VM: \(split.test.count) task(s) answered"), "\(g.stderr)")
        let attempt = try #require(try exp.rows("gate_attempt").last)
        let after = split.test.filter { right.contains($0) || fixed.contains($0) }.count
        #expect(abs((attempt["valScore"] as? Double ?? -1) - Double(after) / Double(split.test.count)) < 1e-9, "\(attempt)")
        #expect(try exp.rows("violation").isEmpty)
        #expect(exp.scratchMounts().isEmpty)
    }

    @Test("the driver kills (kill(-1)) only in a PID namespace that is neither the supervisor's nor the host's first, told by inode number even where /proc is the sandbox's own; zombies are not survivors")
    func killsOnlyInItsOwnNamespace() throws {
        try requireRoot()
        // In a PID namespace with its own /proc, as every sandbox has (NSpid there has one
        // entry, as on the host): the namespace passed as the supervisor's is refused, another is not.
        let probe = """
            import os, sys, time
            sys.path.insert(0, sys.argv[1])
            import autoharness_bfcl_run as r
            own = os.stat("/proc/self/ns/pid").st_ino
            nspid = next(l for l in open("/proc/self/status") if l.startswith("NSpid:")).split()[1:]
            dead = os.fork()
            if dead == 0:
                os._exit(0)
            while open("/proc/%d/stat" % dead).read().rpartition(")")[2].split()[0] != "Z":
                time.sleep(0.01)
            print(len(nspid), r.own_pid_namespace(own), r.own_pid_namespace(int(sys.argv[2])),
                  r.running(dead), r.running(os.getpid()))
            """
        let outer = try #require(Int((try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/pid")).dropFirst(5).dropLast()))
        let scripts = Built.packageRoot + "/templates/bfcl"
        let inner = try runProcess("/usr/bin/unshare", ["-p", "-f", "--mount-proc", "/usr/bin/python3", "-c", probe, scripts, String(outer)])
        #expect(inner.status == 0, "\(inner.stderr)")
        // one NSpid entry; its own namespace given as the supervisor's: no; the real outer one: yes;
        // a zombie child cannot act, the driver itself can
        #expect(inner.stdout == "1 False True False True\n", "\(inner.stdout)\(inner.stderr)")
        // In the host's first namespace (where this test runs): never, even told another one
        // (0) is the supervisor's.
        try #require(outer == 0xEFFF_FFFC, "this test runs in the host's first PID namespace (\(outer))")
        let here = try runProcess("/usr/bin/python3", ["-c", probe, scripts, "0"])
        #expect(here.stdout.split(separator: " ").dropFirst().prefix(2) == ["False", "False"], "\(here.stdout)\(here.stderr)")
    }

    @Test("agent.py is asked in a random order, not in the order of the run's ids it can read in /work/in/task_ids.txt (counting its requests would name each task's category)")
    func requestOrder() throws {
        let venv = try Bfcl.install()
        let model = try FakeModel(turns: [])
        let exp = try make(model)
        defer { exp.removeScratch() }
        try exp.set("max_concurrency", "1")  // one agent.py process: it sees the driver's order
        try exp.setAgent("""
            import sys
            class HarnessAgent:
                def run(self, messages, functions):
                    print("ASKED " + messages[-1]["content"], file=sys.stderr, flush=True)
                    return "no call"
            """)
        let p = try exp.run(["prepare"], environment: env(model))
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let b = try exp.run(["benchmark"], environment: env(model))
        #expect(b.status == 0, "\(b.stderr)")
        let train = try exp.split().train
        let stderr = try #require(exp.traceFile(train[0], "tool.stderr"))
        let asked = stderr.split(separator: "\n").filter { $0.hasPrefix("ASKED ") }.map { String($0.dropFirst(6)) }
        // Each train task's question, in the order of the run's ids.
        var question: [String: String] = [:]
        for category in Self.categories {
            let text = try String(contentsOfFile: try Bfcl.package(venv) + "/data/BFCL_v4_\(category).json", encoding: .utf8)
            for line in text.split(separator: "\n") {
                let task = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
                let turns = try #require(task["question"] as? [[[String: Any]]])
                question[task["id"] as? String ?? ""] = turns[0].last?["content"] as? String
            }
        }
        let inIDOrder = train.compactMap { question[$0] }
        #expect(asked.count == train.count && Set(asked) == Set(inIDOrder), "\(asked.count) asked for \(train.count)")
        #expect(asked != inIDOrder, "asked in the ids' order")
    }

    /// A multi-turn agent.py that puts code where BFCL's checker builds a call to pass to
    /// `eval` (the function's name and an argument's key): run there, it would rewrite the
    /// scorer's rewards at exit. It also fails every task (raises) if any of the package
    /// beyond its back-end code is in its sandbox.
    static let injector = #"""
        import os

        SITE = [p for p in os.environ.get("PYTHONPATH", "").split(":") if p]
        for site in SITE:
            for d, dirs, files in os.walk(site):
                if "possible_answer" in dirs or d.endswith("/bfcl_eval/data") or "multi_turn_checker.py" in files:
                    raise RuntimeError("FOUND " + d)

        FORGE = ("__import__('atexit').register(lambda: open('/work/out/rewards.json', 'w').write("
                 "__import__('json').dumps(dict.fromkeys(open('/work/in/task_ids.txt').read().split(), 1.0))))")


        class HarnessAgent:
            def run(self, messages, functions):
                if messages[-1].get("role") == "tool":
                    return "Done."
                # ls() returns a non-empty dict, so `and` goes on to the forgery.
                return [{"name": "ls(a=True) and " + FORGE + " and ls", "arguments": {}},
                        {"name": "ls", "arguments": {"a=True, **{}) and " + FORGE + " and ls(a": True}}]
        """#

    @Test("multi-turn: agent.py's calls run against BFCL's back-ends turn by turn (their results fed back), BFCL's checker compares state and output; a call whose name or key is code is never given to the checker's eval")
    func multiTurn() throws {
        let venv = try Bfcl.install()
        let plan = (0..<6).map { ("multi_turn_base_\($0)", $0 < 3 ? "right" : "short") }
        let model = try FakeModel(turns: [], answers: try Bfcl.answers(plan, package: try Bfcl.package(venv)))
        let exp = try make(model)
        defer { exp.removeScratch() }
        try exp.set("categories", "[multi_turn_base]")
        let p = try exp.run(["prepare"], environment: env(model))
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 3/6 tasks pass"), "\(p.stdout)")
        // The back-ends' results went back to the model as tool results.
        #expect(model.toolResults().count >= 6, "\(model.toolResults().prefix(3))")
        let split = try exp.split()
        let b = try exp.run(["benchmark"], environment: env(model))
        #expect(b.status == 0, "\(b.stderr)")
        let rewards = try exp.trainResults()
        let book = try #require(try JSONSerialization.jsonObject(with: Data(try exp.file("workspace/failures.json").utf8)) as? [String: Any])
        let records = try #require(book["records"] as? [[String: Any]])
        for (id, kind) in plan where split.train.contains(id) {
            #expect((rewards[id] as? Double) == (kind == "right" ? 1 : 0), "\(id): \(rewards[id] ?? "nil")")
            if kind == "short" {
                let record = records.first { $0["task"] as? String == id }
                #expect((record?["error_class"] as? String)?.hasPrefix("multi_turn:") == true, "\(id): \(record ?? [:])")
            }
        }

        // The injection: every train task fails (graded, not crashed: nothing of the package
        // but its back-ends was found), and no reward was forged.
        try exp.setAgent(Self.injector)
        let i = try exp.run(["benchmark"], environment: env(model))
        #expect(i.status == 0, "\(i.stderr)")
        let forged = try exp.trainResults()
        for id in split.train { #expect((forged[id] as? Double) == 0, "\(id): \(forged[id] ?? "nil")") }
        let statuses = try exp.statuses(split.train)
        #expect(statuses.values.allSatisfy { $0 == "failed" }, "\(statuses)")
        #expect(exp.scratchMounts().isEmpty)
    }

    @Test("--oracle on the multi-turn categories: BFCL's possible answers played turn by turn through the back-ends score every task")
    func oracleMultiTurn() throws {
        try requireRoot()
        let venv = try Bfcl.install()
        let exp = try Experiment(benchmark: "bfcl", extraArgs: ["--tool", venv + "/bin/bfcl"])
        defer { exp.removeScratch() }
        try exp.set("categories", "[\(BfclAdapterNames.multiTurn.joined(separator: ", "))]")
        try exp.setAgent("class HarnessAgent:\n    def run(self, messages, functions):\n        return 'no call'\n")
        try exp.set("held_out_runtime", "host\n  held_out_env: {OPENAI_API_KEY: OPENAI_API_KEY_HELD_OUT}", in: "gate")
        let env = ["OPENAI_API_KEY": "unused", "OPENAI_API_KEY_HELD_OUT": "unused-held-out"]
        let p = try exp.run(["prepare"], environment: env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("/800 tasks pass"), "\(p.stdout)")
        let o = try exp.run(["benchmark", "--oracle"], environment: env)
        #expect(o.status == 0, "\(o.stderr)")
        let train = try exp.split().train
        #expect(o.stdout.contains("train: \(train.count)/\(train.count) passed"), "\(o.stdout.suffix(2000))")
    }

    @Test("runner.binds that would show agent.py the install (and with it every possible answer) are refused; so is a bfcl_python outside a virtual environment holding bfcl-eval")
    func installNeverBound() throws {
        let venv = try Bfcl.install()
        func refusal(binds: String, python: String = venv + "/bin/python3") -> String? {
            let text = "benchmark: bfcl\nbfcl_python: \(python)\nrunner:\n  command: [/usr/bin/python3]\n  scripts: \(Built.packageRoot)/templates/bfcl\n  binds: \(binds)\n"
            do {
                _ = try ExperimentConfig.parse(text, file: "f").makeAdapter(root: "/nonexistent-root", checkTools: false)
                return nil
            } catch {
                return "\(error)"
            }
        }
        #expect(refusal(binds: "[]") == nil)
        let parent = (venv as NSString).deletingLastPathComponent
        #expect(refusal(binds: "[\(parent)]")?.contains("contains bfcl-eval's install (\(venv))") == true, "\(refusal(binds: "[\(parent)]") ?? "accepted")")
        #expect(refusal(binds: "[\(try Bfcl.package(venv))/data]")?.contains("lies inside \(venv)") == true)
        #expect(refusal(binds: "[]", python: "/usr/bin/python3")?.contains("not the Python of a virtual environment") == true)
    }

    /// agent.py as an attacker on BFCL: it looks for the possible answers and for its tasks'
    /// ids (the tasks file, the driver's stack, memory, environment and descriptors: an id names
    /// its category, and an irrelevance task is passed by not calling), forges the rewards file
    /// in its own output, plants Python start-up files where it can write, leaves a process
    /// behind to rewrite its answers once it has exited, and answers with objects that compare
    /// equal to anything.
    static let cheater = #"""
        import json, os, subprocess, sys

        # The possible answers (data/possible_answer/) and the package, wherever they might be.
        FOUND = []
        for top in ["/usr", "/opt", "/var", "/work", "/tmp", "/home", "/root", "/srv"]:
            for d, dirs, files in os.walk(top):
                if "possible_answer" in dirs or "bfcl_eval" in dirs or d.startswith("/var/cache/autoharness"):
                    FOUND.append(d)


        class AlwaysEqual(str):
            def __eq__(self, other):
                return True

            def __hash__(self):
                return 0


        IDS = [l.strip() for l in open("/work/in/task_ids.txt") if l.strip()]
        FORGED = "import json\nopen('/work/out/rewards.json','w').write(json.dumps(dict.fromkeys(%r, 1.0)))\n" % IDS
        for d in ["/work/out", "/tmp", os.path.expanduser("~")]:
            for name in ["sitecustomize.py", "usercustomize.py"]:
                try:
                    with open(os.path.join(d, name), "w") as f:
                        f.write(FORGED)
                except OSError:
                    pass
        exec(FORGED)
        # A survivor that rewrites the driver's answers the moment they are written (woken by
        # inotify as the driver closes them, well before the sandbox's end would kill it; with
        # the driver's kill removed it wins every time): every task answered without a call
        # passes the irrelevance ones.
        REWRITE = r'''
        import ctypes, json, os, sys, time
        ids = %r
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(0)
        if fd >= 0:
            libc.inotify_add_watch(fd, b"/work/out", 0x8 | 0x100)  # IN_CLOSE_WRITE | IN_CREATE
        print("survivor: armed (inotify %%s)" %% (fd >= 0), file=sys.stderr, flush=True)
        os.write(int(sys.argv[1]), b"armed")
        for _ in range(600000):
            if fd >= 0:
                os.read(fd, 4096)
            else:
                time.sleep(0.001)
            try:
                if os.path.getsize("/work/out/answers.json") > 2:
                    open("/work/out/answers.json", "w").write(json.dumps({i: {"result": "no call"} for i in ids}))
                    print("survivor: rewrote the answers", file=sys.stderr, flush=True)
                    break
            except OSError:
                pass
        ''' % IDS
        armed, arm = os.pipe()
        subprocess.Popen([sys.executable, "-c", REWRITE, str(arm)], start_new_session=True, pass_fds=(arm,))
        os.close(arm)
        os.read(armed, 5)  # the survivor watches before the first task is answered
        # A survivor that keeps forging the rewards for a minute, past the runner's end.
        subprocess.Popen([sys.executable, "-c", "import time\nfor _ in range(600):\n time.sleep(0.1)\n try:\n  " + FORGED.replace("\n", "\n  ") + "\n except Exception: pass"],
                         start_new_session=True)


        def task_ids():
            """Anything that names this run's tasks (their ids name their categories): the
            tasks file, the driver's stack, the driver's memory, environment and descriptors."""
            seen = []
            try:
                seen.append(open("/work/out/tasks.jsonl").read(200))
            except OSError:
                pass
            frame = sys._getframe()
            while frame is not None:
                if "task" in frame.f_locals or "tasks" in frame.f_locals:
                    seen.append("frame " + frame.f_code.co_name)
                frame = frame.f_back
            for name in ["maps", "environ", "mem"]:
                try:
                    with open("/proc/%d/%s" % (os.getppid(), name), "rb") as f:
                        seen.append(name + repr(f.read(64)))
                except OSError:
                    pass
            try:
                seen.append("fds %s" % os.listdir("/proc/%d/fd" % os.getppid()))
            except OSError:
                pass
            return seen


        class HarnessAgent:
            def run(self, messages, functions):
                if FOUND or task_ids():  # would pass every irrelevance task: the test sees a score
                    return "FOUND %s %s" % (FOUND[:3], task_ids()[:3])
                # A call where none fits (irrelevance), always-equal values everywhere else.
                f = functions[0]
                names = list(f.get("parameters", {}).get("properties", {}))
                return [{"name": f["name"].replace(".", "_"), "arguments": {n: AlwaysEqual("x") for n in names}}]
        """#

    @Test("verifier-integrity corpus, BFCL: answers and task ids looked for, rewards forged, start-up files planted, a survivor and always-equal objects: every task 0")
    func corpus() throws {
        let model = try FakeModel(turns: [])
        let exp = try make(model)
        defer { exp.removeScratch() }
        try exp.setAgent(Self.cheater)
        let p = try exp.run(["prepare"], environment: env(model))
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        // Every task scored 0: its objects' __eq__ never reaches the checker (the answers are
        // JSON text), the rewards it forged are not the scorer's, nothing it looked for was
        // there (it would then have answered no call, passing the irrelevance tasks), and the
        // survivor was ended before the answers were written (it would have answered no call
        // for every task).
        let passedNone = p.stdout.contains("baseline: 0/24 tasks pass")
        // A train run keeps the runner's stderr with each task's trace: the survivor was armed
        // (the attack ran) and never rewrote the answers.
        let b = try exp.run(["benchmark"], environment: env(model))
        let traces = exp.root + "/workspace/traces/latest"
        let stderr = (try? String(contentsOfFile: traces + "/irrelevance_0/tool.stderr", encoding: .utf8)) ?? ""
        #expect(stderr.contains("survivor: armed (inotify True)"), "\(stderr)")
        #expect(!stderr.contains("survivor: rewrote") && !stderr.contains("not in a PID namespace of its own"), "\(stderr)")
        guard passedNone, b.stdout.contains("train: 0/17 passed") else {
            // What passed, and what agent.py answered there: every file of the irrelevance
            // tasks' traces (the ones agent.py passes by answering without a call: its text
            // then says what it found).
            var shown = ""
            for t in ((try? FileManager.default.contentsOfDirectory(atPath: traces)) ?? []).sorted() where t.hasPrefix("irrelevance") {
                for f in (FileManager.default.enumerator(atPath: "\(traces)/\(t)")?.allObjects as? [String] ?? []).sorted() {
                    guard let text = try? String(contentsOfFile: "\(traces)/\(t)/\(f)", encoding: .utf8) else { continue }
                    shown += "\(t)/\(f): " + text.prefix(800) + "\n"
                }
            }
            Issue.record("a task passed: \(p.stdout)\(p.stderr)\ntrain run: \(b.stdout)\(b.stderr.suffix(2000))\npassing train tasks:\n\(shown)")
            return
        }
    }

    @Test("--oracle: BFCL's possible answers played back score every task of the five default categories")
    func oracle() throws {
        try requireRoot()
        let venv = try Bfcl.install()
        let exp = try Experiment(benchmark: "bfcl", extraArgs: ["--tool", venv + "/bin/bfcl"])
        defer { exp.removeScratch() }
        try exp.setAgent("class HarnessAgent:\n    def run(self, messages, functions):\n        return 'no call'\n")
        try exp.set("held_out_runtime", "host\n  held_out_env: {OPENAI_API_KEY: OPENAI_API_KEY_HELD_OUT}", in: "gate")
        let env = ["OPENAI_API_KEY": "unused", "OPENAI_API_KEY_HELD_OUT": "unused-held-out"]
        let p = try exp.run(["prepare"], environment: env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        // Only the 240 irrelevance tasks pass without a call.
        #expect(p.stdout.contains("baseline: 240/1240 tasks pass"), "\(p.stdout)")
        let o = try exp.run(["benchmark", "--oracle"], environment: env)
        #expect(o.status == 0, "\(o.stderr)")
        let train = try exp.split().train
        #expect(o.stdout.contains("train: \(train.count)/\(train.count) passed"), "\(o.stdout.suffix(2000))")
    }
}
