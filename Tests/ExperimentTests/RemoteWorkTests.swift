import Benchmark
import Crypto
import Foundation
import Sandbox
import SandboxPolicy
import Testing
import TestSupport
@testable import Experiment
@testable import Execution
@testable import ExperimentModel

/// `autoharness worker`, the node's side of remote work, run as the real binary: a request
/// runs only when signed by the key the node trusts, never twice, and only on a node whose
/// binary and policies are the supervisor's; its tasks run in this node's sandboxes and
/// nothing of them stays. `RemoteWork.check` holds answers to the same standard.
@Suite("Remote work: the node's autoharness worker and the checks on its answers", .serialized)
struct RemoteWorkTests {
    /// A node: its key file, its state directory, and how to hand it a request.
    struct Node {
        let temp: TempDir
        let key = Curve25519.Signing.PrivateKey()
        /// The supervisor's key for held-out answers (one per batch).
        let answerKey = Curve25519.KeyAgreement.PrivateKey()
        var keyFile: String { temp.file("supervisor.pub") }
        var state: String { temp.file("state") }

        init() throws {
            temp = try TempDir()
            try WorkKey.publicText(key).write(toFile: keyFile, atomically: true, encoding: .utf8)
        }

        /// A request for `ids` of the arith fixture with `agent`, as the supervisor builds it,
        /// naming the built CLI's digest (the node's binary) and the checkout's policies.
        func request(_ ids: [String], agent: String = Agents.addOnly, heldOut: Bool = false) throws -> WorkRequest {
            let bench = try LocalBenchmark(directory: Experiment.fixture)
            var work = try RemoteWork(key: key, policySearchPaths: [Built.packageRoot + "/policies"])
            work.defaultAgentTimeout = 60
            work.binarySHA256 = try WorkDigest.file(Built.autoharness)
            return try work.request(ids.compactMap { bench.task($0) }, agentPy: Array(agent.utf8), heldOut: heldOut, concurrency: 2,
                                    answerTo: heldOut ? NodeSealKey.publicText(answerKey) : nil)
        }

        /// A request for `ids` of a benchmark run by its own tool (`executor: ray`), as the
        /// supervisor builds it: the tool's settings, the digest of its files (or `digest`,
        /// `.some(nil)` for none), the built CLI's digest, a held-out one sealed to this node.
        func request(tool: NodeTool, _ ids: [String], agent: [UInt8], heldOut: Bool, digest: String?? = .none,
                     nodeData: @escaping (String) -> [UInt8]? = { _ in nil }) throws -> WorkRequest {
            var work = try RemoteWork(key: key, policySearchPaths: [Built.packageRoot + "/policies"])
            work.binarySHA256 = try WorkDigest.file(Built.autoharness)
            return try work.request(tool: tool, toolSHA256: try digest ?? WorkDigest.files(tool.digestedFiles), ids: ids, agentPy: agent,
                                    heldOut: heldOut, answerTo: heldOut ? NodeSealKey.publicText(answerKey) : nil, nodeData: nodeData)
        }

        /// A request for Harbor's `tasks` (`benchmark: terminal-bench`, `env_provider: local`) as
        /// the supervisor builds it: the tasks' files, how Harbor runs their agent phase, the
        /// digest of its environment module (or `digest`), a held-out one sealed to this node.
        func request(harbor: HarborNode, _ tasks: [BenchmarkTask], agent: [UInt8], heldOut: Bool, digest: String?? = .none) throws -> WorkRequest {
            var work = try RemoteWork(key: key, policySearchPaths: [Built.packageRoot + "/policies"])
            work.binarySHA256 = try WorkDigest.file(Built.autoharness)
            var r = try work.request(tasks, agentPy: agent, heldOut: heldOut, concurrency: 1, answerTo: heldOut ? NodeSealKey.publicText(answerKey) : nil)
            r.harbor = harbor
            r.toolSHA256 = try digest ?? WorkDigest.files(harbor.digestedFiles)
            return r
        }

        /// The node's sealing key, made as the worker makes it (in its state directory).
        func sealKey() throws -> Curve25519.KeyAgreement.PrivateKey {
            try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            return try NodeSealKey.load(orCreateAt: state + "/node-key")
        }

        /// Signed as the supervisor signs it: a held-out request sealed to this node.
        func sign(_ r: WorkRequest, with other: Curve25519.Signing.PrivateKey? = nil) throws -> [UInt8] {
            try WorkKey.sign(r, with: other ?? key, sealTo: r.heldOut ? NodeSealKey.publicText(try sealKey()) : nil)
        }

