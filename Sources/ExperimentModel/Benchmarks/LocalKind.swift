import Benchmark
import Foundation

/// `local`: a directory of Harbor-layout tasks, each run by autoharness itself (the agent
/// and its verifier in separate sandboxes).
struct LocalKind: BenchmarkKind {
    let name = "local"
    let installHint = "a local benchmark needs python3 for its tasks; give its directory with --dataset"
    func notInVM(_ config: ExperimentConfig) -> String? { nil }
    let runsOwnTasks = true

    func initialize(_ o: InitOptions, tool: String, layout: ExperimentLayout) throws -> InitValues {
        guard var dataset = o.dataset, !dataset.isEmpty else {
            throw ExperimentError(.usage, "--dataset is required for a local benchmark (its directory, with tasks/<id>/)")
        }
        if !dataset.hasPrefix("/") { dataset = FileManager.default.currentDirectoryPath + "/" + dataset }
        // Fail now, not at prepare: later commands run a broken task as a 0, but an
        // experiment should not start with one.
        let problems: [String]
        do {
            problems = try LocalBenchmark(directory: dataset).problems
        } catch {
            throw ExperimentError(.usage, "--dataset \(o.dataset ?? ""): \(error)")
        }
        guard problems.isEmpty else { throw ExperimentError(.usage, "--dataset \(o.dataset ?? ""): \(problems.joined(separator: "\n"))") }
        return InitValues(dataset: dataset, placeholders: ["verifier_tools": InitValues.verifierToolsLine(when: nil)])
    }

    func runsVerifiers(_ config: ExperimentConfig) -> Bool { true }

    func imageTasks(dataset: String) -> String? { dataset + "/tasks" }

    func adapter(_ config: ExperimentConfig, root: String, checkTools: Bool) throws -> any BenchmarkAdapter {
        let dataset = config.dataset ?? ""
        var local = LocalAdapter(benchmark: try LocalBenchmark(directory: dataset.hasPrefix("/") ? dataset : root + "/" + dataset))
        local.taskPolicy = config.taskPolicy
        local.verifierPolicy = config.verifierPolicy
        local.verifierTools = try config.verifierToolbox()
        local.defaultAgentTimeout = config.perTaskTimeout
        local.agentNetworkAllow = try Self.agentNetwork(config)
        try Self.checkTaskNetworks(config, local.benchmark.tasks)
        // Tasks whose image `autoharness images` built run on it; the others on the host's userland.
        let images = TaskImageStore(experimentRoot: root).load(local.benchmark.tasks).images
        local.images = images
        local.disks = Self.taskDisks(root: root, tasks: local.benchmark.tasks)
        // With `executor: ray` a node runs them on the same image, sent to it as an archive by
        // digest (`ImageArchive`, `NodeImageStore`).
        return local
    }
}

extension LocalKind {
    /// The experiment's task disks (`.autoharness/disks/`) where a task declares its storage,
    /// or why this host cannot make them (such a task's train run notes it ran on its tmpfs,
    /// and why); nil where no task declares any.
    static func taskDisks(root: String, tasks: [BenchmarkTask]) -> Result<TaskDisks, BenchmarkError>? {
        guard tasks.contains(where: { $0.storage != nil }) else { return nil }
        return TaskDisks.make(directory: ExperimentLayout(root: root).privateDirectory + "/disks")
    }

    /// `runner.network.allow` for a local benchmark: what every task's agent phase, train and
    /// held-out alike, reaches through the egress proxy (package mirrors). A host the coding
    /// agent also reaches (`sandbox.network.allow` or `inference`) is refused: a held-out run could leave its
    /// task there (a package index that takes uploads, a cache) for the coding agent to read.
    /// Hosts are compared whatever the port (one server, two ports), in one spelling (lower
    /// case, no trailing dot, an IP address as inet_ntop writes it), a `*.domain` pattern
    /// against every name under it and against patterns above or below it.
    static func agentNetwork(_ config: ExperimentConfig) throws -> [String] {
        try agentNetwork(config, allow: config.runner.networkAllow, key: "runner.network.allow")
    }

    /// `allow` (the config's `key`), checked as above.
    static func agentNetwork(_ config: ExperimentConfig, allow: [String], key: String) throws -> [String] {
        for mine in allow {
            guard let theirs = config.agentTargets.first(where: { sameHost(mine, $0) }) else { continue }
            let list = config.networkAllow.contains(theirs) ? "allow" : "inference"
            throw ExperimentError(.usage, "\(key): \(mine) reaches the host of \(theirs) in sandbox.network.\(list): a host both held-out task runs and the coding agent reach could carry held-out tasks to it; give each its own")
        }
        return allow
    }

