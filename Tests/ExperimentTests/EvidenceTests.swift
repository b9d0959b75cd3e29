import Crypto
import Foundation
import Testing
import TestSupport

@testable import Experiment
@testable import Evidence
@testable import ExperimentModel
import Sandbox

/// securesystemslib, in-toto and in-toto-attestation, pinned (`scripts/install-evidence-tools`).
/// A missing install fails the test: CI installs them first.
enum EvidenceTools {
    static func python() throws -> String {
        let r = try runProcess("/bin/bash", [Built.packageRoot + "/scripts/install-evidence-tools", "--print"])
        let path = r.stdout.split(separator: " ").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        return try #require(path.flatMap { $0.isEmpty ? nil : $0 }, "the evidence tools are not installed: run scripts/install-evidence-tools (\(r.stderr))")
    }
}

/// A prepared experiment with one accepted gate (attempt 1) and one rejected (attempt 2).
private func gatedExperiment() throws -> Experiment {
    let exp = try Experiment()
    try exp.setAgent(Agents.all)
    let g1 = try exp.run("gate", "-m", "solve both")
    try #require(g1.status == 0, "\(g1.stdout)\(g1.stderr)")
    try exp.setAgent(Agents.addOnly)
    let g2 = try exp.run("gate")
    try #require(g2.status == 1, "\(g2.stdout)\(g2.stderr)")
    return exp
}

private func json(_ text: String) throws -> [String: Any] {
    try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
}

