import Benchmark
import ExperimentModel
import Foundation
import Glibc
import Sandbox
import SandboxPolicy
import SupervisorIO

/// A worker node's run of Harbor tasks (`WorkRequest.harbor`, `benchmark: terminal-bench` with
/// `env_provider: local`): the tasks arrive with their files, as a local request's, and run
/// as on the supervisor's host: each task's agent phase by the node's Harbor in a runner
/// sandbox with the request's agent.py, then its tests in a verifier sandbox of autoharness's.
enum NodeHarborWork {
    /// Before the nonce: what the node must have for Harbor's agent phase (Harbor's install at
    /// the supervisor's paths, the same environment module), and nothing of the node's own
    /// that the runner's binds would show agent.py.
    static func check(_ harbor: HarborNode, _ request: WorkRequest, _ s: RemoteWorker.Settings) throws {
        guard request.tool == nil, request.vm == nil else {
            throw ExperimentError(.refused, "a Harbor request names a tool or a held-out VM (not built together): refused, nothing ran")
        }
        try NodeToolWork.checkInstall(paths: harbor.requiredPaths, files: harbor.digestedFiles, expected: request.toolSHA256,
                                      needs: "Harbor's agent phase", copy: harbor.module)
        do { _ = try HarborNode.taskNames(tomls(request)) } catch {
            throw ExperimentError(.refused, "the request's tasks: refused, nothing ran", cause: error)
        }
        if let why = NodeToolWork.exposure(binds: harbor.tool.nodeBinds, paths: harbor.requiredPaths, state: s.stateDirectory, scratch: s.scratchRoot) {
            throw ExperimentError(.refused, "on this node, \(why): refused, nothing ran")
        }
    }

    /// Each task's task.toml as its request carries it, by id.
    static func tomls(_ request: WorkRequest) -> [String: [UInt8]?] {
        Dictionary(request.tasks.map { t in (t.id, t.files.first { $0.path == "task.toml" }.map { Array($0.bytes) }) }, uniquingKeysWith: { a, _ in a })
    }

    /// The request's tasks (written under `work`/benchmark/tasks) through Harbor's adapter,
    /// with the node's verifier tools and task images.
    static func run(_ harbor: HarborNode, _ request: WorkRequest, work: String, images: TaskImages, tools: VerifierTools?,
                    _ s: RemoteWorker.Settings) throws -> WorkAnswer {
        let ids = request.tasks.map(\.id)
        var adapter = harbor.adapter(datasetPath: work + "/benchmark/tasks", ids: ids, names: try HarborNode.taskNames(tomls(request)))
        adapter.verifierTools = tools
        if !images.byTask.isEmpty || !images.refused.isEmpty { adapter.images = images }
        // Each request's runner, task and verifier sandboxes, one request a CPU.
        let memory = ExecutionBounds.memory(each: [harbor.tool.runnerPolicy, request.taskPolicy, request.verifierPolicy],
                                            times: Int(sysconf(Int32(_SC_NPROCESSORS_ONLN))), loader: PolicyLoader(searchPaths: s.policySearchPaths),
                                            tasks: adapter.localTasks)
        return try RemoteWorker.runTool(adapter, request, traces: { work + "/traces/" + $0 }, memory: memory, work: work, s)
    }
}

extension NodeToolWork {
    /// Refuses (nothing ran) unless this node has `paths` at the supervisor's paths and its
    /// copies of `files` digest to `expected` (what `needs` and this node's `copy` name).
    static func checkInstall(paths: [String], files: [String], expected: String?, needs: String, copy: String, after: String = "") throws {
        let missing = paths.filter { !FileManager.default.fileExists(atPath: $0) }
        guard missing.isEmpty else {
            throw ExperimentError(.refused, "this node lacks what \(needs) needs at the supervisor's paths (\(missing.prefix(3).joined(separator: ", "))): refused, nothing ran")
        }
        let digest: String?
        do { digest = try WorkDigest.files(files) } catch {
            throw ExperimentError(.refused, "this node cannot read the files \(needs) runs with: refused, nothing ran", cause: error)
        }
        guard digest == expected else {
            throw ExperimentError(.refused, "this node's \(copy) (sha256 \((digest ?? "none").prefix(16))) is not the supervisor's (\((expected ?? "none").prefix(16))): \(after)refused, nothing ran")
        }
    }

    /// Why `binds` or the other `paths` a request's sandboxes get of this node (its install,
    /// scripts, data; each named by its setting where it has one) would show them this
    /// worker's own directories (`RunnerBinds.Protected.workerDirectories`), or nil.
    static func exposure(binds: [(setting: String, path: String)], paths: [String], state: String, scratch: String) -> String? {
        let named = Set(binds.map(\.path))
        let all = binds + paths.filter { !named.contains($0) }.map { (RunnerBinds.toolPath, $0) }
        do { try RunnerBinds.refuse(all, exposing: RunnerBinds.Protected.workerDirectories(state: state, scratch: scratch)) } catch let e as ExperimentError {
            return e.message
        } catch {
            return "the runner's binds cannot be checked"
        }
        return nil
    }
}
