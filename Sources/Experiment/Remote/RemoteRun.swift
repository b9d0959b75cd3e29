import Benchmark
import Foundation
import Sandbox
import SupervisorIO

extension ExperimentSupervisor {
    /// `executor: ray`: the tasks run on the cluster's nodes, a signed request of
    /// `executor.tasks_per_request` tasks at a time, and only checked answers come back.
    /// Any request lost (a node died; a train request after one retry) or answered badly ends
    /// the whole run with an I/O error:
    /// nothing of it is recorded, and a gate ends as interrupted (it was counted before it
    /// began), never as a silent 0.
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
        let requests = try chunks.map { try work.request($0, agentPy: agentPy, heldOut: heldOut, concurrency: 1) }
        var environment = ["PATH": host["PATH"] ?? "/usr/local/bin:/usr/bin:/bin", "HOME": host["HOME"] ?? "/root", "RAY_AUTH_MODE": "token",
                           "RAY_USAGE_STATS_ENABLED": "0"]
        for name in ["RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"] { environment[name] = host[name] }
        let executor = RayExecutor(python: config.executor.python, driver: templates + "/ray/autoharness_ray.py", address: address,
                                   environment: environment)
        log?("executor: ray: \(known.count) task(s) in \(requests.count) signed request(s) to \(address)")
        // A train request whose node died is sent once more, to whichever node Ray picks; a
        // held-out one never is: its loss interrupts the gate, which has counted.
        let results = try executor.run(try requests.map(work.sign), retries: heldOut ? 0 : 1)
        let ending = "nothing of this run is recorded, and a gate it belongs to ends as interrupted (it was counted)"
        var byID: [String: TaskOutcome] = [:]
        for (request, result) in zip(requests, results) {
            let names = request.tasks.count == 1 || !heldOut ? request.tasks.map(\.id).joined(separator: ", ") : "\(request.tasks.count) tasks"
            let answer: WorkAnswer
            switch result {
            case .lost(let why):
                throw ExperimentError(.io, "executor: ray: a request (\(heldOut ? "held-out" : names)) was lost (\(why)); \(ending)")
            case .ran(let node, let exit, let bytes, let stderr):
                guard exit == 0 else {
                    // A held-out run's node output stays on the node: it could name test tasks.
                    throw ExperimentError(.io, "executor: ray: node \(node.prefix(16)) did not run a request (exit \(exit))\(heldOut ? "" : ": " + String(stderr.suffix(600))); \(ending)")
                }
                do {
                    answer = try RemoteWork.check(bytes, for: request)
                } catch {
                    throw ExperimentError(.io, "executor: ray: node \(node.prefix(16)) answered badly: \(error); \(ending)")
                }
            }
            for v in answer.violations {
                (v.agent ? audit.agent : audit.tool).record(AuditEvent(sandbox: "worker node", kind: AuditEvent.Kind(rawValue: v.kind)!, name: v.name,
                                                                       action: "refused on a worker node", count: v.count))
            }
            for o in answer.outcomes { byID[o.id] = o }
            guard !heldOut else { continue }
            for (id, files) in answer.traces {
                guard let dir = traces(id) else { continue }
                try writeTrace(files, to: dir)
            }
        }
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
