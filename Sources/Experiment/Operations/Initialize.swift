import Benchmark
import Foundation
import SupervisorIO
import Ledger

extension ExperimentSupervisor {
    /// What `init` needs besides the directory.
    public struct InitOptions: Sendable {
        public var benchmark: String
        /// `local`: the benchmark directory. Others: the upstream `dataset` value if any.
        public var dataset: String?
        /// The tool's executable (harbor, tau2, ...), when not the default name on PATH.
        public var tool: String?
        /// bird-interact: the BIRD-Interact checkout (default: $BIRD_REPO).
        public var repo: String?
        public var templates: String
        /// `claude`, `codex` or `command` (default): the `coding_agent:` preset.
        public var codingAgent: String
        /// The coding agent's CLI, when not on PATH under its usual name.
        public var codingAgentBinary: String?
        /// terminal-bench: a local registry.json the registry dataset is resolved from.
        public var registryPath: String?
        /// terminal-bench: the legacy registry.json URL `harbor download` resolves the dataset
        /// from (default: Harbor's own registry).
        public var registryURL: String?
        public init(benchmark: String, dataset: String?, tool: String? = nil, repo: String? = nil, templates: String,
                    codingAgent: String = "command", codingAgentBinary: String? = nil, registryPath: String? = nil,
                    registryURL: String? = nil) {
            self.registryPath = registryPath
            self.registryURL = registryURL
            self.codingAgent = codingAgent
            self.codingAgentBinary = codingAgentBinary
            self.benchmark = benchmark
            self.dataset = dataset
            self.tool = tool
            self.repo = repo
            self.templates = templates
        }
    }