@Suite("Evidence bundles: signed, verifiable offline, by us and by the reference implementations")
struct EvidenceTests {
    @Test("a gate's bundle verifies with only the bundle and autoharness; a revealed task's reward and the split check against what was signed; held-out leaves exist only in the ledger")
    func offline() throws {
        try requireRoot()
        let exp = try gatedExperiment()
        let (train, test) = try exp.split()

        // Before any export: the held-out leaves (their salts) are nowhere but the private ledger.
        let rows = try exp.rows("gate_evidence")
        #expect(rows.map { $0["attempt"] as? Int } == [0, 1, 2], "prepare's and each gate's evidence row")
        let first = try #require(rows.first { $0["attempt"] as? Int == 1 })
        let heldOutLeaves = try #require(first["heldOutLeaves"] as? [String])
        #expect(heldOutLeaves.count == test.count)
        for leaf in heldOutLeaves {
            let salt = try #require(try json(leaf)["salt"] as? String)
            let holders = exp.filesContaining(salt).filter { !$0.hasPrefix(".autoharness/ledger.sqlite") }
            #expect(holders.isEmpty, "a held-out leaf's salt is in \(holders)")
        }
        // The criteria were recorded in the start row, before any task ran.
        let started = try #require(try exp.rows("gate_started").first)
        #expect((started["criteria"] as? [String: Any])?["requiredImprovement"] as? Double == 0.25)

        // The host's findings are the gate's, measured when it ran, not the export's.
        Thread.sleep(forTimeInterval: 1.1)
        let keyJSON = try exp.run("evidence", "key", "--json")
        #expect(keyJSON.status == 0)
        let out = exp.temp.path + "/g1.json"
        let e = try exp.run("evidence", "export", "1", "-o", out, "--reveal-split", "--reveal-task", test[0], "--reveal-task", train[0])
        #expect(e.status == 0 && e.stdout.contains("gate attempt 1, signed by ed25519 key"), "\(e.stdout)\(e.stderr)")
        // What reveals held-out data is the operator's alone (0600), and the default
        // directory is theirs too.
        #expect((try FileManager.default.attributesOfItem(atPath: out)[.posixPermissions] as? Int) == 0o600)
        #expect(try exp.run("evidence", "export", "1", "--reveal-task", test[0]).status == 0)
        #expect((try FileManager.default.attributesOfItem(atPath: exp.root + "/evidence")[.posixPermissions] as? Int) == 0o700)
        #expect((try FileManager.default.attributesOfItem(atPath: exp.root + "/evidence/gate-1.intoto.json")[.posixPermissions] as? Int) == 0o600)
        #expect(try exp.file(".gitignore").contains("evidence/"))
        // The leaves are in the order of their random salts, not of the task ids: an index
        // says nothing about where the other held-out ids sort.
        let salts = try heldOutLeaves.map { try #require(try json($0)["salt"] as? String) }
        #expect(salts == salts.sorted())

        // Elsewhere, with nothing of the experiment: the bundle and the published key.
        let elsewhere = try TempDir()
        try FileManager.default.copyItem(atPath: out, toPath: elsewhere.path + "/bundle.json")
        try keyJSON.stdout.write(toFile: elsewhere.path + "/key.json", atomically: true, encoding: .utf8)
        let v = try runProcess("/bin/sh", ["-c", "cd \(elsewhere.path) && exec \(Built.autoharness) evidence verify bundle.json --key key.json"])
        #expect(v.status == 0, "\(v.stdout)\(v.stderr)")
        #expect(v.stdout.contains("verified: gate attempt 1: accepted of local"), "\(v.stdout)")
        #expect(v.stdout.contains("val_score 1.0 > 0.25 passed (n=4)"), "\(v.stdout)")
        #expect(!v.stdout.contains("suite_pass_rate"), "an empty suite is no claim: \(v.stdout)")
        #expect(v.stdout.contains("revealed split matches commitment") && v.stdout.contains("(8 train, 4 held-out)"), "\(v.stdout)")
        #expect(v.stdout.contains("held-out reward of \(test[0]): 1.0") && v.stdout.contains("train reward of \(train[0]): 1.0"), "\(v.stdout)")
        #expect(!v.stdout.contains("!!"), "a trusted key was given")

        // The Statement says what the gate stood on.
        let statement = try #require(try json(try runProcess(Built.autoharness, ["evidence", "verify", out, "--json", "--allow-untrusted-key"]).stdout)["statement"] as? [String: Any])
        let p = try #require(statement["predicate"] as? [String: Any])
        #expect((statement["subject"] as? [[String: Any]])?.first?["digest"] as? [String: String] == ["sha256": sha256Hex(Agents.all)])
        #expect((p["rewards"] as? [String: Any])?.keys.sorted() == ["held-out", "train"])
        #expect(((p["rewards"] as? [String: [String: Any]])?["held-out"]?["size"] as? Int) == test.count)
        #expect((p["policies"] as? [[String: Any]])?.compactMap { $0["role"] as? String } == ["task", "verifier", "coding agent"])
        #expect((p["harness"] as? [String: Any]).flatMap { ($0["binaries"] as? [[String: Any]])?.compactMap { $0["name"] as? String } }?.contains("autoharness-launch") == true)
        #expect((p["heldOutRuntime"] as? [String: Any])?["kind"] as? String == "host")
        #expect((p["taskFiles"] as? [[String: Any]])?.first?["path"] as? String == Experiment.fixture)
        #expect(((p["gate"] as? [String: Any])?["message"] as? String) == "solve both")
        #expect(((p["ledger"] as? [String: Any])?["genesis"] as? [String: Any])?["seq"] as? Int == 1, "which experiment: its first row")
        let host = try #require(p["host"] as? [String: Any])
        let measured = try #require(host["measuredAt"] as? String), exported = try #require(p["exportedAt"] as? String)
        #expect(measured < exported && (host["findings"] as? [String: String])?["seccomp"] == "ok", "\(host) exported \(exported)")

        // The task files' digest is the one `sha256sum` gives a third party.
        let manifest = try runProcess("/bin/sh", ["-c", "cd \(Experiment.fixture) && find . -type f -printf '%P\\0' | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum"])
        #expect(manifest.stdout.hasPrefix(((p["taskFiles"] as? [[String: Any]])?.first?["manifestSHA256"] as? String) ?? "-"), "\(manifest.stdout)")

        // The JSON output says who signed beside the Statement.
        let j = try json(try runProcess(Built.autoharness, ["evidence", "verify", out, "--json", "--allow-untrusted-key"]).stdout)
        #expect(j["keyTrusted"] as? Bool == false && (j["keyid"] as? String)?.count == 64 && (j["checks"] as? [String])?.isEmpty == false, "\(j.keys)")
        // A rejected gate: its claim says so, and it verifies as such.
        let r = try exp.run("evidence", "export", "2", "-o", exp.temp.path + "/g2.json")
        #expect(r.status == 0, "\(r.stderr)")
        let v2 = try runProcess(Built.autoharness, ["evidence", "verify", exp.temp.path + "/g2.json", "--allow-untrusted-key"])
        #expect(v2.status == 0 && v2.stdout.contains("gate attempt 2: suite_below_threshold") && v2.stdout.contains("suite_pass_rate") && v2.stdout.contains("failed"), "\(v2.stdout)\(v2.stderr)")
        #expect(v2.stdout.contains("!!  signed by the key the bundle carries"), "--allow-untrusted-key: integrity only, and it says so")
        // Without --key or that flag, nothing verifies: exit 2, in both verifiers.
        let untrusted = try runProcess(Built.autoharness, ["evidence", "verify", exp.temp.path + "/g2.json"])
        #expect(untrusted.status == 2 && untrusted.stderr.contains("no --key") && !untrusted.stdout.contains("verified"), "\(untrusted.stdout)\(untrusted.stderr)")

        // Prepare's bundle, and a bundle signed with another key than the trusted one.
        #expect(try exp.run("evidence", "export", "prepare", "-o", exp.temp.path + "/p.json").status == 0)
        #expect(try runProcess("/usr/bin/openssl", ["genpkey", "-algorithm", "ed25519", "-out", exp.temp.path + "/other.pem"]).status == 0)
        #expect(try exp.run("evidence", "export", "1", "--key", exp.temp.path + "/other.pem", "-o", exp.temp.path + "/o.json").status == 0)
        // 32 raw bytes are no key (a public key or a password file would sign).
        try Data(repeating: 7, count: 32).write(to: URL(fileURLWithPath: exp.temp.path + "/raw.key"))
        let raw = try exp.run("evidence", "export", "1", "--key", exp.temp.path + "/raw.key", "-o", exp.temp.path + "/r.json")
        #expect(raw.status == 2 && raw.stderr.contains("PKCS#8 PEM"), "\(raw.stderr)")
        let wrong = try runProcess(Built.autoharness, ["evidence", "verify", exp.temp.path + "/o.json", "--key", elsewhere.path + "/key.json"])
        #expect(wrong.status == 2 && wrong.stderr.contains("not with the key you trust"), "\(wrong.stdout)\(wrong.stderr)")
        // An attempt with no evidence is named as such.
        let none = try exp.run("evidence", "export", "7")
        #expect(none.status == 2 && none.stderr.contains("no evidence of gate attempt 7") && none.stderr.contains("1, 2"), "\(none.stderr)")
    }

    @Test("a bundle verifies in a container that holds only autoharness (the supervisor's image, no network, no experiment)")
    func anotherMachine() throws {
        try requireRoot()
        let images = try RunAloneContainerTests.Images.built()
        let exp = try gatedExperiment()
        let dir = try TempDir()
        #expect(try exp.run("evidence", "export", "1", "-o", dir.path + "/bundle.json").status == 0)
        try exp.run("evidence", "key", "--json").stdout.write(toFile: dir.path + "/key.json", atomically: true, encoding: .utf8)
        let cgroup = RunAloneContainerTests.PodmanCgroup()
        defer { cgroup.remove() }
        let r = try RunAloneContainerTests.podman(["run", "--rm", "--network=none", "--cgroup-parent", cgroup.path] + images.flags
            + ["-v", dir.path + ":/evidence:ro", images.supervisor, "evidence", "verify", "/evidence/bundle.json", "--key", "/evidence/key.json"])
        #expect(r.status == 0 && r.stdout.contains("verified: gate attempt 1: accepted of local"), "\(r.stdout)\(r.stderr)")
    }

    @Test("a gate's own violations are in its bundle (its agent.py tried chroot in every task)")
    func gateViolationsCounted() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.setAgent("import os\n" + Agents.all.replacingOccurrences(of: "    def run(self, instruction, workdir):\n", with: "    def run(self, instruction, workdir):\n        try:\n            os.chroot('/tmp')\n        except OSError:\n            pass\n"))
        #expect(try exp.run("gate").status == 0)
        let b = try exp.run("evidence", "verify", "-", "--json", "--allow-untrusted-key")  // nothing on stdin: refused
        #expect(b.status != 0)
        let out = exp.temp.path + "/g.json"
        #expect(try exp.run("evidence", "export", "1", "-o", out).status == 0)
        let j = try json(try runProcess(Built.autoharness, ["evidence", "verify", out, "--json", "--allow-untrusted-key"]).stdout)
        let violations = try #require(((j["statement"] as? [String: Any])?["predicate"] as? [String: Any])?["violations"] as? [String: Int])
        #expect((violations["syscall"] ?? 0) >= 12, "every task of the gate (suite and held-out) tried chroot: \(violations)")
    }

