import Benchmark
import Crypto
import Evidence
import ExperimentModel
import Foundation
import Ledger
import Sandbox
import SandboxPolicy
import SupervisorIO

// `autoharness evidence export`: a signed in-toto Statement about one gate (or `prepare`),
// built from the ledger alone (the rows the gate wrote: its criteria before it ran, its
// per-task reward leaves and measurements with its answer) plus the exporting host's doctor
// findings. `EvidenceVerifier` checks one with nothing but the bundle.

struct EvidenceOperation {
    let experiment: ExperimentContext

    /// The criteria a gate starting now is judged by (its `gate_started` row).
    func gateCriteria(_ s: ExperimentState, testTasks: Int) -> GateCriteria {
        let required = experiment.config.gate.accept == .margin ? GateRules.requiredImprovement(testTasks: testTasks, minImprovement: experiment.config.gate.minImprovement) : 0
        return GateCriteria(acceptRule: experiment.config.gate.accept.rawValue, suiteThreshold: experiment.config.threshold, bestBefore: s.best ?? 0,
                            requiredImprovement: required, testTasks: testTasks, timeoutPolicy: experiment.config.timeoutPolicy.rawValue,
                            rule: GateRules.ruleText(testTasks: testTasks, config: experiment.config),
                            trials: experiment.config.gate.trials > 1 ? experiment.config.gate.trials : nil, alpha: experiment.config.gate.accept == .paired ? experiment.config.gate.alpha : nil,
                            pairedAgainst: experiment.config.gate.accept == .paired ? s.bestHeldOut?.attempt : nil,
                            infraRetries: experiment.countsVendorFailures ? experiment.config.gate.infraRetries : nil,
                            ladderStep: experiment.config.gate.disclosure == .ladder ? ScoreLadder.step(experiment.config, testTasks: testTasks) : nil)
    }

    /// A gate's (attempt 0: the baseline's) evidence row: salted reward leaves of the train
    /// tasks it ran and of every held-out task (a task that did not report scores 0, as in
    /// val_score), the held-out runtime, the task files, the policies.
    func evidenceRecord(attempt: Int, train: [TaskOutcome], heldOut: (ids: [String], outcomes: [TaskOutcome])?) -> GateEvidenceRecord {
        var trainRewards: [String: Double] = [:]
        for o in train { trainRewards[o.id] = o.reward }
        var heldOutRewards: [String: Double] = [:]
        if let heldOut {
            // A task's leaf is its mean over its trials (`gate.trials`), as val_score counts it.
            for (id, mean) in zip(heldOut.ids, HeldOutScore.taskMeans(heldOut.ids, heldOut.outcomes)) { heldOutRewards[id] = mean }
        }
        return GateEvidenceRecord(attempt: attempt, trainLeaves: RewardLeaf.leaves(trainRewards), heldOutLeaves: RewardLeaf.leaves(heldOutRewards),
                                  heldOutRuntime: heldOut == nil ? nil : experiment.executors.heldOutMeasurement(experiment.config),
                                  taskFiles: experiment.adapter.hostPaths.sorted().compactMap(WorkDigest.taskFiles),
                                  policies: policyDigests(), binaries: EvidenceMeasure.runningBinaries, host: Self.hostFindings())
    }

    /// Doctor's host inspection now (no test sandbox: the gate's own sandboxes just ran).
    static func hostFindings() -> GatePredicate.Host {
        let inspection = HostInspection.inspect()
        var findings: [String: String] = [:]
        for f in inspection.findings where !f.topic.hasPrefix("  ") { findings[f.topic] = f.status.rawValue }
        return GatePredicate.Host(kernel: inspection.kernel, findings: findings, measuredAt: isoTimestamp())
    }

    /// Every policy this experiment's sandboxes are made from, resolved as they get it.
    func policyDigests() -> [PolicyDigest] {
        var roles: [(String, String)] = [("task", experiment.config.taskPolicy), ("verifier", experiment.config.verifierPolicy), ("coding agent", experiment.config.codingAgentPolicy)]
        if experiment.config.runner.command != nil { roles.append(("runner", experiment.config.runner.policy)) }
        if experiment.config.runner.scorer != nil { roles.append(("scorer", experiment.config.runner.scorerPolicy)) }
        if let t = experiment.config.triage { roles.append(("triage", t.tool.policy)) }
        return roles.compactMap { role, name in
            guard let file = try? experiment.policyLoader.locate(name, besideDirectory: nil),
                  let policy = try? experiment.policyLoader.load(name, requireAllPlaceholders: false),
                  let fileDigest = try? WorkDigest.file(file.path) else { return nil }
            return PolicyDigest(role: role, name: name, lineage: policy.lineage, file: file.path, fileSHA256: fileDigest,
                                resolvedSHA256: WorkDigest.hex(SHA256.hash(data: PolicyCoding.encode(policy))), encoding: PolicyCoding.version)
        }
    }

