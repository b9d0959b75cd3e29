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

    /// What a node's check compares before it is given work (`worker --check
    /// --check-databases`): every template database the supervisor fingerprinted, on the
    /// node's server, reached as a request's run would reach it. Of the run's environment and
    /// `env_pass` only the login's variables go: the check is not sealed to a node as a
    /// held-out request is.
    public var databaseCheck: BirdDatabases.Check {
        let names = BirdDatabases.Login.variables
        return .init(socketDirectory: postgresSocketDirectory, environment: environment.filter { v in names.contains { v.hasPrefix($0 + "=") } },
                     envPass: tool.envPass.filter(names.contains), databases: databases.keys.sorted())
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
    /// orchestrator (the DB environment grades, the user simulator answers) and the files at
    /// its top level, and autoharness's four bird scripts. Fingerprinted: every template
    /// database the tasks copy, on the supervisor's server (`BirdDatabases`). Throws when a
    /// part is missing: a comparison over less would check less.
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
            // The ADK's own top level too (its settings and start-up files: the runs start there).
            files += FileSystem.names(in: adkDirectory).map { adkDirectory + "/" + $0 }.filter { path in
                var st = stat()
                return lstat(path, &st) == 0 && FileSystem.isRegular(st)
            }
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

    /// How the graders reach PostgreSQL: `pg_host`, and PG_PORT, PG_USER and PG_PASSWORD as
    /// the graders get them: from the run's environment, else (named by `env_pass`) from this
    /// process's, else the ADK's defaults (shared/db_utils.py: 5432, root, 123123).
    public var postgresLogin: BirdDatabases.Login {
        .init(socketDirectory: postgresSocketDirectory ?? "", environment: environment, envPass: tool.envPass)
    }
}

/// Fingerprints of PostgreSQL databases: what a task's grading reads of one, so that two
/// servers loaded from the same dump agree and a difference that could change a result does
/// not: the schema as pg_dump writes it (tables with their types, defaults, constraints and
/// indexes; views, functions, triggers, rules, row security, enum labels, extensions), every
/// table's and materialized view's rows whatever order they lie in on disk, each sequence's
/// position, and the database's encoding, collation and settings with the server's major
/// version.
public enum BirdDatabases {
    public struct Login: Sendable, Equatable {
        public var socketDirectory: String
        public var port: Int
        public var user: String
        public var password: String

        /// The variables a login is read from.
        public static let variables = ["PG_PORT", "PG_USER", "PG_PASSWORD"]

        /// PG_PORT, PG_USER and PG_PASSWORD as the graders get them: from the run's
        /// `environment`, else (named by `envPass`) from this process's, else the ADK's
        /// defaults (shared/db_utils.py: 5432, root, 123123).
        public init(socketDirectory: String, environment: [String], envPass: [String]) {
            func value(_ key: String) -> String? {
                environment.last { $0.hasPrefix(key + "=") }.map { String($0.dropFirst(key.count + 1)) }
                    ?? (envPass.contains(key) ? getenv(key).map { String(cString: $0) } : nil)
            }
            self.socketDirectory = socketDirectory
            port = value("PG_PORT").flatMap(Int.init) ?? 5432
            user = value("PG_USER") ?? "root"
            password = value("PG_PASSWORD") ?? "123123"
        }
    }

    /// The databases a node fingerprints in its check, and how its graders would log in (the
    /// run's environment may hold PG_PASSWORD: this travels on the check's stdin, never in an
    /// argv a node's other users could read).
    public struct Check: Codable, Sendable, Equatable {
        public var socketDirectory: String
        public var environment: [String]
        public var envPass: [String]
        public var databases: [String]

        /// Each database's fingerprint on this host's server.
        public func fingerprints() throws(BenchmarkError) -> [String: String] {
            try BirdDatabases.fingerprints(databases, login: Login(socketDirectory: socketDirectory, environment: environment, envPass: envPass))
        }
    }

