import Foundation
import Testing
import TestSupport

// bird-interact against Debian's real PostgreSQL: a private server (Unix socket only, in a
// private directory) that the stand-in ADK's DB environment reaches from the graders' sandbox
// through pg_host, as the ADK's does (per-task databases from <db>_template with psql, dropdb
// and createdb; submissions executed and compared with the gold SQL's results).

/// Debian's PostgreSQL server binaries (/usr/lib/postgresql/<version>/bin), newest first.
enum RealPostgres {
    static var binDirectory: String? {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []).compactMap(Int.init).sorted(by: >)
        return versions.map { "\(root)/\($0)/bin" }.first {
            FileManager.default.isExecutableFile(atPath: $0 + "/initdb") && FileManager.default.isExecutableFile(atPath: $0 + "/postgres")
        }
    }
    static var inCI: Bool { ProcessInfo.processInfo.environment["CI"] == "true" }
}

/// A PostgreSQL server of its own: initdb'd as an unprivileged user (postgres, else nobody)
/// in a private directory, listening only on a Unix socket there; stopped by its pid.
final class PostgresServer {
    let dir: TempDir
    let bin: String
    let data: String
    let socketDirectory: String
    let log: String
    static let user = "root", password = "123123"
    private let server = Process()

    init() throws {
        let bin = try #require(RealPostgres.binDirectory, "no PostgreSQL server in /usr/lib/postgresql/*/bin: apt-get install postgresql (scripts/bootstrap does)")
        let dir = try TempDir(mode: 0o711)
        (self.bin, self.dir) = (bin, dir)
        let (data, socketDirectory, log) = (dir.path + "/data", dir.path + "/sock", dir.path + "/server.log")
        (self.data, self.socketDirectory, self.log) = (data, socketDirectory, log)
        let pw = try #require(getpwnam("postgres") ?? getpwnam("nobody"), "no postgres or nobody user")
        let (uid, gid) = (pw.pointee.pw_uid, pw.pointee.pw_gid)
        for (path, mode) in [(data, 0o700), (socketDirectory, 0o755)] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false, attributes: [.posixPermissions: mode])
            chown(path, uid, gid)
        }
        let pwfile = try dir.file("pwfile", Self.password + "\n")
        chown(pwfile, uid, gid)
        chmod(pwfile, 0o600)
        let asUser = ["--reuid=\(uid)", "--regid=\(gid)", "--clear-groups", "--"]
        let initdb = try runProcess("/usr/bin/setpriv", asUser + [bin + "/initdb", "-D", data, "-U", Self.user, "--pwfile=" + pwfile,
                                                                  "--auth-local=scram-sha-256", "--auth-host=reject", "-E", "UTF8",
                                                                  "--locale=C", "--no-sync"])
        try #require(initdb.status == 0, "initdb: \(initdb.stdout)\(initdb.stderr)")
        FileManager.default.createFile(atPath: log, contents: nil)
        chown(log, uid, gid)
        server.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        // No TCP at all: the socket in a private directory is the only way in. DDL is logged
        // so a test can see what the graders did.
        server.arguments = asUser + [bin + "/postgres", "-D", data, "-c", "listen_addresses=", "-c", "unix_socket_directories=" + socketDirectory,
                                     "-c", "fsync=off", "-c", "log_statement=ddl", "-c", "logging_collector=off"]
        let logHandle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        server.standardOutput = logHandle
        server.standardError = logHandle
        server.standardInput = FileHandle.nullDevice
        try server.run()
        try logHandle.close()
        let deadline = Date().addingTimeInterval(60)
        while true {
            if try runProcess(bin + "/pg_isready", ["-q", "-h", socketDirectory]).status == 0 { break }
            guard server.isRunning, Date() < deadline else {
                stop()
                Issue.record("PostgreSQL did not start: \((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")
                throw PostgresError.notStarted
            }
            usleep(200_000)
        }
    }

    enum PostgresError: Error { case notStarted }

    /// psql as the server's superuser over the socket; stdout, unaligned, tuples only.
    func psql(_ db: String, _ sql: String) throws -> String {
        var env = ProcessInfo.processInfo.environment
        env["PGPASSWORD"] = Self.password
        let r = try runProcess(bin + "/psql", ["-h", socketDirectory, "-U", Self.user, "-d", db, "-X", "-q", "-A", "-t",
                                               "-v", "ON_ERROR_STOP=1", "-c", sql], environment: env)
        try #require(r.status == 0, "psql \(sql): \(r.stderr)")
        return r.stdout
    }

    /// Fast shutdown by pid (SIGINT), SIGKILL if it lingers.
    func stop() {
        guard server.processIdentifier > 0 else { return }
        if server.isRunning { kill(server.processIdentifier, SIGINT) }
        let deadline = Date().addingTimeInterval(30)
        while server.isRunning && Date() < deadline { usleep(100_000) }
        if server.isRunning { kill(server.processIdentifier, SIGKILL) }
        server.waitUntilExit()
    }

    deinit { stop() }
}

