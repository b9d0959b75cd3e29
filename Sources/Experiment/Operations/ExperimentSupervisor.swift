import Benchmark
import Crypto
import Execution
import ExperimentModel
import Foundation
import Ledger
import Sandbox
import SandboxPolicy
import SupervisorIO

/// Everything the supervisor does between two edits of agent.py: prepare, benchmark (train
/// only), gate, status. It holds the experiment lock for its lifetime, and every score it
/// computes comes from a verifier sandbox agent.py never shared anything with.
///
/// This file: opening (the lock, recovery), verification, snapshots, and `run`, which hands
/// every run of tasks to an executor (`Executors/`). The operations it sequences are beside
/// it: `Prepare.swift`, `TrainRuns.swift` (benchmark, batches), `GateOperation.swift`.
public final class ExperimentSupervisor {
    public let layout: ExperimentLayout
    public let config: ExperimentConfig
    public let ledger: Ledger
    let lock: ExperimentLock?
    let adapter: any BenchmarkAdapter
    let policyLoader: PolicyLoader
    let git: Git
    /// Where runs go (`Executors`), with the held-out runtime settled at the first gate.
    let executors = Executors()
    /// Where the shipped templates are (the Ray driver, `executor: ray`); set by the CLI.
    public var templatesDirectory: String?
    /// Called after each task (serially), e.g. for a progress line. The outcome is nil for
    /// held-out tasks: not even a progress line may say which test task passed.
    public var progress: ((_ done: Int, _ total: Int, _ outcome: TaskOutcome?) -> Void)?
    /// Called with an operator line during long external tool runs (from any thread).
    public var log: (@Sendable (String) -> Void)?
    /// What recovery at open did, for the caller to print (`log` is not set yet then).
    public private(set) var recoveryNotes: [String] = []
    /// Called with each view's path just before it is written: tests kill the process there,
    /// between the ledger append and the views' publication.
    var beforeViewWrite: (String) -> Void = { _ in }
    /// Tasks of the benchmark that cannot run (each scores 0 with its reason), for the
    /// operator; the rest of the experiment works as usual.
    public var benchmarkProblems: [String] { adapter.problems }

    /// Opens an experiment. `exclusive` (every command that runs tasks or writes the ledger)
    /// takes the experiment lock, so a second supervisor is refused with the holder's pid,
    /// and repairs what a crash left (`recover`); read-only use (`status`) does not, and
    /// never repairs anything. `beforeViewWrite` is for tests (see the property).
    public init(layout: ExperimentLayout, policySearchPaths: [String], purpose: String, exclusive: Bool = true) throws {
        self.layout = layout
        do {
            config = try ExperimentConfig.load(layout.config)
        }
        try layout.ensurePrivateDirectory()
        lock = exclusive ? try ExperimentLock(path: layout.lock, purpose: purpose) : nil
        ledger = try Ledger(path: layout.ledger, kinds: .experiment)
        do {
            adapter = try config.makeAdapter(root: layout.root, checkTools: exclusive)
        } catch let e as ExperimentError {
            throw ExperimentError(e.kind, "\(layout.config): \(e.message)")
        }
        var paths = policySearchPaths
        if let d = config.policyDirectory { paths.insert(d.hasPrefix("/") ? d : layout.root + "/" + d, at: 0) }
        policyLoader = PolicyLoader(searchPaths: paths)
        if exclusive {
            do {
                try config.checkPolicyMounts(root: layout.root, loader: policyLoader)
            } catch let e as ExperimentError {
                throw ExperimentError(e.kind, "\(layout.config): \(e.message)")
            }
        }
        git = Git(root: layout.root, privateIndex: layout.privateDirectory + "/git-index")
        if exclusive { try recover() }
    }

    deinit { lock?.release() }

    public func state() throws -> ExperimentState { try ExperimentState(records: ledger.records()) }

    // MARK: - Recovery

