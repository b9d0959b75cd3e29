import Foundation
import Testing
import TestSupport
import Sandbox
@testable import Experiment
@testable import Execution

/// A tool benchmark's held-out tasks in the VM, reaching a model API: every connection they
/// make leaves the guest over the egress port and is judged by the host's proxy (its
/// allowlist, a gate of the host's for model APIs, its audit). Booted for real, emulated.
@Suite("Held-out VM: tool benchmarks, their egress through the host's proxy", .serialized)
struct HeldOutVMEgressTests {
    /// Each task in the VM (on the host's kernel it answers wrong and calls nothing): a chat
    /// completion asking to store the instruction (the gate passes it with `store` false; odd
    /// numbers ask the fake vendor to fail their first request, `FAILONCE`, and answer wrong
    /// when it does), a list of stored completions (refused), a CONNECT to a host the
    /// allowlist does not name (refused). It answers right only where all three went as the
    /// gate decides: so a held-out score of 1 says every held-out task ran in the VM, reached
    /// the vendor through the host's gate, and was run again where the vendor failed it.
    static func agent(hostBootID: String) -> String {
        """
        import json, os, socket, urllib.request, urllib.error

        def call(method, path, body=None):
            req = urllib.request.Request("https://%s%s" % (os.environ["FAKE_MODEL"], path), method=method,
                                         data=None if body is None else json.dumps(body).encode(),
                                         headers={"content-type": "application/json", "authorization": "Bearer sk-test"})
            try:
                with urllib.request.urlopen(req, timeout=120) as r:
                    return r.status
            except urllib.error.HTTPError as e:
                return e.code
            except Exception as e:
                return type(e).__name__

        def elsewhere():
            try:
                s = socket.create_connection(("127.0.0.1", 3128), timeout=60)
                s.sendall(b"CONNECT 127.0.0.1:9 HTTP/1.1\\r\\nHost: 127.0.0.1:9\\r\\n\\r\\n")
                return s.recv(100).split(b"\\r\\n")[0].decode()
            except Exception as e:
                return type(e).__name__

        class HarnessAgent:
            def run(self, instruction):
                n = int(instruction.split()[1])
                in_vm = open("/proc/sys/kernel/random/boot_id").read().strip() != "\(hostBootID)"
                if not in_vm:
                    return "host"
                word = instruction + (" FAILONCE:sq%d" % n if n % 2 else "")
                chat = call("POST", "/v1/chat/completions", {"model": "gpt-fake", "store": True, "metadata": {"leak": instruction},
                                                            "messages": [{"role": "user", "content": word}]})
                if chat == 503:
                    return "vendor 503"
                listed = call("GET", "/v1/chat/completions")
                other = elsewhere()
                ok = chat == 200 and listed == 403 and " 403 " in other and in_vm
                return str(n * n) if ok else "chat=%s list=%s other=%s vm=%s" % (chat, listed, other, in_vm)
        """
    }

    /// A command benchmark whose runner reaches the fake vendor through the inference gate,
    /// its held-out tasks in the VM (`more` adds settings), prepared with an agent.py that
    /// answers nothing.
    static func prepared(_ more: (Experiment) throws -> Void = { _ in }) throws -> (Experiment, FakeModel) {
        let model = try FakeModel(turns: [])
        let exp = try Experiment(benchmark: "command")
        try exp.set("tasks", "[" + CommandAdapterTests.ids.joined(separator: ", ") + "]")
        try exp.set("command", "[/usr/bin/python3, \(Tools.root)/command_bench.py, --tasks, \"{task_ids_file}\", --out, \"{output}\"]", in: "runner")
        try exp.set("binds", "[\(Tools.root)]", in: "runner")
        try exp.set("env_pass", "[FAKE_MODEL]", in: "runner")
        try exp.set("inference", "[\"\(model.address)\"]\n    upstream_ca: \(model.caFile)", in: "runner")
        try exp.set("held_out_runtime", "vm\n  vm: {accel: tcg, allow_emulation: true, memory_mib: 1536}", in: "gate")
        try more(exp)
        try exp.setAgent(SquareAgents.none)
        let p = try exp.run(["prepare"], environment: ["FAKE_MODEL": model.address])
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        return (exp, model)
    }

