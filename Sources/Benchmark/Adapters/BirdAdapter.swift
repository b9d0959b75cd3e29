// `benchmark: bird-interact` — BIRD-Interact (the BIRD-Interact-ADK) with agent/agent.py as
// the system agent service (`agent.agent:app`).
//
// Upstream runs three services and the orchestrator side by side, and the orchestrator posts
// each task's full record (gold SQL, test cases, the clear query, the ambiguity resolutions)
// to the services, so everything shares one trust domain with the system agent, and the
// score is the system agent's own session state. Here, two sandboxes run at once:
//   B (`benchmark-scorer`, no agent.py): the DB environment and the user simulator, each
//     behind autoharness_bird_services.py, which serves them on Unix sockets, replaces the
//     task record any /init_task carries with the gold record it read itself, and appends
//     every /submit verdict to a record file in B's own output directory;
//   A (`benchmark-runner`, agent.py): the system agent (agent.agent:app) and the
//     orchestrator, given a redacted task list (no gold SQL, test cases, clear query,
//     ambiguity resolutions or follow-up), reaching B's services only through its socket
//     directory.
// Phase 2 runs as in upstream (BIRD-Interact-ADK at 451fe2c3518ee1cf908d8139e2913483bd519381):
// the follow-up question is revealed only when the DB environment passes phase 1
// (db_environment/server.py, _submit_sql_sync: has_follow_up, follow_up_query). In
// a-interact the system agent reads it from that /submit answer; in c-interact the
// orchestrator reads it from its task record after phase 1 (orchestrator/cinteract.py), so
// A's copy of each record asks B for it then (autoharness_bird_orchestrate.py), and B
// answers only from the phase-1 passes it relayed; B also refuses the user simulator's
// /phase_transition until then.
// A task's reward is read from B's record: the best phase-1 reward plus the best phase-2
// reward the DB environment granted (a-interact 0.7 + 0.3; c-interact the same on a first
// try, 0.5 + 0.2 after the debug turn), at most 1. The orchestrator's own numbers
// (results.json, written in A) feed train traces only.

import FoundationEssentials
import Glibc
import Sandbox
import SandboxPolicy
import SupervisorIO

public struct BirdAdapter: BenchmarkAdapter {
    /// The BIRD-Interact-ADK directory (orchestrator/, db_environment/, user_simulator/, shared/).
    public let adkDirectory: String
    /// The merged jsonl with gold (bird_interact_data.jsonl after combine_public_with_gt.py).
    public let dataPath: String
    public let scriptsDirectory: String
    public let tool: ToolSettings
    public let taskIDs: [String]
    /// Gold records by instance_id, as lines of the data file.
    let records: [String: JSONValue]
    public var mode = "a-interact"
    public var concurrency = 3
    /// SYSTEM_AGENT_PORT, USER_SIM_PORT, DB_ENV_PORT inside the sandboxes (each has its own network).
    public var ports = (system: 6100, user: 6101, db: 6102)
    /// Host directory of PostgreSQL's Unix socket, bound into B (pg_host).
    public var postgresSocketDirectory: String?
    /// `NAME=VALUE` for both sandboxes (models, dataset, patience, PG_*).
    public var environment: [String] = []

    public var name: String { "bird-interact" }

    /// The ADK, the merged data file (copied into the guest) and the wrapper scripts: what the
    /// held-out VM shares for the same graders to run in it. The task databases reach the
    /// guest as dumps (its own server), never through `postgresSocketDirectory`.
    public var hostPaths: [String] { [adkDirectory, dataPath, scriptsDirectory] }
    /// One PostgreSQL server for every run: a run's services record (and undo) the roles and
    /// settings that appeared while it ran, so a second run beside it would be blamed for
    /// the first's task roles.
    public var runsBesideItself: Bool { false }

    /// The databases the DB environment copies a task's from (`<selected_database>_template`,
    /// BIRD-Interact-ADK shared/db_utils.py), for every task of the dataset.
    public var templateDatabases: [String] {
        Set(records.values.compactMap { $0["selected_database"]?.string }).map { $0 + "_template" }.sorted()
    }

