import Foundation
import Glibc
import Synchronization

/// Tokens and cost of coding-agent sessions, as the agent's CLI reported them on its own
/// output (the run's agent log).
///
/// These are the sandboxed process's own words: a hostile agent can print whatever it likes,
/// so they are an account for the operator and a budget for honest agents, never a bound on
/// a dishonest one (the vendor's billing is).
public struct AgentUsage: Codable, Sendable, Equatable {
    /// Prompt tokens billed at the full rate (not read from or written to a cache).
    public var inputTokens = 0
    public var cacheReadTokens = 0
    public var cacheWriteTokens = 0
    public var outputTokens = 0
    /// What the tokens cost: the CLI's own figure where it gives one (Claude Code), else the
    /// tokens priced with `coding_agent.price_usd_per_mtok`; nil when neither is known.
    public var costUSD: Double?
    /// Tokens no cost covers (the CLI gave none and no price is configured, or a session ended
    /// before its CLI reported the cost).
    public var uncostedTokens = 0
    /// The model the CLI said it used (its last word on it).
    public var model: String?

    public init() {}

    public var totalTokens: Int { inputTokens + cacheReadTokens + cacheWriteTokens + outputTokens }

    public static func + (a: AgentUsage, b: AgentUsage) -> AgentUsage {
        var s = a
        s.inputTokens += b.inputTokens
        s.cacheReadTokens += b.cacheReadTokens
        s.cacheWriteTokens += b.cacheWriteTokens
        s.outputTokens += b.outputTokens
        s.costUSD = (a.costUSD == nil && b.costUSD == nil) ? nil : (a.costUSD ?? 0) + (b.costUSD ?? 0)
        s.uncostedTokens += b.uncostedTokens
        s.model = b.model ?? a.model
        return s
    }

    /// "12.3k in (4.0k cached), 1.2k out, $0.42" — the cost part says when it is partial.
    public var summary: String {
        func k(_ n: Int) -> String { n < 1000 ? "\(n)" : n < 1_000_000 ? String(format: "%.1fk", Double(n) / 1000) : String(format: "%.2fM", Double(n) / 1_000_000) }
        var s = "\(k(inputTokens + cacheReadTokens + cacheWriteTokens)) tokens in"
        if cacheReadTokens > 0 { s += " (\(k(cacheReadTokens)) cached)" }
        s += ", \(k(outputTokens)) out"
        if let c = costUSD { s += ", " + Self.dollars(c) }
        if uncostedTokens > 0 { s += costUSD == nil ? ", cost unknown" : " + \(k(uncostedTokens)) tokens without a price" }
        return s
    }

    public static func dollars(_ c: Double) -> String { String(format: c < 10 ? "$%.4f" : "$%.2f", c) }
}

/// USD per million tokens, for CLIs that report tokens but no cost (Codex).
public struct TokenPrice: Sendable, Equatable {
    public var input: Double
    public var output: Double
    public var cacheRead: Double
    public var cacheWrite: Double
    public init(input: Double, output: Double, cacheRead: Double? = nil, cacheWrite: Double? = nil) {
        self.input = input
        self.output = output
        self.cacheRead = cacheRead ?? input
        self.cacheWrite = cacheWrite ?? input
    }

    func cost(input i: Int, cacheRead r: Int, cacheWrite w: Int, output o: Int) -> Double {
        (Double(i) * input + Double(r) * cacheRead + Double(w) * cacheWrite + Double(o) * output) / 1_000_000
    }
}

/// Reads one coding-agent session's output as it is written and adds up what the CLI says it
/// used. Understood (checked against Claude Code 2.1.330 and Codex CLI 0.163.0 in
/// RealAgentTests):
///   Claude Code `--output-format stream-json`: `{"type":"system","subtype":"init","model":…}`;
///     `{"type":"assistant","message":{"id","model","usage":{input_tokens,
///     cache_read_input_tokens, cache_creation_input_tokens, output_tokens}}}` — one line per
///     content block, the same id repeated, so the last line of an id counts; and
///     `{"type":"result","total_cost_usd","usage","modelUsage":{model:{inputTokens,…,costUSD}}}`
///     which settles the session (side models included) with the CLI's own cost.
///   Codex `exec --json`: `{"type":"turn.completed","usage":{input_tokens (cached included),
///     cached_input_tokens, cache_write_input_tokens, output_tokens}}` per turn; no cost.
/// Anything else on the output is ignored; so is a line longer than `maxLine`.
public final class UsageMeter: Sendable {
    let path: String
    /// `poll` (the run's cost timer, the session's end) and `usage` (the desk) may run on
    /// different threads: the reader's state is behind one lock.
    private let reader: Synchronization.Mutex<Reader>
    static let maxLine = 4 << 20

    /// Starts reading `path` at its current end (what a new session appends).
    public init(path: String, price: TokenPrice?) {
        self.path = path
        var st = stat()
        reader = Synchronization.Mutex(Reader(price: price, offset: stat(path, &st) == 0 ? st.st_size : 0))
    }