    @Test("held-out tasks in the VM reach the fake vendor only through the host's gate (store forced false, a list refused, another host refused), each refusal recorded as held-out; with gate.infra_retries the host's one gate counts the vendor's failures per task by the stream tags of the guest's one-task runs, and only the tasks it failed run again, in a second VM of the same phase")
    func heldOutEgressThroughHost() throws {
        try HeldOutVMTests.requireVM()
        let (exp, model) = try Self.prepared { try $0.set("infra_retries", "1", in: "gate") }
        defer { exp.removeScratch() }
        let env = ["FAKE_MODEL": model.address]
        let test = try exp.split().test
        let odd = test.filter { (Int($0.dropFirst(3)) ?? 0) % 2 == 1 }
        try #require(!odd.isEmpty && odd.count < test.count, "the held-out split \(test) needs odd and even tasks")
        let before = model.requests().count

        try exp.setAgent(Self.agent(hostBootID: HeldOutVMTests.hostBootID))
        let g = try exp.run(["gate"], environment: env)
        #expect(g.status == 0 && g.stdout.contains("ACCEPTED") && g.stdout.contains("val_score: 1.00"), "\(g.stdout)\n\(g.stderr)")
        // The phase, then a VM for exactly the tasks the vendor failed.
        #expect(g.stderr.contains("held-out VM: \(test.count) task(s) answered") && g.stderr.contains("held-out VM: \(odd.count) task(s) answered"), "\(g.stderr)")
        #expect(g.stderr.contains("\(odd.count) task run(s) the model vendor failed, run again"), "\(g.stderr)")
        let failed = model.requests().filter { $0["failed"] != nil }
        #expect(failed.count == odd.count, "\(model.requests())")
        let row = try #require(try exp.rows("gate_attempt").last)
        let account = row["infraRetries"] as? [String: Any]
        #expect(account?["failures"] as? Int == odd.count && account?["retried"] as? Int == odd.count && account?["unresolved"] as? Int == 0,
                "\(row)")

