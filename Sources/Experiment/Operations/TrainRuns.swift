import Benchmark
import Execution
import ExperimentModel
import Foundation
import Ledger
import SupervisorIO

// `autoharness benchmark`: train runs, rolling batches, a cluster's proposal.

struct TrainOperation {
    let experiment: ExperimentContext

    /// Runs train tasks (all, or `taskIDs`), keeping their traces. Any id that is not a train
    /// task — unknown or held out, deliberately indistinguishable — refuses the whole request
    /// and is recorded as a violation.
    /// With `triage.after: train_run` the triage command reads the records after it.
    func runBenchmark(taskIDs: [String]?, oracle: Bool = false, actor: String = "cli", agent: AgentSnapshot? = nil) throws -> [TaskOutcome] {
        let outcomes = try runTrain(taskIDs: taskIDs, oracle: oracle, actor: actor, agent: agent, state: try settleBatches())
        if !oracle { TriageOperation(experiment: experiment).triageAfter(.trainRun, trigger: "train run") }
        return outcomes
    }

    /// `runBenchmark` once the batches are settled.
    func runTrain(taskIDs: [String]?, oracle: Bool, actor: String, agent: AgentSnapshot?, state s: ExperimentState) throws -> [TaskOutcome] {
        guard let split = s.split else { throw ExperimentError(.state, "experiment not prepared yet: run `autoharness prepare` first") }
        // With rolling batches, a train task of a batch not revealed yet is as unknown here
        // as a held-out one (the refusal below reads the same for all three).
        let train = Set(s.visibleTrain)
        // Another name of a task (Harbor's [task] name, org/name@ref) is its id; a name that
        // is no task's stays as given. Refusals repeat the names as given: naming the task
        // an alias maps to would tell a held-out task from an unknown name.
        let given = taskIDs
        let taskIDs = taskIDs.map { $0.map { experiment.adapter.canonicalTaskID($0) ?? $0 } }
        if let ids = taskIDs, let given {
            let refused = zip(given, ids).filter { !train.contains($0.1) }.map(\.0)
            if !refused.isEmpty {
                _ = try experiment.ledger.append(.violation, ViolationRecord(
                    actor: actor, kind: "refused_task_ids",
                    detail: "benchmark requested \(refused.count) id\(refused.count == 1 ? "" : "s") outside the train split: \(refused.prefix(20).joined(separator: ", "))\(refused.count > 20 ? ", …" : "")",
                    count: 1))
                throw ExperimentError(.refused, "not \(s.batches.isEmpty ? "train tasks (unknown or held out)" : "revealed train tasks (unknown, held out, or in a batch not revealed yet)"): \(printable(refused.prefix(20).joined(separator: ", "), limit: 2000))\(refused.count > 20 ? " and \(refused.count - 20) more" : ""); nothing was run; this request was recorded")
            }
        }
        let tasks = (taskIDs.map(Set.init) ?? train).sorted()
        let snap = try agent ?? experiment.snapshotAgent()
        let firstRun = s.latestTrainRun == nil
        let audit = RunAudit()
        var recorded = false
        do {
            try TraceFiles.makeDirectories(experiment.layout.latestTraces)
            for t in tasks { try TraceFiles.remove(experiment.layout.latestTraces + "/" + TraceName.encode(t)) }
            let outcomes = try experiment.run(tasks, agent: snap.directory, audit: audit,
                                   split: .train(traces: { [layout = experiment.layout] in layout.latestTraces + "/" + TraceName.encode($0) }), oracle: oracle)
            if firstRun {
                try TraceFiles.makeDirectories(experiment.layout.baselineTraces)
                for t in tasks {
                    let dst = experiment.layout.baselineTraces + "/" + TraceName.encode(t)
                    try TraceFiles.remove(dst)
                    try TraceFiles.copy(experiment.layout.latestTraces + "/" + TraceName.encode(t), to: dst)
                }
            }
            var items: [(RecordKind, any Encodable)] = [(.trainRun, TrainRunRecord(
                timestamp: isoTimestamp(), agentSHA256: snap.sha256,
                results: Dictionary(uniqueKeysWithValues: outcomes.map { ($0.id, $0.reward) }),
                statuses: Dictionary(uniqueKeysWithValues: outcomes.map { ($0.id, $0.status.rawValue) }),
                costUSD: TaskOutcome.cost(outcomes), agentCode: TaskOutcome.agentCode(outcomes)))]
            if let evidence = FailureEvidenceRecord.observed(outcomes, train: train, source: "train run", agentSHA256: snap.sha256,
                                                             batch: s.batches.last?.revealed.batch) {
                items.append((.failureEvidence, evidence))
            }
            items += experiment.violations(audit, during: "train run")
            _ = try experiment.ledger.appendAll(items)
            recorded = true
            try experiment.regenerateViews()
            return outcomes
        } catch {
            // A train run whose traces could not be kept is not recorded; what its sandboxes
            // did is (if the ledger still takes it).
            if !recorded { experiment.recordViolations(experiment.violations(audit, during: "train run")) }
            throw error
        }
    }

