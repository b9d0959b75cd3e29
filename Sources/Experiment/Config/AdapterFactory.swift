import Benchmark
import Foundation
import SandboxPolicy
import SupervisorIO

extension ExperimentConfig {
    /// The upstream keys that hold whole numbers, and their bounds (BIRD-Interact's ports and
    /// patience, tau2's seed).
    static let upstreamIntegers: [String: ClosedRange<Int>] = [
        "seed": 0...4_294_967_295, "patience": 0...100, "system_agent_port": 1024...65535, "user_sim_port": 1024...65535,
        "db_env_port": 1024...65535, "pg_port": 1...65535,
    ]
    /// The upstream keys that hold numbers, and their bounds.
    static let upstreamNumbers: [String: ClosedRange<Double>] = ["agent_timeout_multiplier": 0.01...100]

    /// Upstream auto-harness keys some adapter reads (numbers bounded by the config parser,
    /// the rest validated by the adapter).
    static let upstreamKeys = ["agent_timeout_multiplier", "reasoning_effort", "user_model", "seed", "mode", "patience",
                               "bird_repo", "bird_python_bin", "bird_data_path", "system_agent_port", "user_sim_port", "db_env_port",
                               "pg_host", "pg_port", "pg_user", "pg_password", "tau2_data_dir", "registry_path"]

    /// The tool each external benchmark runs, by default (found on PATH).
    static let defaultTool = ["terminal-bench": "harbor", "tau-bench": "tau2", "bird-interact": "python3"]
    static let defaultDataset = ["terminal-bench": "terminal-bench@2.0"]

    /// The keys each Harbor environment provider reads (harbor 0.24.0, harbor/environments/:
    /// e2b.py, daytona.py, modal.py (Modal's client reads MODAL_TOKEN_ID/SECRET), runloop.py).
    static let harborProviderKeys = ["e2b": ["E2B_API_KEY"], "daytona": ["DAYTONA_API_KEY"],
                                     "modal": ["MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET"], "runloop": ["RUNLOOP_API_KEY"]]

