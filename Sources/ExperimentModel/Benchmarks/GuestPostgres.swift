import Benchmark
import Foundation
import SupervisorIO

/// A PostgreSQL server of the guest's own, for bird-interact: the task databases a held-out
/// task reads and writes, and the cluster-wide state it moves (WAL position, statistics,
/// object ids, the next database's oid), live in guest memory and go with the VM. On the host
/// they were the operator's server's, which later train tasks query.
///
/// The host dumps, from the operator's server, each database the benchmark's tasks name
/// (`<db>_template`, every task's, not only the held-out ones'), without owners or grants;
/// the dumps are shared read-only. In the guest, `vm-guest` makes a cluster in guest memory
/// (`initdb` as the host's postgres user, the graders' user and password, sockets only),
/// starts `postgres` at the socket directory and port the config names, so the same adapter
/// reaches it unchanged, and restores the dumps (template databases stay templates). No
/// server of ours runs on the host.
public struct GuestPostgres: Codable, Sendable, Equatable {
    public struct Database: Codable, Sendable, Equatable {
        public var name: String
        /// The dump, read-only in the guest.
        public var dump: String
        public var isTemplate: Bool
    }
    public var databases: [Database]
    public var socketDirectory: String
    public var port: Int
    public var user: String
    public var password: String
    /// The host's postgres (else nobody) user: the guest's server runs as this id.
    public var uid: UInt32
    public var gid: UInt32
    public var binDirectory: String

    /// The operator's server, as the config reaches it.
    struct Source {
        var socketDirectory: String
        var port: Int
        var user: String
        var password: String
    }

    /// Debian's newest PostgreSQL server binaries (/usr/lib/postgresql/<version>/bin), which
    /// the guest runs from the shared /usr.
    static func serverBinaries() throws -> String {
        guard let bin = BirdDatabases.binDirectory(having: ["initdb", "postgres", "pg_dump"]) else {
            throw ExperimentError(.state, "held-out VM: bird-interact's databases run in the guest on this host's PostgreSQL server binaries, and /usr/lib/postgresql/*/bin has no initdb, postgres and pg_dump (apt-get install postgresql)")
        }
        return bin
    }

