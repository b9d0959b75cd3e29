// Local benchmarks in Harbor's task layout:
//
//   <benchmark>/tasks/<id>/instruction.md        what the agent is asked to do (its stdin)
//                          task.toml             optional: [agent]/[verifier] timeout_sec, [metadata]
//                          environment/          optional: seeds the task's fresh /app (not its Dockerfile)
//                          tests/test.sh         required: writes /logs/verifier/reward.{txt,json}
//                          solution/solve.sh     optional: the oracle, for validating the benchmark
//
// Loading checks the whole layout up front, so a broken benchmark is reported once, with
// every problem, before any sandbox starts, rather than surfacing as a string of zero
// rewards that look like agent failures.

import Glibc
import SupervisorIO

/// One task of a local benchmark, as found on disk.
public struct BenchmarkTask: Sendable, Equatable {
    /// The directory name under `tasks/`: `[A-Za-z0-9._-]+`, not starting with `.`.
    public var id: String
    /// Absolute path of `tasks/<id>`.
    public var directory: String
    /// Seconds the agent may run: `[agent] timeout_sec` from task.toml, else 600 (see
    /// `agentTimeoutDeclared`).
    public var agentTimeout: Double
    /// Seconds the verifier may run: `[verifier] timeout_sec`, else 600.
    public var verifierTimeout: Double
    /// Whether task.toml set `agentTimeout`; when it did not, `TaskRunner` uses its
    /// configuration's default instead.
    public var agentTimeoutDeclared: Bool
    /// Whether task.toml set `verifierTimeout`.
    public var verifierTimeoutDeclared: Bool
    /// `solution/solve.sh` exists, so the task can be run in oracle mode.
    public var hasSolution: Bool
    /// task.toml's `[metadata]` table, values as written (numbers and booleans as text).
    public var metadata: [String: String]
    /// task.toml's `[environment] docker_image`: the task's image by name (`autoharness images`
    /// takes it from the host's podman or pulls it, else builds environment/Dockerfile).
    public var dockerImage: String?
    /// What task.toml says its agent phase may reach (`TaskNetwork`); nil: public or silent.
    public var network: TaskNetwork?
    /// task.toml's `[environment] memory_mb` (or `memory`) in bytes and `cpus`: the limits of
    /// the task's agent and verifier sandboxes in place of their policies' (`TaskResources`).
    public var memory: UInt64?
    public var cpus: Double?
    /// `[environment] storage_mb` (or `storage`) in bytes: the size of a train run's task file
    /// systems, on disk (`TaskDisks`); nil: the 2 GiB tmpfs.
    public var storage: UInt64?
    /// Why the task cannot run (a malformed task.toml, a missing tests/test.sh), or nil. A
    /// broken task stays in the benchmark and scores 0 as `setup_failed` with this reason, as
    /// an infrastructure error does: it costs that task, never the whole experiment.
    public var problem: String?

    public init(id: String, directory: String, agentTimeout: Double = 600, verifierTimeout: Double = 600,
                agentTimeoutDeclared: Bool = false, verifierTimeoutDeclared: Bool = false,
                hasSolution: Bool = false, metadata: [String: String] = [:]) {
        self.id = id
        self.directory = directory
        self.agentTimeout = agentTimeout
        self.verifierTimeout = verifierTimeout
        self.agentTimeoutDeclared = agentTimeoutDeclared
        self.verifierTimeoutDeclared = verifierTimeoutDeclared
        self.hasSolution = hasSolution
        self.metadata = metadata
    }

    /// `[A-Za-z0-9._-]+` and not `.`-leading: ids become path components and appear in
    /// reports, so they can never be `..`, contain `/`, or hide as dotfiles.
    public static func isValidID(_ id: String) -> Bool {
        guard let first = id.unicodeScalars.first, first != "." else { return false }
        return id.unicodeScalars.allSatisfy {
            ("A"..."Z").contains($0) || ("a"..."z").contains($0) || ("0"..."9").contains($0)
                || $0 == "." || $0 == "_" || $0 == "-"
        }
    }

    var instructionPath: String { directory + "/instruction.md" }
    var testsDirectory: String { directory + "/tests" }
    var solutionDirectory: String { directory + "/solution" }
    var environmentDirectory: String { directory + "/environment" }
}

/// A benchmark directory holding `tasks/<id>/` in Harbor's layout.
public struct LocalBenchmark: Sendable {
    /// Timeout used when task.toml does not declare one (Harbor's default).
    public static let defaultTimeout: Double = 600
    /// The longest a task's agent or verifier may be given (task.toml, `per_task_timeout`).
    public static let maxTimeout: Double = 86_400
    /// Largest task.toml read (Harbor's are under 4 KiB).
    public static let maxTaskTomlBytes = 1 << 20

    /// Absolute, symlink-free path of the benchmark directory.
    public var directory: String
    /// Every task, sorted by id; broken ones included (see `BenchmarkTask.problem`).
    public var tasks: [BenchmarkTask]
    /// Every problem found, by task id, each naming the task and file (`file:line` for
    /// task.toml): broken tasks, and directories under tasks/ whose names cannot be task ids
    /// (left out).
    public var problems: [String]

