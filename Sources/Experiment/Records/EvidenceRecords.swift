import Foundation

// The ledger payload evidence bundles are made from (`evidence export`).

/// What an evidence bundle proves about one gate, recorded with its attempt: each split's
/// per-task rewards as salted leaves (`RewardLeaf`; the held-out ones exist only here, in the
/// supervisor-private ledger), where its held-out phase ran, and the task files it ran.
public struct GateEvidenceRecord: Codable, Sendable {
    public var attempt: Int
    public var trainLeaves: [String]
    public var heldOutLeaves: [String]
    public var heldOutRuntime: HeldOutRuntimeMeasurement?
    public var taskFiles: [TaskFilesDigest]
    /// Every policy in use as resolved when it ran, and the autoharness programs that ran it.
    public var policies: [PolicyDigest]
    public var binaries: [FileDigest]
    /// What doctor's host inspection found when the gate ran, on the host that ran it
    /// (absent in rows written before: the bundle then says what the exporting host has).
    public var host: GatePredicate.Host? = nil
}