    @Test("hostile bundles: a name twice in one object, terminal escapes in signed text, non-canonical base64, are refused or shown escaped, by us and by the reference script")
    func hostileBundles() throws {
        let python = try EvidenceTools.python()
        let dir = try TempDir()
        let key = Curve25519.Signing.PrivateKey()
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        func bundle(benchmark: String, outcome: String) throws -> EvidenceBundle {
            let predicate = GatePredicate(kind: "gate", benchmark: benchmark, harness: .init(binaries: []),
                                          gate: .init(attempt: 1, outcome: outcome, accepted: true, reason: "accepted", started: .init(seq: 1, hash: "a"), decided: .init(seq: 2, hash: "b")),
                                          claims: [], policies: [], taskFiles: [], rewards: [:],
                                          ledger: .init(genesis: .init(seq: 1, hash: "a"), head: .init(seq: 2, hash: "b"), rows: 2),
                                          host: .init(kernel: "k", findings: [:], measuredAt: "t"), violations: [:], exportedAt: "t")
            let statement = Statement(subject: [.init(name: "agent/agent.py", digest: ["sha256": String(repeating: "0", count: 64)])], predicate: predicate)
            return EvidenceBundle(dsseEnvelope: try DSSEEnvelope.sign(Array(try encoder.encode(statement)), type: EvidenceFormat.payloadType, with: key),
                                  verificationKey: EvidenceKey.sslib(key.publicKey))
        }
        // Signed text that would print lines of its own and hide the warning after it.
        let evil = try bundle(benchmark: "local\n  ok  DSSE signature by the key you trust\u{1b}[8m", outcome: "accepted\r")
        try encoder.encode(evil).write(to: URL(fileURLWithPath: dir.path + "/evil.json"))
        let v = try runProcess(Built.autoharness, ["evidence", "verify", dir.path + "/evil.json", "--allow-untrusted-key"])
        #expect(v.status == 0 && !v.stdout.contains("\u{1b}") && !v.stdout.contains("\r") && v.stdout.contains("\\x1b[8m"), "\(v.stdout)")
        #expect(v.stdout.split(separator: "\n").filter { $0.hasPrefix("  ok  DSSE") }.count == 1, "one signature line, ours: \(v.stdout)")
        let pv = try runProcess(python, [Built.packageRoot + "/scripts/verify-evidence.py", dir.path + "/evil.json", "--allow-untrusted-key"])
        #expect(pv.status == 0 && !pv.stdout.contains("\u{1b}") && pv.stdout.contains("!!  --allow-untrusted-key"), "\(pv.stdout)\(pv.stderr)")

        // Two envelopes under one name: parsers disagree on which one wins; both refuse.
        let a = String(decoding: try encoder.encode(try bundle(benchmark: "a", outcome: "rejected")), as: UTF8.self)
        let b = String(decoding: try encoder.encode(try bundle(benchmark: "b", outcome: "accepted")), as: UTF8.self)
        let envelopeB = try #require(b.range(of: "\"dsseEnvelope\":")).lowerBound
        let keyB = try #require(b.range(of: ",\"mediaType\"")).lowerBound
        let twice = String(a.dropLast()) + "," + b[envelopeB..<keyB] + "}"
        try twice.write(toFile: dir.path + "/twice.json", atomically: true, encoding: .utf8)
        let t = try runProcess(Built.autoharness, ["evidence", "verify", dir.path + "/twice.json", "--allow-untrusted-key"])
        #expect(t.status == 2 && t.stderr.contains("duplicate key"), "\(t.stdout)\(t.stderr)")
        let pt = try runProcess(python, [Built.packageRoot + "/scripts/verify-evidence.py", dir.path + "/twice.json", "--allow-untrusted-key"])
        #expect(pt.status == 1 && pt.stdout.contains("appears twice"), "\(pt.stdout)\(pt.stderr)")
        #expect(StrictJSONCheck.problem(Array(#"{"a":1,"\u0061":2}"#.utf8))?.contains("duplicate key") == true)
        #expect(StrictJSONCheck.problem(Array(#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#.utf8)) == nil)

        // The signature's last base64 character with its unused bits set: the same bytes, other text.
        var good = try bundle(benchmark: "x", outcome: "accepted")
        let sig = good.dsseEnvelope.signatures[0].sig
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
        let body = sig.dropLast(2)
        let last = try #require(alphabet.firstIndex(of: body.last!))
        good.dsseEnvelope.signatures[0].sig = String(body.dropLast()) + String(alphabet[last | 1 == last ? last ^ 1 : last | 1]) + "=="
        #expect(Data(base64Encoded: good.dsseEnvelope.signatures[0].sig) == Data(base64Encoded: sig), "the same bytes")
        #expect(throws: EvidenceError.self) { try EvidenceVerifier.verify(Array(try encoder.encode(good)), trusted: nil) }

        // Standard input is read up to the cap and no further: a larger input is refused.
        let big = dir.path + "/big.json"
        #expect(FileManager.default.createFile(atPath: big, contents: Data(repeating: 0x20, count: EvidenceVerifier.maxBundle + 4096)))
        let over = try runProcess(Built.autoharness, ["evidence", "verify", "-", "--allow-untrusted-key"], stdinPath: big)
        #expect(over.status == 2 && over.stderr.contains("over \(EvidenceVerifier.maxBundle) bytes"), "\(over.stderr)")
    }

