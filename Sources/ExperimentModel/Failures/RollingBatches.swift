import Benchmark

// Rolling batches (`loop.batch_size`): NeoSigma ran its loop on the train split revealed ten
// tasks at a time, as "simulated production traffic" in which each batch shows new failures,
// and grew the regression suite at the end of each batch from the failures it resolved. The
// rules are pure functions of the ledger's state, here; the supervisor runs what they name and
// records what they decide.
//
//   reveal   batch 1 when batches begin (prepare, or the first command that finds them on);
//            batch n+1 when batch n ends. Its tasks are drawn, seeded by the split's seed and
//            the batch number, from the train tasks not revealed yet; once all are, a batch
//            reveals none and only cycles the suite.
//   end      the first accepted gate of the batch, or its `loop.batch_iterations`-th gate
//            attempt (any outcome, interrupted included: each looked at the held-out split).
//   promote  only at an accepted gate (a batch end): the existing rule (failing train tasks
//            outside the suite that now pass) applied per cluster — a task enters the suite
//            when every cluster it ever failed in is resolved, so a cluster's tasks enter
//            together, and a task whose cluster still fails elsewhere waits for a later batch.

public enum RollingBatches {
    public enum EndReason: String, Sendable {
        case accepted
        case iterations
    }

    /// The tasks batch `number` reveals: those of `train` not in `revealed`, sorted, shuffled
    /// with SplitMix64 seeded by `seed` and `number` (Fisher-Yates, as the split is made), the
    /// first `size`. The same inputs give the same batch on every machine.
    public static func draw(train: [String], revealed: Set<String>, number: Int, size: Int, seed: UInt64) -> [String] {
        var ids = Array(Set(train).subtracting(revealed)).sorted()
        var rng = SplitMix64(seed: seed ^ (UInt64(truncatingIfNeeded: number) &* 0x9E37_79B9_7F4A_7C15))
        for i in stride(from: ids.count - 1, to: 0, by: -1) {
            let j = Int(rng.next() % UInt64(i + 1))
            ids.swapAt(i, j)
        }
        return Array(ids.prefix(max(0, size)))
    }

    /// The first batch's row, when batches are configured and have not begun.
    package static func first(_ s: ExperimentState, config: ExperimentConfig) -> BatchRevealedRecord? {
        guard s.batches.isEmpty, let split = s.split else { return nil }
        return first(split, config: config)
    }

    package static func first(_ split: SplitRecord, config: ExperimentConfig) -> BatchRevealedRecord? {
        guard config.loop.batchSize > 0 else { return nil }
        return BatchRevealedRecord(batch: 1, tasks: draw(train: split.train, revealed: [], number: 1, size: config.loop.batchSize, seed: split.seed),
                                   iterations: config.loop.batchIterations)
    }

    /// Whether the gate attempt `attempt` (accepted or not) ends the current batch.
    static func ends(_ batch: ExperimentState.Batch, accepted: Bool) -> EndReason? {
        if accepted { return .accepted }
        return batch.attempts.count + 1 >= batch.revealed.iterations ? .iterations : nil
    }

    /// The batch after `batch`, drawn from what is still hidden with `loop.batch_size` as it
    /// is now (set to 0 once batches began: everything left, at once).
    static func next(after batch: Int, _ s: ExperimentState, config: ExperimentConfig) -> BatchRevealedRecord {
        let split = s.split!
        let revealed = Set(s.batches.flatMap(\.revealed.tasks))
        let size = config.loop.batchSize > 0 ? config.loop.batchSize : split.train.count
        return BatchRevealedRecord(batch: batch + 1, tasks: draw(train: split.train, revealed: revealed, number: batch + 1, size: size, seed: split.seed),
                                   iterations: config.loop.batchIterations)
    }

    /// An accepted gate's promotion candidates with batches on: every visible train task
    /// outside the suite (and not waiting for the operator or retired by them) that ever failed (it has a failure record, or a train run failed
    /// it), whatever its records' state now. Re-running all of them with the accepted
    /// agent.py (the suite runs anyway) leaves no record of an unresolved cluster behind on an
    /// earlier agent.py's run, so "resolved" below is exact; and a task that waited for its
    /// cluster is still a candidate when a train run of an accepted agent.py resolved it. A
    /// task never seen failing (revealed but not run, or passing from its first run) is not.
    static func candidates(_ s: ExperimentState, book: FailureBook) -> [String] {
        let suite = Set(s.suite + s.pendingSuite).union(s.retiredSuite)
        let failed = Set(book.records.map(\.task))
        return s.visibleTrain.filter { !suite.contains($0) && (failed.contains($0) || s.failedTrain.contains($0)) }
    }

    /// The rows that end `batch` with gate attempt `attempt` and reveal the next, when that
    /// attempt ends it; `after` is the failure book once the attempt's rows are in.
    package static func end(_ s: ExperimentState, attempt: Int, accepted: Bool, promoted: [String], resolved: [String], after: FailureBook,
                    config: ExperimentConfig) -> (ended: BatchEndedRecord, next: BatchRevealedRecord)? {
        guard let batch = s.currentBatch, let why = ends(batch, accepted: accepted) else { return nil }
        let open = after.clusters.filter(\.unresolved).count
        let ended = BatchEndedRecord(batch: batch.revealed.batch, endedBy: why.rawValue, attempts: batch.attempts + [attempt],
                                     promoted: promoted, clustersResolved: resolved, clustersOpen: open,
                                     clustersClosed: after.clusters.count - open, suiteSize: Set(s.suite + promoted).count,
                                     revealed: s.visibleTrain.count)
        var ending = s
        ending.batches[ending.batches.count - 1].ended = ended
        return (ended, next(after: batch.revealed.batch, ending, config: config))
    }

    /// What an accepted gate promotes at cluster level: the candidates that passed and whose
    /// every cluster is resolved in `after` (the book with this gate's evidence and
    /// acceptance), sorted; and the clusters it resolved (unresolved in `before`).
    static func promotions(candidates: [TaskOutcome], before: FailureBook, after: FailureBook) -> (promoted: [String], resolved: [String]) {
        let stillOpen = Set(after.clusters.filter(\.unresolved).map(\.id))
        var clustersOf: [String: Set<String>] = [:]
        for r in after.records { clustersOf[r.task, default: []].insert(r.cluster) }
        let promoted = candidates.filter { $0.passed && (clustersOf[$0.id] ?? []).isDisjoint(with: stillOpen) }.map(\.id).sorted()
        return (promoted, FailureBook.resolved(from: before, to: after))
    }

    /// `s` as it will be once a gate's rows are appended: its acceptance (if accepted) and its
    /// train evidence, in the ledger's order (attempt row first).
    package static func after(_ s: ExperimentState, accepted: (attempt: Int, agentSHA256: String)?, evidence: FailureEvidenceRecord?, time: String) -> ExperimentState {
        var s = s
        if let a = accepted { s.failureEvents.append(.accepted(attempt: a.attempt, agentSHA256: a.agentSHA256)) }
        if let e = evidence { s.failureEvents.append(.evidence(seq: s.head.seq + 1, time: time, e)) }
        return s
    }
}
