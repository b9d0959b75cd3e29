import Benchmark
import ExperimentModel
import Foundation
import Ledger
import SupervisorIO

extension ExperimentSupervisor {
    /// Creates an experiment in `directory` (which must not exist or be empty): the config
    /// (common keys + the benchmark's upstream keys and `runner:`), `agent/agent.py` and
    /// `PROGRAM.md` (common part + the benchmark's part) from `templates/`, the workspace,
    /// `.gitignore`, a git repository with a first commit, and the private state directory
    /// with its ledger. The benchmark's tool and data are checked first.
    /// Returns the layout, and whether the tasks' images are to be made now (`buildImages`).
    public static func initialize(directory: String, _ o: InitOptions) throws -> (layout: ExperimentLayout, images: ImagesAtInit.Plan) {
        let fm = FileManager.default
        guard let kind = BenchmarkKinds.named(o.benchmark) else {
            throw ExperimentError(.usage, "--benchmark \(o.benchmark): unknown (one of: \(BenchmarkKinds.names.joined(separator: ", ")))")
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
        let preset = try CodingAgentPreset.make(o.codingAgent, binary: o.codingAgentBinary)
        var tool = o.tool ?? kind.defaultTool ?? ""
        if let name = kind.defaultTool {
            guard let found = ToolCheck.locate(tool) else {
                throw ExperimentError(.usage, "\(tool) not found\(o.tool == nil ? " on PATH" : ""): \(kind.installHint) (or pass --tool PATH, the \(name) to use)")
            }
            // The sandbox's PATH is not the operator's: the config names the tool by path.
            tool = found.hasPrefix("/") ? found : fm.currentDirectoryPath + "/" + found
        }
        if kind.name != TerminalBenchKind().name && (o.registryPath != nil || o.registryURL != nil) {
            throw ExperimentError(.usage, "--registry-path and --registry-url are for --benchmark terminal-bench (Harbor's registry)")
        }
        let values = try kind.initialize(o, tool: tool, layout: layout)
        let dataset = values.dataset
        var placeholders = values.placeholders
        placeholders["benchmark"] = o.benchmark
        placeholders["dataset"] = dataset
        placeholders["tool"] = tool
        // Tasks on their own image: planned now, made once the experiment exists (`buildImages`).
        let imagePlan = try o.images.plan(benchmark: kind.name, tasks: kind.imageTasks(dataset: dataset), dataset: dataset)
        placeholders.merge(kind.imagePlaceholders(built: imagePlan.build)) { _, new in new }
        if imagePlan.build { placeholders["verifier_tools"] = "  verifier_tools: \(ExperimentLayout.defaultVerifierTools)  # tasks on their own image need it (init made their images)\n" }
        placeholders["python"] = ToolCheck.interpreter(of: tool) ?? (tool.split(separator: "/").last?.hasPrefix("python") == true ? tool : "python3")
        placeholders["templates"] = t
        if placeholders["verifier_tools"] == nil { placeholders["verifier_tools"] = "" }
        // The benchmark's own gate keys (the held-out runs' model account), where it has them.
        placeholders["gate_keys"] = (try? String(contentsOfFile: bench + "/gate.yaml", encoding: .utf8)) ?? ""
        placeholders["tool_binds"] = ToolCheck.installRoots(of: tool).map { "\"\($0)\"" }.joined(separator: ", ")
        /// A template with its placeholders filled; one left unfilled is a template bug.
        func text(_ f: String) throws -> String {
            var s = try String(contentsOfFile: f, encoding: .utf8)
            for (name, value) in placeholders { s = s.replacingOccurrences(of: "{{\(name)}}", with: value) }
            return s
        }
        try fm.createDirectory(atPath: layout.agentDirectory, withIntermediateDirectories: true)
        try fm.createDirectory(atPath: layout.workspace, withIntermediateDirectories: true)
        let runner = try text(bench + "/runner.yaml")
        let configText = try text(t + "/experiment_config.yaml")
            .replacingOccurrences(of: "{{coding_agent}}", with: preset.configLines)
            .replacingOccurrences(of: "{{agent_inference}}", with: preset.inference.joined(separator: ", "))
            .replacingOccurrences(of: "{{benchmark_keys}}", with: try text(bench + "/keys.yaml"))
            .replacingOccurrences(of: "{{runner}}", with: runner.isEmpty ? "" : runner + "\n")
        let program = try text(t + "/PROGRAM.md") + "\n" + (try text(bench + "/PROGRAM.md"))
        for (file, content) in [(layout.config, configText), (layout.program, program)] {
            if let left = content.range(of: #"\{\{[a-z0-9_]+\}\}"#, options: .regularExpression) {
                throw ExperimentError(.io, "templates for \(o.benchmark): \(content[left]) is not filled in \(file) (a template names a placeholder \(o.benchmark)'s BenchmarkKind does not give)")
            }
        }
        try configText.write(toFile: layout.config, atomically: true, encoding: .utf8)
        try program.write(toFile: layout.program, atomically: true, encoding: .utf8)
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
            evidence/
            __pycache__/

            """.write(toFile: layout.gitignore, atomically: true, encoding: .utf8)
        // The config must load as written: a template that does not is a bug to report now.
        do {
            _ = try ExperimentConfig.load(layout.config)
        } catch {
            throw ExperimentError(.io, "the generated \(layout.config) does not load", cause: error)
        }
        try layout.ensurePrivateDirectory()
        let git = Git(root: root, privateIndex: layout.privateDirectory + "/git-index")
        try git.initialize(committing: committed,
                           message: "autoharness: new experiment (\(o.benchmark)\(dataset.isEmpty ? "" : ", " + dataset))")
        let ledger = try Ledger(path: layout.ledger, kinds: .experiment)
        _ = try ledger.append(.experimentCreated, ExperimentCreated(benchmark: o.benchmark, dataset: dataset))
        created = true
        return (layout, imagePlan)
    }
}
