import ArgumentParser
import Benchmark
import Experiment
import ExperimentModel
import Foundation
import Ledger
import SandboxCLI
import SupervisorIO

/// Options shared by the experiment commands.
struct ExperimentOptions: ParsableArguments {
    @Option(name: [.customShort("C"), .customLong("dir")], help: "The experiment directory (default: the one containing the current directory).")
    var directory: String?

    @Option(name: .customLong("policy-dir"), help: "Directory of sandbox policies, searched before the built-in ones.")
    var policyDirs: [String] = []

    func layout() throws -> ExperimentLayout {
        let start = directory ?? FileManager.default.currentDirectoryPath
        guard let layout = ExperimentLayout.find(from: start.hasPrefix("/") ? start : FileManager.default.currentDirectoryPath + "/" + start) else {
            throw ValidationError("no experiment at \(start) (no experiment_config.yaml here or above); create one with `autoharness init DIR`")
        }
        return layout
    }

    /// Opens the experiment; what fails (lock busy, config, ledger) reaches `Exit.code(for:)`.
    func supervisor(_ purpose: String, exclusive: Bool = true) throws -> ExperimentSupervisor {
        let s = try ExperimentSupervisor(layout: try layout(), policySearchPaths: PolicyLocator.searchPaths(explicit: policyDirs),
                                         purpose: purpose, exclusive: exclusive)
        s.templatesDirectory = PolicyLocator.templatesDirectory()
        for note in s.recoveryNotes { printErr("autoharness: \(note)") }
        for problem in s.benchmarkProblems { printErr("autoharness: warning: \(problem)") }
        if !s.benchmarkProblems.isEmpty { printErr("autoharness: warning: a task that does not load scores 0 (setup_failed) when run; the others are unaffected") }
        return s
    }
}

extension ExperimentOptions {
    /// Opens the experiment exclusively and shows a progress line while tasks run.
    func perform<T>(_ purpose: String, _ body: (ExperimentSupervisor) throws -> T) throws -> (ExperimentSupervisor, T) {
        let s = try supervisor(purpose)
        let progress = ProgressLine(purpose)
        s.progress = progress.update
        s.log = { line in printErrRaw("\r\u{1B}[2K\(purpose): \(line)\n") }
        return (s, try body(s))
    }
}

/// A live "done/total" line on a terminal; nothing when output is redirected.
final class ProgressLine: @unchecked Sendable {
    let tty = isatty(2) != 0
    let label: String
    init(_ label: String) { self.label = label }
    func update(_ done: Int, _ total: Int, _ o: TaskOutcome?) {
        guard tty else { return }
        // Held-out tasks arrive without an outcome: the line shows a count only.
        let last = o.map { "  last: \($0.id) \($0.passed ? "PASS" : "FAIL")" } ?? ""
        printErrRaw("\r\u{1B}[2K\(label) \(done)/\(total)\(last)")
        if done == total { printErrRaw("\r\u{1B}[2K") }
    }
}

func printErrRaw(_ s: String) { _ = s.withCString { write(2, $0, strlen($0)) } }

