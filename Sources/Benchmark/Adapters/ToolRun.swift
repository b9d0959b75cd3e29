// Running an external benchmark tool (harbor, tau2, the BIRD orchestrator, a command) in a
// sandbox whose every output lives on a per-run tmpfs.
//
//   <scratchRoot>/<random>/        the run's own tmpfs, root 0700 (TaskScratch)
//       in/     supervisor-written inputs (task ids, filtered task files): /work/in, read-only
//       app/    the tool's output directory: /work/out, owned by the sandbox's host uid
//       score/  a second sandbox's output (tau2's re-scoring): /work/out there
//       out/    root-only: stdout/stderr of each sandbox
//
// The supervisor reads the tool's output only after the sandbox is gone (its pid namespace
// empty), relative to directory fds, O_NOFOLLOW, size-capped: the files were written by a
// process that hosted agent.py. Then the whole tmpfs is unmounted; a held-out run leaves
// nothing behind but the rewards the adapter extracted.

import Dispatch
import Glibc
import Sandbox
import SandboxPolicy
import SupervisorIO

/// How an external tool is reached from inside the runner sandbox: operator configuration.
public struct ToolSettings: Sendable, Equatable, Codable {
    /// The tool's executable as the sandbox runs it (a name looked up on PATH, or a path).
    public var command: [String]
    /// Host paths bound read-only at the same path (the tool's install, its data).
    public var binds: [String] = []
    /// Variables copied from the supervisor's environment (API keys); each must be set.
    public var envPass: [String] = []
    /// For held-out runs: a variable of `envPass` whose value comes from another of the
    /// supervisor's variables (`gate.held_out_env`: an account of their own at a stateful
    /// provider, so nothing a held-out run leaves there is listed by a train run).
    public var heldOutEnv: [String: String] = [:]
    /// `host:port` the tool may reach through the egress proxy (LLM API, e2b/daytona).
    public var networkAllow: [String] = []
    /// `host:port` of model APIs reached only through the proxy's inference gate: stateless
    /// inference calls pass, nothing that reads or leaves state at the vendor (`InferenceGate`).
    public var networkInference: [String] = []
    /// Variables of `envPass` that hold keys for hosts reached as plain tunnels (a remote
    /// environment provider's): passed as they are, never made placeholders by the gate.
    public var tunnelledKeys: Set<String> = []
    /// A CA file the gate trusts for those APIs besides the system's store.
    public var upstreamCA: String?
    /// Seconds the whole tool run may take (nil: none).
    public var timeout: Double?
    public var runnerPolicy = "benchmark-runner"
    public var scorerPolicy = "benchmark-scorer"
    /// Seconds a scorer (a sandbox reading the runner's output) may take: its own limit.
    public var scorerTimeout: Double = 3600
    /// A directory holding autoharness's `srt` (and the names tau2 checks beside it), put first
    /// on the runner's PATH: each shell tool call the runner makes through it runs in a sandbox
    /// of its own (`ShellToolCalls`); nil: none.
    public var shellCalls: String?

    public init(command: [String]) { self.command = command }
}

extension ToolSettings {
    /// A gate for `networkInference` (a CA of its own) and the bundle the tool's sandboxes
    /// trust it by; nil when no model API is named. An operator who passes SSL_CERT_FILE (or
    /// another of the trust variables) in chose what the tool trusts: that file, plus the
    /// gate's CA, replaces it.
    public func inferenceGate(heldOut: Bool) throws(BenchmarkError) -> (gate: InferenceGate, bundle: [UInt8])? {
        guard !networkInference.isEmpty else { return nil }
        let gate: InferenceGate
        do {
            gate = try InferenceGate(targets: networkInference, upstreamCAFile: upstreamCA, heldOut: heldOut, credentials: credentials(heldOut: heldOut))
        } catch {
            throw BenchmarkError(.configuration, "runner.network.inference", cause: error)
        }
        let own = envPass.first { InferenceGate.trustVariables.contains($0) && getenv($0) != nil }
            .map { String(cString: getenv($0)) }
        switch gate.trustBundle(base: own ?? InferenceGate.systemBundle) {
        case .success(let bundle): return (gate, bundle)
        case .failure(let e): throw BenchmarkError(.configuration, "runner.env_pass: \(e.message)")
        }
    }

