// `benchmark: bird-interact` on a worker node (`executor: ray`): the node has the BIRD-Interact
// ADK, the merged data file and autoharness's bird scripts at the supervisor's paths, and a
// PostgreSQL server of its own at the socket directory `pg_host` names, with the template
// databases the tasks copy. What decides a reward is compared before a request runs: the
// files by digest (the data file with its gold SQL and test cases, the ADK's code, the
// scripts), and the template databases a shard's tasks use by a fingerprint of their schema
// and rows, which the supervisor takes from its own server. The node's server holds each
// task's role and database while it runs, as the supervisor's does on one host: one run at a
// time on a node (`runsBesideItself`).

import Glibc
import SupervisorIO

/// bird-interact's settings as a node rebuilds its adapter (`BirdAdapter`).
public struct BirdNode: Codable, Sendable, Equatable {
    public var adkDirectory: String
    public var dataPath: String
    public var scriptsDirectory: String
    public var tool: ToolSettings
    public var mode: String
    public var concurrency: Int
    /// The system agent's, the user simulator's and the DB environment's ports.
    public var ports: [Int]
    public var postgresSocketDirectory: String
    public var environment: [String]
    /// The files a reward depends on (listed by the supervisor from its own copies).
    public var digestedFiles: [String]
    /// Each template database's fingerprint on the supervisor's server (`BirdDatabases`).
    public var databases: [String: String]

    /// The adapter for `ids`, read from this node's own data file; an id it lacks is refused.
    func adapter(ids: [String]) throws(BenchmarkError) -> BirdAdapter {
        var a = try BirdAdapter(adkDirectory: adkDirectory, dataPath: dataPath, scriptsDirectory: scriptsDirectory, tool: tool)
        let known = Set(a.taskIDs)
        if let missing = ids.first(where: { !known.contains($0) }) {
            throw BenchmarkError(.invalidBenchmark, "bird-interact: no task \(missing.debugDescription) in \(dataPath)")
        }
        guard ports.count == 3 else { throw BenchmarkError(.configuration, "bird-interact: the request names \(ports.count) ports, not 3") }
        a.mode = mode
        a.concurrency = concurrency
        a.ports = (ports[0], ports[1], ports[2])
        a.postgresSocketDirectory = postgresSocketDirectory
        a.environment = environment
        return a
    }

    /// Why this node's template databases for `ids` are not the supervisor's, or nil. Each
    /// one the shard's tasks copy is fingerprinted on this node's server and compared.
    public func databaseMismatch(ids: [String], adapter: BirdAdapter) -> String? {
        let wanted = adapter.templateDatabases(of: ids)
        if let unknown = wanted.first(where: { databases[$0] == nil }) {
            return "the shard's tasks copy \(unknown), which the supervisor's fingerprints do not name"
        }
        let here: [String: String]
        do { here = try BirdDatabases.fingerprints(wanted, login: adapter.postgresLogin) } catch {
            return error.message
        }
        for db in wanted where here[db] != databases[db] {
            return "the template database \(db) on this node's server (fingerprint \((here[db] ?? "none").prefix(16))) is not the supervisor's (\((databases[db] ?? "none").prefix(16)))"
        }
        return nil
    }
}

extension BirdAdapter: RunsInShards {
    /// This adapter as a node rebuilds it (`NodeTool`). Digested: the data file (every task's
    /// gold SQL, test cases and follow-up), the `.py` files of the ADK's services and
    /// orchestrator (the DB environment grades, the user simulator answers), and autoharness's
    /// four bird scripts. Fingerprinted: every template database the tasks copy, on the
    /// supervisor's server. Throws when a part is missing: a comparison over less would check
    /// less.
    public var nodeTool: NodeTool {
        get throws(BenchmarkError) {
            guard let socket = postgresSocketDirectory else {
                throw BenchmarkError(.configuration, "bird-interact: pg_host is not set: a node's databases could not be compared")
            }
            var files = [dataPath] + Self.scripts.map { scriptsDirectory + "/" + $0 }
            let code = Self.adkCodeDirectories.flatMap { InstalledTree.pythonFiles(under: adkDirectory + "/" + $0) }
            guard code.contains(adkDirectory + "/db_environment/server.py") else {
                throw BenchmarkError(.invalidBenchmark, "bird-interact: no db_environment/server.py among \(adkDirectory)'s Python files (the graders a node's copy must match)")
            }
            files += code
            let databases = try BirdDatabases.fingerprints(templateDatabases, login: postgresLogin)
            return .bird(BirdNode(adkDirectory: adkDirectory, dataPath: dataPath, scriptsDirectory: scriptsDirectory, tool: tool, mode: mode,
                                  concurrency: concurrency, ports: [ports.system, ports.user, ports.db], postgresSocketDirectory: socket,
                                  environment: environment, digestedFiles: files, databases: databases))
        }
    }

    /// autoharness's scripts the two sandboxes run (templates/bird-interact).
    static let scripts = ["autoharness_bird_services.py", "autoharness_bird_run.py", "autoharness_bird_orchestrate.py", "autoharness_bird_roles.py"]
    /// The ADK's code: the orchestrator and system agent beside agent.py, the graders' services.
    static let adkCodeDirectories = ["db_environment", "orchestrator", "shared", "system_agent", "user_simulator"]

