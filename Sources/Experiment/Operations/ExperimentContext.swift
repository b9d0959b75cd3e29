import Benchmark
import Crypto
import Execution
import ExperimentModel
import Foundation
import Ledger
import Sandbox
import SandboxPolicy
import SupervisorIO

/// What every operation of the supervisor shares: the experiment's files, config and ledger,
/// the benchmark's adapter, the policies, the repository, where runs go, and the caller's
/// callbacks. `ExperimentSupervisor` opens it (the lock, recovery) and hands it to each
/// operation (`PrepareOperation`, `TrainOperation`, `GateOperation`, `CandidateOperation`,
/// `TriageOperation`, `EvidenceOperation`, `ImagesOperation`); running tasks is
/// `RunningTasks.swift`, held-out runs with vendor retries `InfraRetryRuns.swift`.
final class ExperimentContext {
    let layout: ExperimentLayout
    let config: ExperimentConfig
    let ledger: Ledger
    let adapter: any BenchmarkAdapter
    let policyLoader: PolicyLoader
    let git: Git
    /// Where runs go (`Executors`), with the held-out runtime settled at the first gate.
    let executors = Executors()
    /// Where the shipped templates are (the Ray driver, `executor: ray`); set by the CLI.
    var templatesDirectory: String?
    /// Called after each task (serially), e.g. for a progress line. The outcome is nil for
    /// held-out tasks: not even a progress line may say which test task passed.
    var progress: ((_ done: Int, _ total: Int, _ outcome: TaskOutcome?) -> Void)?
    /// Called with an operator line during long external tool runs (from any thread).
    var log: (@Sendable (String) -> Void)?
    /// Called with each view's path just before it is written: tests kill the process there,
    /// between the ledger append and the views' publication.
    var beforeViewWrite: (String) -> Void = { _ in }

    init(layout: ExperimentLayout, config: ExperimentConfig, ledger: Ledger, adapter: any BenchmarkAdapter, policyLoader: PolicyLoader, git: Git) {
        self.layout = layout
        self.config = config
        self.ledger = ledger
        self.adapter = adapter
        self.policyLoader = policyLoader
        self.git = git
    }

    func state() throws -> ExperimentState { try ExperimentState(records: ledger.records()) }

    func regenerateViews() throws { try Views.regenerate(layout, try state(), config: config, beforeEach: beforeViewWrite) }

    /// Appends what a failed operation's sandboxes did, if the ledger takes it: the
    /// operation's own error is what the caller reports.
    func recordViolations(_ items: [(RecordKind, any Encodable)]) {
        guard !items.isEmpty else { return }
        recordViolations(try? ledger.encode(items))
    }

    /// `recordViolations` of rows encoded earlier (nil: they could not be).
    func recordViolations(_ rows: Ledger.EncodedRows?) {
        if (try? rows.map(ledger.appendAll)) == nil { log?("the violations of the failed operation could not be recorded either") }
    }

    // MARK: - snapshots

    /// Copies agent/agent.py into a content-addressed, supervisor-owned directory. The gate
    /// and the benchmark judge this copy, never the live file the coding agent may still edit.
    func snapshotAgent() throws -> AgentSnapshot {
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
    func snapshot(bytes: [UInt8]) throws -> AgentSnapshot {
        let sha = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
        let dir = layout.snapshotDirectory(sha256: sha)
        if access(dir + "/agent.py", F_OK) != 0 {
            do {
                try TraceFiles.makeDirectories(dir)
                try AtomicFile.write(bytes, to: dir + "/agent.py", mode: 0o644)
            } catch let e as IOFailure {
                throw ExperimentError(.io, "snapshot \(dir)/agent.py: \(e.reason ?? ErrnoName.describe(e.errno))")
            } catch {
                throw ExperimentError(.io, "snapshot", cause: error)
            }
        }
        return AgentSnapshot(sha256: sha, directory: dir)
    }

    /// A snapshot's agent.py by its sha256: a regular file of at most the agent file's cap,
    /// no link followed (the bytes came from the coding agent).
    func snapshotBytes(_ sha256: String) throws -> [UInt8] {
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
}

/// A content-addressed copy of agent.py in a supervisor-owned directory: what the gate and the
/// benchmark judge, never the live file the coding agent may still edit.
public struct AgentSnapshot: Sendable {
    public var sha256: String
    /// A directory holding exactly `agent.py`, bound read-only into task sandboxes.
    public var directory: String
}
