// `benchmark: terminal-bench` with `env_provider: local` on a worker node (`executor: ray`).
//
// A Harbor task is a directory of files like a local benchmark's task, and with the local
// provider autoharness runs it as one (`HarborAgentPhase`: Harbor runs the agent phase in a
// runner sandbox, autoharness's verifier sandbox the tests). So its tasks travel as a local
// request's do, file by file in the request (sealed when held out; on their image by archive
// digest), and never as a dataset the node holds: a node's copy of the dataset would have to
// be named and digested in train requests, which are signed but not sealed, and its held-out
// tasks' ids with it. What the request adds is how Harbor's agent phase runs (`HarborNode`):
// the runner's settings (Harbor's install under runner.binds, the node's own at the
// supervisor's paths), the model and agent timeouts, and autoharness's environment module,
// whose digest a node must match. Harbor's own code decides no reward here, so it is not
// digested: a node with another Harbor runs the agent phase with that Harbor.

import Glibc

/// How a node runs a Harbor task's agent phase: what `HarborAdapter` holds for it, without
/// the dataset (the request carries the tasks).
public struct HarborNode: Codable, Sendable, Equatable {
    /// Harbor's runner: its command, binds, policy, time limit and network.
    public var tool: ToolSettings
    public var model: String?
    /// `NAME=VALUE` for agent.py (AGENT_MODEL, ...).
    public var environment: [String]
    public var agentTimeout: Double?
    public var agentTimeoutMultiplier: Double?
    /// The directory of autoharness_harbor_env.py (runner.scripts), at the supervisor's path.
    public var scriptsDirectory: String
    /// What a task's container reaches through the egress proxy (`task_network_allow`).
    public var taskNetworkAllow: [String]

    /// autoharness's Harbor environment: every command of the agent phase goes through it.
    public var module: String { scriptsDirectory + "/" + HarborAdapter.localModule }
    /// The files a node's copies must match (`WorkRequest.toolSHA256`).
    public var digestedFiles: [String] { [module] }
    /// What a node must have at the supervisor's paths: Harbor's install (the runner's binds and
    /// executable), the gate's CA file, and the environment module.
    public var requiredPaths: [String] { tool.nodePaths + [module] }

    /// Each task's Harbor name (`[task] name`) where it differs from its id, from the task.toml
    /// each carries (`tomls`: by id, nil for none), as the supervisor's host reads them; throws
    /// when they are not one to one.
    public static func taskNames(_ tomls: [String: [UInt8]?]) throws(BenchmarkError) -> [String: String] {
        var names: [String: String] = [:]
        for (id, bytes) in tomls {
            guard let bytes, bytes.count <= LocalBenchmark.maxTaskTomlBytes, let text = String(validating: bytes, as: UTF8.self),
                  let name = HarborAdapter.declaredName(taskToml: text), name != id else { continue }
            names[id] = name
        }
        do {
            _ = try HarborTaskNames(ids: Array(tomls.keys), declared: names)
        } catch {
            throw BenchmarkError(.invalidBenchmark, "the request's Harbor tasks", cause: error)
        }
        return names
    }

    /// Harbor's adapter on the node for `ids`, the request's tasks written under `datasetPath`,
    /// with their Harbor names (`taskNames`).
    public func adapter(datasetPath: String, ids: [String], names: [String: String]) -> HarborAdapter {
        var a = HarborAdapter(taskIDs: ids, tool: tool)
        a.datasetPath = datasetPath
        a.environmentProvider = "local"
        a.scriptsDirectory = scriptsDirectory
        a.model = model
        a.environment = environment
        a.agentTimeout = agentTimeout
        a.agentTimeoutMultiplier = agentTimeoutMultiplier
        a.taskNetworkAllow = taskNetworkAllow
        a.concurrency = 1
        a.taskNames = names
        return a
    }
}

extension ToolSettings {
    /// What a node binds into the runner's sandbox from its own paths, by the setting that
    /// names it: the runner's binds and the shell-call shim.
    public var nodeBinds: [(setting: String, path: String)] {
        binds.map { ("runner.binds", $0) } + (shellCalls.map { [("runner.srt_shim", $0)] } ?? [])
    }

    /// The host paths these settings name, which a node must have at the same paths: the
    /// binds, the gate's CA file, the shell-call shim and an executable named by path.
    public var nodePaths: [String] {
        var paths = binds + [upstreamCA, shellCalls].compactMap { $0 }
        if let first = command.first, first.contains("/") { paths.append(first) }
        return paths
    }
}

extension HarborAdapter {
    /// This adapter as a node runs its tasks' agent phases (`HarborNode`). Only the local
    /// provider runs on nodes (a remote provider's environments are already off this host),
    /// and only a dataset directory's tasks (a registry's are fetched by Harbor from git).
    public var node: HarborNode {
        get throws(BenchmarkError) {
            guard environmentProvider == "local", let scripts = scriptsDirectory else {
                throw BenchmarkError(.configuration, "executor: ray runs terminal-bench with env_provider: local (each task's agent phase and verifier on a node); env_provider: \(environmentProvider) runs the environments at the provider already: use executor: local")
            }
            guard datasetPath != nil else {
                throw BenchmarkError(.configuration, "executor: ray sends each task's files to its node, and a registry dataset's tasks are not files here: run `harbor download \(dataset ?? "NAME@VERSION") -o DIR` and set dataset: DIR")
            }
            return HarborNode(tool: tool, model: model, environment: environment, agentTimeout: agentTimeout, agentTimeoutMultiplier: agentTimeoutMultiplier,
                              scriptsDirectory: scripts, taskNetworkAllow: taskNetworkAllow)
        }
    }

    /// The longest `task`'s agent phase may run: its agent's own limit (the task's, or
    /// `per_task_timeout`, times `agent_timeout_multiplier`, as Harbor applies it) and
    /// `containerMargin` for Harbor's setup and copies, never past the runner's (always finite).
    func agentPhaseLimit(_ task: BenchmarkTask) -> Double {
        let agent = (agentTimeout ?? task.agentTimeout) * (agentTimeoutMultiplier ?? 1)
        return min(agent + HarborAgentPhase.containerMargin, tool.timeout ?? .infinity)
    }

    /// Task `id` as its limits bound it with Harbor running the agent phase
    /// (`agentPhaseLimit`), for the time a node's request may take.
    public func boundedTask(_ id: String) -> BenchmarkTask {
        var t = localTask(id)
        t.agentTimeout = agentPhaseLimit(t)
        t.agentTimeoutDeclared = true
        return t
    }
}