@Suite("Adapters: bird-interact on a real PostgreSQL", .serialized,
       .enabled(if: RealPostgres.binDirectory != nil || RealPostgres.inCI, "Debian's postgresql is not installed (CI installs it and fails without it)"))
struct RealPostgresTests {
    /// A tiny BIRD-style database on `pg` (the DB environment copies <db>_template for each
    /// task) and a bird-interact experiment whose graders reach it through pg_host. Ten tasks
    /// by default (`loop` needs both rewards among its train tasks); tests whose checks are per
    /// task take 4 (3 train, 1 held out): each graded task costs seconds of CPU.
    static func experiment(on pg: PostgresServer, tasks: Int? = nil) throws -> Experiment {
        _ = try pg.psql("postgres", "CREATE DATABASE space_template")
        var ddl = ""
        for (k, t) in BirdAgents.tables.enumerated() {
            ddl += "CREATE TABLE \(t) (id integer PRIMARY KEY, name text); "
            ddl += "INSERT INTO \(t) SELECT i * 7, '\(t)' || i FROM generate_series(1, \(k + 2)) AS i; "
        }
        _ = try pg.psql("space_template", ddl)
        _ = try pg.psql("postgres", "UPDATE pg_database SET datistemplate = true WHERE datname = 'space_template'")
        let exp = try BirdAdapterTests().make()
        let data = exp.temp.path + "/bird_interact_data.jsonl"
        try BirdPhaseTwo.data(count: tasks ?? 10).write(toFile: data, atomically: true, encoding: .utf8)
        try exp.uncomment("bird_data_path", data)
        try exp.set("pg_host", pg.socketDirectory)
        try exp.uncomment("pg_user", PostgresServer.user)
        try exp.uncomment("pg_password", "\"\(PostgresServer.password)\"")
        return exp
    }

    /// `body` with a server of its own and `experiment(on:)` over it, both gone after.
    static func withExperiment(_ body: (PostgresServer, Experiment) throws -> Void, tasks: Int? = nil) throws {
        try requireRoot()
        let pg = try PostgresServer()
        defer { pg.stop() }
        let exp = try experiment(on: pg, tasks: tasks)
        defer { exp.removeScratch() }
        try body(pg, exp)
    }

    @Test("init → prepare → benchmark → gate: the graders' sandbox works on a private PostgreSQL through pg_host, a Unix socket")
    func loop() throws { try Self.withExperiment(loop) }

    func loop(_ pg: PostgresServer, _ exp: Experiment) throws {

        // The stock system agent submits SELECT 1: its result is no table's count.
        let p = try exp.run(["prepare"], environment: BirdAdapterTests.env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        #expect(p.stdout.contains("baseline: 0/10 tasks pass"), "\(p.stdout)")

        // Failure records from BIRD's phases: the stock agent's train run fails phase 1 of
        // every task, with the DB environment's verdict on its last submission.
        let train = try exp.split().train
        let failing = try exp.run(["benchmark"], environment: BirdAdapterTests.env)
        try #require(failing.status == 0, "\(failing.stdout)\(failing.stderr)")
        let evidence = try #require(try exp.rows("failure_evidence").last?["tasks"] as? [String: [[String: Any]]])
        #expect(Set(evidence.keys) == Set(train))
        for id in train {
            #expect(evidence[id]?.map { $0["check"] as? String } == ["phase 1"] && evidence[id]?.first?["error_class"] as? String == "phase1_not_passed",
                    "\(id): \(evidence[id] ?? [])")
        }

        // SQL that differs from the gold text but gives its results: passes only when executed.
        let solver = BirdPhaseTwo.solver(followUp: "right", phase1: "SELECT count(id) FROM %s",
                                         phase2: "SELECT id FROM %s ORDER BY id DESC LIMIT 1", execute: true)
        try exp.setAgent(solver + """

            import os as _os
            print("PROBE pg_socket_visible=%s" % _os.path.exists("\(pg.socketDirectory)"), flush=True)
            """)
        let b = try exp.run(["benchmark"], environment: BirdAdapterTests.env)
        try #require(b.status == 0, "\(b.stdout)\(b.stderr)")
        let rewards = try exp.trainResults()
        for id in train {
            #expect((rewards[id] as? Double) == (BirdPhaseTwo.hasFollowUp(id) ? 1.0 : 0.7), "\(id): \(rewards[id] ?? "nil")")
        }
        let stdout = try #require(exp.traceFile(train[0], "tool.stdout"))
        // execute_sql ran on the task's copy of the template (k + 2 rows in table k).
        for id in train {
            let k = BirdAgents.tables.firstIndex { id.hasPrefix($0 + "_") }!
            #expect(stdout.contains("EXECUTE \(id) {\"result\": \"\(k + 2)\", \"success\": true}"), "\(id): \(stdout)")
        }
        // agent.py's sandbox has no way to the database.
        #expect(stdout.contains("PROBE pg_socket_visible=False"), "\(stdout)")

        let g = try exp.run(["gate"], environment: BirdAdapterTests.env)
        #expect(g.stdout.contains("ACCEPTED"), "\(g.stdout)\(g.stderr)")
        // The accepted agent.py passes phase 1 everywhere: those records are resolved; no
        // held-out task has one.
        let view = try #require(try JSONSerialization.jsonObject(with: Data(try String(contentsOfFile: exp.root + "/workspace/failures.json", encoding: .utf8).utf8)) as? [String: Any])
        let records = view["records"] as? [[String: Any]] ?? []
        #expect(records.filter { $0["check"] as? String == "phase 1" }.allSatisfy { $0["state"] as? String == "resolved" } && !records.isEmpty, "\(records)")
        let test = Set(try exp.split().test)
        #expect(records.allSatisfy { !test.contains($0["task"] as? String ?? "") })

        // The graders made each task's database and phase-1 snapshot and dropped them after.
        let log = try String(contentsOfFile: pg.log, encoding: .utf8)
        #expect(log.contains("CREATE DATABASE space__\(train[0])"), "\(log.suffix(2000))")
        #expect(log.contains("p1snap"), "\(log.suffix(2000))")
        let left = try pg.psql("postgres", "SELECT datname FROM pg_database ORDER BY datname").split(separator: "\n")
        #expect(left == ["postgres", "space_template", "template0", "template1"], "\(left)")
        #expect(exp.scratchMounts().isEmpty)
    }

