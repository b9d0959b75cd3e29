import Benchmark
import Foundation
import Glibc
import Testing
import TestSupport
@testable import Execution
@testable import ExperimentModel

/// A bird-interact shard on a worker node (`executor: ray`), with the stand-in ADK of the
/// adapter tests on Debian's real PostgreSQL: the node (this host here) rebuilds the adapter
/// from its own data file and grades on its own server, whose template databases must be the
/// supervisor's row for row; one bird-interact run at a time on a node.
@Suite("Remote work: a bird-interact shard on the node", .serialized,
       .enabled(if: RealPostgres.binDirectory != nil || RealPostgres.inCI, "Debian's postgresql is not installed (CI installs it and fails without it)"))
struct RemoteBirdTests {
    @Test("a bird-interact shard runs on the node against its own PostgreSQL: the DB environment's rewards and traces (held out: rewards only), alone on the node; a template database whose rows, columns, triggers or session defaults differ from the supervisor's (not their rows' order on disk, nor another role's settings) or that its fingerprints do not name, another copy of the gold data, a data file or ADK behind a link, a task the node's data lacks, or a runner bind of the data is refused before the nonce; the node's check reports its databases' fingerprints, and one whose differ is given nothing")
    func birdShardRuns() throws {
        try RealPostgresTests.withExperiment({ pg, exp in
            let config = try ExperimentConfig.load(exp.root + "/experiment_config.yaml")
            let adapter = try #require(try config.makeAdapter(root: exp.root, checkTools: false) as? BirdAdapter)
            let tool = try adapter.nodeTool
            guard case .bird(let settings) = tool else { Issue.record("not a bird node tool: \(tool)"); return }
            #expect(Array(settings.databases.keys) == ["space_template"], "\(settings.databases)")
            #expect(settings.digestedFiles.contains(adapter.dataPath) && settings.digestedFiles.contains(adapter.adkDirectory + "/db_environment/server.py")
                    && settings.digestedFiles.contains(adapter.scriptsDirectory + "/autoharness_bird_services.py"), "\(settings.digestedFiles)")

            let node = try RemoteWorkTests.Node()
            let env = BirdAdapterTests.env
            let ids = adapter.taskIDs
            let solver = Array(BirdPhaseTwo.solver(followUp: "right", phase1: "SELECT count(id) FROM %s",
                                                   phase2: "SELECT id FROM %s ORDER BY id DESC LIMIT 1", execute: true).utf8)
            let expected = { (id: String) in BirdPhaseTwo.hasFollowUp(id) ? 1.0 : 0.7 }

            let train = try node.request(tool: tool, Array(ids.prefix(3)), agent: solver, heldOut: false)
            let r = try node.serve(try node.sign(train), environment: env)
            #expect(r.status == 0, "\(r.stderr)")
            let answer = try RemoteWork.check(Array(r.stdout.utf8), for: train)
            #expect(answer.outcomes.map(\.reward) == ids.prefix(3).map(expected), "\(answer.outcomes)")
            #expect(ids.prefix(3).allSatisfy { answer.traces[$0]?.contains { $0.path == "submissions.json" } == true }, "\(answer.traces.mapValues { $0.map(\.path) })")

            let held = try node.request(tool: tool, Array(ids.suffix(2)), agent: solver, heldOut: true)
            let h = try node.serve(try node.sign(held), environment: env)
            #expect(h.status == 0, "\(h.stderr)")
            let heldAnswer = try RemoteWork.check(Array(h.stdout.utf8), for: held, answerKey: node.answerKey)
            #expect(heldAnswer.outcomes.map(\.reward) == ids.suffix(2).map(expected) && heldAnswer.traces.isEmpty, "\(heldAnswer.outcomes)")
            #expect(node.nonces.count == 2 && node.workDirectories.isEmpty)

            func refused(_ request: WorkRequest, _ words: [String]) throws {
                let o = try node.serve(try node.sign(request), environment: env)
                #expect(o.status != 0 && words.allSatisfy(o.stderr.contains) && !node.nonces.contains(request.nonce), "\(words): \(o.stderr)")
            }
            let one = [ids[0]]
            // The node's check, as the driver runs it (the databases' check on stdin): each
            // template database's fingerprint on its server, which the supervisor compares.
            func checked(_ check: BirdDatabases.Check? = nil, extra: [String: String] = [:]) throws -> NodeReport {
                let input = node.temp.file("databases-\(UUID().uuidString).json")
                try JSONEncoder().encode(check ?? settings.databaseCheck).write(to: URL(fileURLWithPath: input))
                let r = try runProcess(Built.autoharness, ["worker", "--check", "--state", node.state, "--policy-dir", Built.packageRoot + "/policies", "--check-databases"],
                                       environment: env.merging(extra) { _, new in new }, stdinPath: input)
                #expect(r.status == 0, "\(r.stderr)")
                return try JSONDecoder().decode(NodeReport.self, from: Data(r.stdout.utf8))
            }
            // Of the run's environment, the check carries the login's variables alone.
            let login = settings.environment.filter { v in ["PG_PORT=", "PG_USER=", "PG_PASSWORD="].contains(where: v.hasPrefix) }
            #expect(settings.databaseCheck.environment == login && settings.environment.contains { $0.hasPrefix("DATASET=") }, "\(settings.environment)")
            let same = try checked()
            #expect(same.databases == settings.databases && same.problems.isEmpty, "\(String(describing: same.databases)) \(same.problems)")
            #expect(NodeCheck.unusable(same, binarySHA256: same.binarySHA256, policiesSHA256: same.policiesSHA256, databases: settings.databases) == nil)
            // While a run holds the node alone (its exclusive lock: it copies the templates),
            // the check waits for it rather than connect to them.
            let alone = open(node.state + "/node.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            try #require(alone >= 0 && flock(alone, LOCK_EX) == 0)
            DispatchQueue.global().asyncAfter(deadline: .now() + 3) { close(alone) }
            let waited = Date()
            #expect(try checked().databases == settings.databases)
            #expect(Date().timeIntervalSince(waited) >= 3, "the check read the databases while a run held the node alone")
            // A login env_pass names is the node's own: read from the environment the check
            // runs with (its Ray worker's), not the supervisor's.
            var own = settings.databaseCheck
            own.environment.removeAll { $0.hasPrefix("PG_USER=") }
            own.envPass = ["PG_USER"]
            let stranger = try checked(own, extra: ["PG_USER": "ah_no_such_login"])
            #expect(stranger.databases == nil && stranger.problems.contains { $0.contains("the template databases:") && $0.contains("ah_no_such_login") }, "\(stranger.problems)")
            #expect(try checked(own, extra: ["PG_USER": PostgresServer.user]).databases == settings.databases)
            // A row the supervisor's server did not have (the node is this host: its server is
            // the one changed after the supervisor's fingerprints were taken): the check
            // reports another fingerprint, so the supervisor gives the node nothing, and a
            // request sent anyway is refused.
            _ = try pg.psql("space_template", "INSERT INTO \(BirdAgents.tables[0]) VALUES (999, 'planted')")
            let planted = try checked()
            #expect(planted.databases?["space_template"] != nil && planted.databases != settings.databases, "\(String(describing: planted.databases))")
            let why = NodeCheck.unusable(planted, binarySHA256: planted.binarySHA256, policiesSHA256: planted.policiesSHA256, databases: settings.databases)
            #expect(why?.hasPrefix("its template database space_template (fingerprint ") == true, "\(String(describing: why))")
            try refused(try node.request(tool: tool, one, agent: solver, heldOut: false),
                        ["the template database space_template on this node's server", "is not the supervisor's"])
            // The same rows again, another order on disk (an updated row moves): the same
            // fingerprint, and it runs.
            let comets = BirdAgents.tables[1]
            let before = try pg.psql("space_template", "SELECT ctid FROM \(comets) WHERE id = 7")
            _ = try pg.psql("space_template", "DELETE FROM \(BirdAgents.tables[0]) WHERE id = 999; UPDATE \(comets) SET name = name WHERE id = 7")
            // Nor does another role's setting change it (the graders' login's would).
            _ = try pg.psql("postgres", "CREATE ROLE unrelated; ALTER ROLE unrelated SET DateStyle TO 'SQL, DMY'")
            #expect(try pg.psql("space_template", "SELECT ctid FROM \(comets) WHERE id = 7") != before)
            let reordered = try node.request(tool: tool, one, agent: solver, heldOut: false)
            let again = try node.serve(try node.sign(reordered), environment: env)
            #expect(again.status == 0 && node.nonces.contains(reordered.nonce), "\(again.stderr)")
            // What the rows' text does not show: a column renamed, a trigger that rewrites what
            // a submission inserts.
            _ = try pg.psql("space_template", "ALTER TABLE \(comets) RENAME COLUMN name TO title")
            try refused(try node.request(tool: tool, one, agent: solver, heldOut: false), ["the template database space_template"])
            _ = try pg.psql("space_template", "ALTER TABLE \(comets) RENAME COLUMN title TO name")
            _ = try pg.psql("space_template", """
                CREATE FUNCTION shout() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.name := upper(NEW.name); RETURN NEW; END $$;
                CREATE TRIGGER shout BEFORE INSERT ON \(comets) FOR EACH ROW EXECUTE FUNCTION shout()
                """)
            try refused(try node.request(tool: tool, one, agent: solver, heldOut: false), ["the template database space_template"])
            _ = try pg.psql("space_template", "DROP TRIGGER shout ON \(comets); DROP FUNCTION shout()")
            // A default a session starts with, which changes how results print.
            _ = try pg.psql("postgres", "ALTER DATABASE space_template SET DateStyle TO 'SQL, DMY'")
            try refused(try node.request(tool: tool, one, agent: solver, heldOut: false), ["the template database space_template"])
            _ = try pg.psql("postgres", "ALTER DATABASE space_template RESET DateStyle")
            // Fingerprints that do not name a database the shard's tasks copy; a data file that
            // is a link here.
            var unnamed = settings
            unnamed.databases = [:]
            try refused(try node.request(tool: .bird(unnamed), one, agent: solver, heldOut: false), ["which the supervisor's fingerprints do not name"])
            for (name, path, key) in [("the BIRD-Interact data file", adapter.dataPath, \BirdNode.dataPath),
                                      ("the BIRD-Interact ADK", adapter.adkDirectory, \BirdNode.adkDirectory)] {
                let link = node.temp.file("link-" + (path as NSString).lastPathComponent)
                try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: path)
                var linked = settings
                linked[keyPath: key] = link
                try refused(try node.request(tool: .bird(linked), one, agent: solver, heldOut: false, digest: .some(try WorkDigest.files(settings.digestedFiles))),
                            ["\(name) \(link) resolves to \(path)"])
            }
            // Another copy of the files that decide rewards, a task the node's data lacks, a
            // runner bind that shows agent.py the gold data.
            try refused(try node.request(tool: tool, one, agent: solver, heldOut: false, digest: .some(String(repeating: "0", count: 64))),
                        ["this node's copy of the tool's files", "is not the supervisor's (0000000000000000)"])
            try refused(try node.request(tool: tool, ["no-such-task"], agent: solver, heldOut: false),
                        ["this node's copy of the tool cannot run the shard's tasks", "no-such-task"])
            var exposed = settings
            exposed.tool.binds = [(adapter.dataPath as NSString).deletingLastPathComponent]
            try refused(try node.request(tool: .bird(exposed), one, agent: solver, heldOut: false), ["on this node, runner.binds:", "exposes the BIRD-Interact data"])
            #expect(node.nonces.count == 3 && node.workDirectories.isEmpty)

            // Alone on the node: while another request holds the node's lock shared (a train
            // request of any benchmark), a bird-interact request waits, its nonce unclaimed.
            let lock = open(node.state + "/node.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
            try #require(lock >= 0 && flock(lock, LOCK_SH) == 0)
            let waiting = try node.request(tool: tool, one, agent: solver, heldOut: false)
            let marker = node.state + "/nonces/" + waiting.nonce
            let ranEarly = Flag()
            DispatchQueue.global().asyncAfter(deadline: .now() + 5) {
                ranEarly.set(FileManager.default.fileExists(atPath: marker))
                close(lock)
            }
            let started = Date()
            let last = try node.serve(try node.sign(waiting), environment: env)
            #expect(last.status == 0 && node.nonces.contains(waiting.nonce), "\(last.stderr)")
            #expect(!ranEarly.value && Date().timeIntervalSince(started) >= 5, "a bird-interact request ran beside a shared lock's holder")
        })
    }
}

/// A flag one thread sets and another reads.
final class Flag: @unchecked Sendable {
    private let lock = NSLock()
    private var set_ = false
    func set(_ v: Bool) { lock.withLock { set_ = v } }
    var value: Bool { lock.withLock { set_ } }
}
