import Benchmark
import Foundation

/// `inspect`: an inspect_ai task (a task file or a registered `package/name`), agent.py its
/// solver in the runner, the task's own scorers in the scorer; the samples are read once at
/// init into the experiment's private directory, and the runner gets inputs only.
struct InspectKind: BenchmarkKind {
    static let version = "0.3.285"
    static let hint = "run scripts/install-inspect (inspect-ai \(version), pinned, into $AUTOHARNESS_CACHE/inspect-ai-\(version)), or pass --tool PATH/bin/inspect of a venv with inspect-ai \(version)"
    let name = "inspect"
    let shardsOnNodes = true
    var installHint: String { Self.hint }

    /// Not yet run in the held-out VM: the guest would need the install, the frozen samples
    /// and the task file as shares, which no test has exercised.
    func notInVM(_ config: ExperimentConfig) -> String? {
        "benchmark: inspect has not been run in the held-out VM yet (docs/benchmarks.md); set gate.held_out_runtime: host"
    }

    /// `inspect` on PATH, else where scripts/install-inspect puts it.
    var defaultTool: String? {
        if ToolCheck.locate("inspect") != nil { return "inspect" }
        let cache = ProcessInfo.processInfo.environment["AUTOHARNESS_CACHE"] ?? "/var/cache/autoharness"
        return cache + "/inspect-ai-\(Self.version)/bin/inspect"
    }

    struct Settings: BenchmarkSettings {
        /// What `inspect eval` takes, as init resolved it.
        var inspectTask: String?
        /// The Python inspect_ai is installed in.
        var inspectPython: String?
        /// The scorer whose value is the reward.
        var inspectScore: String?
        static var keys: [ConfigKey<Self>] {
            [.text("inspect_task", \.inspectTask, "The inspect_ai task (/abs/task.py@name or package/name) init read the samples of."),
             .text("inspect_python", \.inspectPython, "The Python inspect_ai is installed in (runs the solve phase and the scorer)."),
             .text("inspect_score", \.inspectScore, "The task's scorer whose value is the reward (default: its first).")]
        }
    }

    /// The task `--dataset` names (default: templates/inspect/theory_of_mind.py, whose data
    /// ships inside inspect_ai), with a relative file made absolute.
    static func taskSpec(_ given: String?, templates: String) -> String {
        guard let given else { return templates + "/inspect/theory_of_mind.py@theory_of_mind" }
        let file = given.split(separator: "@", maxSplits: 1).first.map(String.init) ?? given
        guard file.hasSuffix(".py"), !file.hasPrefix("/") else { return given }
        return FileManager.default.currentDirectoryPath + "/" + given
    }

    func initialize(_ o: InitOptions, tool: String, layout: ExperimentLayout) throws -> InitValues {
        guard let python = ToolCheck.interpreter(of: tool) else {
            throw ExperimentError(.usage, "\(tool) does not start with a #! line naming its Python: \(Self.hint)")
        }
        _ = try Self.install(python: python)
        let spec = Self.taskSpec(o.dataset, templates: o.templates)
        let count = try Self.readSamples(python: python, spec: spec, scripts: o.templates + "/inspect", into: layout)
        return InitValues(dataset: "", placeholders: ["inspect_task": spec, "inspect_samples": String(count)])
    }

