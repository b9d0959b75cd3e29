// `benchmark: command` — any command that runs the task ids it is given and writes
// `{"<task id>": <reward in [0, 1] or null>, ...}` to the file it is given.
//
// The command runs in the `benchmark-runner` sandbox like every other tool: agent.py at
// /work/agent (read-only), its output directory /work/out on the run's tmpfs, the inputs at
// /work/in, network only through the proxy's allowlist. Placeholders in its argv:
//   {task_ids}       the ids, comma-separated, as one argument
//   {task_ids_file}  /work/in/task_ids.txt, one id per line
//   {output}         /work/out/rewards.json, where the rewards must be written
//   {output_dir}     /work/out, for anything else the command wants to keep (train traces:
//                    /work/out/traces/<task id>/ is copied into the task's trace; failing
//                    checks: /work/out/failures.json, `FailureParsers.command`)
// Without a scorer the rewards come from the command's own word: if agent.py runs inside the
// command's process, it could write them, and the experiment is shown as unverified. With
// `runner.scorer`, a second command reads the runner's outputs read-only at /work/run, in the
// `benchmark-scorer` sandbox (no agent.py, nothing of the runner's but those outputs) once
// every process of the runner is gone, and only its {output} counts. The scorer's argv takes
// the same placeholders, plus {run_dir} (/work/run); its /work/out is its own.

import FoundationEssentials
import Glibc
import SandboxPolicy
import SupervisorIO

public struct CommandAdapter: BenchmarkAdapter {
    public let taskIDs: [String]
    public let tool: ToolSettings
    /// `runner.scorer`: the argv that scores the runner's outputs without agent.py.
    public var scorer: [String]?
    /// `runner.scorer_binds`: host paths bound read-only in the scorer's sandbox alone.
    public var scorerBinds: [String] = []

    public var hostPaths: [String] { scorerBinds }

    public var name: String { "command" }

    public init(taskIDs: [String], tool: ToolSettings) {
        self.taskIDs = taskIDs.sorted()
        self.tool = tool
    }

    static let rewardsLimit = 16 << 20

    public func run(_ ids: [String], _ context: AdapterRunContext) throws(BenchmarkError) -> [TaskOutcome] {
        guard !ids.isEmpty else { return [] }
        if context.oracle { throw BenchmarkError(.configuration, "--oracle is only for local benchmarks") }
        let run = try ToolRun(settings: tool, context: context, ids: ids)
        defer { run.finish() }
        try run.writeTaskIDs(ids)
        context.log("command: \(ids.count) task(s)\(scorer == nil ? " (unverified: no runner.scorer)" : "")")
        let exit = run.launch(ToolInvocation(policy: tool.runnerPolicy, argv: Self.expand(tool.command, ids), withAgent: true, label: "command"),
                              total: ids.count)
        run.reportFailure("command", exit)
        var toolExit = exit
        var seconds = exit.seconds
        if let scorer {
            // The runner's sandbox is gone (its pid namespace): nothing of agent.py's can
            // still write what the scorer reads.
            var inv = ToolInvocation(policy: tool.scorerPolicy, argv: Self.expand(scorer, ids), withAgent: false, label: "scorer")
            inv.runDirectory = run.scratch.path + "/app"
            inv.extraMounts = scorerBinds.map { MountSpec(kind: .readOnly(source: $0), destination: $0) }
            inv.outputName = "score"
            let scored = run.launch(inv, total: ids.count)
            run.reportFailure("scorer", scored)
            if exit.succeeded { toolExit = scored }
            seconds += scored.seconds
        }
        let out = run.openOutput(scorer == nil ? "app" : "score")
        defer { if out >= 0 { close(out) } }
        var results = out >= 0 ? Self.parse(out, ids: Set(ids), traces: !context.heldOut) : [:]
        // Train runs: the failing checks reported in failures.json, if any.
        if !context.heldOut, out >= 0, let bytes = FailureParsers.report(at: out, [], "failures.json") {
            for (id, evidence) in FailureParsers.command(bytes, ids: Set(ids)) where results[id] != nil { results[id]?.failures = evidence }
        }
        if scorer != nil {
            // The runner's own traces and model spend (its account, not a score).
            let runOut = run.openOutput()
            if runOut >= 0 {
                for (id, usd) in Self.costs(runOut, ids: Set(ids)) { results[id]?.costUSD = usd }
                if !context.heldOut {
                    for id in results.keys { results[id]?.trace += TraceCopy.directory(at: runOut, "traces/" + TraceName.encode(id), prefix: "run-") }
                }
                close(runOut)
            }
        }
        return run.outcomes(ids, results, toolExit: toolExit, seconds: seconds)
    }

