// What the tau2 runner may see of a domain's data, and how the domain keeps its tasks.
//
// The runner (agent.py's sandbox) gets a copy of tau2's data directory built by allowlist: the
// files tau2 v1.0.1 opens to build the domain's environment and user simulator
// (src/tau2/domains/<d>/utils.py and environment.py, src/tau2/user/user_simulator.py), and the
// run's tasks reduced to what a simulation needs. Everything else stays out: other domains,
// `results/` (tau2's shipped leaderboard trajectories, which include the test tasks' solved
// runs), `task_issues/`, saved `simulations/`, the voice and full/small task sets.

import FoundationEssentials
import Glibc
import SupervisorIO

public struct Tau2Domain: Sendable, Equatable, Codable {
    /// Files of the domain's directory copied by name (a missing one is left out: tau2 then
    /// names it).
    public var files: [String]
    /// Directories of the domain's directory copied whole (regular files and directories).
    public var directories: [String] = []
    /// The tasks are `tasks/task_*.json`, one per file, read by that loader
    /// (banking_knowledge's get_tasks); otherwise the domain's `tasks.json`.
    public var taskFiles = false
    /// tau2 ships the domain's train/test split (`split_tasks.json`).
    public var ownSplit = true
    /// Its tools run shell commands through srt (banking_knowledge's `shell`).
    public var shell = false

    public init(files: [String], directories: [String] = [], taskFiles: Bool = false, ownSplit: Bool = true, shell: Bool = false) {
        self.files = files
        self.directories = directories
        self.taskFiles = taskFiles
        self.ownSplit = ownSplit
        self.shell = shell
    }

    /// The domains autoharness knows the data of. banking_knowledge (τ³): db.json, the
    /// knowledge base's documents/ (which the environment exports for its shell tool) and
    /// prompts/ (its policy is prompts/<variant>.md with components/); its 97 tasks are
    /// tasks/task_*.json (its tasks.json is a stale aggregate get_tasks never reads) and it has
    /// no split (tau2-bench 1.0.1 src/tau2/domains/banking_knowledge/utils.py, environment.py).
    public static let known: [String: Tau2Domain] = [
        "airline": Tau2Domain(files: ["db.json", "policy.md"]),
        "retail": Tau2Domain(files: ["db.json", "policy.md"]),
        "telecom": Tau2Domain(files: ["db.toml", "user_db.toml", "main_policy.md", "tech_support_manual.md", "tech_support_workflow.md"]),
        "banking_knowledge": Tau2Domain(files: ["db.json"], directories: ["documents", "prompts"], taskFiles: true, ownSplit: false, shell: true),
    ]
    static let userSimulatorFiles = ["simulation_guidelines.md", "simulation_guidelines_tools.md"]
    /// Largest task file read.
    static let taskFileLimit = 256 << 20

