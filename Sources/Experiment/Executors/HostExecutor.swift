import Benchmark
import Foundation
import Sandbox
import SandboxPolicy

/// The host's own sandboxes, through the benchmark's adapter. After a run that keeps nothing,
/// what its sandboxes left in kernel state shared with later ones is removed or scrambled
/// before anything untrusted runs again: their pages in the page cache, the position of the
/// inode-number counters, the sandbox parts pool's timed parts.
struct HostExecutor: TaskExecutor {
    let environment: ExecutorEnvironment

    func run(_ run: TaskRun) throws -> [TaskOutcome] {
        let env = environment
        let keepsNothing = run.split.keepsNothing
        try FileManager.default.createDirectory(atPath: env.config.scratch, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        var context = AdapterRunContext(policyLoader: env.policyLoader, agentDirectory: run.agent, scratchRoot: env.config.scratch,
                                        audit: run.audit.agent, heldOut: keepsNothing, concurrency: env.config.maxConcurrency,
                                        traceDirectory: run.traces)
        context.oracle = run.oracle
        context.operatorDiagnostics = run.operatorDiagnostics
        context.toolAudit = run.audit.tool
        context.progress = { [progress = env.progress] done, total, last in progress?(done, total, keepsNothing ? nil : last) }
        context.log = { [log = env.log] line in log?(line) }
        // Before anything untrusted runs again (a train task, the thawed coding agent),
        // whatever the held-out sandboxes could have brought into the page cache leaves it.
        let cache = keepsNothing ? PageCacheEviction(journal: env.layout.heldOutJournal, untrustedMemory: untrustedMemoryBound) : nil
        context.pageCache = cache
        let outcomes: [TaskOutcome]
        do {
            if run.oneTaskPerRun && !env.adapter.gatesEachTask && run.ids.count > 1 {
                env.log?("\(env.adapter.name): each of \(run.ids.count) task(s) in a run of its own, so the inference gate counts the vendor's failures per task (gate.infra_retries)"
                         + (env.adapter.runsBesideItself ? "" : ", one at a time (its runs share a server)"))
                outcomes = try OneTaskRuns.run(env.adapter, run.ids, context, concurrency: env.config.maxConcurrency)
            } else {
                outcomes = try env.adapter.run(run.ids, context)
            }
        } catch {
            if let cache { _ = settle(cache) }
            throw error
        }
        if let cache, let failure = settle(cache) {
            throw ExperimentError(.io, "after the held-out sandboxes: \(failure); their results were not recorded")
        }
        // A write of the supervisor's own failed (a trace, a scratch directory): the tasks it
        // cut short are not the agent's failures, so nothing of this run is scored.
        if let failure = context.writeFailures.failure {
            throw ExperimentError(.io, "\(failure); the run was stopped and its results were not recorded")
        }
        return outcomes
    }

    /// The most memory this experiment's untrusted processes can hold at once: `max_concurrency`
    /// sandboxes of each kind its tasks run in, at their policies' `limits.memory`, and the
    /// coding agent's; nil if one of those policies sets no memory limit.
    var untrustedMemoryBound: UInt64? {
        let c = environment.config
        let names = c.runsOwnTasks ? [c.taskPolicy, c.verifierPolicy] : [c.runner.policy, c.runner.scorerPolicy]
        return ExecutionBounds.memory(each: names, times: c.maxConcurrency, once: [c.codingAgentPolicy], loader: environment.policyLoader)
    }

    /// What the held-out sandboxes on the host leave in kernel state shared with later ones,
    /// removed or scrambled once the last is gone. Returns what failed (nothing untrusted may
    /// run until it is fixed).
    func settle(_ cache: PageCacheEviction) -> String? {
        HeldOutSettle.settle(cache, onHost: true, log: environment.log, prefix: "held-out sandboxes done; ")
    }
}

/// Bounds a run's executor sets from the tasks' own limits and the policies'.
enum ExecutionBounds {
    /// `times` sandboxes under each of the policies `each` and one under each of `once`, at
    /// their `limits.memory`; nil if one of them sets no memory limit (or does not load).
    static func memory(each: [String], times: Int, once: [String] = [], loader: PolicyLoader) -> UInt64? {
        var total: UInt64 = 0
        for (name, count) in each.map({ ($0, max(1, times)) }) + once.map({ ($0, 1) }) {
            guard let m = (try? loader.load(name, requireAllPlaceholders: false))?.limits.memory else { return nil }
            total += m * UInt64(count)
        }
        return total
    }

    /// From each task's own limits as the runner applies them (task.toml's, else `fallback`)
    /// plus a minute of setup each: any schedule of them, `concurrency` at a time, fits in the
    /// sum spread over the workers plus the longest one. An id with no task counts twice the
    /// fallback. (A worker node bounds its held-out VM with it too.)
    static func heldOut(_ ids: [String], tasks: [BenchmarkTask], fallback: Double, concurrency: Int) -> Double {
        let byID = Dictionary(tasks.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        let each = ids.map { id -> Double in
            guard let t = byID[id] else { return fallback * 2 + 60 }
            return (t.agentTimeoutDeclared ? t.agentTimeout : fallback) + t.verifierTimeout + 60
        }
        return (each.reduce(0, +) / Double(max(1, concurrency))) + (each.max() ?? 0)
    }
}