        /// Runs `autoharness worker` with `bytes` on its stdin, its scratch root a directory
        /// that does not exist yet (as on a fresh node: the worker makes it).
        /// `environment`: variables the worker runs with besides this process's (what a
        /// tool's `env_pass` names, set in the node's environment).
        func serve(_ bytes: [UInt8], scratch given: String? = nil, environment: [String: String] = [:]) throws -> Run {
            let input = temp.file("request-\(UUID().uuidString)")
            FileManager.default.createFile(atPath: input, contents: Data(bytes))
            // On tmpfs, as the worker requires (held-out work never reaches a disk); short, as
            // a held-out VM's sockets go below it (a socket path is at most 107 bytes).
            let scratch = given ?? "/dev/shm/ahw-" + UUID().uuidString.prefix(8)
            defer { if given == nil { try? FileManager.default.removeItem(atPath: scratch) } }
            return try runProcess(Built.autoharness, ["worker", "--supervisor-key", keyFile, "--state", state, "--scratch", scratch,
                                                      "--policy-dir", Built.packageRoot + "/policies"],
                                  environment: environment.isEmpty ? nil : ProcessInfo.processInfo.environment.merging(environment) { _, given in given },
                                  stdinPath: input)
        }

        var nonces: [String] { (try? FileManager.default.contentsOfDirectory(atPath: state + "/nonces")) ?? [] }
        var workDirectories: [String] { ((try? FileManager.default.contentsOfDirectory(atPath: state)) ?? []).filter { $0.hasPrefix("work-") } }
    }

    @Test("a signed train request runs its tasks in this node's sandboxes: the rewards a local run gives, each task's trace, nothing left on the node")
    func trainRequestRuns() throws {
        try requireRoot()
        let node = try Node()
        let request = try node.request(["add-0", "add-1", "mul-0"])
        let r = try node.serve(try node.sign(request))
        #expect(r.status == 0, "\(r.stderr)")
        let answer = try RemoteWork.check(Array(r.stdout.utf8), for: request)
        #expect(answer.outcomes.map(\.id) == ["add-0", "add-1", "mul-0"])
        #expect(answer.outcomes.map(\.reward) == [1, 1, 0], "\(answer.outcomes)")
        #expect(answer.outcomes.map(\.status) == [.passed, .passed, .failed])
        #expect(Set(answer.traces.keys) == ["add-0", "add-1", "mul-0"] && answer.traces.values.allSatisfy { !$0.isEmpty }, "\(answer.traces.mapValues { $0.map(\.path) })")
        #expect(node.nonces == [request.nonce] && node.workDirectories.isEmpty, "\(node.workDirectories)")
    }

    /// A request for a shard of a command benchmark's run (the test tool `command_bench.py`,
    /// tasks sq-N), as the supervisor builds one for `executor: ray`.
    func commandRequest(_ node: Node, _ ids: [String], heldOut: Bool, binds: [String] = [Tools.root]) throws -> WorkRequest {
        var tool = ToolSettings(command: ["python3", Tools.root + "/command_bench.py", "--tasks", "{task_ids_file}", "--out", "{output}"])
        tool.binds = binds
        tool.timeout = 120
        var work = try RemoteWork(key: node.key, policySearchPaths: [Built.packageRoot + "/policies"])
        work.binarySHA256 = try WorkDigest.file(Built.autoharness)
        let command = NodeTool.command(tool: tool, scorer: nil, scorerBinds: [])
        return try work.request(tool: command, toolSHA256: try WorkDigest.files(command.digestedFiles), ids: ids, agentPy: Array(SquareAgents.upTo(3).utf8),
                                heldOut: heldOut, answerTo: heldOut ? NodeSealKey.publicText(node.answerKey) : nil)
    }

