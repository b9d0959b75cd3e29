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
    public var host: GateHost? = nil

    package init(attempt: Int, trainLeaves: [String], heldOutLeaves: [String], heldOutRuntime: HeldOutRuntimeMeasurement? = nil, taskFiles: [TaskFilesDigest], policies: [PolicyDigest], binaries: [FileDigest], host: GateHost? = nil) {
        self.attempt = attempt
        self.trainLeaves = trainLeaves
        self.heldOutLeaves = heldOutLeaves
        self.heldOutRuntime = heldOutRuntime
        self.taskFiles = taskFiles
        self.policies = policies
        self.binaries = binaries
        self.host = host
    }
}

/// The gate's criteria as they stood when it started (its `gate_started` row), before any
/// task of it ran.
public struct GateCriteria: Codable, Sendable, Equatable {
    /// `margin`, `at_least_best` or `paired` (`gate.accept`).
    public var acceptRule: String
    /// The suite's pass rate that step 1 needs (`threshold`).
    public var suiteThreshold: Double
    /// What step 2 must beat: the best accepted score, and by how much (margin; 0 with
    /// at_least_best, where a tie passes).
    public var bestBefore: Double
    public var requiredImprovement: Double
    public var testTasks: Int
    /// `agent` or `infra` (`timeout_policy`).
    public var timeoutPolicy: String
    /// The rule in words (`GateRules.ruleText`).
    public var rule: String
    /// `gate.trials` (absent: 1) and, under `paired`, `gate.alpha` and the gate attempt whose
    /// held-out rewards the test compares with (0: the baseline; its bundle has their leaves).
    public var trials: Int?
    public var alpha: Double?
    public var pairedAgainst: Int?
    /// `gate.infra_retries` where held-out runs count the vendor's failures per task (absent:
    /// none are re-run).
    public var infraRetries: Int? = nil
    /// `gate.disclosure: ladder`: the step this gate's disclosure uses (`ScoreLadder`), fixed
    /// here so that changing `gate.ladder_step` later rewrites no earlier disclosure.
    public var ladderStep: Double? = nil

    package init(acceptRule: String, suiteThreshold: Double, bestBefore: Double, requiredImprovement: Double, testTasks: Int, timeoutPolicy: String, rule: String, trials: Int? = nil, alpha: Double? = nil, pairedAgainst: Int? = nil, infraRetries: Int? = nil, ladderStep: Double? = nil) {
        self.acceptRule = acceptRule
        self.suiteThreshold = suiteThreshold
        self.bestBefore = bestBefore
        self.requiredImprovement = requiredImprovement
        self.testTasks = testTasks
        self.timeoutPolicy = timeoutPolicy
        self.rule = rule
        self.trials = trials
        self.alpha = alpha
        self.pairedAgainst = pairedAgainst
        self.infraRetries = infraRetries
        self.ladderStep = ladderStep
    }
}

/// A file as it was measured.
public struct FileDigest: Codable, Sendable, Equatable {
    public var name: String
    public var sha256: String

    package init(name: String, sha256: String) {
        self.name = name
        self.sha256 = sha256
    }
}

/// A policy in use, as the sandboxes got it: the digest of its resolved form (after
/// `extends:`, `PolicyCoding`'s encoding at `encoding`) and of the file naming it.
public struct PolicyDigest: Codable, Sendable, Equatable {
    /// What it confines: `task`, `verifier`, `coding agent`, `runner`, `scorer`, `triage`.
    public var role: String
    public var name: String
    public var lineage: [String]
    public var file: String
    public var fileSHA256: String
    public var resolvedSHA256: String
    public var encoding: Int

    package init(role: String, name: String, lineage: [String], file: String, fileSHA256: String, resolvedSHA256: String, encoding: Int) {
        self.role = role
        self.name = name
        self.lineage = lineage
        self.file = file
        self.fileSHA256 = fileSHA256
        self.resolvedSHA256 = resolvedSHA256
        self.encoding = encoding
    }
}

/// Where the gate's held-out phase ran, measured when it ran.
public struct HeldOutRuntimeMeasurement: Codable, Sendable, Equatable {
    /// `vm`, `host` or `ray` (`ray-vm`: a VM on a Ray node, measured there, not here).
    public var kind: String
    public var kernelVersion: String?
    public var kernelSHA256: String?
    public var initramfsSHA256: String?
    /// `kvm` or `tcg`.
    public var acceleration: String?
    /// The saved guest state the gate's guest was restored from (`gate.vm.snapshot`), its
    /// bytes checked against the digest recorded when it was saved.
    public var savedStateSHA256: String?
    /// True when held-out and train runs reached a model API with one account's key, as the
    /// operator accepted (`gate.shared_vendor_account`); absent otherwise.
    public var sharedVendorAccount: Bool?

    package init(kind: String, kernelVersion: String? = nil, kernelSHA256: String? = nil, initramfsSHA256: String? = nil, acceleration: String? = nil, savedStateSHA256: String? = nil, sharedVendorAccount: Bool? = nil) {
        self.kind = kind
        self.kernelVersion = kernelVersion
        self.kernelSHA256 = kernelSHA256
        self.initramfsSHA256 = initramfsSHA256
        self.acceleration = acceleration
        self.savedStateSHA256 = savedStateSHA256
        self.sharedVendorAccount = sharedVendorAccount
    }
}

/// A directory of task files: the SHA-256 of its manifest, the lines `sha256sum` prints for
/// every regular file under it (`HEX  PATH\n`, PATH relative, lines in byte order of PATH;
/// symbolic links left out), so that `find . -type f -printf '%P\0' | LC_ALL=C sort -z |
/// xargs -0 sha256sum | sha256sum` in the directory gives the same digest.
public struct TaskFilesDigest: Codable, Sendable, Equatable {
    public var path: String
    public var files: Int
    public var manifestSHA256: String
}

/// The host a gate ran on, as measured then (`GatePredicate.Host` in a bundle).
public struct GateHost: Codable, Sendable, Equatable {
    /// `uname -r` and doctor's host findings (topic: ok, info, missing), measured when the
    /// gate ran, on its host, once its sandboxes had ended; `measuredAt` is the gate's reply
    /// instant (held to `gate.reply_time`), not the inspection's. For rows written before that
    /// was recorded: when the bundle was exported, on the exporting host.
    public var kernel: String
    public var findings: [String: String]
    public var measuredAt: String

    package init(kernel: String, findings: [String: String], measuredAt: String) {
        self.kernel = kernel
        self.findings = findings
        self.measuredAt = measuredAt
    }
}
