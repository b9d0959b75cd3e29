// A benchmark run by its own tool, as a worker node rebuilds its adapter for one shard of a
// run's ids (`executor: ray`). It carries the operator's settings for the tool and nothing of
// the benchmark's task list: the shard's ids travel beside it in the request, and a train
// request is signed but not sealed, so it must never name a held-out id. The tool's install,
// its binds and the variables `env_pass` names (keys) are the node's own, at the same paths and
// names as on the supervisor's host: none of them is in the request. What of that install
// decides a reward (the task files, the possible answers, the checker, autoharness's scripts)
// is named by `digestedFiles`: a node whose copies differ from the supervisor's runs nothing.

import Glibc
import SupervisorIO

/// An adapter whose runs a worker node can run in shards (`NodeTool`).
public protocol RunsInShards: BenchmarkAdapter {
    /// Throws when what a node must match cannot be listed here (a part of the install missing).
    var nodeTool: NodeTool { get throws(BenchmarkError) }
    /// What task `id` needs on a node that only the supervisor holds (inspect: the sample's
    /// frozen line, target and all), sent in its request; nil: nothing.
    func nodeData(_ id: String) -> [UInt8]?
}

extension RunsInShards {
    public func nodeData(_ id: String) -> [UInt8]? { nil }
}

/// What a node needs to run a shard of a tool benchmark's run.
public enum NodeTool: Codable, Sendable, Equatable {
    /// `benchmark: command`: the runner's settings, the scorer's argv and its binds.
    case command(tool: ToolSettings, scorer: [String]?, scorerBinds: [String])
    /// `benchmark: bfcl`: bfcl-eval's install and the run's settings; the node reads the
    /// shard's tasks from its own copy of the package.
    case bfcl(BfclNode)
    /// `benchmark: tau-bench`: tau2's data directory and autoharness's scripts (the node's own,
    /// at the supervisor's paths) and the run's settings; the node reads the shard's tasks from
    /// its own copy of the data.
    case tau2(Tau2Node)
    /// `benchmark: inspect`: inspect's install, the task and the run's settings; each
    /// sample's frozen line travels in its own request (`nodeData`), so a held-out one is
    /// sealed to its node with the rest.
    case inspect(InspectNode)
    /// `benchmark: bird-interact`: the ADK, the data file and autoharness's scripts (the
    /// node's own, at the supervisor's paths), the node's PostgreSQL at the same socket
    /// directory, and the supervisor's fingerprints of the template databases.
    case bird(BirdNode)

    /// The adapter for `ids`, a shard of the supervisor's run; `data`: what the request
    /// carried for each id (`RunsInShards.nodeData`).
    public func adapter(ids: [String], data: [String: [UInt8]] = [:]) throws(BenchmarkError) -> any BenchmarkAdapter {
        switch self {
        case .command(let tool, let scorer, let scorerBinds):
            var a = CommandAdapter(taskIDs: ids, tool: tool)
            a.scorer = scorer
            a.scorerBinds = scorerBinds
            return a
        case .bfcl(let b):
            // Only the categories of the shard's ids are read; an id of none of the run's
            // categories, or not in the node's copy, is refused by the adapter.
            let wanted = Set(ids.compactMap(BfclAdapter.category))
            var a = try BfclAdapter(packageDirectory: b.packageDirectory, environmentDirectory: b.environmentDirectory, checkerPython: b.checkerPython,
                                    scriptsDirectory: b.scriptsDirectory, tool: b.tool, categories: b.categories.filter(wanted.contains),
                                    perCategory: nil, only: ids)
            a.agentModel = b.agentModel
            a.concurrency = b.concurrency
            a.environment = b.environment
            return a
        case .tau2(let t):
            var a = try Tau2Adapter(domain: t.domain, dataDirectory: t.dataDirectory, scriptsDirectory: t.scriptsDirectory, tool: t.tool, layout: t.layout)
            let known = Set(a.taskIDs)
            if let missing = ids.first(where: { !known.contains($0) }) {
                throw BenchmarkError(.invalidBenchmark, "tau2 domain \(t.domain): no task \(missing.debugDescription) in \(t.dataDirectory)")
            }
            a.agentModel = t.agentModel
            a.userModel = t.userModel
            a.seed = t.seed
            a.retrievalConfig = t.retrievalConfig
            a.concurrency = t.concurrency
            a.environment = t.environment
            return a
        case .inspect(let n):
            return try n.adapter(ids: ids, data: data)
        case .bird(let b):
            return try b.adapter(ids: ids)
        }
    }

