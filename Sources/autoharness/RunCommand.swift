import ArgumentParser
import Benchmark
import Experiment
import ExperimentModel
import Foundation
import Ledger
import Sandbox
import SandboxCLI
import SupervisorIO

struct RunCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "The supervised loop: start the coding agent in its sandbox and answer its benchmark/gate/status requests.",
        discussion: """
            The coding agent (coding_agent.command, or --agent-cmd) starts in /work inside the \
            coding-agent sandbox: PROGRAM.md, agent/ (a staging copy; only agent.py is ever taken \
            back), workspace/ read-only with train traces and the views, workspace/learnings.md \
            writable, a scratch $HOME, network only through the egress proxy: its model API \
            (sandbox.network.inference) through the run's inference gate, which holds the API \
            keys (the sandbox sees placeholders) and refuses the vendor's stored state; plain \
            tunnels to sandbox.network.allow. Its `autoharness benchmark|gate|status` are requests to this \
            supervisor over a socket; the supervisor runs them, records and commits.

            The run stops at --max-iterations accepted gates, --max-hours, gate.budget gates, \
            gate.max_non_improving rejections in a row, budget.max_cost_usd, a crash loop of the \
            agent (coding_agent.max_crashes), or SIGINT/SIGTERM (the request in progress is \
            finished first; a second signal abandons it and the next run records it as \
            interrupted). If the agent exits earlier it is restarted with \
            coding_agent.continue_prompt after coding_agent.restart_backoff seconds, doubled for \
            each further session in a row that made no progress (ran no gate and no benchmark \
            of a new agent.py), up to 300 s; after coding_agent.max_restarts such restarts the \
            next such session ends the run. `autoharness status` shows every budget and what \
            the open run has used of it.

            Exit status: 0 when the run stopped at a budget after working or at a signal; 3 \
            (nothing left to do) when a budget was already spent as it began or the agent's \
            sessions stopped making progress, with the reason as the last line on stderr; 1 \
            for a crash loop; 5 when a write of the supervisor's failed (the ledger, a \
            snapshot, a view, a trace, the audit file: a full disk, say), which stops the \
            coding agent at once (if even the run's end cannot be recorded, this report goes \
            to stderr).

            Run it again after a crash, kill -9 or reboot: an unfinished run is resumed from the \
            ledger (a gate that was cut off is recorded as interrupted, never half-recorded).

              autoharness run -C exp --max-iterations 3 --max-hours 8
              autoharness run -C exp --agent-cmd 'claude -p {prompt} --dangerously-skip-permissions'
            """)

    @OptionGroup var experiment: ExperimentOptions

    @Option(name: .customLong("agent-cmd"), help: "The coding agent's command line (shell-style quoting; {prompt} is replaced by the prompt). Overrides coding_agent.command.")
    var agentCommand: String?

    @Option(name: .customLong("max-iterations"), help: "Stop after this many accepted gates in this run.")
    var maxIterations: Int?

    @Option(name: .customLong("max-hours"), help: "Stop after this many hours of wall-clock time.")
    var maxHours: Double?

    func validate() throws {
        if let m = maxIterations, m < 1 { throw ValidationError("--max-iterations must be at least 1 (got \(m))") }
        if let h = maxHours, !(h > 0) { throw ValidationError("--max-hours must be positive (got \(h))") }
        if let c = agentCommand, (try? ShellWords.split(c))?.isEmpty ?? true {
            throw ValidationError("--agent-cmd: '\(c)' is empty or has an unclosed quote")
        }
    }

    func run() throws {
        let stops = StopSignals.install()
        printErr("autoharness: \(DoctorCommand.startupSummary())")
        let s = try experiment.supervisor("run")
        var settings = RunSettings(clientBinary: PolicyLocator.clientBinary(), hostEnvironment: ProcessInfo.processInfo.environment) { line in
            printErr("autoharness: \(line)")
        }
        settings.agentCommand = try agentCommand.map(ShellWords.split)
        settings.maxIterations = maxIterations
        settings.maxHours = maxHours
        let loop = RunLoop(supervisor: s, settings: settings)
        stops.onSignal { signal, number, count in
            if count == 1 {
                printErr("autoharness: \(signal) received: stopping (the request in progress is finished first; send it again to abandon that)")
                loop.requestStop("\(signal) received")
            } else {
                printErr("autoharness: \(signal) again: abandoning; the next `autoharness run` records any unfinished gate as interrupted")
                Glibc.exit(Exit.interrupted(by: number))
            }
        }
        let report = try loop.run()
        // A run whose end the ledger did not take leaves this report as the only account
        // of its end: on stderr, with the failure.
        if report.endRecorded {
            print(Self.text(report, disclosure: .score))
        } else {
            printErr(Self.text(report, disclosure: .score) + "\n  NOT RECORDED: \(report.ioFailure ?? "the run's end") (the next `autoharness run` resumes this run)")
        }
        // A run stopped by a write that failed (a full disk, the ledger) says so in its code.
        if report.failed { throw ExitCode(report.ioFailure != nil ? Exit.ioError : Exit.failure) }
        if report.nothingLeft {
            printErr("autoharness: nothing left to do: \(report.reason)")
            throw ExitCode(Exit.nothingLeft)
        }
    }

    static func text(_ r: RunReport, disclosure: ExperimentConfig.DisclosureLevel) -> String {
        func score(_ v: Double?) -> String { v.map { String(format: "%.4f", $0) } ?? "-" }
        let minutes = Int(r.seconds / 60), secs = Int(r.seconds) % 60
        var out = """
            run \(r.runID)\(r.resumed ? " (resumed)" : "") stopped: \(r.reason)
              time \(minutes)m\(secs)s, coding agent started \(r.agentStarts) time(s)
              gates: \(r.gates) (\(r.accepted) accepted, \(r.gates - r.accepted) rejected)
              best val_score: \(score(r.bestBefore)) -> \(score(r.bestAfter))
            """
        if r.violations.isEmpty {
            out += "\n  violations: none"
        } else {
            out += "\n  violations (\(r.violations.reduce(0) { $0 + $1.count })):"
            for v in r.violations { out += "\n    \(v.actor): \(v.kind) ×\(v.count)" }
        }
        if r.usage.totalTokens > 0 || r.usage.costUSD != nil {
            out += "\n  coding agent usage (as its CLI reported it): \(r.usage.summary)"
            if let c = r.usage.costUSD, r.accepted > 0 { out += "\n  cost per accepted improvement: \(AgentUsage.dollars(c / Double(r.accepted)))" }
        }
        out += "\n  coding agent output: \(r.agentLog)\n  audit log: \(r.auditLog)\n  details: autoharness status --operator"
        return out
    }
}

