import Benchmark
import Evidence
import Execution
import ExperimentModel
import Foundation
import Ledger
import SupervisorIO

// `autoharness prepare`: the baseline over every task, the split, the first iteration.

struct PrepareOperation {
    let experiment: ExperimentContext

    /// Tasks whose test scripts fetch their judge (uv, pytest) score 0 in an offline verifier
    /// whatever agent.py does: said at prepare, with what to do, when the tools are not set.
    static func verifierToolsWarning(_ fetching: [String]) -> String? {
        guard let first = fetching.first else { return nil }
        return "\(fetching.count) task(s) have test scripts that fetch uv or run uvx (\(first)): the verifier is offline, so they "
            + "score 0 whatever agent.py does. Run scripts/install-verifier-tools and set sandbox.verifier_tools to the directory "
            + "it prints (docs/benchmarks.md: What the verifier needs is provided)"
    }

    /// A test split on which the gate's improvement rule can accept few or no gates. With
    /// `min_improvement: auto` (1/N) each acceptance needs two more held-out tasks to pass
    /// than the best so far, so a small split runs out of room fast (or never has any).
    static func smallSplitWarning(testTasks n: Int, testPassed: Int, minImprovement: Double?) -> String? {
        guard n > 0 else { return nil }
        let step = GateRules.tasksNeeded(testTasks: n, minImprovement: minImprovement)
        let room = n - testPassed
        let possible = room / step
        guard n < 10 || possible == 0 else { return nil }
        let setting = minImprovement == nil ? "min_improvement auto is 1/\(n)" : "min_improvement is \(minImprovement!)"
        var text = "the test split has \(n) task(s) and \(setting): a gate is accepted only when at least \(step) more held-out task(s) pass than the best so far; "
        text += "from this baseline (\(testPassed)/\(n) pass) "
        text += possible == 0 ? "no gate can ever be accepted. " : "at most \(possible) gate(s) can ever be accepted. "
        if step > 1 { text += "`gate.min_improvement: 0` accepts any strictly higher score (one more task); " }
        text += "a benchmark with more tasks gives a finer held-out score."
        return text
    }

    /// Statuses that say the benchmark's machinery, not agent.py, failed the task.
    static let infrastructureFailures: Set<TaskStatus> = [.setupFailed, .missingResult, .verifierCrashed, .verifierTimeout, .noReward, .invalidReward]

