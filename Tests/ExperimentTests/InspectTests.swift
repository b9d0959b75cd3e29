import Foundation
import Testing
import TestSupport
@testable import Experiment
@testable import ExperimentModel

/// `benchmark: inspect` with the real inspect_ai (scripts/install-inspect), on the task shipped
/// in templates/inspect (theory_of_mind, whose 100 samples ship inside inspect_ai), agent.py's
/// solver on inspect's `mockllm` model or a solver that answers without a model. A missing
/// install fails the test: CI installs it first.
enum Inspect {
    /// `scripts/install-inspect --print`: the virtual environment.
    static func install() throws -> String {
        let r = try runProcess("/bin/bash", [Built.packageRoot + "/scripts/install-inspect", "--print"])
        let line = r.stdout.split(separator: "\n").first { $0.hasPrefix("inspect ") }
        return try #require(line.map { String($0.dropFirst(8)) }, "inspect-ai is not installed: run scripts/install-inspect (\(r.stderr))")
    }

    static let places = ["bathtub", "pantry", "basket", "box", "bucket", "cupboard", "crate", "drawer", "envelope",
                         "suitcase", "treasure_chest", "bottle", "container", "tub", "closet"]

    /// agent.py v2: a solver that answers without a model, from the story's words: the first
    /// place named when the question asks where something was at the beginning, else the last.
    static let heuristic = """
        from inspect_ai.model import ModelOutput
        from inspect_ai.solver import solver

        PLACES = (\(places.map { "\"\($0)\"" }.joined(separator: ", ")))


        def pick(text):
            words = [w.strip(".?,") for w in text.split()]
            places = [w for w in words if w in PLACES]
            if not places:
                return "unknown"
            return places[0] if "beginning" in text else places[-1]


        @solver
        def agent():
            async def solve(state, generate):
                state.output = ModelOutput.from_content(model="heuristic", content=pick(state.input_text))
                return state
            return solve

        """

    /// Whether `heuristic` passes a sample under inspect's `exact()` (the answer is the target,
    /// ignoring case): worked out here from the frozen samples, not by inspect.
    static func heuristicPasses(_ sample: [String: Any]) -> Bool {
        let text: String
        if let s = sample["input"] as? String { text = s } else {
            text = ((sample["input"] as? [[String: Any]])?.last { $0["role"] as? String == "user" }?["content"] as? String) ?? ""
        }
        let words = text.split(separator: " ").map { $0.trimmingCharacters(in: CharacterSet(charactersIn: ".?,")) }
        let found = words.filter { places.contains($0) }
        let answer = found.isEmpty ? "unknown" : (text.contains("beginning") ? found[0] : found[found.count - 1])
        return answer.lowercased() == ((sample["target"] as? String) ?? "\u{0}").lowercased()
    }

