import Benchmark
import Foundation

/// `bird-interact`: BIRD-Interact-ADK's orchestrator with agent.py as the system agent, its
/// user simulator and DB environment beside it, PostgreSQL through a Unix socket.
struct BirdInteractKind: BenchmarkKind {
    static let hint = "git clone https://github.com/bird-bench/BIRD-Interact, set up BIRD-Interact-ADK as its README says (venv, dataset with the ground truth merged, PostgreSQL), then give the checkout as --repo (bird_repo)"
    let name = "bird-interact"
    let defaultTool: String? = "python3"
    /// With `executor: ray` each node grades on its own PostgreSQL, whose template databases
    /// must be the supervisor's (`BirdNode`).
    let shardsOnNodes = true
    var installHint: String { Self.hint }
    func notInVM(_ config: ExperimentConfig) -> String? { nil }

    /// A PostgreSQL server of the guest's own, holding copies of the task databases.
    func guestServices(_ config: ExperimentConfig, adapter: any BenchmarkAdapter, inputs: any GuestInputDirectories,
                       log: (@Sendable (String) -> Void)?) throws -> GuestServices {
        guard let bird = adapter as? BirdAdapter, let socket = bird.postgresSocketDirectory else { return GuestServices() }
        let dir = try inputs.directory("postgres")
        var services = GuestServices()
        services.postgres = try GuestPostgres.dump(
            from: .init(socketDirectory: socket, port: settings(config).pgPort ?? 5432, user: settings(config).pgUser ?? "root",
                        password: settings(config).pgPassword ?? "123123"),  // the ADK's default (shared/db_utils.py)
            databases: bird.templateDatabases, into: dir.host, guestDirectory: dir.guest, log: log)
        return services
    }

    struct Settings: BenchmarkSettings {
        /// The user simulator's model.
        var userModel: String?
        /// a-interact or c-interact.
        var mode: String?
        var patience: Int?
        var birdRepo: String?
        var birdPythonBin: String?
        var birdDataPath: String?
        var systemAgentPort: Int?
        var userSimPort: Int?
        var dbEnvPort: Int?
        /// The directory of PostgreSQL's Unix socket.
        var pgHost: String?
        var pgPort: Int?
        var pgUser: String?
        var pgPassword: String?
        static var keys: [ConfigKey<Self>] {
            let port = 1024...65535
            return [.text("user_model", \.userModel, "The user simulator's model."),
                    .choice("mode", \.mode, ["a-interact", "c-interact"], "BIRD-Interact's mode."),
                    .integer("patience", \.patience, 0...100, "The user simulator's patience (extra turns)."),
                    .text("bird_repo", \.birdRepo, "The BIRD-Interact checkout (with BIRD-Interact-ADK)."),
                    .text("bird_python_bin", \.birdPythonBin, "The Python that runs the ADK (python3 when unset)."),
                    .text("bird_data_path", \.birdDataPath, "The tasks' JSONL (the ADK's own when unset)."),
                    .integer("system_agent_port", \.systemAgentPort, port, "The ADK's system agent port (6100 when unset)."),
                    .integer("user_sim_port", \.userSimPort, port, "The ADK's user simulator port (6101 when unset)."),
                    .integer("db_env_port", \.dbEnvPort, port, "The ADK's database environment port (6102 when unset)."),
                    .text("pg_host", \.pgHost, "The directory of PostgreSQL's Unix socket (required)."),
                    .integer("pg_port", \.pgPort, 1...65535, "PostgreSQL's port (5432 when unset)."),
                    .text("pg_user", \.pgUser, "PostgreSQL's user (the ADK's default when unset)."),
                    .text("pg_password", \.pgPassword, "PostgreSQL's password (the ADK's default when unset).")]
        }
    }

    func initialize(_ o: InitOptions, tool: String, layout: ExperimentLayout) throws -> InitValues {
        let fm = FileManager.default
        guard let r = o.repo ?? ProcessInfo.processInfo.environment["BIRD_REPO"] else {
            throw ExperimentError(.usage, "bird-interact needs the BIRD-Interact checkout: --repo /path/to/BIRD-Interact (or export BIRD_REPO); \(Self.hint)")
        }
        let birdRepo = r.hasPrefix("/") ? r : fm.currentDirectoryPath + "/" + r
        guard fm.fileExists(atPath: birdRepo + "/orchestrator/runner.py") || fm.fileExists(atPath: birdRepo + "/BIRD-Interact-ADK/orchestrator/runner.py") else {
            throw ExperimentError(.usage, "\(birdRepo) has no BIRD-Interact-ADK (orchestrator/runner.py): \(Self.hint)")
        }
        try ToolCheck.postgresClients()
        let adk = fm.fileExists(atPath: birdRepo + "/BIRD-Interact-ADK/orchestrator/runner.py") ? birdRepo + "/BIRD-Interact-ADK" : birdRepo
        try ToolCheck.pythonRequirements(python: tool, file: adk + "/requirements.txt")
        return InitValues(dataset: o.dataset ?? "lite", placeholders: ["bird_repo": birdRepo])
    }

