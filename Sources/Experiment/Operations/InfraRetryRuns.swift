import Benchmark
import Execution
import ExperimentModel

// Held-out runs that repeat a task the vendor failed (`InfraRetries`, Records/InfraRetries.swift).

extension ExperimentContext {
    /// Whether held-out runs count vendor failures per task: retries are on and the runner
    /// reaches a model API through the inference gate (what the config parser requires of
    /// `gate.infra_retries`; checked again here). On this host each task's run has a gate of
    /// its own; in a held-out VM the host's one gate counts by the task each stream is tagged
    /// with (`VMEgress.perTask`).
    var countsVendorFailures: Bool {
        config.gate.infraRetries > 0 && !config.runsOwnTasks && !config.runner.networkInference.isEmpty
    }

    /// One held-out trial of `ids` (`split` `.heldOut` or `.baseline`), each task the vendor
    /// failed run again up to `gate.infra_retries` times; `retries` accumulates the account.
    func runRetryingVendor(_ ids: [String], agent: String, audit: RunAudit, split: SplitClass, operatorDiagnostics: Bool = false,
                           retries: inout InfraRetries) throws -> [TaskOutcome] {
        guard countsVendorFailures else {
            // Off: what a gate of a task's own counted (Harbor's local runs) changes nothing.
            return try run(ids, agent: agent, audit: audit, split: split, operatorDiagnostics: operatorDiagnostics)
                .map { o in
                    var o = o
                    o.vendorFailures = nil
                    return o
                }
        }
        var outcomes = try run(ids, agent: agent, audit: audit, split: split, operatorDiagnostics: operatorDiagnostics, oneTaskPerRun: true)
        retries.failures += outcomes.reduce(0) { $0 + ($1.vendorFailures ?? 0) }
        for _ in 0..<config.gate.infraRetries {
            let again = outcomes.filter(HeldOutScore.sawVendorFailure).map(\.id)
            if again.isEmpty { break }
            retries.retried += again.count
            log?("held-out: \(again.count) task run(s) the model vendor failed, run again (gate.infra_retries)")
            let fresh = try run(again, agent: agent, audit: audit, split: split, operatorDiagnostics: operatorDiagnostics, oneTaskPerRun: true)
            retries.failures += fresh.reduce(0) { $0 + ($1.vendorFailures ?? 0) }
            let byID = Dictionary(fresh.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
            outcomes = outcomes.map { byID[$0.id] ?? $0 }
        }
        retries.unresolved += outcomes.filter(HeldOutScore.sawVendorFailure).count
        return outcomes
    }
}