struct InitCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "init",
        abstract: "Create an experiment directory.",
        discussion: """
            Writes experiment_config.yaml, agent/agent.py and PROGRAM.md from templates/, a workspace, \
            .gitignore and a git repository, and the supervisor-private .autoharness/ (ledger, later \
            the split and snapshots), which no sandbox ever mounts.

              autoharness init exp --benchmark local --dataset path/to/benchmark
              autoharness init exp --benchmark terminal-bench [--dataset terminal-bench@2.1] [--tool PATH]
              autoharness init exp --benchmark tau-bench --dataset /path/to/tau2-bench/data [--tool PATH]
              autoharness init exp --benchmark bird-interact --repo /path/to/BIRD-Interact [--tool PYTHON]
              autoharness init exp --benchmark command

            Each benchmark gets its upstream config keys plus autoharness's (sandbox:, runner:, \
            coding_agent:, gate:), its agent/agent.py template and its part of PROGRAM.md. The \
            benchmark's tool (harbor, tau2, ...) must be installed: init says how if it is not.
            """)

    @Argument(help: "Directory to create (must not exist or be empty).")
    var directory: String

    @Option(help: "Benchmark: \(ExperimentConfig.supportedBenchmarks.joined(separator: ", ")).")
    var benchmark: String = "local"

    @Option(help: "local: the benchmark directory (tasks/<id>/instruction.md, tests/test.sh, ...). terminal-bench: a Harbor registry dataset (default terminal-bench@2.1, the hub package terminal-bench/terminal-bench-2-1 pinned; name@version or org/name@ref), a directory of Harbor tasks, or the directory `harbor download -o DIR` wrote. tau-bench: tau2's data directory (default $TAU2_DATA_DIR). bird-interact: lite or full.")
    var dataset: String?

    @Option(name: .customLong("registry-path"), help: "terminal-bench: a local Harbor registry.json (or its directory) that --dataset name@version is resolved from, with no network.")
    var registryPath: String?

    @Option(name: .customLong("registry-url"), help: "terminal-bench: the legacy registry.json URL `harbor download` resolves --dataset name@version from (default: Harbor's registry). A registry dataset is downloaded once, by init, into the experiment's private directory; runs then need no registry access.")
    var registryURL: String?

    @Option(help: "The benchmark's tool, when it is not on PATH under its usual name: harbor; tau2; bird-interact: the Python with the ADK's requirements.")
    var tool: String?

    @Option(help: "bird-interact: the BIRD-Interact checkout (default: $BIRD_REPO).")
    var repo: String?

    @Option(help: "The coding agent preset: claude (Claude Code), codex (Codex CLI) or command (write coding_agent.command yourself). A preset finds the CLI, checks it runs, and writes its command, environment switches, API key name, install bind and API allowlist entry.")
    var codingAgent: String = "command"

    @Option(help: "The coding agent's executable, when it is not on PATH as `claude`/`codex` (symbolic links are resolved).")
    var codingAgentBin: String?

    @Option(help: "local and terminal-bench: make each task's image now (its docker_image, else built from environment/Dockerfile with podman), so every task runs on it; terminal-bench then gets env_provider: local. auto (default): where podman and the verifier tools are installed and tasks have images; build: the same, refused when either is missing; none: no images (`autoharness images` makes them later).")
    var images: String = ImagesAtInit.auto.rawValue

    func run() throws {
        guard let imagesMode = ImagesAtInit(rawValue: images) else {
            throw ExperimentError(.usage, "--images \(images): one of \(ImagesAtInit.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        var options = InitOptions(benchmark: benchmark, dataset: dataset, tool: tool, repo: repo, templates: try PolicyLocator.requireTemplates(),
                                                       codingAgent: codingAgent, codingAgentBinary: codingAgentBin, registryPath: registryPath, registryURL: registryURL)
        options.images = imagesMode
        let (layout, plan) = try ExperimentSupervisor.initialize(directory: directory, options)
        print("created experiment \(layout.root)")
        if let note = plan.note { printErr("autoharness: \(note)") }
        if plan.build {
            // Like a registry download: each task's image, once, before any agent.py runs.
            // Not exclusive, so the model's and provider's keys are not asked for yet: nothing else
            // knows of the experiment, and building runs no agent.
            let s = try ExperimentSupervisor(layout: layout, policySearchPaths: PolicyLocator.searchPaths(explicit: []), purpose: "images", exclusive: false)
            let (count, problems) = try s.buildImages { printErr($0) }
            print("images: \(count) task\(count == 1 ? "" : "s") on their own image")
            for (_, p) in problems.sorted(by: { $0.key < $1.key }) { printErr("autoharness: \(p)") }
            if !problems.isEmpty {
                printErr("autoharness: \(problems.count) task(s) are refused (setup_failed, with the reason) until `autoharness images -C \(layout.root)` makes their image")
                throw ExitCode(1)
            }
        }
        print("next: review \(layout.config), then `autoharness prepare -C \(layout.root)`")
    }
}

struct PrepareCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prepare",
        abstract: "Validate the config, run the baseline, make the 70/30 split, record iteration 0.",
        discussion: "The baseline runs every task with nothing persisted (the split is not known yet, so every task is treated as a test task).")

    @OptionGroup var experiment: ExperimentOptions

    func run() throws {
        let (s, r) = try experiment.perform("prepare") { try $0.prepare() }
        print("baseline: \(r.passed)/\(r.tasks) tasks pass")
        if let u = s.config.unverifiedRewards { print("rewards: UNVERIFIED (\(u))") }
        if let v = s.config.vendorAccounts.sharedNote { print("vendor account: SHARED (\(v))") }
        print("split: \(r.train) train, \(r.test) test (\(r.splitOrigin))")
        print("iteration 0: val_score \(String(format: "%.4f", r.baselineScore)) on the test split")
        print(r.gateRule)
        for w in r.warnings { printErr("autoharness: warning: \(w)") }
    }
}

