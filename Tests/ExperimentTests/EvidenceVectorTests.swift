import Crypto
@testable import Experiment
@testable import Evidence
@testable import ExperimentModel
import Foundation
import Testing
import TestSupport

/// One set of bundles, written to a directory with a `vectors.json` naming each and whether
/// it verifies, that both verifiers run: `autoharness evidence verify`'s code and
/// scripts/verify-evidence.py (securesystemslib, in-toto). Each encoding one of them took and
/// the other refused (URL-safe base64, a boolean or 1.0 index, upper-case hex), and a claim
/// at the edge of the gate's rule, must get the same answer from both.
struct EvidenceVectorTests {
    static let encoder: JSONEncoder = {
        let e = JSONEncoder()
        e.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return e
    }()

    struct Parts {
        var suiteRate = 0.9
        var suitePassed = true
        var rootText: ((String) -> String) = { $0 }
        var exportedAt = "2026-11-28T00:00:00Z"
    }

    /// A gate bundle with a suite and a held-out claim, a held-out reward tree of three
    /// leaves, a split commitment; the split and leaf 1 revealed.
    static func bundle(_ parts: Parts, key: Curve25519.Signing.PrivateKey) throws -> String {
        let leaves = ["t-a", "t-b", "t-c"].map { RewardLeaf.make(task: $0, reward: 1) }
        let bytes = leaves.map { Array($0.utf8) }
        let salt = [UInt8](repeating: 0xab, count: 32)
        let train = ["t-d", "t-e"], test = ["t-a", "t-b", "t-c"]
        let pointer = LedgerPointer(seq: 1, hash: String(repeating: "a", count: 64))
        let predicate = GatePredicate(
            kind: "gate", benchmark: "local", harness: .init(binaries: []),
            gate: .init(attempt: 1, outcome: "accepted", accepted: true, reason: "accepted", started: pointer, decided: pointer),
            claims: [EvidenceClaim(metric: "suite_pass_rate", comparator: ">=", threshold: 0.9, value: parts.suiteRate, passed: parts.suitePassed, sampleSize: 10),
                     EvidenceClaim(metric: "val_score", comparator: ">", threshold: 0.25, value: 0.5, passed: true, sampleSize: 3)],
            policies: [], taskFiles: [],
            split: SplitDigest(commitment: SplitCommitment.commit(train: train, test: test, salt: salt), train: 2, test: 3, committedAt: pointer),
            rewards: ["held-out": RewardTree(root: parts.rootText(WorkDigest.hex(MerkleTree.root(bytes))), size: 3)],
            ledger: .init(genesis: pointer, head: pointer, rows: 2), host: .init(kernel: "k", findings: [:], measuredAt: "t"), violations: [:],
            exportedAt: parts.exportedAt)
        let statement = Statement(subject: [.init(name: "agent/agent.py", digest: ["sha256": String(repeating: "0", count: 64)])], predicate: predicate)
        var b = EvidenceBundle(dsseEnvelope: try DSSEEnvelope.sign(Array(try encoder.encode(statement)), type: EvidenceFormat.payloadType, with: key),
                               verificationKey: EvidenceKey.sslib(key.publicKey))
        b.reveal = .init(split: .init(salt: WorkDigest.hex(salt), train: train, test: test),
                         rewards: [.init(tree: "held-out", index: 1, leaf: leaves[1], path: MerkleTree.auditPath(1, bytes).map(WorkDigest.hex))])
        return String(decoding: try encoder.encode(b), as: UTF8.self)
    }

