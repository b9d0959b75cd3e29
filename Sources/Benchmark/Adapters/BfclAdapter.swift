// `benchmark: bfcl` — the Berkeley Function Calling Leaderboard's single- and multi-turn
// categories, from the installed `bfcl-eval` package (its task files, its possible answers, its
// own checker, its multi-turn back-ends).
//
// Each task is a conversation and a list of function documents; the answer is the function
// calls the model makes (or, for the irrelevance categories, that it makes none). The
// possible answers sit beside the task files in the package (data/possible_answer/), so two
// sandboxes, as for tau2:
//   1. runner (`benchmark-runner`, agent.py mounted, nothing of the package): the supervisor
//      writes the requested tasks, each reduced to its id, conversation and function
//      documents (`runnerFields`), to /work/out/tasks.jsonl; autoharness_bfcl_run.py asks
//      agent.py for each and writes /work/out/answers.json (the calls, or agent.py's text).
//   2. scorer (`benchmark-scorer`, no agent.py, a process that never imports it, the package
//      bound read-only): autoharness_bfcl_score.py reads the answers read-only at /work/run
//      and grades each with bfcl-eval's own entry checks (eval_runner's AST and relevance
//      checks, which call ast_checker), against the tasks and possible answers it reads from
//      the package itself (never from the runner's copy), and writes `{task id: reward}` and
//      each train task's verdict (BFCL's error type and messages).
// A multi-turn task's calls run in the runner against bfcl-eval's back-end classes (their code
// bound alone) so agent.py sees their results, and again in the scorer, where the checker runs
// them and the possible answer's on fresh back-ends.
// A task agent.py raised on, or gave no answer for, scores 0 (missing_result): an
// irrelevance task is passed only by an answer that makes no call, never by a crash.

import FoundationEssentials
import Glibc
import Sandbox
import SandboxPolicy
import SupervisorIO

public struct BfclAdapter: BenchmarkAdapter {
    /// The installed `bfcl_eval` package directory (holds data/ and eval_checker/).
    public let packageDirectory: String
    /// The virtual environment bfcl-eval is installed in (bound read-only in the scorer only).
    public let environmentDirectory: String
    /// Its Python, which runs the scorer.
    public let checkerPython: String
    /// Where autoharness_bfcl_run.py and autoharness_bfcl_score.py are (bound read-only).
    public let scriptsDirectory: String
    public let tool: ToolSettings
    /// The categories run, each a data/BFCL_v4_<category>.json of the package.
    public let categories: [String]
    /// Every task id of those categories (or of `tasks` when the config names some).
    public let taskIDs: [String]
    public var agentModel: String?
    public var concurrency = 4
    public var environment: [String] = []
    /// Each task's line of its category's file, reduced to `runnerFields`.
    let runnerLines: [String: [UInt8]]

    public var name: String { "bfcl" }
    public var hostPaths: [String] { [environmentDirectory, scriptsDirectory] }