struct ImagesCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "images",
        abstract: "Build each task's image from its environment/Dockerfile (podman), so the task runs on it.",
        discussion: """
            For a local benchmark. Each task with an environment/Dockerfile is built with this host's podman \
            (its registries and base images; RUN steps have the host's network), unpacked into the experiment's \
            private directory, and from then on both of the task's sandboxes have the image as their root: root \
            inside a user namespace, the image's WORKDIR and ENV, /app as the image holds it, nothing else of \
            environment/. A task whose context is unchanged is not built again. Without an image a task runs on \
            the host's userland, /app seeded from environment/.
            """)

    @OptionGroup var experiment: ExperimentOptions

    func run() throws {
        let s = try experiment.supervisor("images")
        let (count, problems) = try s.buildImages { printErr($0) }
        print("images: \(count) task\(count == 1 ? "" : "s") on their own image")
        for (_, p) in problems.sorted(by: { $0.key < $1.key }) { printErr("autoharness: \(p)") }
        if !problems.isEmpty { throw ExitCode(1) }
    }
}

struct BenchmarkCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "benchmark",
        abstract: "Run the train split (or some train tasks) and keep their traces.",
        discussion: "Writes workspace/train_results.json and workspace/traces/latest/<task>/ (the first run also traces/baseline/). Ids outside the train split are refused, and the refusal is recorded.")

    @OptionGroup var experiment: ExperimentOptions

    @Option(name: .customLong("task-ids"), parsing: .upToNextOption, help: "Train task ids to run (default: all).")
    var taskIDs: [String] = []

    @Flag(help: "Run each task's solution/solve.sh instead of agent.py (validates a benchmark).")
    var oracle = false

    func run() throws {
        let (s, outcomes) = try experiment.perform("benchmark") {
            try $0.runBenchmark(taskIDs: taskIDs.isEmpty ? nil : taskIDs, oracle: oracle)
        }
        print(AgentText.benchmark(outcomes, unverified: s.config.unverifiedRewards), terminator: "")
    }
}

struct GateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "gate",
        abstract: "Judge a snapshot of agent/agent.py: suite, held-out test score, promotion; commit if accepted.",
        discussion: "What is printed is set by gate.disclosure in experiment_config.yaml (decision | rounded | score | ladder). Per-task test results are never printed or stored where the coding agent could read them. Exit 0 accepted, 1 rejected; 2 not prepared, 4 lock busy, 5 I/O or ledger error (see `autoharness --help`).")

    @OptionGroup var experiment: ExperimentOptions

    @Option(name: [.customShort("m"), .customLong("message")],
            help: "What the change is and why (one line, at most 500 characters kept): the commit's body, results.tsv's description, the report's title for this attempt.")
    var message: String?

    func run() throws {
        let (s, (ranking, r)) = try experiment.perform("gate") { s -> (CandidatesRankedRecord?, GateResult) in
            guard try !s.state().pendingCandidates.isEmpty else { return (nil, try s.gate(message: message)) }
            let g = try s.gateCandidates(actor: "cli", message: message)
            // What was gated is what agent/ holds from now on, as inside `autoharness run`.
            try AtomicFile.write(try s.snapshotBytes(g.result.agentSHA256), to: s.layout.agentFile, mode: 0o644)
            return (g.ranking, g.result)
        }
        let (text, code) = AgentText.gate(Disclosure.gate(r, state: try s.state(), config: s.config))
        print((ranking.map(AgentText.ranking) ?? "") + text, terminator: "")
        if code != 0 { throw ExitCode(code) }
    }
}

struct TriageCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "triage",
        abstract: "Run the triage command (triage: in experiment_config.yaml) over the train split's failure records now.",
        discussion: "The command runs in a sandbox of its own (policy `triage`): the records that are not resolved at /work/in/records.json, the train traces read-only at /work/run, its model API only through the proxy's inference gate (triage.network.inference). It writes /work/out/triage.json: a hypothesis, a label and a severity per record. Each entry is checked (a known record id, once; one printable line; a label of at most 80 characters; low|medium|high|critical) before a `triage` row records it; refusals are counted with their reasons. failures.md then shows the hypotheses and ranks clusters with the same label as one. It also runs after each revealed batch (triage.after: batch) or train run (train_run). Not available to the coding agent.")

    @OptionGroup var experiment: ExperimentOptions

    func run() throws {
        let (_, r) = try experiment.perform("triage") { try $0.runTriage(trigger: "operator") }
        guard let r else { print("triage: no failure record to read"); return }
        print("triage (\(r.exit)): \(r.records) record(s) given, \(r.entries.count) entr\(r.entries.count == 1 ? "y" : "ies") kept, \(r.refused) refused")
        for p in r.problems { print("  refused: \(p)") }
        if r.entries.isEmpty { throw ExitCode(Exit.failure) }
    }
}