    /// The host paths the tool's settings name, which a node must have at the same paths: its
    /// binds, the scorer's, the executables named by path, the gate's CA file, the shell-call
    /// shim, bfcl-eval's install and autoharness's scripts for it.
    public var requiredPaths: [String] {
        var paths = settings.nodePaths
        switch self {
        case .command(_, let scorer, let scorerBinds):
            paths += scorerBinds
            if let first = scorer?.first, first.contains("/") { paths.append(first) }
        case .bfcl(let b):
            paths += [b.environmentDirectory, b.packageDirectory, b.checkerPython, b.scriptsDirectory]
        case .tau2(let t):
            paths += [t.dataDirectory, t.scriptsDirectory]
        case .inspect(let n):
            paths += [n.environmentDirectory, n.python, n.scriptsDirectory] + (n.taskDirectory.map { [$0] } ?? [])
        case .bird(let b):
            paths += [b.adkDirectory, b.dataPath, b.scriptsDirectory, b.postgresSocketDirectory]
        }
        return paths
    }

    /// The files whose contents must be the supervisor's on a node (`WorkRequest.toolSHA256`):
    /// for a command, every word of its runner's and scorer's argv that is an absolute path to
    /// a regular file (the executables, the scripts they run); for BFCL the run's category
    /// files, their possible answers, the multi-turn back-ends' function documents, every `.py`
    /// of bfcl-eval (its checker, the handlers that decode answers, its constants) and
    /// autoharness's two scripts. Not the interpreters BFCL runs on, nor what the binds hold
    /// beyond these: a node with another Python or other bound data runs them.
    public var digestedFiles: [String] {
        switch self {
        case .command(let tool, let scorer, _):
            return (tool.command + (scorer ?? [])).filter { word in
                var st = stat()
                return word.hasPrefix("/") && stat(word, &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG
            }
        case .bfcl(let b):
            return b.digestedFiles
        case .tau2(let t):
            return t.digestedFiles
        case .inspect(let n):
            return n.digestedFiles
        case .bird(let b):
            return b.digestedFiles
        }
    }

    /// What a node binds into the tool's sandboxes from its own paths, by the setting that
    /// names it: the runner's binds, the scorer's, the shell-call shim.
    public var nodeBinds: [(setting: String, path: String)] {
        var binds = settings.nodeBinds
        if case .command(_, _, let scorerBinds) = self { binds += scorerBinds.map { ("runner.scorer_binds", $0) } }
        return binds
    }

    /// The tool's settings: its policies, time limits and binds.
    public var settings: ToolSettings {
        switch self {
        case .command(let tool, _, _): tool
        case .bfcl(let b): b.tool
        case .tau2(let t): t.tool
        case .inspect(let n): n.tool
        case .bird(let b): b.tool
        }
    }
}

/// BFCL's settings as a node rebuilds its adapter: the install's paths (the node's own, at the
/// supervisor's paths), the run's categories, and what the runner is given.
public struct BfclNode: Codable, Sendable, Equatable {
    public var packageDirectory: String
    public var environmentDirectory: String
    public var checkerPython: String
    public var scriptsDirectory: String
    public var tool: ToolSettings
    public var categories: [String]
    public var agentModel: String?
    public var concurrency: Int
    public var environment: [String]
    /// The files of the install a reward depends on (listed by the supervisor from its own copy).
    public var digestedFiles: [String]
    /// `environmentDirectory` with its links resolved on the supervisor's host: a node's must
    /// resolve to the same path (not, by a link of the node's, to somewhere the runner sees).
    public var environmentRealPath: String
}

/// tau-bench's settings as a node rebuilds its adapter (`Tau2Adapter`). `dataDirectory` is
/// resolved on the supervisor's host: a node's must be that path itself, not a link.
public struct Tau2Node: Codable, Sendable, Equatable {
    public var domain: String
    public var dataDirectory: String
    public var scriptsDirectory: String
    public var tool: ToolSettings
    public var layout: Tau2Domain
    public var agentModel: String?
    public var userModel: String?
    public var seed: UInt64
    public var retrievalConfig: String?
    public var concurrency: Int
    public var environment: [String]
    /// The files a reward depends on (listed by the supervisor from its own copies).
    public var digestedFiles: [String]
}

extension Tau2Adapter: RunsInShards {
    /// This adapter as a node rebuilds it (`NodeTool`). Digested: autoharness's two scripts
    /// (and the srt shim's files for a shell domain), every file of the domain's data (the
    /// tasks with their expected actions, the database, the policy), the user simulator's
    /// guidelines, and tau2's own code, whose
    /// evaluator decides the reward, where a runner bind holds it (`tau2/`, `src/tau2/` or a
    /// virtual environment's `site-packages/tau2/`). Throws when no bind holds tau2's code: a
    /// digest over less would check less.
    public var nodeTool: NodeTool {
        get throws(BenchmarkError) {
            var files = [scriptsDirectory + "/autoharness_tau2_run.py", scriptsDirectory + "/autoharness_tau2_score.py"]
            if layout.shell { files += InstalledTree.regularFiles(under: tool.shellCalls ?? scriptsDirectory + "/srt-shim") }
            // Links resolved: the listing does not follow one, and a linked domain directory
            // would otherwise digest as empty on both sides.
            let domainFiles = InstalledTree.regularFiles(under: InstalledTree.realPath(domainDirectory))
            guard !domainFiles.isEmpty else {
                throw BenchmarkError(.invalidBenchmark, "tau-bench: no files under \(domainDirectory) to compare with a node's copy")
            }
            files += domainFiles
            // The user simulator's guidelines, which the runner's copy of the data takes too:
            // they write the simulated user's prompt.
            files += Tau2Domain.userSimulatorFiles.map { dataDirectory + "/tau2/user_simulator/" + $0 }.filter { access($0, R_OK) == 0 }
            let code = tool.binds.flatMap(Self.packageDirectories).flatMap { InstalledTree.pythonFiles(under: $0) }
            guard !code.isEmpty else {
                throw BenchmarkError(.invalidBenchmark, "tau-bench: no runner bind holds tau2's code (tau2/, src/tau2/ or lib/python*/site-packages/tau2/ with .py files): a node's copy of the evaluator could not be compared")
            }
            files += code
            return .tau2(Tau2Node(domain: domain, dataDirectory: dataDirectory, scriptsDirectory: scriptsDirectory, tool: tool, layout: layout,
                                  agentModel: agentModel, userModel: userModel, seed: seed, retrievalConfig: retrievalConfig,
                                  concurrency: concurrency, environment: environment, digestedFiles: files))
        }
    }