    @Test("a command benchmark's shard runs its tool on this node: the rewards and traces a local run gives (the tool saw only the shard's ids); held out, rewards and statuses only; an id with a line break, a node without the tool's install, or a bind holding the worker's state directory or scratch root is refused before its nonce")
    func commandShardRuns() throws {
        try requireRoot()
        let node = try Node()
        let request = try commandRequest(node, ["sq-2", "sq-3", "sq-4"], heldOut: false)
        #expect(request.tasks.allSatisfy { $0.files.isEmpty } && request.taskPolicy == "benchmark-runner" && request.verifierPolicy == "benchmark-scorer")
        // The script the runner's argv names is digested (python3, a name on PATH, is not).
        #expect(request.tool?.digestedFiles == [Tools.root + "/command_bench.py"] && request.toolSHA256 != nil, "\(request.tool?.digestedFiles ?? [])")
        let r = try node.serve(try node.sign(request))
        #expect(r.status == 0, "\(r.stderr)")
        let answer = try RemoteWork.check(Array(r.stdout.utf8), for: request)
        #expect(answer.outcomes.map(\.id) == ["sq-2", "sq-3", "sq-4"] && answer.outcomes.map(\.reward) == [1, 1, 0], "\(answer.outcomes)")
        let trace = try #require(answer.traces["sq-4"]?.first { $0.path == "answer.txt" }, "\(answer.traces.mapValues { $0.map(\.path) })")
        #expect(String(decoding: trace.bytes, as: UTF8.self).hasPrefix("id=sq-4 expected=16 got=? agent_write=E"), "\(String(decoding: trace.bytes, as: UTF8.self))")
        #expect(node.workDirectories.isEmpty)

        let held = try commandRequest(node, ["sq-1", "sq-9"], heldOut: true)
        let h = try node.serve(try node.sign(held))
        #expect(h.status == 0, "\(h.stderr)")
        let heldAnswer = try RemoteWork.check(Array(h.stdout.utf8), for: held, answerKey: node.answerKey)
        #expect(heldAnswer.outcomes.map(\.reward) == [1, 0] && heldAnswer.traces.isEmpty, "\(heldAnswer.outcomes)")
        #expect(heldAnswer.outcomes.allSatisfy { $0.detail == nil && $0.agentSeconds == 0 && $0.failures == nil }, "\(heldAnswer.outcomes)")

        let bad = try commandRequest(node, ["sq-1\nsq-2"], heldOut: false)
        let b = try node.serve(try node.sign(bad))
        #expect(b.status != 0 && b.stderr.contains("names an id that is not text without NUL or a line break") && !node.nonces.contains(bad.nonce), "\(b.stderr)")
        // Such a node says so in its check (and the supervisor gives it no request)...
        let check = try runProcess(Built.autoharness, ["worker", "--check", "--state", node.state, "--policy-dir", Built.packageRoot + "/policies",
                                                       "--check-path", Tools.root, "--check-path", "/nonexistent/tool-install", "--check-path", node.temp.path])
        let report = try JSONDecoder().decode(NodeReport.self, from: Data(check.stdout.utf8))
        #expect(report.problems.filter { $0.contains("on this node (the tool's") } == ["no /nonexistent/tool-install on this node (the tool's, at the supervisor's path)"],
                "\(report.problems)")
        // ...as does one whose tool would be given this worker's own directories.
        #expect(report.problems.contains("a path the tool runs with: \(node.temp.path) contains this worker's state directory \(node.state) (its sealing key, and each request's tasks while they run, held-out ones too)"),
                "\(report.problems)")
        // ...and refuses the shard, were it sent one.
        let elsewhere = try commandRequest(node, ["sq-1"], heldOut: false, binds: [Tools.root, "/nonexistent/tool-install"])
        let e = try node.serve(try node.sign(elsewhere))
        #expect(e.status != 0 && e.stderr.contains("this node lacks what the tool needs at the supervisor's paths (/nonexistent/tool-install)")
                && !node.nonces.contains(elsewhere.nonce), "\(e.stderr)")
        // A bind that holds this worker's own directories (its sealing key, each request's
        // files while they run, every task's tmpfs) is refused, whatever the supervisor sent.
        for own in [node.temp.path, "/dev/shm"] {
            let exposed = try commandRequest(node, ["sq-1"], heldOut: false, binds: [Tools.root, own])
            let x = try node.serve(try node.sign(exposed))
            #expect(x.status != 0 && x.stderr.contains("runner.binds: \(own) contains this worker's") && !node.nonces.contains(exposed.nonce), "\(x.stderr)")
        }
        #expect(node.nonces.count == 2 && node.workDirectories.isEmpty)
    }

    @Test("a held-out request answers rewards and statuses only: no trace, and its private directory is gone")
    func heldOutAnswersRewardsOnly() throws {
        try requireRoot()
        let node = try Node()
        let request = try node.request(["add-2", "mul-1"], heldOut: true)
        let r = try node.serve(try node.sign(request))
        #expect(r.status == 0, "\(r.stderr)")
        let answer = try RemoteWork.check(Array(r.stdout.utf8), for: request, answerKey: node.answerKey)
        #expect(answer.outcomes.map(\.reward) == [1, 0] && answer.traces.isEmpty)
        #expect(answer.outcomes.allSatisfy { $0.detail == nil && $0.agentSeconds == 0 && $0.verifierSeconds == 0 && $0.failures == nil }, "\(answer.outcomes)")
        #expect(node.workDirectories.isEmpty)
        // The node's kernel after held-out tasks: their pages were evicted (its journal says so).
        #expect(r.stderr.contains("held-out sandboxes done; dropped ") && r.stderr.contains("from the page cache"), "\(r.stderr)")
    }

    @Test("a held-out answer's agent-code flag crosses as a count only: one naming what the verifier ran is refused")
    func heldOutFlagIsACount() throws {
        try requireRoot()
        let node = try Node()
        var request = try node.request(["add-2", "mul-1"], heldOut: true)
        request.answerTo = nil  // the check of what the answer holds, without its seal
        func answer(_ flag: [String]?) throws -> [UInt8] {
            var a = TaskOutcome(id: "add-2", reward: 0, status: .failed)
            a.verifierRanAgentCode = flag
            return Array(try JSONEncoder().encode(WorkAnswer(nonce: request.nonce, outcomes: [a, TaskOutcome(id: "mul-1", reward: 0, status: .failed)])))
        }
        let counted = try RemoteWork.check(try answer(TaskOutcome.countedFlag(3, where: "on the node")), for: request)
        #expect(counted.outcomes[0].verifierRanAgentCode.flatMap { TaskOutcome.flagCount($0, where: "on the node") } == 3)
        for flag in [["opened /app/held-out-answer.py (python3)"], TaskOutcome.countedFlag(3, where: "on the node") + ["x"],
                     TaskOutcome.countedFlag(3, where: "in the held-out VM")] {
            #expect(throws: ExperimentError.self, "\(flag)") { try RemoteWork.check(try answer(flag), for: request) }
        }
    }

    @Test("a held-out answer carries what the vendor failed per task only when the request asked for it (gate.infra_retries: each task in a run of its own), as a bounded count")
    func heldOutVendorFailuresAsked() throws {
        try requireRoot()
        let node = try Node()
        var request = try node.request(["add-2"], heldOut: true)
        request.answerTo = nil  // the check of what the answer holds, without its seal
        func answer(_ failures: Int?) throws -> [UInt8] {
            var a = TaskOutcome(id: "add-2", reward: 0, status: .failed)
            a.vendorFailures = failures
            return Array(try JSONEncoder().encode(WorkAnswer(nonce: request.nonce, outcomes: [a])))
        }
        #expect(throws: ExperimentError.self, "not asked for") { try RemoteWork.check(try answer(2), for: request) }
        #expect(try RemoteWork.check(try answer(nil), for: request).outcomes[0].vendorFailures == nil)
        request.oneTaskPerRun = true
        #expect(try RemoteWork.check(try answer(2), for: request).outcomes[0].vendorFailures == 2)
        #expect(throws: ExperimentError.self, "a negative count") { try RemoteWork.check(try answer(-1), for: request) }
        #expect(throws: ExperimentError.self, "a count past the bound") { try RemoteWork.check(try answer(WorkLimits.maxViolationCount + 1), for: request) }
        // The node keeps the count only when asked.
        let kept = try RemoteWorker.answer(request, outcomes: [{ var o = TaskOutcome(id: "add-2", reward: 0, status: .failed); o.vendorFailures = 3; return o }()],
                                           audit: (AuditLog(), AuditLog()), traces: { _ in "/nonexistent" },
                                           .init(trustedKey: WorkKey.publicText(node.key), policySearchPaths: [], stateDirectory: node.state, scratchRoot: "/dev/shm"))
        #expect(kept.outcomes.map(\.vendorFailures) == [3])
        request.oneTaskPerRun = nil
        let dropped = try RemoteWorker.answer(request, outcomes: [{ var o = TaskOutcome(id: "add-2", reward: 0, status: .failed); o.vendorFailures = 3; return o }()],
                                              audit: (AuditLog(), AuditLog()), traces: { _ in "/nonexistent" },
                                              .init(trustedKey: WorkKey.publicText(node.key), policySearchPaths: [], stateDirectory: node.state, scratchRoot: "/dev/shm"))
        #expect(dropped.outcomes.map(\.vendorFailures) == [nil])
    }

    @Test("refused before anything runs: another key's signature, a body changed after signing, a replay, another binary, other policies, a path out of its task")
    func forgedRequestsRefused() throws {
        try requireRoot()
        let node = try Node()
        let request = try node.request(["add-0"])

        // The right key over the body alone, without the purpose label a work request is signed under.
        var unlabelled = try JSONDecoder().decode(SignedWork.self, from: Data(try node.sign(request)))
        unlabelled.signature = try node.key.signature(for: unlabelled.body)
        let bare = try node.serve(Array(try JSONEncoder().encode(unlabelled)))
        #expect(bare.status == 2 && bare.stderr.contains("signature is not the supervisor's"), "\(bare.stderr)")

        let foreign = try node.serve(try node.sign(request, with: Curve25519.Signing.PrivateKey()))
        #expect(foreign.status == 2 && foreign.stderr.contains("signature is not the supervisor's") && foreign.stdout.isEmpty, "\(foreign.stderr)")

        // The signed body with agent.py swapped afterwards (same length, so only the signature can tell).
        var envelope = try JSONDecoder().decode(SignedWork.self, from: Data(try node.sign(request)))
        var body = try JSONDecoder().decode(WorkRequest.self, from: envelope.body)
        body.agentPy = Data(Agents.all.utf8)
        envelope.body = try JSONEncoder().encode(body)
        let swapped = try node.serve(Array(try JSONEncoder().encode(envelope)))
        #expect(swapped.status == 2 && swapped.stderr.contains("signature is not the supervisor's"), "\(swapped.stderr)")
        #expect(node.nonces.isEmpty, "a refused request left its nonce: \(node.nonces)")

        var other = request
        other.binarySHA256 = String(repeating: "0", count: 64)
        let binary = try node.serve(try node.sign(other))
        #expect(binary.status == 2 && binary.stderr.contains("is not the supervisor's (0000000000000000)"), "\(binary.stderr)")

        var policies = request
        policies.policiesSHA256 = String(repeating: "f", count: 64)
        let policy = try node.serve(try node.sign(policies))
        #expect(policy.status == 2 && policy.stderr.contains("this node's policies"), "\(policy.stderr)")

        var escape = try node.request(["add-1"])
        escape.tasks[0].files.append(WorkFile(path: "../../escaped", executable: false, bytes: Data("x".utf8)))
        let path = try node.serve(try node.sign(escape))
        #expect(path.status == 2 && path.stderr.contains("is not a plain relative path"), "\(path.stderr)")
        #expect(!FileManager.default.fileExists(atPath: node.state + "/escaped") && node.workDirectories.isEmpty)

        var stale = try node.request(["add-2"])
        stale.expires = Date().timeIntervalSince1970 - 1
        let expired = try node.serve(try node.sign(stale))
        #expect(expired.status == 2 && expired.stderr.contains("the request expired"), "\(expired.stderr)")

        let signed = try node.sign(request)
        #expect(try node.serve(signed).status == 0)
        let replay = try node.serve(signed)
        #expect(replay.status == 2 && replay.stderr.contains("was run on this node before: a replay"), "\(replay.stderr)")
    }

    @Test("a node whose host cannot enforce a policy's limits says so in its check, and refuses a held-out request before it claims the nonce or writes a file")
    func unfitHostRefusesHeldOut() throws {
        try requireRoot()
        let node = try Node()
        let request = try node.request(["add-2"], heldOut: true)
        let bytes = try node.sign(request)
        let input = node.temp.file("held-out-request")
        FileManager.default.createFile(atPath: input, contents: Data(bytes))
        let policies = Built.packageRoot + "/policies"
        // The same host with its pids controller gone, in a mount namespace of the worker's
        // own: what a node that cannot limit a task's processes looks like.
        try #require(try runProcess("/usr/bin/mountpoint", ["-q", "/sys/fs/cgroup/pids"]).status == 0, "this host has no cgroup v1 pids mount to take away")
        func unfit(_ argv: String) throws -> Run {
            try runProcess("/usr/bin/unshare", ["--mount", "/bin/sh", "-c", RayClusterTests.dropLoopMounts + "; umount -l /sys/fs/cgroup/pids && exec \(Built.autoharness) worker \(argv) --policy-dir \(policies)"], stdinPath: input)
        }
        let fit = try runProcess(Built.autoharness, ["worker", "--check", "--state", node.state, "--policy-dir", policies])
        let healthy = try JSONDecoder().decode(NodeReport.self, from: Data(fit.stdout.utf8))
        #expect(healthy.problems.isEmpty, "\(healthy.problems)")
        let check = try unfit("--check --state \(node.state)")
        #expect(check.status == 0, "\(check.stderr)")
        let report = try JSONDecoder().decode(NodeReport.self, from: Data(check.stdout.utf8))
        #expect(report.problems.contains("policy benchmark-task: limits.pids cannot be enforced"), "\(report.problems)")
        #expect(report.binarySHA256 == healthy.binarySHA256 && report.policiesSHA256 == healthy.policiesSHA256)
        #expect(NodeCheck.unusable(report, binarySHA256: healthy.binarySHA256, policiesSHA256: healthy.policiesSHA256)?.contains("fails the host checks") == true)
        #expect(NodeCheck.unusable(healthy, binarySHA256: healthy.binarySHA256, policiesSHA256: healthy.policiesSHA256) == nil)

        let refused = try unfit("--supervisor-key \(node.keyFile) --state \(node.state)")
        #expect(refused.status == 2 && refused.stderr.contains("fails the host checks a held-out request needs") && refused.stderr.contains("limits.pids"), "\(refused.status) \(refused.stderr)")
        #expect(node.nonces.isEmpty && node.workDirectories.isEmpty, "the refused request left \(node.nonces) \(node.workDirectories)")
        // The same request on the host as it is runs (its nonce was never claimed).
        let ran = try node.serve(bytes)
        #expect(ran.status == 0, "\(ran.stderr)")
        #expect(try RemoteWork.check(Array(ran.stdout.utf8), for: request, answerKey: node.answerKey).outcomes.map(\.reward) == [1])
    }

    @Test("a held-out request naming a VM runs in a fresh one on its node (its tasks see another kernel; the same tasks on the node's kernel fail), and leaves nothing; a node that cannot boot that VM says so in its check and refuses the request before its nonce; a train request naming a VM is refused")
    func heldOutInNodeVM() throws {
        try HeldOutVMTests.requireVM()
        let node = try Node()
        var vm = VMSettings()
        (vm.accel, vm.allowEmulation, vm.memoryMiB) = (.tcg, true, 1536)
        // Solves a task only where the kernel is not the node's (its boot id differs).
        let agent = HeldOutVMTests.solver("if open('/proc/sys/kernel/random/boot_id').read().strip() == '\(HeldOutVMTests.hostBootID)':\n    return")
        func request(_ settings: VMSettings?, heldOut: Bool = true) throws -> WorkRequest {
            var r = try node.request(["add-2", "mul-1"], agent: agent, heldOut: heldOut)
            r.vm = settings
            return r
        }
        let inVM = try request(vm)
        let r = try node.serve(try node.sign(inVM))
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try RemoteWork.check(Array(r.stdout.utf8), for: inVM, answerKey: node.answerKey).outcomes.map(\.reward) == [1, 1], "\(r.stderr)")
        #expect(r.stderr.contains("held-out VM: 2 task(s) answered") && r.stderr.contains("held-out VM done; dropped "), "\(r.stderr)")
        #expect(node.workDirectories.isEmpty, "\(node.workDirectories)")
        // The control: the same tasks in the node's own sandboxes fail.
        let onHost = try request(nil)
        let h = try node.serve(try node.sign(onHost))
        #expect(h.status == 0, "\(h.stderr)")
        #expect(try RemoteWork.check(Array(h.stdout.utf8), for: onHost, answerKey: node.answerKey).outcomes.map(\.reward) == [0, 0])

        // A guest kernel that is not there: the check names it and the request is refused
        // before its nonce is taken.
        var broken = vm
        broken.kernelDirectory = node.temp.file("no-kernel")
        let policies = Built.packageRoot + "/policies"
        let json = String(decoding: try JSONEncoder().encode(broken), as: UTF8.self)
        let check = try runProcess(Built.autoharness, ["worker", "--check", "--state", node.state, "--policy-dir", policies, "--check-vm", json])
        #expect(check.status == 0, "\(check.stderr)")
        let report = try JSONDecoder().decode(NodeReport.self, from: Data(check.stdout.utf8))
        #expect(report.problems.contains { $0.contains("held-out VM") && $0.contains("no-kernel") }, "\(report.problems)")
        let good = try runProcess(Built.autoharness, ["worker", "--check", "--state", node.state, "--policy-dir", policies,
                                                      "--check-vm", String(decoding: try JSONEncoder().encode(vm), as: UTF8.self)])
        #expect(try JSONDecoder().decode(NodeReport.self, from: Data(good.stdout.utf8)).problems.isEmpty, "\(good.stdout) \(good.stderr)")
        let cannot = try request(broken)
        let refused = try node.serve(try node.sign(cannot))
        #expect(refused.status == 2 && refused.stderr.contains("cannot run the request's held-out VM"), "\(refused.status) \(refused.stderr)")
        let train = try request(vm, heldOut: false)
        let trainRefused = try node.serve(try node.sign(train))
        #expect(trainRefused.status == 2 && trainRefused.stderr.contains("a train request names a VM"), "\(trainRefused.status) \(trainRefused.stderr)")
        #expect(Set(node.nonces) == [inVM.nonce, onHost.nonce], "\(node.nonces)")
    }

    @Test("a node's bound on what later untrusted runs can hold, for the page cache's reclaim: a request per CPU, each with its task's and its verifier's memory limits or the largest a task declares; none where a policy has no memory limit")
    func nodeUntrustedMemory() throws {
        let shipped = PolicyLoader(searchPaths: [Built.packageRoot + "/policies"])
        let task = try #require(try shipped.load("benchmark-task", requireAllPlaceholders: false).limits.memory)
        let verifier = try #require(try shipped.load("verifier", requireAllPlaceholders: false).limits.memory)
        #expect(RemoteWorker.untrustedMemory(taskPolicy: "benchmark-task", verifierPolicy: "verifier", loader: shipped, cpus: 3) == 3 * (task + verifier))
        // A task's declared memory replaces both policies' for its sandboxes: the bound counts
        // the largest declared (8 GiB here), never less than a policy's (128 MiB is not).
        var large = BenchmarkTask(id: "large", directory: "/x")
        large.memory = 8 << 30
        var small = BenchmarkTask(id: "small", directory: "/y")
        small.memory = 128 << 20
        #expect(RemoteWorker.untrustedMemory(taskPolicy: "benchmark-task", verifierPolicy: "verifier", loader: shipped, cpus: 3,
                                             tasks: [small, large]) == UInt64(3 * 2 * 8) << 30)
        #expect(RemoteWorker.untrustedMemory(taskPolicy: "benchmark-task", verifierPolicy: "verifier", loader: shipped, cpus: 3,
                                             tasks: [small]) == 3 * (task + verifier))
        let temp = try TempDir()
        _ = try temp.file("unlimited.yaml", "filesystem:\n  mounts:\n    - rw: \"{workdir}:/app\"\nlimits:\n  pids: 64\n")
        let mixed = PolicyLoader(searchPaths: [temp.path, Built.packageRoot + "/policies"])
        #expect(try mixed.load("unlimited", requireAllPlaceholders: false).limits.memory == nil)
        #expect(RemoteWorker.untrustedMemory(taskPolicy: "unlimited", verifierPolicy: "verifier", loader: mixed, cpus: 3) == nil)
    }

    @Test("a held-out request travels sealed to its node and its answer sealed to the supervisor: a node that trusts the same supervisor but holds another key cannot open it, nor run it sealed again to it, and a held-out request that is not sealed is refused")
    func heldOutSealedToItsNode() throws {
        try requireRoot()
        let node = try Node(), other = try Node()
        try WorkKey.publicText(node.key).write(toFile: other.keyFile, atomically: true, encoding: .utf8)
        let request = try node.request(["add-2"], heldOut: true)
        let bytes = try node.sign(request)
        // Only ciphertext travels: no body in the clear, the sealed box instead.
        let envelope = try JSONDecoder().decode(SignedWork.self, from: Data(bytes))
        #expect(envelope.body.isEmpty && envelope.sealed != nil, "the request travels in the clear")
        let elsewhere = try other.serve(bytes)
        #expect(elsewhere.status == 2 && elsewhere.stderr.contains("sealed to another node"), "\(elsewhere.status) \(elsewhere.stderr)")
        // The plaintext (as the node it was sealed to could open it) sealed again to another
        // node: that node opens it, and refuses it, as it was signed for the first.
        let box = try #require(envelope.sealed)
        let nodeKey = try node.sealKey()
        let body = try #require(NodeSealKey.open(box, with: nodeKey))
        let resealed = SignedWork(body: Data(), signature: envelope.signature, sealed: try NodeSealKey.seal(body, to: NodeSealKey.publicText(try other.sealKey())))
        let forwarded = try other.serve(Array(try JSONEncoder().encode(resealed)))
        #expect(forwarded.status == 2 && forwarded.stderr.contains("the request is for another node"), "\(forwarded.status) \(forwarded.stderr)")
        let unsealed = try node.serve(try WorkKey.sign(request, with: node.key))
        #expect(unsealed.status == 2 && unsealed.stderr.contains("a held-out request must be sealed to this node"), "\(unsealed.status) \(unsealed.stderr)")
        #expect(node.nonces.isEmpty && other.nonces.isEmpty)
        let ran = try node.serve(bytes)
        #expect(ran.status == 0, "\(ran.stderr)")
        // The answer is sealed to the supervisor: no task id or reward in the clear, and
        // another key cannot open it.
        #expect(!ran.stdout.contains("add-2") && (try? JSONDecoder().decode(SealedAnswer.self, from: Data(ran.stdout.utf8))) != nil, "\(ran.stdout.prefix(200))")
        #expect(throws: ExperimentError.self) { try RemoteWork.check(Array(ran.stdout.utf8), for: request, answerKey: Curve25519.KeyAgreement.PrivateKey()) }
        #expect(try RemoteWork.check(Array(ran.stdout.utf8), for: request, answerKey: node.answerKey).outcomes.map(\.reward) == [1])
    }

    @Test("the node's state: a directory others can read is refused; what a killed worker left (its private directory, its held-out VM's work directory, its held-out pages) is cleaned up by the next worker that runs alone")
    func nodeState() throws {
        try requireRoot()
        let node = try Node()
        try FileManager.default.createDirectory(atPath: node.state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        let open = try node.serve(try node.sign(try node.request(["add-0"])))
        #expect(open.status == 2 && open.stderr.contains("must be a directory of this user's with mode 0700"), "\(open.stderr)")
        #expect(node.nonces.isEmpty)
        chmod(node.state, 0o700)
        let abandoned = node.state + "/work-" + String(repeating: "c", count: 32)
        try FileManager.default.createDirectory(atPath: abandoned + "/benchmark/tasks/add-9/tests", withIntermediateDirectories: true)
        // A killed worker's held-out VM work directory (its initramfs holds the held-out ids)
        // under the scratch root, and the journal of its held-out pages.
        let scratch = "/dev/shm/ahw-" + UUID().uuidString.prefix(8)
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let gone = Process()
        gone.executableURL = URL(fileURLWithPath: "/bin/true")
        try gone.run()
        gone.waitUntilExit()
        let deadOwner = "o\(gone.processIdentifier)-1-" + ProcessIdentity.current.tag.split(separator: "-").last!
        let vmWork = scratch + "/" + HeldOutVM.workPrefix + deadOwner + "-0123456789abcdef"
        try FileManager.default.createDirectory(atPath: vmWork, withIntermediateDirectories: true)
        FileManager.default.createFile(atPath: vmWork + "/initramfs", contents: Data("held-out ids".utf8))
        let read = node.temp.file("shared")
        try FileManager.default.createDirectory(atPath: read, withIntermediateDirectories: true)
        try Data(repeating: 7, count: 64 << 10).write(to: URL(fileURLWithPath: read + "/page"))
        _ = try runProcess("/bin/sync", [])
        _ = FileManager.default.contents(atPath: read + "/page")
        try #require(!(try PageCacheTests.resident(read + "/page")).isEmpty)
        try (read + "\n").write(toFile: node.state + "/held-out-pages", atomically: true, encoding: .utf8)
        let next = try node.serve(try node.sign(try node.request(["add-0"])), scratch: scratch)
        #expect(next.status == 0, "\(next.stderr)")
        #expect(!FileManager.default.fileExists(atPath: abandoned), "a killed worker's held-out files stayed")
        #expect(!FileManager.default.fileExists(atPath: vmWork), "a killed worker's held-out VM work directory stayed")
        #expect(!FileManager.default.fileExists(atPath: node.state + "/held-out-pages") && next.stderr.contains("a held-out run was cut off; dropped "), "\(next.stderr)")
        #expect(try PageCacheTests.resident(read + "/page").isEmpty, "a killed worker's held-out pages stayed cached")
    }

    @Test("a held-out request waits while a train request holds the node, and runs once it is done")
    func heldOutRunsAlone() throws {
        try requireRoot()
        let node = try Node()
        try FileManager.default.createDirectory(atPath: node.state, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        // A train worker in progress, as the node sees it: its shared lock on node.lock.
        let train = open(node.state + "/node.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        #expect(train >= 0 && flock(train, LOCK_SH) == 0)
        let input = node.temp.file("held-out-request")
        FileManager.default.createFile(atPath: input, contents: Data(try node.sign(try node.request(["add-1"], heldOut: true))))
        let worker = Process()
        worker.executableURL = URL(fileURLWithPath: Built.autoharness)
        worker.arguments = ["worker", "--supervisor-key", node.keyFile, "--state", node.state, "--policy-dir", Built.packageRoot + "/policies"]
        worker.standardInput = FileHandle(forReadingAtPath: input)
        worker.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
        try worker.run()
        usleep(3_000_000)
        #expect(worker.isRunning && node.nonces.isEmpty, "the held-out request ran beside a train request")
        close(train)
        worker.waitUntilExit()
        #expect(worker.terminationStatus == 0 && node.nonces.count == 1)
    }

    @Test("an answer is used only when it is one: its nonce, the requested ids in order, valid rewards, no held-out traces, no path outside its task, violation names whole only in a train answer")
    func answersChecked() throws {
        let request = WorkRequest(nonce: String(repeating: "a", count: 32), heldOut: true, binarySHA256: "", policiesSHA256: "",
                                  taskPolicy: "t", verifierPolicy: "v", concurrency: 1, agentPy: Data(),
                                  tasks: [WorkTask(id: "x", files: []), WorkTask(id: "y", files: [])])
        let good = WorkAnswer(nonce: request.nonce, outcomes: [TaskOutcome(id: "x", reward: 1, status: .passed), TaskOutcome(id: "y", reward: 0, status: .failed)])
        func bytes(_ a: WorkAnswer) throws -> [UInt8] { Array(try JSONEncoder().encode(a)) }
        #expect(try RemoteWork.check(try bytes(good), for: request) == good)
        var wrongNonce = good
        wrongNonce.nonce = String(repeating: "b", count: 32)
        var missing = good
        missing.outcomes.removeLast()
        var reordered = good
        reordered.outcomes.reverse()
        var inflated = good
        inflated.outcomes[1] = TaskOutcome(id: "y", reward: 1, status: .agentTimeout)
        var outOfRange = good
        outOfRange.outcomes[0].reward = 2
        var traced = good
        traced.traces = ["x": [WorkFile(path: "result.json", executable: false, bytes: Data())]]
        var timed = good
        timed.outcomes[0].agentSeconds = 12.5
        var detailed = good
        detailed.outcomes[1].detail = "expected 42, got 41"
        var flooded = good
        flooded.violations = [WorkViolation(agent: true, kind: "syscall", name: "ptrace", count: Int.max)]
        for (name, bad) in [("nonce", wrongNonce), ("missing", missing), ("reordered", reordered), ("inflated", inflated),
                            ("out of range", outOfRange), ("held-out trace", traced), ("held-out timing", timed),
                            ("held-out detail", detailed), ("uncapped count", flooded)] {
            #expect(throws: ExperimentError.self, "\(name)") { try RemoteWork.check(try bytes(bad), for: request) }
        }
        var train = request
        train.heldOut = false
        var outside = good
        outside.traces = ["x": [WorkFile(path: "../x", executable: false, bytes: Data())]]
        #expect(throws: ExperimentError.self) { try RemoteWork.check(try bytes(outside), for: train) }
        #expect(throws: ExperimentError.self) { try RemoteWork.check(Array(repeating: 0x20, count: WorkLimits.maxAnswer + 1), for: train) }
        // A violation's name: a path only in a train answer (a held-out one could name a
        // test's file), printable, bounded.
        var linked = good
        linked.violations = [WorkViolation(agent: true, kind: "planted_link", name: "/app/answer.txt -> /tests/expected.txt", count: 1)]
        #expect(try RemoteWork.check(try bytes(linked), for: train).violations == linked.violations)
        #expect(throws: ExperimentError.self, "a path in a held-out answer") { try RemoteWork.check(try bytes(linked), for: request) }
        for name in ["a\nb", String(repeating: "x", count: WorkLimits.maxTrainName + 1), ""] {
            var bad = good
            bad.violations = [WorkViolation(agent: true, kind: "planted_link", name: name, count: 1)]
            #expect(throws: ExperimentError.self, "\(name.prefix(8))") { try RemoteWork.check(try bytes(bad), for: train) }
        }
        // What a node answers: a train answer keeps the name, a held-out one folds it.
        let audit = AuditLog()
        audit.record(AuditEvent(sandbox: "s", kind: .plantedLink, name: "/app/answer.txt -> /tests/expected.txt", action: "removed"))
        #expect(RemoteWorker.counts(audit, agent: true, heldOut: false).map(\.name) == ["/app/answer.txt -> /tests/expected.txt"])
        #expect(RemoteWorker.counts(audit, agent: true, heldOut: true).map(\.name) == ["other"])
    }
}
