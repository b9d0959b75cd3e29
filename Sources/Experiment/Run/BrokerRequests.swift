import BrokerWire
import ExperimentModel
import Foundation
import Ledger
import SupervisorIO

/// The broker's requests, answered one at a time with the desk held: parsed by the CLI's
/// own grammar, refused and recorded when malformed, and run by the verb's owner.
extension RunDesk {
    mutating func handle(_ request: Result<[String], BrokerWire.RequestError>, peer: BrokerPeer) -> BrokerReply {
        tally.requestsThisStart += 1
        defer {
            flushAudit()
            // A benchmark's or gate's model spend (and the agent's own meanwhile) ends the
            // run as soon as the request that reached the budget has its answer.
            if stop.reason == nil, let why = costSpent() { stop.requestAfterReply(why) }
        }
        let argv: [String]
        switch request {
        case .failure(let e):
            violation("broker_protocol", "malformed broker message: \(e)")
            return BrokerReply(stderr: "autoharness: refused: \(e); this was recorded\n", exit: 2)
        case .success(let a): argv = a
        }
        let shown = printable(argv.joined(separator: " "))
        let verb: BrokerVerb
        switch BrokerGrammar.parse(argv) {
        case .help(let text): return BrokerReply(stdout: text, exit: 0)
        case .invalid(let why):
            violation("refused_request", "`autoharness \(shown)`: \(printable(why))")
            return BrokerReply(stderr: "autoharness: \(why)\nautoharness: refused; this request was recorded\n", exit: 2)
        case .verb(let v): verb = v
        }
        if let why = stop.reason {
            if case .gate = verb, let spent = budgetSpent() {
                violation("gate_budget", "gate requested after the run's budget was spent: \(spent)")
                return BrokerReply(stderr: "autoharness: refused: \(spent); the run is stopping; this request was recorded\n", exit: 2)
            }
            // 3, the CLI's "nothing left to do": 1 would read as a rejected gate.
            return BrokerReply(stderr: "autoharness: the run is stopping (\(why)); request not run\n", exit: 3)
        }
        settings.log("coding agent: autoharness \(shown)")
        do {
            switch verb {
            case .status(let json):
                return BrokerReply(stdout: AgentText.status(Disclosure.agentStatus(try supervisor.state(), config: config), root: "/work", json: json), exit: 0)
            case .failures(let cluster, let json):
                return BrokerReply(stdout: try Views.failuresText(try supervisor.state(), cluster: cluster, json: json), exit: 0)
            case .proposeCluster(let cluster, let label, let mergeWith):
                try supervisor.proposeCluster(cluster, label: label, mergeWith: mergeWith, actor: "coding agent")
                return BrokerReply(stdout: "recorded as your proposal about \(cluster); shown beside it in workspace/failures.md, counted nowhere\n", exit: 0)
            case .benchmark(let ids):
                let (snap, notice) = try candidate()
                // The same bytes benchmarked again show nothing new: a repeat, not progress.
                let repeated = try supervisor.state().trainRuns.contains { $0.agentSHA256 == snap.sha256 }
                let outcomes = try supervisor.runBenchmark(taskIDs: ids, actor: "coding agent", agent: snap)
                tally.benchmarkSpend = (try? supervisor.state().openRunBenchmarkCost.total) ?? tally.benchmarkSpend
                if !repeated { tally.progressThisStart = true }
                return BrokerReply(stdout: AgentText.benchmark(outcomes, unverified: config.unverifiedRewards), stderr: notice, exit: 0)
            case .gate(let message):
                return try gate(message: message)
            case .candidate(let message):
                let (snap, notice) = try candidate()
                let c = try supervisor.submitCandidate(agent: snap, message: message, actor: "coding agent")
                return BrokerReply(stdout: AgentText.candidate(c, of: config.loop.candidates), stderr: notice, exit: 0)
            case .needsHuman(let text):
                try supervisor.needsHuman(text, actor: "coding agent")
                return BrokerReply(stdout: "recorded for the operator (status --operator, the report); the run goes on\n", exit: 0)
            }
        } catch {
            let code = Exit.code(for: error)
            // Fail closed: a write of the supervisor's that failed (a full disk, an I/O
            // error, the ledger) stops the run; nothing goes on that could not be kept.
            guard code == Exit.ioError else { return BrokerReply(stderr: "autoharness: \(error)\n", exit: code) }
            stop.writeFailed("`autoharness \(shown)` for the coding agent", "\(error)", afterReply: true)
            return BrokerReply(stderr: "autoharness: \(error)\nautoharness: the run is stopping\n", exit: code)
        }
    }
}