struct CandidateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "candidate",
        abstract: "Submit agent/agent.py as one of several candidates for the next gate (loop.candidates).",
        discussion: "With loop.candidates: K (2 to 8) up to K candidates wait for the next `autoharness gate`, which runs each on the train split (every revealed train task), ranks them there (suite threshold met, then train score, then suite tasks passed, then the order submitted) and judges only the best: one gate is one look at the held-out split whatever K is. The others are recorded as explored with their train numbers (status, the report, the explorer). The gated candidate becomes agent/agent.py. Submitting an agent.py already waiting changes nothing; one already judged by a gate is refused.")

    @OptionGroup var experiment: ExperimentOptions

    @Option(name: [.customShort("m"), .customLong("message")],
            help: "What this candidate tries (one line, at most 500 characters kept): the gate's message if it is the one gated.")
    var message: String?

    func run() throws {
        let (s, c) = try experiment.perform("candidate") { try $0.submitCandidate(message: message, actor: "cli") }
        print(AgentText.candidate(c, of: s.config.loop.candidates), terminator: "")
    }
}

struct StatusCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "status",
        abstract: "Iterations, best score, suite size, recent gate attempts, violations.",
        discussion: "--verify recomputes the ledger's hash chain (naming edited, deleted or reordered rows), compares the workspace views with the ledger, and checks each accepted commit is in git; exit 1 if anything is wrong. A view that is exactly what the ledger said at an earlier head since its last publish is behind, not wrong (a supervisor stopped between recording and publishing): it is listed, and the next command that takes the experiment lock regenerates it. Status takes no lock and changes nothing.")

    @OptionGroup var experiment: ExperimentOptions

    @Flag(help: "Machine-readable output.")
    var json = false

    @Flag(help: "Check the ledger chain, the views and the commits.")
    var verify = false

    @Flag(help: "The operator's view: exact scores and violations from held-out runs. Without it, status shows only what gate.disclosure allows, i.e. what the coding agent may see.")
    var `operator` = false

    func run() throws {
        let s = try experiment.supervisor("status", exclusive: false)
        let state = try s.state()
        let report = verify ? try s.verify() : nil
        // Without --operator, exactly what the coding agent may see.
        let text = `operator`
            ? AgentText.status(Disclosure.operatorStatus(state, config: s.config), root: s.layout.root, json: json, verify: report)
            : AgentText.status(Disclosure.agentStatus(state, config: s.config), root: s.layout.root, json: json, verify: report)
        print(text, terminator: "")
        if let report, !report.ok { throw ExitCode(Exit.failure) }
    }
}

