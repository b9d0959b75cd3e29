import Benchmark
import Foundation

/// `bfcl`: the Berkeley Function Calling Leaderboard's single- and multi-turn categories, from the
/// installed `bfcl-eval` package (scripts/install-bfcl); agent.py answers in the runner,
/// BFCL's own checker grades in the scorer, where the package (and with it every possible
/// answer) is bound and agent.py is not.
struct BfclKind: BenchmarkKind {
    static let version = "2026.3.23"
    static let hint = "run scripts/install-bfcl (bfcl-eval \(version), pinned, into $AUTOHARNESS_CACHE/bfcl-eval-\(version)), or pip install bfcl-eval==\(version) and pass --tool PATH/bin/bfcl"
    let name = "bfcl"
    let shardsOnNodes = true
    var installHint: String { Self.hint }
    func notInVM(_ config: ExperimentConfig) -> String? { nil }

    /// `bfcl` on PATH, else where scripts/install-bfcl puts it.
    var defaultTool: String? {
        if ToolCheck.locate("bfcl") != nil { return "bfcl" }
        let cache = ProcessInfo.processInfo.environment["AUTOHARNESS_CACHE"] ?? "/var/cache/autoharness"
        return cache + "/bfcl-eval-\(Self.version)/bin/bfcl"
    }

    struct Settings: BenchmarkSettings {
        /// BFCL's categories to run (`BfclAdapter.categoryNames`).
        var categories: [String]?
        /// The first N tasks of each category, in the file's order.
        var tasksPerCategory: Int?
        /// The Python bfcl-eval is installed in: it runs the checker, in the scorer only.
        var bfclPython: String?
        static var keys: [ConfigKey<Self>] {
            [.choices("categories", \.categories, BfclAdapter.categoryNames, "BFCL's categories to run."),
             .integer("tasks_per_category", \.tasksPerCategory, 1...100_000, "The first N tasks of each category, in the file's order."),
             .text("bfcl_python", \.bfclPython, "The Python bfcl-eval is installed in (it runs the checker, in the scorer only).")]
        }
    }

    func initialize(_ o: InitOptions, tool: String, layout: ExperimentLayout) throws -> InitValues {
        guard let python = ToolCheck.interpreter(of: tool) else {
            throw ExperimentError(.usage, "\(tool) does not start with a #! line naming its Python: \(Self.hint)")
        }
        _ = try Self.install(python: python)
        return InitValues(dataset: "")
    }

    func adapter(_ config: ExperimentConfig, root: String, checkTools: Bool) throws -> any BenchmarkAdapter {
        let s = settings(config)
        guard let python = s.bfclPython else {
            throw ExperimentError(.usage, "bfcl_python: missing; set it to the Python bfcl-eval is installed in (\(Self.hint))")
        }
        let argv = config.runner.command ?? ["python3"]
        if checkTools {
            _ = try ToolCheck.tool(argv, default: "python3", hint: "runner.command runs agent.py: a Python on PATH or a path (bind its install with runner.binds)")
            try ToolCheck.environment(config.runner.envPass, for: "agent.py (its model API)")
        }
        let (venv, package) = try Self.install(python: python)
        guard let scripts = config.runner.scripts else {
            throw ExperimentError(.usage, "runner.scripts: missing; it names the directory of autoharness_bfcl_run.py and autoharness_bfcl_score.py (templates/bfcl)")
        }
        // The runner must never see the package: it holds every task's possible answers.
        try RunnerBinds.refuse(config.toolBinds, exposing: [.bfclInstall(venv)])
        var adapter: BfclAdapter
        do {
            adapter = try BfclAdapter(packageDirectory: package, environmentDirectory: venv, checkerPython: python, scriptsDirectory: scripts,
                                      tool: config.toolSettings(argv), categories: s.categories ?? BfclAdapter.defaultCategories,
                                      perCategory: s.tasksPerCategory, only: config.tasks)
        } catch {
            throw ExperimentError(.usage, error.message)
        }
        adapter.agentModel = config.agentModel == "none" ? nil : config.agentModel
        adapter.concurrency = config.maxConcurrency
        adapter.environment = config.agentEnvironment()
        return adapter
    }

    /// The virtual environment `python` belongs to and its `bfcl_eval` package directory.
    static func install(python: String) throws -> (environment: String, package: String) {
        let fm = FileManager.default
        let (venv, site) = try ToolCheck.virtualEnvironment(of: python, setting: "bfcl_python", what: "bfcl_eval package with its checker and possible answers",
                                                            hint: hint) { site in
            fm.fileExists(atPath: site + "/bfcl_eval/eval_checker/eval_runner.py") && fm.fileExists(atPath: site + "/bfcl_eval/data/possible_answer")
        }
        return (venv, site + "/bfcl_eval")
    }
}

extension RunnerBinds.Protected {
    /// bfcl-eval's virtual environment: its data/possible_answer/ holds every task's answer. A
    /// worker node checks its own install against the runner's binds too (`NodeTool.bfcl`).
    package static func bfclInstall(_ venv: String) -> Self {
        .init(path: venv, what: "contains bfcl-eval's install (\(venv)), whose data/possible_answer/ holds every task's answer; agent.py's runner needs none of it")
    }
}