    /// The template databases `ids`' tasks copy, sorted.
    public func templateDatabases(of ids: [String]) -> [String] {
        Set(ids.compactMap { records[$0]?["selected_database"]?.string }).map { $0 + "_template" }.sorted()
    }

    /// How the graders reach PostgreSQL: `pg_host`, and PG_PORT, PG_USER and PG_PASSWORD from
    /// the run's environment, else the ADK's defaults (shared/db_utils.py: 5432, root, 123123).
    public var postgresLogin: BirdDatabases.Login {
        func value(_ key: String) -> String? {
            environment.last { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) }
        }
        return .init(socketDirectory: postgresSocketDirectory ?? "", port: value("PG_PORT").flatMap(Int.init) ?? 5432,
                     user: value("PG_USER") ?? "root", password: value("PG_PASSWORD") ?? "123123")
    }
}

/// Fingerprints of PostgreSQL databases: what a task's grading reads of one, its tables'
/// columns and rows, hashed whatever order the rows lie in on disk, so that two servers loaded
/// from the same dump agree and a row or a column changed, added or removed does not.
public enum BirdDatabases {
    public struct Login: Sendable, Equatable {
        public var socketDirectory: String
        public var port: Int
        public var user: String
        public var password: String
    }

    /// Per database, two SHA-256s that PostgreSQL computes: of the columns of every table
    /// outside its own schemas (schema, table, name, type, position), and of every such
    /// table's name, row count and the hash of its rows' hashes sorted (whatever order the rows
    /// lie in); text output fixed by the session's settings (float digits, date and interval
    /// styles, time zone, bytea). Throws naming the database and psql's words when one cannot
    /// be read.
    public static func fingerprints(_ databases: [String], login: Login) throws(BenchmarkError) -> [String: String] {
        guard let psql = psqlPath() else {
            throw BenchmarkError(.configuration, "bird-interact: no psql (/usr/lib/postgresql/*/bin or /usr/bin) to fingerprint the template databases with")
        }
        var out: [String: String] = [:]
        for db in databases {
            let finished: ChildProcess.Finished
            do {
                finished = try ChildProcess.run([psql, "-h", login.socketDirectory, "-p", String(login.port), "-U", login.user, "-d", db,
                                                 "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"],
                                                environment: ["PATH": "/usr/bin:/bin", "LANG": "C", "PGCONNECT_TIMEOUT": "30", "PGPASSWORD": login.password],
                                                input: script, timeout: 600)
            } catch {
                throw BenchmarkError(.io, "bird-interact: fingerprinting \(db)", cause: error)
            }
            let lines = finished.output.split(separator: "\n").map(String.init)
            guard finished.succeeded, lines.count == 2, lines.allSatisfy({ $0.count == 64 && $0.allSatisfy(\.isHexDigit) }) else {
                let why = finished.timedOut ? "no answer in 600 s" : String(finished.output.suffix(400))
                throw BenchmarkError(.io, "bird-interact: fingerprinting \(db) on the server at \(login.socketDirectory) (port \(login.port)): \(why)")
            }
            out[db] = lines.joined(separator: ":")
        }
        return out
    }

    static let script = """
        SET extra_float_digits TO 1; SET DateStyle TO ISO, YMD; SET IntervalStyle TO postgres; SET TimeZone TO 'UTC'; SET bytea_output TO hex;
        SELECT encode(sha256(convert_to(coalesce(string_agg(format('%s.%s.%s:%s:%s', table_schema, table_name, column_name, data_type, ordinal_position),
                                                           ',' ORDER BY table_schema, table_name, ordinal_position), ''), 'UTF8')), 'hex')
          FROM information_schema.columns WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND table_schema NOT LIKE 'pg_toast%';
        SELECT 'SELECT encode(sha256(convert_to(coalesce(string_agg(x, '','' ORDER BY x), ''''), ''UTF8'')), ''hex'') FROM ('
               || coalesce(string_agg(format('SELECT %L || '':'' || count(*) || '':'' || encode(sha256(convert_to(coalesce(string_agg(h, '''' ORDER BY h), ''''), ''UTF8'')), ''hex'') AS x '
                                             'FROM (SELECT encode(sha256(convert_to(t::text, ''UTF8'')), ''hex'') AS h FROM %I.%I AS t) AS s',
                                             n.nspname || '.' || c.relname, n.nspname, c.relname), ' UNION ALL ' ORDER BY n.nspname, c.relname),
                           'SELECT NULL::text AS x')
               || ') AS tables'
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%' \\gexec

        """

    /// Debian's newest server-side psql, else /usr/bin/psql.
    static func psqlPath() -> String? {
        let root = "/usr/lib/postgresql"
        let versions = FileSystem.names(in: root).compactMap(Int.init).sorted(by: >)
        return (versions.map { "\(root)/\($0)/bin/psql" } + ["/usr/bin/psql"]).first { access($0, X_OK) == 0 }
    }
}