    /// The API keys a run of this kind is given (the values of `envPass`'s credential
    /// variables; a held-out run's from `heldOutEnv`): its gate passes these and no other.
    public func credentials(heldOut: Bool) -> Set<String> {
        var keys: Set<String> = []
        for name in envPass where InferenceGate.isCredentialVariable(name) && !tunnelledKeys.contains(name) {
            if let v = getenv(heldOut ? heldOutEnv[name] ?? name : name) { keys.insert(String(cString: v)) }
        }
        return keys
    }

    /// The variables `envPass` names with the values a run of this kind gives them: for a
    /// held-out run, `heldOutEnv`'s source variable where one is set. Keyed by the variable
    /// the run reads (`launch`), so a held-out VM's guest sets exactly these.
    public func passedValues(heldOut: Bool) -> [String: String] {
        var out: [String: String] = [:]
        for name in envPass {
            let source = heldOut ? heldOutEnv[name] ?? name : name
            if let v = getenv(source) { out[source] = String(cString: v) }
        }
        return out
    }
}

/// One sandbox launch of a tool.
struct ToolInvocation {
    /// `benchmark-runner` (agent.py mounted at /work/agent) or `benchmark-scorer` (no agent).
    var policy: String
    var argv: [String]
    var withAgent: Bool
    /// `NAME=VALUE` settings added to the policy's environment.
    var environment: [String] = []
    var extraMounts: [MountSpec] = []
    /// The scorer's view of the runner's output (mounted read-only at /work/run).
    var runDirectory: String?
    /// The directory (in the scratch) this sandbox writes: `app` or `score`.
    var outputName = "app"
    var label: String
    /// Fills the output directory (an fd, owned by the sandbox's host uid) before launch.
    var prepareOutput: ((Int32, (uid_t, gid_t)) throws(BenchmarkError) -> Void)?
}

/// What a tool sandbox did.
struct ToolExit {
    var termination: SandboxResult.Termination?
    var failure: String?
    var seconds: Double
    /// The end of stderr, for the operator when the tool failed.
    var stderrTail: String

    var succeeded: Bool {
        if case .exited(0)? = termination { return true }
        return false
    }

    var summary: String {
        if let failure { return failure }
        switch termination {
        case .exited(let c)?: return "exited \(c)"
        case .signaled(let s)?: return "killed by signal \(s)"
        case .timedOut?: return "timed out"
        case .setupFailed(let m, _)?: return "sandbox setup failed: \(m)"
        case .execFailed(let e)?: return "could not be executed: \(FileSystem.errorText(e))"
        case nil: return "did not run"
        }
    }
}

/// A per-run scratch tmpfs and the sandboxes launched over it.
final class ToolRun {
    let scratch: TaskScratch
    let settings: ToolSettings
    let context: AdapterRunContext
    /// The tasks this run serves (none: a run for no task, such as evidence's tool).
    let ids: [String]
    let inputFD: Int32
    /// The proxy's inference gate for this run's sandboxes (a CA of its own), when the
    /// settings name model APIs.
    let inference: InferenceGate?
    /// Whether `in/inference-ca.pem` holds a bundle that trusts a gate: this run's own, or in
    /// a held-out VM the host's (`AdapterRunContext.guestEgress`).
    let trustsGate: Bool
    /// Where sandboxes find the CA bundle that trusts the gate.
    static let trustBundlePath = "/etc/autoharness/inference-ca.pem"