    static let installHint = [
        "terminal-bench": "install Harbor with `uv tool install harbor` (or `pip install harbor`), see https://github.com/laude-institute/harbor",
        "tau-bench": "install tau2-bench: `git clone https://github.com/sierra-research/tau2-bench && cd tau2-bench && pip install -e .`",
        "bird-interact": "git clone https://github.com/bird-bench/BIRD-Interact, set up BIRD-Interact-ADK as its README says (venv, dataset with the ground truth merged, PostgreSQL), then give the checkout as --repo (bird_repo)",
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
        case "terminal-bench":
            return try harborAdapter(root: root, checkTools: checkTools)
        case "tau-bench":
            return try tau2Adapter(root: root, checkTools: checkTools)
        case "bird-interact":
            return try birdAdapter(root: root, checkTools: checkTools)
        default:
            throw ExperimentError(.usage, "benchmark: \(benchmark) is not available in this build")
        }
    }

    func harborAdapter(root: String, checkTools: Bool) throws -> HarborAdapter {
        let argv = runner.command ?? ["harbor"]
        if checkTools {
            _ = try ToolCheck.tool(argv, default: "harbor", hint: Self.installHint["terminal-bench"]!)
            // The template passes every provider's key; only the one in use must be set.
            let provider = envProvider ?? "e2b"
            let unused = Self.harborProviderKeys.filter { $0.key != provider }.values.flatMap { $0 }
            try ToolCheck.environment(runner.envPass.filter { !unused.contains($0) }, for: "Harbor (the agent's model API, env_provider \(provider))")
            try checkHeldOutAccount(provider: provider, keys: Self.harborProviderKeys[provider] ?? [])
        }
        guard let dataset, !dataset.isEmpty else {
            throw ExperimentError(.usage, "dataset: missing; terminal-bench needs a Harbor dataset (terminal-bench@2.0) or a local directory of Harbor tasks")
        }
        let tool = toolSettings(argv)
        let provider = envProvider ?? "e2b"
        guard ["local", "docker", "daytona", "e2b", "modal", "runloop"].contains(provider) else {
            throw ExperimentError(.usage, "env_provider: '\(provider)' is not one Harbor supports (docker, daytona, e2b, modal, runloop) nor autoharness's local (the task's commands in autoharness's sandbox)")
        }
        if provider == "local" {
            guard let scripts = runner.scripts, FileManager.default.fileExists(atPath: scripts + "/autoharness_harbor_env.py") else {
                throw ExperimentError(.usage, "env_provider: local needs runner.scripts, the directory of autoharness_harbor_env.py (templates/terminal-bench)")
            }
        }
        if provider == "docker" && !runner.binds.contains(where: { $0.hasSuffix("docker.sock") }) {
            throw ExperimentError(.usage, """
                env_provider: docker needs the Docker socket in runner.binds (e.g. /var/run/docker.sock), and giving it \
                hands agent.py, which runs inside the harbor process, control of the Docker daemon: root on this host. \
                Use a remote provider (daytona, e2b, modal, runloop) for agents you do not trust, or add the socket to \
                runner.binds to accept that risk (README: threat model).
                """)
        }
        let ids: [String]
        var adapter: HarborAdapter
        switch try HarborDataset.resolve(dataset, root: root, registryPath: upstream["registry_path"]) {
        case .directory(let dir, let tasks):
            try RunnerBinds.refuse(runner.binds, exposing: [.init(path: dir, what: "contains the dataset \(dir): every run would see the held-out tasks' files (autoharness binds the requested tasks itself)")])
            ids = tasks.map(\.id)
            adapter = HarborAdapter(taskIDs: ids, tool: tool)
            adapter.datasetPath = dir
            for t in tasks { if let n = t.declaredName, n != t.id { adapter.taskNames[t.id] = n } }
        case .registry(let reference, let registry, let listed):
            let given = (tasks ?? []).isEmpty && tasksFile == nil ? nil : try taskList(root: root, valid: TraceName.isAcceptableID)
            guard let names = given ?? listed else {
                throw ExperimentError(.usage, """
                    dataset: \(reference) is a registry reference with neither registry_path nor tasks_file: autoharness \
                    does not let runs reach the registry to list it. `autoharness init --dataset \(reference)` downloads it \
                    once (or run `harbor download \(reference) -o DIR` and set dataset: DIR), or give a registry.json \
                    (registry_path), or the task names in tasks_file
                    """)
            }
            // A registry task's id is Harbor's `-i` name; org/name@ref is org/name.
            ids = Array(Set(names.map { n in n.firstIndex(of: "@").map { String(n[..<$0]) }.flatMap { $0.contains("/") ? $0 : nil } ?? n })).sorted()
            adapter = HarborAdapter(taskIDs: ids, tool: tool)
            adapter.dataset = reference
            adapter.registry = registry
            if let registry {
                for id in ids where !registry.taskIDs.contains(id) {
                    throw ExperimentError(.usage, "task \(id): not in dataset \(reference) of \(registry.path)")
                }
                // A task on this host is named by its task.toml too (a git task's is not
                // known before Harbor fetches it: its -i name and org/name@ref still work).
                for (id, path) in registry.localTasks {
                    if let text = HarborDataset.taskToml(path),
                       let name = HarborAdapter.declaredName(taskToml: text), name != id {
                        adapter.taskNames[id] = name
                    }
                }
            }
        }
        do {
            _ = try HarborTaskNames(ids: ids, declared: adapter.taskNames)
        } catch {
            throw ExperimentError(.usage, "dataset \(dataset): \(error.message)")
        }
        adapter.model = agentModel == "none" ? nil : agentModel
        adapter.environmentProvider = provider
        adapter.scriptsDirectory = runner.scripts
        // Harbor multiplies each task's own agent timeout (900 s for Terminal-Bench 2.0 tasks).
        // Upstream derived the multiplier from per_task_timeout / 180, which overshoots 5×;
        // here it is explicit.
        if let x = upstream["agent_timeout_multiplier"] {
            guard let v = Double(x), v > 0 else { throw ExperimentError(.usage, "agent_timeout_multiplier: '\(x)' is not a positive number") }
            adapter.agentTimeoutMultiplier = v
        }
        adapter.agentTimeout = perTaskTimeout
        adapter.concurrency = maxConcurrency
        adapter.environment = agentEnvironment()
        return adapter
    }

    func tau2Adapter(root: String, checkTools: Bool) throws -> Tau2Adapter {
        let argv = runner.command ?? ["python3"]
        if checkTools {
            _ = try ToolCheck.tool(argv, default: "python3", hint: Self.installHint["tau-bench"]!)
            try ToolCheck.environment(runner.envPass, for: "tau2 (the agent's and the user simulator's model API)")
        }
        guard let domain, ["retail", "airline", "telecom"].contains(domain) else {
            throw ExperimentError(.usage, "domain: tau-bench needs one of retail, airline, telecom (got \(domain.map { "'\($0)'" } ?? "nothing"))")
        }
        guard let data = upstream["tau2_data_dir"] ?? ProcessInfo.processInfo.environment["TAU2_DATA_DIR"] else {
            throw ExperimentError(.usage, "tau2_data_dir: missing; set it to tau2-bench's data directory (the one holding tau2/domains/), or export TAU2_DATA_DIR")
        }
        let dataDir = data.hasPrefix("/") ? data : root + "/" + data
        guard let scripts = runner.scripts else {
            throw ExperimentError(.usage, "runner.scripts: missing; it names the directory of autoharness_tau2_run.py and autoharness_tau2_score.py (templates/tau-bench)")
        }
        // The runner must never see the real data: it holds every task's expected actions.
        let real = URL(fileURLWithPath: dataDir).resolvingSymlinksInPath().path
        try RunnerBinds.refuse(runner.binds, exposing: [.init(path: real, what: "contains tau2_data_dir (\(dataDir)), whose tasks.json holds the expected actions of every test task; bind only the tau2 install (its src/ for an editable install), never the data")])
        var adapter: Tau2Adapter
        do {
            adapter = try Tau2Adapter(domain: domain, dataDirectory: real, scriptsDirectory: scripts, tool: toolSettings(argv))
        } catch {
            throw ExperimentError(.usage, error.message)
        }
        adapter.agentModel = agentModel == "none" ? nil : agentModel
        adapter.userModel = upstream["user_model"]
        if let x = upstream["seed"] {
            guard let v = UInt64(x) else { throw ExperimentError(.usage, "seed: '\(x)' is not a whole number") }
            adapter.seed = v
        }
        adapter.concurrency = maxConcurrency
        adapter.environment = agentEnvironment()
        return adapter
    }

    func birdAdapter(root: String, checkTools: Bool) throws -> BirdAdapter {
        func path(_ p: String) -> String { p.hasPrefix("/") ? p : root + "/" + p }
        let argv = runner.command ?? [upstream["bird_python_bin"] ?? "python3"]
        if checkTools {
            _ = try ToolCheck.tool(argv, default: "python3", hint: "runner.command must be the Python with the BIRD-Interact-ADK requirements installed")
            try ToolCheck.environment(runner.envPass, for: "BIRD-Interact (the system agent's and the user simulator's model APIs)")
            try ToolCheck.postgresClients()
        }
        guard let repo = upstream["bird_repo"] else {
            throw ExperimentError(.usage, "bird_repo: missing; \(Self.installHint["bird-interact"]!)")
        }
        var adk = URL(fileURLWithPath: path(repo)).resolvingSymlinksInPath().path
        if FileManager.default.fileExists(atPath: adk + "/BIRD-Interact-ADK/orchestrator/runner.py") { adk += "/BIRD-Interact-ADK" }
        if checkTools { try ToolCheck.pythonRequirements(python: argv[0], file: adk + "/requirements.txt") }
        let set = dataset ?? "lite"
        let data = URL(fileURLWithPath: upstream["bird_data_path"].map(path) ?? adk + "/bird-interact-\(set)/bird_interact_data.jsonl")
            .resolvingSymlinksInPath().path
        guard let scripts = runner.scripts else {
            throw ExperimentError(.usage, "runner.scripts: missing; it names the directory of autoharness_bird_services.py and autoharness_bird_run.py (templates/bird-interact)")
        }
        guard let pg = upstream["pg_host"], pg.hasPrefix("/") else {
            throw ExperimentError(.usage, """
                pg_host: must be the directory of PostgreSQL's Unix socket (e.g. /run/bird-pg, with the BIRD container started \
                with -v /run/bird-pg:/var/run/postgresql): the DB environment runs in a sandbox whose only network is the egress proxy
                """)
        }
        let exposes = "exposes the BIRD-Interact data or ADK directory (gold SQL, hidden knowledge) to agent.py; bind only the Python install"
        try RunnerBinds.refuse(runner.binds, exposing: [.init(path: data, what: exposes), .init(path: adk, what: exposes, inside: false)])
        var adapter: BirdAdapter
        do {
            adapter = try BirdAdapter(adkDirectory: adk, dataPath: data, scriptsDirectory: scripts, tool: toolSettings(argv))
        } catch {
            throw ExperimentError(.usage, error.message)
        }
        if let m = upstream["mode"] {
            guard ["a-interact", "c-interact"].contains(m) else { throw ExperimentError(.usage, "mode: '\(m)' is not a-interact or c-interact") }
            adapter.mode = m
        }
        func port(_ key: String, _ d: Int) throws -> Int {
            guard let x = upstream[key] else { return d }
            let range = Self.upstreamIntegers[key]!
            guard let v = Int(x), range.contains(v) else { throw ExperimentError(.usage, "\(key): '\(x)' is not a port from \(range.lowerBound) to \(range.upperBound)") }
            return v
        }
        adapter.ports = (try port("system_agent_port", 6100), try port("user_sim_port", 6101), try port("db_env_port", 6102))
        adapter.concurrency = maxConcurrency
        adapter.postgresSocketDirectory = pg
        var env = agentEnvironment() + ["DATASET=\(set)", "PATIENCE=\(upstream["patience"] ?? "3")", "PG_HOST=\(pg)"]
        if let m = agentModel, m != "none" { env.append("SYSTEM_AGENT_MODEL=\(m)") }
        if let m = upstream["user_model"] { env.append("USER_SIM_MODEL=\(m)") }
        for (k, v) in [("pg_port", "PG_PORT"), ("pg_user", "PG_USER"), ("pg_password", "PG_PASSWORD")] {
            if let x = upstream[k] { env.append("\(v)=\(x)") }
        }
        adapter.environment = env
        return adapter
    }

    /// What upstream's runners export to agent.py: AGENT_MODEL, AGENT_REASONING_EFFORT.
    func agentEnvironment() -> [String] {
        var env: [String] = []
        if let m = agentModel, m != "none" { env.append("AGENT_MODEL=\(m)") }
        if let r = upstream["reasoning_effort"] { env.append("AGENT_REASONING_EFFORT=\(r)") }
        return env
    }

    /// A remote environment provider keeps state (sandboxes, files, snapshots) that anyone
    /// holding the key can list: a held-out agent.py could leave one there that a later train
    /// agent.py finds and prints into its trace. So when the provider's key is passed to the
    /// runner, held-out runs must get another account's (`gate.held_out_env`), and not the
    /// same value under another name.
    func checkHeldOutAccount(provider: String, keys: [String]) throws {
        for key in keys where runner.envPass.contains(key) {
            guard let source = heldOutEnv[key] else {
                throw ExperimentError(.usage, """
                    env_provider: \(provider) keeps state any holder of \(key) can list, and held-out runs would share the train \
                    runs' account: a held-out agent.py could leave a sandbox or file there that a train run finds. Give held-out \
                    runs an account of their own: gate.held_out_env: {\(key): VAR}, VAR a variable holding another account's key \
                    (README: terminal-bench)
                    """)
            }
            guard let held = getenv(source).map({ String(cString: $0) }), !held.isEmpty else {
                throw ExperimentError(.usage, "gate.held_out_env: \(key) comes from $\(source) for held-out runs, and \(source) is not set; export \(source)=... (another account's key)")
            }
            if let train = getenv(key).map({ String(cString: $0) }), train == held {
                throw ExperimentError(.usage, "gate.held_out_env: $\(source) holds the same value as $\(key): held-out and train runs would share one \(provider) account; give held-out runs another account's key")
            }
        }
    }

    func toolSettings(_ command: [String]) -> ToolSettings {
        var t = ToolSettings(command: command)
        t.binds = runner.binds
        t.envPass = runner.envPass
        t.heldOutEnv = heldOutEnv
        t.networkAllow = runner.networkAllow
        t.networkInference = runner.networkInference
        t.upstreamCA = runner.upstreamCA
        t.timeout = runner.timeout
        t.runnerPolicy = runner.policy
        t.scorerPolicy = runner.scorerPolicy
        return t
    }

    /// Largest tasks_file read (100 000 ids of 100 characters).
    static let maxTasksFileBytes = 16 << 20

    /// `tasks:` or `tasks_file:` (one id per line, or a JSON list of ids).
    func taskList(root: String, valid: (String) -> Bool = BenchmarkTask.isValidID) throws -> [String] {
        var ids = tasks ?? []
        if let f = tasksFile {
            let p = f.hasPrefix("/") ? f : root + "/" + f
            let text: String
            switch InputFile.read(p, cap: Self.maxTasksFileBytes) {
            case .success(let bytes):
                guard let t = String(validating: bytes, as: UTF8.self) else { throw ExperimentError(.usage, "tasks_file \(p): not valid UTF-8") }
                text = t
            case .failure(let problem):
                throw ExperimentError(.usage, "tasks_file \(p): \(problem.explanation("a task list"))")
            }
            if let list = try? JSONDecoder().decode([String].self, from: Data(text.utf8)) {
                ids += list
            } else {
                for (n, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
                    let id = line.trimmingCharacters(in: .whitespaces)
                    if id.isEmpty || id.hasPrefix("#") { continue }
                    guard valid(id) else { throw ExperimentError(.usage, "\(p):\(n + 1): '\(id)' is not a valid task id") }
                    ids.append(id)
                }
            }
        }
        for id in ids where !valid(id) { throw ExperimentError(.usage, "task id '\(id)' is not valid (letters, digits, '.', '_', '-')") }
        guard !ids.isEmpty else { throw ExperimentError(.usage, "benchmark: \(benchmark) needs its task ids: `tasks: [...]` or `tasks_file: FILE`") }
        let unique = Array(Set(ids)).sorted()
        guard unique.count == ids.count else { throw ExperimentError(.usage, "the task list names an id twice") }
        return unique
    }
}

