import Benchmark
import Foundation

/// `terminal-bench`: Terminal-Bench 2.1 (2.0, or any Harbor dataset) through Harbor, agent.py as
/// Harbor's agent; the task environments local (autoharness's sandbox) or a remote provider.
package struct TerminalBenchKind: BenchmarkKind {
    static let hint = "install Harbor with `uv tool install harbor` (or `pip install harbor`), see https://github.com/laude-institute/harbor"
    static let dataset = "terminal-bench@2.1"
    package let name = "terminal-bench"
    package let defaultTool: String? = "harbor"
    package let defaultDataset: String? = Self.dataset
    package var installHint: String { Self.hint }
    /// With `executor: ray` and `env_provider: local` each task goes to a node with its files
    /// (and its image), where Harbor runs its agent phase (`HarborNode`).
    package let shardsOnNodes = true

    package struct Settings: BenchmarkSettings {
        package init() {}
        /// Harbor's environment provider (upstream's key): one of `providers`, e2b when unset.
        var envProvider: String?
        /// Harbor's multiplier of each task's own agent timeout.
        var agentTimeoutMultiplier: Double?
        /// A local Harbor registry.json.
        var registryPath: String?
        /// `env_provider: local`, tasks on their image: what each task's container reaches
        /// through the egress proxy (package mirrors); nothing when unset.
        var taskNetworkAllow: [String]?
        var provider: String { envProvider ?? "e2b" }
        package static var keys: [ConfigKey<Self>] {
            [.choice("env_provider", \.envProvider, TerminalBenchKind.providers,
                     "Harbor's environment provider (upstream's key; e2b when unset); `local` runs each task on its image here."),
             .number("agent_timeout_multiplier", \.agentTimeoutMultiplier, 0.01...100, "Harbor's multiplier of each task's own agent timeout."),
             .text("registry_path", \.registryPath, "A local Harbor registry.json."),
             .hostPorts("task_network_allow", \.taskNetworkAllow,
                        "With `env_provider: local`: what each task's sandbox reaches through the egress proxy (package mirrors); nothing when unset.")]
        }
    }

    /// Where Harbor's task environments run: Harbor's own providers, and autoharness's `local`
    /// (the task's commands in autoharness's sandbox).
    static let providers = ["local", "docker", "daytona", "e2b", "modal", "runloop"]

    /// The keys each Harbor environment provider reads (harbor 0.25.0, harbor/environments/:
    /// e2b.py, daytona.py, modal.py (Modal's client reads MODAL_TOKEN_ID/SECRET), runloop.py).
    static let providerKeys = ["e2b": ["E2B_API_KEY"], "daytona": ["DAYTONA_API_KEY"],
                               "modal": ["MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"], "runloop": ["RUNLOOP_API_KEY"]]

    /// The dataset in any form Harbor takes, checked now; a directory is written as the task
    /// directory itself (the inner one of a `harbor download` tree).
    package func initialize(_ o: InitOptions, tool: String, layout: ExperimentLayout) throws -> InitValues {
        let fm = FileManager.default
        var dataset = o.dataset ?? Self.dataset
        // Not when the operator names a registry: theirs may hold the name.
        if o.registryPath == nil, o.registryURL == nil, let package = HarborDataset.aliases[dataset] {
            FileHandle.standardError.write(Data("init: \(dataset) is Harbor's hub package \(package) (pinned by its digest)\n".utf8))
            dataset = package
        }
        var harborKeys = "# registry_path: registry.json  # a local Harbor registry the dataset name@version is resolved from (no network)"
        var harborAllow: [String] = []
        if o.registryPath != nil && o.dataset == nil {
            throw ExperimentError(.usage, "--registry-path needs --dataset NAME@VERSION, the dataset to take from it")
        }
        if !dataset.hasPrefix("/"), fm.fileExists(atPath: fm.currentDirectoryPath + "/" + dataset) { dataset = fm.currentDirectoryPath + "/" + dataset }
        let registry = o.registryPath.map { $0.hasPrefix("/") ? $0 : fm.currentDirectoryPath + "/" + $0 }
        switch try HarborDataset.resolve(dataset, root: fm.currentDirectoryPath, registryPath: registry) {
        case .directory(let dir, let tasks):
            dataset = dir
            try Self.checkNames(tasks, of: "--dataset \(dir)")
        case .registry(let reference, let r, _):
            if let r {
                if o.registryURL != nil { throw ExperimentError(.usage, "--registry-url and --registry-path: give one registry") }
                // What a run's harbor must reach to fetch the registry's git tasks.
                harborKeys = "registry_path: \(r.path)  # the local Harbor registry \(dataset) is resolved from (no network)"
                harborAllow = r.gitHosts
            } else {
                // Downloaded now, once, by the operator's harbor; the experiment then holds
                // a task directory like any other, and no run needs the registry.
                let target = layout.privateDirectory + "/dataset"
                try fm.createDirectory(atPath: layout.root, withIntermediateDirectories: true)
                try layout.ensurePrivateDirectory()
                try HarborDataset.download(reference, harbor: tool, registryURL: o.registryURL, into: target)
                guard case .directory(let dir, let tasks) = try HarborDataset.resolve(target, root: layout.root, registryPath: nil) else {
                    throw ExperimentError(.usage, "harbor download \(reference) wrote no task directories into \(target)")
                }
                try Self.checkNames(tasks, of: "\(reference) as downloaded into \(dir)")
                harborKeys = "# \(reference): downloaded by init with `harbor download` into the directory above (no run needs the registry)"
                dataset = dir
            }
        }
        if o.registryURL != nil && o.registryPath == nil && !HarborDataset.isReference(o.dataset ?? Self.dataset) {
            throw ExperimentError(.usage, "--registry-url is for a registry dataset (name@version), not a directory")
        }
        return InitValues(dataset: dataset, placeholders: ["harbor_registry": harborKeys, "harbor_allow": harborAllow.map { ", " + $0 }.joined(),
                                                           "verifier_tools": InitValues.verifierToolsLine(when: "env_provider: local")])
    }

    package func runsVerifiers(_ config: ExperimentConfig) -> Bool { settings(config).provider == "local" }

    /// A dataset directory's tasks, each with its environment/: on their images with `local`.
    package func imageTasks(dataset: String) -> String? { dataset }

    /// With the tasks' images made, Harbor's environment is autoharness's (`local`, the
    /// commands in each task's container); else upstream's default.
    package func imagePlaceholders(built: Bool) -> [String: String] { ["env_provider": built ? "local" : "e2b"] }

    package func configured(_ config: ExperimentConfig) -> String { "benchmark: \(name) with env_provider: \(settings(config).provider)" }

    /// Harbor, its Python, the dataset and the verifier tools are directories the guest gets
    /// read-only; the task environments are either the guest's own sandboxes (`local`) or a
    /// remote provider's machines, reached through the host's proxy like any egress. Only the
    /// docker provider needs something of the host's: its Docker daemon.
    package func notInVM(_ config: ExperimentConfig) -> String? {
        settings(config).provider == "docker" ? "env_provider: docker drives this host's Docker daemon, which the guest does not have" : nil
    }

    /// Every task of the dataset has a name Harbor can be asked for, and no two share one.
    static func checkNames(_ tasks: [HarborDataset.Task], of what: String) throws {
        do {
            _ = try HarborTaskNames(ids: tasks.map(\.id), declared: Dictionary(tasks.compactMap { t in t.declaredName.map { (t.id, $0) } }, uniquingKeysWith: { a, _ in a }))
        } catch {
            throw ExperimentError(.usage, what, cause: error)
        }
    }

    package func adapter(_ config: ExperimentConfig, root: String, checkTools: Bool) throws -> any BenchmarkAdapter {
        try harborAdapter(config, root: root, checkTools: checkTools)
    }

    package init() {

    }
}

