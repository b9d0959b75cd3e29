import Ledger

// The kinds of row an experiment's ledger records, one per payload type of
// Records.swift (replayed by ExperimentState.swift, beside it). The names are stored and hashed: add, never rename.
extension RecordKind {
    public static let experimentCreated: RecordKind = "experiment_created"
    public static let split: RecordKind = "split"
    public static let baseline: RecordKind = "baseline"
    public static let trainRun: RecordKind = "train_run"
    public static let gateStarted: RecordKind = "gate_started"
    public static let gateAttempt: RecordKind = "gate_attempt"
    public static let iteration: RecordKind = "iteration"
    public static let suitePromotion: RecordKind = "suite_promotion"
    public static let violation: RecordKind = "violation"
    public static let note: RecordKind = "note"
    public static let runStarted: RecordKind = "run_started"
    public static let runEnded: RecordKind = "run_ended"
    public static let agentSession: RecordKind = "agent_session"
    public static let failureEvidence: RecordKind = "failure_evidence"
    public static let clusterProposal: RecordKind = "cluster_proposal"
    public static let batchRevealed: RecordKind = "batch_revealed"
    public static let batchEnded: RecordKind = "batch_ended"
    public static let nodeExcluded: RecordKind = "node_excluded"
    public static let needsHuman: RecordKind = "needs_human"
    public static let suiteReview: RecordKind = "suite_review"
    public static let candidate: RecordKind = "candidate"
    public static let candidatesRanked: RecordKind = "candidates_ranked"
    public static let triage: RecordKind = "triage"
    public static let clusterReview: RecordKind = "cluster_review"
    public static let gateEvidence: RecordKind = "gate_evidence"
}

extension Set<RecordKind> {
    /// Every kind an experiment records: what its ledger is opened with.
    public static let experiment: Set<RecordKind> = [
        .experimentCreated, .split, .baseline, .trainRun, .gateStarted, .gateAttempt, .iteration, .suitePromotion,
        .violation, .note, .runStarted, .runEnded, .agentSession, .failureEvidence, .clusterProposal,
        .batchRevealed, .batchEnded, .nodeExcluded, .needsHuman, .suiteReview, .candidate, .candidatesRanked, .triage, .clusterReview,
        .gateEvidence,
    ]
}
