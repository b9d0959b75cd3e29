import Crypto
import ExperimentModel
import Foundation
import SupervisorIO

// The evidence a bundle signs: an in-toto Statement v1 (in-toto/attestation spec/v1/
// statement.md) whose subject is the agent.py a gate judged (or `prepare` ran) and whose
// predicate is what that judgement stood on. Its claims follow the eval-result predicate
// proposed in in-toto/attestation PR 575 (issue 565): `metric comparator threshold`, `passed`,
// `sampleSize`, salted commitments, a per-sample RFC 6962 root, an issuer-declared assurance
// level; its criteria, registered before the held-out phase ran, follow PR 587's idea of
// pre-registration. Field names are ours where those are still proposals.

public enum EvidenceFormat {
    public static let statementType = "https://in-toto.io/Statement/v1"
    /// DSSE's payload type for in-toto Statements (spec/v1/envelope.md).
    public static let payloadType = "application/vnd.in-toto+json"
    public static let predicateType = "https://autoharness.dev/attestation/gate/v0.1"
    public static let bundleMediaType = "application/vnd.autoharness.evidence.v1+json"
}

public struct Statement: Codable, Sendable, Equatable {
    public struct Subject: Codable, Sendable, Equatable {
        public var name: String
        public var digest: [String: String]

        package init(name: String, digest: [String: String]) {
            self.name = name
            self.digest = digest
        }
    }
    public var type = EvidenceFormat.statementType
    public var subject: [Subject]
    public var predicateType = EvidenceFormat.predicateType
    public var predicate: GatePredicate

    enum CodingKeys: String, CodingKey {
        case type = "_type"
        case subject, predicateType, predicate
    }

    package init(subject: [Subject], predicate: GatePredicate) {
        self.subject = subject
        self.predicate = predicate
    }
}

/// One ledger row the predicate points at: a third party holding the ledger finds it by
/// `seq` and checks it by `hash` (and the chain up to `head` with `status --verify`).
public struct LedgerPointer: Codable, Sendable, Equatable {
    public var seq: Int64
    public var hash: String

    package init(seq: Int64, hash: String) {
        self.seq = seq
        self.hash = hash
    }
}

/// `metric comparator threshold` over `sampleSize` samples, and whether it held (PR 575).
public struct EvidenceClaim: Codable, Sendable, Equatable {
    public var metric: String
    public var comparator: String
    public var threshold: Double
    public var value: Double
    public var passed: Bool
    public var sampleSize: Int

    package init(metric: String, comparator: String, threshold: Double, value: Double, passed: Bool, sampleSize: Int) {
        self.metric = metric
        self.comparator = comparator
        self.threshold = threshold
        self.value = value
        self.passed = passed
        self.sampleSize = sampleSize
    }
}

/// The RFC 6962 root over one split's per-task reward leaves (`RewardLeaf`), in the order of
/// their salts.
public struct RewardTree: Codable, Sendable, Equatable {
    public var root: String
    public var size: Int

    package init(root: String, size: Int) {
        self.root = root
        self.size = size
    }
}

/// The split as committed at `prepare`: SHA-256(salt ‖ `SplitCommitment.message`); the salt
/// is revealed only with `--reveal-split`.
public struct SplitDigest: Codable, Sendable, Equatable {
    public var commitment: String
    public var train: Int
    public var test: Int
    public var committedAt: LedgerPointer

    package init(commitment: String, train: Int, test: Int, committedAt: LedgerPointer) {
        self.commitment = commitment
        self.train = train
        self.test = test
        self.committedAt = committedAt
    }
}

public struct GatePredicate: Codable, Sendable, Equatable {
    public struct Harness: Codable, Sendable, Equatable {
        public var name = "autoharness"
        /// The running `autoharness` (`/proc/self/exe`) and the programs beside it.
        public var binaries: [FileDigest]

        package init(name: String = "autoharness", binaries: [FileDigest]) {
            self.name = name
            self.binaries = binaries
        }
    }
    public struct Gate: Codable, Sendable, Equatable {
        public var attempt: Int
        public var outcome: String
        public var accepted: Bool
        public var reason: String
        public var commit: String?
        public var iteration: Int?
        public var message: String?
        public var started: LedgerPointer
        public var decided: LedgerPointer

        package init(attempt: Int, outcome: String, accepted: Bool, reason: String, commit: String? = nil, iteration: Int? = nil, message: String? = nil, started: LedgerPointer, decided: LedgerPointer) {
            self.attempt = attempt
            self.outcome = outcome
            self.accepted = accepted
            self.reason = reason
            self.commit = commit
            self.iteration = iteration
            self.message = message
            self.started = started
            self.decided = decided
        }
    }
    public struct Ledger: Codable, Sendable, Equatable {
        /// Row 1 (`experiment_created`): which experiment this is, whoever signed.
        public var genesis: LedgerPointer
        public var head: LedgerPointer
        public var rows: Int64

        package init(genesis: LedgerPointer, head: LedgerPointer, rows: Int64) {
            self.genesis = genesis
            self.head = head
            self.rows = rows
        }
    }
    public typealias Host = GateHost

    /// `gate` or `prepare`.
    public var kind: String
    public var benchmark: String
    public var harness: Harness
    public var gate: Gate?
    public var claims: [EvidenceClaim]
    public var criteria: GateCriteria?
    public var policies: [PolicyDigest]
    public var heldOutRuntime: HeldOutRuntimeMeasurement?
    public var taskFiles: [TaskFilesDigest]
    public var split: SplitDigest?
    /// `train` and `held-out`, when the gate ran them.
    public var rewards: [String: RewardTree]
    public var ledger: Ledger
    public var host: Host
    /// Every violation recorded up to this point, counted by kind.
    public var violations: [String: Int]
    /// Issuer-declared (PR 575): the operator's own supervisor signed it.
    public var assuranceLevel = "self_attested"
    public var exportedAt: String