/// Checks that a benchmark's tool and keys are there, with the install hint when not.
enum ToolCheck {
    /// The first line `binary --version` prints (within 30 s), or nil.
    static func version(of binary: String) -> String? {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["--version"]
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        p.standardInput = FileHandle.nullDevice
        do { try p.run() } catch { return nil }
        let deadline = Date().addingTimeInterval(30)
        while p.isRunning && Date() < deadline { usleep(20_000) }
        if p.isRunning {
            kill(p.processIdentifier, SIGKILL)
            p.waitUntilExit()
            return nil
        }
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        guard p.terminationStatus == 0, let line = text.split(separator: "\n").first else { return nil }
        return String(line).trimmingCharacters(in: .whitespaces)
    }

    static func environment(_ names: [String], for what: String) throws {
        let missing = names.filter { ProcessInfo.processInfo.environment[$0]?.isEmpty ?? true }
        guard missing.isEmpty else {
            throw ExperimentError(.usage, "\(missing.joined(separator: ", ")) \(missing.count == 1 ? "is" : "are") not set: \(what) needs \(missing.count == 1 ? "it" : "them") (runner.env_pass lists the variables passed into its sandbox); export \(missing[0])=... before running autoharness")
        }
    }

    /// The directories of the graders' sandbox's PATH (policies/base.yaml's env).
    static let sandboxPath = ["/usr/local/bin", "/usr/bin", "/bin"]

