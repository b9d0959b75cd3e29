import Benchmark
import Execution
import ExperimentModel
import Foundation
import Ledger
import SupervisorIO

// Several candidates per gate (`loop.candidates: K`). The coding agent submits up to
// K agent.py files with `autoharness candidate`; the next `autoharness gate` runs each on the
// train split it can see, ranks them there (`CandidateRanking`) and judges only the best:
// one gate is one look at the held-out split whatever K is, and the others are recorded as
// explored, with their train numbers. The design is the agent's own several tries, not K
// coding-agent sessions side by side: the same freeze covers every candidate (they all come
// from the one sandbox), and K sessions would cost K times the model spend for the same
// one look per gate.

struct CandidateOperation {
    let experiment: ExperimentContext

    /// Records `agent` (default: a snapshot of agent/agent.py) as a candidate for the next
    /// gate. Returns its record: an agent.py already waiting is not added twice (its earlier
    /// record comes back).
    @discardableResult
    func submitCandidate(agent: AgentSnapshot? = nil, message: String?, actor: String) throws -> CandidateRecord {
        let s = try experiment.state()
        guard s.prepared else { throw ExperimentError(.state, "experiment not prepared yet: run `autoharness prepare` first") }
        guard experiment.config.loop.candidates > 1 else {
            throw ExperimentError(.usage, "\(experiment.layout.config): loop.candidates is 1, so a gate judges agent/agent.py alone: gate it, or set loop.candidates (2 to \(ExperimentConfig.maxCandidates)) to rank several")
        }
        let snap = try agent ?? experiment.snapshotAgent()
        if let waiting = s.pendingCandidates.first(where: { $0.agentSHA256 == snap.sha256 }) { return waiting }
        if let earlier = s.gateAttempts.last(where: { $0.agentSHA256 == snap.sha256 && $0.verdict != .interrupted }) {
            throw ExperimentError(.refused, "this exact agent.py was already judged (gate attempt \(earlier.attempt), \(earlier.accepted ? "accepted" : "rejected")); change it before submitting it again")
        }
        guard s.pendingCandidates.count < experiment.config.loop.candidates else {
            throw ExperimentError(.refused, "\(experiment.config.loop.candidates) candidates are already waiting for the next gate (loop.candidates \(experiment.config.loop.candidates)); gate them first")
        }
        let record = CandidateRecord(actor: actor, agentSHA256: snap.sha256, message: message.flatMap { noteLine($0) },
                                     number: s.pendingCandidates.count + 1)
        _ = try experiment.ledger.append(.candidate, record)
        return record
    }

    /// The gate of the candidates waiting (`submitCandidate`): each runs on the visible train
    /// split (a recorded train run, whose cost counts like any other), the ranking is recorded,
    /// and the best is gated (`gate`; its own message, else `message`); `overBudget` is asked
    /// before each candidate's run (the run's cost budget). The caller puts the
    /// gated agent.py (`result.agentSHA256`) where the coding agent works. The ranking is nil
    /// when one candidate was waiting.
    func gateCandidates(actor: String, message: String? = nil, overBudget: () -> String? = { nil },
                               beforeHeldOut: () throws -> Void = {}) throws -> (ranking: CandidatesRankedRecord?, result: GateResult) {
        let waiting = try TrainOperation(experiment: experiment).settleBatches().pendingCandidates
        guard let first = waiting.first else { throw ExperimentError(.state, "no candidate is waiting: `autoharness candidate` submits one") }
        // One candidate has nothing to be ranked against: it is gated as it is.
        if waiting.count == 1 {
            let snap = AgentSnapshot(sha256: first.agentSHA256, directory: experiment.layout.snapshotDirectory(sha256: first.agentSHA256))
            return (nil, try GateOperation(experiment: experiment).gate(actor: actor, agent: snap, message: first.message ?? message, beforeHeldOut: beforeHeldOut))
        }
        var standings: [RankedCandidate] = []
        for c in waiting {
            let snap = AgentSnapshot(sha256: c.agentSHA256, directory: experiment.layout.snapshotDirectory(sha256: c.agentSHA256))
            guard access(snap.directory + "/agent.py", R_OK) == 0 else {
                throw ExperimentError(.io, "candidate \(c.number)'s snapshot \(snap.directory)/agent.py is gone; nothing was gated")
            }
            // A spent budget ends the ranking between two candidates: no gate starts.
            if let why = overBudget() { throw ExperimentError(.refused, "\(why) while ranking the candidates; no gate ran and they still wait") }
            experiment.log?("candidate \(c.number) of \(waiting.count) (\(c.agentSHA256.prefix(12))): running the train split")
            let s = try experiment.state()
            var outcomes = try TrainOperation(experiment: experiment).runTrain(taskIDs: nil, oracle: false, actor: actor, agent: snap, state: s)
            // `gate.trials`: the same tasks k − 1 times more, as the gate runs the held-out ones
            // (not recorded as train runs: no traces, their violations recorded as the ranking's).
            if experiment.config.gate.trials > 1 {
                let audit = RunAudit()
                do {
                    for _ in 1..<experiment.config.gate.trials {
                        outcomes += try experiment.run(CandidateRanking.ids(outcomes), agent: snap.directory, audit: audit, split: .trainUntraced)
                    }
                } catch {
                    experiment.recordViolations(experiment.violations(audit, during: "candidate ranking"))
                    throw error
                }
                experiment.recordViolations(experiment.violations(audit, during: "candidate ranking"))
            }
            standings.append(CandidateRanking.standing(c, outcomes: CandidateRanking.taskMeans(outcomes), suite: s.suite,
                                                       threshold: experiment.config.threshold, trials: experiment.config.gate.trials))
        }
        let ranked = CandidateRanking.rank(standings)
        let best = ranked[0]
        let ranking = CandidatesRankedRecord(attempt: try experiment.state().lastAttempt + 1, chosen: best.agentSHA256, ranked: ranked)
        _ = try experiment.ledger.append(.candidatesRanked, ranking)
        experiment.log?("candidates ranked on train: \(ranked.map { "#\($0.number) \($0.trainPassed)/\($0.trainTotal)" }.joined(separator: ", ")); gating #\(best.number)")
        let snap = AgentSnapshot(sha256: best.agentSHA256, directory: experiment.layout.snapshotDirectory(sha256: best.agentSHA256))
        let result = try GateOperation(experiment: experiment).gate(actor: actor, agent: snap, message: best.message ?? message, beforeHeldOut: beforeHeldOut)
        return (ranking, result)
    }
}