    @Test("both verifiers accept and refuse the same bundles: canonical standard base64 only, lower-case hex only, integer indices only, a suite claim held to the gate's exact rule, the held-out claim to its 1e-9")
    func sharedVectors() throws {
        let python = try EvidenceTools.python()
        let dir = try TempDir()
        let key = Curve25519.Signing.PrivateKey()
        try Self.encoder.encode(EvidenceKey.sslib(key.publicKey)).write(to: URL(fileURLWithPath: dir.path + "/key.json"))
        let good = try Self.bundle(Parts(), key: key)

        // A signature with '+' or '/' in its base64 (signing is deterministic: vary a signed field).
        var urlSafe = ""
        for n in 0..<64 {
            var p = Parts()
            p.exportedAt = "2026-11-28T00:00:\(n)Z"
            let text = try Self.bundle(p, key: key)
            let sig = try #require(text.range(of: #""sig":"[^"]*""#, options: .regularExpression)).map { text[$0] } ?? ""
            if sig.contains("+") || sig.contains("/") {
                urlSafe = text.replacingOccurrences(of: sig, with: sig.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_"))
                break
            }
        }
        try #require(!urlSafe.isEmpty)
        func replacing(_ pattern: String, in text: String, _ change: (String) -> String) throws -> String {
            let r = try #require(text.range(of: pattern, options: .regularExpression), "\(pattern) not in the bundle")
            return text.replacingCharacters(in: r, with: change(String(text[r])))
        }
        var below = Parts()
        below.suiteRate = 0.9 - 5e-10  // the gate rejects it (rate < threshold): the claim must say failed
        below.suitePassed = false
        var belowClaimedPassed = below
        belowClaimedPassed.suitePassed = true
        var upperRoot = Parts()
        upperRoot.rootText = { $0.uppercased() }

        let vectors: [(name: String, text: String, verifies: Bool)] = [
            ("as exported", good, true),
            ("suite rate 5e-10 below the threshold, claimed failed (as the gate rejected it)", try Self.bundle(below, key: key), true),
            ("suite rate 5e-10 below the threshold, claimed passed", try Self.bundle(belowClaimedPassed, key: key), false),
            ("a signed tree root in upper-case hex", try Self.bundle(upperRoot, key: key), false),
            ("the signature in URL-safe base64", urlSafe, false),
            ("a revealed leaf's index as 1.0", try replacing(#""index":1"#, in: good) { $0 + ".0" }, false),
            ("a revealed leaf's index as true", try replacing(#""index":1"#, in: good) { _ in #""index":true"# }, false),
            ("the revealed salt in upper-case hex", try replacing(#""salt":"(ab)+""#, in: good) { $0.uppercased().replacingOccurrences(of: "SALT", with: "salt") }, false),
            ("an audit path entry in upper-case hex", try replacing(#""path":\["[0-9a-f]{64}""#, in: good) { "\"path\":[" + $0.dropFirst(8).uppercased() }, false),
            ("the verification key in upper-case hex", try replacing(#""public":"[0-9a-f]{64}""#, in: good) { "\"public\":" + $0.dropFirst(9).uppercased() }, false),
        ]
        var listing: [[String: Any]] = []
        for (i, v) in vectors.enumerated() {
            let file = dir.path + "/vector-\(i).json"
            try v.text.write(toFile: file, atomically: true, encoding: .utf8)
            listing.append(["name": v.name, "file": file, "verifies": v.verifies])
        }
        try JSONSerialization.data(withJSONObject: listing, options: [.sortedKeys]).write(to: URL(fileURLWithPath: dir.path + "/vectors.json"))

        for (i, v) in vectors.enumerated() {
            let file = dir.path + "/vector-\(i).json"
            let ours = try runProcess(Built.autoharness, ["evidence", "verify", file, "--key", dir.path + "/key.json"])
            let reference = try runProcess(python, [Built.packageRoot + "/scripts/verify-evidence.py", file, "--key", dir.path + "/key.json"])
            #expect((ours.status == 0) == v.verifies, "autoharness, \(v.name): \(ours.status) \(ours.stdout)\(ours.stderr)")
            #expect((reference.status == 0) == v.verifies, "verify-evidence.py, \(v.name): \(reference.status) \(reference.stdout)\(reference.stderr)")
        }

        // Without a key neither verifies anything; with --allow-untrusted-key both check integrity.
        let file = dir.path + "/vector-0.json"
        let ours = try runProcess(Built.autoharness, ["evidence", "verify", file])
        let reference = try runProcess(python, [Built.packageRoot + "/scripts/verify-evidence.py", file])
        #expect(ours.status == 2 && ours.stderr.contains("no --key"), "\(ours.stdout)\(ours.stderr)")
        #expect(reference.status == 1 && reference.stdout.contains("no --key"), "\(reference.stdout)\(reference.stderr)")
        #expect(try runProcess(Built.autoharness, ["evidence", "verify", file, "--allow-untrusted-key"]).status == 0)
        #expect(try runProcess(python, [Built.packageRoot + "/scripts/verify-evidence.py", file, "--allow-untrusted-key"]).status == 0)
    }

    @Test("the suite claim is the gate's decision: passed exactly when GateRules.suite accepts")
    func suiteClaimIsTheGatesRule() {
        for (passed, total, threshold) in [(9, 10, 0.9), (8, 10, 0.9), (2, 3, 0.6666666666666667), (2, 3, 0.66666666667), (0, 1, 0.0)] {
            let rate = Double(passed) / Double(total)
            let claim = EvidenceClaim(metric: "suite_pass_rate", comparator: ">=", threshold: threshold, value: rate,
                                      passed: GateRules.suite(passed: passed, total: total, threshold: threshold) == nil, sampleSize: total)
            #expect(EvidenceVerifier.holds(claim) == claim.passed, "\(passed)/\(total) against \(threshold)")
        }
    }
}