    /// A baseline where every task failed for the machinery's reasons measures nothing: it is
    /// refused (nothing recorded) with the counts and the first reasons, instead of becoming
    /// a 0/N starting point every later gate would "beat".
    static func refuseBrokenBaseline(_ outcomes: [TaskOutcome]) throws {
        guard !outcomes.isEmpty, outcomes.allSatisfy({ infrastructureFailures.contains($0.status) }) else { return }
        var counts: [TaskStatus: Int] = [:]
        for o in outcomes { counts[o.status, default: 0] += 1 }
        let byStatus = counts.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.value) \($0.key.rawValue)" }.joined(separator: ", ")
        let reasons = Array(Set(outcomes.compactMap(\.detail))).sorted().prefix(3).map { "  \($0)" }.joined(separator: "\n")
        throw ExperimentError(.state, """
            every task of the baseline failed before agent.py could be judged (\(byStatus)); nothing was recorded. \
            Fix the benchmark's setup and run `autoharness prepare` again. First reasons:
            \(reasons)
            """)
    }

    /// Runs the baseline over every task with nothing persisted (the split does not exist yet,
    /// so every task is treated as a test task), derives the split, records iteration 0.
    func prepare() throws -> PrepareSummary {
        let s = try experiment.state()
        guard !s.prepared else {
            throw ExperimentError(.state, "experiment already prepared (split recorded in the ledger); nothing was run")
        }
        let snap = try experiment.snapshotAgent()
        let audit = RunAudit()
        let outcomes: [TaskOutcome]
        var retries = InfraRetries()
        do {
            outcomes = try experiment.runRetryingVendor(experiment.adapter.taskIDs, agent: snap.directory, audit: audit, split: .baseline, operatorDiagnostics: true,
                                             retries: &retries)
        } catch {
            experiment.recordViolations(experiment.violations(audit, during: "baseline", heldOut: true))
            throw error
        }
        try Self.refuseBrokenBaseline(outcomes)
        var passed: [String: Bool] = [:]
        for o in outcomes { passed[o.id] = o.passed }
        let split: SplitFile
        if let fixed = experiment.adapter.fixedSplit {
            split = SplitFile(train: fixed.train.sorted(), test: fixed.test.sorted(),
                              metadata: .init(created: isoTimestamp(), totalTasks: fixed.train.count + fixed.test.count, seed: fixed.seed))
        } else {
            split = SplitFile.make(baselinePassed: passed, created: isoTimestamp())
        }
        try AtomicFile.write([UInt8](split.encoded()), to: experiment.layout.split, mode: 0o600)
        // `gate.trials`: the test tasks' further trials, so that the baseline's held-out score and
        // per-task counts are measured as a gate's are (the first trial is the run above).
        let testIDs = Set(split.test)
        var heldOutOutcomes = outcomes.filter { testIDs.contains($0.id) }
        do {
            for _ in 1..<max(experiment.config.gate.trials, 1) {
                heldOutOutcomes += try experiment.runRetryingVendor(split.test, agent: snap.directory, audit: audit, split: .baseline, retries: &retries)
            }
        } catch {
            experiment.recordViolations(experiment.violations(audit, during: "baseline", heldOut: true))
            throw error
        }
        let val = HeldOutScore.val(split.test, heldOutOutcomes)
        var baselineRecord = BaselineRecord(valScore: val, testTasks: split.test.count, tasksPassed: outcomes.filter(\.passed).count,
                                            tasksTotal: outcomes.count, agentSHA256: snap.sha256, costUSD: TaskOutcome.cost(outcomes),
                                            agentCode: TaskOutcome.agentCode(outcomes))
        if experiment.config.timeoutPolicy == .infra { (baselineRecord.valScoreFinished, baselineRecord.heldOutTimedOut) = HeldOutScore.finished(split.test, heldOutOutcomes) }
        baselineRecord.infraRetries = retries.recorded
        if experiment.config.gate.disclosure == .ladder { baselineRecord.ladderStep = ScoreLadder.step(experiment.config, testTasks: split.test.count) }
        baselineRecord.heldOutTrials = HeldOutTrials(rewards: HeldOutScore.perTask(split.test, heldOutOutcomes), trials: experiment.config.gate.trials)
        // The split is committed to here (salted, the salt kept in the ledger): every evidence
        // bundle signs the commitment, so the split cannot be redrawn after the fact unseen.
        let salt = SplitCommitment.newSalt()
        var committed = SplitRecord(train: split.train, test: split.test, seed: split.metadata.seed)
        committed.commitment = SplitCommitment.commit(train: split.train, test: split.test, salt: salt)
        committed.commitmentSalt = WorkDigest.hex(salt)
        let trainIDs = Set(split.train)
        var items: [(RecordKind, any Encodable)] = [
            (.split, committed),
            (.baseline, baselineRecord),
            (.iteration, IterationRecord(iteration: 0, valScore: val, commit: "baseline", evalsPassed: 0, evalsTotal: 0,
                                         timestamp: isoTimestamp(), agentSHA256: snap.sha256)),
        ]
        let splitRecord = SplitRecord(train: split.train, test: split.test, seed: split.metadata.seed)
        if let first = RollingBatches.first(splitRecord, config: experiment.config) { items.append((.batchRevealed, first)) }
        items += experiment.violations(audit, during: "baseline", heldOut: true)
        // Last, so that the bundle of prepare counts the baseline's violations.
        items.append((.gateEvidence, EvidenceOperation(experiment: experiment).evidenceRecord(attempt: 0, train: outcomes.filter { trainIDs.contains($0.id) },
                                                    heldOut: (split.test, heldOutOutcomes))))
        _ = try experiment.ledger.appendAll(items)
        try experiment.regenerateViews()
        // The first rolling batch's tasks run as a train run with the baseline agent.py: its
        // failures are there when the coding agent starts.
        _ = try TrainOperation(experiment: experiment).settleBatches()
        var summary = PrepareSummary(tasks: outcomes.count, passed: outcomes.filter(\.passed).count, train: split.train.count,
                                     test: split.test.count, baselineScore: val,
                                     splitOrigin: experiment.adapter.fixedSplit != nil
                                         ? "the benchmark's own split, seed \(split.metadata.seed)"
                                         : "stratified on baseline pass/fail, seed \(split.metadata.seed)")
        let testPassed = split.test.filter { passed[$0] == true }.count
        summary.gateRule = GateRules.ruleText(testTasks: split.test.count, config: experiment.config)
        if experiment.config.gate.accept == .margin, let w = Self.smallSplitWarning(testTasks: split.test.count, testPassed: testPassed, minImprovement: experiment.config.gate.minImprovement) {
            summary.warnings.append(w)
        }
        if experiment.config.verifierTools == nil, let w = Self.verifierToolsWarning(VerifierTools.fetchingScripts(experiment.adapter.verifierScripts)) {
            summary.warnings.append(w)
        }
        return summary
    }
}

public struct PrepareSummary: Sendable {
    public var tasks: Int
    public var passed: Int
    public var train: Int
    public var test: Int
    public var baselineScore: Double
    /// How the split was made, for the operator.
    public var splitOrigin: String
    /// What the operator should change before running (a test split too small to gate).
    public var warnings: [String] = []
    /// The gate's acceptance rule in force, with its numbers (`GateRules.ruleText`).
    public var gateRule = ""
}