    /// Brings rolling batches to where the ledger says they should be, before a train run or
    /// a gate: reveals the first batch (prepare's, or of an experiment whose config turned
    /// batches on before anything ran), and runs a revealed batch whose tasks have not run
    /// yet (a supervisor stopped before it could). Returns the state after.
    func settleBatches() throws -> ExperimentState {
        var s = try experiment.state()
        if let first = RollingBatches.first(s, config: experiment.config) {
            // Turned on after train runs or gates, batches would hide what the coding agent
            // already saw and strand suite tasks outside every batch.
            guard s.trainRuns.isEmpty && s.gatesStarted == 0 else {
                throw ExperimentError(.state, "\(experiment.layout.config): loop.batch_size \(experiment.config.loop.batchSize) was set after this experiment's train split was "
                    + "visible (\(s.trainRuns.count) train run(s), \(s.gatesStarted) gate(s)); rolling batches must be set before prepare. "
                    + "Set loop.batch_size: 0, or start a new experiment; nothing was run")
            }
            _ = try experiment.ledger.append(.batchRevealed, first)
            experiment.log?("rolling batches begin: batch 1 reveals \(first.tasks.count) of \(s.split?.train.count ?? 0) train task(s) (loop.batch_size \(experiment.config.loop.batchSize))")
            try experiment.regenerateViews()
            s = try experiment.state()
        }
        if let batch = s.batches.last, batch.trainRuns == 0, !batch.revealed.tasks.isEmpty {
            try GateOperation(experiment: experiment).runRevealedBatch()
            s = try experiment.state()
        }
        return s
    }

    /// Proposals recorded at most, over the experiment: each is a ledger row.
    static let maxClusterProposals = 1000

    /// Records `actor`'s proposal about a failure cluster (a label, or that it shares its root
    /// cause with `mergeWith`): shown beside the cluster, counted nowhere.
    func proposeCluster(_ cluster: String, label: String?, mergeWith: String?, actor: String) throws {
        let s = try experiment.state()
        let book = FailureBook(s)
        guard book.cluster(cluster) != nil else {
            throw ExperimentError(.usage, "no failure cluster \(printable(cluster)): `autoharness failures` lists them")
        }
        if let m = mergeWith {
            guard m != cluster, book.cluster(m) != nil else {
                throw ExperimentError(.usage, "--merge-with \(printable(m)): not another existing cluster")
            }
        }
        guard s.clusterProposals.count < Self.maxClusterProposals else {
            throw ExperimentError(.refused, "\(Self.maxClusterProposals) proposals are already recorded; no more are kept")
        }
        _ = try experiment.ledger.append(.clusterProposal, ClusterProposalRecord(actor: actor, cluster: cluster,
                                                                      label: label.map { printable($0, limit: 200) }, mergeWith: mergeWith))
        try experiment.regenerateViews()
    }

    /// The operator's review of the suite (`autoharness suite approve|retire`): `approve` takes
    /// tasks an accepted gate promoted under `loop.review: operator` into the suite; `retire`
    /// takes tasks out of the suite (or refuses a pending promotion) for good. `tasks` empty
    /// with `approve` means every pending one. Returns the tasks reviewed.
    @discardableResult
    func reviewSuite(_ action: String, tasks: [String], reason: String, actor: String) throws -> [String] {
        let s = try experiment.state()
        guard s.prepared else { throw ExperimentError(.state, "experiment not prepared yet: run `autoharness prepare` first") }
        guard let why = noteLine(reason) else { throw ExperimentError(.usage, "--reason: say why (a non-empty text)") }
        let chosen: [String]
        switch action {
        case "approve":
            chosen = tasks.isEmpty ? s.pendingSuite : tasks
            if let other = chosen.first(where: { !s.pendingSuite.contains($0) }) {
                throw ExperimentError(.usage, "\(printable(other)) is not waiting for approval (pending: \(s.pendingSuite.isEmpty ? "none" : s.pendingSuite.joined(separator: ", ")))")
            }
        case "retire":
            chosen = tasks
            if let other = chosen.first(where: { !s.suite.contains($0) && !s.pendingSuite.contains($0) }) {
                throw ExperimentError(.usage, "\(printable(other)) is neither in the suite nor waiting for approval")
            }
        default: throw ExperimentError(.usage, "suite: approve or retire, not \(printable(action))")
        }
        guard !chosen.isEmpty else { throw ExperimentError(.usage, "no task to \(action): name one or more") }
        _ = try experiment.ledger.appendAll(chosen.map { (.suiteReview, SuiteReviewRecord(actor: actor, action: action, task: $0, reason: why) as any Encodable) })
        try experiment.regenerateViews()
        return chosen
    }

    static let maxNeedsHuman = 1000

    /// Records that `actor` (the coding agent) needs something from a human: shown to the
    /// operator in `status --operator` and the report; nothing acts on it.
    func needsHuman(_ text: String, actor: String) throws {
        guard let kept = noteLine(text) else {
            throw ExperimentError(.usage, "needs-human: say what you need from a human (a non-empty text)")
        }
        guard try experiment.state().needsHuman.count < Self.maxNeedsHuman else {
            throw ExperimentError(.refused, "\(Self.maxNeedsHuman) notes for a human are already recorded; no more are kept")
        }
        _ = try experiment.ledger.append(.needsHuman, NeedsHumanRecord(actor: actor, text: kept))
    }
}
