import Foundation
import Testing
import TestSupport

// BIRD-Interact's phase 2 as its own harness runs it (bird-bench/BIRD-Interact at
// 451fe2c3518ee1cf908d8139e2913483bd519381): the follow-up question is revealed only when the
// DB environment passes phase 1 (db_environment/server.py, _submit_sql_sync); a-interact's
// system agent reads it from that /submit answer, c-interact's orchestrator reads it from its
// task record after phase 1 (orchestrator/cinteract.py). Rewards: 0.7 + 0.3, in c-interact
// 0.5 and 0.2 for a phase passed only at its debug turn.

enum BirdPhaseTwo {
    /// Tasks k = 0..<count on the stand-in's tables; even k have a follow-up whose question
    /// carries the marker `FQ-<id>` (found nowhere else).
    static func id(_ k: Int) -> String { "\(BirdAgents.tables[k])_\(k + 1)" }
    static func hasFollowUp(_ id: String) -> Bool {
        guard let k = BirdAgents.tables.firstIndex(where: { id.hasPrefix($0 + "_") }) else { return false }
        return k % 2 == 0
    }
    static func marker(_ id: String) -> String { "FQ-" + id }

    static func data(count: Int = 10) -> String {
        (0..<count).map { k -> String in
            let t = BirdAgents.tables[k], id = id(k)
            var task: [String: Any] = [
                "instance_id": id, "selected_database": "space", "amb_user_query": "How many of those are there?",
                "query": "count the rows of table \(t)",
                "user_query_ambiguity": ["critical_ambiguity": [["term": "those", "sql_snippet": t]], "non_critical_ambiguity": []],
                "knowledge_ambiguity": [], "sol_sql": ["SELECT COUNT(*) FROM \(t)"], "test_cases": [], "category": "Query",
                "conditions": ["order": false], "external_knowledge": [],
            ]
            if k % 2 == 0 {
                task["follow_up"] = ["query": "And the largest id among them? (\(marker(id)))", "sol_sql": ["SELECT MAX(id) FROM \(t)"],
                                     "test_cases": [], "external_knowledge": []]
            }
            let json = try! JSONSerialization.data(withJSONObject: task, options: [.sortedKeys])
            return String(decoding: json, as: UTF8.self)
        }.joined(separator: "\n") + "\n"
    }