    static func json(at dir: Int32, _ name: String, path: String) throws(BenchmarkError) -> JSONValue {
        switch FileSystem.readSmallFile(at: dir, name, limit: taskFileLimit) {
        case .success(let b):
            guard let v = JSONValue.parse(b) else { throw BenchmarkError(.invalidBenchmark, "\(path)/\(name): not valid JSON") }
            return v
        case .failure(let problem): throw BenchmarkError(.invalidBenchmark, "\(path)/\(name): \(problem.explanation("tau2's data"))")
        }
    }

    /// Every task of the domain in `dir` (at `path`), in file order.
    func tasks(in dir: Int32, path: String) throws(BenchmarkError) -> [JSONValue] {
        guard taskFiles else {
            guard case .array(let all) = try Self.json(at: dir, "tasks.json", path: path) else {
                throw BenchmarkError(.invalidBenchmark, "\(path)/tasks.json: not a JSON list of tasks")
            }
            return all
        }
        let t = FileSystem.openDirectory(at: dir, FileSystem.name("tasks"))
        guard t >= 0 else { throw BenchmarkError(.invalidBenchmark, "\(path)/tasks: \(FileSystem.errorText())") }
        defer { close(t) }
        let names = (FileSystem.entries(of: t) ?? []).map(FileSystem.display).filter { $0.hasPrefix("task_") && $0.hasSuffix(".json") }.sorted()
        return try names.map { name throws(BenchmarkError) in
            let task = try Self.json(at: t, name, path: path + "/tasks")
            guard task["id"]?.string != nil else { throw BenchmarkError(.invalidBenchmark, "\(path)/tasks/\(name): not a task (no id)") }
            return task
        }
    }

    /// Builds `out/data/tau2` by allowlist (never a copy of the tree with parts deleted), then
    /// writes the domain's tasks with only the tasks of this run (a train run must not show
    /// agent.py, and through its output the coding agent, any test task), each reduced by
    /// `runnerTask`: as tasks.json and a split_tasks.json whose `base` is those ids, or as
    /// tasks/task_<n>.json.
    func sanitizedData(from data: String, domain: String, ids: [String], into out: Int32, owner: (uid_t, gid_t)) throws(BenchmarkError) {
        let domainDir = data + "/tau2/domains/" + domain
        guard let d = FileSystem.makeDirectory(at: out, "data", mode: 0o755, owner: owner),
              let t = FileSystem.makeDirectory(at: d, "tau2", mode: 0o755, owner: owner),
              let domains = FileSystem.makeDirectory(at: t, "domains", mode: 0o755, owner: owner),
              let target = FileSystem.makeDirectory(at: domains, domain, mode: 0o755, owner: owner),
              let guidelines = FileSystem.makeDirectory(at: t, "user_simulator", mode: 0o755, owner: owner) else {
            throw BenchmarkError(.io, "tau2 data copy: \(FileSystem.errorText())")
        }
        defer { [d, t, domains, target, guidelines].forEach { close($0) } }
        let src = FileSystem.openDirectory(domainDir)
        guard src >= 0 else { throw BenchmarkError(.io, "\(domainDir): \(FileSystem.errorText())") }
        defer { close(src) }
        for (source, names, destination) in [(domainDir, files, target), (data + "/tau2/user_simulator", Self.userSimulatorFiles, guidelines)] {
            let from = FileSystem.openDirectory(source)
            guard from >= 0 else { throw BenchmarkError(.io, "\(source): \(FileSystem.errorText())") }
            defer { close(from) }
            for name in names {
                guard FileSystem.entryStatus(at: from, FileSystem.name(name)) != nil else { continue }
                do throws(IOFailure) {
                    try FileSystem.copyFile(from: from, FileSystem.name(name), to: destination, owner: owner, mode: 0o644, path: source + "/" + name)
                } catch {
                    throw BenchmarkError(.io, "tau2 data copy", cause: error)
                }
            }
        }
        for name in directories {
            let from = FileSystem.openDirectory(at: src, FileSystem.name(name))
            guard from >= 0 else { continue }
            defer { close(from) }
            guard let to = FileSystem.makeDirectory(at: target, name, mode: 0o755, owner: owner) else {
                throw BenchmarkError(.io, "tau2 data copy: \(name): \(FileSystem.errorText())")
            }
            defer { close(to) }
            do throws(IOFailure) {
                try FileSystem.copyTree(from: from, to: to, owner: owner, skip: [], symlinks: .refuse, label: domainDir + "/" + name)
            } catch {
                throw BenchmarkError(.io, "tau2 data copy", cause: error)
            }
        }
        let kept = Set(ids)
        let tasks = try self.tasks(in: src, path: domainDir).filter { $0["id"]?.string.map(kept.contains) ?? false }.map(Self.runnerTask)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        func write(_ dir: Int32, _ name: String, _ value: some Encodable) throws(BenchmarkError) {
            guard let bytes = try? encoder.encode(value) else { throw BenchmarkError(.io, "tau2 data copy: \(name) does not encode") }
            if let e = FileSystem.writeFile(at: dir, name, Array(bytes), mode: 0o644, owner: owner) {
                throw BenchmarkError(.io, "tau2 data copy: \(name): \(FileSystem.errorText(e))")
            }
        }
        guard taskFiles else {
            try write(target, "tasks.json", JSONValue.array(tasks))
            try write(target, "split_tasks.json", ["base": ids])
            return
        }
        guard let dir = FileSystem.makeDirectory(at: target, "tasks", mode: 0o755, owner: owner) else {
            throw BenchmarkError(.io, "tau2 data copy: tasks/: \(FileSystem.errorText())")
        }
        defer { close(dir) }
        // Named by position: an id need not be a file name.
        for (n, task) in tasks.enumerated() {
            let number = String(n)
            try write(dir, "task_" + String(repeating: "0", count: max(0, 5 - number.count)) + number + ".json", task)
        }
    }

    /// The task fields tau2 needs to run a simulation: the user simulator's scenario, the
    /// environment's initial state and the user's tools (tau2 v1.0.1 src/tau2/data_model/tasks.py,
    /// Task). `description` (the evaluator's notes), `ticket` (solo mode), `issues`,
    /// `annotations` and `required_documents` (banking_knowledge: the documents that hold the
    /// answer) are dropped.
    static let runnerTaskFields: Set<String> = ["id", "user_scenario", "initial_state", "user_tools"]

    /// `task` reduced to `runnerTaskFields` plus an `evaluation_criteria` with nothing in it.
    /// Not null: tau2's run_domain ends with compute_metrics, whose per-task metrics
    /// (Results._task_metrics in src/tau2/data_model/simulation.py) raise
    /// KeyError('num_agent_actions') on a null criteria, so no simulation was ever returned.
    /// Every check null (not `actions: []`, which makes tau2 replay an empty action list against
    /// the database) and an empty `reward_basis`: tau2 grades each simulation 1.0 and computes
    /// its metrics as zeros.
    static func runnerTask(_ task: JSONValue) -> JSONValue {
        let empty = JSONValue.object(["actions": .null, "env_assertions": .null, "communicate_info": .null,
                                      "nl_assertions": .null, "reward_basis": .array([])])
        var kept = (task.object ?? [:]).filter { runnerTaskFields.contains($0.key) }
        kept["evaluation_criteria"] = empty
        return .object(kept)
    }
}
