@testable import Experiment
import Execution
@testable import ExperimentModel
import Foundation
import Sandbox
import Testing
import TestSupport

@Suite("Coding-agent usage from the CLIs' own output")
struct AgentUsageTests {
    func meter(_ price: TokenPrice? = nil) throws -> (UsageMeter, FileHandle, TempDir) {
        let dir = try TempDir()
        let path = try dir.file("agent.log", "=== an earlier session\n{\"type\":\"result\",\"total_cost_usd\":99}\n")
        let m = UsageMeter(path: path, price: price)
        let h = try #require(FileHandle(forWritingAtPath: path))
        h.seekToEndOfFile()
        return (m, h, dir)
    }

    @Test("Claude Code stream-json: the last line of each message id counts until the result settles the session with its per-model totals and the CLI's cost; what came before the session is not read")
    func claude() throws {
        let (m, h, _dir) = try meter()
        _ = _dir
        h.write(Data("""
            {"type":"system","subtype":"init","model":"claude-x"}
            {"type":"assistant","message":{"id":"a","model":"claude-x","usage":{"input_tokens":1000,"output_tokens":1,"cache_read_input_tokens":200,"cache_creation_input_tokens":50}}}
            {"type":"assistant","message":{"id":"a","model":"claude-x","usage":{"input_tokens":1000,"output_tokens":7,"cache_read_input_tokens":200,"cache_creation_input_tokens":50}}}
            {"type":"assistant","message":{"id":"b","usage":{"input_tokens":10,"output_tokens":3}}}
            not json at all
            {"type":"user","message":{"content":"{\\"type\\":\\"result\\",\\"total_cost_usd\\":5}"}}

            """.utf8))
        m.poll()
        var u = m.usage
        #expect(u.inputTokens == 1010 && u.outputTokens == 10 && u.cacheReadTokens == 200 && u.cacheWriteTokens == 50)
        #expect(u.costUSD == nil && u.uncostedTokens == 1270, "no cost before the result and no price: \(u)")
        #expect(u.model == "claude-x")
        // The result arrives in two writes: a partial line is not read until its newline.
        h.write(Data(#"{"type":"result","total_cost_usd":0.25,"usage":{"input_tokens":1,"output_tokens":1},"modelUsage":{"claude-x":{"inputTokens":1010,"#.utf8))
        m.poll()
        #expect(m.usage.costUSD == nil)
        h.write(Data(#""outputTokens":10,"cacheReadInputTokens":200,"cacheCreationInputTokens":50,"costUSD":0.2},"claude-side":{"inputTokens":90,"outputTokens":5,"costUSD":0.05}}}"#.utf8 + [0x0A]))
        m.poll()
        u = m.usage
        #expect(u.inputTokens == 1100 && u.outputTokens == 15 && u.cacheReadTokens == 200 && u.cacheWriteTokens == 50, "\(u)")
        #expect(u.costUSD == 0.25 && u.uncostedTokens == 0, "\(u)")
    }

    @Test("Codex exec --json: turn.completed usage is summed, cached tokens taken out of input; priced by the config when given, else uncosted")
    func codex() throws {
        let turn = #"{"type":"turn.completed","usage":{"input_tokens":6000,"cached_input_tokens":1000,"cache_write_input_tokens":0,"output_tokens":300,"reasoning_output_tokens":0}}"# + "\n"
        let (free, h1, d1) = try meter()
        h1.write(Data((turn + turn).utf8))
        free.poll()
        #expect(free.usage.inputTokens == 10000 && free.usage.cacheReadTokens == 2000 && free.usage.outputTokens == 600)
        #expect(free.usage.costUSD == nil && free.usage.uncostedTokens == 12600)
        _ = d1
        let (priced, h2, d2) = try meter(TokenPrice(input: 1, output: 10, cacheRead: 0.1))
        h2.write(Data(turn.utf8))
        priced.poll()
        // 5000 × $1 + 1000 × $0.1 + 300 × $10, per million.
        #expect(abs((priced.usage.costUSD ?? 0) - 0.0081) < 1e-12, "\(priced.usage)")
        _ = d2
    }

    @Test("a line over the limit is skipped whole, and the next line is read")
    func longLine() throws {
        let (m, h, d) = try meter()
        _ = d
        h.write(Data("{\"type\":\"turn.completed\",\"usage\":{\"output_tokens\":1},\"pad\":\"".utf8))
        h.write(Data(repeating: UInt8(ascii: "x"), count: UsageMeter.maxLine + 10))
        h.write(Data("\"}\n{\"type\":\"turn.completed\",\"usage\":{\"output_tokens\":2}}\n".utf8))
        m.poll()
        #expect(m.usage.outputTokens == 2)
    }

    @Test("numbers a hostile agent prints cannot overflow the supervisor's sums: each is clamped, negatives are 0")
    func hostileNumbers() throws {
        let (m, h, d) = try meter()
        _ = d
        let line = #"{"type":"turn.completed","usage":{"input_tokens":1e300,"cached_input_tokens":-5,"output_tokens":9223372036854775807}}"# + "\n"
        let result = #"{"type":"result","total_cost_usd":1e308,"usage":{"input_tokens":1e30,"output_tokens":-1}}"# + "\n"
        h.write(Data((String(repeating: line, count: 20) + result).utf8))
        m.poll()
        let u = m.usage
        #expect(u.inputTokens == 21 * 1_000_000_000_000 && u.outputTokens == 20 * 1_000_000_000_000 && u.cacheReadTokens == 0, "\(u)")
        #expect(u.costUSD == 1_000_000_000, "\(u)")
    }

    @Test("usage adds up across sessions; the summary says when the cost is partial or unknown")
    func summary() {
        var a = AgentUsage()
        a.inputTokens = 1500
        a.outputTokens = 20
        a.costUSD = 0.5
        var b = AgentUsage()
        b.outputTokens = 30
        b.uncostedTokens = 30
        #expect((a + b).summary == "1.5k tokens in, 50 out, $0.5000 + 30 tokens without a price")
        #expect(b.summary == "0 tokens in, 30 out, cost unknown")
        #expect((a + b).costUSD == 0.5)
    }

    @Test("budget.max_cost_usd and coding_agent.price_usd_per_mtok parse, and a price without output is an error with its line")
    func config() throws {
        let ok = try ExperimentConfig.parse("""
            benchmark: local
            dataset: d
            budget:
              max_cost_usd: 12.5
            coding_agent:
              price_usd_per_mtok: {input: 1.25, output: 10}
            """, file: "c.yaml")
        #expect(ok.maxCostUSD == 12.5)
        #expect(ok.codingAgent.price == TokenPrice(input: 1.25, output: 10, cacheRead: 1.25, cacheWrite: 1.25))
        #expect(throws: ConfigErrors.self) {
            try ExperimentConfig.parse("benchmark: local\ndataset: d\ncoding_agent:\n  price_usd_per_mtok: {input: 1}\n", file: "c.yaml")
        }
        do {
            _ = try ExperimentConfig.parse("benchmark: local\ndataset: d\ncoding_agent:\n  price_usd_per_mtok: {input: 1}\n", file: "c.yaml")
        } catch let e as ConfigErrors {
            #expect(e.description.contains("c.yaml:4: coding_agent.price_usd_per_mtok: needs both input and output"), "\(e)")
        }
        let bad = #expect(throws: ConfigErrors.self) { try ExperimentConfig.parse("benchmark: local\ndataset: d\nbudget:\n  max_cost: 3\n", file: "c.yaml") }
        #expect(bad?.description.contains("unknown key 'max_cost' in budget") == true, "\(String(describing: bad))")
    }

    /// A supervisor of an unprepared experiment (kept alive with it).
    static func supervisor() throws -> (ExperimentSupervisor, Experiment) {
        try requireRoot()
        let exp = try Experiment(prepare: false)
        return (try ExperimentSupervisor(layout: ExperimentLayout(root: exp.root), policySearchPaths: [Built.packageRoot + "/policies"], purpose: "test"), exp)
    }

    @Test("a task run's refused connections are recorded with where they went (20 destinations named, the rest folded), allowed ones not at all")
    func egressViolationsNameTheirDestination() throws {
        let (supervisor, exp) = try Self.supervisor()
        defer { withExtendedLifetime(exp) {} }
        let audit = AuditLog()
        audit.record(AuditEvent(sandbox: "s", kind: .egress, name: "api.openai.com:443", action: "allowed"))
        for _ in 0..<2 { audit.record(AuditEvent(sandbox: "s", kind: .egress, name: "us.i.posthog.com:443", action: "denied")) }
        for k in 0..<25 { audit.record(AuditEvent(sandbox: "s", kind: .egress, name: "h\(k).example:443", action: "denied")) }
        let rows = supervisor.experiment.violations(audit, actor: "agent.py (train run)").compactMap { $0.1 as? ViolationRecord }
        #expect(rows.allSatisfy { $0.kind == "egress" })
        #expect(rows.first?.detail == "egress us.i.posthog.com:443 ×2", "\(rows.map(\.detail))")
        #expect(rows.count == 21 && rows.last?.detail == "egress (other destinations) ×6", "\(rows.map(\.detail))")
        #expect(!rows.contains { $0.detail.contains("api.openai.com") })
    }

    /// A held-out run's names are agent.py's to choose (a planted link's path, a reward file's):
    /// the gate records them after its reply instant, where their number and size would move
    /// the record's time.
    @Test("a held-out run's violations name only what the VM's answer may (a syscall, a limit, a host:port; the rest is 'other'), in at most as many rows; a train run's keep their names")
    func heldOutViolationsFolded() throws {
        let (supervisor, exp) = try Self.supervisor()
        defer { withExtendedLifetime(exp) {} }
        let audit = AuditLog()
        audit.record(AuditEvent(sandbox: "s", kind: .syscall, name: "ptrace", action: "denied"))
        // Over ten sandboxes each (an audit keeps 200 names a sandbox), as a phase's tasks make them.
        for k in 0..<1000 { audit.record(AuditEvent(sandbox: "l\(k % 10)", kind: .plantedLink, name: "/app/word-\(k) -> /tests/expected.txt", action: "removed")) }
        for k in 0..<1000 { audit.record(AuditEvent(sandbox: "c\(k % 10)", kind: .syscall, name: "call\(k)", action: "denied")) }
        let heldOut = supervisor.experiment.violations(audit, actor: "agent.py (gate, held-out split)", heldOut: true).compactMap { $0.1 as? ViolationRecord }
        #expect(heldOut.count == GuestAnswer.maxViolations, "\(heldOut.count)")
        #expect(heldOut.contains { $0.detail == "syscall ptrace ×1" })
        #expect(heldOut.contains { $0.detail == "planted_link other ×1000" }, "\(heldOut.prefix(3).map(\.detail))")
        #expect(!heldOut.contains { $0.detail.contains("word-") || $0.detail.contains("/tests") })
        let train = supervisor.experiment.violations(audit, actor: "agent.py (train run)").compactMap { $0.1 as? ViolationRecord }
        #expect(train.count == 2001 && train.contains { $0.detail == "planted_link /app/word-7 -> /tests/expected.txt ×1" })
    }
}
