import Benchmark
import Foundation
import Ledger

extension ExperimentSupervisor {
    /// Creates an experiment in `directory` (which must not exist or be empty): the config,
    /// `agent/agent.py` and `PROGRAM.md` from `templates`, the workspace, `.gitignore`, a git
    /// repository with a first commit, and the private state directory with its ledger.
    public static func initialize(directory: String, benchmark: String, dataset: String, templates: String) throws -> ExperimentLayout {
        guard benchmark == "local" else {
            throw ExperimentError(.usage, "--benchmark \(benchmark): not supported yet (supported: local)")
        }
        let fm = FileManager.default
        var datasetPath = dataset
        if !datasetPath.hasPrefix("/") { datasetPath = fm.currentDirectoryPath + "/" + datasetPath }
        do {
            _ = try LocalBenchmark(directory: datasetPath)  // fail now, not at prepare
        } catch {
            throw ExperimentError(.usage, "--dataset \(dataset): \(error)")
        }
        var root = directory.hasPrefix("/") ? directory : fm.currentDirectoryPath + "/" + directory
        while root.count > 1 && root.hasSuffix("/") { root.removeLast() }
        if let entries = try? fm.contentsOfDirectory(atPath: root), !entries.isEmpty {
            throw ExperimentError(.usage, "\(root) already exists and is not empty; choose a new directory")
        }
        let layout = ExperimentLayout(root: root)
        for t in ["experiment_config.yaml", "PROGRAM.md", "local/agent.py"] where !fm.fileExists(atPath: templates + "/" + t) {
            throw ExperimentError(.io, "template \(templates)/\(t) is missing (looked in \(templates))")
        }
        try fm.createDirectory(atPath: layout.agentDirectory, withIntermediateDirectories: true)
        try fm.createDirectory(atPath: layout.workspace, withIntermediateDirectories: true)
        let configText = try String(contentsOfFile: templates + "/experiment_config.yaml", encoding: .utf8)
            .replacingOccurrences(of: "{{benchmark}}", with: benchmark)
            .replacingOccurrences(of: "{{dataset}}", with: datasetPath)
        try configText.write(toFile: layout.config, atomically: true, encoding: .utf8)
        try fm.copyItem(atPath: templates + "/PROGRAM.md", toPath: layout.program)
        try fm.copyItem(atPath: templates + "/local/agent.py", toPath: layout.agentFile)
        try "# Learnings\n\nNotes from the coding agent, one section per iteration.\n".write(toFile: layout.learnings, atomically: true, encoding: .utf8)
        try """
            # supervisor-private state and per-run traces are never committed
            .autoharness/
            workspace/traces/
            __pycache__/

            """.write(toFile: layout.gitignore, atomically: true, encoding: .utf8)
        try ensurePrivateDirectory(layout)
        let git = Git(root: root, privateIndex: layout.privateDirectory + "/git-index")
        try git.initialize(committing: [".gitignore", "experiment_config.yaml", "PROGRAM.md", "agent/agent.py", "workspace/learnings.md"],
                           message: "autoharness: new experiment (\(benchmark), \(datasetPath))")
        let ledger = try Ledger(path: layout.ledger)
        _ = try ledger.append(.experimentCreated, ExperimentCreated(benchmark: benchmark, dataset: datasetPath))
        return layout
    }
}