    /// A system agent service keeping each task's session across /run_session calls (as the
    /// ADK's does). Phase 1: asks the user which table, submits `phase1` for it. Phase 2 only
    /// from the follow-up's text ("largest" → `phase2`): in a-interact from the /submit answer,
    /// in c-interact from the orchestrator's follow-up message. `followUp`: right, wrong (a
    /// smallest-id query), debug (wrong first, right at the debug turn), skip.
    /// `snoop`: before phase 1 it looks for the task's follow-up marker in every file under
    /// /work and /tmp, in the orchestrator's message and the user's answers (after trying the
    /// user simulator's /phase_transition), and asks the graders for the follow-up; prints
    /// SNOOP-FU lines.
    static func solver(followUp: String = "right", snoop: Bool = false, phase1: String = "SELECT COUNT(*) FROM %s",
                       phase2: String = "SELECT MAX(id) FROM %s", execute: Bool = false, reinit: Bool = false, preinit: Bool = false) -> String {
        """
        import json, os, urllib.error, urllib.request
        from shared import client

        FOLLOW = "\(followUp)"
        SNOOP = \(snoop ? "True" : "False")
        EXECUTE = \(execute ? "True" : "False")
        REINIT = \(reinit ? "True" : "False")
        PREINIT = \(preinit ? "True" : "False")
        PREINITED = set()
        SESSIONS = {}
        OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

        def post(var, path, obj):
            req = urllib.request.Request("http://127.0.0.1:%s%s" % (os.environ[var], path), data=json.dumps(obj).encode(),
                                         method="POST", headers={"Content-Type": "application/json"})
            try:
                with OPENER.open(req, timeout=30) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

        def files_with(needle):
            hits = []
            for top in ("/work", "/tmp"):
                for d, _, names in os.walk(top):
                    for n in names:
                        p = os.path.join(d, n)
                        try:
                            if os.path.isfile(p) and needle in open(p, errors="replace").read():
                                hits.append(p)
                        except OSError:
                            pass
            return sorted(hits)

        def revealed(tid):
            st, body = post("DB_ENV_PORT", "/autoharness/follow_up", {"task_id": tid})
            return json.loads(body).get("revealed") if st == 200 else "status%d" % st

        def snoop_before(tid, message, init):
            needle = "FQ-" + tid
            st, _ = post("USER_SIM_PORT", "/phase_transition", {"task_id": tid})
            _, answer = post("USER_SIM_PORT", "/ask", {"task_id": tid, "question": "Anything else you will want?"})
            print("SNOOP-FU before %s files=%s message=%s init=%s answer=%s transition=%d revealed=%s key=%s control=%s" % (
                tid, ",".join(files_with(needle)) or "-", needle in message, needle in init, needle in answer, st, revealed(tid),
                '"follow_up"' in open("/work/in/tasks.jsonl").read(), "/work/in/tasks.jsonl" in files_with('"' + tid + '"')), flush=True)

        def submit(tid, s, sql):
            v = client.db("/submit", {"task_id": tid, "sql": sql})
            s["traj"].append({"type": "tool", "tool": "submit_sql", "args": {"sql": sql}, "result": v["message"]})
            if v["passed"]:
                s["total"] += v["reward"]
                if v.get("phase_completed") == 1:
                    s["p1"] = True
                elif v.get("phase_completed") == 2:
                    s["p2"] = True
            return v

        def phase2(tid, s, text):
            s["fu"] = text
            if FOLLOW == "skip" or "largest" not in text or s["p2"]:
                return
            s["tries"] += 1
            right = FOLLOW == "right" or (FOLLOW == "debug" and s["tries"] > 1)
            submit(tid, s, ("\(phase2)" if right else "SELECT MIN(id) FROM %s") % s["table"])

        def app(method, path, body):
            if path == "/health":
                return 200, {"status": "ok"}
            if path == "/init_session":
                SESSIONS[body["task_id"]] = {"total": 0.0, "p1": False, "p2": False, "table": None, "tries": 0, "fu": None,
                                             "traj": [], "dialogue": [], "init": json.dumps(body)}
                return 200, {"status": "ok"}
            if path != "/run_session":
                return 404, {}
            tid, message, mode = body["task_id"], body.get("message", ""), body.get("mode", "a-interact")
            s = SESSIONS[tid]
            if PREINIT and not PREINITED:
                # Before the orchestrator gets to them: every other task of the run initialised
                # with a-interact's rules (no debug penalty), then a wrong try and the right one,
                # submitted directly.
                for line in open("/work/in/tasks.jsonl"):
                    other = json.loads(line)["instance_id"] if line.strip() else None
                    if not other or other == tid:
                        continue
                    PREINITED.add(other)
                    table = other.rsplit("_", 1)[0]
                    st, _ = post("DB_ENV_PORT", "/init_task", {"task_id": other, "task_data": {
                        "instance_id": other, "_interact_mode": "a-interact"}})
                    post("DB_ENV_PORT", "/submit", {"task_id": other, "sql": "SELECT MIN(id) FROM %s" % table})
                    st2, verdict = post("DB_ENV_PORT", "/submit", {"task_id": other, "sql": "\(phase1)" % table})
                    print("PREINIT %s init=%d verdict=%s" % (other, st, verdict), flush=True)
            if not s["p1"]:
                if s["table"] is None:
                    if SNOOP:
                        snoop_before(tid, message, s["init"])
                    answer = client.user("/ask", {"task_id": tid, "question": "Which table do you mean?"})["answer"]
                    s["table"] = answer.rsplit(" ", 1)[-1]
                    s["dialogue"] += [{"role": "agent", "content": "Which table do you mean?"}, {"role": "user", "content": answer}]
                    if EXECUTE:
                        r = client.db("/execute", {"task_id": tid, "sql": "SELECT count(*) FROM %s" % s["table"]})
                        print("EXECUTE %s %s" % (tid, json.dumps(r)), flush=True)
                if REINIT:
                    # A wrong try, then the DB environment's /init_task again: it would reset the
                    # try counter, making the right answer below a first try.
                    submit(tid, s, "SELECT MIN(id) FROM %s" % s["table"])
                    st, _ = post("DB_ENV_PORT", "/init_task", {"task_id": tid, "task_data": {"instance_id": tid, "_interact_mode": mode}})
                    print("REINIT %s status=%d" % (tid, st), flush=True)
                v = submit(tid, s, "\(phase1)" % s["table"])
                if v["passed"] and v.get("has_follow_up"):
                    if SNOOP:
                        print("SNOOP-FU after %s answer=%s revealed=%s" % (tid, ("FQ-" + tid) in (v.get("follow_up_query") or ""),
                                                                          revealed(tid)), flush=True)
                    if mode == "a-interact":
                        phase2(tid, s, v.get("follow_up_query") or "")
            elif "follow-up question" in message:
                if SNOOP:
                    print("SNOOP-FU message %s has=%s" % (tid, ("FQ-" + tid) in message), flush=True)
                phase2(tid, s, message)
            elif s["fu"] is not None:
                phase2(tid, s, s["fu"])
            return 200, {"state": {"total_reward": s["total"], "phase1_completed": s["p1"], "phase2_completed": s["p2"]},
                         "dialogue_history": s["dialogue"], "tool_trajectory": s["traj"], "final_response": "done"}
        """
    }
}