    /// The categories whose answers BFCL's AST checker grades, the three whose answer is
    /// whether a call was made at all (relevance: one must be; irrelevance: none may be), and
    /// the multi-turn ones, whose calls are executed against BFCL's stateful back-ends (a file
    /// system, a trading bot, ...) and compared by state and output with the possible answer's.
    /// Memory, web-search, format-sensitivity and the Java/JavaScript categories are not run.
    public static let astCategories = ["simple_python", "multiple", "parallel", "parallel_multiple",
                                       "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple"]
    public static let relevanceCategories = ["irrelevance", "live_irrelevance", "live_relevance"]
    public static let multiTurnCategories = ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]
    public static var categoryNames: [String] { astCategories + relevanceCategories + multiTurnCategories }
    /// Each multi-turn back-end class and its function documents' file in data/multi_turn_func_doc/
    /// (bfcl-eval 2026.3.23 constants/executable_backend_config.py, MULTI_TURN_FUNC_DOC_FILE_MAPPING).
    static let backendDocs = ["GorillaFileSystem": "gorilla_file_system.json", "MathAPI": "math_api.json", "MessageAPI": "message_api.json",
                              "TwitterAPI": "posting_api.json", "TicketAPI": "ticket_api.json", "TradingBot": "trading_bot.json",
                              "TravelAPI": "travel_booking.json", "VehicleControlAPI": "vehicle_control.json"]
    /// What `init` writes: BFCL's non-live single-turn categories.
    public static let defaultCategories = ["simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance"]
    /// The fields of a task the runner gets: what BFCL's own inference uses. Not a multi-turn
    /// task's `path` (the functions its possible answer calls, in order) or
    /// `excluded_function`.
    static let runnerFields: Set<String> = ["id", "question", "function", "initial_config", "involved_classes", "missed_function"]
    /// Largest category file read (live_multiple is 3.9 MB in 2026.3.23).
    static let categoryFileLimit = 64 << 20

    /// Reads the categories' task files. `perCategory` keeps the first N tasks of each (in the
    /// file's order); `only`, when given, keeps those ids (each must be in a category read).
    public init(packageDirectory: String, environmentDirectory: String, checkerPython: String, scriptsDirectory: String,
                tool: ToolSettings, categories: [String], perCategory: Int?, only: [String]?) throws(BenchmarkError) {
        self.packageDirectory = packageDirectory
        self.environmentDirectory = environmentDirectory
        self.checkerPython = checkerPython
        self.scriptsDirectory = scriptsDirectory
        self.tool = tool
        self.categories = categories
        let dataDir = packageDirectory + "/data"
        let fd = FileSystem.openDirectory(dataDir)
        guard fd >= 0 else {
            throw BenchmarkError(.invalidBenchmark, "bfcl: \(dataDir): \(FileSystem.errorText()) (install bfcl-eval with scripts/install-bfcl)")
        }
        defer { close(fd) }
        var lines: [String: [UInt8]] = [:]
        var ids: [String] = []
        var docs: [String: [JSONValue]] = [:]
        for category in categories {
            guard Self.categoryNames.contains(category) else {
                throw BenchmarkError(.configuration, "bfcl: category \(category) is not one autoharness runs (\(Self.categoryNames.joined(separator: ", ")))")
            }
            let file = "BFCL_v4_\(category).json"
            let bytes: [UInt8]
            switch FileSystem.readSmallFile(at: fd, file, limit: Self.categoryFileLimit) {
            case .success(let b): bytes = b
            case .failure(let problem): throw BenchmarkError(.invalidBenchmark, "\(dataDir)/\(file): \(problem.explanation("a BFCL task file"))")
            }
            var kept = 0
            for (n, line) in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).enumerated() {
                if let limit = perCategory, kept >= limit { break }
                guard case .object(var task)? = JSONValue.parse(Array(line)), let id = task["id"]?.string, task["question"]?.array != nil else {
                    throw BenchmarkError(.invalidBenchmark, "\(dataDir)/\(file):\(n + 1): not a BFCL task (an object with id and question)")
                }
                if Self.multiTurnCategories.contains(category) {
                    try Self.addFunctions(to: &task, docs: &docs, dataDir: dataDir, at: "\(file):\(n + 1)")
                }
                guard task["function"]?.array != nil else {
                    throw BenchmarkError(.invalidBenchmark, "\(dataDir)/\(file):\(n + 1): task \(id) has no function list")
                }
                guard TraceName.isAcceptableID(id), Self.category(of: id) == category, lines[id] == nil else {
                    throw BenchmarkError(.invalidBenchmark, "\(dataDir)/\(file):\(n + 1): task id \(id.debugDescription) is unusable, repeated or not of \(category)")
                }
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys]
                guard let reduced = try? encoder.encode(JSONValue.object(task.filter { Self.runnerFields.contains($0.key) })) else {
                    throw BenchmarkError(.invalidBenchmark, "\(dataDir)/\(file):\(n + 1): task \(id) does not encode")
                }
                lines[id] = Array(reduced)
                ids.append(id)
                kept += 1
            }
        }
        if let only {
            if let unknown = only.first(where: { lines[$0] == nil }) {
                throw BenchmarkError(.configuration, "bfcl: task \(unknown) is not among the tasks of \(categories.joined(separator: ", ")) read from \(dataDir)")
            }
            ids = only
        }
        guard !ids.isEmpty else { throw BenchmarkError(.configuration, "bfcl: no tasks in \(categories.joined(separator: ", "))") }
        taskIDs = ids.sorted()
        let kept = Set(ids)
        runnerLines = lines.filter { kept.contains($0.key) }
    }

    /// A multi-turn task's function documents, as bfcl-eval gives them to a model
    /// (utils.py, populate_test_cases_with_predefined_functions): every function of its
    /// involved classes, those of `missed_function` held back and added at the turn it names.
    static func addFunctions(to task: inout [String: JSONValue], docs: inout [String: [JSONValue]], dataDir: String, at place: String) throws(BenchmarkError) {
        var functions: [JSONValue] = []
        for case .string(let backend) in task["involved_classes"]?.array ?? [] {
            guard let file = backendDocs[backend] else {
                throw BenchmarkError(.invalidBenchmark, "\(dataDir)/\(place): back-end \(backend) is not one autoharness knows the functions of")
            }
            if docs[backend] == nil {
                let path = dataDir + "/multi_turn_func_doc/" + file
                switch InputFile.read(path, cap: categoryFileLimit) {
                case .success(let bytes):
                    docs[backend] = try bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: true).map { line throws(BenchmarkError) in
                        guard let doc = JSONValue.parse(Array(line)), doc["name"]?.string != nil else {
                            throw BenchmarkError(.invalidBenchmark, "\(path): a line is not a function document")
                        }
                        return doc
                    }
                case .failure(let problem): throw BenchmarkError(.invalidBenchmark, "\(path): \(problem.explanation("a BFCL function document file"))")
                }
            }
            functions += docs[backend] ?? []
        }
        if case .object(let missed)? = task["missed_function"] {
            var held: [String: JSONValue] = [:]
            for (turn, names) in missed {
                let wanted = Set((names.array ?? []).compactMap(\.string))
                held[turn] = .array(functions.filter { wanted.contains($0["name"]?.string ?? "") })
                functions.removeAll { wanted.contains($0["name"]?.string ?? "") }
            }
            task["missed_function"] = .object(held)
        }
        task["function"] = .array(functions)
    }

    /// A task's category, from its id: `simple_python_12` → simple_python,
    /// `live_multiple_3-1-0` → live_multiple (BFCL's ids are the category, `_`, an index).
    public static func category(of id: String) -> String? {
        guard let cut = id.lastIndex(of: "_") else { return nil }
        let index = id[id.index(after: cut)...]
        guard !index.isEmpty, index.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == "-") }) else { return nil }
        return String(id[..<cut])
    }

    public func run(_ ids: [String], _ context: AdapterRunContext) throws(BenchmarkError) -> [TaskOutcome] {
        guard !ids.isEmpty else { return [] }
        let run = try ToolRun(settings: tool, context: context, ids: ids)
        defer { run.finish() }
        try run.writeTaskIDs(ids)
        let scripts = MountSpec(kind: .readOnly(source: scriptsDirectory), destination: scriptsDirectory)

        // 1. agent.py answers the tasks, from a file holding only this run's tasks, no answers.
        //    The driver ends agent.py's processes before it writes the answers, and only from a
        //    PID namespace of the sandbox's own: neither the supervisor's (passed) nor the host's first.
        var runner = ToolInvocation(
            policy: tool.runnerPolicy,
            argv: tool.command + [scriptsDirectory + "/autoharness_bfcl_run.py", "--tasks", "/work/out/tasks.jsonl",
                                  "--max-concurrency", String(max(1, min(concurrency, ids.count))), "--out", "/work/out/answers.json",
                                  "--outer-pid-namespace", String(ProcessIdentity.ownPidNamespace)],
            withAgent: true, label: "bfcl")
        runner.environment = environment
        runner.extraMounts = [scripts]
        if ids.contains(where: { Self.category(of: $0).map(Self.multiTurnCategories.contains) == true }) {
            // The back-ends agent.py's calls run against: bfcl-eval's func_source_code (and
            // mpmath, which its MathAPI imports), each bound alone at its path in the
            // install, so nothing else of the package (data/, the possible answers) is there.
            let site = String(packageDirectory[..<(packageDirectory.lastIndex(of: "/") ?? packageDirectory.endIndex)])
            for dir in [packageDirectory + "/eval_checker/multi_turn_eval/func_source_code", site + "/mpmath"] {
                runner.extraMounts.append(MountSpec(kind: .readOnly(source: dir), destination: dir))
            }
            runner.environment.append("PYTHONPATH=" + site)
        }
        let lines = ids.compactMap { runnerLines[$0] }
        guard lines.count == ids.count else {
            throw BenchmarkError(.configuration, "bfcl: asked for tasks this experiment does not have: \(ids.filter { runnerLines[$0] == nil }.prefix(3).joined(separator: ", "))")
        }
        runner.prepareOutput = { out, owner throws(BenchmarkError) in
            let bytes = Array(lines.joined(separator: [UInt8(ascii: "\n")])) + [UInt8(ascii: "\n")]
            if let e = FileSystem.writeFile(at: out, "tasks.jsonl", bytes, mode: 0o644, owner: owner) {
                throw BenchmarkError(.io, "bfcl: tasks.jsonl: \(FileSystem.errorText(e))")
            }
        }
        if context.oracle {
            // The possible answers, played back by the runner in place of agent.py (mounted as
            // in every runner, never imported): checks that the scorer and the package agree.
            // An operator's train run only: the broker refuses --oracle.
            runner.argv += ["--oracle", packageDirectory + "/data/possible_answer"]
            runner.extraMounts.append(MountSpec(kind: .readOnly(source: packageDirectory + "/data/possible_answer"),
                                                destination: packageDirectory + "/data/possible_answer"))
        }
        context.log("bfcl: \(ids.count) task(s) of \(Set(ids.compactMap(Self.category)).sorted().joined(separator: ", "))")
        let runExit = run.launch(runner, total: ids.count)
        run.reportFailure("bfcl", runExit)

        // 2. BFCL's checker, without agent.py, against the package's own tasks and answers
        var scorer = ToolInvocation(
            policy: tool.scorerPolicy,
            argv: [checkerPython, "-I", scriptsDirectory + "/autoharness_bfcl_score.py", "--package", packageDirectory,
                   "--task-ids-file", "/work/in/task_ids.txt", "--answers", "/work/run/answers.json",
                   "--out", "/work/out/rewards.json"] + (context.heldOut ? [] : ["--traces", "/work/out/traces"]),
            withAgent: false, label: "bfcl checker")
        // bfcl-eval makes its result and lock directories under BFCL_PROJECT_ROOT when it is
        // imported, and its model registry builds an OpenAI client that needs a key to exist
        // (it is never used: grading calls no model).
        scorer.environment = ["BFCL_PROJECT_ROOT=/tmp/bfcl", "OPENAI_API_KEY=unused-by-the-checker"]
        scorer.extraMounts = [scripts, MountSpec(kind: .readOnly(source: environmentDirectory), destination: environmentDirectory)]
        scorer.runDirectory = run.scratch.path + "/app"
        scorer.outputName = "score"
        // Train runs: BFCL's verdict (its error type and messages) is each failing task's record.
        return run.score(ids, with: scorer, after: runExit, nullDetail: "no answer from agent.py (bfcl run \(runExit.summary))",
                         evidence: ("verdict.json", FailureParsers.bfcl))
    }
}
