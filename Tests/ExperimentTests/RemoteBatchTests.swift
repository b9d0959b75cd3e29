@testable import Benchmark
import Crypto
import Foundation
import Sandbox
import SandboxPolicy
import Testing
import TestSupport
@testable import Experiment
@testable import Execution
@testable import ExperimentModel

/// `RemoteBatch`, the supervisor's rules for a batch of remote requests, driven without Ray:
/// each test feeds it what the driver would report and checks the decision (the Ray tests
/// show the same rules end to end on a real cluster).
@Suite("Remote batch: which nodes work and what a lost or bad answer means")
struct RemoteBatchTests {
    /// A fake cluster's view: nodes with reports, requests, and answers made as a node makes them.
    struct Fixture {
        let answerKey = Curve25519.KeyAgreement.PrivateKey()
        var requests: [WorkRequest]
        let heldOut: Bool
        init(heldOut: Bool, count: Int = 3) {
            self.heldOut = heldOut
            let to = heldOut ? NodeSealKey.publicText(answerKey) : nil
            requests = (0..<count).map { i in
                var r = WorkRequest(nonce: String(repeating: String(i), count: 32), heldOut: heldOut, binarySHA256: "bin", policiesSHA256: "pol",
                                    taskPolicy: "benchmark-task", verifierPolicy: "verifier", concurrency: 1, agentPy: Data(),
                                    tasks: [WorkTask(id: "task-\(i)", files: [])])
                r.answerTo = to
                return r
            }
        }

        static func report(binary: String = "bin", problems: [String] = [], sealKey: String? = nil) -> NodeReport {
            NodeReport(binarySHA256: binary, policiesSHA256: "pol", problems: problems,
                       sealKey: sealKey ?? NodeSealKey.publicText(Curve25519.KeyAgreement.PrivateKey()))
        }

        static func node(_ id: String, _ address: String, _ report: NodeReport?) -> NodeSeen {
            NodeSeen(node: id, address: address, report: report, error: report == nil ? "Timeout: no answer" : nil)
        }

        func batch(excluded: [NodeExcludedRecord] = []) -> RemoteBatch {
            RemoteBatch(requests: requests, heldOut: heldOut, binarySHA256: "bin", policiesSHA256: "pol", excluded: excluded,
                        answerKey: heldOut ? answerKey : nil, address: "10.0.0.1:6379")
        }

        /// The bytes a node answers request `i` with (the answer to request `to` if given),
        /// sealed as the worker seals a held-out answer unless `unsealed`.
        func answer(_ i: Int, to: Int? = nil, reward: Double = 1, status: TaskStatus? = nil, unsealed: Bool = false) throws -> [UInt8] {
            let r = requests[to ?? i]
            let a = WorkAnswer(nonce: r.nonce, outcomes: r.tasks.map { TaskOutcome(id: $0.id, reward: reward, status: status ?? (reward == 1 ? .passed : .failed)) })
            let json = try JSONEncoder().encode(a)
            guard heldOut && !unsealed else { return Array(json) }
            return Array(try JSONEncoder().encode(SealedAnswer(sealed: try NodeSealKey.seal(json, to: requests[i].answerTo!, info: NodeSealKey.answerInfo))))
        }
    }

    /// What a batch logged and recorded.
    final class Kept: @unchecked Sendable {
        var records: [NodeExcludedRecord] = []
        var log: [String] = []
        var notes: [String] = []
    }

    static func wired(_ f: Fixture, excluded: [NodeExcludedRecord] = []) -> (RemoteBatch, Kept) {
        let kept = Kept()
        var b = f.batch(excluded: excluded)
        b.log = { kept.log.append($0) }
        b.record = { kept.records.append($0) }
        b.note = { kept.notes.append($0) }
        return (b, kept)
    }

