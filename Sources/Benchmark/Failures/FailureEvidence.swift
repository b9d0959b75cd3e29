// What went wrong in one failed train task, as the benchmark's own structured results say it:
// which check failed, the class of error, and a bounded excerpt of the evidence.
//
// Evidence is read from what the tool or verifier wrote in its own format (a CTRF test report,
// Harbor's result.json, tau2's reward breakdown, the BIRD environment's submission record),
// never from agent.py's free text alone, and only for train runs: an adapter asked for a
// held-out run collects none, and the
// supervisor drops any that reached it anyway. Every field is escaped and capped here, once,
// whatever parser produced it: the strings end up in ledger rows, the coding agent's views and
// the operator's report.

/// One failing check of one task.
public struct FailureEvidence: Codable, Sendable, Hashable {
    /// The check that failed, as the benchmark names it: a test (`tests/test_outputs.py::test_x`),
    /// a tau2 component (`action book_reservation`, `db`), a BIRD phase (`phase 1`), or, when
    /// the tool reported nothing finer, where it failed (`verifier`, `agent`).
    public var check: String
    /// The kind of failure: an exception type (`AssertionError`, `AgentTimeoutError`), a
    /// tau2/BIRD outcome (`action_not_matched`, `phase1_not_passed`), or a status class
    /// (`agent_timeout`).
    public var errorClass: String
    /// The evidence: an assertion's message, the expected action, an exception message.
    public var excerpt: String

    /// Caps, in characters.
    public static let maxCheck = 200
    public static let maxErrorClass = 80
    public static let maxExcerpt = 600
    /// Failing checks kept per task and run; the rest are counted in the last one's excerpt.
    public static let maxPerTask = 8

    public init(check: String, errorClass: String, excerpt: String) {
        self.check = Self.clean(check, limit: Self.maxCheck, empty: "task")
        self.errorClass = Self.clean(errorClass, limit: Self.maxErrorClass, empty: "failed")
        self.excerpt = Self.clean(excerpt, limit: Self.maxExcerpt, empty: "")
    }

    enum CodingKeys: String, CodingKey {
        case check, excerpt
        case errorClass = "error_class"
    }

    /// Decoded values pass through the same caps as constructed ones (a ledger row is trusted,
    /// but one rule for every path in is simpler to check).
    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(check: try c.decode(String.self, forKey: .check), errorClass: try c.decode(String.self, forKey: .errorClass),
                  excerpt: try c.decode(String.self, forKey: .excerpt))
    }

    /// One line of printable text: control characters (newlines included) escaped as `\xNN`,
    /// runs of spaces collapsed, trimmed, at most `limit` characters (then `…`).
    static func clean(_ s: String, limit: Int, empty: String) -> String {
        var out = ""
        var count = 0
        var lastSpace = true
        for u in s.unicodeScalars {
            let piece: String
            if u == " " || u == "\t" {
                if lastSpace { continue }
                piece = " "
                lastSpace = true
            } else if u.value < 0x20 || (0x7F...0x9F).contains(u.value) || u.value == 0x2028 || u.value == 0x2029 {
                piece = u == "\n" ? " ⏎ " : "\\x" + (u.value < 16 ? "0" : "") + String(u.value, radix: 16)
                lastSpace = u == "\n"
            } else {
                piece = String(u)
                lastSpace = false
            }
            if count + piece.count > limit {
                out += "…"
                break
            }
            out += piece
            count += piece.count
        }
        while out.hasSuffix(" ") { out.removeLast() }
        return out.isEmpty ? empty : out
    }

    /// `items` without repeats, in order (retried trials failing the same way).
    public static func unique(_ items: [FailureEvidence]) -> [FailureEvidence] {
        var seen: Set<FailureEvidence> = []
        return items.filter { seen.insert($0).inserted }
    }

    /// At most `maxPerTask` items, the last one saying how many more there were.
    public static func bounded(_ items: [FailureEvidence]) -> [FailureEvidence] {
        guard items.count > maxPerTask else { return items }
        var kept = Array(items.prefix(maxPerTask))
        let more = items.count - maxPerTask
        kept[maxPerTask - 1].excerpt = clean(kept[maxPerTask - 1].excerpt + " (and \(more) more failing check\(more == 1 ? "" : "s"))",
                                             limit: maxExcerpt, empty: "")
        return kept
    }
}

extension FailureEvidence {
    /// The evidence for a failed task whose tool reported nothing finer: the status class and
    /// the outcome's detail (which the supervisor or adapter wrote).
    public static func fromStatus(_ outcome: TaskOutcome) -> FailureEvidence {
        let check: String
        switch outcome.status {
        case .agentTimeout, .agentCrashed: check = "agent"
        case .verifierTimeout, .verifierCrashed, .noReward, .invalidReward: check = "verifier"
        case .setupFailed: check = "setup"
        case .missingResult: check = "tool"
        case .passed, .failed: check = "reward"
        }
        let excerpt = outcome.status == .failed && outcome.detail == nil
            ? "reward \(outcome.reward) below the pass threshold \(TaskOutcome.passThreshold)"
            : outcome.detail ?? ""
        return FailureEvidence(check: check, errorClass: outcome.status.rawValue, excerpt: excerpt)
    }
}
