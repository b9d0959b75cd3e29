import Foundation
import Testing
import TestSupport

@testable import Experiment
@testable import Evidence
import Sandbox

@Suite("The audit in OCSF 1.8")
struct OCSFTests {
    @Test("a real sandbox's refusals and egress, the inference gate's decisions and an experiment's gates export as OCSF 1.8 events the schema validates; an event the schema does not allow is refused by the same validator")
    func validates() throws {
        try requireRoot()
        let python = try EvidenceTools.python()
        let dir = try TempDir()
        // A real sandbox: refused syscalls (chroot often enough to be folded into a count) and
        // a refused connection through the egress proxy.
        let policy = dir.path + "/proxy.yaml"
        try "extends: base\nnetwork:\n  mode: proxy\n  allow: []\n".write(toFile: policy, atomically: true, encoding: .utf8)
        let client = dir.path + "/client.py"
        try """
            import socket, subprocess
            for a in ["mount", "keyctl"] + ["chroot"] * 25:
                subprocess.run(["/probe", a], stdout=subprocess.DEVNULL)
            s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
            s.sendall(b"CONNECT example.com:443 HTTP/1.1\\r\\nHost: example.com:443\\r\\n\\r\\n")
            print(s.recv(200).decode().split("\\r\\n")[0])
            """.write(toFile: client, atomically: true, encoding: .utf8)
        let audit = dir.path + "/audit.jsonl"
        let r = try autoharness(["sandbox", "exec", "--policy", policy, "--audit", audit, "--ro", "\(client):/client.py", "--ro", "\(Built.probe):/probe",
                                 "--", "python3", "/client.py"])
        #expect(r.stdout.contains("403") || r.stdout.contains("HTTP/1.1 4"), "\(r.stdout)\(r.stderr)")
        // The inference gate's decisions as the proxy records them (the gate itself is driven by
        // InferenceGateRunTests; its events carry the same fields).
        var refused = AuditEvent(sandbox: "sbx-runner", kind: .egress, name: "api.openai.com:443", action: "denied")
        refused.detail = "inference refused: POST /v1/responses: tool web_search is not allowed"
        var passed = AuditEvent(sandbox: "sbx-runner", kind: .egress, name: "api.anthropic.com:443", action: "allowed")
        passed.detail = "inference: POST /v1/messages"
        (passed.bytesUp, passed.bytesDown) = (1200, 5300)
        var allowed = AuditEvent(sandbox: "sbx-runner", kind: .egress, name: "[::1]:8080", action: "allowed")
        (allowed.bytesUp, allowed.bytesDown) = (10, 20)
        let extra = [refused, passed, allowed].map(\.jsonLine).joined(separator: "\n") + "\nnot an event\n"
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: audit))
        handle.seekToEndOfFile()
        handle.write(Data(extra.utf8))
        try handle.close()

        let out = dir.path + "/audit.ocsf.jsonl"
        let e = try autoharness(["audit", "export", "--audit", audit, "-o", out])
        let lines = try String(contentsOfFile: audit, encoding: .utf8).split(separator: "\n").count
        #expect(e.status == 0 && e.stderr.contains("audit.jsonl:\(lines): not an audit event; 1 such line(s) skipped"), "\(e.stderr)")
        let events = try String(contentsOfFile: out, encoding: .utf8).split(separator: "\n").compactMap {
            try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
        let classes = events.compactMap { $0["class_uid"] as? Int }
        #expect(classes.filter { $0 == 2004 }.count >= 23, "refused syscalls and the count of the rest: \(classes)")
        #expect(classes.filter { $0 == 4001 }.count == 2 && classes.filter { $0 == 6003 }.count == 2, "\(classes)")
        let folded = try #require(events.first { ($0["count"] as? Int ?? 0) > 1 && $0["class_uid"] as? Int == 2004 })
        #expect((folded["finding_info"] as? [String: Any])?["title"] as? String == "\(folded["count"]!) more syscall EPERM (chroot)", "\(folded)")
        let mount = try #require(events.first { (($0["finding_info"] as? [String: Any])?["title"] as? String)?.contains("refused syscall mount") == true })
        #expect(((mount["evidences"] as? [[String: Any]])?.first?["process"] as? [String: Any])?["pid"] != nil, "\(mount)")
        let egress = try #require(events.first { $0["class_uid"] as? Int == 4001 && $0["activity_id"] as? Int == 5 })
        #expect((egress["dst_endpoint"] as? [String: Any])?["hostname"] as? String == "example.com", "\(egress)")
        let gate = try #require(events.first { $0["class_uid"] as? Int == 6003 && $0["status_id"] as? Int == 2 })
        #expect((gate["api"] as? [String: Any])?["operation"] as? String == refused.detail, "\(gate)")

        // An experiment's ledger: violations, gates and the held-out phase.
        let exp = try Experiment()
        try exp.setAgent(Agents.all)
        #expect(try exp.run("gate").status == 0)
        // Where `autoharness run` keeps the coding agent's sandbox audit: its events are exported too.
        try FileManager.default.createDirectory(atPath: exp.root + "/.autoharness/run", withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: audit, toPath: exp.root + "/.autoharness/run/audit.jsonl")
        let ledgerOut = dir.path + "/ledger.ocsf.jsonl"
        #expect(try exp.run("audit", "export", "-o", ledgerOut).status == 0)
        let ledger = try String(contentsOfFile: ledgerOut, encoding: .utf8)
        #expect(ledger.contains("\"operation\":\"held-out phase\"") && ledger.contains("gate attempt 1 accepted"), "\(ledger)")
        #expect(ledger.contains("refused syscall mount"), "the coding agent's sandbox events: \(ledger)")

        let v = try runProcess(python, [Built.packageRoot + "/scripts/validate-ocsf.py", out, ledgerOut])
        #expect(v.status == 0, "\(v.stdout)\(v.stderr)")
        for line in ["detection_finding (2004) event(s) valid", "network_activity (4001) event(s) valid", "api_activity (6003) event(s) valid"] {
            #expect(v.stdout.contains(line), "\(v.stdout)")
        }
        // The validator is strict: an attribute the class does not define fails it.
        var bad = try #require(events.first)
        bad["sandbox"] = "not an OCSF attribute"
        try (String(decoding: try JSONSerialization.data(withJSONObject: bad), as: UTF8.self) + "\n").write(toFile: dir.path + "/bad.jsonl", atomically: true, encoding: .utf8)
        let b = try runProcess(python, [Built.packageRoot + "/scripts/validate-ocsf.py", dir.path + "/bad.jsonl"])
        #expect(b.status == 1 && b.stdout.contains("INVALID"), "\(b.stdout)\(b.stderr)")
    }
}
