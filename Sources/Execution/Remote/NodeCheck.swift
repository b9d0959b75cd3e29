import Benchmark
import Crypto
import ExperimentModel
import Foundation
import Sandbox
import SandboxPolicy
import SupervisorIO

/// What a worker node says of itself before it is given any request (`autoharness worker
/// --check`): its binary's and policies' digests, and what the supervisor's own start-up
/// check (`doctor`'s summary) finds missing on it for the policies the requests run under.
public struct NodeReport: Codable, Sendable, Equatable {
    public var binarySHA256: String
    public var policiesSHA256: String
    /// Empty when the node can enforce everything those policies ask.
    public var problems: [String]
    /// The public half of the node's sealing key (base64): held-out requests are sealed to it.
    public var sealKey: String
    /// The digest of the tool's files the supervisor named (`--check-digest`), as this node
    /// holds them (`WorkDigest.files`); nil when none were named or one cannot be read.
    public var toolSHA256: String?
    /// Which of the task images the supervisor named (`--check-image`, archive digests) this
    /// node holds unpacked (`NodeImageStore`); nil when none were named.
    public var images: [String]?
    /// The digest of the verifier tools at the path the supervisor named
    /// (`--check-verifier-tools`, `WorkDigest.tree`); nil when none was named or they fail.
    public var verifierToolsSHA256: String?
    /// bird-interact's template databases on this node's server, each one's fingerprint
    /// (`--check-databases`, `BirdDatabases`); nil when none were named or one cannot be read.
    public var databases: [String: String]?

    public init(binarySHA256: String, policiesSHA256: String, problems: [String], sealKey: String) {
        self.binarySHA256 = binarySHA256
        self.policiesSHA256 = policiesSHA256
        self.problems = problems
        self.sealKey = sealKey
    }
}

public enum NodeCheck {
    /// What `doctor` counts as a problem on this host, for `policies`: a kernel facility the
    /// sandbox needs (privileges, namespaces, seccomp with user_notif), or a limit of one of
    /// the policies that no cgroup here can enforce.
    public static func problems(policies: [String], loader: PolicyLoader, host: CgroupHost = .current) -> [String] {
        var out: [String] = []
        for f in HostInspection.inspect(host: host).findings where f.status == .missing && !f.topic.hasPrefix("  ") {
            out.append("\(f.topic): \(f.detail)")
        }
        for name in policies {
            do {
                let limits = try loader.load(name, requireAllPlaceholders: false).limits
                let bad = HostInspection.unenforceable(limits, host: host)
                if !bad.isEmpty { out.append("policy \(name): \(bad.joined(separator: ", ")) cannot be enforced") }
            } catch {
                out.append("policy \(name): \(error)")
            }
        }
        return out
    }

    /// The node's report; its sealing key is made in `stateDirectory` on first use. With
    /// `vm` (the experiment's `gate.held_out_runtime: vm`), whether a held-out VM of those
    /// settings can run here (qemu, the guest kernel, KVM or the consent to emulate) is a check
    /// too: a node that cannot is not used.
    public static func report(policies: [String], searchPaths: [String], stateDirectory: String, vm: VMSettings? = nil,
                              scratchRoot: String = "/dev/shm/autoharness", paths: [String] = [], digest: [String] = [], images: [String] = [], verifierTools: String? = nil,
                              databases: BirdDatabases.Check? = nil) throws -> NodeReport {
        try RemoteWorker.checkStateDirectory(stateDirectory)
        let key = try NodeSealKey.load(orCreateAt: stateDirectory + "/node-key")
        var found = problems(policies: policies, loader: PolicyLoader(searchPaths: searchPaths))
        if let vm, let why = vmProblem(vm, scratchRoot: scratchRoot) { found.append(why) }
        // A tool's install and binds, at the supervisor's paths (`NodeTool.requiredPaths`).
        for path in paths where !FileManager.default.fileExists(atPath: path) { found.append("no \(path) on this node (the tool's, at the supervisor's path)") }
        // ...none of which holds this worker's own directories (a request would be refused).
        if let why = NodeToolWork.exposure(binds: [], paths: paths, state: stateDirectory, scratch: scratchRoot) { found.append(why) }
        var tool: String?
        do { tool = try WorkDigest.files(digest) } catch { found.append("the tool's files: \(error)") }
        var report = NodeReport(binarySHA256: try WorkDigest.executable(), policiesSHA256: try WorkDigest.policies(searchPaths),
                                problems: found, sealKey: NodeSealKey.publicText(key))
        report.toolSHA256 = tool
        if !images.isEmpty { report.images = NodeImageStore.held(images, state: stateDirectory) }
        // The toolbox as a request's run checks it, and its digest: a node with another gets nothing.
        if let verifierTools {
            do {
                _ = try VerifierTools(directory: verifierTools)
                report.verifierToolsSHA256 = try WorkDigest.tree(verifierTools, cache: stateDirectory + "/digests")
            } catch {
                report.problems.append("the verifier tools: \(error)")
            }
        }
        if let databases {
            // Under the node's lock, shared: a bird-interact run holds it alone while it copies
            // the templates (a reader connected to one would fail its CREATE DATABASE) and
            // leaves its roles and settings on the server.
            if let lock = RemoteWorker.sharedLock(stateDirectory, within: 120) {
                defer { close(lock) }
                do { report.databases = try databases.fingerprints() } catch { report.problems.append("the template databases: \(error.message)") }
            } else {
                report.problems.append("the template databases: the node is busy with a run that holds it alone (not checked in 120 s)")
            }
        }
        return report
    }