    /// Runs autoharness_inspect_samples.py once, as the operator who typed `init` (the task
    /// file is the operator's), writing the frozen list into the private directory (0700).
    /// Returns how many samples it holds.
    static func readSamples(python: String, spec: String, scripts: String, into layout: ExperimentLayout) throws -> Int {
        let fm = FileManager.default
        try fm.createDirectory(atPath: layout.privateDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let scratch = layout.privateDirectory + "/inspect-xdg"
        defer { try? fm.removeItem(atPath: scratch) }
        let env = ["PATH": "/usr/bin:/bin", "HOME": scratch, "XDG_DATA_HOME": scratch, "XDG_CACHE_HOME": scratch, "XDG_CONFIG_HOME": scratch,
                   "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"]
        let r: ChildProcess.Finished
        do {
            r = try ChildProcess.run([python, "-I", scripts + "/autoharness_inspect_samples.py", "--task", spec, "--out", layout.inspectSamples],
                                     environment: env, timeout: 600)
        } catch {
            throw ExperimentError(.usage, "inspect: reading \(spec)'s samples", cause: error)
        }
        guard r.succeeded else {
            throw ExperimentError(.usage, "inspect: reading \(spec)'s samples failed (\(r.timedOut ? "timed out after 600 s" : "exit \(r.status)")): \(String(r.output.suffix(1500)))")
        }
        chmod(layout.inspectSamples, 0o600)
        let summary = r.output.split(separator: "\n").last.map(String.init) ?? ""
        guard let data = summary.data(using: .utf8), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let count = object["samples"] as? Int else {
            throw ExperimentError(.usage, "inspect: \(spec): the sample reader printed no count: \(String(r.output.suffix(500)))")
        }
        return count
    }

    func adapter(_ config: ExperimentConfig, root: String, checkTools: Bool) throws -> any BenchmarkAdapter {
        let s = settings(config)
        guard let python = s.inspectPython else {
            throw ExperimentError(.usage, "inspect_python: missing; set it to the Python inspect_ai is installed in (\(Self.hint))")
        }
        guard let spec = s.inspectTask else {
            throw ExperimentError(.usage, "inspect_task: missing; it names the task init read the samples of (/abs/task.py@name or package/name)")
        }
        let (venv, site) = try Self.install(python: python)
        guard let scripts = config.runner.scripts else {
            throw ExperimentError(.usage, "runner.scripts: missing; it names the directory of autoharness_inspect_solve.py and autoharness_inspect_score.py (templates/inspect)")
        }
        let samples = ExperimentLayout(root: root).inspectSamples
        try RunnerBinds.refuse(config.toolBinds, exposing: RunnerBinds.Protected.inspect(venv: venv, taskSpec: spec))
        var adapter: InspectAdapter
        do {
            adapter = try InspectAdapter(environmentDirectory: venv, sitePackages: site, python: python, scriptsDirectory: scripts, taskSpec: spec,
                                         samplesFile: samples, tool: config.toolSettings([python]), only: config.tasks)
        } catch {
            throw ExperimentError(.usage, error.message)
        }
        adapter.scoreName = s.inspectScore
        adapter.agentModel = config.agentModel == "none" ? nil : config.agentModel
        adapter.concurrency = config.maxConcurrency
        adapter.environment = config.agentEnvironment()
        return adapter
    }

    /// The virtual environment `python` belongs to and its site-packages, which must hold
    /// inspect_ai.
    static func install(python: String) throws -> (environment: String, sitePackages: String) {
        try ToolCheck.virtualEnvironment(of: python, setting: "inspect_python", what: "inspect_ai package", hint: hint) {
            FileManager.default.fileExists(atPath: $0 + "/inspect_ai/__init__.py")
        }
    }
}

extension RunnerBinds.Protected {
    /// What of inspect no runner bind may reach: its install (whose packaged datasets the
    /// runner gets hidden) and a task file's directory (its dataset and scorers). A worker
    /// node checks its own paths against the runner's binds too (`NodeTool.inspect`).
    package static func inspect(venv: String, taskSpec spec: String) -> [Self] {
        var protected: [Self] = [
            .init(path: venv, what: "is inspect_ai's install (\(venv)), which autoharness binds into the runner itself with its packaged datasets hidden; a bind of it would show them")]
        let file = spec.split(separator: "@", maxSplits: 1).first.map(String.init) ?? spec
        if file.hasPrefix("/") && file.hasSuffix(".py") {
            protected.append(.init(path: (file as NSString).deletingLastPathComponent, what: "holds the task file \(file), whose dataset and scorers are the scorer's alone"))
        }
        return protected
    }
}