    package init(kind: String, benchmark: String, harness: Harness, gate: Gate? = nil, claims: [EvidenceClaim], criteria: GateCriteria? = nil, policies: [PolicyDigest], heldOutRuntime: HeldOutRuntimeMeasurement? = nil, taskFiles: [TaskFilesDigest], split: SplitDigest? = nil, rewards: [String: RewardTree], ledger: Ledger, host: Host, violations: [String: Int], assuranceLevel: String = "self_attested", exportedAt: String) {
        self.kind = kind
        self.benchmark = benchmark
        self.harness = harness
        self.gate = gate
        self.claims = claims
        self.criteria = criteria
        self.policies = policies
        self.heldOutRuntime = heldOutRuntime
        self.taskFiles = taskFiles
        self.split = split
        self.rewards = rewards
        self.ledger = ledger
        self.host = host
        self.violations = violations
        self.assuranceLevel = assuranceLevel
        self.exportedAt = exportedAt
    }
}

/// One task's reward as a leaf: the exact JSON text hashed, `{"reward":R,"salt":HEX,"task":ID}`
/// (sorted keys). The salt (16 random bytes per leaf) keeps a leaf that is not revealed from
/// being guessed from the few rewards a task can have.
public enum RewardLeaf {
    struct Fields: Codable { var reward: Double; var salt: String; var task: String }

    public static func make(task: String, reward: Double) -> String {
        var salt = SystemRandomNumberGenerator()
        let bytes = (0..<16).map { _ in UInt8.random(in: 0...255, using: &salt) }
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let data = (try? e.encode(Fields(reward: reward, salt: WorkDigest.hex(bytes), task: task))) ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    /// The leaves of `rewards`, ordered by their random salts: a revealed leaf's index says
    /// nothing about where the other tasks' ids sort (which, with the public task list, would
    /// narrow down the rest of the held-out split).
    public static func leaves(_ rewards: [String: Double]) -> [String] {
        rewards.map { (task, reward) -> (salt: String, leaf: String) in
            let leaf = make(task: task, reward: reward)
            return ((try? JSONDecoder().decode(Fields.self, from: Data(leaf.utf8)))?.salt ?? "", leaf)
        }.sorted { $0.salt < $1.salt }.map(\.leaf)
    }

    /// The task and reward a leaf's text holds.
    public static func read(_ leaf: String) -> (task: String, reward: Double)? {
        guard let f = try? JSONDecoder().decode(Fields.self, from: Data(leaf.utf8)) else { return nil }
        return (f.task, f.reward)
    }
}

/// The split's commitment: SHA-256 over the salt's 32 bytes followed by the message
/// `{"test":[…],"train":[…]}` (ids sorted by their UTF-8 bytes, no whitespace, as
/// `json.dumps(…, separators=(",", ":"), sort_keys=True, ensure_ascii=False)` writes it).
public enum SplitCommitment {
    public static func message(train: [String], test: [String]) -> [UInt8] {
        func list(_ ids: [String]) -> String {
            "[" + ids.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) }.map(jsonString).joined(separator: ",") + "]"
        }
        return Array(("{\"test\":" + list(test) + ",\"train\":" + list(train) + "}").utf8)
    }

    public static func commit(train: [String], test: [String], salt: [UInt8]) -> String {
        WorkDigest.hex(SHA256.hash(data: salt + message(train: train, test: test)))
    }

    public static func newSalt() -> [UInt8] {
        var g = SystemRandomNumberGenerator()
        return (0..<32).map { _ in UInt8.random(in: 0...255, using: &g) }
    }

    /// A JSON string as Python's json.dumps(ensure_ascii=False) writes it.
    static func jsonString(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case "\u{08}": out += "\\b"
            case "\u{0C}": out += "\\f"
            default:
                if u.value < 0x20 { out += String(format: "\\u%04x", u.value) } else { out.unicodeScalars.append(u) }
            }
        }
        return out + "\""
    }
}

/// What a bundle file holds: the signed envelope, the key it verifies with, and what the
/// exporter chose to reveal (checked against the signed commitments, never trusted alone).
public struct EvidenceBundle: Codable, Sendable, Equatable {
    public struct SplitReveal: Codable, Sendable, Equatable {
        /// Hex of the 32-byte salt.
        public var salt: String
        public var train: [String]
        public var test: [String]

        package init(salt: String, train: [String], test: [String]) {
            self.salt = salt
            self.train = train
            self.test = test
        }
    }
    /// One leaf shown with its audit path.
    public struct RewardReveal: Codable, Sendable, Equatable {
        /// `train` or `held-out`.
        public var tree: String
        public var index: Int
        public var leaf: String
        /// Hex hashes, leaf side first.
        public var path: [String]

        package init(tree: String, index: Int, leaf: String, path: [String]) {
            self.tree = tree
            self.index = index
            self.leaf = leaf
            self.path = path
        }
    }
    public struct Reveal: Codable, Sendable, Equatable {
        public var split: SplitReveal?
        public var rewards: [RewardReveal]?

        package init(split: SplitReveal? = nil, rewards: [RewardReveal]? = nil) {
            self.split = split
            self.rewards = rewards
        }
    }

    public var mediaType = EvidenceFormat.bundleMediaType
    public var dsseEnvelope: DSSEEnvelope
    public var verificationKey: SSLibKey
    public var reveal: Reveal?

    package init(dsseEnvelope: DSSEEnvelope, verificationKey: SSLibKey, reveal: Reveal? = nil) {
        self.dsseEnvelope = dsseEnvelope
        self.verificationKey = verificationKey
        self.reveal = reveal
    }
}