    /// Why a held-out VM of `settings` cannot run on this host, or nil when it can.
    static func vmProblem(_ settings: VMSettings, scratchRoot: String) -> String? {
        do {
            let vm = try HeldOutVM(settings: settings, log: nil)
            // `accel: kvm` is taken on the operator's word where the supervisor runs it; a
            // node proves it: a guest must boot (the probe, remembered until the next boot).
            if settings.accel == .kvm {
                let probe = VMHostCheck.kvmCached(kernel: vm.kernel, qemu: vm.qemu)
                if !probe.works { return "held-out VM: gate.vm.accel is kvm and no KVM guest boots here (\(probe.why))" }
            }
            return HeldOutVM.socketRoom(scratch: scratchRoot)
        } catch {
            let text = "\(error)"
            return text.hasPrefix("held-out VM") ? text : "held-out VM: " + text
        }
    }

    /// Why the supervisor gives a node no request, or nil when it is usable: its own report
    /// must name this binary and these policies (and, for a tool benchmark, its files), and no
    /// problem.
    public static func unusable(_ report: NodeReport, binarySHA256: String, policiesSHA256: String, toolSHA256: String? = nil,
                                verifierToolsSHA256: String? = nil, databases: [String: String]? = nil) -> String? {
        if report.binarySHA256 != binarySHA256 { return "its autoharness (sha256 \(report.binarySHA256.prefix(16))) is not the supervisor's (\(binarySHA256.prefix(16)))" }
        if report.policiesSHA256 != policiesSHA256 { return "its policies (sha256 \(report.policiesSHA256.prefix(16))) are not the supervisor's (\(policiesSHA256.prefix(16)))" }
        if let toolSHA256, report.problems.isEmpty, report.toolSHA256 != toolSHA256 {
            return "its copy of the tool's files (sha256 \((report.toolSHA256 ?? "none").prefix(16))) is not the supervisor's (\(toolSHA256.prefix(16))): another version is installed there"
        }
        if let verifierToolsSHA256, report.problems.isEmpty, report.verifierToolsSHA256 != verifierToolsSHA256 {
            return "its verifier tools (sha256 \((report.verifierToolsSHA256 ?? "none").prefix(16))) are not the supervisor's (\(verifierToolsSHA256.prefix(16)))"
        }
        if let databases, report.problems.isEmpty, report.databases != databases {
            let theirs = report.databases ?? [:]
            let db = databases.keys.sorted().first { theirs[$0] != databases[$0] } ?? theirs.keys.sorted().first { databases[$0] == nil } ?? "?"
            return "its template database \(db) (fingerprint \((theirs[db] ?? "none").prefix(16))) is not the supervisor's (\((databases[db] ?? "none").prefix(16)))"
        }
        if !report.problems.isEmpty { return "it fails the host checks: \(report.problems.joined(separator: "; "))" }
        guard let raw = Data(base64Encoded: report.sealKey), (try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: raw)) != nil else {
            return "its sealing key is not an X25519 public key"
        }
        return nil
    }
}

/// The node's lock (`lockNode` takes it for each request).
extension RemoteWorker {
    /// The lock file in the node's state directory, opened (or -1, errno set).
    static func openLock(_ state: String) -> Int32 {
        open(state + "/node.lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
    }

    /// The node's lock taken shared within `seconds`, or nil.
    static func sharedLock(_ state: String, within seconds: Double) -> Int32? {
        let fd = openLock(state)
        guard fd >= 0 else { return nil }
        let deadline = monotonicNow() + seconds
        repeat {
            if flock(fd, LOCK_SH | LOCK_NB) == 0 { return fd }
            guard errno == EWOULDBLOCK || errno == EINTR else { break }
            usleep(200_000)
        } while monotonicNow() < deadline
        close(fd)
        return nil
    }
}
