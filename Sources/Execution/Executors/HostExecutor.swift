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
        let here = LocalExecution(adapter: env.adapter, policyLoader: env.policyLoader, scratchRoot: env.config.scratch,
                                  concurrency: env.config.maxConcurrency, log: { [log = env.log] line in log?(line) },
                                  evictionJournal: env.layout.heldOutJournal,
                                  // Only a held-out run's eviction uses it (it reads every task's declared memory).
                                  untrustedMemory: run.split.keepsNothing ? untrustedMemoryBound : nil)
        let keepsNothing = run.split.keepsNothing
        return try here.run(run.ids, agentDirectory: run.agent, split: run.split, audit: (run.audit.agent, run.audit.tool),
                            oneTaskPerRun: run.oneTaskPerRun) { context in
            context.oracle = run.oracle
            context.operatorDiagnostics = run.operatorDiagnostics
            context.progress = { [progress = env.progress] done, total, last in progress?(done, total, keepsNothing ? nil : last) }
        }
    }

    /// The most memory this experiment's untrusted processes can hold at once: `max_concurrency`
    /// sandboxes of each kind its tasks run in, at their policies' `limits.memory` or the
    /// largest a task declares, and the coding agent's; nil if one of those policies sets no
    /// memory limit.
    var untrustedMemoryBound: UInt64? {
        let c = environment.config
        let names = c.runsOwnTasks ? [c.taskPolicy, c.verifierPolicy] : [c.runner.policy, c.runner.scorerPolicy]
        let adapter = environment.adapter
        let tasks = c.runsOwnTasks ? adapter.taskIDs.compactMap(adapter.benchmarkTask) : []
        return ExecutionBounds.memory(each: names, times: c.maxConcurrency, once: [c.codingAgentPolicy], loader: environment.policyLoader, tasks: tasks)
    }
}