    /// BIRD-Interact's DB environment gives each task its own database from a template with
    /// PostgreSQL's client programs, run by name (BIRD-Interact-ADK/shared/db_utils.py,
    /// _drop_and_create_db and drop_task_db, at 451fe2c3518ee1cf908d8139e2913483bd519381:
    /// psql, dropdb, createdb); it runs in the graders' sandbox, which has the host's /usr.
    static func postgresClients() throws {
        let missing = ["psql", "createdb", "dropdb"].filter { name in
            !sandboxPath.contains { dir in
                var isDirectory: ObjCBool = false
                let p = dir + "/" + name
                return FileManager.default.fileExists(atPath: p, isDirectory: &isDirectory) && !isDirectory.boolValue
                    && FileManager.default.isExecutableFile(atPath: p)
            }
        }
        guard missing.isEmpty else {
            throw ExperimentError(.usage, """
                \(missing.joined(separator: ", ")) not found in \(sandboxPath.joined(separator: ", ")) (the PATH of the sandbox \
                where BIRD-Interact's DB environment runs): it runs psql, dropdb and createdb to give each task its own \
                database (BIRD-Interact-ADK/shared/db_utils.py); install PostgreSQL's client programs: \
                apt-get install postgresql-client (as BIRD-Interact's env/Dockerfile.bird_interact_eval does)
                """)
        }
    }

