import ExperimentModel
import Foundation
import Ledger
import Sandbox
import SupervisorIO

/// Refused requests recorded one by one in the current minute, and those only counted.
struct RefusalWindow {
    var start = 0.0
    var recorded = 0
    var counted: [String: Int] = [:]

    /// Refusals a flooding agent can repeat cheaply: at most this many rows a minute each,
    /// the rest summed up in one row.
    static let perMinute = 30
    static let limitedKinds: Set<String> = ["broker_protocol", "refused_request", "gate_budget", "repeat_gate"]
}

/// The coding agent's violations: refused requests (rate-limited) and its sandbox's audit
/// events, into the ledger.
extension RunDesk {
    /// Records one violation by the coding agent (in the ledger at once).
    mutating func violation(_ kind: String, _ detail: String) {
        if RefusalWindow.limitedKinds.contains(kind) {
            let now = BrokerServer.now()
            if now - refusals.start >= 60 {
                flushRefusalCounts()
                refusals = RefusalWindow(start: now)
            }
            refusals.recorded += 1
            if refusals.recorded > RefusalWindow.perMinute {
                refusals.counted[kind, default: 0] += 1
                return
            }
        }
        do {
            try append([(.violation, ViolationRecord(actor: "coding agent", kind: kind, detail: detail, count: 1))])
        } catch {
            stop.recordingFailed("a violation (\(kind): \(detail))", error)
        }
        settings.log("violation by the coding agent: \(kind): \(detail)")
    }

    /// One row per kind for the refusals only counted in the last window.
    mutating func flushRefusalCounts() {
        let counted = refusals.counted
        refusals.counted = [:]
        for (kind, n) in counted.sorted(by: { $0.key < $1.key }) {
            let detail = "\(n) more refused request\(n == 1 ? "" : "s") of this kind within a minute (over \(RefusalWindow.perMinute) a minute are counted, not recorded one by one)"
            do {
                try append([(.violation, ViolationRecord(actor: "coding agent", kind: kind, detail: detail, count: n))])
            } catch {
                stop.recordingFailed("a violation (\(kind): \(detail))", error)
            }
        }
    }

    /// Moves the coding agent sandbox's new audit events (refused syscalls, denied egress,
    /// limits) into the ledger, one row per kind and name. Allowed egress stays in the audit
    /// file only.
    mutating func flushAudit() {
        let events = audit.events
        guard auditFlushed < events.count else { return }
        let fresh = events[auditFlushed...]
        auditFlushed = events.count
        var counts: [String: (kind: String, detail: String, n: Int)] = [:]
        var order: [String] = []
        for e in fresh where e.isViolation {
            let kind: String, key: String, detail: String
            switch e.countedKind {
            case .egress:
                kind = "egress_denied"
                key = "egress " + e.name
                let why = e.kind == .egress ? e.detail.map { " (\(printable($0)))" } ?? "" : ""
                // The run's inference gate let the tunnel in and refused a request in it.
                detail = e.detail?.hasPrefix("inference refused") == true
                    ? "a request to \(printable(e.name)) refused by the inference gate\(why)"
                    : "CONNECT \(printable(e.name)) refused by the proxy\(why)"
            case .syscall:
                kind = "syscall"
                key = "syscall " + e.name
                detail = "\(e.name) refused (\(e.action))"
            default:
                kind = e.kind.rawValue
                key = kind
                detail = e.detail ?? e.name
            }
            if counts[key] == nil { order.append(key) }
            counts[key, default: (kind, detail, 0)].n += e.count ?? 1
        }
        var items: [(RecordKind, any Encodable)] = []
        for k in order {
            let c = counts[k]!
            items.append((.violation, ViolationRecord(actor: "coding agent", kind: c.kind, detail: "\(c.detail) ×\(c.n)", count: c.n)))
            settings.log("violation by the coding agent: \(c.detail) ×\(c.n)")
        }
        if !items.isEmpty {
            do { try append(items) } catch { stop.recordingFailed("violations", error) }
        }
    }
}