struct FailuresCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "failures",
        abstract: "Failure records and clusters of the train split, ranked (what workspace/failures.md shows the coding agent).",
        discussion: "A failure record is one failing check of one train task, from the benchmark's own results (a test report, tau2's reward breakdown, Harbor's exception, BIRD's phases), followed across runs: open, fixed by an agent.py not yet accepted, or resolved by an accepted gate. A cluster is every record with one signature (error class, failing check, message with numbers, ids, paths and quoted values stripped), ranked unresolved first, then by open records, total failures and lowest resolution rate. Held-out tasks never have records. With a triage (`triage:`), each cluster shows its hypotheses, label and severity, and clusters labelled alike rank as one. The operator decides groupings with --cluster ID --label TEXT | --merge ID2 | --split, or --accept-triage (with loop.review: operator the triage's labels merge nothing until then), each with --reason: a ledger row, shown in the report. Without those it takes no lock and changes nothing.")

    @OptionGroup var experiment: ExperimentOptions

    @Option(help: "One cluster (its id, c…), with every record.")
    var cluster: String?

    @Flag(help: "Machine-readable output.")
    var json = false

    @Option(help: "With --cluster: name its root cause; clusters with the same label (yours, or an accepted triage's) are one, ranked together.")
    var label: String?

    @Option(help: "With --cluster: it has the same root cause as this cluster.")
    var merge: String?

    @Flag(help: "With --cluster: it stands alone, whatever the triage's label says.")
    var split = false

    @Flag(name: .customLong("accept-triage"), help: "Accept the latest triage's labels for every cluster you have not decided (loop.review: operator: until then they merge nothing).")
    var acceptTriage = false

    @Option(help: "Why (kept with the decision; required with --label, --merge, --split, --accept-triage).")
    var reason: String?

    func validate() throws {
        let decisions = [label != nil, merge != nil, split, acceptTriage].filter { $0 }.count
        if decisions > 1 { throw ValidationError("one of --label, --merge, --split, --accept-triage at a time") }
        if decisions == 1 && reason == nil { throw ValidationError("--reason: say why") }
        if (label != nil || merge != nil || split) && cluster == nil { throw ValidationError("--label, --merge and --split need --cluster") }
    }

    func run() throws {
        if acceptTriage {
            let (_, done) = try experiment.perform("failures") { try $0.acceptTriage(reason: reason!, actor: "operator") }
            print("accepted the triage's labels of \(done.count) cluster(s): \(done.joined(separator: ", "))")
            return
        }
        if let cluster, label != nil || merge != nil || split {
            let action: ClusterReviewRecord.Action = label != nil ? .label : merge != nil ? .merge : .split
            _ = try experiment.perform("failures") { try $0.reviewCluster(cluster, action: action, label: label, with: merge, reason: reason!, actor: "operator") }
            print("recorded: \(cluster) \(action.rawValue)\(label.map { " \"\($0)\"" } ?? "")\(merge.map { " with \($0)" } ?? "")")
            return
        }
        let s = try experiment.supervisor("failures", exclusive: false)
        print(try Views.failuresText(try s.state(), cluster: cluster, json: json), terminator: "")
    }
}

struct SuiteCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "suite",
        abstract: "The operator's review of the regression suite: approve pending promotions, retire tasks.",
        discussion: "With loop.review: operator an accepted gate's promotions wait (status --operator lists them) until `suite approve` takes them in (every pending task when none is named). `suite retire` takes tasks out of the suite, or refuses a pending promotion, for good: no gate promotes them again. Each decision is a ledger row with its reason, shown in the report. Not available to the coding agent.")

    @OptionGroup var experiment: ExperimentOptions

    @Argument(help: "approve or retire.")
    var action: String

    @Argument(help: "Task ids (approve: default every pending one).")
    var tasks: [String] = []

    @Option(help: "Why (kept with the decision).")
    var reason: String

    func run() throws {
        let (_, done) = try experiment.perform("suite") { try $0.reviewSuite(action, tasks: tasks, reason: reason, actor: "operator") }
        print("\(action == "approve" ? "approved into" : "retired from") the suite: \(done.joined(separator: ", "))")
    }
}

struct NeedsHumanCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "needs-human",
        abstract: "Leave the operator a note: something only a human can give (a key, a decision, a broken task).",
        discussion: "Recorded in the ledger (one line, at most 500 characters kept) and shown by `status --operator` and the report; nothing acts on it. Inside `autoharness run` the coding agent's sandbox sends the same request to the supervisor.")

    @OptionGroup var experiment: ExperimentOptions

    @Argument(help: "What is needed.")
    var text: String

    func run() throws {
        _ = try experiment.perform("needs-human") { try $0.needsHuman(text, actor: "cli") }
        print("recorded for the operator (status --operator, the report)")
    }
}

struct ReportCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "report",
        abstract: "Write a self-contained HTML report: score history, suite, train pass rate, violations.",
        discussion: "The operator's view (exact scores, held-out violations): by default written to report.html in the experiment directory, which no sandbox mounts. No scripts or network assets; charts are inline SVG.")

    @OptionGroup var experiment: ExperimentOptions

    @Option(help: "Where to write the HTML file (default: DIR/report.html).")
    var out: String?

    func run() throws {
        let s = try experiment.supervisor("report", exclusive: false)
        let state = try s.state()
        let path = out ?? s.layout.root + "/report.html"
        let html = Report.html(state, config: s.config, title: "autoharness report: \(s.layout.root)", agentSource: s.snapshotSource,
                               learnings: s.learningsText())
        try AtomicFile.write(html, to: path, mode: 0o644)
        print(path)
    }
}