    func adapter(_ config: ExperimentConfig, root: String, checkTools: Bool) throws -> any BenchmarkAdapter {
        try config.birdAdapter(root: root, checkTools: checkTools)
    }
}

extension ExperimentConfig {
    func birdAdapter(root: String, checkTools: Bool) throws -> BirdAdapter {
        func path(_ p: String) -> String { p.hasPrefix("/") ? p : root + "/" + p }
        let upstream = BirdInteractKind().settings(self)
        let argv = runner.command ?? [upstream.birdPythonBin ?? "python3"]
        if checkTools {
            _ = try ToolCheck.tool(argv, default: "python3", hint: "runner.command must be the Python with the BIRD-Interact-ADK requirements installed")
            try ToolCheck.environment(runner.envPass, for: "BIRD-Interact (the system agent's and the user simulator's model APIs)")
            try ToolCheck.postgresClients()
        }
        guard let repo = upstream.birdRepo else {
            throw ExperimentError(.usage, "bird_repo: missing; \(BirdInteractKind.hint)")
        }
        var adk = URL(fileURLWithPath: path(repo)).resolvingSymlinksInPath().path
        if FileManager.default.fileExists(atPath: adk + "/BIRD-Interact-ADK/orchestrator/runner.py") { adk += "/BIRD-Interact-ADK" }
        if checkTools { try ToolCheck.pythonRequirements(python: argv[0], file: adk + "/requirements.txt") }
        let set = dataset ?? "lite"
        let data = URL(fileURLWithPath: upstream.birdDataPath.map(path) ?? adk + "/bird-interact-\(set)/bird_interact_data.jsonl")
            .resolvingSymlinksInPath().path
        guard let scripts = runner.scripts else {
            throw ExperimentError(.usage, "runner.scripts: missing; it names the directory of autoharness_bird_services.py and autoharness_bird_run.py (templates/bird-interact)")
        }
        guard let pg = upstream.pgHost, pg.hasPrefix("/") else {
            throw ExperimentError(.usage, """
                pg_host: must be the directory of PostgreSQL's Unix socket (e.g. /run/bird-pg, with the BIRD container started \
                with -v /run/bird-pg:/var/run/postgresql): the DB environment runs in a sandbox whose only network is the egress proxy
                """)
        }
        try RunnerBinds.refuse(toolBinds, exposing: RunnerBinds.Protected.bird(data: data, adk: adk))
        var adapter: BirdAdapter
        do {
            adapter = try BirdAdapter(adkDirectory: adk, dataPath: data, scriptsDirectory: scripts, tool: toolSettings(argv))
        } catch {
            throw ExperimentError(.usage, error.message)
        }
        if let m = upstream.mode { adapter.mode = m }
        adapter.ports = (upstream.systemAgentPort ?? 6100, upstream.userSimPort ?? 6101, upstream.dbEnvPort ?? 6102)
        adapter.concurrency = maxConcurrency
        adapter.postgresSocketDirectory = pg
        var env = agentEnvironment() + ["DATASET=\(set)", "PATIENCE=\(upstream.patience ?? 3)", "PG_HOST=\(pg)"]
        if let m = agentModel, m != "none" { env.append("SYSTEM_AGENT_MODEL=\(m)") }
        if let m = upstream.userModel { env.append("USER_SIM_MODEL=\(m)") }
        if let x = upstream.pgPort { env.append("PG_PORT=\(x)") }
        if let x = upstream.pgUser { env.append("PG_USER=\(x)") }
        if let x = upstream.pgPassword { env.append("PG_PASSWORD=\(x)") }
        adapter.environment = env
        return adapter
    }
}

extension RunnerBinds.Protected {
    /// What a bind must not expose of bird-interact: its data file (gold SQL, test cases, the
    /// follow-ups), and its ADK checkout (its datasets, hidden knowledge), whose own
    /// virtualenv an operator may still bind.
    package static func bird(data: String, adk: String) -> [Self] {
        let exposes = "exposes the BIRD-Interact data or ADK directory (gold SQL, hidden knowledge) to agent.py; bind only the Python install"
        return [.init(path: data, what: exposes), .init(path: adk, what: exposes, inside: false)]
    }
}