// MARK: - helpers

/// SIGINT/SIGTERM/SIGHUP as calls on a thread of ours (through `ProcessSignals.channel`).
final class StopSignals: @unchecked Sendable {
    private let readFD: Int32
    private var handler: ((_ name: String, _ number: Int32, _ count: Int) -> Void)?
    private let lock = NSLock()

    private init(readFD: Int32) { self.readFD = readFD }

    static func install() -> StopSignals {
        let s = StopSignals(readFD: ProcessSignals.channel([SIGINT, SIGTERM, SIGHUP]))
        Thread.detachNewThread { s.loop() }
        return s
    }

    func onSignal(_ h: @escaping (_ name: String, _ number: Int32, _ count: Int) -> Void) { lock.withLock { handler = h } }

    private func loop() {
        var count = 0
        while true {
            var b: UInt8 = 0
            let n = read(readFD, &b, 1)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            count += 1
            let name = b == UInt8(SIGINT) ? "SIGINT" : b == UInt8(SIGTERM) ? "SIGTERM" : "SIGHUP"
            if let h = lock.withLock({ handler }) {
                h(name, Int32(b), count)
            } else {
                printErr("autoharness: \(name) before the run started; exiting")
                exit(Exit.interrupted(by: Int32(b)))
            }
        }
    }
}

/// POSIX-shell-like word splitting for --agent-cmd: whitespace separates, '...' is literal,
/// "..." allows \" and \\, a backslash outside quotes escapes the next character.
enum ShellWords {
    struct Unclosed: Error {}

    static func split(_ s: String) throws -> [String] {
        var words: [String] = []
        var cur = ""
        var inWord = false
        var it = s.makeIterator()
        while let c = it.next() {
            switch c {
            case " ", "\t", "\n":
                if inWord { words.append(cur); cur = ""; inWord = false }
            case "'":
                inWord = true
                while true {
                    guard let d = it.next() else { throw Unclosed() }
                    if d == "'" { break }
                    cur.append(d)
                }
            case "\"":
                inWord = true
                while true {
                    guard let d = it.next() else { throw Unclosed() }
                    if d == "\"" { break }
                    if d == "\\" {
                        guard let e = it.next() else { throw Unclosed() }
                        if e != "\"" && e != "\\" { cur.append("\\") }
                        cur.append(e)
                    } else {
                        cur.append(d)
                    }
                }
            case "\\":
                inWord = true
                guard let d = it.next() else { throw Unclosed() }
                cur.append(d)
            default:
                inWord = true
                cur.append(c)
            }
        }
        if inWord { words.append(cur) }
        return words
    }
}