    init(settings: ToolSettings, context: AdapterRunContext, ids: [String]) throws(BenchmarkError) {
        guard geteuid() == 0 else { throw BenchmarkError(.configuration, "running benchmark tools needs root (sandboxes build namespaces)") }
        let root = try TaskRunner.checkScratchRoot(context.scratchRoot)
        _ = TaskScratch.sweep(root: root)
        scratch = try TaskScratch(root: root)
        guard let d = FileSystem.makeDirectory(at: scratch.fd, "in", mode: 0o755, owner: nil) else {
            let e = FileSystem.errorText()
            _ = scratch.remove()
            throw BenchmarkError(.io, "\(scratch.path)/in: \(e)")
        }
        inputFD = d
        self.settings = settings
        self.context = context
        self.ids = ids
        do {
            if let guest = context.guestEgress {
                // In a held-out VM the host's proxy ends the TLS: its bundle, copied in.
                inference = nil
                trustsGate = guest.trustBundle != nil
                if let bundle = guest.trustBundle { try Self.copyTrustBundle(bundle, input: d, path: scratch.path + "/in") }
            } else {
                inference = try Self.inferenceGate(settings, heldOut: context.heldOut, input: d, path: scratch.path + "/in")
                trustsGate = inference != nil
            }
        } catch {
            close(d)
            _ = scratch.remove()
            throw error
        }
    }