    /// Makes the record whole after a crash: a gate that started but never finished is
    /// recorded as interrupted (its results discarded, never half-recorded), an accepted
    /// iteration whose commit was created but not yet published is published, and views a
    /// crash left behind the ledger are regenerated.
    func recover() throws {
        // Scratch mounts and a broker socket of supervisors killed before they could remove
        // them (never a live one's: see `Leftovers`).
        recoveryNotes += Leftovers.sweep(layout, scratchRoot: config.scratch)
        // A supervisor that died during held-out runs left their page-cache traces: gone
        // before anything untrusted of this experiment runs again.
        if let settled = HeldOutSettle.settleLeftover(journal: layout.heldOutJournal) {
            recoveryNotes += settled.lines
            if let failure = settled.failure {
                throw ExperimentError(.io, "the clean-up of a held-out run is still owed: \(failure); nothing untrusted of this experiment runs until it succeeds (it is tried again at every start)")
            }
        }
        let s = try state()
        var changed = false
        for open in s.openGates {
            changed = true
            _ = try ledger.appendAll(Self.interruptedRows(try state(), attempt: open.attempt, agentSHA256: open.agentSHA256, config: config))
        }
        if let full = rollForwardCommit(s) {
            try git.publish(full)
            changed = true
        }
        guard s.prepared else { return }
        if changed {
            try regenerateViews()
            return
        }
        // Otherwise only views that are behind are rewritten: an edited view must stay
        // visible to `status --verify` until the next recorded change replaces it.
        let views = try Views.repair(layout, records: try ledger.records(), config: config, beforeEach: beforeViewWrite)
        let names = { (paths: [String]) in paths.map { String($0.dropFirst(self.layout.root.count + 1)) }.joined(separator: ", ") }
        if !views.behind.isEmpty {
            recoveryNotes.append("regenerated \(names(views.behind)): behind the ledger (an earlier supervisor stopped before publishing them)")
        }
        if !views.tampered.isEmpty {
            recoveryNotes.append("\(names(views.tampered)) differ from the ledger and were left for `status --verify`; the next recorded change rewrites them")
        }
    }

    // MARK: - verify

    public struct VerifyReport: Sendable {
        public var ledger: LedgerVerification
        /// Views that differ from everything the ledger rendered since their last publish.
        public var editedViews: [String]
        /// Views a crash left at an earlier state of the ledger: not a problem (they are
        /// derived), and regenerated by the next command that takes the lock.
        public var behindViews: [String]
        /// Accepted commits not on the branch, other than the one `unpublishedCommits` names:
        /// gone from the repository, or left off the branch by a rewrite.
        public var missingCommits: [String]
        /// The latest accepted commit, written but not yet on the branch: a supervisor stopped
        /// between recording the iteration and publishing its commit. Not a problem: the next
        /// command that takes the experiment lock publishes it (recover()).
        public var unpublishedCommits: [String] = []
        public var ok: Bool { ledger.ok && editedViews.isEmpty && missingCommits.isEmpty }
    }

    /// Recomputes the ledger's hash chain, compares the views with what the ledger says
    /// (behind it, or edited), and checks that every accepted iteration's commit is in the
    /// repository.
    public func verify() throws -> VerifyReport {
        // The latest accepted commit names the ledger head it followed: a ledger whose tail
        // was cut (or whose chain was recomputed) no longer contains that row.
        let v = try ledger.verify(expectedHead: git.latestLedgerHead())
        let records = try ledger.records()
        let s = try ExperimentState(records: records)
        let views = s.prepared ? try Views.check(layout, records: records, config: config) : Views.Check()
        let unpublished = s.gateAttempts.compactMap(\.commit).filter { !git.isPublished($0) }
        // Exactly what recover() rolls forward: the latest iteration's commit, present in the
        // object store. Anything else off the branch is missing.
        let pending = rollForwardCommit(s).map { [$0] } ?? []
        return VerifyReport(ledger: v, editedViews: views.tampered, behindViews: views.behind,
                            missingCommits: unpublished.filter { !pending.contains($0) }, unpublishedCommits: pending)
    }

