// Running many tasks at once.
//
// `SandboxRunner.run` blocks its thread for the whole life of a sandbox (minutes). Run on
// Swift's cooperative pool, a few of those would starve every other task in the process, so
// each concurrent task gets a dedicated pthread. The caller's thread only waits and calls
// `progress`, so `progress` and `traceDirectory` need not be Sendable and are never called
// concurrently.

import Glibc

extension TaskRunner {
    /// Runs `tasks` with at most `concurrency` at once, each on a dedicated thread.
    /// - Parameters:
    ///   - concurrency: the most tasks in flight (values below 1 mean 1).
    ///   - traceDirectory: the trace directory for a task (train split) or nil (test split);
    ///     asked once per task, on the calling thread, before anything runs.
    ///   - progress: called on the calling thread after each task finishes, one call at a
    ///     time, with the number done so far, the total, and the outcome just finished.
    /// - Returns: one outcome per task, in the order of `tasks`.
    public func runAll(
        _ tasks: [BenchmarkTask], concurrency: Int, traceDirectory: (BenchmarkTask) -> String?,
        progress: (_ done: Int, _ total: Int, _ last: TaskOutcome) -> Void
    ) -> [TaskOutcome] {
        guard !tasks.isEmpty else { return [] }
        let traces = tasks.map(traceDirectory)
        let board = Board<TaskOutcome>(count: tasks.count)
        let workers = min(max(1, concurrency), tasks.count)
        var threads: [pthread_t] = []
        let job = Job { [self] in
            board.waitForStart()
            while let i = board.claim() {
                // After a failed write of the supervisor's own, nothing more starts (the
                // operation fails; these outcomes are never recorded).
                if let failure = configuration.writeFailures?.failure {
                    board.complete(i, TaskOutcome(id: tasks[i].id, reward: 0, status: .setupFailed, detail: "not run: \(failure)"))
                    continue
                }
                board.complete(i, run(tasks[i], traceDirectory: traces[i]))
            }
        }
        for _ in 0..<workers {
            if let thread = Job.start(job) { threads.append(thread) }
        }
        // Every worker exists before the first sandbox is forked, so these forks never land
        // inside this function's own pthread_create: a child forked then inherits a
        // half-made thread in glibc's list (harmless since the launcher stopped using
        // glibc's setxid wrappers after fork, but not a state worth creating).
        board.start()
        if threads.isEmpty {
            // Not even one thread: run everything here rather than not at all.
            job.body()
        }

        var results = [TaskOutcome?](repeating: nil, count: tasks.count)
        var done = 0
        while done < tasks.count {
            for (i, outcome) in board.waitForCompleted() {
                results[i] = outcome
                done += 1
                progress(done, tasks.count, outcome)
            }
        }
        for thread in threads { pthread_join(thread, nil) }
        return results.map { $0! }
    }
}

/// Runs of an adapter one task each: for a held-out phase whose vendor failures must be told
/// apart by task (`gate.infra_retries`), each tool sandbox then has an inference gate of its
/// own (`TaskOutcome.vendorFailures`). Each run is on a dedicated thread, `concurrency` at once,
/// with a copy of `context` whose progress callback is this function's (called on the calling
/// thread, with a count and no outcome: runs that keep nothing name no task). An adapter whose
/// runs cannot run beside each other (`runsBesideItself`) gets one at a time.
public enum OneTaskRuns {
    public static func run(_ adapter: any BenchmarkAdapter, _ ids: [String], _ context: AdapterRunContext,
                           concurrency: Int) throws(BenchmarkError) -> [TaskOutcome] {
        guard !ids.isEmpty else { return [] }
        var each = context
        each.progress = { _, _, _ in }
        let shared = Shared(adapter: adapter, context: each, ids: ids)
        let board = Board<Result<[TaskOutcome], BenchmarkError>>(count: ids.count)
        var threads: [pthread_t] = []
        let job = Job {
            board.waitForStart()
            while let i = board.claim() {
                if let failure = shared.context.writeFailures.failure {
                    board.complete(i, .failure(BenchmarkError(.io, failure)))
                    continue
                }
                do throws(BenchmarkError) {
                    board.complete(i, .success(try shared.adapter.run([shared.ids[i]], shared.context)))
                } catch {
                    board.complete(i, .failure(error))
                }
            }
        }
        for _ in 0..<min(max(1, adapter.runsBesideItself ? concurrency : 1), ids.count) {
            if let thread = Job.start(job) { threads.append(thread) }
        }
        board.start()
        if threads.isEmpty { job.body() }
        var results = [Result<[TaskOutcome], BenchmarkError>?](repeating: nil, count: ids.count)
        var done = 0
        while done < ids.count {
            for (i, r) in board.waitForCompleted() {
                results[i] = r
                done += 1
                context.progress(done, ids.count, nil)
            }
        }
        for thread in threads { pthread_join(thread, nil) }
        var outcomes: [TaskOutcome] = []
        for r in results {
            switch r! {
            case .success(let o): outcomes += o
            case .failure(let e): throw e
            }
        }
        return outcomes
    }

    /// What every worker reads; never written after the workers start.
    private final class Shared: @unchecked Sendable {
        let adapter: any BenchmarkAdapter
        let context: AdapterRunContext
        let ids: [String]
        init(adapter: any BenchmarkAdapter, context: AdapterRunContext, ids: [String]) {
            self.adapter = adapter
            self.context = context
            self.ids = ids
        }
    }
}

/// Shared state of one `runAll`: the next task to claim and finished outcomes not yet
/// reported. A mutex and a condition variable; nothing here blocks while holding the lock
/// except the wait itself.
private final class Board<Value>: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var condition = pthread_cond_t()
    private let count: Int
    private var next = 0
    private var finished: [(Int, Value)] = []

    init(count: Int) {
        self.count = count
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&condition, nil)
    }

    deinit {
        pthread_cond_destroy(&condition)
        pthread_mutex_destroy(&mutex)
    }

    private var started = false

    /// Workers wait here until `start()`.
    func waitForStart() {
        pthread_mutex_lock(&mutex)
        while !started { pthread_cond_wait(&condition, &mutex) }
        pthread_mutex_unlock(&mutex)
    }

    func start() {
        pthread_mutex_lock(&mutex)
        started = true
        pthread_cond_broadcast(&condition)
        pthread_mutex_unlock(&mutex)
    }

    func claim() -> Int? {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        guard next < count else { return nil }
        next += 1
        return next - 1
    }

    func complete(_ index: Int, _ outcome: Value) {
        pthread_mutex_lock(&mutex)
        finished.append((index, outcome))
        pthread_cond_broadcast(&condition)
        pthread_mutex_unlock(&mutex)
    }

    /// Blocks until at least one outcome is ready and returns all that are.
    func waitForCompleted() -> [(Int, Value)] {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        while finished.isEmpty { pthread_cond_wait(&condition, &mutex) }
        defer { finished.removeAll() }
        return finished
    }
}

/// A closure run on its own pthread.
final class Job: Sendable {
    let body: @Sendable () -> Void
    init(_ body: @escaping @Sendable () -> Void) { self.body = body }

    /// Starts `job` on a new joinable thread; nil if the thread could not be created.
    static func start(_ job: Job) -> pthread_t? {
        let context = Unmanaged.passRetained(job).toOpaque()
        var thread = pthread_t()
        let rc = pthread_create(&thread, nil, { raw in
            let job = Unmanaged<Job>.fromOpaque(raw!).takeRetainedValue()
            job.body()
            return nil
        }, context)
        guard rc == 0 else {
            Unmanaged<Job>.fromOpaque(context).release()
            return nil
        }
        return thread
    }
}