extension Experiment {
    /// Uncomments (and sets) a key the template carries as a comment (`# key: …`).
    func uncomment(_ key: String, _ value: String) throws {
        let path = root + "/experiment_config.yaml"
        var lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
        let i = try #require(lines.firstIndex { $0.hasPrefix("# \(key):") }, "no commented \(key)")
        lines[i] = "\(key): \(value)"
        try lines.joined(separator: "\n").write(toFile: path, atomically: true, encoding: .utf8)
    }
}

@Suite("Adapters: bird-interact phase 2 (the follow-up)", .serialized)
struct BirdPhaseTwoTests {
    static let env = BirdAdapterTests.env

    func make(mode: String) throws -> Experiment {
        let exp = try BirdAdapterTests().make()
        let data = exp.temp.path + "/bird_interact_data.jsonl"
        try BirdPhaseTwo.data().write(toFile: data, atomically: true, encoding: .utf8)
        try exp.uncomment("bird_data_path", data)
        try exp.set("mode", mode)
        let p = try exp.run(["prepare"], environment: Self.env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/10 tasks pass"), "\(p.stdout)")
        return exp
    }

    /// Runs `benchmark` with `agent` and returns the train rewards.
    func benchmark(_ exp: Experiment, _ agent: String) throws -> [String: Double] {
        try exp.setAgent(agent)
        let b = try exp.run(["benchmark"], environment: Self.env)
        try #require(b.status == 0, "\(b.stdout)\(b.stderr)")
        let rewards = try exp.trainResults()
        var out: [String: Double] = [:]
        for id in try exp.split().train { out[id] = rewards[id] as? Double }
        return out
    }

    @Test("a-interact: the follow-up reaches agent.py in the DB environment's answer to a passed phase 1; 0.7 + 0.3, 0.7 when phase 2 fails")
    func aInteract() throws {
        let exp = try make(mode: "a-interact")
        defer { exp.removeScratch() }
        for (id, r) in try benchmark(exp, BirdPhaseTwo.solver(followUp: "right")) {
            #expect(r == (BirdPhaseTwo.hasFollowUp(id) ? 1.0 : 0.7), "\(id): \(r)")
        }
        for (id, r) in try benchmark(exp, BirdPhaseTwo.solver(followUp: "wrong")) {
            #expect(r == 0.7, "\(id): \(r)")
            if BirdPhaseTwo.hasFollowUp(id) {
                #expect(exp.traceFile(id, "submissions.json")?.contains("SQL failed Phase 2") == true, "\(id)")
            }
        }
    }

    @Test("c-interact: the orchestrator gets the follow-up from the graders only after phase 1 passes and runs phase 2 with its debug turn",
          arguments: [("right", 1.0), ("debug", 0.9), ("wrong", 0.7), ("skip", 0.7)])
    func cInteract(followUp: String, reward: Double) throws {
        let exp = try make(mode: "c-interact")
        defer { exp.removeScratch() }
        let rewards = try benchmark(exp, BirdPhaseTwo.solver(followUp: followUp, snoop: followUp == "right"))
        for (id, r) in rewards {
            #expect(abs(r - (BirdPhaseTwo.hasFollowUp(id) ? reward : 0.7)) < 1e-9, "\(followUp) \(id): \(r)")
        }
        guard followUp == "right" else { return }
        let stdout = try #require(exp.traceFile(try exp.split().train[0], "tool.stdout"))
        for id in rewards.keys where BirdPhaseTwo.hasFollowUp(id) {
            // The orchestrator's phase-2 message carries the question it had from the graders.
            #expect(stdout.contains("SNOOP-FU message \(id) has=True"), "\(stdout)")
            let session = try #require(exp.traceFile(id, "session.json"))
            #expect(session.contains("\"has_follow_up\" : true") && session.contains("\"phase2_passed\" : true"), "\(session)")
        }
    }

    @Test("nothing agent.py's sandbox sees carries the follow-up before phase 1 passes: files, messages, the user simulator, the graders",
          arguments: ["a-interact", "c-interact"])
    func snoop(mode: String) throws {
        let exp = try make(mode: mode)
        defer { exp.removeScratch() }
        let rewards = try benchmark(exp, BirdPhaseTwo.solver(followUp: "right", snoop: true))
        let stdout = try #require(exp.traceFile(try exp.split().train[0], "tool.stdout"))
        let followed = rewards.keys.filter(BirdPhaseTwo.hasFollowUp)
        try #require(!followed.isEmpty)
        for id in rewards.keys {
            // control=True: the scan does read /work/in/tasks.jsonl (it finds the task's id there).
            // transition=403: the graders refuse the user simulator's /phase_transition before
            // phase 1 passes (it would switch the user's answers to the follow-up).
            #expect(stdout.contains("SNOOP-FU before \(id) files=- message=False init=False answer=False transition=403 revealed=False key=False control=True"),
                    "\(id): \(stdout)")
            #expect(rewards[id] == (BirdPhaseTwo.hasFollowUp(id) ? 1.0 : 0.7), "\(id): \(rewards[id] ?? -1)")
        }
        for id in followed {
            #expect(stdout.contains("SNOOP-FU after \(id) answer=True revealed=True"), "\(id): \(stdout)")
        }
        // key=False above: the redacted task list has no follow_up at all, not even that one exists.
        #expect(!stdout.contains("FQ-"), "the solver printed a marker")
    }