    /// A system agent whose SQL, submitted through the DB environment as upstream's does, makes
    /// a role and an ALTER SYSTEM setting before it answers correctly.
    static let stateLeaker = BirdAgents.systemAgent(imports: "import re", session: """
            client.db("/submit", {"task_id": tid, "sql": "CREATE ROLE leak_%s LOGIN" % re.sub(r"[^a-z0-9]", "_", tid.lower())})
            client.db("/submit", {"task_id": tid, "sql": "ALTER SYSTEM SET work_mem = '7MB'"})
            v = client.db("/submit", {"task_id": tid, "sql": "SELECT COUNT(*) FROM %s" % table})
            print("LEAKER %s %s" % (tid, v.get("passed")), flush=True)
            return 200, {"state": {"total_reward": v["reward"], "phase1_completed": v["passed"], "phase2_completed": False},
                         "dialogue_history": [], "tool_trajectory": [], "final_response": "done"}
            """)

    /// What a task's SQL tries beyond its own database, each submitted through the DB
    /// environment (name, SQL), and what PostgreSQL answers a role without privileges. Upstream
    /// runs each submission in a transaction (psycopg2's default), so ALTER SYSTEM, CREATE
    /// DATABASE and CREATE TABLESPACE fail there whoever runs them; these run in one.
    static let attacks: [(name: String, sql: String, refusal: String)] = [
        ("create_role", "CREATE ROLE leak LOGIN", "permission denied to create role"),
        ("alter_superuser", "ALTER ROLE root SET work_mem = '7MB'", "must be superuser to alter superusers"),
        ("other_database_setting", "ALTER DATABASE postgres SET work_mem = '7MB'", "must be owner of database postgres"),
        ("grant_server_files", "GRANT pg_read_server_files TO CURRENT_USER", "must have admin option on role"),
        ("read_server_file", "SELECT pg_read_file('PG_VERSION')", "permission denied for function pg_read_file"),
        ("import_server_file", "SELECT lo_import('/etc/passwd')", "permission denied for function lo_import"),
        ("server_program", "COPY (SELECT 1) TO PROGRAM 'true'", "pg_execute_server_program"),
        ("untrusted_extension", "CREATE EXTENSION dblink", "permission denied to create extension"),
        ("server_setting", "SET log_statement = 'none'", "permission denied to set parameter"),
        ("set_role", "SET ROLE root", "permission denied to set role"),
        ("superuser_session", "SET SESSION AUTHORIZATION root", "permission denied to set session authorization"),
        ("other_database", "SELECT count(*) FROM space_template.public.aliens", "cross-database references are not implemented"),
    ]