    public init(adkDirectory: String, dataPath: String, scriptsDirectory: String, tool: ToolSettings) throws(BenchmarkError) {
        self.adkDirectory = adkDirectory
        self.dataPath = dataPath
        self.scriptsDirectory = scriptsDirectory
        self.tool = tool
        guard LocalBenchmark.kind(adkDirectory + "/orchestrator/runner.py") == S_IFREG else {
            throw BenchmarkError(.invalidBenchmark, "bird_repo \(adkDirectory): no orchestrator/runner.py (give the BIRD-Interact-ADK directory)")
        }
        let slash = dataPath.lastIndex(of: "/").map { String(dataPath[..<$0]) } ?? "."
        let dir = FileSystem.openDirectory(slash)
        guard dir >= 0 else { throw BenchmarkError(.invalidBenchmark, "bird_data_path \(dataPath): \(FileSystem.errorText())") }
        defer { close(dir) }
        let bytes: [UInt8]
        switch FileSystem.readSmallFile(at: dir, String(dataPath.split(separator: "/").last ?? ""), limit: 512 << 20) {
        case .success(let b): bytes = b
        case .failure(let problem): throw BenchmarkError(.invalidBenchmark, "bird_data_path \(dataPath): \(problem.explanation("BIRD-Interact's data"))")
        }
        var records: [String: JSONValue] = [:]
        for (n, line) in bytes.split(separator: 0x0A).enumerated() where !line.allSatisfy({ $0 == 0x20 || $0 == 0x0D }) {
            guard let v = JSONValue.parse(Array(line)), let id = v["instance_id"]?.string, TraceName.isAcceptableID(id) else {
                throw BenchmarkError(.invalidBenchmark, "\(dataPath):\(n + 1): not a task line with an instance_id")
            }
            guard v["sol_sql"] != nil else {
                throw BenchmarkError(.invalidBenchmark, "\(dataPath):\(n + 1): \(id) has no sol_sql: merge the ground truth first (BIRD-Interact-ADK/scripts/combine_public_with_gt.py)")
            }
            guard records[id] == nil else { throw BenchmarkError(.invalidBenchmark, "\(dataPath):\(n + 1): \(id) appears twice") }
            records[id] = v
        }
        guard !records.isEmpty else { throw BenchmarkError(.invalidBenchmark, "\(dataPath): no tasks") }
        self.records = records
        self.taskIDs = records.keys.sorted()
    }

    /// The ADK directories the system agent and the orchestrator need.
    static let codeDirectories = ["orchestrator", "shared", "system_agent"]

    /// The fields of a task the system agent's side may see: its id, database and the
    /// ambiguous question; the ambiguity lists keep their length (the budget depends on it)
    /// but not their content. The follow-up is not there at all, not even that one exists:
    /// upstream reveals it only once phase 1 passes (the DB environment's /submit answer;
    /// autoharness_bird_orchestrate.py gives the orchestrator its copy from the graders then).
    static let visibleFields: Set<String> = ["instance_id", "selected_database", "amb_user_query", "category", "conditions"]

    static func redact(_ task: JSONValue) -> JSONValue {
        guard case .object(let o) = task else { return task }
        var out: [String: JSONValue] = [:]
        for (k, v) in o where visibleFields.contains(k) { out[k] = v }
        if let amb = o["user_query_ambiguity"]?.object {
            var a: [String: JSONValue] = [:]
            for (k, v) in amb { a[k] = .array(Array(repeating: .object([:]), count: v.array?.count ?? 0)) }
            out["user_query_ambiguity"] = .object(a)
        }
        if let k = o["knowledge_ambiguity"]?.array { out["knowledge_ambiguity"] = .array(Array(repeating: .object([:]), count: k.count)) }
        return .object(out)
    }

    public func run(_ ids: [String], _ context: AdapterRunContext) throws(BenchmarkError) -> [TaskOutcome] {
        guard !ids.isEmpty else { return [] }
        if context.oracle { throw BenchmarkError(.configuration, "--oracle is only for local benchmarks (BIRD-Interact has --mode oracle)") }
        let run = try ToolRun(settings: tool, context: context, ids: ids)
        defer { run.finish() }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var lines: [UInt8] = []
        for id in ids {
            guard let r = records[id], let line = try? encoder.encode(Self.redact(r)) else { continue }
            lines += Array(line) + [0x0A]
        }
        try run.writeInput("tasks.jsonl", lines)
        try run.writeTaskIDs(ids)
        let scripts = MountSpec(kind: .readOnly(source: scriptsDirectory), destination: scriptsDirectory)
        let adk = MountSpec(kind: .readOnly(source: adkDirectory), destination: adkDirectory)
        // The agent's side gets the ADK's code only: its directory also holds the datasets
        // (gold SQL, hidden knowledge), samples with real dialogues, and possibly a .env.
        let agentSideADK = Self.codeDirectories.filter { LocalBenchmark.kind(adkDirectory + "/" + $0) == S_IFDIR }
            .map { MountSpec(kind: .readOnly(source: adkDirectory + "/" + $0), destination: "/work/adk/" + $0) }
        let portEnv = ["SYSTEM_AGENT_PORT=\(ports.system)", "USER_SIM_PORT=\(ports.user)", "DB_ENV_PORT=\(ports.db)",
                       "PYTHONUNBUFFERED=1"]

        // B: the graders, with the gold data, record of every verdict in their own directory.
        var services = ToolInvocation(
            policy: tool.scorerPolicy,
            argv: tool.command + [scriptsDirectory + "/autoharness_bird_services.py", "--adk", adkDirectory, "--data", dataPath,
                                  "--task-ids-file", "/work/run/task_ids.txt",
                                  "--sock-dir", "/work/out/sock", "--record", "/work/out/submits.jsonl",
                                  "--db-port", String(ports.db), "--user-port", String(ports.user), "--mode", mode],
            withAgent: false, label: "bird services")
        services.environment = environment + portEnv
        services.extraMounts = [scripts, adk, MountSpec(kind: .readOnly(source: dataPath), destination: dataPath)]
        if let pg = postgresSocketDirectory { services.extraMounts.append(MountSpec(kind: .readOnly(source: pg), destination: pg)) }
        services.runDirectory = run.scratch.path + "/in"
        services.outputName = "score"
        let background = BackgroundTool(run, services)
        let sockets = run.scratch.path + "/score/sock"
        var ready = false
        let deadline = TaskRunner.now() + 120
        while TaskRunner.now() < deadline, background.finished == nil {
            if LocalBenchmark.kind(sockets + "/ready") == S_IFREG { ready = true; break }
            usleep(100_000)
        }
        guard ready else {
            let exit = background.stop()
            context.log("bird services did not become ready (\(exit.summary))")
            run.reportFailure("bird services", exit)
            return run.outcomes(ids, [:], toolExit: exit, seconds: exit.seconds)
        }

        // A: agent.py as the system agent, and the orchestrator.
        var runner = ToolInvocation(
            policy: tool.runnerPolicy,
            argv: tool.command + [scriptsDirectory + "/autoharness_bird_run.py", "--adk", "/work/adk", "--mode", mode,
                                  "--data", "/work/in/tasks.jsonl", "--output", "/work/out/results.json",
                                  "--concurrency", String(min(concurrency, ids.count)), "--sock-dir", "/work/services",
                                  "--system-port", String(ports.system), "--user-port", String(ports.user), "--db-port", String(ports.db)],
            withAgent: true, label: "bird-interact")
        runner.environment = environment.filter { !$0.hasPrefix("PG_") } + portEnv
        runner.extraMounts = [scripts, MountSpec(kind: .readOnly(source: sockets), destination: "/work/services")] + agentSideADK
        context.log("bird-interact: \(ids.count) task(s), mode \(mode)")
        let runExit = run.launch(runner, total: ids.count)
        run.reportFailure("bird-interact", runExit)
        let servicesExit = background.stop()

        let record = run.openOutput("score")
        let session = run.openOutput("app")
        defer {
            if record >= 0 { close(record) }
            if session >= 0 { close(session) }
        }
        var results = Self.score(record: record, sessions: session, ids: Set(ids), traces: !context.heldOut)
        // SQL agent.py submitted left state in the cluster that outlives its task: the run's
        // scores are void, and what changed (its kind, never the names agent.py chose) is
        // recorded against agent.py. The graders undid what they safely could.
        let changed = Self.sharedStateChanges(record)
        if !changed.isEmpty {
            for (kind, count) in changed {
                var e = AuditEvent(sandbox: "bird-interact", kind: .sharedStateChanged, name: kind, action: "void")
                e.count = count
                e.detail = "the database cluster's \(kind) changed during the run"
                context.audit.record(e)
            }
            let why = "the run changed the database cluster's shared state (\(changed.map(\.0).joined(separator: ", "))): every score of the run is void"
            for id in ids { results[id] = ToolTaskResult(reward: 0, status: .invalidReward, detail: why) }
        }
        // Passed submissions the graders' re-grading overturned (their results differ when
        // the submission and the gold run on fresh copies: the submission changed what the
        // gold read). Those verdicts are already failed in the record.
        let overturned = Self.overturned(record, ids: Set(ids))
        if overturned > 0 {
            var e = AuditEvent(sandbox: "bird-interact", kind: .rewardTampering, name: "gold_state", action: "refused")
            e.count = overturned
            e.detail = "\(overturned) passed submission(s) gave another result than the gold SQL's on fresh copies of the database: the submission changed what the gold SQL read"
            context.audit.record(e)
        }
        let exit = runExit.succeeded ? servicesExit : runExit
        return run.outcomes(ids, results, toolExit: exit, seconds: runExit.seconds)
    }

    /// The graders' report of the cluster's shared state changing during the run (lines
    /// `{"violation": KIND, "count": N}` of the record): kind and count, in order.
    static func sharedStateChanges(_ record: Int32) -> [(String, Int)] {
        guard record >= 0, case .success(let bytes) = FileSystem.readSmallFile(at: record, "submits.jsonl", limit: 64 << 20) else { return [] }
        var out: [(String, Int)] = []
        for line in bytes.split(separator: 0x0A) {
            guard let v = JSONValue.parse(Array(line)), let kind = v["violation"]?.string else { continue }
            let known = ["roles", "role_memberships", "configuration_files", "database_role_settings", "tablespaces", "unreadable"]
            out.append((known.contains(kind) ? kind : "other", Int(v["count"]?.number ?? 1)))
        }
        return out
    }

    /// Verdicts of `ids` in the record that the graders' re-grading overturned (`"regrade"`).
    static func overturned(_ record: Int32, ids: Set<String>) -> Int {
        guard record >= 0, case .success(let bytes) = FileSystem.readSmallFile(at: record, "submits.jsonl", limit: 64 << 20) else { return 0 }
        return bytes.split(separator: 0x0A).filter { line in
            guard let v = JSONValue.parse(Array(line)), let id = v["task_id"]?.string else { return false }
            return ids.contains(id) && v["regrade"]?.string != nil
        }.count
    }

    /// Rewards from the DB environment's record: per task, the best phase-1 reward plus the
    /// best phase-2 reward granted (a repeated pass is not paid twice).
    static func score(record: Int32, sessions: Int32, ids: Set<String>, traces: Bool) -> [String: ToolTaskResult] {
        var phase1: [String: Double] = [:], phase2: [String: Double] = [:]
        var submissions: [String: [JSONValue]] = [:]
        var unreadable: String?
        if record >= 0 {
            let bytes: [UInt8]
            switch FileSystem.readSmallFile(at: record, "submits.jsonl", limit: 64 << 20) {
            case .success(let b): bytes = b
            case .failure(.missing): bytes = []
            case .failure(let problem):
                bytes = []
                unreadable = "submits.jsonl: \(problem.explanation("the DB environment's record"))"
            }
            for line in bytes.split(separator: 0x0A) {
                guard let v = JSONValue.parse(Array(line)), let id = v["task_id"]?.string, ids.contains(id) else { continue }
                submissions[id, default: []].append(v)
                guard v["passed"] == .bool(true), let r = v["reward"]?.reward, let phase = v["phase"]?.number else { continue }
                if phase == 2 { phase2[id] = max(phase2[id] ?? 0, r) } else { phase1[id] = max(phase1[id] ?? 0, r) }
            }
        }
        var sessionByID: [String: JSONValue] = [:]
        if traces, sessions >= 0, case .success(let bytes) = FileSystem.readSmallFile(at: sessions, "results.json", limit: 256 << 20),
           let items = JSONValue.parse(bytes)?["results"]?.array {
            for item in items {
                if let id = item["instance_id"]?.string ?? item["task_id"]?.string, ids.contains(id) { sessionByID[id] = item }
            }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        var out: [String: ToolTaskResult] = [:]
        for id in ids {
            var r: ToolTaskResult
            if let subs = submissions[id] {
                let reward = min(1, (phase1[id] ?? 0) + (phase2[id] ?? 0))
                r = ToolTaskResult(reward: reward, status: reward >= TaskOutcome.passThreshold ? .passed : .failed,
                                   detail: "\(subs.count) submission(s) graded by the DB environment")
                if traces && r.status != .passed { r.failures = FailureParsers.bird(subs) }
            } else {
                r = ToolTaskResult(reward: 0, status: .missingResult, detail: unreadable ?? "no SQL submission reached the DB environment")
            }
            if traces {
                if let s = sessionByID[id], let b = try? encoder.encode(s) { r.trace.append(("session.json", Array(b))) }
                if let subs = submissions[id], let b = try? encoder.encode(JSONValue.array(subs)) { r.trace.append(("submissions.json", Array(b))) }
            }
            out[id] = r
        }
        return out
    }
}
