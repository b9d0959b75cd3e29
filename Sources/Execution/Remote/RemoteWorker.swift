import Benchmark
import ExperimentModel
import Foundation
import Glibc
import Sandbox
import SandboxPolicy
import SupervisorIO

/// A node's side of remote work (`autoharness worker`): one signed request in, one answer
/// out, nothing of the experiment kept.
///
/// Before anything runs: the signature must be the supervisor's (`WorkKey.open`), the nonce
/// new on this node, this node's autoharness binary and policies the ones the supervisor
/// named. Then the tasks are written to a private directory and run by the local adapter,
/// exactly as on the supervisor's host (task sandbox, then verifier sandbox, with this
/// node's cgroups and audit); the directory is removed before the answer is written.
public enum RemoteWorker {
    public struct Settings: Sendable {
        /// The supervisor's public key (base64).
        public var trustedKey: String
        public var policySearchPaths: [String]
        /// Root-owned: nonces seen, and each request's private directory while it runs.
        public var stateDirectory: String
        /// Per-task tmpfs scratch (as `sandbox.scratch` on the supervisor).
        public var scratchRoot: String
        public var log: @Sendable (String) -> Void = { _ in }

        public init(trustedKey: String, policySearchPaths: [String], stateDirectory: String, scratchRoot: String) {
            self.trustedKey = trustedKey
            self.policySearchPaths = policySearchPaths
            self.stateDirectory = stateDirectory
            self.scratchRoot = scratchRoot
        }
    }

    /// The bytes to answer `input` with: the answer as JSON, sealed to the supervisor's key
    /// for a request that names one (every held-out request).
    public static func answer(_ input: [UInt8], _ s: Settings) throws -> [UInt8] {
        let (request, answer) = try serve(input, s)
        let json = try JSONEncoder().encode(answer)
        guard let to = request.answerTo else { return Array(json) }
        return Array(try JSONEncoder().encode(SealedAnswer(sealed: try NodeSealKey.seal(json, to: to, info: NodeSealKey.answerInfo))))
    }