    /// Per database, three SHA-256s: of the server's major version, the database's encoding,
    /// collation and locale, the defaults a session starts with (postgresql.conf, ALTER SYSTEM,
    /// the database's and the login's settings) and the extensions' versions; of its rows and
    /// sequences (PostgreSQL computes both, text output fixed by the session's settings: float
    /// digits, date and interval styles, time zone, bytea, money); and of `pg_dump
    /// --schema-only` (in UTC) without the lines that name its version, its per-dump restrict
    /// key and its session settings (another pg_dump's preamble differs). Throws naming the
    /// database and psql's or pg_dump's words when one cannot be read.
    public static func fingerprints(_ databases: [String], login: Login) throws(BenchmarkError) -> [String: String] {
        guard let psql = clientPath("psql"), let pgDump = clientPath("pg_dump") else {
            throw BenchmarkError(.configuration, "bird-interact: no psql and pg_dump (/usr/lib/postgresql/*/bin or /usr/bin) to fingerprint the template databases with")
        }
        let environment = ["PATH": "/usr/bin:/bin", "LANG": "C", "PGTZ": "UTC", "PGCONNECT_TIMEOUT": "30", "PGPASSWORD": login.password]
        let connection = ["-h", login.socketDirectory, "-p", String(login.port), "-U", login.user, "-d"]
        var out: [String: String] = [:]
        for db in databases {
            let where_ = "fingerprinting \(db) on the server at \(login.socketDirectory) (port \(login.port))"
            func hashes(_ argv: [String], input: String?, count: Int) throws(BenchmarkError) -> [String] {
                let finished: ChildProcess.Finished
                do { finished = try ChildProcess.run(argv, environment: environment, input: input, timeout: 600) } catch {
                    throw BenchmarkError(.io, "bird-interact: \(where_)", cause: error)
                }
                // Only the hashes count: a server's warning (a collation version, say) is not one.
                let lines = finished.output.split(separator: "\n").map(String.init).filter { $0.count == 64 && $0.allSatisfy(\.isHexDigit) }
                guard finished.succeeded, lines.count == count else {
                    let why = finished.timedOut ? "no answer in 600 s" : String(finished.output.suffix(400))
                    throw BenchmarkError(.io, "bird-interact: \(where_): \(why)")
                }
                return lines
            }
            let data = try hashes([psql] + connection + [db, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"], input: script, count: 2)
            let schema = try hashes(["/bin/bash", "-c", dumpScript, "bash", pgDump] + connection + [db], input: nil, count: 1)
            out[db] = (data + schema).joined(separator: ":")
        }
        return out
    }

    static let script = """
        SET extra_float_digits TO 1; SET DateStyle TO ISO, YMD; SET IntervalStyle TO postgres; SET TimeZone TO 'UTC'; SET bytea_output TO hex;
        SET lc_monetary TO 'C';
        SELECT encode(sha256(convert_to(concat_ws('|', current_setting('server_version_num')::int / 10000, pg_encoding_to_char(d.encoding), d.datcollate, d.datctype,
                                                  to_jsonb(d) ->> 'datlocprovider', to_jsonb(d) ->> 'daticulocale', to_jsonb(d) ->> 'datlocale',
                                                  (SELECT string_agg(name || '=' || reset_val, ',' ORDER BY name) FROM pg_settings
                                                     WHERE category LIKE 'Client Connection Defaults%' AND name NOT IN ('lc_messages', 'client_encoding')),
                                                  (SELECT string_agg(extname || ':' || extversion, ',' ORDER BY extname) FROM pg_extension)), 'UTF8')), 'hex')
          FROM pg_database d WHERE d.datname = current_database();
        SELECT 'SELECT encode(sha256(convert_to(coalesce(string_agg(x, '','' ORDER BY x COLLATE "C"), ''''), ''UTF8'')), ''hex'') FROM ('
               || coalesce(string_agg(CASE WHEN c.relkind = 'S'
                   THEN format('SELECT %L || '':'' || last_value || '':'' || is_called AS x FROM %I.%I', quote_ident(n.nspname) || '.' || quote_ident(c.relname), n.nspname, c.relname)
                   WHEN c.relkind = 'm' AND NOT c.relispopulated THEN format('SELECT %L || '':unpopulated'' AS x', quote_ident(n.nspname) || '.' || quote_ident(c.relname))
                   ELSE format('SELECT %L || '':'' || count(*) || '':'' || encode(sha256(convert_to(coalesce(string_agg(h, '''' ORDER BY h COLLATE "C"), ''''), ''UTF8'')), ''hex'') AS x '
                               'FROM (SELECT encode(sha256(convert_to(t::text, ''UTF8'')), ''hex'') AS h FROM %I.%I AS t) AS s',
                               quote_ident(n.nspname) || '.' || quote_ident(c.relname), n.nspname, c.relname) END,
                   ' UNION ALL ' ORDER BY n.nspname COLLATE "C", c.relname COLLATE "C"), 'SELECT NULL::text AS x')
               || ') AS relations'
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE c.relkind IN ('r', 'p', 'm', 'S') AND c.relpersistence <> 't'
            AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg_toast%' \\gexec

        """

    /// pg_dump's schema, hashed: its version lines, the random key PostgreSQL's dumps carry
    /// since 15.14 (`\restrict`) and its session settings are not part of it.
    static let dumpScript = #"""
        set -o pipefail
        pg_dump=$1; shift
        "$pg_dump" "$@" --schema-only --no-owner --no-privileges \
            | grep -v -E -e '^-- Dumped (from|by) ' -e '^\\(un)?restrict ' -e '^SET ' -e '^SELECT pg_catalog\.set_config\(' | sha256sum | cut -c1-64
        """#

    /// Debian's newest server-side client `name`, else /usr/bin's.
    static func clientPath(_ name: String) -> String? {
        binDirectory(having: [name]).map { $0 + "/" + name } ?? (access("/usr/bin/" + name, X_OK) == 0 ? "/usr/bin/" + name : nil)
    }

    /// Debian's newest PostgreSQL binaries directory (/usr/lib/postgresql/<version>/bin) that
    /// holds every program of `programs`, or nil.
    public static func binDirectory(having programs: [String]) -> String? {
        let root = "/usr/lib/postgresql"
        let versions = FileSystem.names(in: root).compactMap(Int.init).sorted(by: >)
        return versions.map { "\(root)/\($0)/bin" }.first { dir in programs.allSatisfy { access(dir + "/" + $0, X_OK) == 0 } }
    }
}
