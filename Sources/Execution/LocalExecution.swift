import Benchmark
import ExperimentModel
import Foundation
import Sandbox
import SandboxPolicy

/// Tasks run on this kernel through the benchmark's adapter: the one path the supervisor's
/// host (`HostExecutor`), a worker node (`RemoteWorker`) and a held-out VM's guest
/// (`HeldOutGuest`) take. It builds the run's context from its split (a held-out or baseline
/// run has no trace function to give), evicts what held-out sandboxes left in the page cache
/// and moves the shared counters before anything untrusted runs again (`HeldOutSettle`),
/// refuses a run whose own writes failed, and answers one outcome per requested id.
package struct LocalExecution {
    var adapter: any BenchmarkAdapter
    var policyLoader: PolicyLoader
    var scratchRoot: String
    var concurrency: Int
    var log: @Sendable (String) -> Void
    /// Where held-out sandboxes' pages are journalled until evicted; nil where the kernel is
    /// discarded after the run (a VM's guest: its host evicts what qemu read).
    var evictionJournal: String?
    /// The most memory later untrusted runs can hold at once (`PageCacheEviction`).
    var untrustedMemory: UInt64? = nil
    /// What does not happen to a failed run's results, in its error: `recorded` by the
    /// supervisor, `sent` by a node or a guest.
    var withheld = "recorded"

    /// Runs `ids` with `agentDirectory`'s agent.py; `adjust` sets what only one place sets
    /// (the operator's progress, `--oracle`, a guest's egress link).
    func run(_ ids: [String], agentDirectory: String, split: SplitClass, audit: (agent: AuditLog, tool: AuditLog),
             oneTaskPerRun: Bool = false, adjust: (inout AdapterRunContext) -> Void = { _ in }) throws -> [TaskOutcome] {
        try FileManager.default.createDirectory(atPath: scratchRoot, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var context = AdapterRunContext(policyLoader: policyLoader, agentDirectory: agentDirectory, scratchRoot: scratchRoot,
                                        audit: audit.agent, heldOut: split.keepsNothing, concurrency: concurrency,
                                        traceDirectory: split.traces)
        context.toolAudit = audit.tool
        context.log = log
        adjust(&context)
        let cache = split.keepsNothing ? evictionJournal.map { PageCacheEviction(journal: $0, untrustedMemory: untrustedMemory) } : nil
        context.pageCache = cache
        let outcomes: [TaskOutcome]
        do {
            if oneTaskPerRun && !adapter.gatesEachTask && ids.count > 1 {
                log("\(adapter.name): each of \(ids.count) task(s) in a run of its own, so the inference gate counts the vendor's failures per task (gate.infra_retries)"
                    + (adapter.runsBesideItself ? "" : ", one at a time (its runs share a server)"))
                outcomes = try OneTaskRuns.run(adapter, ids, context, concurrency: concurrency)
            } else {
                outcomes = try adapter.run(ids, context)
            }
        } catch {
            if let cache { _ = settle(cache) }
            throw error
        }
        if let cache, let failure = settle(cache) {
            throw ExperimentError(.io, "after the held-out sandboxes: \(failure); their results were not \(withheld)")
        }
        // A write of the supervisor's own failed (a trace, a scratch directory): the tasks it
        // cut short are not the agent's failures, so nothing of this run is scored.
        if let failure = context.writeFailures.failure {
            throw ExperimentError(.io, "\(failure); the run was stopped and its results were not \(withheld)")
        }
        return Self.complete(ids, outcomes, split: split, adapter: adapter.name)
    }

    /// What the held-out sandboxes left in kernel state shared with later ones, removed or
    /// scrambled once the last is gone; what failed (nothing untrusted may run until fixed).
    func settle(_ cache: PageCacheEviction) -> String? {
        HeldOutSettle.settle(cache, onHost: true, log: log, prefix: "held-out sandboxes done; ")
    }

    /// One outcome per requested id, in order, whatever ran them: a task with no outcome
    /// scores 0, and a run that keeps nothing carries no failing checks (test data). The one
    /// place a missing task becomes 0: the supervisor, a node and a guest all answer with it.
    package static func complete(_ ids: [String], _ outcomes: [TaskOutcome], split: SplitClass, adapter: String) -> [TaskOutcome] {
        let byID = Dictionary(outcomes.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        return ids.map { id in
            var o = byID[id] ?? TaskOutcome(id: id, reward: 0, status: .missingResult, detail: "no outcome from the \(adapter) adapter")
            if split.keepsNothing { o.failures = nil }
            return o
        }
    }
}
