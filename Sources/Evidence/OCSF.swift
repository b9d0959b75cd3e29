import ExperimentModel
import Foundation
import Ledger
import SupervisorIO

// The audit as OCSF 1.8 events (schema.ocsf.io/1.8.0), one JSON object per line, for a SIEM
// or a security lake: a sandbox audit log (`sandbox exec --audit`, each event) or an
// experiment's ledger (its violations, gates and held-out phases). Mapping:
//   refused syscall, reward tampering, shared state changed, a limit hit → Detection Finding 2004
//   egress through the proxy (allowed or refused)                         → Network Activity 4001
//   a request the inference gate judged                                   → API Activity 6003
//   a gate started, its held-out phase, its decision                      → API Activity 6003
// Validated by OCSF's 1.8.0 schema as JSON Schema (ocsf-json-schema, jsonschema) in
// OCSFTests. Objects only: `[String: Any]` built here, encoded once.

public enum OCSF {
    public static let version = "1.8.0"

    static func header(classUID: Int, category: Int, activity: Int, severity: Int, time: Int64, message: String) -> [String: Any] {
        [
            "class_uid": classUID, "category_uid": category, "activity_id": activity, "type_uid": classUID * 100 + activity,
            "severity_id": severity, "time": time, "message": message,
            "metadata": ["version": version, "product": ["name": "autoharness", "vendor_name": "autoharness"]],
        ]
    }

    /// Milliseconds since the epoch of a ledger or audit time (both are `Timestamp`'s form).
    static func epochMillis(_ text: String) -> Int64 {
        Timestamp.parse(text).map { Int64(($0.timeIntervalSince1970 * 1000).rounded()) } ?? 0
    }

