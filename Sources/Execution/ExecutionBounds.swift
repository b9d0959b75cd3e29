import Benchmark
import SandboxPolicy

/// Bounds a run's executor sets from the tasks' own limits and the policies'.
enum ExecutionBounds {
    /// `times` sandboxes under each of the policies `each` and one under each of `once`, at
    /// their `limits.memory`; nil if one of them sets no memory limit (or does not load). A
    /// task's declared memory replaces the task and verifier policies' (`TaskResources`), so
    /// each of `each` counts at least `tasks`' largest: the held-out eviction's choice between
    /// reclaiming and walking rests on this bound, and too low a bound would let later runs
    /// push the host into reclaim across every cgroup.
    static func memory(each: [String], times: Int, once: [String] = [], loader: PolicyLoader, tasks: [BenchmarkTask] = []) -> UInt64? {
        let declared = tasks.compactMap(\.memory).max() ?? 0
        var total: UInt64 = 0
        for (name, count, isTask) in each.map({ ($0, max(1, times), true) }) + once.map({ ($0, 1, false) }) {
            guard let m = (try? loader.load(name, requireAllPlaceholders: false))?.limits.memory else { return nil }
            total += (isTask ? max(m, declared) : m) * UInt64(count)
        }
        return total
    }

    /// From each task's own limits as the runner applies them (task.toml's, else `fallback`)
    /// plus a minute of setup each: any schedule of them, `concurrency` at a time, fits in the
    /// sum spread over the workers plus the longest one. An id with no task counts twice the
    /// fallback. (A worker node bounds its held-out VM with it too.)
    static func heldOut(_ ids: [String], tasks: [BenchmarkTask], fallback: Double, concurrency: Int) -> Double {
        let byID = Dictionary(tasks.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        let each = ids.map { id -> Double in byID[id].map { limit($0, fallback: fallback) + 60 } ?? fallback * 2 + 60 }
        return (each.reduce(0, +) / Double(max(1, concurrency))) + (each.max() ?? 0)
    }

    /// The longest `task` may run as the runner applies its limits: its agent's (task.toml's,
    /// else `fallback`) and its verifier's.
    static func limit(_ task: BenchmarkTask, fallback: Double) -> Double {
        (task.agentTimeoutDeclared ? task.agentTimeout : fallback) + task.verifierTimeout
    }

    /// `tasks` longest first by their limits, in their own order among equals: dealt to
    /// nodes as they free up, a long task then never starts after the short ones are done.
    static func longestFirst(_ tasks: [BenchmarkTask], fallback: Double) -> [BenchmarkTask] {
        tasks.enumerated().sorted { a, b in
            let (x, y) = (limit(a.element, fallback: fallback), limit(b.element, fallback: fallback))
            return x != y ? x > y : a.offset < b.offset
        }.map(\.element)
    }
}
