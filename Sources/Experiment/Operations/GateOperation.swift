import Benchmark
import Execution
import ExperimentModel
import Foundation
import Ledger
import SupervisorIO

// `autoharness gate`: the suite, the held-out split, promotion, the record and the commit.

/// What `gate()` decided: the attempt exactly as it is recorded in the ledger.
public typealias GateResult = GateAttemptRecord

struct GateOperation {
    let experiment: ExperimentContext

    /// Judges a snapshot of agent.py: (1) regression suite on train ≥ threshold; (2) test
    /// val_score beats the best accepted score by more than `gate.min_improvement` (a tie
    /// fails; every test task counts, errors as 0); (3) only if both pass, failing non-suite
    /// train tasks are re-run and newly passing ones promoted. On acceptance the supervisor
    /// commits the snapshot and records the iteration; a rejection is recorded too.
    /// `beforeHeldOut` runs just before the first held-out task and may refuse (throw): the
    /// run loop checks there that the coding agent is still frozen. `message` (`gate -m`):
    /// what the change is and why, kept as `noteLine` keeps it in the attempt's record, the
    /// commit's body and results.tsv.
    func gate(actor: String = "cli", agent: AgentSnapshot? = nil, message: String? = nil,
                     beforeHeldOut: () throws -> Void = {}) throws -> GateResult {
        let s = try TrainOperation(experiment: experiment).settleBatches()
        guard let split = s.split else { throw ExperimentError(.state, "experiment not prepared yet: run `autoharness prepare` first") }
        // Refused before the gate counts: the paired decision needs the best's side.
        // (Which iteration holds the best is not named: under decision or ladder disclosure
        // the caller may not know which scored highest.)
        if experiment.config.gate.accept == .paired && s.bestHeldOut?.trials == nil {
            throw ExperimentError(.state, "\(experiment.layout.config): gate.accept: paired compares per-task held-out results, and the best accepted agent.py has none recorded (it was gated or prepared before autoharness kept them): use gate.accept: margin, or prepare a new experiment")
        }
        // Numbered and counted by its start row, appended (and synced) before any task runs:
        // a gate whose outcome is lost still used its look at the held-out split.
        let attempt = s.lastAttempt + 1
        // The gate's clock: its answer is held to `config.replyTime` counted from here.
        let started = monotonicNow()
        let snap = try agent ?? experiment.snapshotAgent()
        // Where held-out tasks run, settled once per supervisor: a VM that cannot run here is
        // refused before the gate counts (nothing looked yet).
        try experiment.executors.settleHeldOut(experiment.executorEnvironment)
        // Its criteria are in that row: registered before any of its tasks runs (evidence bundles
        // sign them as such).
        _ = try experiment.ledger.append(.gateStarted, GateStartedRecord(attempt: attempt, agentSHA256: snap.sha256,
                                                              criteria: EvidenceOperation(experiment: experiment).gateCriteria(s, testTasks: split.test.count)))
        let audit = RunAudit()
        let heldOutAudit = RunAudit()
        var recorded = false
        var heldOutBegan = false
        do {
            let result = try judge(s, split: split, attempt: attempt, snap: snap, message: message.flatMap { noteLine($0) },
                                   audit: audit, heldOutAudit: heldOutAudit, started: started, recorded: &recorded,
                                   heldOutBegan: &heldOutBegan, beforeHeldOut: beforeHeldOut)
            // The batch this gate revealed runs now, with the agent.py the gate left standing; a
            // failure here (recorded gate, unrecorded run) is the caller's error, and the next
            // train run or gate runs the batch first (`settleBatches`).
            if result.revealedBatch != nil { try runRevealedBatch() }
            return result
        } catch {
            // The attempt counted from its start row; it ends as interrupted, as a crash would
            // (recovery does the same if even this cannot be written), and what its
            // sandboxes did is recorded. A failure once held-out tasks ran is held to the
            // reply grid too: when agent.py makes a held-out run fail is as much a channel.
            // Its rows are made before the hold, as a recorded attempt's are.
            if !recorded {
                let rows = Self.interruptedRows(s, attempt: attempt, agentSHA256: snap.sha256, config: experiment.config)
                    + experiment.violations(audit, during: "gate") + experiment.violations(heldOutAudit, during: "gate, held-out split", heldOut: true)
                let encoded = try? experiment.ledger.encode(rows)
                if heldOutBegan { _ = holdReply(since: started) }
                experiment.recordViolations(encoded)
            }
            throw error
        }
    }