    /// Where `bind` holds tau2's package: itself (named tau2), `tau2/`, `src/tau2/`, or a
    /// virtual environment's (or Debian's) `lib/python*/{site,dist}-packages/tau2/`. Not a
    /// package the runner's Python finds elsewhere (a `PYTHONPATH` it is passed, a `.pth`
    /// file): that code is not compared.
    static func packageDirectories(_ bind: String) -> [String] {
        var candidates = [bind + "/tau2", bind + "/src/tau2"]
        if bind.split(separator: "/").last == "tau2" { candidates.append(bind) }
        for lib in FileSystem.names(in: bind + "/lib").sorted() where lib.hasPrefix("python") {
            candidates += ["site-packages", "dist-packages"].map { bind + "/lib/" + lib + "/" + $0 + "/tau2" }
        }
        return candidates.filter { path in
            var st = stat()
            return stat(path, &st) == 0 && FileSystem.isDirectory(st)
        }
    }
}

extension CommandAdapter: RunsInShards {
    /// This adapter as a node rebuilds it (`NodeTool`).
    public var nodeTool: NodeTool { .command(tool: tool, scorer: scorer, scorerBinds: scorerBinds) }
}

extension BfclAdapter: RunsInShards {
    /// This adapter as a node rebuilds it (`NodeTool`). Throws when a graded category's possible
    /// answers or bfcl-eval's code cannot be found: a digest over less would check less.
    public var nodeTool: NodeTool {
        get throws(BenchmarkError) {
            let data = packageDirectory + "/data/"
            var files = [scriptsDirectory + "/autoharness_bfcl_run.py", scriptsDirectory + "/autoharness_bfcl_score.py"]
            for category in categories {
                files.append(data + "BFCL_v4_\(category).json")
                // The relevance categories have none: whether a call was made is the answer.
                guard !Self.relevanceCategories.contains(category) else { continue }
                let answers = data + "possible_answer/BFCL_v4_\(category).json"
                guard access(answers, R_OK) == 0 else {
                    throw BenchmarkError(.invalidBenchmark, "bfcl: \(answers): \(FileSystem.errorText()) (the possible answers a node's copy must match)")
                }
                files.append(answers)
            }
            if categories.contains(where: Self.multiTurnCategories.contains) {
                files += Self.backendDocs.values.sorted().map { data + "multi_turn_func_doc/" + $0 }
            }
            let code = InstalledTree.pythonFiles(under: packageDirectory)
            guard code.contains(packageDirectory + "/eval_checker/eval_runner.py") else {
                throw BenchmarkError(.invalidBenchmark, "bfcl: no eval_checker/eval_runner.py among \(packageDirectory)'s Python files (the checker a node's copy must match)")
            }
            files += code
            return .bfcl(BfclNode(packageDirectory: packageDirectory, environmentDirectory: environmentDirectory, checkerPython: checkerPython,
                                  scriptsDirectory: scriptsDirectory, tool: tool, categories: categories, agentModel: agentModel,
                                  concurrency: concurrency, environment: environment, digestedFiles: files,
                                  environmentRealPath: InstalledTree.realPath(environmentDirectory)))
        }
    }
}