    static let attacker = BirdAgents.systemAgent(imports: "import json", session: """
            for name, sql in \(attacks.map { "(\"\($0.name)\", \"\($0.sql)\")" }.joined(separator: ", ")),:
                v = client.db("/submit", {"task_id": tid, "sql": sql})
                print("ATTACK %s %s %s" % (tid, name, json.dumps(v.get("message"))), flush=True)
            who = client.db("/execute", {"task_id": tid, "sql": "SELECT current_user, rolsuper, pg_has_role(current_user, 'pg_read_server_files', 'USAGE') FROM pg_roles WHERE rolname = current_user"})
            print("WHO %s %s" % (tid, json.dumps(who)), flush=True)
            client.db("/submit", {"task_id": tid, "sql": "ALTER ROLE CURRENT_USER SET work_mem = '7MB'; ALTER ROLE CURRENT_USER IN DATABASE postgres SET application_name = 'left by %s'" % tid})
            kept = client.db("/execute", {"task_id": tid, "sql": "SELECT current_setting('work_mem'), (SELECT count(*) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole WHERE r.rolname = current_user)"})
            print("KEPT %s %s" % (tid, json.dumps(kept)), flush=True)
            template = client.db("/submit", {"task_id": tid, "sql": "ALTER DATABASE %s IS_TEMPLATE true" % client.db("/execute", {"task_id": tid, "sql": "SELECT current_database()"})["result"]})
            print("TEMPLATE %s %s" % (tid, json.dumps(template.get("message"))), flush=True)
            own = client.db("/submit", {"task_id": tid, "sql": "ALTER TABLE %s ADD COLUMN extra integer; CREATE TABLE mine (x integer)" % table})
            print("OWN %s %s" % (tid, json.dumps(own.get("message"))), flush=True)
            v = client.db("/submit", {"task_id": tid, "sql": "SELECT COUNT(*) FROM %s" % table})
            return 200, {"state": {"total_reward": v["reward"], "phase1_completed": v["passed"], "phase2_completed": False},
                         "dialogue_history": [], "tool_trajectory": [], "final_response": "done"}
            """)

    @Test("a task's SQL runs as a role of its own: what reaches beyond its database (roles, superusers' and other databases' settings, server files and programs, untrusted extensions, other databases, the superuser) is refused by PostgreSQL, its own DDL works, and correct answers still score")
    func taskSQLRunsAsItsOwnRole() throws { try Self.withExperiment(taskSQLRunsAsItsOwnRole, tasks: 4) }