    @Test("c-interact: agent.py cannot re-initialise a task at the DB environment to make a retried phase 1 count as a first try (refused with 409; the retry earns the debug reward)")
    func reinitialiseRefused() throws {
        let exp = try make(mode: "c-interact")
        defer { exp.removeScratch() }
        let rewards = try benchmark(exp, BirdPhaseTwo.solver(followUp: "right", reinit: true))
        let stdout = try #require(exp.traceFile(try exp.split().train[0], "tool.stdout"))
        for (id, r) in rewards {
            #expect(stdout.contains("REINIT \(id) status=409"), "\(id): \(stdout)")
            // 0.5: phase 1 passed at its second try; + 0.3 for a follow-up answered first time.
            #expect(abs(r - (BirdPhaseTwo.hasFollowUp(id) ? 0.8 : 0.5)) < 1e-9, "\(id): \(r)")
        }
    }

    @Test("c-interact: agent.py initialising other tasks first cannot choose the graders' rules (the interact mode): the run's own mode applies, a retry earns the debug reward")
    func preinitialiseRulesIgnored() throws {
        let exp = try make(mode: "c-interact")
        defer { exp.removeScratch() }
        let rewards = try benchmark(exp, BirdPhaseTwo.solver(followUp: "skip", preinit: true))
        let stdout = try #require(exp.traceFile(try exp.split().train[0], "tool.stdout"))
        let preinited = rewards.keys.filter { stdout.contains("PREINIT \($0) init=200") }
        try #require(!preinited.isEmpty, "\(stdout)")
        for id in preinited {
            // Passed at its second try under c-interact's rules: 0.5, not a-interact's 0.7.
            #expect(abs((rewards[id] ?? -1) - 0.5) < 1e-9, "\(id): \(rewards[id] ?? -1) \(stdout)")
        }
    }
}