    /// Dumps every database of `databases` from `source` into `directory` (made by the caller,
    /// shared with the guest at `guestDirectory`). Throws `ExperimentError(.state)` with the
    /// failing step's output.
    static func dump(from source: Source, databases: [String], into directory: String, guestDirectory: String,
                     log: (@Sendable (String) -> Void)?) throws -> GuestPostgres {
        let bin = try serverBinaries()
        guard let pw = getpwnam("postgres") ?? getpwnam("nobody") else {
            throw ExperimentError(.state, "held-out VM: no postgres or nobody user for the guest's PostgreSQL server to run as")
        }
        let start = monotonicNow()
        let env = ["PATH": "/usr/bin:/bin", "LANG": "C", "PGCONNECT_TIMEOUT": "30", "PGPASSWORD": source.password]
        let remote = ["-h", source.socketDirectory, "-p", String(source.port), "-U", source.user]
        var out: [Database] = []
        for (k, db) in databases.enumerated() {
            let istemplate = try step("reading \(db) on the operator's server", [bin + "/psql"] + remote + ["-d", "postgres", "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1",
                                      "-c", "SELECT datistemplate FROM pg_database WHERE datname = '\(db.replacingOccurrences(of: "'", with: "''"))'"], env: env)
            guard !istemplate.isEmpty else {
                throw ExperimentError(.state, "held-out VM: the tasks name the database \(db), which the server at \(source.socketDirectory) (port \(source.port)) does not have")
            }
            let file = "\(k).sql"
            try step("pg_dump \(db)", [bin + "/pg_dump"] + remote + ["-d", db, "--no-owner", "--no-privileges", "-f", directory + "/" + file], env: env)
            out.append(Database(name: db, dump: guestDirectory + "/" + file, isTemplate: istemplate == "t"))
        }
        log?("held-out VM: \(databases.count) database(s) dumped from the server at \(source.socketDirectory) for the guest's own, in \(String(format: "%.1f", monotonicNow() - start)) s")
        return GuestPostgres(databases: out, socketDirectory: source.socketDirectory, port: source.port, user: source.user, password: source.password,
                             uid: pw.pointee.pw_uid, gid: pw.pointee.pw_gid, binDirectory: bin)
    }

    static let defaultEnvironment = ["PATH": "/usr/bin:/bin", "LANG": "C"]

    /// Runs `argv`; its output, trimmed, or a thrown `ExperimentError(.state)` naming `what`.
    @discardableResult
    static func step(_ what: String, _ argv: [String], env: [String: String] = defaultEnvironment) throws -> String {
        let r = try run(argv, env: env)
        guard r.status == 0 else {
            throw ExperimentError(.state, "PostgreSQL for the held-out VM: \(what) failed (exit \(r.status)): \(r.output.suffix(1500))")
        }
        return r.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func run(_ argv: [String], env: [String: String] = defaultEnvironment) throws -> (status: Int32, output: String) {
        let r = try ChildProcess.run(argv, environment: env)
        return (r.signaled ? 128 + r.status : r.status, r.output)
    }

    /// In the guest: a cluster in guest memory, the server started on it as the postgres
    /// user at the config's socket directory and port, the dumps restored; returns once every
    /// database is there. The server's log goes to the guest's console (the operator's, kept
    /// when a phase fails).
    func start(log: @escaping @Sendable (String) -> Void) throws {
        let start = monotonicNow()
        let data = "/run/ahvm-postgres"
        // initdb needs the user to have a name: the guest's /etc holds copies only.
        if getpwuid(uid) == nil {
            let line = "ahvm-postgres:x:\(uid):\(gid)::/nonexistent:/usr/sbin/nologin\n"
            guard let f = fopen("/etc/passwd", "a") else { throw ExperimentError(.io, "guest PostgreSQL: /etc/passwd: \(ErrnoName.describe(errno))") }
            fputs(line, f)
            fclose(f)
        }
        let pwfile = "/run/ahvm-postgres-pw"
        try? FileManager.default.createDirectory(atPath: String(socketDirectory[..<(socketDirectory.lastIndex(of: "/") ?? socketDirectory.startIndex)]),
                                                 withIntermediateDirectories: true)
        for (path, mode) in [(data, mode_t(0o700)), (socketDirectory, 0o755)] {
            guard mkdir(path, mode) == 0 || (errno == EEXIST && path == socketDirectory), chown(path, uid, gid) == 0 else {
                throw ExperimentError(.io, "guest PostgreSQL: \(path): \(ErrnoName.describe(errno)) (pg_host must be a directory the guest can make, not one inside a shared one)")
            }
        }
        try AtomicFile.write(Array((password + "\n").utf8), to: pwfile, mode: 0o600)
        chown(pwfile, uid, gid)
        let asServer = ["/usr/bin/setpriv", "--reuid=\(uid)", "--regid=\(gid)", "--clear-groups", "--"]
        try Self.step("initdb", asServer + [binDirectory + "/initdb", "-D", data, "-U", user, "--auth-local=scram-sha-256", "--pwfile=" + pwfile,
                                            "--auth-host=reject", "-E", "UTF8", "--locale=C", "--no-sync"])
        unlink(pwfile)
        let server = Process()
        server.executableURL = URL(fileURLWithPath: asServer[0])
        server.arguments = Array(asServer.dropFirst()) + [binDirectory + "/postgres", "-D", data, "-c", "listen_addresses=",
                                                          "-c", "unix_socket_directories=" + socketDirectory, "-c", "port=\(port)",
                                                          "-c", "fsync=off", "-c", "logging_collector=off"]
        server.environment = Self.defaultEnvironment
        server.standardInput = FileHandle.nullDevice
        try server.run()
        let deadline = monotonicNow() + 300
        while try Self.run([binDirectory + "/pg_isready", "-q", "-h", socketDirectory, "-p", String(port)]).status != 0 {
            guard server.isRunning, monotonicNow() < deadline else {
                throw ExperimentError(.state, "guest PostgreSQL did not start (its log is on the console)")
            }
            usleep(100_000)
        }
        var env = Self.defaultEnvironment
        env["PGPASSWORD"] = password
        let local = [binDirectory + "/psql", "-h", socketDirectory, "-p", String(port), "-U", user, "-X", "-q", "-v", "ON_ERROR_STOP=1"]
        for db in databases {
            let quoted = "\"" + db.name.replacingOccurrences(of: "\"", with: "\"\"") + "\""
            try Self.step("creating \(db.name)", local + ["-d", "postgres", "-c", "CREATE DATABASE \(quoted) TEMPLATE template0"], env: env)
            try Self.step("restoring \(db.name)", local + ["-d", db.name, "-f", db.dump], env: env)
            if db.isTemplate {
                try Self.step("marking \(db.name) a template", local + ["-d", "postgres", "-c", "ALTER DATABASE \(quoted) WITH IS_TEMPLATE true"], env: env)
            }
        }
        log("guest PostgreSQL: \(databases.count) database(s) ready in \(String(format: "%.1f", monotonicNow() - start)) s")
    }
}