    /// The bundle for gate attempt `attempt` (0: `prepare`), signed with `key`.
    func exportEvidence(attempt: Int, reveal: EvidenceReveal, key: Curve25519.Signing.PrivateKey) throws -> EvidenceBundle {
        let rows = try experiment.ledger.records()
        let s = try ExperimentState(records: rows)
        guard let splitRow = rows.first(where: { $0.kind == .split }) else {
            throw ExperimentError(.state, "experiment not prepared yet: nothing to attest")
        }
        let split = try splitRow.decode(SplitRecord.self)
        func pointer(_ r: LedgerRecord) -> LedgerPointer { LedgerPointer(seq: r.seq, hash: r.hash) }
        guard let evidenceRow = try rows.last(where: { try $0.kind == .gateEvidence && $0.decode(GateEvidenceRecord.self).attempt == attempt }) else {
            let known = rows.filter { $0.kind == .gateEvidence }.compactMap { try? $0.decode(GateEvidenceRecord.self).attempt }
            throw ExperimentError(.usage, attempt == 0
                ? "no evidence of prepare in the ledger (prepared before evidence bundles were recorded)"
                : "no evidence of gate attempt \(attempt) in the ledger (attempts with evidence: \(known.contains { $0 > 0 } ? known.filter { $0 > 0 }.map(String.init).joined(separator: ", ") : "none"); an attempt interrupted, or made before evidence bundles were recorded, has none)")
        }
        let evidence = try evidenceRow.decode(GateEvidenceRecord.self)
        let head = try experiment.ledger.head

        var subject: String
        var claims: [EvidenceClaim] = []
        var gate: GatePredicate.Gate?
        var criteria: GateCriteria?
        if attempt == 0 {
            guard let baselineRow = rows.first(where: { $0.kind == .baseline }) else { throw ExperimentError(.state, "no baseline in the ledger") }
            let b = try baselineRow.decode(BaselineRecord.self)
            subject = b.agentSHA256
            claims.append(EvidenceClaim(metric: "val_score", comparator: ">=", threshold: 0, value: b.valScore, passed: true, sampleSize: b.testTasks))
        } else {
            guard let startRow = try rows.last(where: { try $0.kind == .gateStarted && $0.decode(GateStartedRecord.self).attempt == attempt }),
                  let attemptRow = try rows.last(where: { try $0.kind == .gateAttempt && $0.decode(GateAttemptRecord.self).attempt == attempt }) else {
                throw ExperimentError(.state, "gate attempt \(attempt)'s rows are missing from the ledger")
            }
            let started = try startRow.decode(GateStartedRecord.self)
            let a = try attemptRow.decode(GateAttemptRecord.self)
            subject = a.agentSHA256
            criteria = started.criteria
            gate = .init(attempt: attempt, outcome: a.verdict.rawValue, accepted: a.accepted, reason: a.reason, commit: a.commit, iteration: a.iteration,
                         message: a.message, started: pointer(startRow), decided: pointer(attemptRow))
            // An empty suite (the first gates) is no claim: PR 575's rule that an absent field
            // claims nothing, rather than a pass rate of 1 over no task.
            if a.suiteTotal > 0 {
                let rate = Double(a.suitePassed) / Double(a.suiteTotal)
                let threshold = criteria?.suiteThreshold ?? experiment.config.threshold
                claims.append(EvidenceClaim(metric: "suite_pass_rate", comparator: ">=", threshold: threshold, value: rate,
                                            passed: GateRules.suite(passed: a.suitePassed, total: a.suiteTotal, threshold: threshold) == nil,
                                            sampleSize: a.suiteTotal))
            }
            if let test = a.pairedTest, let c = criteria, c.acceptRule == ExperimentConfig.AcceptRule.paired.rawValue {
                // The paired rule's own claim: its p against alpha, over the held-out tasks (the
                // best's side is the bundle of attempt `pairedAgainst`).
                claims.append(EvidenceClaim(metric: "paired_p", comparator: "<=", threshold: c.alpha ?? test.alpha, value: test.pValue,
                                            passed: test.accepted, sampleSize: test.tasks))
            } else if let val = a.valScore, let c = criteria {
                let margin = c.acceptRule == ExperimentConfig.AcceptRule.margin.rawValue
                let bar = c.bestBefore + c.requiredImprovement
                claims.append(EvidenceClaim(metric: "val_score", comparator: margin ? ">" : ">=", threshold: bar, value: val,
                                            passed: margin ? val - bar > 1e-9 : val >= bar - 1e-9, sampleSize: c.testTasks))
            }
        }
        var rewards: [String: RewardTree] = [:]
        if !evidence.trainLeaves.isEmpty {
            rewards["train"] = RewardTree(root: WorkDigest.hex(MerkleTree.root(evidence.trainLeaves.map { Array($0.utf8) })), size: evidence.trainLeaves.count)
        }
        if !evidence.heldOutLeaves.isEmpty {
            rewards["held-out"] = RewardTree(root: WorkDigest.hex(MerkleTree.root(evidence.heldOutLeaves.map { Array($0.utf8) })), size: evidence.heldOutLeaves.count)
        }
        var violations: [String: Int] = [:]
        for r in rows.prefix(while: { $0.seq <= evidenceRow.seq }) where r.kind == .violation {
            if let v = try? r.decode(ViolationRecord.self) { violations[v.kind, default: 0] += v.occurrences }
        }

        let predicate = GatePredicate(
            kind: attempt == 0 ? "prepare" : "gate", benchmark: s.created?.benchmark ?? experiment.config.benchmark,
            harness: .init(binaries: evidence.binaries), gate: gate, claims: claims, criteria: criteria, policies: evidence.policies,
            heldOutRuntime: evidence.heldOutRuntime, taskFiles: evidence.taskFiles,
            split: split.commitment.map { SplitDigest(commitment: $0, train: split.train.count, test: split.test.count, committedAt: pointer(splitRow)) },
            rewards: rewards, ledger: .init(genesis: pointer(rows[0]), head: LedgerPointer(seq: head.seq, hash: head.hash), rows: head.seq),
            host: evidence.host ?? Self.hostFindings(),
            violations: violations, exportedAt: isoTimestamp())
        let statement = Statement(subject: [.init(name: "agent/agent.py", digest: ["sha256": subject])], predicate: predicate)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let body = Array(try encoder.encode(statement))
        let envelope = try DSSEEnvelope.sign(body, type: EvidenceFormat.payloadType, with: key)

        var out = EvidenceBundle(dsseEnvelope: envelope, verificationKey: EvidenceKey.sslib(key.publicKey))
        var revealed = EvidenceBundle.Reveal()
        if reveal.split {
            guard split.commitment != nil, let salt = split.commitmentSalt else {
                throw ExperimentError(.state, "this experiment's split has no commitment (prepared before evidence bundles): nothing to reveal")
            }
            revealed.split = .init(salt: salt, train: split.train, test: split.test)
        }
        for task in reveal.tasks {
            var found = false
            for (tree, leaves) in [("train", evidence.trainLeaves), ("held-out", evidence.heldOutLeaves)] {
                guard let i = leaves.firstIndex(where: { RewardLeaf.read($0)?.task == task }) else { continue }
                let path = MerkleTree.auditPath(i, leaves.map { Array($0.utf8) }).map { WorkDigest.hex($0) }
                revealed.rewards = (revealed.rewards ?? []) + [.init(tree: tree, index: i, leaf: leaves[i], path: path)]
                found = true
            }
            guard found else { throw ExperimentError(.usage, "task \(printable(task, limit: 4096)) has no reward in this gate's evidence (it ran none of its phases)") }
        }
        if revealed.split != nil || revealed.rewards != nil { out.reveal = revealed }
        return out
    }

    /// The attempts with evidence, newest last.
    func evidenceAttempts() throws -> [Int] {
        try experiment.ledger.records(kind: .gateEvidence).compactMap { try? $0.decode(GateEvidenceRecord.self).attempt }
    }
}

/// What `evidence export` was asked to reveal.
public struct EvidenceReveal: Sendable {
    public var split = false
    public var tasks: [String] = []
    public init(split: Bool = false, tasks: [String] = []) {
        self.split = split
        self.tasks = tasks
    }
}
