// `gate.infra_retries`: a held-out task whose model calls the vendor failed is run again.
//
// The inference gate counts, per tool sandbox, the requests it judged and sent on that the
// vendor failed (`InferenceGate.vendorFailureStatuses`, a reset, no answer). A held-out run
// that wants those counts per task runs each task in an adapter run of its own
// (`TaskRun.oneTaskPerRun`), unless the adapter already gives each task its own gate. A task
// whose run saw any is run again inside the same frozen phase, at most `infraRetries` times,
// and that run's result replaces the first whatever either scored: which tasks are re-run
// depends on what the vendor did, not on how the task went, so a retry is never a second
// chance for a task agent.py failed on its own (a task whose agent.py exits 1 is not retried:
// no vendor failure). What the vendor still failed after the last retry counts as
// `timeout_policy` says: 0 in the gate, left out of the operator's mean over finished tasks
// under `infra` (`HeldOutScore.finished`). Counted in the ledger (`InfraRetries`), shown to
// the operator, never disclosed. docs/loop.md states what this cannot tell apart.

/// What a held-out phase's vendor failures cost: operator only.
public struct InfraRetries: Codable, Sendable, Equatable {
    /// Vendor failures the gate saw over every task run of the phase, the replaced ones included.
    public var failures = 0
    /// Task runs repeated for them.
    public var retried = 0
    /// Task runs the vendor still failed after their last retry (or with retries off).
    public var unresolved = 0

    public init(failures: Int = 0, retried: Int = 0, unresolved: Int = 0) {
        self.failures = failures
        self.retried = retried
        self.unresolved = unresolved
    }

    /// nil when the vendor failed nothing: no row grows a field for a clean phase.
    public var recorded: InfraRetries? { failures == 0 ? nil : self }

    /// One line for the operator.
    public var summary: String {
        "\(failures) vendor failure(s), \(retried) task run(s) repeated, \(unresolved) still failed by the vendor"
    }
}