    /// `argv` with the placeholders filled.
    static func expand(_ argv: [String], _ ids: [String]) -> [String] {
        argv.map { arg -> String in
            arg.replacingOccurrences(of: "{task_ids_file}", with: "/work/in/task_ids.txt")
                .replacingOccurrences(of: "{task_ids}", with: ids.joined(separator: ","))
                .replacingOccurrences(of: "{output_dir}", with: "/work/out")
                .replacingOccurrences(of: "{output}", with: "/work/out/rewards.json")
                .replacingOccurrences(of: "{run_dir}", with: "/work/run")
        }
    }

    /// Reads `rewards.json` from the output directory: a number in [0, 1] is the reward, null
    /// is an error (0, with `nullDetail`), anything else is malformed (0); ids not requested
    /// are ignored.
    static func parse(_ out: Int32, ids: Set<String>, traces: Bool,
                      nullDetail: String = "the command reported an error (null reward)") -> [String: ToolTaskResult] {
        func everyTask(_ detail: String) -> [String: ToolTaskResult] {
            Dictionary(uniqueKeysWithValues: ids.map { ($0, ToolTaskResult(reward: 0, status: .missingResult, detail: detail)) })
        }
        let bytes: [UInt8]
        switch FileSystem.readSmallFile(at: out, "rewards.json", limit: rewardsLimit) {
        case .success(let b): bytes = b
        case .failure(.missing): return [:]
        case .failure(let problem): return everyTask("rewards.json: \(problem.explanation("a tool's rewards file"))")
        }
        guard let object = JSONValue.parse(bytes)?.object else {
            if let key = JSONValue.firstDuplicateKey(bytes) {
                return everyTask("rewards.json names \(Reward.quote(key)) twice (which value counts is ambiguous)")
            }
            return everyTask("rewards.json is not a JSON object")
        }
        var results: [String: ToolTaskResult] = [:]
        for (id, value) in object where ids.contains(id) {
            var r: ToolTaskResult
            if let reward = value.reward {
                r = ToolTaskResult(reward: reward, status: reward >= TaskOutcome.passThreshold ? .passed : .failed)
            } else if value.isNull {
                r = ToolTaskResult(reward: 0, status: .missingResult, detail: nullDetail)
            } else {
                r = ToolTaskResult(reward: 0, status: .invalidReward, detail: "reward \(value.brief) is not a number in [0, 1]")
            }
            if traces { r.trace = TraceCopy.directory(at: out, "traces/" + TraceName.encode(id)) }
            results[id] = r
        }
        for (id, usd) in costs(out, ids: ids) { results[id]?.costUSD = usd }
        return results
    }

    /// `costs.json` beside rewards.json, if the command wrote one: `{"<task id>": dollars}`,
    /// its model spend per task (for the operator's account and `budget.max_cost_usd`).
    /// Ids not requested and values that are not finite non-negative numbers are ignored.
    static func costs(_ out: Int32, ids: Set<String>) -> [String: Double] {
        guard case .success(let bytes) = FileSystem.readSmallFile(at: out, "costs.json", limit: rewardsLimit),
              let object = JSONValue.parse(bytes)?.object else { return [:] }
        var out: [String: Double] = [:]
        for (id, value) in object where ids.contains(id) {
            if let x = value.number, x.isFinite, x >= 0, x < 1e7 { out[id] = x }
        }
        return out
    }
}

/// Copying a bounded slice of a tool's output into a train trace.
enum TraceCopy {
    static let maxFiles = 64
    static let maxTotal = 8 << 20

    /// Regular files directly under `relative` (a `/`-separated path below `dir`, each step
    /// opened O_NOFOLLOW), at most `maxFiles`, each capped; names prefixed with `prefix`.
    static func directory(at dir: Int32, _ relative: String, prefix: String = "") -> [(String, [UInt8])] {
        var fd = dup(dir)
        for part in relative.split(separator: "/") {
            let next = FileSystem.openDirectory(at: fd, FileSystem.name(String(part)))
            close(fd)
            guard next >= 0 else { return [] }
            fd = next
        }
        defer { close(fd) }
        var files: [(String, [UInt8])] = []
        var total = 0
        for n in (FileSystem.entries(of: fd) ?? []).sorted(by: { $0.lexicographicallyPrecedes($1) }) {
            guard files.count < maxFiles, total < maxTotal else { break }
            let name = FileSystem.display(n)
            guard let st = FileSystem.entryStatus(at: fd, n), FileSystem.isRegular(st), isSafeName(name) else { continue }
            if let bytes = FileSystem.readCapped(at: fd, name, cap: min(TaskRunner.traceCap, maxTotal - total)) {
                files.append((prefix + name, bytes))
                total += bytes.count
            }
        }
        return files
    }

    /// A file name safe to recreate in a trace directory.
    static func isSafeName(_ s: String) -> Bool {
        !s.isEmpty && s != "result.json" && BenchmarkTask.isValidID(s)
    }
}