    /// Creates an experiment in `directory` (which must not exist or be empty): the config
    /// (common keys + the benchmark's upstream keys and `runner:`), `agent/agent.py` and
    /// `PROGRAM.md` (common part + the benchmark's part) from `templates/`, the workspace,
    /// `.gitignore`, a git repository with a first commit, and the private state directory
    /// with its ledger. The benchmark's tool and data are checked first.
    public static func initialize(directory: String, _ o: InitOptions) throws -> ExperimentLayout {
        let fm = FileManager.default
        guard ExperimentConfig.supportedBenchmarks.contains(o.benchmark) else {
            throw ExperimentError(.usage, "--benchmark \(o.benchmark): unknown (one of: \(ExperimentConfig.supportedBenchmarks.joined(separator: ", ")))")
        }
        var root = directory.hasPrefix("/") ? directory : fm.currentDirectoryPath + "/" + directory
        while root.count > 1 && root.hasSuffix("/") { root.removeLast() }
        let rootExisted = fm.fileExists(atPath: root)
        if let entries = try? fm.contentsOfDirectory(atPath: root), !entries.isEmpty {
            throw ExperimentError(.usage, "\(root) already exists and is not empty; choose a new directory")
        }
        let layout = ExperimentLayout(root: root)
        // A failed init leaves the directory as it found it (absent, or empty), so it can be
        // run again as it was typed.
        var created = false
        defer {
            if !created {
                if rootExisted {
                    for e in FileSystem.names(in: root) { FileSystem.removeTree(root + "/" + e) }
                } else {
                    FileSystem.removeTree(root)
                }
            }
        }
        let t = o.templates
        let bench = t + "/" + o.benchmark
        for f in ["experiment_config.yaml", "PROGRAM.md", o.benchmark + "/keys.yaml", o.benchmark + "/runner.yaml", o.benchmark + "/PROGRAM.md",
                  o.benchmark + "/agent.py"] where !fm.fileExists(atPath: t + "/" + f) {
            throw ExperimentError(.io, "template \(t)/\(f) is missing (looked in \(t))")
        }
        var dataset = o.dataset ?? ExperimentConfig.defaultDataset[o.benchmark] ?? ""
        if o.benchmark == "local" {
            guard !dataset.isEmpty else { throw ExperimentError(.usage, "--dataset is required for a local benchmark (its directory, with tasks/<id>/)") }
            if !dataset.hasPrefix("/") { dataset = fm.currentDirectoryPath + "/" + dataset }
            // Fail now, not at prepare: later commands run a broken task as a 0, but an
            // experiment should not start with one.
            let problems: [String]
            do {
                problems = try LocalBenchmark(directory: dataset).problems
            } catch {
                throw ExperimentError(.usage, "--dataset \(o.dataset ?? ""): \(error)")
            }
            guard problems.isEmpty else { throw ExperimentError(.usage, "--dataset \(o.dataset ?? ""): \(problems.joined(separator: "\n"))") }
        }
        let preset = try CodingAgentPreset.make(o.codingAgent, binary: o.codingAgentBinary)
        var tool = o.tool ?? ExperimentConfig.defaultTool[o.benchmark] ?? ""
        if let name = ExperimentConfig.defaultTool[o.benchmark] {
            guard let found = ToolCheck.locate(tool) else {
                throw ExperimentError(.usage, "\(tool) not found\(o.tool == nil ? " on PATH" : ""): \(ExperimentConfig.installHint[o.benchmark] ?? "install \(name)") (or pass --tool PATH)")
            }
            // The sandbox's PATH is not the operator's: the config names the tool by path.
            tool = found.hasPrefix("/") ? found : fm.currentDirectoryPath + "/" + found
        }
        var tau2Data = ""
        if o.benchmark == "tau-bench" {
            guard let d = o.dataset ?? ProcessInfo.processInfo.environment["TAU2_DATA_DIR"] else {
                throw ExperimentError(.usage, "tau-bench needs tau2's data directory: --dataset /path/to/tau2-bench/data (or export TAU2_DATA_DIR)")
            }
            tau2Data = d.hasPrefix("/") ? d : fm.currentDirectoryPath + "/" + d
            guard fm.fileExists(atPath: tau2Data + "/tau2/domains") else {
                throw ExperimentError(.usage, "\(tau2Data) has no tau2/domains/: give tau2-bench's data directory (\(ExperimentConfig.installHint["tau-bench"]!))")
            }
            dataset = ""
        }
        var birdRepo = ""
        if o.benchmark == "bird-interact" {
            guard let r = o.repo ?? ProcessInfo.processInfo.environment["BIRD_REPO"] else {
                throw ExperimentError(.usage, "bird-interact needs the BIRD-Interact checkout: --repo /path/to/BIRD-Interact (or export BIRD_REPO); \(ExperimentConfig.installHint["bird-interact"]!)")
            }
            birdRepo = r.hasPrefix("/") ? r : fm.currentDirectoryPath + "/" + r
            guard fm.fileExists(atPath: birdRepo + "/orchestrator/runner.py") || fm.fileExists(atPath: birdRepo + "/BIRD-Interact-ADK/orchestrator/runner.py") else {
                throw ExperimentError(.usage, "\(birdRepo) has no BIRD-Interact-ADK (orchestrator/runner.py): \(ExperimentConfig.installHint["bird-interact"]!)")
            }
            dataset = o.dataset ?? "lite"
            try ToolCheck.postgresClients()
            let adk = fm.fileExists(atPath: birdRepo + "/BIRD-Interact-ADK/orchestrator/runner.py") ? birdRepo + "/BIRD-Interact-ADK" : birdRepo
            try ToolCheck.pythonRequirements(python: tool, file: adk + "/requirements.txt")
        }
        // terminal-bench: the dataset in any form Harbor takes, checked now; a directory is
        // written as the task directory itself (the inner one of a `harbor download` tree).
        var harborKeys = "# registry_path: registry.json  # a local Harbor registry the dataset name@version is resolved from (no network)"
        var harborAllow: [String] = []
        if o.benchmark != "terminal-bench" && (o.registryPath != nil || o.registryURL != nil) {
            throw ExperimentError(.usage, "--registry-path and --registry-url are for --benchmark terminal-bench (Harbor's registry)")
        }
        if o.benchmark == "terminal-bench" {
            if o.registryPath != nil && o.dataset == nil {
                throw ExperimentError(.usage, "--registry-path needs --dataset NAME@VERSION, the dataset to take from it")
            }
            if !dataset.hasPrefix("/"), fm.fileExists(atPath: fm.currentDirectoryPath + "/" + dataset) { dataset = fm.currentDirectoryPath + "/" + dataset }
            let registry = o.registryPath.map { $0.hasPrefix("/") ? $0 : fm.currentDirectoryPath + "/" + $0 }
            switch try HarborDataset.resolve(dataset, root: fm.currentDirectoryPath, registryPath: registry) {
            case .directory(let dir, let tasks):
                dataset = dir
                do {
                    _ = try HarborTaskNames(ids: tasks.map(\.id), declared: Dictionary(tasks.compactMap { t in t.declaredName.map { (t.id, $0) } }, uniquingKeysWith: { a, _ in a }))
                } catch {
                    throw ExperimentError(.usage, "--dataset \(dir): \(error.message)")
                }
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
                    try fm.createDirectory(atPath: root, withIntermediateDirectories: true)
                    try ensurePrivateDirectory(layout)
                    try HarborDataset.download(reference, harbor: tool, registryURL: o.registryURL, into: target)
                    guard case .directory(let dir, let tasks) = try HarborDataset.resolve(target, root: root, registryPath: nil) else {
                        throw ExperimentError(.usage, "harbor download \(reference) wrote no task directories into \(target)")
                    }
                    do {
                        _ = try HarborTaskNames(ids: tasks.map(\.id), declared: Dictionary(tasks.compactMap { t in t.declaredName.map { (t.id, $0) } }, uniquingKeysWith: { a, _ in a }))
                    } catch {
                        throw ExperimentError(.usage, "\(reference) as downloaded into \(dir): \(error.message)")
                    }
                    harborKeys = "# \(reference): downloaded by init with `harbor download` into the directory above (no run needs the registry)"
                    dataset = dir
                }
            }
            if o.registryURL != nil && o.registryPath == nil && !HarborDataset.isReference(o.dataset ?? ExperimentConfig.defaultDataset["terminal-bench"]!) {
                throw ExperimentError(.usage, "--registry-url is for a registry dataset (name@version), not a directory")
            }
        }
        func text(_ f: String) throws -> String {
            try String(contentsOfFile: f, encoding: .utf8)
                .replacingOccurrences(of: "{{benchmark}}", with: o.benchmark)
                .replacingOccurrences(of: "{{dataset}}", with: dataset)
                .replacingOccurrences(of: "{{tool}}", with: tool)
                .replacingOccurrences(of: "{{python}}", with: ToolCheck.interpreter(of: tool) ?? (tool.split(separator: "/").last?.hasPrefix("python") == true ? tool : "python3"))
                .replacingOccurrences(of: "{{templates}}", with: t)
                .replacingOccurrences(of: "{{tau2_data}}", with: tau2Data)
                .replacingOccurrences(of: "{{bird_repo}}", with: birdRepo)
                .replacingOccurrences(of: "{{harbor_registry}}", with: harborKeys)
                .replacingOccurrences(of: "{{harbor_allow}}", with: harborAllow.map { ", " + $0 }.joined())
                .replacingOccurrences(of: "{{tool_binds}}", with: ToolCheck.installRoots(of: tool).map { "\"\($0)\"" }.joined(separator: ", "))
        }
        try fm.createDirectory(atPath: layout.agentDirectory, withIntermediateDirectories: true)
        try fm.createDirectory(atPath: layout.workspace, withIntermediateDirectories: true)
        let runner = try text(bench + "/runner.yaml")
        let configText = try text(t + "/experiment_config.yaml")
            .replacingOccurrences(of: "{{coding_agent}}", with: preset.configLines)
            .replacingOccurrences(of: "{{agent_allow}}", with: preset.allow.joined(separator: ", "))
            .replacingOccurrences(of: "{{benchmark_keys}}", with: try text(bench + "/keys.yaml"))
            .replacingOccurrences(of: "{{runner}}", with: runner.isEmpty ? "" : runner + "\n")
        try configText.write(toFile: layout.config, atomically: true, encoding: .utf8)
        try (try text(t + "/PROGRAM.md") + "\n" + (try text(bench + "/PROGRAM.md"))).write(toFile: layout.program, atomically: true, encoding: .utf8)
        try fm.copyItem(atPath: bench + "/agent.py", toPath: layout.agentFile)
        var committed = [".gitignore", "experiment_config.yaml", "PROGRAM.md", "agent/agent.py", "workspace/learnings.md"]
        for (rel, content) in preset.homeFiles {
            let path = root + "/agent-home/" + rel
            try fm.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            try content.write(toFile: path, atomically: true, encoding: .utf8)
            committed.append("agent-home/" + rel)
        }
        try "# Learnings\n\nNotes from the coding agent, one section per iteration.\n".write(toFile: layout.learnings, atomically: true, encoding: .utf8)
        try """
            # supervisor-private state and per-run traces are never committed
            .autoharness/
            workspace/traces/
            __pycache__/

            """.write(toFile: layout.gitignore, atomically: true, encoding: .utf8)
        // The config must load as written: a template that does not is a bug to report now.
        do {
            _ = try ExperimentConfig.load(layout.config)
        } catch {
            throw ExperimentError(.io, "the generated \(layout.config) does not load: \(error)")
        }
        try ensurePrivateDirectory(layout)
        let git = Git(root: root, privateIndex: layout.privateDirectory + "/git-index")
        try git.initialize(committing: committed,
                           message: "autoharness: new experiment (\(o.benchmark)\(dataset.isEmpty ? "" : ", " + dataset))")
        let ledger = try Ledger(path: layout.ledger, kinds: .experiment)
        _ = try ledger.append(.experimentCreated, ExperimentCreated(benchmark: o.benchmark, dataset: dataset))
        created = true
        return layout
    }
}