    @Test("only nodes whose check names this binary and policies with no host problem, that reported, were never excluded at their address, and share their sealing key with no other node get work; none left is an error that names no node's words")
    func nodesChosen() throws {
        let f = Fixture(heldOut: false)
        let shared = NodeSealKey.publicText(Curve25519.KeyAgreement.PrivateKey())
        let before = NodeExcludedRecord(address: "10.0.0.9", node: "old", reason: "the answer is to another request", heldOut: false)
        var (b, kept) = Self.wired(f, excluded: [before])
        let use = try b.choose([
            Fixture.node("good", "10.0.0.2", Fixture.report()),
            Fixture.node("other-binary", "10.0.0.3", Fixture.report(binary: "evil")),
            Fixture.node("no-pids", "10.0.0.4", Fixture.report(problems: ["policy benchmark-task: limits.pids cannot be enforced"])),
            Fixture.node("silent", "10.0.0.5", nil),
            Fixture.node("twin-a", "10.0.0.6", Fixture.report(sealKey: shared)),
            Fixture.node("twin-b", "10.0.0.7", Fixture.report(sealKey: shared)),
            Fixture.node("liar", "10.0.0.9", Fixture.report()),
            Fixture.node("bad-key", "10.0.0.8", Fixture.report(sealKey: "bm90IGEga2V5")),
        ])
        #expect(use == ["good"])
        let log = kept.log.joined(separator: "\n")
        for (node, why) in [("10.0.0.3", "is not the supervisor's"), ("10.0.0.4", "limits.pids cannot be enforced"), ("10.0.0.5", "did not report"),
                            ("10.0.0.6", "sealing key is another node's too"), ("10.0.0.7", "sealing key is another node's too"),
                            ("10.0.0.9", "excluded: it answered a request badly before"), ("10.0.0.8", "not an X25519 public key")] {
            #expect(kept.log.contains { $0.contains("node \(node) ") && $0.contains(why) }, "\(node): \(log)")
        }
        var (none, _) = Self.wired(f)
        #expect {
            _ = try none.choose([Fixture.node("x", "10.0.0.3", Fixture.report(problems: ["SECRET-NODE-WORDS"]))])
        } throws: { "\($0)".contains("no node of the cluster") && !"\($0)".contains("SECRET-NODE-WORDS") }
        // bird-interact: a node whose template databases' fingerprints are not the
        // supervisor's, or that reports none, gets nothing.
        var (bird, birdKept) = Self.wired(f)
        bird.databases = ["a_template": "h1"]
        func fingerprinted(_ d: [String: String]?) -> NodeReport {
            var r = Fixture.report()
            r.databases = d
            return r
        }
        let birdUse = try bird.choose([Fixture.node("same", "10.0.1.2", fingerprinted(["a_template": "h1"])), Fixture.node("other", "10.0.1.3", fingerprinted(["a_template": "h2"])),
                                       Fixture.node("none", "10.0.1.4", fingerprinted(nil))])
        #expect(birdUse == ["same"])
        for node in ["10.0.1.3", "10.0.1.4"] {
            #expect(birdKept.log.contains { $0.contains("node \(node) ") && $0.contains("its template database a_template") }, "\(birdKept.log)")
        }
    }

    @Test("a held-out request is sealed to a node only when one is free: each accepted node holds one at a time, the least given first, a node out of the batch none; at max_concurrency the rest wait; with no node left the run ends; train requests are bound to no node")
    func heldOutPlacement() throws {
        let f = Fixture(heldOut: true, count: 5)
        var (b, _) = Self.wired(f)
        let ka = Fixture.report(), kb = Fixture.report()
        _ = try b.choose([Fixture.node("a", "10.0.0.2", ka), Fixture.node("b", "10.0.0.3", kb)])
        #expect(try b.place(0) == .sealed(node: "a", sealKey: ka.sealKey) && b.place(1) == .sealed(node: "b", sealKey: kb.sealKey))
        // Both nodes hold one: the next waits, and is not counted as given to anyone.
        #expect(try b.place(2) == .later && b.place(2) == .later)
        // Node b finishes first: the next request goes to b, not back to a in turn.
        #expect(try b.settle(1, .ran(node: "b", exit: 0, answer: f.answer(1), oversized: false, stderr: "")).answer != nil)
        #expect(try b.place(2) == .sealed(node: "b", sealKey: kb.sealKey))
        #expect(try b.place(3) == .later)
        // Node a's answer to request 0 is bad: the gate ends, and a is out of the batch; what
        // b frees goes to b alone from then on.
        #expect(throws: ExperimentError.self) { try b.settle(0, .ran(node: "a", exit: 0, answer: Array("junk".utf8), oversized: false, stderr: "")) }
        #expect(try b.place(3) == .later)
        _ = try b.settle(2, .ran(node: "b", exit: 0, answer: f.answer(2), oversized: false, stderr: ""))
        #expect(try b.place(3) == .sealed(node: "b", sealKey: kb.sealKey))
        _ = try? b.settle(3, .lost(node: "b", why: "node died"))
        #expect { _ = try b.place(4) } throws: { "\($0)".contains("no accepted node is left") }

        // Idle nodes take turns: the one given fewest so far first.
        var (turns, _) = Self.wired(f)
        _ = try turns.choose([Fixture.node("a", "10.0.0.2", ka), Fixture.node("b", "10.0.0.3", kb)])
        #expect(try turns.place(0) == .sealed(node: "a", sealKey: ka.sealKey))
        _ = try turns.settle(0, .ran(node: "a", exit: 0, answer: f.answer(0), oversized: false, stderr: ""))
        #expect(try turns.place(1) == .sealed(node: "b", sealKey: kb.sealKey) && turns.place(2) == .sealed(node: "a", sealKey: ka.sealKey))

        // max_concurrency 1 on two nodes: one held-out request at a time.
        var (one, _) = Self.wired(f)
        one.concurrency = 1
        _ = try one.choose([Fixture.node("a", "10.0.0.2", ka), Fixture.node("b", "10.0.0.3", kb)])
        #expect(try one.place(0) == .sealed(node: "a", sealKey: ka.sealKey) && one.place(1) == .later)

        var (train, _) = Self.wired(Fixture(heldOut: false))
        _ = try train.choose([Fixture.node("a", "10.0.0.2", Fixture.report())])
        #expect(try train.place(0) == .anyNode && train.place(1) == .anyNode)
    }

    @Test("a train request lost or refused, or a held-out request whose node died, is sent once more to another node and the first is out of the batch, a held-out loss noted without its tasks; a second loss ends the run; a held-out request refused, failed, or lost while its node lives (a worker killed for memory) is never sent again")
    func lossesAndRefusals() throws {
        let f = Fixture(heldOut: false)
        var (b, kept) = Self.wired(f)
        _ = try b.choose(["a", "b", "c"].enumerated().map { Fixture.node($1, "10.0.0.\($0 + 2)", Fixture.report()) })
        let first = try b.settle(0, .lost(node: "a", why: "ActorDiedError"))
        #expect(first.answer == nil && first.settlement.resend && first.settlement.exclude == ["a"])
        #expect { _ = try b.settle(0, .lost(node: "b", why: "again")) } throws: { "\($0)".contains("was lost on node") }
        // A refusal (the worker exited 2) is a loss too; its stderr goes to the log for a train request.
        let refused = try b.settle(1, .ran(node: "c", exit: 2, answer: [], oversized: false, stderr: "policies differ"))
        #expect(refused.settlement.resend && refused.settlement.exclude == ["c"] && kept.log.contains { $0.contains("policies differ") })
        #expect(kept.records.isEmpty, "a lost node is not excluded from the experiment")
        // Lost with no node to name (none was left to run it): the run ends.
        #expect { _ = try b.settle(2, .lost(node: "", why: "no accepted node is left")) } throws: { "\($0)".contains("was lost") }

        let h = Fixture(heldOut: true)
        var (held, heldKept) = Self.wired(h)
        _ = try held.choose([Fixture.node("a", "10.0.0.2", Fixture.report()), Fixture.node("b", "10.0.0.3", Fixture.report())])
        // A held-out request lost with its node runs once more on another (sealed to it
        // afresh), the loss noted in the ledger; lost again, the run ends. Neither the note nor
        // the error names the held-out task (they can reach the coding agent).
        let lost = try held.settle(0, .lost(node: "a", why: "NodeDiedError task-0", nodeDied: true))
        #expect(lost.answer == nil && lost.settlement.resend && lost.settlement.exclude == ["a"])
        #expect(heldKept.notes.count == 1 && heldKept.notes.allSatisfy { $0.contains("a held-out request was lost with node 10.0.0.2") && !$0.contains("task-") },
                "\(heldKept.notes)")
        let keyB = try #require(held.sealKeys["b"])
        #expect(try held.place(0) == .sealed(node: "b", sealKey: keyB))
        #expect { _ = try held.settle(0, .lost(node: "b", why: "NodeDiedError", nodeDied: true)) } throws: { "\($0)".contains("held-out") && !"\($0)".contains("task-") }
        var (held2, heldKept2) = Self.wired(h)
        _ = try held2.choose([Fixture.node("a", "10.0.0.2", Fixture.report()), Fixture.node("b", "10.0.0.3", Fixture.report())])
        // A held-out request whose worker was killed for memory, or crashed, on a node that
        // lives on is not run again: agent.py could have brought that about.
        #expect { _ = try held2.settle(0, .lost(node: "a", why: "OutOfMemoryError: Task was killed due to the node running low on memory")) } throws: {
            "\($0)".contains("held-out") && heldKept2.notes.isEmpty
        }
        // A held-out refusal: its node's words (which could name test tasks) are not logged.
        #expect { _ = try held2.settle(1, .ran(node: "b", exit: 2, answer: [], oversized: false, stderr: "task-1 SECRET")) } throws: { !"\($0)".contains("task-") }
        #expect(!heldKept2.log.joined().contains("SECRET") && !heldKept2.log.joined().contains("task-") && heldKept2.notes.isEmpty, "\(heldKept2.log)")
    }

    @Test("a bad train answer records its node first, excludes every node at its address and sends the request to another; a second bad answer to the same request ends the run and excludes no one more")
    func badTrainAnswers() throws {
        let f = Fixture(heldOut: false)
        var (b, kept) = Self.wired(f)
        _ = try b.choose([Fixture.node("a", "10.0.0.2", Fixture.report()), Fixture.node("a2", "10.0.0.2", Fixture.report()),
                          Fixture.node("b", "10.0.0.3", Fixture.report()), Fixture.node("c", "10.0.0.4", Fixture.report())])
        let good = try b.settle(1, .ran(node: "b", exit: 0, answer: try f.answer(1), oversized: false, stderr: ""))
        #expect(good.answer?.outcomes.map(\.id) == ["task-1"] && !good.settlement.resend)
        // Node a answers request 0 with request 2's answer.
        let bad = try b.settle(0, .ran(node: "a", exit: 0, answer: try f.answer(0, to: 2), oversized: false, stderr: ""))
        #expect(bad.answer == nil && bad.settlement.resend && bad.settlement.exclude == ["a", "a2"])
        #expect(kept.records.count == 1 && kept.records[0].address == "10.0.0.2" && kept.records[0].reason.contains("another request") && !kept.records[0].heldOut)
        // Whatever a2 (the same address) answers meanwhile is not used.
        let late = try b.settle(2, .ran(node: "a2", exit: 0, answer: try f.answer(2), oversized: false, stderr: ""))
        #expect(late.answer == nil && late.settlement.resend)
        // The same request answered badly again (oversized this time): the request's doing.
        #expect { _ = try b.settle(0, .ran(node: "b", exit: 0, answer: [], oversized: true, stderr: "")) } throws: { "\($0)".contains("answered badly by a second node") }
        #expect(kept.records.count == 1, "\(kept.records)")
    }

    @Test("a held-out answer is used only sealed to the batch's key; a bad one records its node with a reason naming no task and ends the run; a node out of the batch that answers a held-out request ends it too")
    func badHeldOutAnswers() throws {
        let f = Fixture(heldOut: true)
        var (b, kept) = Self.wired(f)
        _ = try b.choose([Fixture.node("a", "10.0.0.2", Fixture.report()), Fixture.node("b", "10.0.0.3", Fixture.report())])
        let good = try b.settle(0, .ran(node: "a", exit: 0, answer: try f.answer(0), oversized: false, stderr: ""))
        #expect(good.answer?.outcomes.map(\.reward) == [1])
        // Sealed, but a reward over 1: the check's own words name the task.
        let invalid = try f.answer(1, reward: 2, status: .passed)
        #expect { _ = try RemoteWork.check(invalid, for: f.requests[1], answerKey: f.answerKey) } throws: { "\($0)".contains("task-1") }
        #expect { _ = try b.settle(1, .ran(node: "b", exit: 0, answer: invalid, oversized: false, stderr: "")) } throws: {
            "\($0)".contains("answered a held-out request badly") && !"\($0)".contains("task-1")
        }
        #expect(kept.records.count == 1 && kept.records[0].heldOut && !kept.records[0].reason.contains("task-") && kept.records[0].node == "b")
        #expect(!kept.log.joined().contains("task-1"), "\(kept.log)")
        // An unsealed held-out answer is bad too, whatever it holds.
        var (other, _) = Self.wired(f)
        _ = try other.choose([Fixture.node("c", "10.0.0.4", Fixture.report())])
        #expect { _ = try other.settle(0, .ran(node: "c", exit: 0, answer: try f.answer(0, unsealed: true), oversized: false, stderr: "")) } throws: {
            "\($0)".contains("answered a held-out request badly")
        }
        #expect { _ = try b.settle(2, .ran(node: "b", exit: 0, answer: try f.answer(2), oversized: false, stderr: "")) } throws: {
            "\($0)".contains("after it was excluded")
        }
    }

    /// The driver's judgement of one Ray result (`result_line` in templates/ray/autoharness_ray.py),
    /// run by the system's Python with stand-ins for what `ray.get` returns or raises.
    static func driverLine(_ python: String) throws -> [String: Any] {
        let script = """
            import json, sys
            sys.path.insert(0, sys.argv[1])
            import autoharness_ray as d
            class TaskError(Exception): pass
            def raises(e):
                def get(): raise e
                return get
            \(python)
            print(json.dumps(line))
            """
        let r = try runProcess("/usr/bin/python3", ["-c", script, Built.packageRoot + "/templates/ray"])
        try #require(r.status == 0, "\(r.stderr)")
        return try #require(try JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
    }

    @Test("the driver passes a node's result on only as typed fields, takes a task that raised on the node for an empty answer (not a lost node), a lost task for a loss (the node's death only when Ray has it dead), and drops a held-out run's stderr")
    func driverJudgesResults() throws {
        let ok = try Self.driverLine("line = d.result_line(lambda: {'exit': 0, 'answer': 'QUJD', 'stderr': 'note', 'oversized': False, 'extra': 'x'}, 3, 'n1', False, TaskError)")
        #expect(ok["answer"] as? String == "QUJD" && ok["stderr"] as? String == "note" && ok["exit"] as? Int == 0 && ok["extra"] == nil && ok["id"] as? Int == 3)
        // A node's dict with a field of another type: nothing of it passes.
        let odd = try Self.driverLine("line = d.result_line(lambda: {'exit': '0', 'answer': 'QUJD'}, 3, 'n1', False, TaskError)")
        #expect(odd["answer"] as? String == "" && odd["exit"] as? Int == 0 && odd["error"] == nil, "\(odd)")
        let raised = try Self.driverLine("line = d.result_line(raises(TaskError('boom on the node')), 3, 'n1', False, TaskError)")
        #expect(raised["answer"] as? String == "" && raised["error"] == nil, "an exception raised by the task is an empty answer: \(raised)")
        let lost = try Self.driverLine("line = d.result_line(raises(RuntimeError('node died')), 3, 'n1', False, TaskError)")
        #expect((lost["error"] as? String)?.contains("node died") == true && lost["answer"] == nil && lost["node_died"] == nil)
        // The node's death only when Ray says so and its control store has the node dead: a
        // worker killed for memory on a live node is a plain loss.
        let classes = "class NodeDiedError(Exception): pass\nclass OutOfMemoryError(Exception): pass\n"
        let died = try Self.driverLine(classes + "line = d.result_line(raises(NodeDiedError('gone')), 3, 'n1', True, TaskError, lambda: True)")
        #expect(died["node_died"] as? Bool == true && died["error"] != nil, "\(died)")
        let stillAlive = try Self.driverLine(classes + "line = d.result_line(raises(NodeDiedError('gone')), 3, 'n1', True, TaskError, lambda: False)")
        #expect(stillAlive["node_died"] == nil && stillAlive["error"] != nil, "\(stillAlive)")
        let memory = try Self.driverLine(classes + "line = d.result_line(raises(OutOfMemoryError('low memory')), 3, 'n1', True, TaskError, lambda: True)")
        #expect(memory["node_died"] == nil && memory["error"] != nil, "\(memory)")
        let sealed = try Self.driverLine("line = d.result_line(lambda: {'exit': 2, 'answer': '', 'stderr': 'task-7 refused'}, 3, 'n1', True, TaskError)")
        #expect(sealed["stderr"] as? String == "" && sealed["exit"] as? Int == 2)
    }

    @Test("the driver places a request on the least loaded accepted node it need not avoid (idle nodes in turn); a held-out request waits for its own node to be idle while others go past it, and so does every request of a batch whose runs take their node alone; a request that can run nowhere is answered at once, the node's death named only for a bound request whose node Ray has dead")
    func driverPlacesRequests() throws {
        // (id, request, avoid, bound) as the driver keeps them; `gone` is what Ray's control
        // store says of a node.
        func result(_ setup: String, alone: Bool = false) throws -> (k: Int?, line: [String: Any]?, node: String?) {
            let r = try Self.driverLine("""
                \(setup)
                r = d.placement(waiting, usable, excluded, live, load, given, lambda node: node in gone, \(alone ? "True" : "False"))
                line = {"none": True} if r is None else {"k": r[0], "line": r[1], "node": r[2]}
                """)
            return (r["k"] as? Int, r["line"] as? [String: Any], r["node"] as? String)
        }
        let nodes = "usable = ['a', 'b', 'c']; excluded = set(); live = {'a', 'b', 'c'}; gone = set()\n"
        // The least loaded, then the one given fewest; never an avoided or excluded node.
        var r = try result(nodes + "load = {'a': 1, 'b': 0, 'c': 0}; given = {'a': 1, 'b': 3, 'c': 2}; waiting = [(0, 'R', set(), None)]")
        #expect(r.k == 0 && r.line == nil && r.node == "c", "\(r)")
        r = try result(nodes + "load = {'a': 0, 'b': 0, 'c': 0}; given = {'a': 0, 'b': 0, 'c': 0}; excluded = {'a'}; waiting = [(0, 'R', {'b'}, None)]")
        #expect(r.node == "c", "\(r)")
        // A held-out request bound to a busy node waits; a train request behind it goes past.
        r = try result(nodes + "load = {'a': 1, 'b': 0, 'c': 0}; given = {'a': 1, 'b': 0, 'c': 0}; waiting = [(0, 'H', set(), 'a'), (1, 'T', set(), None)]")
        #expect(r.k == 1 && r.node == "b", "\(r)")
        r = try result(nodes + "load = {'a': 1, 'b': 0, 'c': 0}; given = {'a': 1, 'b': 0, 'c': 0}; waiting = [(0, 'H', set(), 'a')]")
        #expect(r.k == nil && r.node == nil && r.line == nil, "a held-out request was placed on its busy node: \(r)")
        r = try result(nodes + "load = {'a': 0, 'b': 0, 'c': 0}; given = {'a': 5, 'b': 0, 'c': 0}; waiting = [(0, 'H', set(), 'a')]")
        #expect(r.k == 0 && r.node == "a", "\(r)")
        // A batch whose runs each take their node alone (bird-interact): a train request waits
        // while every node it may use is busy, and goes to an idle one.
        let busy = nodes + "load = {'a': 1, 'b': 1, 'c': 0}; given = {'a': 1, 'b': 1, 'c': 0}; waiting = [(0, 'T', {'c'}, None)]"
        r = try result(busy, alone: true)
        #expect(r.k == nil && r.node == nil && r.line == nil, "a request of a batch that runs alone was placed on a busy node: \(r)")
        r = try result(busy)
        #expect(r.k == 0 && r.node == "a", "\(r)")
        r = try result(nodes + "load = {'a': 1, 'b': 1, 'c': 0}; given = {'a': 1, 'b': 1, 'c': 0}; waiting = [(0, 'T', set(), None)]", alone: true)
        #expect(r.k == 0 && r.node == "c", "\(r)")
        // Bound to a node that is no longer alive, which Ray has dead: the node's death.
        r = try result(nodes + "live = {'b', 'c'}; gone = {'a'}; load = {'a': 0, 'b': 0, 'c': 0}; given = dict(load); waiting = [(4, 'H', set(), 'a')]")
        #expect(r.k == 0 && r.node == nil && r.line?["node_died"] as? Bool == true && r.line?["node"] as? String == "a"
                && (r.line?["error"] as? String)?.contains("sealed to is no longer accepted or alive") == true && r.line?["id"] as? Int == 4, "\(r)")
        // Bound to a node the supervisor excluded, still alive: a loss, not a death.
        r = try result(nodes + "excluded = {'a'}; load = {'a': 0, 'b': 0, 'c': 0}; given = dict(load); waiting = [(4, 'H', set(), 'a')]")
        #expect(r.line != nil && r.line?["node_died"] == nil, "\(r)")
        // Unbound with every node avoided or excluded: none left, and no node's death named
        // (not even when one is dead).
        r = try result(nodes + "excluded = {'a'}; live = {'b'}; gone = {'c'}; load = {'a': 0, 'b': 0, 'c': 0}; given = dict(load); waiting = [(2, 'T', {'b'}, None)]")
        #expect(r.line?["node_died"] == nil && r.line?["node"] as? String == "" && (r.line?["error"] as? String)?.contains("no accepted node is left") == true, "\(r)")
    }

    @Test("a node's check names what the supervisor asks in its argv, but bird-interact's databases' check (a login that may hold a password) goes on its stdin, in no argument")
    func driverCheckArgv() throws {
        let check = #"{"socketDirectory":"/run/pg","environment":["PG_PASSWORD=s3cret"],"envPass":[],"databases":["a_template"]}"#
        let line = try Self.driverLine("""
            import os
            first = {"check_verifier_tools": "/opt/tools", "check_databases": \(String(reflecting: check))}
            argv, stdin = d.check_argv(os, first, ["benchmark-task"], None, ["/opt/adk"], ["/opt/adk/x.py"], [])
            plain, none = d.check_argv(os, {}, ["benchmark-task"], None, [], [], [])
            line = {"argv": argv, "stdin": stdin.decode(), "plain": plain, "none": none.decode(),
                    "seconds": [d.check_seconds({}), d.check_seconds(first)]}
            """)
        let argv = try #require(line["argv"] as? [String])
        #expect(Array(argv.dropFirst()) == ["worker", "--check", "--check-policy", "benchmark-task", "--check-path", "/opt/adk", "--check-digest", "/opt/adk/x.py",
                                            "--check-verifier-tools", "/opt/tools", "--check-databases"], "\(argv)")
        #expect(line["stdin"] as? String == check && !argv.contains { $0.contains("s3cret") })
        #expect((line["plain"] as? [String])?.contains("--check-databases") == false && line["none"] as? String == "", "\(line)")
        // The check's time grows with the databases it fingerprints (one here).
        #expect(line["seconds"] as? [Int] == [180, 600], "\(line)")
    }

    @Test("an image push's failures are reported per node, checked again after the push; a held-out batch's reasons stay on the node (tar's words could name its files), a train batch's pass, and a node that raised or never answered fails its push")
    func driverReportsPushes() throws {
        // Ray stood in for: a ref holds what the node's receive returned (an exception: raised;
        // `late`: no answer in time).
        let setup = """
            import types
            fake = types.ModuleType("ray")
            fake.put = lambda piece: piece
            late = object()
            class Ref:
                def __init__(self, value): self.value = value
            fake.wait = lambda refs, num_returns, timeout: ([r for r in refs if r.value is not late], [r for r in refs if r.value is late])
            def get(ref):
                if isinstance(ref.value, Exception): raise ref.value
                return ref.value
            fake.get = get
            fake.cancel = lambda ref, force: None
            sys.modules["ray"] = fake
            class Receive:
                def __init__(self, answers): self.answers = answers
                def options(self, scheduling_strategy): self.node = scheduling_strategy; return self
                def remote(self, offer, pieces, limit): return Ref(self.answers[self.node])
            import tempfile
            archive = tempfile.NamedTemporaryFile(delete=False); archive.write(b"x" * 10); archive.close()
            nodes = [{"NodeID": n} for n in "abcd"]
            reports = [{"node": n, "report": "before"} for n in "abcde"]
            check = lambda among: [{"node": n["NodeID"], "report": "after"} for n in among]
            class NodeDiedError(Exception): pass
            answers = {"a": {"error": "tar: task-7/answer.txt: Cannot open: Permission denied"}, "b": {}, "c": NodeDiedError("node c is dead"), "d": late}
            def push(quiet):
                to = [{"node": n, "offer": "o"} for n in "abcd"]
                out = d.push_images([{"path": archive.name, "to": to, "quiet": quiet, "timeout": 1}], nodes, reports, check, Receive(answers), lambda n: n)
                return {r["node"]: r for r in out}
            """
        func reports(quiet: Bool) throws -> [String: [String: Any]] {
            let line = try Self.driverLine(setup + "\nline = push(\(quiet ? "True" : "False"))")
            return line.compactMapValues { $0 as? [String: Any] }
        }
        let held = try reports(quiet: true)
        let hidden = "it could not take the image (held-out batch: its reason stays on the node)"
        #expect(["a", "c", "d"].allSatisfy { held[$0]?["push_error"] as? String == hidden }, "\(held)")
        #expect(held["b"]?["push_error"] == nil && held["b"]?["report"] as? String == "after", "\(held)")
        #expect(held["e"]?["report"] as? String == "before" && held["e"]?["push_error"] == nil, "a node not pushed to is checked again: \(held)")
        #expect(!"\(held)".contains("task-7"), "\(held)")
        let train = try reports(quiet: false)
        #expect((train["a"]?["push_error"] as? String)?.contains("task-7/answer.txt: Cannot open") == true, "\(train)")
        #expect((train["c"]?["push_error"] as? String)?.contains("NodeDiedError: node c is dead") == true, "\(train)")
        #expect((train["d"]?["push_error"] as? String)?.contains("no answer in 121 s") == true && train["b"]?["push_error"] == nil, "\(train)")
    }

    @Test("the executor sends a request only when prepare has a place for it, asks again in order after each result, sends a request to be run again before the others, and ends rather than waits when nothing runs and nothing can be placed")
    func requestsSentAsPlacesFree() throws {
        let dir = try TempDir()
        // A driver of the protocol's shape without Ray: every request answered at once, each
        // message logged.
        let driver = dir.path + "/driver.py"
        try """
        import json, sys
        log = open(sys.argv[0] + ".log", "a")
        json.loads(sys.stdin.readline())
        print(json.dumps({"nodes": [{"node": "a", "address": "10.0.0.2", "error": "fake"}, {"node": "b", "address": "10.0.0.3", "error": "fake"}]}), flush=True)
        json.loads(sys.stdin.readline())
        print(json.dumps({"ready": True, "nodes": 2}), flush=True)
        for line in sys.stdin:
            m = json.loads(line)
            if "id" in m:
                log.write(f"sent {m['id']} {m.get('node', '-')}\\n"); log.flush()
                print(json.dumps({"id": m["id"], "node": m.get("node", "a"), "exit": 0, "answer": ""}), flush=True)
            elif m.get("end"):
                break
        """.write(toFile: driver, atomically: true, encoding: .utf8)
        let executor = RayExecutor(python: "/usr/bin/python3", driver: driver, address: "10.0.0.1:6379", environment: ["PATH": "/usr/bin:/bin"])
        // Two places; request 1's first result asks for it to run again, never on the node it
        // ran on (b): it waits while a runs request 2, then goes to a, before request 3.
        var holding: [Int: String] = [:], ranOn: [Int: [String]] = [:], asked: [Int] = [], resent = false
        try executor.run(5, choose: { $0.map(\.node) }, prepare: { i in
            asked.append(i)
            guard let node = ["a", "b"].first(where: { !holding.values.contains($0) && !(ranOn[i] ?? []).contains($0) }) else { return nil }
            holding[i] = node
            return ([UInt8]("r\(i)".utf8), node)
        }, settle: { i, _ in
            if let node = holding.removeValue(forKey: i) { ranOn[i, default: []].append(node) }
            if i == 1 && !resent { resent = true; return Settlement(resend: true) }
            return .done
        })
        let sent = try String(contentsOfFile: driver + ".log", encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(sent == ["sent 0 a", "sent 1 b", "sent 2 a", "sent 1 a", "sent 3 b", "sent 4 a"], "\(sent)")
        // Request 2 waited (asked, no place) and was asked again after the first result; the
        // resent request 1 waited with request 2 in flight, then went first.
        #expect(asked.prefix(7) == [0, 1, 2, 2, 3, 1, 1], "\(asked)")
        // No place ever and nothing in flight: an error, not a wait for a result that never comes.
        #expect {
            try executor.run(2, choose: { $0.map(\.node) }, prepare: { _ in nil }, settle: { _, _ in .done })
        } throws: { "\($0)".contains("have no node to go to and none is running") }
    }

    /// The rest of a fake driver of the protocol's shape (Python at no indentation): one
    /// node "a" that fails its check, then every request answered by it.
    static let fakeDriver = """
        json.loads(sys.stdin.readline())
        print(json.dumps({"nodes": [{"node": "a", "address": "10.0.0.2", "error": "fake"}]}), flush=True)
        json.loads(sys.stdin.readline())
        print(json.dumps({"ready": True, "nodes": 1}), flush=True)
        for line in sys.stdin:
            m = json.loads(line)
            if "id" in m:
                print(json.dumps({"id": m["id"], "node": "a", "exit": 0, "answer": ""}), flush=True)
            elif m.get("end"):
                break
        """

    @Test("the driver runs with the experiment's private directory out of sight: an empty read-only tmpfs over it, which it cannot unmount (no capability left), nor get past through the supervisor's /proc/PID/root; unconfined (the control) it reads the work key both ways with every capability; the protocol works through the confinement")
    func driverConfined() throws {
        try requireRoot()
        let dir = try TempDir()
        let secret = dir.path + "/private"
        try FileManager.default.createDirectory(atPath: secret, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try "WORK-KEY".write(toFile: secret + "/work-key", atomically: true, encoding: .utf8)
        // A driver of the protocol's shape that first tries what code run in it could try.
        let driver = dir.path + "/driver.py"
        try """
        import ctypes, errno, json, os, sys
        seen = {}
        try:
            seen["read"] = open(\(String(reflecting: secret)) + "/work-key").read()
        except OSError as e:
            seen["read"] = errno.errorcode[e.errno]
        libc = ctypes.CDLL(None, use_errno=True)
        seen["umount"] = "done" if libc.umount2(\(String(reflecting: secret)).encode(), 2) == 0 else errno.errorcode[ctypes.get_errno()]
        seen["caps"] = [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0]
        try:
            seen["through_proc"] = open("/proc/%s/root%s/work-key" % (os.environ["TEST_SUPERVISOR_PID"], \(String(reflecting: secret)))).read()
        except OSError as e:
            seen["through_proc"] = errno.errorcode[e.errno]
        json.dump(seen, open(sys.argv[0] + ".seen", "w"))
        \(Self.fakeDriver)
        """.write(toFile: driver, atomically: true, encoding: .utf8)
        func run(hiding: [String]) throws -> [String: Any] {
            // This process's pid, whose /proc/PID/root the driver must not get through when confined.
            var executor = RayExecutor(python: "/usr/bin/python3", driver: driver, address: "10.0.0.1:6379",
                                       environment: ["PATH": "/usr/bin:/bin", "TEST_SUPERVISOR_PID": String(getpid())])
            executor.hidden = hiding
            var settled = 0
            try executor.run(1, choose: { $0.map(\.node) }, prepare: { _ in ([1], "a") }, settle: { _, _ in settled += 1; return .done })
            #expect(settled == 1)
            let seen = try Data(contentsOf: URL(fileURLWithPath: driver + ".seen"))
            return try #require(try JSONSerialization.jsonObject(with: seen) as? [String: Any])
        }
        let open = try run(hiding: [])
        #expect(open["read"] as? String == "WORK-KEY" && open["through_proc"] as? String == "WORK-KEY" && open["caps"] as? String != "0000000000000000", "\(open)")
        let confined = try run(hiding: [secret])
        #expect(["EACCES", "ENOENT"].contains(confined["read"] as? String ?? "") && confined["umount"] as? String == "EPERM"
                && confined["caps"] as? String == "0000000000000000" && ["EACCES", "EPERM"].contains(confined["through_proc"] as? String ?? ""), "\(confined)")
        // Still there for this process.
        #expect(try String(contentsOfFile: secret + "/work-key", encoding: .utf8) == "WORK-KEY")
    }

    @Test("executor.driver_user: the driver runs as that user, its groups cleared, with a HOME of its own: it cannot write what root owns nor signal the supervisor (the control, root confined, can both); root and system ids, nobody's and qemu's, -1, the task images' ids and an unknown user are refused; the dataset is hidden from the driver too, unless the private directory holds it or it holds the driver")
    func driverAsItsOwnUser() throws {
        try requireRoot()
        let dir = try TempDir(mode: 0o755)
        let rootOnly = dir.path + "/root-only"
        try FileManager.default.createDirectory(atPath: rootOnly, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        let driver = dir.path + "/driver.py"
        try """
        import errno, json, os, sys
        seen = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "user": os.environ.get("USER"), "home": os.environ.get("HOME")}
        seen["home_owner"] = os.stat(seen["home"]).st_uid if seen["home"] else None
        try:
            open(\(String(reflecting: rootOnly)) + "/planted", "w").write("x")
            seen["write"] = "done"
        except OSError as e:
            seen["write"] = errno.errorcode[e.errno]
        try:
            os.kill(int(os.environ["TEST_SUPERVISOR_PID"]), 0)
            seen["signal"] = "done"
        except OSError as e:
            seen["signal"] = errno.errorcode[e.errno]
        json.dump(seen, open(\(String(reflecting: dir.path)) + "/seen-%d.json" % os.getuid(), "w"))
        \(Self.fakeDriver)
        """.write(toFile: driver, atomically: true, encoding: .utf8)
        // The probe writes where the driver's user may: the test's directory, for this run.
        chmod(dir.path, 0o1777)
        func run(as user: DriverUser?) throws -> [String: Any] {
            var executor = RayExecutor(python: "/usr/bin/python3", driver: driver, address: "10.0.0.1:6379",
                                       environment: ["PATH": "/usr/bin:/bin", "TEST_SUPERVISOR_PID": String(getpid())])
            executor.hidden = [dir.path + "/nothing-here-" + String(getpid())]
            try FileManager.default.createDirectory(atPath: executor.hidden[0], withIntermediateDirectories: true)
            var home: String?
            if let user { home = try executor.runAs(user) }
            defer { if let home { try? FileManager.default.removeItem(atPath: home) } }
            try executor.run(1, choose: { $0.map(\.node) }, prepare: { _ in ([1], "a") }, settle: { _, _ in .done })
            let seen = try Data(contentsOf: URL(fileURLWithPath: dir.path + "/seen-\(user?.uid ?? 0).json"))
            return try #require(try JSONSerialization.jsonObject(with: seen) as? [String: Any])
        }
        let root = try run(as: nil)
        #expect(root["uid"] as? Int == 0 && root["write"] as? String == "done" && root["signal"] as? String == "done", "\(root)")
        let user = try DriverUser.resolve("60123:60124")
        let own = try run(as: user)
        #expect(own["uid"] as? Int == 60123 && own["gid"] as? Int == 60124 && (own["groups"] as? [Int] ?? [0]).allSatisfy { $0 == 60124 }, "\(own)")
        #expect(own["write"] as? String == "EACCES" && own["signal"] as? String == "EPERM", "\(own)")
        #expect(own["home_owner"] as? Int == 60123 && (own["home"] as? String)?.hasPrefix("/tmp/autoharness-ray-") == true, "\(own)")

        // Root and the system's ids (disk's group 6 is raw disk access), nobody's and qemu's,
        // -1 (which chown and setpriv read as "unchanged": root kept), an unknown name.
        for refused in ["0:0", "60123:6", "65534:65534", "65533:60123", "nobody", "4294967295:4294967295", "60123:4294967295", "no-such-user-autoharness"] {
            #expect { _ = try DriverUser.resolve(refused) } throws: { "\($0)".contains("executor.driver_user: \(refused)") }
        }
        let images = HostIDRange(uid: 2_147_418_112, gid: 2_147_418_112, count: 65536)
        #expect { _ = try DriverUser.resolve("2147418200:60000", reserved: images) } throws: { "\($0)".contains("in the ids task images' sandboxes run as") }
        #expect(try DriverUser.resolve("60000:60000", reserved: images).uid == 60000)

        // The dataset is hidden too, where a mount can go (not inside the private directory)
        // and where it does not hold what the driver runs.
        let data = dir.path + "/data"
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        #expect(RayNodeExecutor.alsoHidden([data], besides: dir.path + "/private", driver: ["/usr/bin/python3"]) == [data])
        // ...and said to be within the driver's reach through the head's /proc while its mode lets that user list it.
        chmod(data, 0o755)
        #expect(user.mayList(data))
        chmod(data, 0o750)
        #expect(!user.mayList(data))
        #expect(RayNodeExecutor.alsoHidden([dir.path + "/private/dataset"], besides: dir.path + "/private", driver: []).isEmpty)
        #expect(RayNodeExecutor.alsoHidden([dir.path], besides: dir.path + "/private", driver: [driver]).isEmpty)
    }

    @Test("a local benchmark's tasks go out longest first by their own limits (the agent's, else the fallback, plus the verifier's), in listed order among equals; with tasks_per_request above 1 the long ones are spread over the requests and the largest request goes first; `order: listed` keeps the list")
    func longestFirst() {
        let t = { (id: String, agent: Double?, verifier: Double) in
            BenchmarkTask(id: id, directory: "/x/" + id, agentTimeout: agent ?? 900, verifierTimeout: verifier, agentTimeoutDeclared: agent != nil)
        }
        // Limits with the fallback 60: a 20, b 70 (its 900 is the default, not declared), c 1000, d 20, e 1005.
        let tasks = [t("a", 10, 10), t("b", nil, 10), t("c", 100, 900), t("d", 10, 10), t("e", 1000, 5)]
        var executor = ExperimentConfig.Executor()
        #expect(executor.order == .longestFirst)
        #expect(RayNodeExecutor.requests(tasks, executor: executor, fallback: 60).map { $0.map(\.id) } == [["e"], ["c"], ["b"], ["a"], ["d"]])
        // Two a request: the two long ones in requests of their own, the short ones spread
        // over the lightest (c+d 1020, e 1005, b+a 90), sent largest first.
        executor.tasksPerRequest = 2
        #expect(RayNodeExecutor.requests(tasks, executor: executor, fallback: 60).map { $0.map(\.id) } == [["c", "d"], ["e"], ["b", "a"]])
        executor.order = .listed
        #expect(RayNodeExecutor.requests(tasks, executor: executor, fallback: 60).map { $0.map(\.id) } == [["a", "b"], ["c", "d"], ["e"]])
    }

    @Test("a node is checked for the policies its requests name: a tool's runner and scorer policies (not a task's and a verifier's, which a tool's run does not use), a local benchmark's task and verifier policies")
    func nodesCheckedForTheRequestsPolicies() throws {
        let node = try RemoteWorkTests.Node()
        var tool = ToolSettings(command: ["python3", Tools.root + "/command_bench.py", "--tasks", "{task_ids_file}", "--out", "{output}"])
        tool.binds = [Tools.root]
        tool.runnerPolicy = "runner-of-mine"
        tool.scorerPolicy = "scorer-of-mine"
        let command = NodeTool.command(tool: tool, scorer: nil, scorerBinds: [])
        let shards = try [["sq-1", "sq-2"], ["sq-3"]].map { try node.request(tool: command, $0, agent: Array(SquareAgents.upTo(3).utf8), heldOut: false, digest: .some(nil)) }
        #expect(RayNodeExecutor.checkedPolicies(shards, otherwise: ["benchmark-task", "verifier"]) == ["runner-of-mine", "scorer-of-mine"])
        let local = try node.request(["add-1"])
        #expect(RayNodeExecutor.checkedPolicies([local], otherwise: ["x"]) == ["benchmark-task", "verifier"])
        #expect(RayNodeExecutor.checkedPolicies([], otherwise: ["benchmark-task", "verifier"]) == ["benchmark-task", "verifier"])
    }

    @Test("what cannot be sent to a node is named outside a gate's held-out phase and not in it (a task with a link: its id and file); a request over what a node takes is refused naming no task; Harbor's runner lasts a task's agent phase (its agent's limit and a margin, within runner.timeout), the time a node's request is given for it")
    func unsendableNamedOnlyOutsideTheGate() throws {
        let temp = try TempDir()
        let dir = temp.file("secret-task-7")
        try FileManager.default.createDirectory(atPath: dir + "/tests", withIntermediateDirectories: true)
        try "do it\n".write(toFile: dir + "/instruction.md", atomically: true, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: dir + "/tests/answers.txt", withDestinationPath: "/etc/hostname")
        let work = try RemoteWork(key: Curve25519.Signing.PrivateKey(), policySearchPaths: [Built.packageRoot + "/policies"])
        let linked = { try work.request([BenchmarkTask(id: "secret-task-7", directory: dir)], agentPy: [], heldOut: true, concurrency: 1) }
        #expect { _ = try RayNodeExecutor.unnamed(false, linked) } throws: { "\($0)".contains("secret-task-7/tests/answers.txt") }
        #expect { _ = try RayNodeExecutor.unnamed(true, linked) } throws: { e in
            "\(e)".contains("a held-out task's directory cannot be sent to a node whole") && !"\(e)".contains("secret-task-7") && !"\(e)".contains("answers")
        }
        // Two tasks of two 15 MiB files each (each task under a node's limits) are over a request's.
        let big = try ["big-task-1", "big-task-2"].map { id in
            let d = temp.file(id)
            try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true)
            for k in 1...2 {
                FileManager.default.createFile(atPath: d + "/data-\(k)", contents: nil)
                let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: d + "/data-\(k)"))
                try handle.truncate(atOffset: 15 << 20)
                try handle.close()
            }
            return BenchmarkTask(id: id, directory: d)
        }
        #expect(try work.request([big[0]], agentPy: [], heldOut: false, concurrency: 1).tasks[0].files.count == 2)
        #expect { _ = try work.request(big, agentPy: [], heldOut: false, concurrency: 1) } throws: { e in
            "\(e)".contains("over what a node takes") && "\(e)".contains("lower executor.tasks_per_request") && !"\(e)".contains("big-task")
        }

        var tool = ToolSettings(command: ["harbor"])
        tool.timeout = 86_400
        var harbor = HarborAdapter(taskIDs: ["t"], tool: tool)
        harbor.agentTimeoutMultiplier = 2
        let context = AdapterRunContext(policyLoader: PolicyLoader(searchPaths: []), agentDirectory: temp.path, scratchRoot: temp.path, audit: AuditLog(),
                                        heldOut: true, concurrency: 1, traceDirectory: { _ in nil })
        let task = BenchmarkTask(id: "t", directory: dir, agentTimeout: 900)
        #expect(HarborAgentPhase(adapter: harbor, context: context).runnerSettings(for: task).timeout == 900 * 2 + HarborAgentPhase.containerMargin)
        #expect(harbor.boundedTask("t").agentTimeout == harbor.agentPhaseLimit(harbor.localTask("t")))
        tool.timeout = 1_000
        #expect(HarborAgentPhase(adapter: HarborAdapter(taskIDs: ["t"], tool: tool), context: context).runnerSettings(for: task).timeout == 1_000)
    }

    @Test("a tool's shard is given one tool run's time (the runner's, then the scorer's), or one a task for its largest shard when each task runs alone (gate.infra_retries): never cut short by the driver")
    func shardTimeLimit() {
        var settings = ToolSettings(command: ["tool"])
        settings.timeout = 100
        settings.scorerTimeout = 20
        #expect(RayNodeExecutor.shardLimit(tasks: [3, 3, 2], oneTaskPerRun: false, settings: settings) == 120)
        #expect(RayNodeExecutor.shardLimit(tasks: [3, 3, 2], oneTaskPerRun: true, settings: settings) == 360)
        #expect(RayNodeExecutor.shardLimit(tasks: [], oneTaskPerRun: true, settings: settings) == 120)
        settings.timeout = nil
        #expect(RayNodeExecutor.shardLimit(tasks: [1], oneTaskPerRun: false, settings: settings) == 86_420)
    }

    @Test("task images are offered only to nodes that could otherwise work and lack them: not to a node that holds them, fails a check, or shares its sealing key with another; a node without an image it lacks after the push is not used, and the log says why")
    func imagesOffered() throws {
        let f = Fixture(heldOut: false)
        var (batch, kept) = Self.wired(f)
        batch.images = ["aa", "bb"]
        var holds = Fixture.report()
        holds.images = ["aa", "bb"]
        var lacksOne = Fixture.report()
        lacksOne.images = ["aa"]
        let shared = NodeSealKey.publicText(Curve25519.KeyAgreement.PrivateKey())
        var twinA = Fixture.report(sealKey: shared), twinB = Fixture.report(sealKey: shared)
        twinA.images = []
        twinB.images = []
        let seen = [Fixture.node("n1", "10.0.0.2", holds), Fixture.node("n2", "10.0.0.3", lacksOne),
                    Fixture.node("n3", "10.0.0.4", Fixture.report(problems: ["no cgroup"])),
                    Fixture.node("n4", "10.0.0.5", twinA), Fixture.node("n5", "10.0.0.6", twinB)]
        #expect(batch.lacking(seen) == ["bb": ["n2"]])
        var after = seen
        after[1].pushError = "no room"
        #expect(try batch.choose(after) == ["n1"])
        #expect(kept.log.contains { $0.contains("10.0.0.3") && $0.contains("does not hold the task image") && $0.contains("no room") }, "\(kept.log)")
    }
}
