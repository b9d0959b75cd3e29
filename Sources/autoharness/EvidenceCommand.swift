import ArgumentParser
import Evidence
import Experiment
import ExperimentModel
import Foundation
import SandboxCLI
import SupervisorIO

struct EvidenceCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "evidence",
        abstract: "Signed evidence of a gate: export a bundle, verify one offline, print the signing key.",
        discussion: """
            A bundle is an in-toto Statement v1 in a DSSE envelope signed with Ed25519, whose \
            subject is the agent.py a gate judged and whose predicate holds what the judgement \
            stood on: the criteria recorded before the gate ran, its claims (suite pass rate, \
            val_score against the bar), the autoharness binaries, every policy as resolved, the \
            held-out runtime (the guest kernel and initramfs by digest when a VM ran it), the \
            task files, the split's salted commitment made at prepare, an RFC 6962 root over each \
            split's per-task rewards, the ledger head and violation counts. `verify` needs only \
            the bundle (and the key you trust). docs/operations.md: Checking a claimed score.
            """,
        subcommands: [EvidenceExport.self, EvidenceVerify.self, EvidenceKeyCommand.self])
}

/// The key a bundle is signed with: `--key FILE` or the experiment's own.
struct EvidenceKeyOptions: ParsableArguments {
    @Option(help: "Sign with this Ed25519 key (a PKCS#8 PEM: `openssl genpkey -algorithm ed25519 -out FILE`) instead of the experiment's own (DIR/.autoharness/evidence-key, made on first use).")
    var key: String?

    func load(_ layout: ExperimentLayout) throws -> EvidenceSigningKey {
        if let key { return try EvidenceKey.loadOperatorKey(key) }
        return try EvidenceKey.load(orCreateAt: layout.privateDirectory + "/evidence-key")
    }
}

struct EvidenceExport: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write the signed evidence bundle of one gate attempt (or of prepare).",
        discussion: """
            Operator only (the coding agent's broker refuses it). Reads the ledger; runs nothing. \
            The held-out split's per-task rewards are in the bundle only as a Merkle root unless \
            you reveal a task with --reveal-task, and the split only as a salted commitment \
            unless you pass --reveal-split: both disclose held-out information, so reveal to \
            whom you would show the held-out split.
            """)

    @OptionGroup var experiment: ExperimentOptions
    @OptionGroup var signing: EvidenceKeyOptions

    @Argument(help: "The gate attempt (as `status` numbers them), `prepare`, or `last` (default: the last attempt with evidence).")
    var gate: String = "last"

    @Option(name: [.customShort("o"), .customLong("out")], help: "Where to write the bundle (default: DIR/evidence/gate-N.intoto.json; `-` for standard output).")
    var out: String?

    @Flag(help: "Include the split and its salt, so a reader can check them against the signed commitment.")
    var revealSplit = false

    @Option(name: .customLong("reveal-task"), help: "Include this task's reward leaf and its audit path (repeatable).")
    var revealTasks: [String] = []

    func run() throws {
        let s = try experiment.supervisor("evidence export", exclusive: false)
        let attempt: Int
        switch gate {
        case "prepare": attempt = 0
        case "last":
            guard let last = try s.evidenceAttempts().last else { throw ValidationError("the ledger holds no evidence yet: run `autoharness prepare` first") }
            attempt = last
        default:
            guard let n = Int(gate), n > 0 else { throw ValidationError("GATE must be an attempt number, `prepare` or `last`, not \(gate)") }
            attempt = n
        }
        let key = try signing.load(s.layout)
        let bundle = try s.exportEvidence(attempt: attempt, reveal: .init(split: revealSplit, tasks: revealTasks), key: key)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
        let bytes = Array(try encoder.encode(bundle)) + [0x0A]
        if out == "-" {
            FileHandle.standardOutput.write(Data(bytes))
            return
        }
        let path = out ?? s.layout.root + "/evidence/" + (attempt == 0 ? "prepare" : "gate-\(attempt)") + ".intoto.json"
        if out == nil {
            try FileManager.default.createDirectory(atPath: s.layout.root + "/evidence", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        }
        // A bundle that reveals the split or a held-out reward is the operator's alone until
        // they choose to share it.
        let revealing = revealSplit || !revealTasks.isEmpty
        try AtomicFile.write(bytes, to: path, mode: revealing ? 0o600 : 0o644)
        print("\(path): \(attempt == 0 ? "prepare" : "gate attempt \(attempt)"), signed by ed25519 key \(EvidenceKey.keyID(key.publicKey))")
    }
}