    static func serve(_ input: [UInt8], _ s: Settings) throws -> (WorkRequest, WorkAnswer) {
        try checkStateDirectory(s.stateDirectory)
        let request = try WorkKey.open(input, trusted: s.trustedKey, node: try NodeSealKey.load(orCreateAt: s.stateDirectory + "/node-key"))
        let binary = try WorkDigest.executable()
        guard binary == request.binarySHA256 else {
            throw ExperimentError(.refused, "this node's autoharness (sha256 \(binary.prefix(16))) is not the supervisor's (\(request.binarySHA256.prefix(16))): refused, nothing ran")
        }
        let policies = try WorkDigest.policies(s.policySearchPaths)
        guard policies == request.policiesSHA256 else {
            throw ExperimentError(.refused, "this node's policies (sha256 \(policies.prefix(16)), from \(s.policySearchPaths.joined(separator: ", "))) are not the supervisor's (\(request.policiesSHA256.prefix(16))): refused, nothing ran")
        }
        guard request.nonce.count == 32, request.nonce.allSatisfy({ $0.isHexDigit }) else {
            throw ExperimentError(.refused, "the request's nonce is not 32 hex digits")
        }
        guard (1...64).contains(request.concurrency), !request.tasks.isEmpty else {
            throw ExperimentError(.refused, "the request names no task or a concurrency outside 1...64")
        }
        var toolAdapter: (any BenchmarkAdapter)?
        if let tool = request.tool {
            guard request.vm == nil else { throw ExperimentError(.refused, "a tool benchmark's request names a held-out VM (not built for tools): refused, nothing ran") }
            var seen = Set<String>()
            guard request.tasks.allSatisfy({ NodeToolWork.isValidID($0.id) && NodeToolWork.filesFit(tool, $0.files) && seen.insert($0.id).inserted }) else {
                throw ExperimentError(.refused, "a tool's request names an id that is not text without NUL or a line break of at most 512 bytes, names one twice, or sends files its tool does not take: refused, nothing ran")
            }
            try NodeToolWork.checkInstall(paths: tool.requiredPaths, files: tool.digestedFiles, expected: request.toolSHA256,
                                          needs: "the tool", copy: "copy of the tool's files", after: "another version of the tool is installed here; ")
            if let why = NodeToolWork.exposure(tool) ?? NodeToolWork.exposure(binds: tool.nodeBinds, paths: tool.requiredPaths, state: s.stateDirectory, scratch: s.scratchRoot) {
                throw ExperimentError(.refused, "on this node, \(why): refused, nothing ran")
            }
            do { toolAdapter = try NodeToolWork.adapter(tool, request) } catch {
                throw ExperimentError(.refused, "this node's copy of the tool cannot run the shard's tasks: refused, nothing ran", cause: error)
            }
        }
        if let harbor = request.harbor { try NodeHarborWork.check(harbor, request, s) }
        guard request.vm == nil || request.heldOut else {
            throw ExperimentError(.refused, "a train request names a VM (only held-out requests run in one)")
        }
        let (images, tools) = try nodeEnvironment(request, s)
        guard request.expires > Date().timeIntervalSince1970 else {
            throw ExperimentError(.refused, "the request expired at \(Int(request.expires)) (unix time): refused, nothing ran")
        }
        // Held-out tasks run only where the supervisor's own host checks pass (the driver
        // sends them only to nodes whose `--check` report passed; this is the node's own
        // refusal if the host changed since).
        if request.heldOut {
            let policies = [request.taskPolicy, request.verifierPolicy] + (request.harbor.map { [$0.tool.runnerPolicy] } ?? [])
            let problems = NodeCheck.problems(policies: policies, loader: PolicyLoader(searchPaths: s.policySearchPaths))
            guard problems.isEmpty else {
                throw ExperimentError(.refused, "this node fails the host checks a held-out request needs (\(problems.joined(separator: "; "))): refused, nothing ran")
            }
        }
        // A held-out VM this node cannot boot (no qemu or guest kernel, no KVM and no consent
        // to emulate) is refused here too, before the nonce (the driver's check should have
        // kept the request from this node; its refusal still interrupts the gate).
        var machine: HeldOutVM?
        if let settings = request.vm {
            do { machine = try HeldOutVM(settings: settings, log: s.log) } catch {
                throw ExperimentError(.refused, "this node cannot run the request's held-out VM, so it refused it and ran nothing", cause: error)
            }
        }
        // Held-out tasks run alone on this node: no train task of any request runs beside
        // them, and the next one starts after their pages are evicted (the lock is released
        // when this process ends, however it ends).
        // So does a tool that cannot run beside itself (bird-interact: its runs record and undo
        // the roles and settings that appear on the node's database server while they run).
        for line in try lockNode(s.stateDirectory, scratchRoot: s.scratchRoot, exclusive: request.heldOut || toolAdapter?.runsBesideItself == false) { s.log(line) }
        // Under the lock (nothing else of this node's reads the server meanwhile, and its
        // template databases stay as compared), still before the nonce: the databases.
        if let tool = request.tool, let why = NodeToolWork.databaseMismatch(tool, toolAdapter, ids: request.tasks.map(\.id)) {
            throw ExperimentError(.refused, "on this node, \(why): refused, nothing ran")
        }
        try claimNonce(request.nonce, in: s.stateDirectory)

        let work = s.stateDirectory + "/work-" + request.nonce
        if let e = FileSystem.makeDirectories(work, mode: 0o711) { throw ExperimentError(.io, "\(work): \(ErrnoName.describe(e))") }
        defer { _ = FileSystem.removeTree(work) }
        try materialize(request, in: work)

        // The per-task tmpfs mounts go under the scratch root, which a fresh node (a new
        // container) does not have yet: made as the supervisor makes its own.
        if let e = FileSystem.makeDirectories(s.scratchRoot, mode: 0o700) { throw ExperimentError(.io, "\(s.scratchRoot): \(ErrnoName.describe(e))") }
        if let toolAdapter {
            // A tool's ids name no file: each trace directory's name is encoded.
            let memory = untrustedMemory(taskPolicy: request.taskPolicy, verifierPolicy: request.verifierPolicy, loader: PolicyLoader(searchPaths: s.policySearchPaths),
                                         cpus: Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))))
            return (request, try runTool(toolAdapter, request, traces: { work + "/traces/" + TraceName.encode($0) }, memory: memory, work: work, s))
        }
        if let harbor = request.harbor {
            return (request, try NodeHarborWork.run(harbor, request, work: work, images: images, tools: tools, s))
        }
        let bench: LocalBenchmark
        do { bench = try LocalBenchmark(directory: work + "/benchmark") } catch { throw ExperimentError(.refused, "the request's tasks", cause: error) }
        var adapter = LocalAdapter(benchmark: bench)
        adapter.taskPolicy = request.taskPolicy
        adapter.verifierPolicy = request.verifierPolicy
        adapter.defaultAgentTimeout = request.defaultAgentTimeout
        adapter.verifierTools = tools
        if !images.byTask.isEmpty || !images.refused.isEmpty { adapter.images = images }
        let agent = AuditLog(), tool = AuditLog()
        let heldOut = request.heldOut
        let ids = request.tasks.map(\.id)
        let all: [TaskOutcome]
        if let machine {
            let split: SplitClass = heldOut ? .heldOut : .trainUntraced
            all = LocalExecution.complete(ids, try runInVM(request, machine, work: work, benchmark: bench, s, agent: agent, tool: tool),
                                          split: split, adapter: adapter.name)
        } else {
            // Held-out tasks leave this node's kernel as the supervisor's host would be left:
            // their pages evicted, the inode-number counters moved, before anything runs again.
            let loader = PolicyLoader(searchPaths: s.policySearchPaths)
            let here = LocalExecution(adapter: adapter, policyLoader: loader, scratchRoot: s.scratchRoot, concurrency: request.concurrency,
                                      log: s.log, evictionJournal: s.stateDirectory + "/held-out-pages",
                                      untrustedMemory: untrustedMemory(taskPolicy: request.taskPolicy, verifierPolicy: request.verifierPolicy,
                                                                       loader: loader, cpus: Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))), tasks: bench.tasks),
                                      withheld: "sent")
            let split: SplitClass = heldOut ? .heldOut : .train(traces: { work + "/traces/" + $0 })
            // What the adapter throws is an I/O failure of the node's (exit 5), as the
            // worker's exit statuses say; the request was not refused.
            do {
                all = try here.run(ids, agentDirectory: work + "/agent", split: split, audit: (agent, tool))
            } catch let e as ExperimentError {
                throw e
            } catch {
                throw ExperimentError(.io, "running the tasks", cause: error)
            }
        }
        return (request, try answer(request, outcomes: all, audit: (agent, tool), traces: { work + "/traces/" + $0 }, s))
    }

    /// The answer to `request` from its outcomes: a held-out answer is what a held-out VM's
    /// is (each task's reward and status class, and counts of refusals by kind and name; no
    /// detail, no timing, no evidence; the agent-code flag as its count); a train answer also
    /// carries each task's trace from `traces(id)`, within the answer's budget.
    static func answer(_ request: WorkRequest, outcomes all: [TaskOutcome], audit: (agent: AuditLog, tool: AuditLog),
                       traces: (String) -> String, _ s: Settings) throws -> WorkAnswer {
        let heldOut = request.heldOut
        var answer = WorkAnswer(nonce: request.nonce, outcomes: heldOut ? all.map { o in
            var kept = TaskOutcome(id: o.id, reward: o.reward, status: o.status)
            if let flag = o.verifierRanAgentCode, !flag.isEmpty { kept.verifierRanAgentCode = TaskOutcome.countedFlag(min(flag.count, 1000), where: "on the node") }
            // What the vendor failed, counted by the task's own gate, when the supervisor asked
            // (`gate.infra_retries`): a count, as from a held-out VM.
            if request.oneTaskPerRun == true { kept.vendorFailures = o.vendorFailures.map { min($0, WorkLimits.maxViolationCount) } }
            return kept
        } : all)
        answer.violations = counts(audit.agent, agent: true, heldOut: heldOut) + counts(audit.tool, agent: false, heldOut: heldOut)
        if !heldOut {
            // The whole answer stays under the supervisor's limit whatever agent.py wrote:
            // traces past the budget are left out (the outcomes stay), so an answer is never
            // oversized by a task's own output and no node is excluded for it.
            var budget = WorkLimits.maxAnswer / 2
            for id in request.tasks.map(\.id) {
                let files = try collect(traces(id))
                let size = files.reduce(0) { $0 + $1.bytes.count + $1.path.utf8.count + 64 }
                if size > budget {
                    s.log("task \(id): its trace (\(size) bytes) is left out of the answer: the traces of this request are over \(WorkLimits.maxAnswer / 2) bytes")
                    continue
                }
                budget -= size
                answer.traces[id] = files
            }
        }
        return answer
    }

    /// The most memory later untrusted runs on this node can hold at once: a request per CPU
    /// (the driver asks Ray for one CPU per request), each with its task's and its verifier's
    /// sandbox at their policies' `limits.memory` or the largest a task declares; nil if
    /// either policy has none. The held-out pages are reclaimed rather than walked only where
    /// free memory holds it (`PageCacheEviction`).
    static func untrustedMemory(taskPolicy: String, verifierPolicy: String, loader: PolicyLoader, cpus: Int, tasks: [BenchmarkTask] = []) -> UInt64? {
        ExecutionBounds.memory(each: [taskPolicy, verifierPolicy], times: cpus, loader: loader, tasks: tasks)
    }

    /// A held-out request's tasks in a fresh VM on this node (`HeldOutVM`, as a gate with
    /// `held_out_runtime: vm` boots on the supervisor's host): the guest reads this request's
    /// tasks and agent.py through read-only shares, runs them with the request's policies
    /// (`NodeGuestSettings`, typed in the request), and answers rewards, status classes and
    /// violation counts. What qemu read of the shares for it is
    /// evicted from this node's page cache before the answer.
    static func runInVM(_ request: WorkRequest, _ vm: HeldOutVM, work: String, benchmark: LocalBenchmark, _ s: Settings,
                        agent: AuditLog, tool: AuditLog) throws -> [TaskOutcome] {
        // The guest runs a local benchmark with this request's policies: typed settings in the
        // request, no config file (the node has none).
        let settings = NodeGuestSettings(taskPolicy: request.taskPolicy, verifierPolicy: request.verifierPolicy, scratch: s.scratchRoot,
                                         perTaskTimeout: request.defaultAgentTimeout)
        let config = settings.config
        let ids = request.tasks.map(\.id)
        var guest = GuestRequest(experimentRoot: work, configPath: "", policySearchPaths: s.policySearchPaths,
                                 agentDirectory: work + "/agent", ids: ids, concurrency: request.concurrency)
        guest.node = settings
        let loader = PolicyLoader(searchPaths: s.policySearchPaths)
        let image = try GuestImage.plan(request: guest, config: config, policyLoader: loader, adapterPaths: [benchmark.directory], scratch: s.scratchRoot)
        let bound = ExecutionBounds.heldOut(ids, tasks: benchmark.tasks, fallback: request.defaultAgentTimeout ?? LocalBenchmark.defaultTimeout,
                                                      concurrency: request.concurrency)
        // A failed boot's console goes to the request's directory, removed with it: nothing of
        // a held-out run stays on the node.
        // What qemu read for the guest leaves the page cache, and the process serial its
        // threads moved gets noise, before the answer goes back.
        let result = try vm.runSettled(guest, image: image, scratch: s.scratchRoot, privateDirectory: work,
                                       deadline: vm.settings.bootTimeout + bound, journal: s.stateDirectory + "/held-out-pages", withheld: "sent")
        result.answer.record(agent: agent, tool: tool)
        s.log("held-out VM: \(ids.count) task(s) answered; boot \(String(format: "%.1f", result.bootSeconds)) s, whole VM \(String(format: "%.1f", result.totalSeconds)) s")
        return result.answer.outcomes
    }

    /// The state directory holds the nonces and held-out files: root's alone, never a link.
    static func checkStateDirectory(_ path: String) throws {
        if let e = FileSystem.makeDirectories(path, mode: 0o700) { throw ExperimentError(.io, "\(path): \(ErrnoName.describe(e))") }
        var st = stat()
        guard lstat(path, &st) == 0, FileSystem.isDirectory(st), st.st_uid == getuid(), st.st_mode & 0o077 == 0 else {
            throw ExperimentError(.refused, "the worker's state directory \(path) must be a directory of this user's with mode 0700, not a link")
        }
    }

    /// Shared for train requests, exclusive for held-out ones: `node.lock` in the state
    /// directory, held until this process exits. A worker that finds no other running first
    /// cleans up after workers that were killed (their `defer` never ran): their private
    /// directories, their held-out VMs' work directories, and what their held-out runs left
    /// in the page cache (their journal); only then can none of it be in use. Returns what it
    /// cleaned up.
    static func lockNode(_ state: String, scratchRoot: String, exclusive: Bool) throws -> [String] {
        var cleaned: [String] = []
        let fd = openLock(state)
        guard fd >= 0 else { throw ExperimentError(.io, "\(state)/node.lock: \(ErrnoName.describe(errno))") }
        func lock(_ operation: Int32) -> Bool {
            while flock(fd, operation) != 0 { if errno != EINTR { return false } }
            return true
        }
        if lock(LOCK_EX | LOCK_NB) {
            for name in FileSystem.names(in: state) where name.hasPrefix("work-") { _ = FileSystem.removeTree(state + "/" + name) }
            // A task image a killed receive was taking (`NodeImageStore.receive`).
            for name in FileSystem.names(in: state + "/images") where name.hasPrefix(".partial-") { _ = FileSystem.removeTree(state + "/images/" + name) }
            cleaned += HeldOutVM.sweepWork(scratchRoot)
            if let settled = HeldOutSettle.settleLeftover(journal: state + "/held-out-pages") {
                cleaned += settled.lines
                if let failure = settled.failure {
                    close(fd)
                    throw ExperimentError(.io, "the clean-up of a held-out run on this node is still owed: \(failure); no task runs here until it succeeds")
                }
            }
            // A train request goes on under a shared lock (a conversion: held-out workers
            // waiting meanwhile may get in first, which only delays this one).
            if exclusive || lock(LOCK_SH) { return cleaned }  // fd deliberately left open: the lock lasts as long as this worker
        } else if errno == EWOULDBLOCK, lock(exclusive ? LOCK_EX : LOCK_SH) {
            return cleaned
        }
        let e = errno
        close(fd)
        throw ExperimentError(.io, "\(state)/node.lock: \(ErrnoName.describe(e))")
    }

    /// A nonce is run once on a node: its marker is created exclusively.
    static func claimNonce(_ nonce: String, in state: String) throws {
        let dir = state + "/nonces"
        if let e = FileSystem.makeDirectories(dir, mode: 0o700) { throw ExperimentError(.io, "\(dir): \(ErrnoName.describe(e))") }
        let fd = open(dir + "/" + nonce, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            if errno == EEXIST { throw ExperimentError(.refused, "request \(nonce) was run on this node before: a replay, refused") }
            throw ExperimentError(.io, "\(dir)/\(nonce): \(ErrnoName.describe(errno))")
        }
        close(fd)
    }

    /// Whether `path` is a relative path of plain names (no `.`, `..`, empty or over-long
    /// component, at most 32 deep).
    static func isPlainRelative(_ path: String) -> Bool {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        return !path.isEmpty && parts.count <= 32 && !path.utf8.contains(0)
            && parts.allSatisfy { !$0.isEmpty && $0 != "." && $0 != ".." && $0.utf8.count <= 255 }
    }

    /// The request's agent.py and tasks as files: `agent/agent.py`, `benchmark/tasks/<id>/...`.
    static func materialize(_ r: WorkRequest, in work: String) throws {
        func write(_ bytes: Data, _ path: String, mode: mode_t) throws {
            let parent = (path as NSString).deletingLastPathComponent
            if let e = FileSystem.makeDirectories(parent, mode: 0o755) { throw ExperimentError(.io, "\(parent): \(ErrnoName.describe(e))") }
            do throws(IOFailure) { try AtomicFile.write(Array(bytes), to: path, mode: mode) } catch { throw ExperimentError(.io, "", cause: error) }
        }
        guard r.agentPy.count <= AgentFile.maxBytes else { throw ExperimentError(.refused, "agent.py is over \(AgentFile.maxBytes) bytes") }
        try write(r.agentPy, work + "/agent/agent.py", mode: 0o644)
        var seen = Set<String>()
        // A tool's ids name no file here (`serve` checked them and what they carry, which the tool's adapter holds).
        for task in r.tasks where r.tool == nil {
            guard BenchmarkTask.isValidID(task.id), seen.insert(task.id).inserted else {
                throw ExperimentError(.refused, "task id '\(printable(task.id))' is not valid or named twice")
            }
            guard task.files.count <= WorkLimits.maxFilesPerTask else { throw ExperimentError(.refused, "task \(task.id): over \(WorkLimits.maxFilesPerTask) files") }
            for f in task.files {
                guard isPlainRelative(f.path), f.bytes.count <= WorkLimits.maxFile else {
                    throw ExperimentError(.refused, "task \(task.id): file '\(printable(f.path))' is not a plain relative path under \(WorkLimits.maxFile) bytes")
                }
                try write(f.bytes, work + "/benchmark/tasks/" + task.id + "/" + f.path, mode: f.executable ? 0o755 : 0o644)
            }
        }
        if let e = FileSystem.makeDirectories(work + "/traces", mode: 0o700) { throw ExperimentError(.io, "\(work)/traces: \(ErrnoName.describe(e))") }
    }

    /// The regular files under `root` (no link followed), capped in count and size. `strict`
    /// (a task sent to a node): anything not sent whole (a link, a special file, a file over
    /// the cap, one too many) is an error instead of being left out.
    static func collect(_ root: String, strict: Bool = false) throws -> [WorkFile] {
        var out: [WorkFile] = []
        var total = 0
        func walk(_ dir: Int32, _ prefix: String) throws {
            guard let names = FileSystem.entries(of: dir) else { return }
            for name in names.sorted(by: { FileSystem.display($0) < FileSystem.display($1) }) {
                let shown = FileSystem.display(name)
                guard let st = FileSystem.entryStatus(at: dir, name) else { continue }
                if strict && !(FileSystem.isDirectory(st) || (FileSystem.isRegular(st) && Int(st.st_size) <= WorkLimits.maxFile)) {
                    throw ExperimentError(.usage, "\(root)/\(prefix + shown): not a regular file under \(WorkLimits.maxFile) bytes; a task sent to a node goes whole or not at all")
                }
                let raw = name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
                if strict && (Array(shown.utf8) != raw || out.count >= WorkLimits.maxFilesPerTask) {
                    throw ExperimentError(.usage, "\(root): over \(WorkLimits.maxFilesPerTask) files, or a name that is not UTF-8")
                }
                if FileSystem.isDirectory(st) {
                    let sub = FileSystem.openDirectory(at: dir, name)
                    guard sub >= 0 else { continue }
                    defer { close(sub) }
                    try walk(sub, prefix + shown + "/")
                } else if FileSystem.isRegular(st) {
                    guard out.count < WorkLimits.maxFilesPerTask, let bytes = FileSystem.readCapped(at: dir, shown, cap: WorkLimits.maxFile) else { continue }
                    total += bytes.count
                    guard total <= WorkLimits.maxAnswer / 2 else {
                        if strict { throw ExperimentError(.usage, "\(root): over \(WorkLimits.maxAnswer / 2) bytes in all; a task sent to a node goes whole or not at all") }
                        throw ExperimentError(.io, "the traces are over \(WorkLimits.maxAnswer / 2) bytes")
                    }
                    out.append(WorkFile(path: prefix + shown, executable: st.st_mode & 0o111 != 0, bytes: Data(bytes)))
                }
            }
        }
        let fd = FileSystem.openDirectory(root)
        guard fd >= 0 else { return [] }
        defer { close(fd) }
        try walk(fd, "")
        return out
    }

    /// Violations by kind and name, as the supervisor's ledger rows count them.
    static func counts(_ audit: AuditLog, agent: Bool, heldOut: Bool) -> [WorkViolation] {
        var out: [String: WorkViolation] = [:]
        for e in audit.events where e.isViolation {
            let kind = e.countedKind.rawValue
            // A held-out name is a syscall, a limit or a host:port; anything else (a path that
            // could name a test's file) is folded. A train name is the coding agent's to read
            // anyway: kept whole when printable (a planted link's `/app/x -> /tests/y`).
            let name = String(e.name.prefix(heldOut ? WorkLimits.maxName : WorkLimits.maxTrainName))
            let shown = (heldOut ? GuestAnswer.isName(name) : WorkViolation.isTrainName(name)) ? name : "other"
            let key = kind + "\u{1F}" + shown
            let now = out[key]?.count ?? 0
            out[key, default: WorkViolation(agent: agent, kind: kind, name: shown, count: 0)].count = min(now + (e.count ?? 1), WorkLimits.maxViolationCount)
        }
        return out.keys.sorted().prefix(WorkLimits.maxViolations / 2).map { out[$0]! }
    }
}