    func taskSQLRunsAsItsOwnRole(_ pg: PostgresServer, _ exp: Experiment) throws {
        let p = try exp.run(["prepare"], environment: BirdAdapterTests.env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let roles = try pg.psql("postgres", "SELECT rolname FROM pg_roles ORDER BY 1")
        try exp.setAgent(Self.attacker)
        let b = try exp.run(["benchmark"], environment: BirdAdapterTests.env)
        try #require(b.status == 0, "\(b.stdout)\(b.stderr)")
        let train = try exp.split().train
        let stdout = try #require(exp.traceFile(train[0], "tool.stdout"))
        // Each statement ran and PostgreSQL refused it (the submission's execution error).
        for id in train {
            for a in Self.attacks {
                let line = Self.line(stdout, "ATTACK \(id) \(a.name) ")
                #expect(line.contains("exec_err_flg") && line.contains(a.refusal), "\(id) \(a.name): \(line)")
            }
            // The SQL ran as a task role: not a superuser, no server-file role.
            let who = Self.line(stdout, "WHO \(id) ")
            #expect(who.contains("ah_task_") && who.contains("| False | False"), "\(id): \(who)")
            // Settings the role gave itself in one submission, its own and in another database
            // (a shared catalog any role reads), are gone by the next session.
            let kept = Self.line(stdout, "KEPT \(id) ")
            #expect(kept.contains("\"result\": \"4MB | 0\""), "\(id): \(kept)")
            // Not the database's owner: it cannot make its copy a template nothing may drop.
            let template = Self.line(stdout, "TEMPLATE \(id) ")
            #expect(template.contains("exec_err_flg") && template.contains("must be owner of database"), "\(id): \(template)")
            // Its own DDL ran (no execution error; just not the answer).
            let own = Self.line(stdout, "OWN \(id) ")
            #expect(own.contains("not correct") && !own.contains("exec_err_flg"), "\(id): \(own)")
        }
        // Nothing changed in the cluster, so the correct answers count.
        let rewards = try exp.trainResults()
        for id in train { #expect(rewards[id] as? Double == 0.7, "\(id): \(rewards[id] ?? "nil")") }
        #expect(try exp.rows("violation").filter { $0["kind"] as? String == "shared_state_changed" }.isEmpty)
        // The task roles and their databases are gone after the run.
        #expect(try pg.psql("postgres", "SELECT rolname FROM pg_roles ORDER BY 1") == roles)
        let left = try pg.psql("postgres", "SELECT datname FROM pg_database ORDER BY datname").split(separator: "\n")
        #expect(left == ["postgres", "space_template", "template0", "template1"], "\(left)")
    }

    /// A system agent that solves nothing: it empties the table it was asked about and
    /// answers 0, which is what upstream's gold SQL then counts on the same copy.
    /// The first line of `stdout` that starts with `prefix` ("" if none).
    static func line(_ stdout: String, _ prefix: String) -> String {
        stdout.split(separator: "\n").first { $0.hasPrefix(prefix) }.map(String.init) ?? ""
    }

    static let goldRewriter = BirdAgents.systemAgent(imports: "import json, urllib.error", session: """
            v = client.db("/submit", {"task_id": tid, "sql": "DELETE FROM %s; SELECT 0" % table})
            print("REWRITER %s %s" % (tid, json.dumps(v)), flush=True)
            try:
                again = client.db("/submit", {"task_id": tid, "sql": "SELECT COUNT(*) FROM %s" % table})
            except urllib.error.HTTPError as e:
                again = {"status": e.code, "body": e.read().decode()}
            print("AGAIN %s %s" % (tid, json.dumps(again)), flush=True)
            return 200, {"state": {"total_reward": v["reward"], "phase1_completed": v["passed"], "phase2_completed": False},
                         "dialogue_history": [], "tool_trajectory": [], "final_response": "done"}
            """)

    @Test("a submission that changes what upstream's gold SQL then reads on the same copy (DELETE, then the count it left) passes the DB environment but not the re-grading on fresh copies: 0, the task's grading ends, reward_tampering recorded")
    func submissionRewritingTheGoldsStateFails() throws { try Self.withExperiment(submissionRewritingTheGoldsStateFails, tasks: 4) }

    func submissionRewritingTheGoldsStateFails(_ pg: PostgresServer, _ exp: Experiment) throws {
        let p = try exp.run(["prepare"], environment: BirdAdapterTests.env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        try exp.setAgent(Self.goldRewriter)
        let b = try exp.run(["benchmark"], environment: BirdAdapterTests.env)
        try #require(b.status == 0, "\(b.stdout)\(b.stderr)")
        let train = try exp.split().train
        let stdout = try #require(exp.traceFile(train[0], "tool.stdout"))
        for id in train {
            let line = Self.line(stdout, "REWRITER \(id) ")
            #expect(line.contains("\"passed\": false") && line.contains("not correct"), "\(id): \(line)")
            // The DB environment moved on; nothing more of the task is graded.
            let again = Self.line(stdout, "AGAIN \(id) ")
            #expect(again.contains("409") && again.contains("re-grading"), "\(id): \(again)")
        }
        let rewards = try exp.trainResults()
        for id in train { #expect(rewards[id] as? Double == 0.0, "\(id): \(rewards[id] ?? "nil")") }
        let rows = try exp.rows("violation")
        #expect(rows.contains { $0["kind"] as? String == "reward_tampering" && ($0["detail"] as? String ?? "").contains("gold_state")
            && ($0["actor"] as? String ?? "").hasPrefix("agent.py") }, "\(rows)")
        let left = try pg.psql("postgres", "SELECT datname FROM pg_database ORDER BY datname").split(separator: "\n")
        #expect(left == ["postgres", "space_template", "template0", "template1"], "\(left)")
    }

    /// BIRD's gold SQL for the corpus: the stand-in's count, slowed by a sleep in a subquery
    /// named `gold_mark` (so a session polling beside it would catch its text; not a comment:
    /// upstream's test_case_default strips comments before it runs the gold).
    static func slowGold(_ data: String) -> String {
        var out = data
        for (k, t) in BirdAgents.tables.enumerated() {
            out = out.replacingOccurrences(of: "[\"SELECT COUNT(*) FROM \(t)\"]",
                                           with: "[\"SELECT COUNT(*) FROM \(t), (SELECT pg_sleep(0.8)) AS gold_mark\"]")
        }
        return out
    }

    /// The corpus's system agent for bird-interact (an agent.py that solves nothing). At import
    /// it plants a `sitecustomize.py`/`usercustomize.py`/`.psqlrc`/`.pgpass` in every directory
    /// of its Python path, its HOME (and user site), /tmp and its working directory: run by
    /// the graders' Python, the Python ones append a passing verdict of every task of the run to
    /// the graders' record. Per task: one thread polls `pg_stat_activity` through /execute (as
    /// the task's role, which sees its own sessions' SQL) while the other submits a wrong answer,
    /// whose grading runs the gold SQL; gold text seen is submitted. It also connects to
    /// PostgreSQL's socket and to port 5432 directly.
    static func corpusAgent(socketDirectory: String, scripts: String) -> String {
        BirdAgents.systemAgent(imports: "import errno, json, os, re, socket, sys, threading", session: #"""
            seen, errors, done = [], [], threading.Event()
            def poll():
                done.wait(2)
                while not done.is_set() and not seen:
                    try:
                        r = client.db("/execute", {"task_id": tid, "sql": "SELECT string_agg(query, ' ') FROM pg_stat_activity WHERE query LIKE '%gold' || '_mark%'"})
                        if "gold_mark" in str(r.get("result")):
                            seen.append(str(r["result"]))
                    except Exception as e:
                        errors.append(repr(e) + (e.read().decode()[-300:] if hasattr(e, "read") else ""))
            t = threading.Thread(target=poll)
            t.start()
            try:
                v = client.db("/submit", {"task_id": tid, "sql": "SELECT 0 FROM pg_sleep(1.5)"})
            except Exception as e:
                print("SUBMIT-ERROR %s %r %s" % (tid, e, e.read().decode()[-300:] if hasattr(e, "read") else ""), flush=True)
                v = {"reward": 0.0, "passed": False}
            done.set()
            t.join()
            gold = re.search(r"SELECT COUNT\(\*\) FROM [a-z]+, \(SELECT pg_sleep\(0.8\)\) AS gold_mark", " ".join(seen))
            print("GOLDSEEN %s %s" % (tid, gold is not None), flush=True)
            print("POLL-ERRORS %s %s" % (tid, sorted(set(errors))[:3]), flush=True)
            if gold:
                v = client.db("/submit", {"task_id": tid, "sql": gold.group(0)})
            return 200, {"state": {"total_reward": v["reward"], "phase1_completed": v["passed"], "phase2_completed": False},
                         "dialogue_history": [], "tool_trajectory": [], "final_response": "done"}
            """#, before: #"""
            FORGE = "\n".join([
                "import json",
                "try:",
                "    ids = open('/work/run/task_ids.txt').read().split()",
                "    with open('/work/out/submits.jsonl', 'a') as f:",
                "        for i in ids:",
                "            f.write(json.dumps({'task_id': i, 'phase': 1, 'passed': True, 'reward': 1.0, 'message': 'forged'}) + '\\n')",
                "except OSError:",
                "    pass",
                ""])
            \#(plantDirectories(["\"/tmp\"", "os.getcwd()", "\"SCRIPTS\""]))
            for d in PLANT_DIRS:
                for name, text in (("sitecustomize.py", FORGE), ("usercustomize.py", FORGE), (".psqlrc", "CREATE ROLE trojan_ran;\n"), (".pgpass", "*:*:*:*:x\n")):
                    try:
                        with open(os.path.join(d, name), "w") as f:
                            f.write(text)
                        how = "written"
                    except OSError as e:
                        how = errno.errorcode[e.errno]
                    print("PLANT %s %s %s" % (d, name, how), flush=True)
            for target in ("SOCKETDIR/.s.PGSQL.5432", ("127.0.0.1", 5432)):
                s = socket.socket(socket.AF_UNIX if isinstance(target, str) else socket.AF_INET)
                try:
                    s.connect(target)
                    how = "connected"
                except OSError as e:
                    how = errno.errorcode.get(e.errno, str(e.errno))
                print("REACH %s %s" % (target, how), flush=True)
            """#.replacingOccurrences(of: "SOCKETDIR", with: socketDirectory).replacingOccurrences(of: "SCRIPTS", with: scripts))
    }

    @Test("exploit corpus, bird-interact: start-up files agent.py plants (sitecustomize, usercustomize, .psqlrc, .pgpass) never reach the graders, the gold SQL's text is not in pg_stat_activity while a second request of the task's role polls it (one request per task at a time), PostgreSQL is not reachable from agent.py's sandbox: every train task scores 0")
    func birdCorpus() throws { try Self.withExperiment(birdCorpus, tasks: 4) }

    func birdCorpus(_ pg: PostgresServer, _ exp: Experiment) throws {
        let data = exp.temp.path + "/bird_interact_data.jsonl"
        let slow = Self.slowGold(try String(contentsOfFile: data, encoding: .utf8))
        try #require(slow.contains("FROM aliens, (SELECT pg_sleep(0.8)) AS gold_mark"))
        try slow.write(toFile: data, atomically: true, encoding: .utf8)
        let p = try exp.run(["prepare"], environment: BirdAdapterTests.env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let roles = try pg.psql("postgres", "SELECT rolname FROM pg_roles ORDER BY 1")
        let config = try exp.file("experiment_config.yaml")
        let scripts = try #require(config.split(separator: "\n").first { $0.contains("scripts:") }?
            .split(separator: "\"").dropFirst().first.map(String.init), "\(config)")
        try exp.setAgent(Self.corpusAgent(socketDirectory: pg.socketDirectory, scripts: scripts))
        let b = try exp.run(["benchmark"], environment: BirdAdapterTests.env)
        try #require(b.status == 0, "\(b.stdout)\(b.stderr)")
        let train = try exp.split().train
        let stdout = try #require(exp.traceFile(train[0], "tool.stdout"))
        let lines = stdout.split(separator: "\n").map(String.init)
        // The plants ran: what the graders' Python imports from (the runner scripts, the ADK's
        // code, PYTHONPATH; its own /work) is read-only here; what was written (HOME, /tmp) is agent.py's own.
        let planted = lines.filter { $0.hasPrefix("PLANT ") }
        // (The site directory is PYTHONPATH, which traces show as [PYTHONPATH]: env_pass values
        // are redacted.)
        for dir in [scripts, "[PYTHONPATH]", "/work/adk"] {
            let mine = planted.filter { $0.hasPrefix("PLANT \(dir)") && $0.contains(" sitecustomize.py ") }
            #expect(!mine.isEmpty && mine.allSatisfy { $0.hasSuffix(" EROFS") || $0.hasSuffix(" EACCES") }, "\(dir): \(planted)")
        }
        #expect(planted.contains("PLANT /tmp sitecustomize.py written"), "\(planted)")
        // PostgreSQL is nowhere agent.py can reach.
        #expect(lines.contains("REACH \(pg.socketDirectory)/.s.PGSQL.5432 ENOENT"), "\(stdout.suffix(2000))")
        #expect(lines.contains { $0.hasPrefix("REACH ('127.0.0.1', 5432) ") && !$0.hasSuffix(" connected") }, "\(stdout.suffix(2000))")
        // The poller ran beside every grading and never saw the gold's text.
        for id in train { #expect(lines.contains("GOLDSEEN \(id) False"), "\(id): \(stdout.suffix(2000))") }
        let rewards = try exp.trainResults()
        for id in train { #expect(rewards[id] as? Double == 0.0, "\(id): \(rewards[id] ?? "nil")") }
        #expect(try pg.psql("postgres", "SELECT rolname FROM pg_roles ORDER BY 1") == roles)
        #expect(try exp.rows("violation").filter { $0["kind"] as? String == "shared_state_changed" }.isEmpty)
    }

    @Test("a DB environment that runs SQL as the configured user (not through psycopg2, so without task roles): SQL that leaves state in the cluster (a role, an ALTER SYSTEM setting) voids the run's scores, is recorded against agent.py and is undone before the next run")
    func sharedStateChangeVoidsTheRun() throws { try Self.withExperiment(sharedStateChangeVoidsTheRun, tasks: 4) }

    func sharedStateChangeVoidsTheRun(_ pg: PostgresServer, _ exp: Experiment) throws {
        try exp.set("env_pass", "[FAKE_MODE, PYTHONPATH, FAKE_DB_ENV]", in: "runner")
        var env = BirdAdapterTests.env
        env["FAKE_DB_ENV"] = "psql"
        let p = try exp.run(["prepare"], environment: env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let before = try pg.psql("postgres", "SELECT count(*) FROM pg_roles")
        try exp.setAgent(Self.stateLeaker)
        let b = try exp.run(["benchmark"], environment: env)
        try #require(b.status == 0, "\(b.stdout)\(b.stderr)")
        let train = try exp.split().train
        // The correct answer was submitted (the leak did not stop the grading) ...
        let stdout = try #require(exp.traceFile(train[0], "tool.stdout"))
        #expect(stdout.contains("LEAKER \(train[0]) True"), "\(stdout.suffix(1500))")
        // ... and still nothing scores.
        let rewards = try exp.trainResults()
        for id in train { #expect(rewards[id] as? Double == 0.0, "\(id): \(rewards[id] ?? "nil")") }
        #expect(try exp.statuses(train).values.allSatisfy { $0 == "invalid_reward" })
        let rows = try exp.rows("violation")
        for kind in ["roles", "configuration_files"] {
            #expect(rows.contains { $0["kind"] as? String == "shared_state_changed" && ($0["detail"] as? String ?? "").contains(kind)
                && ($0["actor"] as? String ?? "").hasPrefix("agent.py") }, "\(kind): \(rows)")
        }
        // Undone: no role of the run's, no ALTER SYSTEM setting left for a later run.
        #expect(try pg.psql("postgres", "SELECT count(*) FROM pg_roles") == before)
        #expect(try pg.psql("postgres", "SELECT count(*) FROM pg_file_settings WHERE name = 'work_mem'").trimmingCharacters(in: .whitespacesAndNewlines) == "0")
        #expect(exp.scratchMounts().isEmpty)
    }
}

/// bird-interact's held-out split in the VM: a suite of its own, so its emulated guest runs
/// beside the other PostgreSQL tests rather than after them.
@Suite("Adapters: bird-interact's held-out tasks in the VM on a PostgreSQL server of the guest's own",
       .enabled(if: RealPostgres.binDirectory != nil || RealPostgres.inCI, "Debian's postgresql is not installed (CI installs it and fails without it)"))
struct RealPostgresVMTests {
    @Test("gate.held_out_runtime: vm: the held-out tasks are graded in the guest on a PostgreSQL server of its own, built from the operator's template databases; the gate accepted at the guest's score, and the operator's server never sees a held-out task")
    func heldOutInTheVM() throws { try RealPostgresTests.withExperiment(heldOutInTheVM, tasks: 4) }

    func heldOutInTheVM(_ pg: PostgresServer, _ exp: Experiment) throws {
        try HeldOutVMTests.requireVM()
        try exp.set("held_out_runtime", "vm\n  vm: {accel: tcg, allow_emulation: true, memory_mib: 1536}", in: "gate")
        // Four tasks (under emulation a task's graders take about 50 s in the guest), so one
        // held-out: any score above the baseline's is accepted.
        try exp.set("min_improvement", "0")
        let p = try exp.run(["prepare"], environment: BirdAdapterTests.env)
        try #require(p.status == 0, "\(p.stdout)\(p.stderr)")
        let test = try exp.split().test
        // From here on, nothing of a held-out task may reach the operator's server.
        let logged = try String(contentsOfFile: pg.log, encoding: .utf8).utf8.count
        try exp.setAgent(BirdPhaseTwo.solver(followUp: "right", phase1: "SELECT count(id) FROM %s",
                                             phase2: "SELECT id FROM %s ORDER BY id DESC LIMIT 1", execute: true))
        let g = try exp.run(["gate"], environment: BirdAdapterTests.env)
        let console = (try? String(contentsOfFile: exp.root + "/.autoharness/held-out-vm-console.log", encoding: .utf8)) ?? ""
        #expect(g.status == 0 && g.stdout.contains("ACCEPTED"), "\(g.stdout)\n\(g.stderr)\n\(console.suffix(3000))")
        #expect(g.stderr.contains("held-out VM: \(test.count) task(s) answered"), "\(g.stderr)")
        #expect(g.stderr.contains("held-out VM: 1 database(s) dumped from the server at \(pg.socketDirectory)"), "\(g.stderr)")
        // Scored by the guest's graders on the guest's copy of space_template: each held-out
        // task's phase 1 and, where it has one, phase 2.
        let expected = test.map { BirdPhaseTwo.hasFollowUp($0) ? 1.0 : 0.7 }.reduce(0, +) / Double(test.count)
        #expect(g.stdout.contains("val_score: " + String(format: "%.2f", expected)), "\(expected): \(g.stdout)")
        // (One gate: under emulation the graders' services take about 50 s a task in the guest;
        // a rejected VM gate is RealHarborTests.heldOutInTheVM's and HeldOutVMTests'.)
        // The operator's server: dumped from, and no held-out task's database, ever.
        let after = String(decoding: Array(try String(contentsOfFile: pg.log, encoding: .utf8).utf8).dropFirst(logged), as: UTF8.self)
        for id in test { #expect(!after.contains(id), "\(id) reached the operator's server: \(after.suffix(2000))") }
        let left = try pg.psql("postgres", "SELECT datname FROM pg_database ORDER BY datname").split(separator: "\n")
        #expect(left == ["postgres", "space_template", "template0", "template1"], "\(left)")
        #expect(try exp.rows("violation").isEmpty)
        #expect(exp.scratchMounts().isEmpty)
        let leftovers = (try? FileManager.default.contentsOfDirectory(atPath: exp.scratch)) ?? []
        #expect(leftovers.isEmpty, "\(leftovers)")
    }
}

@Suite("Adapters: bird-interact needs PostgreSQL's client programs")
struct BirdPostgresClientTests {
    /// `autoharness args` in a private mount namespace where `hidden` (in /usr/bin) is not an
    /// executable: /dev/null is bound over it.
    func autoharnessWithout(_ hidden: String, _ args: [String]) throws -> Run {
        var env = ProcessInfo.processInfo.environment
        for (k, v) in BirdAdapterTests.env { env[k] = v }
        env["BIRD_REPO"] = nil
        return try runProcess("/usr/bin/unshare", ["--mount", "--propagation", "private", "--", "/bin/sh", "-c",
                                                   RayClusterTests.dropLoopMounts + "; mount --bind /dev/null /usr/bin/\(hidden) && exec \"$0\" \"$@\"", Built.autoharness] + args,
                              environment: env)
    }

    /// The programs an error names as not found in the sandbox's PATH.
    static func missing(_ stderr: String) -> [String] {
        guard let r = stderr.range(of: " not found in /usr/local/bin, /usr/bin, /bin") else { return [] }
        let line = stderr[..<r.lowerBound].split(separator: "\n").last.map { $0.split(separator: ":").last ?? $0 } ?? ""
        return line.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }
    }

    @Test("init and prepare name the missing psql/createdb/dropdb and what to install", arguments: ["psql", "createdb", "dropdb"])
    func missingClient(hidden: String) throws {
        try requireRoot()
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/\(hidden)"), "PostgreSQL's client is not installed (scripts/bootstrap installs postgresql)")
        let temp = try TempDir()
        let initArgs = ["init", temp.path + "/exp", "--benchmark", "bird-interact", "--repo", BirdAgents.fixture + "/BIRD-Interact",
                        "--tool", "/usr/bin/python3"]
        let r = try autoharnessWithout(hidden, initArgs)
        #expect(r.status != 0)
        // Debian's psql, createdb and dropdb are one wrapper (pg_wrapper): hiding one may hide all.
        #expect(Self.missing(r.stderr).contains(hidden), "\(r.stderr)")
        #expect(r.stderr.contains("apt-get install postgresql-client"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: temp.path + "/exp/experiment_config.yaml"))

        // An experiment made while they were there: prepare checks again.
        let exp = try BirdAdapterTests().make()
        defer { exp.removeScratch() }
        let p = try autoharnessWithout(hidden, ["prepare", "-C", exp.root])
        #expect(p.status != 0)
        #expect(Self.missing(p.stderr).contains(hidden) && p.stderr.contains("apt-get install postgresql-client"), "\(p.stderr)")
        #expect(!p.stdout.contains("baseline:"))
    }
}