    /// The experiment's frozen samples, by id.
    static func samples(_ exp: Experiment) throws -> [String: [String: Any]] {
        var out: [String: [String: Any]] = [:]
        for line in try exp.file(".autoharness/inspect-samples.jsonl").split(separator: "\n") {
            let s = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
            out[try #require(s["id"] as? String)] = s
        }
        return out
    }
}

@Suite("inspect_ai: the solve phase with agent.py in the runner, the task's own scorers in the scorer")
struct InspectTests {
    func make(samples: Int? = nil) throws -> Experiment {
        try requireRoot()
        let venv = try Inspect.install()
        let exp = try Experiment(benchmark: "inspect", extraArgs: ["--tool", venv + "/bin/inspect"])
        let text = try exp.file("experiment_config.yaml")
        #expect(text.contains("inspect_python: \(venv)/bin/python"), "\(text)")
        #expect(text.contains("templates/inspect/theory_of_mind.py@theory_of_mind"), "\(text)")
        if let samples {
            try (text + "\ntasks: [\((1...samples).map(String.init).joined(separator: ", "))]\n")
                .write(toFile: exp.root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
        }
        try exp.set("min_improvement", "0", in: "gate")
        return exp
    }

    @Test("init reads the task's 100 samples into the private directory (root-only); prepare → benchmark → gate on 40 of them: mockllm's fixed answer fails every sample with exact()'s verdict, a solver of agent.py's own is accepted, each reward what exact() gives its answer")
    func loop() throws {
        let exp = try make(samples: 40)
        defer { exp.removeScratch() }
        let frozen = try Inspect.samples(exp)
        #expect(frozen.count == 100)
        var st = stat()
        #expect(stat(exp.root + "/.autoharness/inspect-samples.jsonl", &st) == 0 && st.st_mode & 0o077 == 0, "mode \(String(st.st_mode, radix: 8))")

        let p = try exp.run(["prepare"], environment: [:])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/40 tasks pass"), "\(p.stdout)")
        let split = try exp.split()
        #expect(split.train.count == 28 && split.test.count == 12)

        let b = try exp.run(["benchmark"], environment: [:])
        #expect(b.status == 0, "\(b.stderr)")
        let rewards = try exp.trainResults()
        #expect(split.train.allSatisfy { (rewards[$0] as? Double) == 0 })
        // exact()'s verdict on mockllm's answer, with the target, as each failure's record.
        let id = split.train[0]
        let verdict = try #require(exp.traceFile(id, "verdict.json"))
        #expect(verdict.contains("\"value\": \"I\"") && verdict.contains("mockllm"), "\(verdict)")
        #expect(verdict.contains("\"target\": \"\(try #require(frozen[id]?["target"] as? String))\""), "\(verdict)")
        let book = try #require(try JSONSerialization.jsonObject(with: Data(try exp.file("workspace/failures.json").utf8)) as? [String: Any])
        let record = try #require((book["records"] as? [[String: Any]])?.first { $0["task"] as? String == id })
        #expect(record["check"] as? String == "inspect_ai/exact" && record["error_class"] as? String == "value I", "\(record)")

        // agent.py v2 answers from the story: accepted, each held-out reward as exact() has it.
        try exp.setAgent(Inspect.heuristic)
        let g = try exp.run(["gate"], environment: [:])
        #expect(g.stdout.contains("ACCEPTED"), "\(g.stdout)\(g.stderr)")
        let passing = Set(frozen.filter { Inspect.heuristicPasses($0.value) }.map(\.key))
        #expect(passing.count > 30 && passing.count < 100, "\(passing.count)")
        let attempt = try #require(try exp.rows("gate_attempt").last)
        let expected = Double(split.test.filter(passing.contains).count) / Double(split.test.count)
        #expect(abs((attempt["valScore"] as? Double ?? -1) - expected) < 1e-9, "\(attempt)")
        let b2 = try exp.run(["benchmark"], environment: [:])
        #expect(b2.status == 0, "\(b2.stderr)")
        let after = try exp.trainResults()
        for id in split.train { #expect((after[id] as? Double) == (passing.contains(id) ? 1 : 0), "\(id): \(after[id] ?? "nil")") }
        // Nothing of a held-out sample is kept: no trace, no verdict, no target in the workspace.
        for id in split.test { #expect(!FileManager.default.fileExists(atPath: exp.root + "/workspace/traces/latest/\(id)"), "\(id)") }
        #expect(exp.scratchMounts().isEmpty)
    }

    @Test("agent.py's solver on a vendor's model: inspect's openai/ model (its OpenAI client) reaches the vendor only through the inference gate, held-out runs with the held-out account's key; what the model answered is what exact() scores")
    func vendorModel() throws {
        let exp = try make(samples: 20)
        defer { exp.removeScratch() }
        let frozen = try Inspect.samples(exp)
        func input(_ s: [String: Any]) -> String {
            (s["input"] as? String) ?? ((s["input"] as? [[String: Any]])?.last?["content"] as? String) ?? ""
        }
        // The vendor answers samples 1-10 with their targets and the rest with a wrong place.
        let ids = (1...20).map(String.init)
        let right = Set((1...10).map(String.init))
        let answers: [[String: Any]] = try ids.map { id in
            let s = try #require(frozen[id], "sample \(id)")
            let answer = right.contains(id) ? try #require(s["target"] as? String) : "nowhere"
            return ["when": input(s), "turn": [["text": answer]]]
        }
        let model = try FakeModel(turns: [], answers: answers)
        try exp.set("agent_model", "openai/gpt-fake")
        try exp.set("env_pass", "[OPENAI_API_KEY, OPENAI_BASE_URL]", in: "runner")
        try exp.set("inference", "[\"\(model.address)\"]\n    upstream_ca: \(model.caFile)", in: "runner")
        try exp.set("held_out_runtime", "host\n  held_out_env: {OPENAI_API_KEY: OPENAI_API_KEY_HELD_OUT}", in: "gate")
        let env = ["OPENAI_API_KEY": "sk-test-inspect", "OPENAI_API_KEY_HELD_OUT": "sk-test-inspect-held-out",
                   "OPENAI_BASE_URL": "https://\(model.address)/v1"]
        let p = try exp.run(["prepare"], environment: env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 10/20 tasks pass"), "\(p.stdout)")
        let split = try exp.split()
        let b = try exp.run(["benchmark"], environment: env)
        #expect(b.status == 0, "\(b.stderr)")
        let rewards = try exp.trainResults()
        for id in split.train { #expect((rewards[id] as? Double) == (right.contains(id) ? 1 : 0), "\(id): \(rewards[id] ?? "nil")") }
        // Every sample's request reached the vendor through the gate (the baseline's, all held-out,
        // then the train run's), each sample once, with the key of its phase: OpenAI's Chat
        // Completions, nothing stored.
        let requests = model.requests()
        #expect(requests.count == 20 + split.train.count, "\(requests.count) requests")
        #expect(requests.allSatisfy { $0["model"] as? String == "gpt-fake" && $0["role"] as? String == "agent" && $0["vendor"] as? String == "openai-chat"
                    && $0["store"] as? String == "absent" }, "\(requests.prefix(2))")
        let accounts = requests.compactMap { $0["account"] as? String }
        #expect(accounts.prefix(20).allSatisfy { $0 == "Bearer sk-test-inspect-held-out" } && accounts.dropFirst(20).allSatisfy { $0 == "Bearer sk-test-inspect" }, "\(accounts)")
        #expect(exp.scratchMounts().isEmpty)
    }

    /// Two train runs of one prepared experiment.
    @Test("a sample the solver raised on scores 0 with the solver's message as its failure record (not_scored); the others are scored as usual. The example task scores with exact(): an answer listing every place the story names (which includes() would pass wherever the target is among them) scores 0")
    func solverRaisesAndHedgedAnswer() throws {
        let exp = try make(samples: 20)
        defer { exp.removeScratch() }
        let p = try exp.run(["prepare"], environment: [:])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        try exp.setAgent(Inspect.heuristic.replacingOccurrences(of: "    async def solve(state, generate):\n",
            with: "    async def solve(state, generate):\n        if int(state.sample_id) % 2:\n            raise ValueError(\"no idea about %s\" % state.sample_id)\n"))
        let b = try exp.run(["benchmark"], environment: [:])
        #expect(b.status == 0, "\(b.stderr)")
        let frozen = try Inspect.samples(exp)
        let rewards = try exp.trainResults()
        let book = try #require(try JSONSerialization.jsonObject(with: Data(try exp.file("workspace/failures.json").utf8)) as? [String: Any])
        let records = try #require(book["records"] as? [[String: Any]])
        let split = try exp.split()
        for id in split.train {
            let record = records.first { $0["task"] as? String == id }
            if Int(id)! % 2 == 1 {
                #expect((rewards[id] as? Double) == 0)
                #expect(record?["error_class"] as? String == "not_scored" && (record?["excerpt"] as? String)?.contains("no idea about \(id)") == true,
                        "\(id): \(record ?? [:])")
            } else {
                let passes = Inspect.heuristicPasses(try #require(frozen[id]))
                #expect((rewards[id] as? Double) == (passes ? 1 : 0), "\(id)")
                if !passes { #expect(record?["error_class"] as? String == "value I", "\(id): \(record ?? [:])") }
            }
        }

        // The hedged answer.
        try exp.setAgent(Inspect.heuristic.replacingOccurrences(of: "content=pick(state.input_text)", with: "content=hedge(state.input_text)") + """

            def hedge(text):
                words = [w.strip(".?,") for w in text.split()]
                return " or ".join(dict.fromkeys(w for w in words if w in PLACES))

            """)
        let hedged = try exp.run(["benchmark"], environment: [:])
        #expect(hedged.status == 0, "\(hedged.stderr)")
        let hedgedRewards = try exp.trainResults()
        var containing = 0
        for id in split.train {
            #expect((hedgedRewards[id] as? Double) == 0, "\(id)")
            let sample = try #require(frozen[id])
            let text = ((sample["input"] as? [[String: Any]])?.last?["content"] as? String) ?? ""
            if let target = sample["target"] as? String, text.split(separator: " ").contains(where: { $0.trimmingCharacters(in: CharacterSet(charactersIn: ".?,")) == target }) {
                containing += 1
            }
        }
        // The control: the answer holds the target for every train sample.
        #expect(containing == 14, "\(containing)")
    }

    @Test("runner.binds naming inspect's install (whose packaged datasets the runner gets hidden) or the task file's directory is refused before any sandbox starts")
    func bindsRefused() throws {
        let exp = try make(samples: 20)
        defer { exp.removeScratch() }
        let venv = try Inspect.install()
        try exp.set("binds", "[\(venv)]", in: "runner")
        var p = try exp.run(["prepare"], environment: [:])
        #expect(p.status != 0 && p.stderr.contains("is inspect_ai's install"), "\(p.stderr)")
        try exp.set("binds", "[\(Built.packageRoot)/templates]", in: "runner")
        p = try exp.run(["prepare"], environment: [:])
        #expect(p.status != 0 && p.stderr.contains("holds the task file"), "\(p.stderr)")
    }

    /// An agent.py that answers wrong, after `attack` (Python run at import, in the runner).
    static func attacker(_ attack: String) -> String {
        """
        import os, sys
        from inspect_ai.model import ModelOutput
        from inspect_ai.solver import solver

        \(attack)


        @solver
        def agent():
            async def solve(state, generate):
                state.output = ModelOutput.from_content(model="attacker", content="nowhere")
                return state
            return solve

        """
    }

    /// The exploit corpus of `benchmark: inspect`, each as agent.py on 20 samples: what it did
    /// shows in the train trace's tool.stderr (the runner's), and every reward is 0.
    static let corpus: [(name: String, attack: String, shows: [String], never: [String])] = [
        // A forged log: once inspect has written the solve log, rewrite it with every sample
        // scored C by exact() and accuracy 1.0.
        ("forged log", """
            import atexit, glob, json
            def forge():
                for path in glob.glob("/work/out/log/*.json"):
                    log = json.load(open(path))
                    for s in log["samples"]:
                        s["scores"] = {"exact": {"value": "C", "answer": s["target"], "explanation": "forged"}}
                    log["results"] = {"total_samples": 20, "completed_samples": 20, "scores": [{"name": "exact", "scorer": "exact",
                                      "metrics": {"accuracy": {"name": "accuracy", "value": 1.0}}}]}
                    json.dump(log, open(path, "w"))
                    print("FORGED %d samples of %s" % (len(log["samples"]), os.path.basename(path)), file=sys.stderr, flush=True)
            atexit.register(forge)
            """, ["FORGED 14 samples"], []),
        // The log's header names the model a scorer would be given: a vendor's, at an
        // address of agent.py's choosing, with arguments. The scorer takes none of it (were it
        // built, the scorer would fail: no client, no network, and no verdict would be written).
        ("header model", """
            import atexit, glob, json
            def retarget():
                for path in glob.glob("/work/out/log/*.json"):
                    log = json.load(open(path))
                    log["eval"].update({"model": "openai/gpt-4o", "model_base_url": "http://192.0.2.1:9/v1",
                                        "model_args": {"organization": "x"}, "model_roles": {"grader": {"model": "openai/gpt-4o"}}})
                    json.dump(log, open(path, "w"))
                    print("RETARGETED " + os.path.basename(path), file=sys.stderr, flush=True)
            atexit.register(retarget)
            """, ["RETARGETED "], []),
        // The scorer patched in agent.py's process: exact() made to pass everything.
        ("patched scorer", """
            import inspect_ai.scorer as scorers
            from inspect_ai.scorer import Score, scorer, accuracy
            @scorer(metrics=[accuracy()])
            def exact(*args, **kwargs):
                async def score(state, target):
                    return Score(value="C")
                return score
            scorers.exact = exact
            import inspect_ai.scorer._classification as c
            c.exact = exact
            print("PATCHED exact", file=sys.stderr, flush=True)
            """, ["PATCHED exact"], []),
        // The targets read: inspect's own copy of the dataset, the experiment's frozen list,
        // the task file, and the samples file the runner was given.
        ("target read", """
            for what, path in [("examples", os.path.dirname(__import__("inspect_ai").__file__) + "/dataset/_examples/theory_of_mind.jsonl"),
                               ("frozen", "EXPERIMENT/.autoharness/inspect-samples.jsonl"), ("task", "TEMPLATES/inspect/theory_of_mind.py")]:
                try:
                    open(path).read()
                    print("READ " + what, file=sys.stderr, flush=True)
                except OSError as e:
                    print("REFUSED %s %s" % (what, type(e).__name__), file=sys.stderr, flush=True)
            try:
                from inspect_ai.dataset import example_dataset
                example_dataset("theory_of_mind")
                print("READ example_dataset", file=sys.stderr, flush=True)
            except Exception as e:
                print("REFUSED example_dataset %s" % type(e).__name__, file=sys.stderr, flush=True)
            given = open("/work/out/samples.jsonl").read()
            print("GIVEN target=%s metadata=%s" % ('"target"' in given, '"metadata"' in given), file=sys.stderr, flush=True)
            """, ["REFUSED examples PermissionError", "REFUSED frozen FileNotFoundError", "REFUSED task FileNotFoundError",
                  "REFUSED example_dataset", "GIVEN target=False metadata=False"], ["READ "]),
        // A survivor: a process of its own session that outlives inspect to rewrite the log
        // once the runner's main process is gone.
        ("survivor", """
            import time
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    print("SURVIVOR STARTED", file=sys.stderr, flush=True)
                    deadline = time.time() + 60
                    while time.time() < deadline and not (os.path.isdir("/work/out/log") and os.listdir("/work/out/log")):
                        time.sleep(0.1)
                    time.sleep(3)
                    print("SURVIVOR WROTE", file=sys.stderr, flush=True)
                os._exit(0)
            """, ["SURVIVOR STARTED"], ["SURVIVOR WROTE"]),
    ]

    @Test("the exploit corpus scores 0: a forged solve log (every sample scored C), its header's model, exact() patched in agent.py's process, the targets read (inspect's packaged copy hidden, the frozen list and task file absent, the given samples without targets), a survivor; each a train run of one prepared experiment")
    func exploitCorpus() throws {
        let exp = try make(samples: 20)
        defer { exp.removeScratch() }
        let p = try exp.run(["prepare"], environment: [:])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        // The control: the copy of the dataset the target reader looks for is in the install.
        let venv = try Inspect.install()
        let examples = try #require(try FileManager.default.contentsOfDirectory(atPath: venv + "/lib").first { $0.hasPrefix("python") })
        #expect(FileManager.default.fileExists(atPath: "\(venv)/lib/\(examples)/site-packages/inspect_ai/dataset/_examples/theory_of_mind.jsonl"))
        let split = try exp.split()
        #expect(split.train.count == 14)
        for entry in Self.corpus {
            try exp.setAgent(Self.attacker(entry.attack.replacingOccurrences(of: "EXPERIMENT", with: exp.root)
                .replacingOccurrences(of: "TEMPLATES", with: Built.packageRoot + "/templates")))
            let b = try exp.run(["benchmark"], environment: [:])
            #expect(b.status == 0, "\(entry.name): \(b.stderr)")
            let rewards = try exp.trainResults()
            #expect(split.train.allSatisfy { (rewards[$0] as? Double) == 0 }, "\(entry.name): \(rewards)")
            // Scored afresh by the task's exact(), whatever the log said.
            let verdict = exp.traceFile(split.train[0], "verdict.json") ?? ""
            #expect(verdict.contains("\"value\": \"I\"") && verdict.contains("nowhere"), "\(entry.name): \(verdict)")
            let stderr = exp.traceFile(split.train[0], "tool.stderr") ?? ""
            for s in entry.shows { #expect(stderr.contains(s), "\(entry.name): \(s) not in\n\(stderr)") }
            for s in entry.never { #expect(!stderr.contains(s), "\(entry.name): \(s) in\n\(stderr)") }
            #expect(exp.scratchMounts().isEmpty, "\(entry.name)")
        }
    }
}