extension TerminalBenchKind {
    /// Harbor's adapter for `config`: the dataset resolved, the provider's needs checked.
    func harborAdapter(_ config: ExperimentConfig, root: String, checkTools: Bool) throws -> HarborAdapter {
        let argv = config.runner.command ?? ["harbor"]
        let upstream = settings(config), provider = upstream.provider
        if checkTools {
            _ = try ToolCheck.tool(argv, default: "harbor", hint: TerminalBenchKind.hint)
            // The template passes every provider's key; only the one in use must be set.
            let unused = TerminalBenchKind.providerKeys.filter { $0.key != provider }.values.flatMap { $0 }
            try ToolCheck.environment(config.runner.envPass.filter { !unused.contains($0) }, for: "Harbor (the agent's model API, env_provider \(provider))")
            try Self.checkHeldOutAccount(config, provider: provider, keys: TerminalBenchKind.providerKeys[provider] ?? [])
        }
        guard let dataset = config.dataset, !dataset.isEmpty else {
            throw ExperimentError(.usage, "dataset: missing; terminal-bench needs a Harbor dataset (terminal-bench@2.1, terminal-bench@2.0) or a local directory of Harbor tasks")
        }
        let tool = config.toolSettings(argv)
        if provider == "local" {
            guard let scripts = config.runner.scripts, FileManager.default.fileExists(atPath: scripts + "/autoharness_harbor_env.py") else {
                throw ExperimentError(.usage, "env_provider: local needs runner.scripts, the directory of autoharness_harbor_env.py (templates/terminal-bench)")
            }
        }
        if provider == "docker" && !config.runner.binds.contains(where: { $0.hasSuffix("docker.sock") }) {
            throw ExperimentError(.usage, """
                env_provider: docker needs the Docker socket in runner.binds (e.g. /var/run/docker.sock), and giving it \
                hands agent.py, which runs inside the harbor process, control of the Docker daemon: root on this host. \
                Use a remote provider (daytona, e2b, modal, runloop) for agents you do not trust, or add the socket to \
                runner.binds to accept that risk (docs/threat-model.md).
                """)
        }
        let ids: [String]
        var adapter: HarborAdapter
        switch try HarborDataset.resolve(dataset, root: root, registryPath: upstream.registryPath) {
        case .directory(let dir, let tasks):
            try RunnerBinds.refuse(config.toolBinds, exposing: [.init(path: dir, what: "contains the dataset \(dir): every run would see the held-out tasks' files (autoharness binds the requested tasks itself)")])
            ids = tasks.map(\.id)
            adapter = HarborAdapter(taskIDs: ids, tool: tool)
            adapter.datasetPath = dir
            for t in tasks { if let n = t.declaredName, n != t.id { adapter.taskNames[t.id] = n } }
        case .registry(let reference, let registry, let listed):
            let given = (config.tasks ?? []).isEmpty && config.tasksFile == nil ? nil : try config.taskList(root: root, valid: TraceName.isAcceptableID)
            guard let names = given ?? listed else {
                throw ExperimentError(.usage, """
                    dataset: \(reference) is a registry reference with neither registry_path nor tasks_file: autoharness \
                    does not let runs reach the registry to list it. `autoharness init --dataset \(reference)` downloads it \
                    once (or run `harbor download \(reference) -o DIR` and set dataset: DIR), or give a registry.json \
                    (registry_path), or the task names in tasks_file
                    """)
            }
            // A registry task's id is Harbor's `-i` name; org/name@ref is org/name.
            ids = Array(Set(names.map { n in n.firstIndex(of: "@").map { String(n[..<$0]) }.flatMap { $0.contains("/") ? $0 : nil } ?? n })).sorted()
            adapter = HarborAdapter(taskIDs: ids, tool: tool)
            adapter.dataset = reference
            adapter.registry = registry
            if let registry {
                for id in ids where !registry.taskIDs.contains(id) {
                    throw ExperimentError(.usage, "task \(id): not in dataset \(reference) of \(registry.path)")
                }
                // A task on this host is named by its task.toml too (a git task's is not
                // known before Harbor fetches it: its -i name and org/name@ref still work).
                for (id, path) in registry.localTasks {
                    if let text = HarborDataset.taskToml(path),
                       let name = HarborAdapter.declaredName(taskToml: text), name != id {
                        adapter.taskNames[id] = name
                    }
                }
            }
        }
        do {
            _ = try HarborTaskNames(ids: ids, declared: adapter.taskNames)
        } catch {
            throw ExperimentError(.usage, "dataset \(dataset)", cause: error)
        }
        adapter.model = config.agentModel == "none" ? nil : config.agentModel
        adapter.environmentProvider = provider
        adapter.scriptsDirectory = config.runner.scripts
        adapter.verifierTools = try config.verifierToolbox()
        // Harbor multiplies each task's own agent timeout (900 s for Terminal-Bench 2.0 tasks).
        // Upstream derived the multiplier from per_task_timeout / 180, which overshoots 5×;
        // here it is explicit.
        if let x = upstream.agentTimeoutMultiplier { adapter.agentTimeoutMultiplier = x }
        adapter.agentTimeout = config.perTaskTimeout
        adapter.concurrency = config.maxConcurrency
        adapter.environment = config.agentEnvironment()
        if provider == "local" {
            // Tasks whose image `autoharness images` made run their commands on it (a task
            // container); the others on the host's userland, as before.
            let images = TaskImageStore(experimentRoot: root).load(adapter.localTasks.filter { $0.problem == nil }).images
            adapter.images = images
            adapter.disks = LocalKind.taskDisks(root: root, tasks: adapter.localTasks)
            try LocalKind.checkTaskNetworks(config, adapter.localTasks)
            if !images.byTask.isEmpty {
                adapter.taskNetworkAllow = try LocalKind.agentNetwork(config, allow: upstream.taskNetworkAllow ?? [], key: "task_network_allow")
            }
        }
        // Before any run (a gate's error would come after its start is counted); not when
        // only the record is read.
        if checkTools && config.executor.kind == .ray {
            do { _ = try adapter.node } catch { throw ExperimentError(.usage, error.message) }
        }
        return adapter
    }

