import Benchmark
import ExperimentModel
import Foundation
import Ledger
import Sandbox
import SupervisorIO

// `triage:` is a model-driven reading of the train split's failure records.
// The configured command runs in a sandbox of its own (policy `triage`): the records that are
// not resolved at /work/in/records.json, the train traces read-only at /work/run, its model API
// behind the proxy's inference gate, nothing else. What it writes is checked against
// `TriageSchema` before a `triage` row records it; the failure views then show each
// cluster's hypotheses, label and severity, and rank clusters with the same label as one.
// The held-out split is dark here by the same three walls as the records: only train tasks
// ever become records (FailureBook's replay), the input holds only records, and the sandbox
// mounts nothing else (test: TriageTests.swift, heldOutDark).

struct TriageOperation {
    let experiment: ExperimentContext

    /// Runs the triage command once over the current records (`trigger` says why: `operator`,
    /// `batch N`, `train run`): every record not resolved, or with `onlyNew` (the automatic
    /// runs) those no triage has read yet, at most `triage.max_records`, so however often the
    /// coding agent runs the benchmark the triage reads each failure once. Returns its row, or
    /// nil when there is nothing to triage. A command that fails or writes nothing acceptable
    /// is recorded as such, not thrown: the train run it follows is recorded already.
    @discardableResult
    func runTriage(trigger: String, onlyNew: Bool = false) throws -> TriageRecord? {
        guard let triage = experiment.config.triage else {
            throw ExperimentError(.usage, "\(experiment.layout.config): no triage command (set triage.command, or triage.preset: claude | codex)")
        }
        let s = try experiment.state()
        let (input, known) = onlyNew ? TriageSchema.input(FailureBook(s), skip: Set(s.triage.keys), limit: triage.maxRecords)
                                     : TriageSchema.input(FailureBook(s))
        guard !known.isEmpty else {
            experiment.log?("triage: no failure record to read (every record is resolved\(onlyNew ? " or read by a triage already" : ""), or none was seen)")
            return nil
        }
        try TraceFiles.makeDirectories(experiment.layout.latestTraces)
        let launch = try Self.triageLaunch(triage)
        // The triage sees what the coding agent sees of the train split, and nothing of what
        // the benchmark keeps from agent.py: no bind (its own or its preset's) may reach this
        // experiment, the dataset or the scorer's answers (each benchmark's own paths are
        // checked with runner.binds when the supervisor starts: `toolBinds`).
        try RunnerBinds.refuse(launch.settings.binds.map { ("triage.binds", $0) }, exposing: experiment.config.experimentProtected(root: experiment.layout.root))
        let argv = launch.settings.command
        let settings = launch.settings
        let audit = AuditLog()
        var context = AdapterRunContext(policyLoader: experiment.policyLoader, agentDirectory: "", scratchRoot: experiment.config.scratch, audit: audit, heldOut: false,
                                        concurrency: 1, traceDirectory: { _ in nil })
        if let log = experiment.log { context.log = log }
        experiment.log?("triage: \(known.count) failure record(s) to \(argv[0])")
        let result: EvidenceTool.Result
        do throws(BenchmarkError) {
            result = try EvidenceTool.run(settings: settings, context: context, argv: argv.map { $0 == "{prompt}" ? Self.triagePrompt : $0 },
                                          environment: launch.environment + ["AUTOHARNESS_TRIAGE_INPUT=/work/in/records.json",
                                                                             "AUTOHARNESS_TRIAGE_OUTPUT=/work/out/triage.json", "AUTOHARNESS_TRACES=/work/run"],
                                          inputs: [("records.json", input)] + launch.inputs, tree: experiment.layout.latestTraces,
                                          output: "triage.json", cap: TriageSchema.maxOutputBytes, label: "triage")
        } catch {
            throw ExperimentError(error.code == .io ? .io : .usage, "triage: \(error.message)")
        }
        var record = TriageRecord(actor: "triage", trigger: trigger, records: known.count, entries: [], refused: 0, problems: [], exit: result.exit,
                                  mergesPending: experiment.config.loop.review == .operator ? true : nil)
        switch result.output {
        case .success(let bytes):
            (record.entries, record.refused, record.problems) = TriageSchema.check(bytes, known: known)
        case .failure(let problem):
            record.problems = ["/work/out/triage.json: \(problem.explanation("a triage's output"))"]
        }
        if !result.succeeded {
            for (name, tail) in [("stderr", result.stderrTail), ("stdout", result.stdoutTail)] where !tail.isEmpty {
                experiment.log?("triage \(result.exit), the end of its \(name): \(tail.suffix(600))")
            }
        }
        experiment.log?("triage \(result.exit) in \(Int(result.seconds)) s: \(record.entries.count) entr\(record.entries.count == 1 ? "y" : "ies") kept, \(record.refused) refused"
             + (record.problems.first.map { " (\($0))" } ?? ""))
        _ = try experiment.ledger.appendAll([(.triage, record)] + experiment.violations(audit, actor: "triage"))
        try experiment.regenerateViews()
        return record
    }

    /// The operator's decision about cluster `cluster`'s grouping (`failures --label | --merge
    /// | --split`), a `cluster_review` row.
    func reviewCluster(_ cluster: String, action: ClusterReviewRecord.Action, label: String? = nil, with other: String? = nil,
                              reason: String, actor: String) throws {
        let book = FailureBook(try experiment.state())
        guard book.cluster(cluster) != nil else { throw ExperimentError(.usage, "no failure cluster \(printable(cluster)): `autoharness failures` lists them") }
        guard let why = noteLine(reason) else { throw ExperimentError(.usage, "--reason: say why (a non-empty text)") }
        var row = ClusterReviewRecord(actor: actor, cluster: cluster, action: action, label: nil, with: nil, reason: why)
        switch action {
        case .label:
            guard let l = label.flatMap({ TriageSchema.text($0, limit: TriageSchema.maxLabel) }) else { throw ExperimentError(.usage, "--label: a non-empty name") }
            row.label = l
        case .merge:
            guard let other, other != cluster, book.cluster(other) != nil else { throw ExperimentError(.usage, "--merge \(printable(other ?? "")): not another existing cluster") }
            row.with = other
        case .split: break
        }
        _ = try experiment.ledger.append(.clusterReview, row)
        try experiment.regenerateViews()
    }

    /// Accepts the latest triage's labels for every cluster it labelled that has no decision
    /// of the operator's yet (one `label` row each). Returns the clusters decided.
    @discardableResult
    func acceptTriage(reason: String, actor: String) throws -> [String] {
        let s = try experiment.state()
        guard let why = noteLine(reason) else { throw ExperimentError(.usage, "--reason: say why (a non-empty text)") }
        let decided = Set(s.clusterReviews.map(\.record.cluster))
        let rows = FailureBook(s).clusters.compactMap { c -> ClusterReviewRecord? in
            guard !decided.contains(c.id), let l = c.triage?.label else { return nil }
            return ClusterReviewRecord(actor: actor, cluster: c.id, action: .label, label: l, with: nil, reason: why)
        }
        guard !rows.isEmpty else { throw ExperimentError(.usage, "no triage label waits for a decision") }
        _ = try experiment.ledger.appendAll(rows.map { (.clusterReview, $0 as any Encodable) })
        try experiment.regenerateViews()
        return rows.map(\.cluster)
    }

    /// How the triage is launched: `triage:` as written, or with `triage.preset` the coding
    /// agent preset's command (its `{prompt}` the triage prompt), switches, install and vendor
    /// API (behind the inference gate unless `triage.network.inference` names another), each
    /// extended by what `triage:` adds. Codex reads its config.toml from its home (/tmp in the
    /// sandbox): it is put there from /work/in before Codex starts.
    static func triageLaunch(_ t: ExperimentConfig.Triage) throws -> (settings: ToolSettings, environment: [String], inputs: [(name: String, bytes: [UInt8])]) {
        var argv = t.tool.command ?? []
        var envPass = t.tool.envPass, binds = t.tool.binds, inference = t.tool.networkInference
        var constants = t.env
        var inputs: [(name: String, bytes: [UInt8])] = []
        if let name = t.preset {
            let p = try CodingAgentPreset.make(name, binary: t.bin)
            if argv.isEmpty { argv = p.command }
            envPass = p.envPass + envPass.filter { !p.envPass.contains($0) }
            binds = p.binds + binds.filter { !p.binds.contains($0) }
            for (k, v, _) in p.env where constants[k] == nil { constants[k] = v }
            if inference.isEmpty { inference = p.inference }
            if name == "codex" {
                inputs.append(("codex-config.toml", Array(CodingAgentPreset.codexConfig.utf8)))
                argv = ["/bin/sh", "-c", "mkdir -p \"$HOME/.codex\" && cp /work/in/codex-config.toml \"$HOME/.codex/config.toml\" && exec \"$@\"", "triage"] + argv
            }
        }
        guard !argv.isEmpty else { throw ExperimentError(.usage, "triage: no command (set triage.command, or triage.preset: claude | codex)") }
        var settings = ToolSettings(command: argv)
        settings.binds = binds
        settings.envPass = envPass
        settings.networkAllow = t.tool.networkAllow
        settings.networkInference = inference
        settings.tunnelledKeys = Set(t.tool.tunnelledKeys)
        settings.upstreamCA = t.tool.upstreamCA
        settings.timeout = t.tool.timeout
        settings.runnerPolicy = t.tool.policy
        return (settings, constants.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }, inputs)
    }

    /// What a preset's `{prompt}` becomes: the task, the files and the format.
    static let triagePrompt = """
        You are triaging failures of a benchmark's train split. /work/in/records.json lists failure records \
        (each with an id, the task, the failing check and an excerpt) and names each task's trace directory under \
        /work/run. For every record, find the root cause and write /work/out/triage.json as \
        {"triage": [{"record": ID, "hypothesis": ONE LINE, "label": SHORT NAME, "severity": "low|medium|high|critical"}]}. \
        Give records with the same root cause the same label. Write nothing else.
        """

    /// Triage after a train run or a batch's run, as `triage.after` says; a failure is the
    /// operator's to read, never the run's end.
    func triageAfter(_ moment: ExperimentConfig.Triage.After, trigger: String) {
        guard let t = experiment.config.triage, t.after == moment else { return }
        do {
            try runTriage(trigger: trigger, onlyNew: true)
        } catch {
            experiment.log?("triage after the \(trigger) failed: \(error)")
            _ = try? experiment.ledger.append(.note, NoteRecord(text: "triage after the \(trigger) failed: \(printable("\(error)", limit: 400))"))
        }
    }
}
