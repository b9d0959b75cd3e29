// `benchmark: inspect` on a worker node (`executor: ray`): the node has inspect_ai installed
// at the supervisor's paths, and the task's file, but not the experiment's frozen sample list,
// which init wrote into the supervisor's private directory. Each request therefore carries its
// samples' frozen lines, target and metadata included: a held-out request is sealed to its
// node, so a held-out sample's target is readable there and nowhere on the way. On the node
// the adapter is rebuilt from those lines alone and runs as on the supervisor's host: the
// runner gets each sample's id, input and choices, the scorer the whole line.

import Glibc
import SupervisorIO

/// inspect's settings as a node rebuilds its adapter (`InspectAdapter`).
public struct InspectNode: Codable, Sendable, Equatable {
    public var environmentDirectory: String
    /// `environmentDirectory` with its links resolved on the supervisor's host: a node's must
    /// resolve to the same path (the runner's hidden datasets are hidden by path).
    public var environmentRealPath: String
    /// `sitePackages` resolved likewise (the runner hides datasets below it by path).
    public var sitePackagesRealPath: String
    public var sitePackages: String
    public var python: String
    public var scriptsDirectory: String
    public var taskSpec: String
    public var taskArguments: [String]
    public var scoreName: String?
    public var tool: ToolSettings
    public var agentModel: String?
    public var concurrency: Int
    public var environment: [String]
    /// The files a reward depends on (listed by the supervisor from its own copies).
    public var digestedFiles: [String]

    /// The task file's directory (`/abs/dir/task.py@name`), or nil for a registered task.
    public var taskDirectory: String? { InspectAdapter.taskDirectory(of: taskSpec) }

    /// The adapter for `ids`, each with its frozen line in `data` (one line, one sample, of
    /// that id).
    func adapter(ids: [String], data: [String: [UInt8]]) throws(BenchmarkError) -> InspectAdapter {
        var lines: [[UInt8]] = []
        for id in ids {
            guard let line = data[id], !line.contains(UInt8(ascii: "\n")), case .object(let sample)? = JSONValue.parse(line), sample["id"]?.string == id else {
                throw BenchmarkError(.configuration, "inspect: the request carries no single line of sample \(id.debugDescription) under its id")
            }
            lines.append(line)
        }
        var a = try InspectAdapter(environmentDirectory: environmentDirectory, sitePackages: sitePackages, python: python,
                                   scriptsDirectory: scriptsDirectory, taskSpec: taskSpec, samples: Array(lines.joined(separator: [UInt8(ascii: "\n")])),
                                   from: "the request's samples", tool: tool, only: ids)
        a.taskArguments = taskArguments
        a.scoreName = scoreName
        a.agentModel = agentModel
        a.concurrency = concurrency
        a.environment = environment
        return a
    }
}

extension InspectAdapter: RunsInShards {
    /// This adapter as a node rebuilds it (`NodeTool`). Digested: autoharness's two inspect
    /// scripts, inspect_ai's own code (its scorers decide the reward), and the task's: the
    /// `.py` files under a task file's directory, or of a registered task's package (at most
    /// `maxTaskFiles`; none is an error: a digest over less would check less).
    public var nodeTool: NodeTool {
        get throws(BenchmarkError) {
            var files = [scriptsDirectory + "/autoharness_inspect_solve.py", scriptsDirectory + "/autoharness_inspect_score.py"]
            let code = InstalledTree.pythonFiles(under: sitePackages + "/inspect_ai")
            guard code.contains(sitePackages + "/inspect_ai/scorer/__init__.py") else {
                throw BenchmarkError(.invalidBenchmark, "inspect: no inspect_ai/scorer/__init__.py among \(sitePackages)/inspect_ai's Python files (the scorers a node's copy must match)")
            }
            files += code
            // The task's code, links resolved: the `.py` files under the task file's directory,
            // or of a registered task's package (not `data/` directories, nor what the task
            // reads that is not Python).
            let taskCode: [String]
            if let dir = taskDirectory {
                let file = InstalledTree.realPath(String(taskSpec.split(separator: "@", maxSplits: 1)[0]))
                taskCode = InstalledTree.pythonFiles(under: InstalledTree.realPath(dir))
                guard taskCode.contains(file) else {
                    throw BenchmarkError(.invalidBenchmark, "inspect: the task file \(file) is not among the Python files under \(dir) (the task's code a node's copy must match)")
                }
            } else if let package = taskSpec.split(separator: "/").first.map(String.init), !package.isEmpty, package != "inspect_ai" {
                taskCode = InstalledTree.pythonFiles(under: InstalledTree.realPath(sitePackages + "/" + package))
            } else {
                taskCode = []
            }
            guard !taskCode.isEmpty, taskCode.count <= Self.maxTaskFiles else {
                throw BenchmarkError(.invalidBenchmark, "inspect: \(taskCode.isEmpty ? "no" : "over \(Self.maxTaskFiles)") Python files of the task \(taskSpec) to compare with a node's copy; put the task file in a directory of its own")
            }
            files += taskCode
            return .inspect(InspectNode(environmentDirectory: environmentDirectory, environmentRealPath: InstalledTree.realPath(environmentDirectory),
                                        sitePackagesRealPath: InstalledTree.realPath(sitePackages), sitePackages: sitePackages, python: python, scriptsDirectory: scriptsDirectory, taskSpec: taskSpec,
                                        taskArguments: taskArguments, scoreName: scoreName, tool: tool, agentModel: agentModel,
                                        concurrency: concurrency, environment: environment, digestedFiles: files))
        }
    }

    /// The sample's frozen line (target and metadata included), which only the supervisor holds.
    public func nodeData(_ id: String) -> [UInt8]? { scorerLines[id] }

    /// The most Python files of a task a node's copy is compared by.
    static let maxTaskFiles = 5000
}