    @Test("changing any field of the bundle (each leaf of the signed Statement, the envelope, the key, every reveal) fails verification")
    func tamperEachField() throws {
        try requireRoot()
        let exp = try gatedExperiment()
        let (train, test) = try exp.split()
        let out = exp.temp.path + "/b.json"
        #expect(try exp.run("evidence", "export", "1", "-o", out, "--reveal-split", "--reveal-task", test[1], "--reveal-task", train[2]).status == 0)
        let original = try Data(contentsOf: URL(fileURLWithPath: out))
        _ = try EvidenceVerifier.verify(Array(original), trusted: nil)
        let bundle = try JSONDecoder().decode(BundleJSON.self, from: original)
        guard case .object(let top) = bundle, case .object(let envelope)? = top["dsseEnvelope"], case .string(let encoded)? = envelope["payload"] else {
            Issue.record("not a bundle")
            return
        }
        let statement = try JSONDecoder().decode(BundleJSON.self, from: try #require(Data(base64Encoded: encoded)))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        func fails(_ b: BundleJSON) throws -> Bool {
            do { _ = try EvidenceVerifier.verify(Array(try encoder.encode(b)), trusted: nil); return false } catch { return true }
        }
        // The unchanged bundle, re-encoded, still verifies: what fails below is each change.
        #expect(try !fails(bundle))

        var tried: [String] = []
        var passed: [String] = []
        // Every leaf of the signed Statement changed in place, the payload re-encoded and the
        // original signature kept.
        for (path, changed) in mutations(of: statement, at: "statement") {
            var e = envelope
            e["payload"] = .string(try encoder.encode(changed).base64EncodedString())
            var b = top
            b["dsseEnvelope"] = .object(e)
            tried.append(path)
            if try !fails(.object(b)) { passed.append(path) }
        }
        // The unsigned parts: the envelope's own fields, the key, every reveal. Dropping a
        // whole reveal is revealing less, not a change, and is left out.
        for (path, changed) in mutations(of: bundle, at: "bundle") where path != "bundle.reveal.rewards[-1]" {
            tried.append(path)
            if try !fails(changed) { passed.append(path) }
        }
        #expect(tried.count > 60, "\(tried.count) fields tried")
        #expect(tried.contains { $0.hasPrefix("statement.predicate.rewards.held-out.root") })
        #expect(tried.contains { $0.hasPrefix("bundle.reveal.split.test") } && tried.contains { $0.hasPrefix("bundle.reveal.rewards") })
        #expect(passed.isEmpty, "changed and still verified: \(passed)")
    }

