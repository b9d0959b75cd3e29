import Benchmark
import Crypto
import ExperimentModel
import Foundation
import Sandbox
import SupervisorIO

/// `executor: ray`: the tasks run on the cluster's nodes, a signed request of
/// `executor.tasks_per_request` tasks at a time, and only checked answers come back; with
/// `held_out_runtime: vm` each held-out request runs in a fresh VM on its node. Which nodes
/// work, where a held-out request is sealed to, and what a lost or bad answer means are
/// `RemoteBatch`'s rules; a run they end records nothing, and a gate it belongs to ends as
/// interrupted (it was counted before it began), never as a silent 0. Held-out answers come
/// back sealed to a key of the batch's, which never leaves this executor.
package struct RayNodeExecutor: TaskExecutor {
    let environment: ExecutorEnvironment
    /// Where the shipped templates are (the Ray driver).
    let templatesDirectory: String?
    /// The nodes the experiment has excluded so far, and how a new exclusion is recorded.
    let excludedNodes: () throws -> [NodeExcludedRecord]
    let recordExclusion: (NodeExcludedRecord) throws -> Void
    /// Appends a note to the experiment's ledger (a held-out request run again elsewhere).
    package var recordNote: (String) throws -> Void = { _ in }

    /// The policies a node's check must find enforceable: those the requests name (a tool's
    /// runner and scorer stand in a task's and a verifier's place), else `otherwise`. A node
    /// checked for others would be chosen and then refuse each held-out request, ending the gate.
    package static func checkedPolicies(_ requests: [WorkRequest], otherwise: [String]) -> [String] {
        var names: [String] = []
        for r in requests {
            for p in [r.taskPolicy, r.verifierPolicy] + (r.harbor.map { [$0.tool.runnerPolicy] } ?? []) where !names.contains(p) { names.append(p) }
        }
        return names.isEmpty ? otherwise : names
    }

    package func run(_ run: TaskRun) throws -> [TaskOutcome] {
        let (config, layout, log) = (environment.config, environment.layout, environment.log)
        let (ids, agent, audit, heldOut, traces) = (run.ids, run.agent, run.audit, run.split.keepsNothing, run.split.traces)
        // A local benchmark's tasks travel with their files, and so do terminal-bench's (with
        // how Harbor runs their agent phase: `HarborNode`); a tool benchmark's ids (command,
        // bfcl, tau-bench, inspect, bird-interact), in shards, with its settings (`NodeTool`):
        // each node runs the tool on its shard.
        let local = environment.adapter as? LocalAdapter
        let harborAdapter = environment.adapter as? HarborAdapter
        let sharded = environment.adapter as? any RunsInShards
        let tool: NodeTool?, harbor: HarborNode?
        do {
            tool = try sharded?.nodeTool
            harbor = try harborAdapter?.node
        } catch { throw ExperimentError(.usage, error.message) }
        if local == nil && tool == nil && harbor == nil {
            throw ExperimentError(.usage, "executor: ray runs a local, terminal-bench, command, bfcl, tau-bench, inspect or bird-interact benchmark's tasks so far; \(environment.adapter.name) runs its own tool")
        }
        guard let address = config.executor.address else { throw ExperimentError(.usage, "executor.address: missing") }
        guard let templates = templatesDirectory else {
            throw ExperimentError(.usage, "executor: ray needs the Ray driver from autoharness's templates (set AUTOHARNESS_TEMPLATE_DIR)")
        }
        let host = ProcessInfo.processInfo.environment
        guard host["RAY_AUTH_TOKEN"] != nil || host["RAY_AUTH_TOKEN_PATH"] != nil else {
            throw ExperimentError(.usage, "executor: ray needs the cluster's token in this process's environment: export RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH)")
        }
        var work = try RemoteWork(key: try WorkKey.load(orCreateAt: layout.privateDirectory + "/work-key"), policySearchPaths: environment.policyLoader.searchPaths)
        if let local {
            work.taskPolicy = local.taskPolicy
            work.verifierPolicy = local.verifierPolicy
            work.defaultAgentTimeout = local.defaultAgentTimeout
        }
        let agentPy: [UInt8]
        switch InputFile.read(agent + "/agent.py", cap: AgentFile.maxBytes) {
        case .success(let b): agentPy = b
        case .failure(let p): throw ExperimentError(.io, "\(agent)/agent.py: \(p.explanation("agent.py"))")
        }
        func shards<T>(_ items: [T]) -> [[T]] {
            stride(from: 0, to: items.count, by: config.executor.tasksPerRequest).map { Array(items[$0..<min($0 + config.executor.tasksPerRequest, items.count)]) }
        }
        // Held-out answers come back sealed to a key of this batch's, which never leaves here.
        let answerKey = Curve25519.KeyAgreement.PrivateKey()
        let answerTo = heldOut ? NodeSealKey.publicText(answerKey) : nil
        // With `held_out_runtime: vm`, each of a gate's held-out requests runs in a fresh VM on
        // its node; prepare's baseline, as on one machine, in the node's sandboxes.
        let vm = run.split.isGateHeldOut && config.gate.heldOutRuntime == .vm ? config.gate.vm : nil
        let requests: [WorkRequest]
        var archives: [String: ImageArchive] = [:]
        // The verifier tools, digested once: every node must hold the same.
        let verifierTools = local?.verifierTools ?? harborAdapter?.verifierTools
        let toolbox = try verifierTools.map { try WorkDigest.tree($0.directory, cache: layout.privateDirectory + "/digests") }
        // The tool's files a reward depends on (Harbor's: its environment module), digested
        // once: a node must hold the same.
        let digested = tool?.digestedFiles ?? harbor?.digestedFiles ?? []
        let toolDigest = digested.isEmpty ? nil : try WorkDigest.files(digested)
        // A request's run on its node is bounded as the node bounds it (its tasks' own limits,
        // a VM's boot), with room for its setup and eviction: never cut short by the driver.
        let longest: Double
        if let tool {
            guard vm == nil else { throw ExperimentError(.usage, "executor: ray runs a tool benchmark's held-out tasks in the nodes' sandboxes, not in a VM: set gate.held_out_runtime: host") }
            // Only the benchmark's ids, and only the shard's in each request: a train request
            // is not sealed and must name no held-out id.
            let known = Set(environment.adapter.taskIDs)
            requests = try shards(ids.filter(known.contains)).map {
                // What a task needs that only this host holds (inspect's frozen sample line)
                // goes in its request, sealed with a held-out one.
                var r = try work.request(tool: tool, toolSHA256: toolDigest, ids: $0, agentPy: agentPy, heldOut: heldOut, answerTo: answerTo,
                                         nodeData: { sharded?.nodeData($0) })
                // gate.infra_retries: each task's run on its node counts its vendor failures.
                if run.oneTaskPerRun { r.oneTaskPerRun = true }
                return r
            }
            longest = Self.shardLimit(tasks: requests.map(\.tasks.count), oneTaskPerRun: run.oneTaskPerRun, settings: tool.settings)
        } else {
            let fallback = config.perTaskTimeout ?? LocalBenchmark.defaultTimeout
            // A Harbor task's agent phase is bounded as Harbor's runner bounds it.
            let known = Set(environment.adapter.taskIDs)
            let tasks = ids.compactMap { id in local?.benchmark.task(id) ?? (known.contains(id) ? harborAdapter?.boundedTask(id) : nil) }
            let chunks = Self.requests(tasks, executor: config.executor, fallback: fallback)
            // Tasks on their image run on the same image on a node: its archive, by digest.
            let store = local?.images ?? harborAdapter?.images
            let images = try taskImages(chunks.flatMap { $0 }, store, archives: layout.privateDirectory + "/images/archives", heldOut: heldOut)
            if (!images.byTask.isEmpty || harbor != nil) && vm != nil {
                throw ExperimentError(.usage, "executor: ray: \(harbor != nil ? "Harbor's agent phase" : "task images") in a node's held-out VM \(harbor != nil ? "is" : "are") not built yet; set gate.held_out_runtime: host")
            }
            archives = images.archives
            requests = try chunks.map {
                let tasks = $0
                var r = try Self.unnamed(run.split.isGateHeldOut) { try work.request(tasks, agentPy: agentPy, heldOut: heldOut, concurrency: 1, answerTo: answerTo) }
                r.vm = vm
                r.harbor = harbor
                r.toolSHA256 = toolDigest
                if harbor != nil && run.oneTaskPerRun { r.oneTaskPerRun = true }
                r.verifierTools = verifierTools?.directory
                r.verifierToolsSHA256 = toolbox
                for k in r.tasks.indices {
                    r.tasks[k].image = images.byTask[r.tasks[k].id]
                    r.tasks[k].imageRefused = store?.refused[r.tasks[k].id]
                }
                return r
            }
            longest = chunks.map { ExecutionBounds.heldOut($0.map(\.id), tasks: $0, fallback: fallback, concurrency: 1) }.max() ?? 0
        }
        var environment = ["PATH": host["PATH"] ?? "/usr/local/bin:/usr/bin:/bin", "HOME": host["HOME"] ?? "/root", "RAY_AUTH_MODE": "token",
                           "RAY_USAGE_STATS_ENABLED": "0"]
        for name in ["RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"] { environment[name] = host[name] }
        var executor = RayExecutor(python: config.executor.python, driver: templates + "/ray/autoharness_ray.py", address: address,
                                   environment: environment)
        executor.maxInFlight = config.maxConcurrency
        // Out of the driver's sight: the private directory, and the dataset where it lies elsewhere.
        let dataset = [local?.benchmark.directory, harborAdapter?.datasetPath].compactMap { $0 }
        executor.hidden = [layout.privateDirectory] + Self.alsoHidden(dataset, besides: layout.privateDirectory,
                                                                     driver: [config.executor.python, templates + "/ray/autoharness_ray.py", layout.root])
        var driverDirectory: String?
        if let name = config.executor.driverUser {
            // The image range as this host gives it, else its default (a broken /etc/subuid
            // must not drop the check).
            let images = (try? ImageIDs.range()) ?? HostIDRange(uid: ImageIDs.defaultStart, gid: ImageIDs.defaultStart, count: ImageIDs.span)
            let user = try DriverUser.resolve(name, reserved: images)
            driverDirectory = try executor.runAs(user)
            // The head runs as that user in the host's mount namespace: through its /proc the
            // driver reads what that user may, the dataset too unless its modes keep it out.
            for d in dataset where user.mayList(d) {
                log?("executor.driver_user: \(d) is readable by uid \(user.uid) (its mode), so the driver could read it through the head's /proc; chmod o-rwx (and keep it from group \(user.gid))")
            }
        }
        defer { if let driverDirectory { _ = FileSystem.removeTree(driverDirectory) } }
        executor.timeout = longest + (vm?.bootTimeout ?? 0) + 300
        executor.checkPolicies = Self.checkedPolicies(requests, otherwise: [work.taskPolicy, work.verifierPolicy])
        executor.checkPaths = tool?.requiredPaths ?? harbor?.requiredPaths ?? []
        executor.checkVerifierTools = verifierTools?.directory
        executor.checkDigest = digested
        // Every node is checked for the VM (train and held-out requests alike go only to nodes
        // that pass every check).
        executor.checkVM = config.gate.heldOutRuntime == .vm ? config.gate.vm : nil
        log?("executor: ray: \(requests.reduce(0) { $0 + $1.tasks.count }) task(s) in \(requests.count) signed request(s) to \(address)")
        // Train requests are signed once (a lost one goes to another node as it is); each
        // held-out request is sealed to the node chosen for it, which alone can open it.
        let signed = heldOut ? [] : try requests.map { try work.sign($0) }
        var batch = RemoteBatch(requests: requests, heldOut: heldOut, binarySHA256: work.binarySHA256, policiesSHA256: work.policiesSHA256,
                                excluded: try excludedNodes(), answerKey: heldOut ? answerKey : nil, address: address)
        batch.toolSHA256 = toolDigest
        batch.concurrency = config.maxConcurrency
        batch.images = archives.keys.sorted()
        batch.verifierToolsSHA256 = toolbox
        // A tool whose runs share a server runs alone on its node (the worker's exclusive lock).
        executor.alone = sharded?.runsBesideItself == false
        if case .bird(let b) = tool {
            executor.checkDatabases = b.databaseCheck
            batch.databases = b.databases
        }
        executor.pushAllowance = archives.values.reduce(0) { $0 + Self.pushTime($1) + 120 }
        executor.checkImages = batch.images
        // Task images a node lacks are pushed to it before any request: each archive encrypted
        // under a key of this batch's, that key sealed to each node, the offer signed.
        // Beside the private directory, not in it: the driver, which reads them, does not see
        // that directory at all (`RayExecutor.hidden`).
        // With a driver user, in a directory of root's it can search but not change (never in
        // its own, where it could swap a file the supervisor writes for a link).
        let pushes = try driverDirectory.map { _ in try RayExecutor.temporaryDirectory("autoharness-ray-push", mode: 0o711) }
            ?? layout.root + "/.autoharness-ray-push-" + WorkDigest.hex((0..<8).map { _ in UInt8.random(in: 0...255) })
        defer { _ = FileSystem.removeTree(pushes) }
        batch.log = { [log] in log?($0) }
        batch.record = { [recordExclusion] in try recordExclusion($0) }
        batch.note = { [recordNote] in try recordNote($0) }
        var byID: [String: TaskOutcome] = [:]
        try executor.run(requests.count, offers: { seen in
            try Self.offers(batch.lacking(seen), archives: archives, seen: seen, directory: pushes, signer: work.key, quiet: heldOut, log: log,
                            owner: executor.user)
        }, choose: { try batch.choose($0) }, prepare: { i in
            switch try batch.place(i) {
            case .anyNode: return (signed[i], nil)
            case .sealed(let node, let key): return (try work.sign(requests[i], sealTo: key), node)
            case .later: return nil
            }
        }, settle: { i, result in
            let (settlement, answer) = try batch.settle(i, result)
            guard let answer else { return settlement }
            for v in answer.violations {
                (v.agent ? audit.agent : audit.tool).record(AuditEvent(sandbox: "worker node", kind: AuditEvent.Kind(rawValue: v.kind)!, name: v.name,
                                                                       action: "refused on a worker node", count: v.count))
            }
            for o in answer.outcomes { byID[o.id] = o }
            if !heldOut {
                for (id, files) in answer.traces {
                    guard let dir = traces(id) else { continue }
                    try writeTrace(files, to: dir)
                }
            }
            return settlement
        })
        // An id no node answered (no such task in the benchmark) the supervisor scores 0.
        return ids.compactMap { byID[$0] }
    }

    /// The archives of the task images `tasks` run on (by archive digest), made once in
    /// `archives`, and each task's image as a request names it.
    /// A held-out run's log lines name no task.
    func taskImages(_ tasks: [BenchmarkTask], _ images: TaskImages?, archives directory: String, heldOut: Bool) throws
        -> (byTask: [String: WorkImage], archives: [String: ImageArchive]) {
        var byTask: [String: WorkImage] = [:]
        var archives: [String: ImageArchive] = [:]
        var byImage: [String: ImageArchive] = [:]
        for task in tasks {
            guard let image = images?.byTask[task.id] else { continue }
            let archive: ImageArchive
            if let made = byImage[image.id + image.rootfs] {
                archive = made
            } else {
                let named = heldOut ? "" : "task \(task.id): "
                archive = try ImageArchive.make(image, in: directory) { [log = environment.log] in log?("executor: ray: " + named + $0) }
                byImage[image.id + image.rootfs] = archive
            }
            archives[archive.sha256] = archive
            byTask[task.id] = WorkImage(image, archiveSHA256: archive.sha256)
        }
        return (byTask, archives)
    }

    /// A local benchmark's `tasks` as requests go out, `tasks_per_request` at most in each: in
    /// their listed order with `order: listed`; else dealt longest first (by each task's own
    /// limits) to the request with the least work so far, and the requests sent largest
    /// first. A long task sent last would keep one node busy after the others ran out of work,
    /// and so would a request of several long ones (its tasks run one after another).
    static func requests(_ tasks: [BenchmarkTask], executor: ExperimentConfig.Executor, fallback: Double) -> [[BenchmarkTask]] {
        let size = executor.tasksPerRequest
        guard executor.order == .longestFirst else {
            return stride(from: 0, to: tasks.count, by: size).map { Array(tasks[$0..<min($0 + size, tasks.count)]) }
        }
        let count = (tasks.count + size - 1) / size
        var chunks = [[BenchmarkTask]](repeating: [], count: count), work = [Double](repeating: 0, count: count)
        for task in ExecutionBounds.longestFirst(tasks, fallback: fallback) {
            guard let i = chunks.indices.filter({ chunks[$0].count < size }).min(by: { work[$0] < work[$1] }) else { break }
            chunks[i].append(task)
            work[i] += ExecutionBounds.limit(task, fallback: fallback)
        }
        return chunks.indices.sorted { work[$0] != work[$1] ? work[$0] > work[$1] : $0 < $1 }.map { chunks[$0] }
    }

    /// Of `dataset` (its directories), those to hide from the driver too: not within `besides`
    /// (already hidden, and a mount point must exist), nor holding what the driver runs or
    /// reads (`driver`: its Python, its script, the experiment whose image pushes it reads).
    static func alsoHidden(_ dataset: [String], besides: String, driver: [String]) -> [String] {
        dataset.filter { d in
            !RunnerBinds.within(d, besides) && !driver.contains { RunnerBinds.within($0, d) } && FileManager.default.fileExists(atPath: d)
        }
    }

    /// `build`'s request; when `quiet` (a gate's held-out phase), a failure to build it names no
    /// task: what cannot be sent names its task and file, and a gate's error reaches the
    /// coding agent.
    static func unnamed(_ quiet: Bool, _ build: () throws -> WorkRequest) throws -> WorkRequest {
        do { return try build() } catch where quiet {
            throw ExperimentError(.usage, "a held-out task's directory cannot be sent to a node whole (a link, a special file, a name that is not UTF-8, a file over \(WorkLimits.maxFile) bytes or over \(WorkLimits.maxFilesPerTask) files), or a request would be over what a node takes; which task is not said here, where the coding agent reads it: `autoharness prepare` on a copy of the experiment names it")
        }
    }

    /// The longest a tool's shard may run on its node: one tool run (the runner's limit, then
    /// the scorer's), or one a task when each runs alone (`gate.infra_retries`), for the
    /// largest shard.
    static func shardLimit(tasks: [Int], oneTaskPerRun: Bool, settings: ToolSettings) -> Double {
        let runs = oneTaskPerRun ? tasks.max() ?? 1 : 1
        return Double(runs) * ((settings.timeout ?? 86_400) + settings.scorerTimeout)
    }

    /// How long a node may take to receive and unpack `archive`: ten MiB a second at the
    /// least, and five minutes to start and unpack.
    static func pushTime(_ archive: ImageArchive) -> Double { 300 + Double(archive.bytes) / Double(10 << 20) }

    /// The pushes for `lacking` (image digest -> nodes): each archive encrypted once into
    /// `directory` under a fresh key, and an offer of it signed for each node, sealed to its key.
    static func offers(_ lacking: [String: [String]], archives: [String: ImageArchive], seen: [NodeSeen], directory: String,
                       signer: Curve25519.Signing.PrivateKey, quiet: Bool, log: ((String) -> Void)?, owner: DriverUser? = nil) throws -> [ImageOffers] {
        guard !lacking.isEmpty else { return [] }
        if let e = FileSystem.makeDirectories(directory, mode: 0o700) { throw ExperimentError(.io, "\(directory): \(ErrnoName.describe(e))") }
        // The driver reads them as its own user: each file root's, in its group, not writable
        // (by path: the directory is root's, and the driver cannot change what it holds).
        func share(_ path: String) throws {
            if let owner, chown(path, 0, owner.gid) != 0 || chmod(path, 0o640) != 0 { throw ExperimentError(.io, "\(path): \(ErrnoName.describe(errno))") }
        }
        var out: [ImageOffers] = []
        for (digest, nodes) in lacking.sorted(by: { $0.key < $1.key }) {
            guard let archive = archives[digest] else { continue }
            let key = SymmetricKey(size: .bits256)
            let path = directory + "/" + digest
            log?("executor: ray: sending a task image (\(archive.bytes >> 20) MiB, archive sha256 \(digest.prefix(16))) to \(nodes.count) node(s)")
            try archive.encrypt(under: key, to: path)
            try share(path)
            let offers = try nodes.compactMap { node -> (node: String, offer: [UInt8])? in
                guard let sealKey = seen.first(where: { $0.node == node })?.report?.sealKey else { return nil }
                return (node, try archive.offer(key: key, to: sealKey, signedWith: signer))
            }
            out.append(ImageOffers(path: path, offers: offers, timeout: pushTime(archive), quiet: quiet))
        }
        return out
    }

    /// A node's trace of one task, replacing what `dir` held.
    func writeTrace(_ files: [WorkFile], to dir: String) throws {
        _ = FileSystem.removeTree(dir)
        for f in files {
            let path = dir + "/" + f.path
            let parent = (path as NSString).deletingLastPathComponent
            if let e = FileSystem.makeDirectories(parent, mode: 0o755) { throw ExperimentError(.io, "\(parent): \(ErrnoName.describe(e))") }
            do throws(IOFailure) { try AtomicFile.write(Array(f.bytes), to: path, mode: 0o644) } catch { throw ExperimentError(.io, "", cause: error) }
        }
    }

    package init(environment: ExecutorEnvironment, templatesDirectory: String?, excludedNodes: @escaping () throws -> [NodeExcludedRecord],
                 recordExclusion: @escaping (NodeExcludedRecord) throws -> Void) {
        self.environment = environment
        self.templatesDirectory = templatesDirectory
        self.excludedNodes = excludedNodes
        self.recordExclusion = recordExclusion
    }
}