    /// The gate's three steps and their record (`gate`); `recorded` is set once the ledger
    /// holds the attempt.

    private func judge(_ s: ExperimentState, split: SplitRecord, attempt: Int, snap: AgentSnapshot, message: String?, audit: RunAudit, heldOutAudit: RunAudit,
                       started: Double, recorded: inout Bool, heldOutBegan: inout Bool, beforeHeldOut: () throws -> Void) throws -> GateResult {
        var result = GateResult(attempt: attempt, agentSHA256: snap.sha256, accepted: false, reason: "", suitePassed: 0,
                                suiteTotal: s.suite.count, valScore: nil, bestBefore: s.best, promoted: [], commit: nil, iteration: nil)
        result.batch = s.currentBatch?.revealed.batch
        result.message = message

        // The rules are `GateRules.decide`, a pure function of what ran so far; this runs what
        // it asks for next, in order: the suite (train), the held-out split (traces never
        // persist, only rewards come back), the promotion candidates (train).
        var phases = GateRules.Phases(suite: try experiment.run(s.suite, agent: snap.directory, audit: audit, split: .trainUntraced))
        result.suitePassed = phases.suite.filter(\.passed).count
        var resolvedClusters: [String] = []
        decided: while true {
            switch GateRules.decide(s, config: experiment.config, attempt: attempt, agentSHA256: snap.sha256, phases: phases) {
            case .runHeldOut:
                try beforeHeldOut()
                heldOutBegan = true
                // `gate.trials`: the split k times over, all inside this one frozen phase.
                var outcomes: [TaskOutcome] = []
                var retries = InfraRetries()
                for _ in 0..<experiment.config.gate.trials {
                    outcomes += try experiment.runRetryingVendor(split.test, agent: snap.directory, audit: heldOutAudit, split: .heldOut, retries: &retries)
                }
                phases.heldOut = outcomes
                result.infraRetries = retries.recorded
                result.heldOutTrials = HeldOutTrials(rewards: HeldOutScore.perTask(split.test, outcomes), trials: experiment.config.gate.trials)
                if experiment.config.gate.accept == .paired { result.pairedTest = GateRules.paired(s, config: experiment.config, heldOut: outcomes) }
                result.heldOutCostUSD = TaskOutcome.cost(outcomes)
                result.valScore = HeldOutScore.val(split.test, outcomes)
                // `timeout_policy: infra`: the operator's view of the tasks that finished.
                if experiment.config.timeoutPolicy == .infra { (result.valScoreFinished, result.heldOutTimedOut) = HeldOutScore.finished(split.test, outcomes) }
            case .runPromotion(let candidates):
                phases.promotion = try experiment.run(candidates, agent: snap.directory, audit: audit, split: .trainUntraced)
            case .rejected(let outcome, let reason, let required):
                (result.outcome, result.reason, result.requiredImprovement) = (outcome, reason, required)
                break decided
            case .accepted(let promoted, let resolved):
                (result.accepted, result.outcome, result.reason, result.promoted) = (true, .accepted, "accepted", promoted)
                resolvedClusters = resolved
                break decided
            }
        }
        let promotionOutcomes = phases.promotion ?? []
        var lastResults = Dictionary(uniqueKeysWithValues: phases.suite.map { ($0.id, $0.reward) })
        let promotedSet = Set(result.promoted)
        for o in promotionOutcomes where promotedSet.contains(o.id) { lastResults[o.id] = o.reward }
        result.trainCostUSD = TaskOutcome.cost(phases.suite + promotionOutcomes)
        result.agentCode = TaskOutcome.agentCode(phases.suite + (phases.heldOut ?? []) + promotionOutcomes)
        // What the suite and promotion phases (train tasks only) showed failing; recorded after
        // the attempt's row, so an accepted gate's passing runs resolve records by this attempt.
        let evidence = GateRules.evidence(s, phases: phases, attempt: attempt, agentSHA256: snap.sha256)
        let after = s.currentBatch == nil ? nil : FailureBook(RollingBatches.after(s, accepted: result.accepted ? (attempt, snap.sha256) : nil,
                                                                                   evidence: evidence, time: isoTimestamp()))
        // The batch ends here when this attempt was accepted or was its last; the next is revealed.
        var batchRows: [(RecordKind, any Encodable)] = []
        if let after, let (ended, next) = RollingBatches.end(s, attempt: attempt, accepted: result.accepted, promoted: result.promoted,
                                                            resolved: resolvedClusters, after: after, config: experiment.config) {
            result.revealedBatch = next.batch
            result.revealedTasks = next.tasks.count
            batchRows = [(.batchEnded, ended), (.batchRevealed, next)]
        }

        // What the outcome holds that carries no time is made before the hold: work done after
        // it (hashing the running binaries, inspecting the host, counting audit events) would
        // move the reply past its instant by a duration the held-out run can steer.
        let violations = try experiment.ledger.encode(experiment.violations(audit, during: "gate")
            + experiment.violations(heldOutAudit, during: "gate, held-out split", heldOut: true))
        var gateEvidence = EvidenceOperation(experiment: experiment).evidenceRecord(attempt: attempt, train: phases.suite + promotionOutcomes,
                                                                                  heldOut: phases.heldOut.map { (split.test, $0) })
        // Nothing of the outcome (its rows' times, the commit's date, the reply) exists before
        // the configured instant.
        var items: [(RecordKind, any Encodable)] = []
        if heldOutBegan, let overrun = holdReply(since: started) { items.append((.note, NoteRecord(text: overrun))) }
        // The host was inspected once the gate's sandboxes had ended; its stamp is the reply's
        // (the inspection's own instant would say when the held-out tasks finished).
        gateEvidence.host?.measuredAt = isoTimestamp()
        if result.accepted, let val = result.valScore {
            let iteration = s.iterations.count
            let head = try experiment.ledger.head
            let shown = Views.commitScores(s, config: experiment.config, attempt: attempt, val: val)
            let commitMessage = """
                autoharness: iteration \(iteration), val_score \(shown.val) (best before \(shown.bestBefore))

                \(message.map { $0 + "\n\n" } ?? "")Gate attempt \(attempt) accepted: suite \(result.suitePassed)/\(result.suiteTotal), \(result.promoted.count) task(s) promoted.

                Agent-SHA256: \(snap.sha256)
                Ledger-Head: \(head.seq):\(head.hash)
                """
            let commit = try experiment.git.prepareCommit(file: snap.directory + "/agent.py", at: "agent/agent.py", message: commitMessage)
            result.commit = commit
            result.iteration = iteration
            items.append((.gateAttempt, result))
            items.append((.iteration, IterationRecord(iteration: iteration, valScore: val, commit: String(commit.prefix(7)),
                                                      evalsPassed: result.suitePassed, evalsTotal: result.suiteTotal,
                                                      timestamp: isoTimestamp(), agentSHA256: snap.sha256, description: message)))
            items.append((.suitePromotion, SuitePromotionRecord(added: result.promoted, lastResults: lastResults,
                                                                pending: experiment.config.loop.review == .operator ? true : nil)))
        } else {
            items.append((.gateAttempt, result))
        }
        if let evidence { items.append((.failureEvidence, evidence)) }
        items += batchRows
        // What `evidence export` signs about this attempt (held-out leaves only in the ledger),
        // last: its bundle counts every violation up to this row, this gate's own included.
        _ = try experiment.ledger.appendAll(try experiment.ledger.encode(items) + violations
                                            + experiment.ledger.encode([(.gateEvidence, gateEvidence)]))
        recorded = true
        // Published only once the ledger holds the iteration; a crash in between is rolled
        // forward by recover().
        if let c = result.commit { try experiment.git.publish(c) }
        try experiment.regenerateViews()
        return result
    }