    static func endpoint(_ target: String) -> [String: Any] {
        guard let colon = target.lastIndex(of: ":"), let port = Int(target[target.index(after: colon)...]) else { return ["name": target] }
        var host = String(target[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return ["hostname": host, "port": port]
    }

    /// One event of a sandbox audit log (its JSON line as `AuditEvent.jsonLine` writes it).
    public static func event(auditLine object: [String: Any]) -> [String: Any]? {
        guard let kind = object["event"] as? String, let time = object["time"] as? String, let sandbox = object["sandbox"] as? String else { return nil }
        let name = object["name"] as? String ?? ""
        let action = object["action"] as? String ?? ""
        let detail = object["detail"] as? String
        let count = object["count"] as? Int
        let ms = epochMillis(time)
        var unmapped: [String: Any] = ["sandbox": sandbox, "event": kind, "action": action]
        for k in ["nr", "pid", "sandbox_pid", "args"] { if let v = object[k] { unmapped[k] = v } }
        let countedEgress = kind == "egress" || (kind == "repeated" && detail?.hasPrefix("egress ") == true)
        var e: [String: Any]
        if countedEgress && (detail?.hasPrefix("inference") == true) {
            // The inference gate read the request and allowed or refused it.
            let refused = action != "allowed"
            e = header(classUID: 6003, category: 6, activity: 99, severity: refused ? 3 : 1, time: ms,
                       message: "inference gate \(refused ? "refused" : "passed") a request to \(name) from sandbox \(sandbox)")
            e["api"] = ["operation": detail.map { String($0.prefix(200)) } ?? "request", "service": ["name": name]]
            e["actor"] = ["app_name": sandbox]
            e["src_endpoint"] = ["name": sandbox]
            e["dst_endpoint"] = endpoint(name)
            e["status_id"] = refused ? 2 : 1
        } else if countedEgress {
            let refused = action != "allowed" && detail != "egress allowed"
            e = header(classUID: 4001, category: 4, activity: refused ? 5 : 6, severity: refused ? 3 : 1, time: ms,
                       message: "egress \(refused ? "refused" : "allowed"): sandbox \(sandbox) to \(name)")
            e["src_endpoint"] = ["name": sandbox]
            e["dst_endpoint"] = endpoint(name)
            e["status_id"] = refused ? 2 : 1
            if let up = object["bytes_up"] as? Int, let down = object["bytes_down"] as? Int { e["traffic"] = ["bytes_out": up, "bytes_in": down] }
        } else {
            let title: String
            var severity = 3
            switch kind {
            case "syscall": title = "refused syscall \(name) (\(action))"
            case "reward_tampering": title = "reward file \(name) changed by another process: the reward is void"; severity = 5
            case "shared_state_changed": title = "shared benchmark state changed (\(name)): the run's scores are void"; severity = 5
            case "timeout": title = "wall-clock timeout: the sandbox was killed"; severity = 2
            case "memory_limit": title = "memory limit: a process was killed"; severity = 2
            case "pids_limit": title = "pids limit: a fork was refused"; severity = 2
            case "repeated": title = "\(count ?? 0) more \(detail ?? "events") (\(name))"
            default: title = "\(kind) \(name)"
            }
            if action == "kill" { severity = 4 }
            e = header(classUID: 2004, category: 2, activity: 1, severity: severity, time: ms, message: "sandbox \(sandbox): \(title)")
            var info: [String: Any] = ["uid": "\(sandbox)/\(time)/\(kind)/\(name)", "title": String(title.prefix(500)), "types": ["autoharness \(kind)"]]
            if let detail { info["desc"] = String(detail.prefix(1000)) }
            e["finding_info"] = info
            if let pid = object["sandbox_pid"] as? Int { e["evidences"] = [["process": ["pid": pid, "name": "sandbox \(sandbox) pid \(pid)"]]] }
        }
        if let count { e["count"] = count }
        if let detail { e["status_detail"] = String(detail.prefix(1000)) }
        e["unmapped"] = unmapped
        return e
    }

    /// An experiment's ledger: each violation row, each gate's start, held-out phase and decision.
    public static func events(ledger rows: [LedgerRecord]) -> [[String: Any]] {
        var out: [[String: Any]] = []
        for r in rows {
            let ms = epochMillis(r.time)
            let pointer: [String: Any] = ["ledger_seq": r.seq, "ledger_hash": r.hash]
            switch r.kind {
            case .violation:
                guard let v = try? r.decode(ViolationRecord.self) else { continue }
                var e = header(classUID: 2004, category: 2, activity: 1, severity: v.kind == "reward_tampering" ? 5 : 3, time: ms,
                               message: "\(v.actor): \(v.kind) ×\(v.occurrences)")
                e["finding_info"] = ["uid": "ledger/\(r.seq)", "title": String("\(v.kind) by \(v.actor)".prefix(500)), "desc": v.detail,
                                     "types": ["autoharness \(v.kind)"]]
                e["count"] = v.occurrences
                e["unmapped"] = pointer.merging(["actor": v.actor, "held_out": v.heldOut ?? false]) { a, _ in a }
                out.append(e)
            case .gateStarted:
                guard let g = try? r.decode(GateStartedRecord.self) else { continue }
                var e = header(classUID: 6003, category: 6, activity: 1, severity: 1, time: ms, message: "gate attempt \(g.attempt) started for agent.py sha256:\(g.agentSHA256)")
                e["api"] = ["operation": "gate", "service": ["name": "autoharness"]]
                e["actor"] = ["app_name": "autoharness gate"]
                e["src_endpoint"] = ["name": "supervisor"]
                e["unmapped"] = pointer.merging(["attempt": g.attempt, "agent_sha256": g.agentSHA256]) { a, _ in a }
                out.append(e)
            case .gateAttempt:
                guard let a = try? r.decode(GateAttemptRecord.self) else { continue }
                if a.valScore != nil {
                    var h = header(classUID: 6003, category: 6, activity: 99, severity: 1, time: ms,
                                   message: "gate attempt \(a.attempt): held-out phase ran (its traces are not kept)")
                    h["api"] = ["operation": "held-out phase", "service": ["name": "autoharness"]]
                    h["actor"] = ["app_name": "autoharness gate"]
                    h["src_endpoint"] = ["name": "supervisor"]
                    h["unmapped"] = pointer.merging(["attempt": a.attempt]) { x, _ in x }
                    out.append(h)
                }
                var e = header(classUID: 6003, category: 6, activity: 3, severity: 1, time: ms,
                               message: "gate attempt \(a.attempt) \(a.accepted ? "accepted" : "rejected"): \(a.reason)")
                e["api"] = ["operation": "gate", "service": ["name": "autoharness"]]
                e["actor"] = ["app_name": "autoharness gate"]
                e["src_endpoint"] = ["name": "supervisor"]
                e["status_id"] = a.accepted ? 1 : 2
                e["status_detail"] = a.reason
                e["unmapped"] = pointer.merging(["attempt": a.attempt, "agent_sha256": a.agentSHA256, "outcome": a.verdict.rawValue]) { x, _ in x }
                out.append(e)
            default: continue
            }
        }
        return out
    }

    /// Events as JSON lines.
    public static func lines(_ events: [[String: Any]]) throws -> [UInt8] {
        var out: [UInt8] = []
        for e in events {
            out += Array(try JSONSerialization.data(withJSONObject: e, options: [.sortedKeys, .withoutEscapingSlashes]))
            out.append(0x0A)
        }
        return out
    }

    /// A sandbox audit log's lines as events; lines that are not audit events are counted, and
    /// the first one's number kept for the message.
    public static func events(auditLog bytes: [UInt8]) -> (events: [[String: Any]], skipped: Int, firstSkipped: Int?) {
        var events: [[String: Any]] = []
        var skipped = 0
        var firstSkipped: Int?
        for (n, line) in bytes.split(separator: 0x0A, omittingEmptySubsequences: false).enumerated() where !line.isEmpty {
            guard let o = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any], let e = event(auditLine: o) else {
                skipped += 1
                if firstSkipped == nil { firstSkipped = n + 1 }
                continue
            }
            events.append(e)
        }
        return (events, skipped, firstSkipped)
    }
}