    /// A remote environment provider keeps state (sandboxes, files, snapshots) that anyone
    /// holding the key can list: a held-out agent.py could leave one there that a later train
    /// agent.py finds and prints into its trace. So when the provider's key is passed to the
    /// runner, held-out runs must get another account's (`gate.held_out_env`), and not the
    /// same value under another name.
    static func checkHeldOutAccount(_ config: ExperimentConfig, provider: String, keys: [String]) throws {
        for key in keys where config.runner.envPass.contains(key) {
            guard let source = config.gate.heldOutEnv[key] else {
                throw ExperimentError(.usage, """
                    env_provider: \(provider) keeps state any holder of \(key) can list, and held-out runs would share the train \
                    runs' account: a held-out agent.py could leave a sandbox or file there that a train run finds. Give held-out \
                    runs an account of their own: gate.held_out_env: {\(key): VAR}, VAR a variable holding another account's key \
                    (docs/benchmarks.md, terminal-bench)
                    """)
            }
            guard let held = getenv(source).map({ String(cString: $0) }), !held.isEmpty else {
                throw ExperimentError(.usage, "gate.held_out_env: \(key) comes from $\(source) for held-out runs, and \(source) is not set; export \(source)=... (another account's key)")
            }
            if let train = getenv(key).map({ String(cString: $0) }), train == held {
                throw ExperimentError(.usage, "gate.held_out_env: $\(source) holds the same value as $\(key): held-out and train runs would share one \(provider) account; give held-out runs another account's key")
            }
        }
    }
}