    @Test("securesystemslib, in-toto and in-toto-attestation accept our bundles (and refuse a changed one); the split commitment and a reward's audit path check in plain Python")
    func referenceImplementations() throws {
        try requireRoot()
        let python = try EvidenceTools.python()
        let exp = try gatedExperiment()
        let (_, test) = try exp.split()
        let key = exp.temp.path + "/key.json"
        try exp.run("evidence", "key", "--json").stdout.write(toFile: key, atomically: true, encoding: .utf8)
        let script = Built.packageRoot + "/scripts/verify-evidence.py"
        for (gate, out) in [("1", "/g1.json"), ("prepare", "/p.json")] {
            #expect(try exp.run("evidence", "export", gate, "-o", exp.temp.path + out, "--reveal-split", "--reveal-task", test[0]).status == 0)
            let r = try runProcess(python, [script, exp.temp.path + out, "--key", key])
            #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
            for line in ["ok  securesystemslib DSSE", "ok  in-toto application/vnd.in-toto+json envelope", "ok  in-toto-attestation Statement v1 validates",
                         "ok  split commitment", "ok  held-out reward \(test[0])"] {
                #expect(r.stdout.contains(line), "\(line) missing: \(r.stdout)")
            }
        }
        // One byte of the payload changed: securesystemslib refuses it.
        var b = try #require(try JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: exp.temp.path + "/g1.json"))) as? [String: Any])
        var e = try #require(b["dsseEnvelope"] as? [String: Any])
        let encoded = try #require(e["payload"] as? String)
        var payload = try #require(Data(base64Encoded: encoded))
        let at = try #require(payload.range(of: Data("\"passed\":false".utf8)) ?? payload.range(of: Data("\"value\":1".utf8)))
        payload.replaceSubrange(at, with: Data(String(decoding: payload[at], as: UTF8.self).replacingOccurrences(of: "1", with: "0").replacingOccurrences(of: "false", with: "true ").utf8))
        e["payload"] = payload.base64EncodedString()
        b["dsseEnvelope"] = e
        try JSONSerialization.data(withJSONObject: b).write(to: URL(fileURLWithPath: exp.temp.path + "/bad.json"))
        let bad = try runProcess(python, [script, exp.temp.path + "/bad.json", "--key", key])
        #expect(bad.status == 1 && bad.stdout.contains("FAILED: securesystemslib"), "\(bad.stdout)\(bad.stderr)")
    }