    /// Reads what was appended since the last call.
    public func poll() {
        reader.withLock { $0.poll(path) }
    }

    /// What the session has used so far.
    public var usage: AgentUsage {
        reader.withLock { $0.usage }
    }

    /// The most one line may claim, for tokens and dollars: the numbers come from the
    /// sandbox, and sums of unbounded ones would overflow (a trap) in the supervisor.
    static let maxTokens = 1_000_000_000_000.0
    static let maxCost = 1_000_000_000.0

    static func clamp(_ x: Double, _ limit: Double) -> Double { x.isNaN ? 0 : min(max(x, 0), limit) }

    /// The log read so far and what its lines said.
    struct Reader {
        let price: TokenPrice?
        var offset: off_t
        var pending: [UInt8] = []
        var skipping = false
        /// Settled by `result` lines (Claude Code) or turns (Codex).
        var settled = AgentUsage()
        /// Claude Code messages since the last `result`: id -> (input, cacheRead, cacheWrite, output).
        var messages: [String: [Int]] = [:]
        var model: String?

        init(price: TokenPrice?, offset: off_t) {
            self.price = price
            self.offset = offset
        }

        mutating func poll(_ path: String) {
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else { return }
            defer { close(fd) }
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            while true {
                let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, offset) }
                guard n > 0 else { return }
                offset += off_t(n)
                for byte in buffer[0..<n] {
                    if byte == 0x0A {
                        if !skipping { line(pending) }
                        pending.removeAll(keepingCapacity: true)
                        skipping = false
                    } else if !skipping {
                        pending.append(byte)
                        if pending.count > UsageMeter.maxLine {
                            pending.removeAll()
                            skipping = true
                        }
                    }
                }
            }
        }

        var usage: AgentUsage {
            var u = settled
            for c in messages.values {
                u.inputTokens += c[0]
                u.cacheReadTokens += c[1]
                u.cacheWriteTokens += c[2]
                u.outputTokens += c[3]
                add(cost: nil, tokens: c, to: &u)
            }
            u.model = model ?? settled.model
            return u
        }

        private func add(cost: Double?, tokens c: [Int], to u: inout AgentUsage) {
            if let cost {
                u.costUSD = (u.costUSD ?? 0) + cost
            } else if let price {
                u.costUSD = (u.costUSD ?? 0) + price.cost(input: c[0], cacheRead: c[1], cacheWrite: c[2], output: c[3])
            } else {
                u.uncostedTokens += c.reduce(0, +)
            }
        }

        private static func int(_ o: [String: Any], _ keys: String...) -> Int {
            for k in keys { if let n = o[k] as? NSNumber { return Int(UsageMeter.clamp(n.doubleValue, UsageMeter.maxTokens)) } }
            return 0
        }

        private mutating func line(_ bytes: [UInt8]) {
            guard bytes.first == UInt8(ascii: "{"),
                  let o = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
                  let type = o["type"] as? String else { return }
            switch type {
            case "system":
                if let m = o["model"] as? String { model = m }
            case "assistant":
                guard let m = o["message"] as? [String: Any], let id = m["id"] as? String, let u = m["usage"] as? [String: Any] else { return }
                if let name = m["model"] as? String { model = name }
                messages[id] = [Self.int(u, "input_tokens"), Self.int(u, "cache_read_input_tokens"),
                            Self.int(u, "cache_creation_input_tokens"), Self.int(u, "output_tokens")]
            case "result":
                // The session's own total: per model when given (side models included), else its usage.
                var c = [0, 0, 0, 0]
                if let per = o["modelUsage"] as? [String: Any], !per.isEmpty {
                    for case let m as [String: Any] in per.values {
                        c[0] += Self.int(m, "inputTokens")
                        c[1] += Self.int(m, "cacheReadInputTokens")
                        c[2] += Self.int(m, "cacheCreationInputTokens")
                        c[3] += Self.int(m, "outputTokens")
                    }
                } else if let u = o["usage"] as? [String: Any] {
                    c = [Self.int(u, "input_tokens"), Self.int(u, "cache_read_input_tokens"),
                         Self.int(u, "cache_creation_input_tokens"), Self.int(u, "output_tokens")]
                } else {
                    return
                }
                settle(c, cost: (o["total_cost_usd"] as? NSNumber).map { UsageMeter.clamp($0.doubleValue, UsageMeter.maxCost) })
                messages.removeAll()
            case "turn.completed":
                guard let u = o["usage"] as? [String: Any] else { return }
                let cached = Self.int(u, "cached_input_tokens")
                let write = Self.int(u, "cache_write_input_tokens")
                let input = max(0, Self.int(u, "input_tokens") - cached - write)
                settle([input, cached, write, Self.int(u, "output_tokens")], cost: nil)
            default:
                return
            }
        }

        private mutating func settle(_ c: [Int], cost: Double?) {
            settled.inputTokens += c[0]
            settled.cacheReadTokens += c[1]
            settled.cacheWriteTokens += c[2]
            settled.outputTokens += c[3]
            add(cost: cost, tokens: c, to: &settled)
        }
    }
}