    /// The latest accepted iteration's commit when it exists in the repository but is not on
    /// the branch: a supervisor stopped between appending the iteration and publishing it.
    private func rollForwardCommit(_ s: ExperimentState) -> String? {
        guard let last = s.iterations.last, last.commit != "baseline",
              let full = s.gateAttempts.compactMap(\.commit).first(where: { $0.hasPrefix(last.commit) }),
              git.exists(full), !git.isPublished(full) else { return nil }
        return full
    }

    /// workspace/learnings.md as text (the report), at most 256 KiB, no link followed (the
    /// coding agent writes it); nil when it is missing, a link, or larger.
    public func learningsText() -> String? {
        guard case .success(let bytes) = InputFile.read(at: AT_FDCWD, layout.learnings, cap: 256 << 10) else { return nil }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// A snapshot's agent.py by its sha256, as text (the report's explorer); nil if it is
    /// missing or not a regular file of at most the agent file's cap.
    public func snapshotSource(_ sha256: String) -> String? {
        (try? snapshotBytes(sha256)).map { String(decoding: $0, as: UTF8.self) }
    }

    /// A snapshot's agent.py by its sha256: a regular file of at most the agent file's cap,
    /// no link followed (the bytes came from the coding agent).
    public func snapshotBytes(_ sha256: String) throws -> [UInt8] {
        guard sha256.count == 64, sha256.allSatisfy(\.isHexDigit) else { throw ExperimentError(.state, "not a snapshot: \(printable(sha256))") }
        let path = layout.snapshotDirectory(sha256: sha256)
        let dir = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard dir >= 0 else { throw ExperimentError(.io, "\(path): \(String(cString: strerror(errno)))") }
        defer { close(dir) }
        switch AgentFile.read(directoryFD: dir, maxBytes: AgentFile.maxBytes) {
        case .success(let bytes): return bytes
        case .failure(let why): throw ExperimentError(.io, "\(path)/agent.py \(why.reason)")
        }
    }

    public func regenerateViews() throws { try Views.regenerate(layout, try state(), config: config, beforeEach: beforeViewWrite) }

    // MARK: - running tasks

    /// Runs `ids` where the configuration says (`Executors`): one outcome per id, in order (a
    /// task the executor did not score is 0, never missing).
    func run(_ ids: [String], agent: String, audit: RunAudit, split: SplitClass, oracle: Bool = false,
             operatorDiagnostics: Bool = false, oneTaskPerRun: Bool = false) throws -> [TaskOutcome] {
        guard !ids.isEmpty else { return [] }
        let request = TaskRun(ids: ids, split: split, agent: agent, audit: audit, oracle: oracle, operatorDiagnostics: operatorDiagnostics,
                              oneTaskPerRun: oneTaskPerRun)
        let environment = executorEnvironment
        let outcomes = try executors.executor(for: request, environment) {
            RayNodeExecutor(environment: environment, templatesDirectory: templatesDirectory,
                            excludedNodes: { [unowned self] in try state().excludedNodes },
                            recordExclusion: { [ledger] in _ = try ledger.append(.nodeExcluded, $0) })
        }.run(request)
        // Whatever the executor did, the mean is over every requested id.
        return LocalExecution.complete(ids, outcomes, split: split, adapter: adapter.name)
    }

    /// What the executors need of this experiment, with the operator's current callbacks.
    var executorEnvironment: ExecutorEnvironment {
        ExecutorEnvironment(config: config, layout: layout, adapter: adapter, policyLoader: policyLoader, log: log, progress: progress)
    }

    /// A run's violations and limit hits, each against the sandbox that made it: agent.py for
    /// the sandboxes that hold it (a tool sharing its process included: tau2's runner,
    /// Harbor's orchestrator), "verifier" (local benchmarks) or "benchmark tool" for those
    /// without it.
    func violations(_ audit: RunAudit, during: String, heldOut: Bool = false) -> [(RecordKind, any Encodable)] {
        violations(audit.agent, actor: "agent.py (\(during))", heldOut: heldOut)
            + violations(audit.tool, actor: "\(adapter.toolActor) (\(during))", heldOut: heldOut)
    }

    func violations(_ audit: AuditLog, actor: String, heldOut: Bool = false) -> [(RecordKind, any Encodable)] {
        var counts: [String: Int] = [:]
        var order: [String] = []
        var destinations = 0
        // Connections the allowlist let through (a runner's model API) are not violations.
        for e in audit.events where e.isViolation {
            // A refused syscall and a voided reward name what (the call, the reward file's path).
            let named: Set<AuditEvent.Kind> = [.syscall, .rewardTampering, .sharedStateChanged, .plantedLink, .irregularFile]
            var key = named.contains(e.countedKind) ? "\(e.countedKind.rawValue) \(e.name)" : e.countedKind.rawValue
            // A refused connection names where it went (the first 20 destinations; a flood
            // of distinct ones is folded into one row).
            if e.countedKind == .egress {
                let named = "egress \(e.name)"
                if counts[named] == nil && destinations >= 20 {
                    key = "egress (other destinations)"
                } else {
                    if counts[named] == nil { destinations += 1 }
                    key = named
                }
            }
            if counts[key] == nil { order.append(key) }
            counts[key, default: 0] += e.count ?? 1
        }
        let named = ["syscall", "egress", AuditEvent.Kind.rewardTampering.rawValue, AuditEvent.Kind.sharedStateChanged.rawValue, AuditEvent.Kind.plantedLink.rawValue, AuditEvent.Kind.irregularFile.rawValue]
        return order.map { key in
            (.violation, ViolationRecord(actor: actor, kind: named.first { key.hasPrefix($0) } ?? key,
                                         detail: "\(key) ×\(counts[key]!)", heldOut: heldOut ? true : nil, count: counts[key]!))
        }
    }

    // MARK: - snapshots

    public struct Snapshot: Sendable {
        public var sha256: String
        /// A directory holding exactly `agent.py`, bound read-only into task sandboxes.
        public var directory: String
    }

    /// Copies agent/agent.py into a content-addressed, supervisor-owned directory. The gate
    /// and the benchmark judge this copy, never the live file the coding agent may still edit.
    public func snapshotAgent() throws -> Snapshot {
        // What agent/ or agent.py is (a symlink, missing, too big) is the experiment's state;
        // a failing read is an I/O error.
        let dir = open(layout.agentDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard dir >= 0 else {
            let e = errno
            throw ExperimentError([ELOOP, ENOTDIR, ENOENT].contains(e) ? .state : .io,
                                  "\(layout.agentDirectory): \(String(cString: strerror(e))) (it must be a directory, not a symlink)")
        }
        defer { close(dir) }
        switch AgentFile.read(directoryFD: dir, maxBytes: AgentFile.maxBytes) {
        case .success(let bytes): return try snapshot(bytes: bytes)
        case .failure(let why): throw ExperimentError(why.errno == nil ? .state : .io, "\(layout.agentFile) \(why.reason)")
        }
    }

    /// Stores `bytes` as a content-addressed snapshot (idempotent).
    public func snapshot(bytes: [UInt8]) throws -> Snapshot {
        let sha = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
        let dir = layout.snapshotDirectory(sha256: sha)
        if access(dir + "/agent.py", F_OK) != 0 {
            do {
                try TraceFiles.makeDirectories(dir)
                try AtomicFile.write(bytes, to: dir + "/agent.py", mode: 0o644)
            } catch let e as IOFailure {
                throw ExperimentError(.io, "snapshot \(dir)/agent.py: \(e.reason ?? ErrnoName.describe(e.errno))")
            } catch {
                throw ExperimentError(.io, "snapshot \(error)")
            }
        }
        return Snapshot(sha256: sha, directory: dir)
    }
}