        // What reached the vendor during the gate: chat completions of the held-out tasks
        // (in the VM; failed ones twice), each with store false, and no list.
        let during = Array(model.requests().dropFirst(before))
        let chats = during.filter { ($0["path"] as? String)?.hasSuffix("/v1/chat/completions") == true }
        #expect(chats.count >= test.count && chats.allSatisfy { ($0["method"] as? String) == "POST" && ($0["store"] as? Bool) == false }, "\(during)")
        #expect(chats.allSatisfy { ($0["host"] as? String) == model.address }, "\(chats)")
        // The refusals inside the VM were the host proxy's, recorded against agent.py, held out.
        let heldOut = try exp.rows("violation").filter { ($0["heldOut"] as? Bool) == true && ($0["kind"] as? String) == "egress" }
        #expect(heldOut.contains { ($0["detail"] as? String)?.contains(model.address) == true }, "\(heldOut)")
        #expect(heldOut.contains { ($0["detail"] as? String)?.contains("127.0.0.1:9") == true }, "\(heldOut)")
        #expect(heldOut.allSatisfy { ($0["actor"] as? String)?.hasPrefix("agent.py") == true }, "\(heldOut)")
    }

    @Test("in the VM too, agent.py that exits in the middle of a slow generation buys no retry: its sandbox's end closes only the guest's stream (the host's exchange waits on for the vendor), and what fails once the host's proxy stopped with the VM is not counted")
    func leavingMidCallInTheVM() throws {
        try HeldOutVMTests.requireVM()
        let (exp, model) = try Self.prepared { try $0.set("infra_retries", "1", in: "gate") }
        defer { exp.removeScratch() }
        let test = try exp.split().test
        let before = model.requests().count
        // Held-out runs (on the guest's kernel) leave their generation mid-call.
        // The guest is emulated: its call takes seconds to reach the vendor (one of three had
        // not, 2 s in, with three test processes beside it), so it leaves 12 s into a 40 s one.
        try exp.setAgent(InfraRetryTests.leavesMidCall(answersWhen: "open(\"/proc/sys/kernel/random/boot_id\").read().strip() == \"\(HeldOutVMTests.hostBootID)\"",
                                                       key: "\"sk-test\"", exitAfter: 12, slow: 40))
        let g = try exp.run(["gate"], environment: ["FAKE_MODEL": model.address])
        #expect(g.status == 0 || g.status == 1, "\(g.stdout)\n\(g.stderr)")
        // The attempt was made: each held-out task's generation reached the vendor.
        #expect(model.requests().dropFirst(before).filter { $0["slow"] != nil }.count == test.count, "\(model.requests())")
        #expect(!g.stderr.contains("run again (gate.infra_retries)"), "\(g.stderr)")
        let row = try #require(try exp.rows("gate_attempt").last)
        #expect(row["infraRetries"] == nil, "\(row)")
    }

    @Test("tau-bench's held-out tasks run in the VM with tau2's data and scripts shared read-only: the gate scores them there, and nothing of them persists on the host")
    func tau2InTheVM() throws {
        try HeldOutVMTests.requireVM()
        let exp = try Tau2AdapterTests().make()
        defer { exp.removeScratch() }
        try exp.set("held_out_runtime", "vm\n  vm: {accel: tcg, allow_emulation: true, memory_mib: 1536}", in: "gate")
        let p = try exp.run(["prepare"], environment: Tau2AdapterTests.env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        // Refunds every order, but only on a kernel that is not the host's.
        try exp.setAgent(Tau2Agents.refunding(reasons: ["broken", "late", "wrong_size"]) + """

            _generate = HarnessAgent.generate_next_message
            def generate(self, message, state):
                if open("/proc/sys/kernel/random/boot_id").read().strip() == "\(HeldOutVMTests.hostBootID)":
                    return AssistantMessage(content="Sorry.", tool_calls=None), state
                return _generate(self, message, state)
            HarnessAgent.generate_next_message = generate
            """)
        let g = try exp.run(["gate"], environment: Tau2AdapterTests.env)
        #expect(g.status == 0 && g.stdout.contains("ACCEPTED") && g.stdout.contains("val_score: 1.00"), "\(g.stdout)\n\(g.stderr)")
        #expect(g.stderr.contains("held-out VM: \(Tau2AdapterTests.test.count) task(s) answered"), "\(g.stderr)")
        for k in [7, 8, 9, 11] {
            let order = String(format: "#W%04d", 1000 + k)
            #expect(files(under: exp.root, containing: order).isEmpty, "\(order) persisted")
        }
        #expect(exp.scratchMounts().isEmpty)
    }

    @Test("a stream the guest opens for a sandbox class whose policy has no network is refused and recorded against that class")
    func noNetworkClassRefused() throws {
        let agent = AuditLog(), tool = AuditLog()
        let egress = VMEgress(agent: nil, tool: nil, agentAudit: agent, toolAudit: tool)
        for tag in ["agent", "tool", "agent-3"] {
            var p: [Int32] = [-1, -1]
            try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &p) == 0)
            egress.serve(tag: tag, p[0])
            var b: UInt8 = 0
            #expect(recv(p[1], &b, 1, 0) == 0, "\(tag): the stream was not closed")
            close(p[1])
        }
        let (kind, slot) = VMEgress.parse("agent-3")
        #expect(kind == "agent" && slot == 3 && VMEgress.parse("tool").slot == nil)
        #expect(agent.events.count == 2 && tool.events.count == 1)
        for log in [agent, tool] {
            #expect(log.events[0].kind == .egress && log.events[0].action == "denied", "\(log.events)")
            #expect(log.events[0].sandbox == "held-out-vm")
        }
    }
}