    private static func copyTrustBundle(_ source: String, input: Int32, path: String) throws(BenchmarkError) {
        switch InputFile.read(source, cap: 4 << 20) {
        case .success(let bytes):
            if let e = FileSystem.writeFile(at: input, "inference-ca.pem", bytes, mode: 0o644) {
                throw BenchmarkError(.io, "\(path)/inference-ca.pem: \(FileSystem.errorText(e))")
            }
        case .failure(let p):
            throw BenchmarkError(.io, "\(source): \(p.explanation("the host gate's CA bundle"))")
        }
    }

    /// The gate for `settings.networkInference` (nil: none), its trust bundle written to
    /// `in/inference-ca.pem`.
    private static func inferenceGate(_ settings: ToolSettings, heldOut: Bool, input: Int32, path: String) throws(BenchmarkError) -> InferenceGate? {
        guard let (gate, bundle) = try settings.inferenceGate(heldOut: heldOut) else { return nil }
        if let e = FileSystem.writeFile(at: input, "inference-ca.pem", bundle, mode: 0o644) {
            throw BenchmarkError(.io, "\(path)/inference-ca.pem: \(FileSystem.errorText(e))")
        }
        return gate
    }

    /// Unmounts the tmpfs: everything the tool wrote is gone.
    func finish() {
        close(inputFD)
        _ = scratch.remove()
    }

    func writeInput(_ name: String, _ bytes: [UInt8]) throws(BenchmarkError) {
        if let e = FileSystem.writeFile(at: inputFD, name, bytes, mode: 0o644) {
            throw BenchmarkError(.io, "\(scratch.path)/in/\(name): \(FileSystem.errorText(e))")
        }
    }

    /// `in/task_ids.txt`: the run's ids, one per line (what every tool is handed).
    func writeTaskIDs(_ ids: [String]) throws(BenchmarkError) {
        try writeInput("task_ids.txt", Array((ids.joined(separator: "\n") + "\n").utf8))
    }

    /// Opens a directory the sandbox wrote (`app` or `score`), for reading after it exited.
    func openOutput(_ name: String = "app") -> Int32 { FileSystem.openDirectory(at: scratch.fd, FileSystem.name(name)) }

    /// Runs one sandbox to its end. `probe`, if given, is asked every 30 s how many tasks
    /// are done (a count only: it never names a task), for the progress line.
    func launch(_ inv: ToolInvocation, total: Int, probe: ((Int32) -> Int?)? = nil, signals: SandboxSignals? = nil) -> ToolExit {
        let start = TaskRunner.now()
        func fail(_ m: String) -> ToolExit { ToolExit(termination: nil, failure: m, seconds: TaskRunner.now() - start, stderrTail: "") }
        let policy: Policy
        do {
            var vars = ["output_dir": scratch.path + "/" + inv.outputName, "input_dir": scratch.path + "/in"]
            if inv.withAgent { vars["agent_dir"] = context.agentDirectory }
            if let r = inv.runDirectory { vars["run_dir"] = r }
            policy = try context.policyLoader.load(inv.policy, variables: vars)
        } catch {
            return fail("policy \(inv.policy): \(error)")
        }
        do throws(BenchmarkError) {
            let owner = (policy.identity.hostUID, policy.identity.hostGID)
            let d = try scratch.makeSandboxDirectory(inv.outputName, owner: owner)
            defer { close(d) }
            try inv.prepareOutput?(d, owner)
            if inv.withAgent && settings.shellCalls != nil { try ShellToolCalls.makeTemporaryDirectory(in: d, owner: owner) }
        } catch {
            return fail(error.message)
        }
        var p = policy
        if p.network.mode == .proxy { p.network.allow = settings.networkAllow }
        var ov = PlanOverrides()
        ov.timeoutSeconds = settings.timeout
        if let run = inv.runDirectory, run == scratch.path + "/app" {
            // A scorer of the runner's output: its own time limit, and nothing in the runner's output that is not a
            // file or a directory (a FIFO it would block on for ever, a device, a socket, a
            // link), each removed and recorded against agent.py, whose runner wrote it.
            ov.timeoutSeconds = settings.scorerTimeout
            do throws(IOFailure) {
                for entry in try IrregularFiles.remove(under: run) {
                    var event = AuditEvent(sandbox: "supervisor", kind: .irregularFile, name: entry, action: "removed")
                    event.detail = "not a file or a directory in the runner's output, removed before \(inv.label) started"
                    context.audit.record(event)
                }
            } catch {
                return fail("\(inv.label): the runner's output: \(error)")
            }
        }
        for b in settings.binds { ov.mounts.append(MountSpec(kind: .readOnly(source: b), destination: b)) }
        ov.mounts += inv.extraMounts
        var passed = settings.envPass
        var environment = inv.environment
        if trustsGate && p.network.mode == .proxy {
            // The gate's CA, trusted through the usual variables; an operator's own value of
            // one of them is in the bundle (init), which replaces it.
            ov.mounts.append(MountSpec(kind: .readOnly(source: scratch.path + "/in/inference-ca.pem"), destination: Self.trustBundlePath))
            passed.removeAll { InferenceGate.trustVariables.contains($0) }
            environment += InferenceGate.trustVariables.map { "\($0)=\(Self.trustBundlePath)" }
        }
        var calls: ShellToolCalls?
        if inv.withAgent, let shim = settings.shellCalls {
            do throws(BenchmarkError) {
                calls = try ShellToolCalls(run: self, runnerUID: policy.identity.hostUID, shim: shim)
            } catch {
                return fail("\(inv.label): shell tool calls: \(error.message)")
            }
            ov.mounts += calls?.mounts ?? []
            environment += calls?.environment ?? []
        }
        defer { calls?.stop(label: inv.label) }
        ov.environment = passed + environment
        var host: [String: String] = [:]
        let values = settings.passedValues(heldOut: context.heldOut)
        for name in passed {
            guard let v = values[context.heldOut ? settings.heldOutEnv[name] ?? name : name] else { continue }
            // A key the gate holds: the sandbox gets its placeholder, swapped back at the gate.
            host[name] = inference?.placeholder(for: v) ?? v
        }

        let outName = "\(inv.outputName).stdout", errName = "\(inv.outputName).stderr"
        let out: Int32, err: Int32
        do throws(BenchmarkError) {
            out = try scratch.createOutput(outName)
            err = try scratch.createOutput(errName)
        } catch {
            return fail(error.message)
        }
        // Never -1: that would hand the tool the supervisor's own stdin.
        let noInput = PayloadInput.empty()
        defer {
            close(out)
            close(err)
            if noInput >= 0 { close(noInput) }
        }
        guard noInput >= 0 else { return fail("stdin (/dev/null through a read-only mount): \(ErrnoName.describe(errno))") }

        // Alive-line for long runs: elapsed time and, where the tool's output shows it, how
        // many tasks are done.
        let ticker = Ticker(every: 30) { [context, scratch] elapsed in
            var line = "\(inv.label): running for \(Int(elapsed))s"
            if let probe {
                let d = FileSystem.openDirectory(at: scratch.fd, FileSystem.name(inv.outputName))
                if d >= 0 {
                    if let n = probe(d) { line += ", \(n)/\(total) tasks done" }
                    close(d)
                }
            }
            context.log(line)
        }
        defer { ticker.stop() }

        let result: SandboxResult
        do throws(SandboxError) {
            let plan = try PlanCompiler.compile(policy: p, command: inv.argv, overrides: ov, hostEnvironment: host)
            var options = RunOptions(audit: inv.withAgent ? context.audit : context.toolAudit ?? context.audit)
            options.stdio = (noInput, out, err)
            options.pageCache = context.pageCache
            options.signals = signals
            options.inferenceGate = inference
            options.egressLink = context.guestEgress.map { ($0.link, $0.tag(inv.withAgent ? "agent" : "tool", ids: ids)) }
            result = try SandboxRunner.run(plan, options: options)
        } catch {
            return fail("\(inv.label): \(error.message)")
        }
        let tail = FileSystem.readCapped(at: scratch.outFD, errName, cap: 2048).map { String(decoding: $0, as: UTF8.self) } ?? ""
        return ToolExit(termination: result.termination, failure: nil, seconds: TaskRunner.now() - start, stderrTail: tail)
    }

    /// Tells the operator a tool sandbox failed; the end of its stderr only for train runs
    /// (a held-out run's output is test data, even in a log).
    func reportFailure(_ label: String, _ exit: ToolExit) {
        guard !exit.succeeded else { return }
        let hidden = context.heldOut && !context.operatorDiagnostics
        let tail = hidden || exit.stderrTail.isEmpty ? "" : ": " + Self.printable(String(exit.stderrTail.suffix(300)))
        context.log("\(label) \(exit.summary)\(tail)")
    }

    /// The tool's stdout/stderr for a train trace (never for held-out runs): the runner's as
    /// `tool.*`, a scorer's (`name` "score") as `scorer.*`.
    func logs(_ name: String = "app") -> [(String, [UInt8])] {
        ["stdout", "stderr"].compactMap { s in
            FileSystem.readCapped(at: scratch.outFD, "\(name).\(s)", cap: TaskRunner.traceCap).map { (name == "app" ? "tool.\(s)" : "scorer.\(s)", $0) }
        }
    }
}

extension ToolRun {
    /// The second sandbox of a benchmark scored without agent.py (tau2, BFCL): `scorer` reads
    /// what the runner left (read-only at /work/run) and writes rewards.json to its own output;
    /// those rewards are the outcomes. On train runs each task that did not pass gets its
    /// failure record from `evidence.file` in its trace directory of the scorer's output, read
    /// by `evidence.parse`. `nullDetail` says why a task the scorer gave null scores 0.
    func score(_ ids: [String], with scorer: ToolInvocation, after runExit: ToolExit, nullDetail: String,
               evidence: (file: String, parse: ([UInt8]) -> [FailureEvidence]?)) -> [TaskOutcome] {
        let scoreExit = launch(scorer, total: ids.count)
        reportFailure(scorer.label, scoreExit)
        let out = openOutput(scorer.outputName)
        defer { if out >= 0 { close(out) } }
        var results = out >= 0 ? CommandAdapter.parse(out, ids: Set(ids), traces: !context.heldOut, nullDetail: nullDetail) : [:]
        if !context.heldOut && out >= 0 {
            for (id, r) in results where r.status != .passed {
                if let bytes = FailureParsers.report(at: out, ["traces", TraceName.encode(id)], evidence.file) {
                    results[id]?.failures = evidence.parse(bytes)
                }
            }
        }
        let exit = runExit.succeeded ? scoreExit : runExit
        return outcomes(ids, results, toolExit: exit, seconds: runExit.seconds + scoreExit.seconds, logs: logs() + logs(scorer.outputName))
    }