    /// Each task's own allowlist (task.toml's `allowed_hosts`), checked as the operator's is.
    static func checkTaskNetworks(_ config: ExperimentConfig, _ tasks: [BenchmarkTask]) throws {
        for task in tasks {
            guard let entries = task.network?.entries, !entries.isEmpty else { continue }
            _ = try agentNetwork(config, allow: entries, key: "\(task.directory)/task.toml allowed_hosts")
        }
    }

    /// `host:port`'s host in one spelling.
    static func canonicalHost(_ entry: String) -> String {
        var host = entry.lastIndex(of: ":").map { String(entry[..<$0]) } ?? entry
        host = host.lowercased()
        while host.hasSuffix(".") { host.removeLast() }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        var a4 = in_addr(), a6 = in6_addr()
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        if inet_pton(AF_INET, host, &a4) == 1, inet_ntop(AF_INET, &a4, &text, socklen_t(text.count)) != nil { return String(cString: text) }
        if inet_pton(AF_INET6, host, &a6) == 1, inet_ntop(AF_INET6, &a6, &text, socklen_t(text.count)) != nil { return String(cString: text) }
        return host
    }

    static func sameHost(_ a: String, _ b: String) -> Bool {
        let x = canonicalHost(a), y = canonicalHost(b)
        func under(_ name: String, _ pattern: String) -> Bool {
            guard pattern.hasPrefix("*.") else { return false }
            let domain = String(pattern.dropFirst(2))
            let bare = name.hasPrefix("*.") ? String(name.dropFirst(2)) : name
            return bare == domain || bare.hasSuffix("." + domain)
        }
        return x == y || under(x, y) || under(y, x)
    }
}

/// `command`: any program that runs the task ids it is given and writes their rewards.
struct CommandKind: BenchmarkKind {
    let name = "command"
    let installHint = "install python3 or set runner.command"
    let shardsOnNodes = true
    func notInVM(_ config: ExperimentConfig) -> String? { nil }

    func initialize(_ o: InitOptions, tool: String, layout: ExperimentLayout) throws -> InitValues {
        InitValues(dataset: o.dataset ?? "")
    }

    func adapter(_ config: ExperimentConfig, root: String, checkTools: Bool) throws -> any BenchmarkAdapter {
        guard let argv = config.runner.command, !argv.isEmpty else {
            throw ExperimentError(.usage, "benchmark: command needs runner.command, the argv that runs {task_ids_file} and writes {output} (see docs/benchmarks.md, 'command')")
        }
        guard config.runner.scorer != nil || argv.contains(where: { $0.contains("{output}") }) else {
            throw ExperimentError(.usage, "runner.command must name {output}, the file where it writes {\"task id\": reward} (or set runner.scorer, which then writes it)")
        }
        if checkTools {
            _ = try ToolCheck.tool(argv, default: argv[0], hint: "runner.command's first word must be an executable on PATH or a path (bind its directory with runner.binds)")
            try ToolCheck.environment(config.runner.envPass, for: "the command")
        }
        if config.runner.scorer == nil && !config.runner.scorerBinds.isEmpty {
            throw ExperimentError(.usage, "runner.scorer_binds is only for runner.scorer, which is not set")
        }
        if let scorer = config.runner.scorer {
            guard !scorer.isEmpty, scorer.contains(where: { $0.contains("{output}") }) else {
                throw ExperimentError(.usage, "runner.scorer must name {output}, the file where it writes {\"task id\": reward} from what it reads in {run_dir}")
            }
            if checkTools {
                _ = try ToolCheck.tool(scorer, default: scorer[0], hint: "runner.scorer's first word must be an executable on PATH or a path (bind its directory with runner.binds)")
            }
        }
        var adapter = CommandAdapter(taskIDs: try config.taskList(root: root), tool: config.toolSettings(argv))
        adapter.scorer = config.runner.scorer
        adapter.scorerBinds = config.runner.scorerBinds
        return adapter
    }

    func unverified(_ config: ExperimentConfig) -> String? {
        config.runner.scorer == nil
            ? "benchmark: command without runner.scorer: the rewards are the command's own, written by the process agent.py may run in"
            : nil
    }
}