    /// Checks that `python` has every distribution `file` (a pip requirements file, e.g. the
    /// ADK's: google-adk, psycopg2-binary, litellm, ...) names, by distribution name through
    /// importlib.metadata, so a missing one is named now rather than as "services did not
    /// start" from inside a sandbox. `X-binary` is also satisfied by `X` (psycopg2 built from
    /// source). No file, no check.
    static func pythonRequirements(python: String, file: String) throws {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else { return }
        let names: [String] = text.split(separator: "\n").compactMap { raw in
            let line = raw.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
            guard let c = line.first, c.isLetter || c.isNumber else { return nil }  // options (-r, -e, --index-url) and blanks
            let name = line.prefix { $0.isLetter || $0.isNumber || "._-".contains($0) }
            return name.isEmpty ? nil : String(name)
        }
        guard !names.isEmpty else { return }
        let probe = """
            import importlib.metadata as m, sys
            def has(n):
                for d in (n, n[:-len("-binary")] if n.endswith("-binary") else None):
                    try:
                        if d: m.version(d); return True
                    except m.PackageNotFoundError:
                        pass
                return False
            print(" ".join(n for n in sys.argv[1:] if not has(n)))
            """
        let p = Process()
        p.executableURL = URL(fileURLWithPath: locate(python) ?? python)
        p.arguments = ["-c", probe] + names
        let out = Pipe()
        p.standardOutput = out
        p.standardError = FileHandle.nullDevice
        do { try p.run() } catch { throw ExperimentError(.usage, "\(python): cannot run it to check \(file): \(error)") }
        let missing = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self).split(separator: " ").map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { !$0.isEmpty }
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw ExperimentError(.usage, "\(python) could not check \(file) (exit \(p.terminationStatus))") }
        guard missing.isEmpty else {
            throw ExperimentError(.usage, "\(python) lacks \(missing.joined(separator: ", ")), named in \(file): install them into that Python (\(python) -m pip install -r \(file)) or name the Python that has them (--tool, runner.command)")
        }
    }

    /// Finds `name` on the supervisor's PATH (or takes a path), resolved; nil if absent.
    static func locate(_ name: String) -> String? {
        func executableFile(_ p: String) -> Bool {
            var isDirectory: ObjCBool = false
            return FileManager.default.fileExists(atPath: p, isDirectory: &isDirectory) && !isDirectory.boolValue
                && FileManager.default.isExecutableFile(atPath: p)
        }
        guard !name.isEmpty else { return nil }
        if name.contains("/") { return executableFile(name) ? name : nil }
        for dir in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin").split(separator: ":") {
            let p = "\(dir)/\(name)"
            if executableFile(p) { return p }
        }
        return nil
    }

    /// Where a tool is installed, to bind read-only: for `X/bin/tool` inside a Python
    /// virtual environment (X/pyvenv.cfg), X; otherwise the executable's directory.
    /// Its interpreter's home too, when the venv's pyvenv.cfg names one outside /usr (uv's
    /// managed Pythons live under ~/.local/share/uv/python).
    ///
    /// The venv is looked for beside the path as given first: a venv's `bin/python` is a
    /// symbolic link to the base interpreter, and following it first would bind the base
    /// install without the venv, whose packages would then be missing in the sandbox. Then
    /// beside the resolved path (a link *into* a venv, e.g. ~/.local/bin/harbor).
    static func installRoots(of tool: String) -> [String] {
        guard let found = locate(tool) else { return [] }
        let absolute = found.hasPrefix("/") ? found : FileManager.default.currentDirectoryPath + "/" + found
        let real = URL(fileURLWithPath: absolute).resolvingSymlinksInPath().path
        func venv(of path: String) -> (String, String)? {
            // The directory holding bin/ must itself be reached without links for the bind.
            let parent = URL(fileURLWithPath: ((path as NSString).deletingLastPathComponent as NSString).deletingLastPathComponent)
                .resolvingSymlinksInPath().path
            return smallText(parent + "/pyvenv.cfg").map { (parent, $0) }
        }
        guard let (parent, cfg) = venv(of: absolute) ?? venv(of: real) else { return [(real as NSString).deletingLastPathComponent] }
        var roots = [parent]
        for line in cfg.split(separator: "\n") {
            let kv = line.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            if kv.count == 2, kv[0] == "home", !kv[1].hasPrefix("/usr") {
                roots.append(((URL(fileURLWithPath: kv[1]).resolvingSymlinksInPath().path) as NSString).deletingLastPathComponent)
            }
        }
        return roots + editableSources(venv: parent).filter { e in !roots.contains { e == $0 || e.hasPrefix($0 + "/") } }
    }

    /// Directories an editable install (`pip install -e`) put on the venv's path: the plain
    /// directory lines of its site-packages' `.pth` files (hatchling and setuptools in
    /// compat mode write the project's source directory there, e.g. tau2-bench's src/).
    /// Import-hook `.pth` lines (`import ...`) are not followed.
    static func editableSources(venv: String) -> [String] {
        let fm = FileManager.default
        var out: [String] = []
        for lib in ["lib", "lib64"] {
            for python in ((try? fm.contentsOfDirectory(atPath: venv + "/" + lib)) ?? []).sorted() where python.hasPrefix("python") {
                let site = venv + "/" + lib + "/" + python + "/site-packages"
                for pth in ((try? fm.contentsOfDirectory(atPath: site)) ?? []).sorted() where pth.hasSuffix(".pth") {
                    guard let text = smallText(site + "/" + pth) else { continue }
                    for line in text.split(separator: "\n").map({ $0.trimmingCharacters(in: .whitespaces) }) where line.hasPrefix("/") {
                        var isDirectory: ObjCBool = false
                        let real = URL(fileURLWithPath: line).resolvingSymlinksInPath().path
                        if fm.fileExists(atPath: real, isDirectory: &isDirectory), isDirectory.boolValue, !out.contains(real) { out.append(real) }
                    }
                }
            }
        }
        return out
    }

    /// A venv's pyvenv.cfg or a .pth file: a few lines; nil when unreadable or over 64 KiB.
    static func smallText(_ path: String) -> String? {
        guard case .success(let bytes) = InputFile.read(path, cap: 64 << 10) else { return nil }
        return String(validating: bytes, as: UTF8.self)
    }

    /// The interpreter named by a script's `#!` line (`#!/usr/bin/env python3` gives python3).
    static func interpreter(of tool: String) -> String? {
        // Only the first line: the tool may be a binary of many megabytes.
        guard let found = locate(tool), let data = InputFile.prefix(found, count: 256) else { return nil }
        let head = String(decoding: data, as: UTF8.self)
        guard head.hasPrefix("#!"), let line = head.dropFirst(2).split(separator: "\n").first else { return nil }
        let words = line.split(separator: " ").map(String.init)
        guard let first = words.first else { return nil }
        return first.hasSuffix("/env") ? words.dropFirst().first : first
    }

    static func tool(_ argv: [String]?, default name: String, hint: String) throws -> [String] {
        let argv = argv ?? [name]
        guard let first = argv.first, locate(first) != nil else {
            throw ExperimentError(.usage, "\(argv.first ?? name) not found (runner.command: \(argv.joined(separator: " "))): \(hint)")
        }
        return argv
    }
}