    /// `text` safe for the operator's terminal: control characters but newline and tab (an
    /// escape sequence from a tool's stderr, which agent.py can write) shown as `\u{..}`.
    static func printable(_ text: String) -> String {
        var out = ""
        for u in text.unicodeScalars {
            if u == "\n" || u == "\t" || !(u.value < 0x20 || (0x7F...0x9F).contains(u.value)) {
                out.unicodeScalars.append(u)
            } else {
                out += "\\u{\(String(u.value, radix: 16))}"
            }
        }
        return out
    }

    /// `bytes` with every verbatim occurrence of a secret (an API key passed into the
    /// sandbox) replaced by `[NAME]`. Train traces are read by the coding agent; agent.py can
    /// print its environment. Verbatim only: an encoded key is not caught (docs/threat-model.md).
    static func redact(_ bytes: [UInt8], _ secrets: [(String, [UInt8])]) -> [UInt8] {
        var out = bytes
        for (name, secret) in secrets where !secret.isEmpty && out.count >= secret.count {
            var result: [UInt8] = []
            result.reserveCapacity(out.count)
            var i = 0
            let first = secret[0]
            while i < out.count {
                if out[i] == first, i + secret.count <= out.count, out[i..<(i + secret.count)].elementsEqual(secret) {
                    result += Array("[\(name)]".utf8)
                    i += secret.count
                } else {
                    result.append(out[i])
                    i += 1
                }
            }
            out = result
        }
        return out
    }
}

/// Calls `tick` with the elapsed seconds every `every` seconds until stopped.
final class Ticker: @unchecked Sendable {
    private let timer: DispatchSourceTimer
    init(every: Double, _ tick: @escaping (Double) -> Void) {
        let start = TaskRunner.now()
        timer = DispatchSource.makeTimerSource(queue: DispatchQueue.global())
        timer.schedule(deadline: .now() + every, repeating: every)
        nonisolated(unsafe) let tick = tick
        timer.setEventHandler { tick(TaskRunner.now() - start) }
        timer.resume()
    }
    func stop() { timer.cancel() }
}

/// What an adapter extracted for one task from a tool's output.
struct ToolTaskResult {
    var reward: Double
    var status: TaskStatus
    var detail: String?
    /// Files for the task's train trace (name → bytes), already bounded.
    var trace: [(String, [UInt8])] = []
    /// Train runs: the failing checks the tool's own results name (`FailureParsers`).
    var failures: [FailureEvidence]?
    /// The tool's model spend for the task (`TaskOutcome.costUSD`).
    var costUSD: Double?
}

extension ToolRun {
    /// One outcome per requested id: what the tool reported, or 0 (`missing_result`) for an
    /// id it did not. Writes train traces; held-out runs write nothing.
    func outcomes(_ ids: [String], _ results: [String: ToolTaskResult], toolExit: ToolExit, seconds: Double,
                  logs: [(String, [UInt8])]? = nil) -> [TaskOutcome] {
        let logs = context.heldOut ? [] : logs ?? self.logs()
        var outcomes: [TaskOutcome] = []
        for (i, id) in ids.enumerated() {
            var r = results[id] ?? ToolTaskResult(
                reward: 0, status: .missingResult,
                detail: "not in the tool's output (tool \(toolExit.summary))")
            if r.status != .passed && r.status != .failed { r.reward = 0 }
            var outcome = TaskOutcome(id: id, reward: r.reward, status: r.status, agentSeconds: seconds, detail: r.detail.map { String($0.prefix(500)) })
            if r.status == .passed && !outcome.passed { outcome.status = .failed }
            if r.status == .failed && outcome.passed { outcome.status = .passed }
            if !context.heldOut && !outcome.passed { outcome.failures = r.failures }
            outcome.costUSD = r.costUSD
            // A gate that served this task alone: what it saw the vendor fail is the task's.
            if ids.count == 1 { outcome.vendorFailures = inference?.vendorFailures }
            if !context.heldOut, let dir = context.traceDirectory(id) {
                writeTrace(dir, outcome: outcome, files: r.trace + logs)
            }
            outcomes.append(outcome)
            context.progress(i + 1, ids.count, context.heldOut ? nil : outcome)
        }
        return outcomes
    }

