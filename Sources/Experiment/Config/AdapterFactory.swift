import Benchmark
import Foundation

extension ExperimentConfig {
    /// Upstream auto-harness keys some adapter reads (validated there).
    static let upstreamKeys = ["n_concurrent", "agent_timeout_multiplier", "user_model", "seed", "num_trials", "mode",
                               "data_path", "db_path", "user_sim_model", "max_steps", "tau2_data_dir", "bird_dir"]

    /// The tool each external benchmark runs, by default (found on PATH).
    static let defaultTool = ["terminal-bench": "harbor", "tau-bench": "tau2", "bird-interact": "python3"]
    static let defaultDataset = ["terminal-bench": "terminal-bench@2.0"]
    static let installHint = [
        "terminal-bench": "install Harbor with `uv tool install harbor` (or `pip install harbor`), see https://github.com/laude-institute/harbor",
        "tau-bench": "install tau2-bench: `git clone https://github.com/sierra-research/tau2-bench && cd tau2-bench && pip install -e .`",
        "bird-interact": "clone BIRD-Interact (https://github.com/bird-bench/BIRD-Interact) and set bird_dir to the checkout",
        "command": "install python3 or set runner.command",
    ]

    /// The benchmark's adapter, with every tool, file and key it needs checked now (unless
    /// `checkTools` is false: reading the record needs no tool): a missing tool or key is one
    /// message with the install hint, before any sandbox starts.
    public func makeAdapter(root: String, checkTools: Bool = true) throws -> any BenchmarkAdapter {
        func path(_ p: String) -> String { p.hasPrefix("/") ? p : root + "/" + p }
        switch benchmark {
        case "local":
            var local = LocalAdapter(benchmark: try LocalBenchmark(directory: path(dataset ?? "")))
            local.taskPolicy = taskPolicy
            local.verifierPolicy = verifierPolicy
            local.defaultAgentTimeout = perTaskTimeout
            return local
        case "command":
            guard let argv = runner.command, !argv.isEmpty else {
                throw ExperimentError(.usage, "benchmark: command needs runner.command, the argv that runs {task_ids_file} and writes {output} (see README, 'benchmark: command')")
            }
            guard argv.contains(where: { $0.contains("{output}") }) else {
                throw ExperimentError(.usage, "runner.command must name {output}, the file where it writes {\"task id\": reward}")
            }
            if checkTools {
                _ = try ToolCheck.tool(argv, default: argv[0], hint: "runner.command's first word must be an executable on PATH or a path (bind its directory with runner.binds)")
                try ToolCheck.environment(runner.envPass, for: "the command")
            }
            return CommandAdapter(taskIDs: try taskList(root: root), tool: toolSettings(argv))
        default:
            throw ExperimentError(.usage, "benchmark: \(benchmark) is not available in this build")
        }
    }

    func toolSettings(_ command: [String]) -> ToolSettings {
        var t = ToolSettings(command: command)
        t.binds = runner.binds
        t.envPass = runner.envPass
        t.networkAllow = runner.networkAllow
        t.timeout = runner.timeout
        t.runnerPolicy = runner.policy
        t.scorerPolicy = runner.scorerPolicy
        return t
    }

    /// `tasks:` or `tasks_file:` (one id per line, or a JSON list of ids).
    func taskList(root: String) throws -> [String] {
        var ids = tasks ?? []
        if let f = tasksFile {
            let p = f.hasPrefix("/") ? f : root + "/" + f
            guard let text = try? String(contentsOfFile: p, encoding: .utf8) else {
                throw ExperimentError(.usage, "tasks_file \(p): cannot read it")
            }
            if let list = try? JSONDecoder().decode([String].self, from: Data(text.utf8)) {
                ids += list
            } else {
                for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                    let id = line.trimmingCharacters(in: .whitespaces)
                    if id.isEmpty || id.hasPrefix("#") { continue }
                    guard BenchmarkTask.isValidID(id) else { throw ExperimentError(.usage, "\(p):\(n + 1): '\(id)' is not a valid task id") }
                    ids.append(id)
                }
            }
        }
        for id in ids where !BenchmarkTask.isValidID(id) { throw ExperimentError(.usage, "task id '\(id)' is not valid (letters, digits, '.', '_', '-')") }
        guard !ids.isEmpty else { throw ExperimentError(.usage, "benchmark: \(benchmark) needs its task ids: `tasks: [...]` or `tasks_file: FILE`") }
        let unique = Array(Set(ids)).sorted()
        guard unique.count == ids.count else { throw ExperimentError(.usage, "the task list names an id twice") }
        return unique
    }
}

/// Checks that a benchmark's tool and keys are there, with the install hint when not.
enum ToolCheck {
    static func environment(_ names: [String], for what: String) throws {
        let missing = names.filter { ProcessInfo.processInfo.environment[$0]?.isEmpty ?? true }
        guard missing.isEmpty else {
            throw ExperimentError(.usage, "\(missing.joined(separator: ", ")) \(missing.count == 1 ? "is" : "are") not set: \(what) needs \(missing.count == 1 ? "it" : "them") (runner.env_pass lists the variables passed into its sandbox); export \(missing[0])=... before running autoharness")
        }
    }

    /// Finds `name` on the supervisor's PATH (or takes a path), resolved; nil if absent.
    static func locate(_ name: String) -> String? {
        if name.contains("/") { return FileManager.default.isExecutableFile(atPath: name) ? name : nil }
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":") {
            let p = "\(dir)/\(name)"
            if FileManager.default.isExecutableFile(atPath: p) { return p }
        }
        return nil
    }

    /// Where a tool is installed, to bind read-only: for `X/bin/tool` inside a Python
    /// virtual environment (X/pyvenv.cfg), X; otherwise the executable's directory.
    static func installRoot(of tool: String) -> String? {
        guard let found = locate(tool) else { return nil }
        let real = (try? FileManager.default.destinationOfSymbolicLink(atPath: found)).map {
            $0.hasPrefix("/") ? $0 : (found as NSString).deletingLastPathComponent + "/" + $0
        } ?? found
        let dir = (real as NSString).deletingLastPathComponent
        let parent = (dir as NSString).deletingLastPathComponent
        if FileManager.default.fileExists(atPath: parent + "/pyvenv.cfg") { return parent }
        return dir
    }

    static func tool(_ argv: [String]?, default name: String, hint: String) throws -> [String] {
        let argv = argv ?? [name]
        guard let first = argv.first, locate(first) != nil else {
            throw ExperimentError(.usage, "\(argv.first ?? name) not found (runner.command: \(argv.joined(separator: " "))): \(hint)")
        }
        return argv
    }
}