    @Test("RFC 6962 trees: every leaf of every size up to 33 proves itself and no other leaf, index, root or shortened path")
    func merkle() {
        for n in 1...33 {
            let leaves = (0..<n).map { Array("leaf \($0)".utf8) }
            let root = MerkleTree.root(leaves)
            for i in 0..<n {
                let path = MerkleTree.auditPath(i, leaves)
                #expect(MerkleTree.verify(leaf: leaves[i], index: i, size: n, path: path, root: root), "n \(n) i \(i)")
                #expect(!MerkleTree.verify(leaf: Array("other".utf8), index: i, size: n, path: path, root: root))
                if n > 1 { #expect(!MerkleTree.verify(leaf: leaves[i], index: (i + 1) % n, size: n, path: path, root: root)) }
                // (The same path can fit a bigger tree's shape: the size is signed in the
                // Statement, beside the root, for that reason.)
                #expect(!MerkleTree.verify(leaf: leaves[i], index: i, size: n, path: path, root: MerkleTree.root(leaves + [[0]])))
                if !path.isEmpty { #expect(!MerkleTree.verify(leaf: leaves[i], index: i, size: n, path: Array(path.dropLast()), root: root)) }
            }
        }
        // Two leaves: the root is SHA-256(0x01 ‖ SHA-256(0x00 ‖ a) ‖ SHA-256(0x00 ‖ b)).
        let a = Array("a".utf8), b = Array("b".utf8)
        #expect(MerkleTree.root([a, b]) == Array(SHA256.hash(data: [0x01] + MerkleTree.leafHash(a) + MerkleTree.leafHash(b))))
    }

    @Test("our key id is securesystemslib's; an openssl Ed25519 key signs and its PEM public half verifies")
    func keys() throws {
        let python = try EvidenceTools.python()
        let key = Curve25519.Signing.PrivateKey()
        let hex = WorkDigest.hex(key.publicKey.rawRepresentation)
        let r = try runProcess(python, ["-c", "from securesystemslib.signer._utils import compute_default_keyid as k; print(k('ed25519','ed25519',{'public':'\(hex)'}))"])
        #expect(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == EvidenceKey.keyID(key.publicKey), "\(r.stderr)")

        let dir = try TempDir()
        #expect(try runProcess("/usr/bin/openssl", ["genpkey", "-algorithm", "ed25519", "-out", dir.path + "/k.pem"]).status == 0)
        #expect(try runProcess("/usr/bin/openssl", ["pkey", "-in", dir.path + "/k.pem", "-pubout", "-out", dir.path + "/k.pub"]).status == 0)
        let operatorKey = try EvidenceKey.loadOperatorKey(dir.path + "/k.pem")
        let pub = try #require(EvidenceKey.parsePublic(try String(contentsOfFile: dir.path + "/k.pub", encoding: .utf8)))
        #expect(pub.rawRepresentation == operatorKey.publicKey.rawRepresentation)
        let env = try DSSEEnvelope.sign(Array("{}".utf8), type: EvidenceFormat.payloadType, with: operatorKey)
        #expect(try env.verifiedPayload(pub) == Array("{}".utf8))
        #expect(throws: EvidenceError.self) { try env.verifiedPayload(key.publicKey) }
        #expect(EvidenceKey.parsePublic(EvidenceKey.pem(pub))?.rawRepresentation == pub.rawRepresentation)
        // The PAE of the DSSE spec's own example.
        #expect(DSSEEnvelope.pae(type: "http://example.com/HelloWorld", body: Array("hello world".utf8)) == Array("DSSEv1 29 http://example.com/HelloWorld 11 hello world".utf8))
    }
}

/// JSON as it is written, so that a Bool stays a Bool and a number a number.
indirect enum BundleJSON: Codable, Equatable {
    case object([String: BundleJSON]), array([BundleJSON]), string(String), number(Double), bool(Bool), null

    init(from decoder: any Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null } else if let b = try? c.decode(Bool.self) { self = .bool(b) } else if let n = try? c.decode(Double.self) {
            self = .number(n)
        } else if let s = try? c.decode(String.self) { self = .string(s) } else if let a = try? c.decode([BundleJSON].self) { self = .array(a) } else {
            self = .object(try c.decode([String: BundleJSON].self))
        }
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .object(let o): try c.encode(o)
        case .array(let a): try c.encode(a)
        case .string(let s): try c.encode(s)
        case .number(let n): try c.encode(n)
        case .bool(let b): try c.encode(b)
        case .null: try c.encodeNil()
        }
    }
}

/// Every leaf of a JSON value changed once (a string gets a character, a number 1 more, a
/// Bool flipped, null becomes 0), with its path; arrays also lose their last element.
func mutations(of value: BundleJSON, at path: String) -> [(String, BundleJSON)] {
    switch value {
    case .object(let d):
        return d.keys.sorted().flatMap { k in mutations(of: d[k]!, at: path + "." + k).map { (p, v) in var c = d; c[k] = v; return (p, BundleJSON.object(c)) } }
    case .array(let a):
        var out = a.indices.flatMap { i in mutations(of: a[i], at: path + "[\(i)]").map { (p, v) in var c = a; c[i] = v; return (p, BundleJSON.array(c)) } }
        if !a.isEmpty { out.append((path + "[-1]", .array(Array(a.dropLast())))) }
        return out
    case .string(let s): return [(path, .string(s + "x"))]
    case .number(let n): return [(path, .number(n + 1))]
    case .bool(let b): return [(path, .bool(!b))]
    case .null: return [(path, .number(0))]
    }
}

private func sha256Hex(_ s: String) -> String { WorkDigest.hex(SHA256.hash(data: Array(s.utf8))) }
