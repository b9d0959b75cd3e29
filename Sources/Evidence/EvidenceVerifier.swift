import Crypto
import ExperimentModel
import Foundation
import Sandbox
import SupervisorIO

/// Checks a bundle with nothing but its bytes (and, to know who signed it, the key the reader
/// trusts): the DSSE signature over the exact payload, the Statement's shape, and every
/// reveal against what the payload signed (the split against its commitment, each reward
/// leaf against its tree's root). Nothing unsigned is reported as fact.
public enum EvidenceVerifier {
    public struct Report: Sendable {
        public var statement: Statement
        public var keyID: String
        /// The key was the one the reader gave (`--key`), not only the bundle's own.
        public var keyTrusted: Bool
        /// What was checked, one line each.
        public var checks: [String]
        public var revealedRewards: [(tree: String, task: String, reward: Double)]
    }

    public static let maxBundle = 64 << 20

    public static func verify(_ bytes: [UInt8], trusted: Curve25519.Signing.PublicKey?) throws(EvidenceError) -> Report {
        guard bytes.count <= maxBundle else { throw EvidenceError("the bundle is over \(maxBundle) bytes") }
        if let p = StrictJSONCheck.problem(bytes) { throw EvidenceError("the bundle is not strict JSON: \(shown(p))") }
        if let n = StrictJSONCheck.nonIntegers(bytes, keys: ["index"]).first { throw EvidenceError("the bundle's \(shown(n)) is not an integer") }
        let bundle: EvidenceBundle
        do { bundle = try JSONDecoder().decode(EvidenceBundle.self, from: Data(bytes)) } catch {
            throw EvidenceError("not an evidence bundle: \(shown("\(error)"))")
        }
        guard bundle.mediaType == EvidenceFormat.bundleMediaType else { throw EvidenceError("mediaType is \(shown(bundle.mediaType)), not \(EvidenceFormat.bundleMediaType)") }
        guard bundle.verificationKey.keytype == "ed25519", bundle.verificationKey.scheme == "ed25519",
              let raw = EvidenceKey.hexBytes(bundle.verificationKey.keyval.public), raw.count == 32,
              let own = try? Curve25519.Signing.PublicKey(rawRepresentation: raw) else {
            throw EvidenceError("the bundle's verificationKey is not an Ed25519 key")
        }
        if let trusted, trusted.rawRepresentation != own.rawRepresentation {
            throw EvidenceError("the bundle is signed with key \(EvidenceKey.keyID(own)), not with the key you trust (\(EvidenceKey.keyID(trusted)))")
        }
        guard bundle.dsseEnvelope.payloadType == EvidenceFormat.payloadType else {
            throw EvidenceError("payloadType is \(shown(bundle.dsseEnvelope.payloadType)), not \(EvidenceFormat.payloadType)")
        }
        let body = try bundle.dsseEnvelope.verifiedPayload(own)
        var checks = ["DSSE signature by ed25519 key \(EvidenceKey.keyID(own)) over the payload and its type"]
        if let p = StrictJSONCheck.problem(body) { throw EvidenceError("the signed payload is not strict JSON: \(shown(p))") }
        if let n = StrictJSONCheck.nonIntegers(body, keys: ["size", "sampleSize"]).first { throw EvidenceError("the signed payload's \(shown(n)) is not an integer") }

        let statement: Statement
        do { statement = try JSONDecoder().decode(Statement.self, from: Data(body)) } catch {
            throw EvidenceError("the signed payload is not an autoharness Statement: \(shown("\(error)"))")
        }
        guard statement.type == EvidenceFormat.statementType, statement.predicateType == EvidenceFormat.predicateType else {
            throw EvidenceError("the Statement's _type or predicateType is not \(EvidenceFormat.statementType) / \(EvidenceFormat.predicateType)")
        }
        guard let subject = statement.subject.first, statement.subject.count == 1, let digest = subject.digest["sha256"],
              digest.count == 64, EvidenceKey.hexBytes(digest) != nil else {
            throw EvidenceError("the Statement's subject is not one agent.py with a sha256 digest")
        }
        checks.append("in-toto Statement v1: subject \(shown(subject.name)) sha256:\(digest)")
        let p = statement.predicate
        for claim in p.claims {
            guard let holds = Self.holds(claim) else {
                throw EvidenceError("claim \(shown(claim.metric)): unknown comparator \(shown(claim.comparator))")
            }
            guard holds == claim.passed else {
                throw EvidenceError("claim \(shown(claim.metric)) says passed=\(claim.passed), but \(claim.value) \(claim.comparator) \(claim.threshold) is \(holds)")
            }
        }
        if !p.claims.isEmpty {
            checks.append("claims consistent with their thresholds: " + p.claims.map {
                "\(shown($0.metric)) \($0.value) \($0.comparator) \($0.threshold) \($0.passed ? "passed" : "failed") (n=\($0.sampleSize))"
            }.joined(separator: "; "))
        }

        if let split = bundle.reveal?.split {
            guard let committed = p.split else { throw EvidenceError("a split is revealed but the Statement commits to none") }
            guard let salt = EvidenceKey.hexBytes(split.salt), salt.count == 32 else { throw EvidenceError("the revealed split's salt is not 32 bytes of hex") }
            guard SplitCommitment.commit(train: split.train, test: split.test, salt: salt) == committed.commitment,
                  split.train.count == committed.train, split.test.count == committed.test else {
                throw EvidenceError("the revealed split does not match the commitment \(committed.commitment) signed in the Statement")
            }
            checks.append("revealed split matches commitment \(committed.commitment) (\(split.train.count) train, \(split.test.count) held-out)")
        }
        var revealed: [(String, String, Double)] = []
        for r in bundle.reveal?.rewards ?? [] {
            guard let tree = p.rewards[r.tree], let root = EvidenceKey.hexBytes(tree.root) else {
                throw EvidenceError("a \(shown(r.tree)) reward is revealed but the Statement has no \(shown(r.tree)) root")
            }
            let path = r.path.compactMap(EvidenceKey.hexBytes)
            guard path.count == r.path.count,
                  MerkleTree.verify(leaf: Array(r.leaf.utf8), index: r.index, size: tree.size, path: path, root: root) else {
                throw EvidenceError("the revealed \(shown(r.tree)) leaf \(r.index) is not in the tree whose root the Statement signs (\(shown(tree.root)))")
            }
            guard let (task, reward) = RewardLeaf.read(r.leaf) else { throw EvidenceError("the revealed \(shown(r.tree)) leaf \(r.index) is not a reward leaf") }
            revealed.append((r.tree, task, reward))
            checks.append("\(shown(r.tree)) reward of \(shown(task)): \(reward) (leaf \(r.index) of \(tree.size), audit path to root \(shown(tree.root)))")
        }
        if let split = p.split, EvidenceKey.hexBytes(split.commitment)?.count != 32 { throw EvidenceError("the split commitment is not a SHA-256") }
        return Report(statement: statement, keyID: EvidenceKey.keyID(own), keyTrusted: trusted != nil, checks: checks, revealedRewards: revealed)
    }

    /// Whether a claim's comparison holds, by the rule the gate decides it with (GateRules):
    /// the suite's pass rate exactly (a rate below the threshold is rejected however close),
    /// a held-out score with 1e-9 of floating-point noise in its mean (never a tie into a
    /// win), the paired rule's p-value exactly. scripts/verify-evidence.py applies the same. Nil for an unknown comparator.
    public static func holds(_ claim: EvidenceClaim) -> Bool? {
        let exact = claim.metric == "suite_pass_rate"
        switch claim.comparator {
        case ">": return exact ? claim.value > claim.threshold : claim.value - claim.threshold > 1e-9
        case ">=": return exact ? claim.value >= claim.threshold : claim.value >= claim.threshold - 1e-9
        // The paired rule's p-value against gate.alpha, exactly as the gate compares them.
        case "<=": return claim.value <= claim.threshold
        default: return nil
        }
    }

    /// Anything of the bundle put on a terminal: every control, C1 and format character
    /// escaped (a bundle's text could otherwise print "ok" lines of its own, or hide ours),
    /// nothing cut short that could make two ids look the same.
    public static func shown(_ s: String) -> String { printable(s, limit: 4096) }
}