struct EvidenceVerify: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Check an evidence bundle offline: the signature, the Statement, every reveal.",
        discussion: """
            Needs no experiment directory and no network. Pass the key the operator published \
            (`autoharness evidence key`) with --key: a bundle signed by any other key is refused. \
            Without --key nothing is verified and the exit is 2 (anyone can sign a bundle with a \
            key of their own that says `accepted`), unless --allow-untrusted-key asks only \
            whether the bundle is intact under the key it carries; its key id is printed to compare \
            by hand. Exit 0 when everything verifies, 2 naming the first thing that does not.
            """)

    @Argument(help: "The bundle file (`-` for standard input).")
    var bundle: String

    @Option(help: "The public key you trust: a file or text holding its hex (securesystemslib), base64, a PEM, or `evidence key --json`'s object.")
    var key: String?

    @Flag(help: "Without --key: check the bundle against the key it carries (integrity only, not who signed it) instead of refusing it.")
    var allowUntrustedKey = false

    @Flag(help: "Print the verified Statement as JSON instead of the summary.")
    var json = false

    func run() throws {
        guard key != nil || allowUntrustedKey else {
            throw EvidenceError("no --key: a bundle verified against the key it carries could have been signed by anyone; pass the operator's published key (--key), or --allow-untrusted-key to check integrity only")
        }
        let bytes: [UInt8]
        if bundle == "-" {
            // Read at most one byte past the cap: a larger input is refused, not held in memory.
            var read: [UInt8] = []
            while read.count <= EvidenceVerifier.maxBundle {
                let chunk = FileHandle.standardInput.readData(ofLength: min(1 << 20, EvidenceVerifier.maxBundle + 1 - read.count))
                if chunk.isEmpty { break }
                read += chunk
            }
            bytes = read
        } else {
            switch InputFile.read(bundle, cap: EvidenceVerifier.maxBundle) {
            case .success(let b): bytes = b
            case .failure(let p): throw ValidationError("\(bundle): \(p.explanation("an evidence bundle"))")
            }
        }
        var trusted: EvidencePublicKey?
        if let key {
            let text: String
            if case .success(let b) = InputFile.read(key, cap: 64 << 10) { text = String(decoding: b, as: UTF8.self) } else { text = key }
            guard let k = EvidenceKey.parsePublic(text) else { throw ValidationError("--key \(key): not an Ed25519 public key (hex, base64, PEM or a key object)") }
            trusted = k
        }
        let report = try EvidenceVerifier.verify(bytes, trusted: trusted)
        if json {
            // Who signed and what was checked beside the Statement: a reader of this output
            // must not take a bundle's own key for the operator's.
            struct Output: Encodable {
                var keyid: String
                var keyTrusted: Bool
                var checks: [String]
                var revealedRewards: [[String: String]]
                var statement: Statement
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted, .withoutEscapingSlashes]
            let out = Output(keyid: report.keyID, keyTrusted: report.keyTrusted, checks: report.checks,
                             revealedRewards: report.revealedRewards.map { ["tree": $0.tree, "task": $0.task, "reward": String($0.reward)] },
                             statement: report.statement)
            print(String(decoding: try encoder.encode(out), as: UTF8.self))
            return
        }
        let p = report.statement.predicate
        let what = p.kind == "prepare" ? "prepare (baseline)" : "gate attempt \(p.gate?.attempt ?? 0): \(EvidenceVerifier.shown(p.gate?.outcome ?? ""))"
        print("verified: \(what) of \(EvidenceVerifier.shown(p.benchmark))")
        for c in report.checks { print("  ok  \(c)") }
        if !report.keyTrusted {
            print("  !!  signed by the key the bundle carries (\(report.keyID)); pass --key with the operator's published key to know who signed it")
        }
    }
}

struct EvidenceKeyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "key",
        abstract: "Print the public half of the experiment's evidence key (made on first use): its key id and PEM.")

    @OptionGroup var experiment: ExperimentOptions
    @OptionGroup var signing: EvidenceKeyOptions

    @Flag(help: "Print securesystemslib's key object (JSON) instead.")
    var json = false

    func run() throws {
        let key = try signing.load(try experiment.layout()).publicKey
        if json {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            print(String(decoding: try encoder.encode(EvidenceKey.sslib(key)), as: UTF8.self))
            return
        }
        print("keyid \(EvidenceKey.keyID(key))")
        print(EvidenceKey.pem(key), terminator: "")
    }
}

struct AuditCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "audit",
        abstract: "Export the audit in OCSF 1.8 (JSON lines) for a SIEM or a security lake.",
        subcommands: [AuditExport.self])
}

struct AuditExport: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "export",
        abstract: "Write a sandbox audit log (--audit FILE) or an experiment's ledger as OCSF 1.8 events.",
        discussion: """
            Refused syscalls, voided rewards and limits become Detection Findings (2004), egress \
            through the proxy Network Activity (4001) with the sandbox and destination, requests \
            the inference gate judged API Activity (6003), and an experiment's gates (start, \
            held-out phase, decision) API Activity with their ledger row; an experiment's export \
            also holds every event of the coding agent's sandbox (`run`'s audit). Operator only: an \
            experiment's export holds held-out violations. Validated against OCSF's 1.8.0 schema \
            in CI (test: OCSFTests.swift, validates).
            """)

    @OptionGroup var experiment: ExperimentOptions

    @Option(help: "A sandbox audit log (`sandbox exec --audit FILE`) to convert instead of the experiment's ledger.")
    var audit: String?

    @Option(help: "The output format; only ocsf.")
    var format: String = "ocsf"

    @Option(name: [.customShort("o"), .customLong("out")], help: "Where to write the events (default: standard output).")
    var out: String?

    func run() throws {
        guard format == "ocsf" else { throw ValidationError("--format \(format): the only format is ocsf") }
        let events: [[String: Any]]
        if let audit {
            switch InputFile.read(audit, cap: 1 << 30) {
            case .success(let bytes):
                let r = OCSF.events(auditLog: bytes)
                if r.skipped > 0, let first = r.firstSkipped {
                    printErr("audit export: \(audit):\(first): not an audit event; \(r.skipped) such line(s) skipped")
                }
                events = r.events
            case .failure(let p): throw ValidationError("\(audit): \(p.explanation("an audit log"))")
            }
        } else {
            let s = try experiment.supervisor("audit export", exclusive: false)
            // The ledger's rows, then each event of the coding agent's sandbox (`run`'s audit).
            var all = OCSF.events(ledger: try s.ledger.records())
            let runAudit = s.layout.runDirectory + "/audit.jsonl"
            if case .success(let bytes) = InputFile.read(runAudit, cap: 1 << 30) { all += OCSF.events(auditLog: bytes).events }
            events = all
        }
        let bytes = try OCSF.lines(events)
        if let out { try AtomicFile.write(bytes, to: out, mode: 0o600) } else { FileHandle.standardOutput.write(Data(bytes)) }
    }
}