    /// An interrupted attempt's rows: the attempt, and (when it was its batch's last allowed
    /// attempt: it looked at the held-out split like any other) the batch's end and the next
    /// batch, revealed in the same append; the next train run or gate runs it.
    static func interruptedRows(_ s: ExperimentState, attempt: Int, agentSHA256: String, config: ExperimentConfig) -> [(RecordKind, any Encodable)] {
        var record = GateAttemptRecord.interrupted(attempt: attempt, agentSHA256: agentSHA256)
        record.batch = s.currentBatch?.revealed.batch
        guard let (ended, next) = RollingBatches.end(s, attempt: attempt, accepted: false, promoted: [], resolved: [], after: FailureBook(s), config: config) else {
            return [(.gateAttempt, record)]
        }
        record.revealedBatch = next.batch
        record.revealedTasks = next.tasks.count
        return [(.gateAttempt, record), (.batchEnded, ended), (.batchRevealed, next)]
    }

    /// Runs the latest revealed batch as a train run (traces, records, views) with the agent.py
    /// the experiment stands on: the last accepted one (the baseline's before any).
    func runRevealedBatch() throws {
        let s = try experiment.state()
        guard let batch = s.batches.last, !batch.revealed.tasks.isEmpty, let sha = s.iterations.last?.agentSHA256 else { return }
        let snap = AgentSnapshot(sha256: sha, directory: experiment.layout.snapshotDirectory(sha256: sha))
        guard access(snap.directory + "/agent.py", R_OK) == 0 else {
            throw ExperimentError(.io, "batch \(batch.revealed.batch) cannot run: the accepted agent.py's snapshot \(snap.directory)/agent.py is gone")
        }
        experiment.log?("batch \(batch.revealed.batch) revealed: running its \(batch.revealed.tasks.count) train task(s) with the accepted agent.py")
        _ = try TrainOperation(experiment: experiment).runTrain(taskIDs: batch.revealed.tasks, oracle: false, actor: "supervisor", agent: snap, state: s)
        TriageOperation(experiment: experiment).triageAfter(.batch, trigger: "batch \(batch.revealed.batch)")
    }

    /// Sleeps until the instant `config.replyTime` sets for a gate that started at `started`
    /// (monotonic seconds). Returns a note for the ledger when the gate ran past
    /// `gate.reply_after`.
    func holdReply(since started: Double) -> String? {
        let elapsed = monotonicNow() - started
        let release = experiment.config.gate.replyTime.release(after: elapsed)
        if release - elapsed > 0.05 {
            experiment.log?("gate: answer held \(String(format: "%.1f", release - elapsed)) s, to \(Int(release)) s after the gate began (gate.reply_time: \(experiment.config.gate.replyTime.name))")
        }
        while true {
            let left = release - (monotonicNow() - started)
            if left <= 0 { break }
            Thread.sleep(forTimeInterval: left)
        }
        guard experiment.config.gate.replyTime.overran(elapsed) else { return nil }
        let why = "gate ran \(String(format: "%.1f", elapsed)) s, past gate.reply_after; it answered on the padded grid (\(Int(release)) s), which says up to about \(String(format: "%.1f", experiment.config.gate.replyTime.capacityBits(worst: elapsed))) bits: raise gate.reply_after"
        experiment.log?(why)
        return why
    }
}