// MARK: - demo

struct DemoCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "The whole loop offline: a generated unit-conversion benchmark, a scripted coding agent, gates, a report.",
        discussion: """
            Creates DIR/benchmark (64 unit-conversion tasks from templates/demo/make_benchmark.py) \
            and an experiment DIR/exp whose agent.py knows three conversions, prepares it, and runs \
            `autoharness run` with templates/demo/demo_agent.py as the coding agent: a scripted \
            stand-in for Claude Code or Codex (no LLM, no network) that learns conversion factors \
            from the train traces, submits three candidate edits per gate in its first sessions (loop.candidates: 3: \
            each runs on the train split, only the best meets the held-out split), gates through \
            the broker, and tries a few cheats, which are \
            refused and recorded. The train split is revealed in rolling batches of 8 (each gate \
            ends a batch), so failures arrive batch by batch; after each batch a scripted triage \
            (templates/demo/demo_triage.py, in its own sandbox) asks a stand-in model API \
            (templates/demo/demo_model.py on 127.0.0.2, reached only through the inference gate) \
            for a hypothesis, a label and a severity per failure. After the loop the demo plays \
            the operator's review (the triage's labels kept, a suite task retired, each with its \
            reason). Ends with DIR/exp/report.html.
            """)

    @Option(help: "Directory to create (default: ./autoharness-demo).")
    var dir: String = "autoharness-demo"

    @Option(name: .customLong("max-hours"), help: "Stop the loop after this many hours.")
    var maxHours: Double = 0.25

    @Option(name: .customLong("max-iterations"), help: "Stop the loop after this many accepted gates (default: when the demo agent stops improving).")
    var maxIterations: Int?

    func validate() throws {
        if let n = maxIterations, n < 1 { throw ValidationError("--max-iterations must be at least 1 (got \(n))") }
    }

    func run() throws {
        let fm = FileManager.default
        let root = dir.hasPrefix("/") ? dir : fm.currentDirectoryPath + "/" + dir
        guard !fm.fileExists(atPath: root) else { throw ExperimentError(.usage, "\(root) exists; pass --dir NEW_DIR") }
        let templates = try PolicyLocator.requireTemplates()
        let demo = templates + "/demo"
        let stops = StopSignals.install()
        print("demo: \(DoctorCommand.startupSummary())")
        try fm.createDirectory(atPath: root, withIntermediateDirectories: true)
        let gen = try Self.shell("/usr/bin/python3", [demo + "/make_benchmark.py", root + "/benchmark"])
        print("demo: \(gen.trimmingCharacters(in: .whitespacesAndNewlines))")
        var options = InitOptions(benchmark: "local", dataset: root + "/benchmark", templates: templates)
        options.images = .none
        let layout = try ExperimentSupervisor.initialize(directory: root + "/exp", options).layout
        try fm.removeItem(atPath: layout.agentFile)
        try fm.copyItem(atPath: demo + "/agent.py", toPath: layout.agentFile)
        var config = try String(contentsOfFile: layout.config, encoding: .utf8)
        for (key, value) in [("command", "[python3, \"\(demo)/demo_agent.py\"]"), ("binds", "[\"\(demo)\"]"),
                             ("min_improvement", "0"), ("max_non_improving", "2"), ("restart_backoff", "0.5"),
                             ("batch_size", "8"), ("batch_iterations", "1"), ("candidates", "3")] {
            config = Self.set(key, value, in: config)
        }
        // The triage: templates/demo/demo_triage.py in its own sandbox, its "model" the demo's
        // stand-in API on 127.0.0.2, reached only through the inference gate.
        let model = try DemoModel.start(script: demo + "/demo_model.py", directory: root + "/model")
        defer { model.stop() }
        setenv("OPENAI_API_KEY", "sk-demo-offline-not-a-key", 1)
        setenv("MODEL_URL", "https://\(model.address)/v1", 1)
        config += """

            triage:
              command: [python3, "\(demo)/demo_triage.py"]
              binds: ["\(demo)"]
              env_pass: [OPENAI_API_KEY, MODEL_URL]
              network:
                inference: ["\(model.address)"]
                upstream_ca: \(model.directory)/ca.pem
              after: batch

            """
        try config.write(toFile: layout.config, atomically: true, encoding: .utf8)
        print("demo: experiment \(layout.root); triage through the inference gate to the demo's model at \(model.address)")

        let s = try ExperimentSupervisor(layout: layout, policySearchPaths: PolicyLocator.searchPaths(explicit: []), purpose: "demo")
        let progress = ProgressLine("baseline")
        s.progress = progress.update
        let p = try s.prepare()
        s.progress = nil
        print("demo: baseline \(p.passed)/\(p.tasks) tasks pass; split \(p.train) train / \(p.test) test; val_score \(String(format: "%.4f", p.baselineScore))")
        var settings = RunSettings(clientBinary: PolicyLocator.clientBinary(), hostEnvironment: [:]) { printErr("autoharness: \($0)") }
        settings.maxHours = maxHours
        settings.maxIterations = maxIterations
        let loop = RunLoop(supervisor: s, settings: settings)
        stops.onSignal { signal, number, count in
            if count == 1 { loop.requestStop("\(signal) received") } else { Glibc.exit(Exit.interrupted(by: number)) }
        }
        let report = try loop.run()
        print(RunCommand.text(report, disclosure: .score))
        // The operator's review, as a person would do it after a night's run: keep the
        // triage's labels (each a cluster_review row) and retire one suite task, with reasons.
        try loop.withSupervisor { s in
            let kept = (try? s.acceptTriage(reason: "demo: the operator read the triage's hypotheses and keeps its labels", actor: "operator")) ?? []
            print("demo: operator review: kept the triage's labels of \(kept.count) cluster(s)")
            if let task = try s.state().suite.first {
                try s.reviewSuite("retire", tasks: [task], reason: "demo: the operator retires one suite task to show the review row", actor: "operator")
                print("demo: operator review: retired \(task) from the suite")
            }
        }
        let html = layout.root + "/report.html"
        let page = try loop.withSupervisor { s in Report.html(try s.state(), config: s.config, title: "autoharness demo", agentSource: s.snapshotSource, learnings: s.learningsText()) }
        try AtomicFile.write(Array(page.utf8), to: html, mode: 0o644)
        print("demo: the coding agent's own account: \(report.agentLog)")
        print("demo: report: \(html)")
        // A demo whose loop failed (the agent never got going) is not a demo that worked.
        if report.failed || report.gates == 0 {
            printErr("autoharness: the demo's loop did not run as it should (\(report.reason); \(report.gates) gates); see \(report.agentLog)")
            throw ExitCode(Exit.failure)
        }
    }

    /// The demo's stand-in model API (templates/demo/demo_model.py), a child of this process.
    struct DemoModel {
        let process: Process
        let directory: String
        let address: String

        static func start(script: String, directory: String) throws -> DemoModel {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            p.arguments = [script, directory]
            p.standardOutput = FileHandle.nullDevice
            // Its errors (a missing openssl, a traceback) are kept for the message below.
            let errors = directory + "/model-stderr.txt"
            _ = FileManager.default.createFile(atPath: errors, contents: nil)
            p.standardError = FileHandle(forWritingAtPath: errors)
            try p.run()
            // Up to 60 s: key generation under emulation (the cgroup v2 VM) on a busy host is slow.
            let started = Date()
            while Date().timeIntervalSince(started) < 60 {
                if let text = try? String(contentsOfFile: directory + "/port", encoding: .utf8), let port = Int(text) {
                    return DemoModel(process: p, directory: directory, address: "127.0.0.2:\(port)")
                }
                guard p.isRunning else { break }
                usleep(25_000)
            }
            let how = p.isRunning ? "wrote no port file within 60 s" : "exited with status \(p.terminationStatus)"
            if p.isRunning { kill(p.processIdentifier, SIGKILL) }
            let tail = ((try? String(contentsOfFile: errors, encoding: .utf8)) ?? "")
                .split(separator: "\n").suffix(5).joined(separator: " | ")
            throw ExperimentError(.io, "the demo's model (\(script)) did not start: it \(how) (it needs python3 and openssl)" + (tail.isEmpty ? "" : "; its stderr: \(tail)"))
        }

        /// Ends it (by the pid this process started).
        func stop() {
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
    }

    /// Replaces the value of the first `key:` line (keeping its indentation).
    static func set(_ key: String, _ value: String, in text: String) -> String {
        var lines = text.components(separatedBy: "\n")
        if let i = lines.firstIndex(where: { $0.trimmingCharacters(in: .whitespaces).hasPrefix(key + ":") }) {
            lines[i] = String(lines[i].prefix { $0 == " " }) + key + ": " + value
        }
        return lines.joined(separator: "\n")
    }

    static func shell(_ exe: String, _ args: [String]) throws -> String {
        let r = try ChildProcess.run([exe] + args, standardError: .inherited)
        guard r.succeeded else { throw ExperimentError(.io, "\(exe) \(args.joined(separator: " ")) failed") }
        return r.output
    }
}