    /// The API keys passed into the tool's sandbox (`envPass`, 8 bytes or longer), and the
    /// placeholders its gate gave for them: what `redact` takes out of train traces, which the
    /// coding agent reads (a placeholder is worthless outside its run, but a trace need not
    /// show it either).
    func secretValues() -> [(String, [UInt8])] {
        settings.envPass.flatMap { name -> [(String, [UInt8])] in
            guard let v = getenv(name), strlen(v) >= 8 else { return [] }
            let value = String(cString: v)
            return [(name, Array(value.utf8))] + (inference?.placeholder(for: value).map { [(name, Array($0.utf8))] } ?? [])
        }
    }

    /// The trace directory is the supervisor's: the first write that fails goes to
    /// `context.writeFailures` (the operation fails) and the trace gets no `result.json`.
    private func writeTrace(_ directory: String, outcome: TaskOutcome, files: [(String, [UInt8])]) {
        let failures = context.writeFailures
        if let e = FileSystem.makeDirectories(directory, mode: 0o755) {
            return failures.record("trace \(directory): \(ErrnoName.describe(e))")
        }
        let d = FileSystem.openDirectory(directory)
        guard d >= 0 else { return failures.record("trace \(directory): \(ErrnoName.describe(errno))") }
        defer { close(d) }
        let secrets = secretValues()
        for (name, bytes) in files {
            if let e = FileSystem.writeFile(at: d, name, Self.redact(bytes, secrets), mode: 0o644) {
                return failures.record("trace \(directory)/\(name): \(ErrnoName.describe(e))")
            }
        }
        do {
            if let e = FileSystem.writeFile(at: d, "result.json", try TraceJSON.encode(outcome), mode: 0o644) {
                failures.record("trace \(directory)/result.json: \(ErrnoName.describe(e))")
            }
        } catch {
            failures.record("trace \(directory)/result.json: \(error)")
        }
    }
}

/// A task id as a directory name: bytes outside `[A-Za-z0-9._-]` (and a leading `.`) become
/// `%XX`, so ids such as tau2 telecom's `[mobile_data_issue]...|...` name a trace directory
/// without ever being a path. Valid local ids are unchanged. Tools that write per-task files
/// (tau2's scorer) use the same encoding.
public enum TraceName {
    public static func encode(_ id: String) -> String {
        var out = ""
        for (i, b) in id.utf8.enumerated() {
            let c = Character(Unicode.Scalar(b))
            let plain = (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || b == 0x5F || b == 0x2D
                || (b == 0x2E && i > 0)
            out += plain ? String(c) : "%" + (b < 16 ? "0" : "") + String(b, radix: 16, uppercase: true)
        }
        return out
    }

    /// Ids an external benchmark may use: 1-256 bytes of UTF-8 without control characters.
    public static func isAcceptableID(_ id: String) -> Bool {
        !id.isEmpty && id.utf8.count <= 256 && !id.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }
}

/// A tool sandbox running on its own thread while the caller does something else (BIRD's
/// services while the orchestrator runs), stopped with SIGTERM.
final class BackgroundTool: @unchecked Sendable {
    private var thread: pthread_t?
    private let signals: SandboxSignals?
    private let lock = NSLockLite()
    private var result: ToolExit?

    init(_ run: ToolRun, _ inv: ToolInvocation) {
        let signals = try? SandboxSignals()
        self.signals = signals
        nonisolated(unsafe) let run = run
        nonisolated(unsafe) let inv = inv
        let job = Job { [self] in
            let exit = run.launch(inv, total: 0, signals: signals)
            lock.locked { result = exit }
        }
        thread = Job.start(job)
    }

    /// The exit, if the sandbox already ended.
    var finished: ToolExit? { lock.locked { result } }

    /// Sends SIGTERM (the sandbox's own timeout is the backstop) and waits for the end.
    func stop() -> ToolExit {
        signals?.send(SIGTERM)
        if let t = thread { pthread_join(t, nil) }
        return lock.locked { result } ?? ToolExit(termination: nil, failure: "did not start", seconds: 0, stderrTail: "")
    }
}

/// A pthread mutex with a closure API (Foundation's NSLock is not in FoundationEssentials).
final class NSLockLite: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    init() { pthread_mutex_init(&mutex, nil) }
    deinit { pthread_mutex_destroy(&mutex) }
    func locked<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return body()
    }
}
