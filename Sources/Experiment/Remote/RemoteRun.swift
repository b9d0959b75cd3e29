import Benchmark
import Crypto
import Foundation
import Sandbox
import SupervisorIO

extension ExperimentSupervisor {
    /// `executor: ray`: the tasks run on the cluster's nodes, a signed request of
    /// `executor.tasks_per_request` tasks at a time, and only checked answers come back.
    /// Requests go only to nodes whose own check passed (this binary, these policies, the
    /// host checks) and that never answered this experiment badly. A node that answers
    /// badly is recorded (`node_excluded`) and excluded. A train request lost (its node died)
    /// or refused is sent once more to another node, one answered badly to another node; a
    /// held-out request is never sent twice. Any other loss ends the whole run with an I/O
    /// error: nothing of it is recorded, and a gate ends as interrupted (it was counted
    /// before it began), never as a silent 0.
    func runRemote(_ ids: [String], agent: String, audit: RunAudit, heldOut: Bool, traces: (String) -> String?) throws -> [TaskOutcome] {
        guard let local = adapter as? LocalAdapter else {
            throw ExperimentError(.usage, "executor: ray runs a local benchmark's tasks; \(adapter.name) runs its own tool")
        }
        guard let address = config.executor.address else { throw ExperimentError(.usage, "executor.address: missing") }
        guard let templates = templatesDirectory else {
            throw ExperimentError(.usage, "executor: ray needs the Ray driver from autoharness's templates (set AUTOHARNESS_TEMPLATE_DIR)")
        }
        let host = ProcessInfo.processInfo.environment
        guard host["RAY_AUTH_TOKEN"] != nil || host["RAY_AUTH_TOKEN_PATH"] != nil else {
            throw ExperimentError(.usage, "executor: ray needs the cluster's token in this process's environment: export RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH)")
        }
        var work = try RemoteWork(key: try WorkKey.load(orCreateAt: layout.privateDirectory + "/work-key"), policySearchPaths: policyLoader.searchPaths)
        work.taskPolicy = local.taskPolicy
        work.verifierPolicy = local.verifierPolicy
        work.defaultAgentTimeout = local.defaultAgentTimeout
        let agentPy: [UInt8]
        switch InputFile.read(agent + "/agent.py", cap: AgentFile.maxBytes) {
        case .success(let b): agentPy = b
        case .failure(let p): throw ExperimentError(.io, "\(agent)/agent.py: \(p.explanation("agent.py"))")
        }
        let known = ids.compactMap { local.benchmark.task($0) }
        let chunks = stride(from: 0, to: known.count, by: config.executor.tasksPerRequest).map {
            Array(known[$0..<min($0 + config.executor.tasksPerRequest, known.count)])
        }
        // Held-out answers come back sealed to a key of this batch's, which never leaves here.
        let answerKey = Curve25519.KeyAgreement.PrivateKey()
        let requests = try chunks.map {
            try work.request($0, agentPy: agentPy, heldOut: heldOut, concurrency: 1, answerTo: heldOut ? NodeSealKey.publicText(answerKey) : nil)
        }
        var environment = ["PATH": host["PATH"] ?? "/usr/local/bin:/usr/bin:/bin", "HOME": host["HOME"] ?? "/root", "RAY_AUTH_MODE": "token",
                           "RAY_USAGE_STATS_ENABLED": "0"]
        for name in ["RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"] { environment[name] = host[name] }
        var executor = RayExecutor(python: config.executor.python, driver: templates + "/ray/autoharness_ray.py", address: address,
                                   environment: environment)
        executor.maxInFlight = config.maxConcurrency
        executor.checkPolicies = [local.taskPolicy, local.verifierPolicy]
        log?("executor: ray: \(known.count) task(s) in \(requests.count) signed request(s) to \(address)")
        // Train requests are signed once (a lost one goes to another node as it is); each
        // held-out request is sealed to the node chosen for it, which alone can open it.
        let signed = heldOut ? [] : try requests.map { try work.sign($0) }
        var sealKeys: [String: String] = [:]
        var accepted: [String] = []
        var turn = 0
        let ending = "nothing of this run is recorded, and a gate it belongs to ends as interrupted (it was counted)"
        let excluded = Dictionary(try state().excludedNodes.map { ($0.address, $0) }, uniquingKeysWith: { a, _ in a })
        var addresses: [String: String] = [:]
        var byID: [String: TaskOutcome] = [:]
        // Per request: losses and refusals so far (a train request is sent once more after
        // the first), and whether one of its answers already cost a node its place (a second
        // bad answer to the same request is the request's doing, not another node's).
        var losses = [Int](repeating: 0, count: requests.count)
        var excludedFor = [Bool](repeating: false, count: requests.count)
        var outOfBatch = Set<String>()
        // What a node says is the operator's to read (this log), never the coding agent's:
        // errors thrown here reach the agent through the gate's answer, so they carry no node text.
        func shown(_ text: String) -> String { printable(String(text.suffix(600)), limit: 600) }
        try executor.run(requests.count, choose: { seen in
            // Only nodes that run this binary and these policies, pass the host checks, and
            // never answered this experiment badly: train and held-out requests alike.
            var use: [String] = []
            for n in seen {
                addresses[n.node] = n.address
                let why: String?
                if let e = excluded[n.address] {
                    why = "excluded: it answered a request badly before (\(e.reason))"
                } else if let r = n.report {
                    why = NodeCheck.unusable(r, binarySHA256: work.binarySHA256, policiesSHA256: work.policiesSHA256)
                } else {
                    why = "it did not report (\(n.error ?? "no report"))"
                }
                // Two nodes with one sealing key (a cloned state volume) would open each
                // other's held-out requests: neither is used.
                let twin = n.report.map { r in seen.contains { $0.node != n.node && $0.report?.sealKey == r.sealKey } } ?? false
                if let why = why ?? (twin ? "its sealing key is another node's too (a shared or cloned state directory)" : nil) {
                    log?("executor: ray: node \(shown(n.address)) (\(n.node.prefix(12))) not used: \(shown(why))")
                } else {
                    use.append(n.node)
                    sealKeys[n.node] = n.report?.sealKey
                }
            }
            guard !use.isEmpty else {
                throw ExperimentError(.io, "executor: ray: no node of the cluster at \(address) can take a request (of \(seen.count) node(s); why each was not used: the supervisor's log); \(ending)")
            }
            accepted = use
            return use
        }, prepare: { i in
            guard heldOut else { return (signed[i], nil) }
            let open = accepted.filter { !outOfBatch.contains($0) }
            guard !open.isEmpty else { throw ExperimentError(.io, "executor: ray: no accepted node is left for a held-out request; \(ending)") }
            let node = open[turn % open.count]
            turn += 1
            guard let key = sealKeys[node] else { throw ExperimentError(.io, "executor: ray: node \(node.prefix(12)) has no sealing key; \(ending)") }
            return (try work.sign(requests[i], sealTo: key), node)
        }, settle: { i, result in
            let request = requests[i]
            let names = request.tasks.count == 1 || !heldOut ? request.tasks.map(\.id).joined(separator: ", ") : "\(request.tasks.count) tasks"
            let node = result.node, at = shown(addresses[node] ?? "?")
            let answer: WorkAnswer
            // A node excluded meanwhile: what else it answers is not used.
            if outOfBatch.contains(node) {
                if !heldOut { return Settlement(resend: true) }
                throw ExperimentError(.io, "executor: ray: node \(at) answered a held-out request after it was excluded; \(ending)")
            }
            switch result {
            case .lost(_, let why):
                // A train request whose node died is sent once more, to another node; a
                // held-out one never is: its loss interrupts the gate, which has counted.
                // The node gets nothing more of this batch.
                losses[i] += 1
                log?("executor: ray: request (\(heldOut ? "held-out" : names)) lost on node \(at): \(shown(why))")
                if !node.isEmpty { outOfBatch.insert(node) }
                if !heldOut && losses[i] <= 1 && !node.isEmpty {
                    return Settlement(exclude: [node], resend: true)
                }
                throw ExperimentError(.io, "executor: ray: a request (\(heldOut ? "held-out" : names)) was lost on node \(at); \(ending)")
            case .ran(_, let exit, let bytes, let oversized, let stderr):
                guard exit == 0 else {
                    // A held-out run's node output stays on the node: it could name test tasks.
                    losses[i] += 1
                    outOfBatch.insert(node)
                    log?("executor: ray: node \(at) (\(node.prefix(12))) did not run a request (exit \(exit))\(heldOut ? "" : ": " + shown(stderr))")
                    if !heldOut && losses[i] <= 1 { return Settlement(exclude: [node], resend: true) }
                    throw ExperimentError(.io, "executor: ray: node \(at) did not run a request (exit \(exit)); \(ending)")
                }
                do {
                    if oversized { throw ExperimentError(.refused, "the answer is over \(WorkLimits.maxAnswer) bytes") }
                    answer = try RemoteWork.check(bytes, for: request, answerKey: answerKey)
                } catch {
                    // A node that answers badly is recorded and gets nothing of this
                    // experiment again, at its address; a train request goes to another
                    // node, a held-out one ends the gate (its tasks ran: running them again
                    // would be a second look). Neither record nor log of a held-out answer
                    // names a task. A request answered badly twice excludes no second node.
                    let reason = heldOut ? "a held-out answer that is not valid\(oversized ? " (oversized)" : "")" : "\(error)"
                    guard !excludedFor[i] else {
                        throw ExperimentError(.io, "executor: ray: a request (\(heldOut ? "held-out" : names)) was answered badly by a second node (\(at)); no node is excluded for it; \(ending)")
                    }
                    excludedFor[i] = true
                    let address = addresses[node] ?? "?"
                    _ = try ledger.append(.nodeExcluded, NodeExcludedRecord(address: address, node: node, reason: String(reason.prefix(600)), heldOut: heldOut))
                    log?("executor: ray: node \(at) (\(node.prefix(12))) answered badly (\(shown(reason))); excluded from this experiment")
                    let sameAddress = addresses.filter { $0.value == address }.map(\.key)
                    outOfBatch.formUnion(sameAddress + [node])
                    if !heldOut { return Settlement(exclude: sameAddress + [node], resend: true) }
                    throw ExperimentError(.io, "executor: ray: node \(at) answered a held-out request badly and is excluded; \(ending)")
                }
            }
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
            return .done
        })
        let all = ids.map { byID[$0] ?? TaskOutcome(id: $0, reward: 0, status: .missingResult, detail: "no such task in the benchmark") }
        return heldOut ? Self.withoutEvidence(all) : all
    }

    /// A node's trace of one task, replacing what `dir` held.
    func writeTrace(_ files: [WorkFile], to dir: String) throws {
        _ = FileSystem.removeTree(dir)
        for f in files {
            let path = dir + "/" + f.path
            let parent = (path as NSString).deletingLastPathComponent
            if let e = FileSystem.makeDirectories(parent, mode: 0o755) { throw ExperimentError(.io, "\(parent): \(ErrnoName.describe(e))") }
            do throws(IOFailure) { try AtomicFile.write(Array(f.bytes), to: path, mode: 0o644) } catch { throw ExperimentError(.io, "\(error)") }
        }
    }
}