    /// Loads and checks every task under `directory/tasks`. A task that does not load is kept
    /// with its `problem`; the benchmark loads as long as tasks/ holds at least one task.
    /// - Throws: `BenchmarkError` when there is no tasks/ directory or no task in it.
    public init(directory: String) throws(BenchmarkError) {
        guard let real = realpath(directory, nil) else {
            throw BenchmarkError(.invalidBenchmark, "benchmark directory \(directory): \(FileSystem.errorText())")
        }
        self.directory = String(cString: real)
        free(real)
        let tasksPath = self.directory + "/tasks"
        let fd = FileSystem.openDirectory(tasksPath)
        guard fd >= 0 else {
            throw BenchmarkError(.invalidBenchmark, "benchmark \(directory): no tasks/ directory (\(tasksPath): \(FileSystem.errorText()))")
        }
        let names = FileSystem.entries(of: fd)
        close(fd)
        guard let names else {
            throw BenchmarkError(.invalidBenchmark, "\(tasksPath): \(FileSystem.errorText())")
        }

        var problems: [String] = []
        var tasks: [BenchmarkTask] = []
        for entry in names.map(FileSystem.display).sorted() {
            let path = tasksPath + "/" + entry
            guard Self.kind(path) == S_IFDIR else { continue }  // README.md and the like
            if entry.hasPrefix(".") { continue }  // .git, editor state
            guard BenchmarkTask.isValidID(entry) else {
                problems.append("\(path): '\(entry)' is not a valid task id (letters, digits, '.', '_', '-'); left out")
                continue
            }
            do {
                tasks.append(try Self.loadTask(id: entry, directory: path))
            } catch {
                var broken = BenchmarkTask(id: entry, directory: path)
                broken.problem = error.message
                tasks.append(broken)
                problems.append(error.message)
            }
        }
        guard !tasks.isEmpty else {
            throw BenchmarkError(.invalidBenchmark, (problems + ["benchmark \(self.directory): tasks/ holds no tasks"]).joined(separator: "\n"))
        }
        self.tasks = tasks
        self.problems = problems
    }

    /// The task with this id, if the benchmark has one.
    public func task(_ id: String) -> BenchmarkTask? {
        tasks.first { $0.id == id }
    }

    static func loadTask(id: String, directory: String) throws(BenchmarkError) -> BenchmarkTask {
        var task = BenchmarkTask(id: id, directory: directory)
        func require(_ relative: String, _ kind: mode_t, _ what: String) throws(BenchmarkError) {
            let k = Self.kind(directory + "/" + relative)
            guard k == kind else {
                let found = k == nil ? "missing" : "not a \(what)"
                throw BenchmarkError(.invalidBenchmark, "task '\(id)': \(directory)/\(relative) is \(found)")
            }
        }
        try require("instruction.md", S_IFREG, "regular file")
        try require("tests", S_IFDIR, "directory")
        try require("tests/test.sh", S_IFREG, "regular file")
        if Self.kind(directory + "/environment") != nil { try require("environment", S_IFDIR, "directory") }
        if Self.kind(directory + "/solution") != nil {
            try require("solution", S_IFDIR, "directory")
            try require("solution/solve.sh", S_IFREG, "regular file")
            task.hasSolution = true
        }

        let tomlPath = directory + "/task.toml"
        guard Self.kind(tomlPath) != nil else { return task }
        try require("task.toml", S_IFREG, "regular file")
        let dir = FileSystem.openDirectory(directory)
        defer { if dir >= 0 { close(dir) } }
        let bytes: [UInt8]
        switch FileSystem.readSmallFile(at: dir, "task.toml", limit: maxTaskTomlBytes) {
        case .success(let b): bytes = b
        case .failure(let problem):
            throw BenchmarkError(.invalidTaskFile, "\(tomlPath): \(problem.explanation("a task.toml"))")
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw BenchmarkError(.invalidTaskFile, "\(tomlPath): not valid UTF-8")
        }
        try task.read(taskToml: text, path: tomlPath)
        return task
    }

    /// The file type at `path` (following symlinks: a benchmark is supervisor-owned data,
    /// and its tests/ are bound by resolved path), or nil if nothing is there.
    static func kind(_ path: String) -> mode_t? {
        var st = stat()
        return stat(path, &st) == 0 ? st.st_mode & S_IFMT : nil
    }
}

extension BenchmarkTask {
    /// Takes this task's settings from its task.toml (`text`, read from `path`): the timeouts,
    /// `[metadata]`, the image, the network (`TaskNetwork`) and the resources
    /// (`TaskResources`). The one reader of task.toml for every benchmark (a local one's tasks,
    /// a Harbor dataset's).
    /// - Throws: `BenchmarkError` (`.invalidTaskFile`) naming `path:line`.
    mutating func read(taskToml text: String, path: String) throws(BenchmarkError) {
        let toml = try TaskToml.parse(text, file: path)
        func timeout(_ table: String) throws(BenchmarkError) -> Double? {
            guard let entry = toml.entry(table, "timeout_sec") else { return nil }
            guard case .number(let v, _) = entry.value, v > 0, v <= LocalBenchmark.maxTimeout else {
                throw BenchmarkError(.invalidTaskFile, """
                    \(path):\(entry.line): [\(table)] timeout_sec must be a positive number of seconds, at most \
                    \(Int(LocalBenchmark.maxTimeout)) (got \(entry.value.metadataText))
                    """)
            }
            return v
        }
        if let t = try timeout("agent") {
            agentTimeout = t
            agentTimeoutDeclared = true
        }
        if let t = try timeout("verifier") {
            verifierTimeout = t
            verifierTimeoutDeclared = true
        }
        for (key, entry) in toml.tables["metadata"] ?? [:] { metadata[key] = entry.value.metadataText }
        if let entry = toml.entry("environment", "docker_image") {
            guard case .string(let name) = entry.value, !name.isEmpty, !name.hasPrefix("-"),
                  name.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f }) else {
                throw BenchmarkError(.invalidTaskFile, "\(path):\(entry.line): [environment] docker_image must be an image name (got \(entry.value.metadataText))")
            }
            dockerImage = name
        }
        network = try TaskNetwork.read(toml, path: path)
        let resources = try TaskResources.read(toml, path: path)
        (memory, cpus, storage) = (resources.memory, resources.cpus, resources.storage)
    }
}
