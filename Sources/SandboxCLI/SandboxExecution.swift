import Glibc
import LaunchCode
import Logging
import PolicyModel
import Sandbox
import SupervisorIO

/// What `sandbox exec` was asked, however its arguments were parsed (`ExecArguments`, or
/// ArgumentParser in the full CLI).
public struct ExecRequest: Sendable {
    public var policy = "base"
    public var policyDirs: [String] = []
    public var variables: [String] = []
    public var readOnly: [String] = []
    public var readWrite: [String] = []
    public var tmpfs: [String] = []
    public var chdir: String?
    public var env: [String] = []
    public var timeout: Double?
    public var audit: String?
    public var allowUnenforcedLimits = false
    public var debug = false
    public var benchRepeat = 1
    public var command: [String] = []

    public init() {}
}

/// A command line `sandbox exec` refuses before anything runs. The full CLI reports it as
/// ArgumentParser reports its own (`ValidationError`); the front hands the line to the full CLI.
public struct ExecUsageError: Error, CustomStringConvertible, Sendable {
    public var message: String
    public var description: String { message }

    init(_ message: String) { self.message = message }
}

extension ExecUsageError: AutoharnessError {
    public var category: ErrorCategory { .usage }
}

/// `sandbox exec` after its policy is loaded, shared by the full CLI and its front
/// (autoharness-front): `prepare` reads the request and compiles the plan, changing nothing
/// on the host; `launch` runs it and returns the exit status.
public enum SandboxExecution {
    /// This binary's build of the launch code, for the policy cache's key: the full CLI stores
    /// entries under it and the front looks them up under its own, so a front from another
    /// build hands every launch to the full CLI.
    public static var launchCode: String { LaunchCode.digest }

    /// The command to run: the words after `--`.
    public static func command(of r: ExecRequest) throws(ExecUsageError) -> [String] {
        var cmd = r.command
        if cmd.first == "--" {
            cmd.removeFirst()
        } else if let first = cmd.first, first.hasPrefix("-") {
            // Passthrough takes everything from the first word it does not know; before any
            // `--` that word is a mistyped option, not a program (which would fail with 127).
            throw ExecUsageError("unknown option '\(first)'; options go before the command, the command after -- (autoharness sandbox exec --help)")
        }
        guard !cmd.isEmpty else { throw ExecUsageError("no command given; usage: autoharness sandbox exec [OPTIONS] -- COMMAND [ARG...]") }
        return cmd
    }

    /// `--var NAME=VALUE` as a map.
    public static func variables(of r: ExecRequest) throws(ExecUsageError) -> [String: String] {
        var vars: [String: String] = [:]
        for v in r.variables {
            guard let eq = v.firstIndex(of: "="), eq != v.startIndex else { throw ExecUsageError("--var \(v): expected NAME=VALUE") }
            vars[String(v[..<eq])] = String(v[v.index(after: eq)...])
        }
        return vars
    }

    public struct Prepared {
        public let request: ExecRequest
        public let policy: Policy
        public let plan: LaunchPlan
    }

    /// The launch plan for `r` under `policy`: its command-line additions read, its sources
    /// resolved, its seccomp program made. `environment` is the caller's (`--env NAME` and the
    /// policy's passed variables come from it). Nothing on the host changes.
    public static func prepare(_ r: ExecRequest, command: [String], policy: Policy,
                               environment: [String: String] = hostEnvironment()) throws -> Prepared {
        var overrides = PlanOverrides()
        for s in r.readOnly { overrides.mounts.append(try bind(s, readOnly: true)) }
        for s in r.readWrite { overrides.mounts.append(try bind(s, readOnly: false)) }
        for s in r.tmpfs { overrides.mounts.append(try tmpfsSpec(s)) }
        overrides.workingDirectory = r.chdir
        overrides.environment = r.env
        overrides.timeoutSeconds = r.timeout
        let plan = try PlanCompiler.compile(policy: policy, command: command, overrides: overrides, hostEnvironment: environment)
        Timing.mark("plan compiled (sources resolved, seccomp exported)")
        return Prepared(request: r, policy: policy, plan: plan)
    }

    /// Where a launch's payload reads and writes, where `sandbox exec` reports, and who may
    /// signal the payload: this process's own (`.process`), or those of the client a launch
    /// service runs it for (`LaunchService`).
    public struct LaunchIO: Sendable {
        /// The payload's stdin, stdout and stderr (-1: this process's own).
        public var stdio: (Int32, Int32, Int32)
        /// Where `sandbox exec`'s own messages and debug log go.
        public var errors: Int32
        /// The payload's signals: nil relays this process's own (SIGINT, SIGTERM, ...).
        public var signals: SandboxSignals?
        /// The caller's scheduling and resource settings, when it is another process.
        public var settings: CallerSettings?

        public static var process: LaunchIO { LaunchIO(stdio: (-1, -1, -1), errors: 2, signals: nil) }

        public init(stdio: (Int32, Int32, Int32), errors: Int32, signals: SandboxSignals?, settings: CallerSettings? = nil) {
            (self.stdio, self.errors, self.signals, self.settings) = (stdio, errors, signals, settings)
        }
    }

    /// Runs the prepared sandbox to its end and says what happened on stderr. Returns the
    /// exit status: the command's own, 128+N for a signal, 124 for the timeout, 125 when the
    /// sandbox could not be set up (`sandbox exec --help`).
    public static func launch(_ p: Prepared, io: LaunchIO = .process) -> Int32 {
        let r = p.request
        let printErr = { (s: String) in SandboxCLI.printErr(s, to: io.errors) }
        var logger = Logger(label: "autoharness.sandbox") { StderrLogHandler(label: $0, fd: io.errors) }
        logger.logLevel = r.debug ? .debug : .warning
        var options = RunOptions(logger: logger)
        options.stdio = io.stdio
        options.callerSettings = io.settings
        options.allowUnenforcedLimits = r.allowUnenforcedLimits
        // --bench-repeat measures what a long-lived supervisor pays per launch, pool included.
        if r.benchRepeat > 1 {
            let pool = NetworkNamespacePool.install()
            _ = pool.waitUntilReady(pool.capacity)
            options.networkNamespaces = pool
            let parts = SandboxPartsPool.install()
            parts.prepare(for: p.plan.identity)
            _ = parts.waitUntilReady(for: p.plan.identity)
            options.parts = parts
            options.sharedTrees = SharedTrees.install()
        }
        let result: SandboxResult
        do {
            let signals: SandboxSignals
            if let given = io.signals {
                signals = given
            } else {
                signals = try SandboxSignals()
                signals.relay(processSignals: [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2])
            }
            options.signals = signals
            if let audit = r.audit {
                // Fail closed: a sandbox whose audit file refuses a line (a full disk) is killed
                // whole rather than go on unaudited, as for a timeout.
                options.audit = try AuditLog(path: audit) { _ in signals.kill() }
            }
            let plan = p.plan
            if r.debug {
                for m in plan.mounts { logger.debug("mount \(m.summary)  [\(m.origin)]") }
                for s in plan.skippedMounts { logger.debug("skipped optional \(s) (source missing)") }
                logger.debug("seccomp: \(plan.filter.allowed.count) syscalls allowed, \(plan.filter.instructionCount) BPF instructions")
            }
            if r.benchRepeat > 1 { try benchmark(plan, repeat: r.benchRepeat, options: options) }
            result = try SandboxRunner.run(plan, options: options)
        } catch {
            printErr("sandbox: \(error)")
            return sandboxSetupStatus
        }
        if let failure = options.audit.writeFailure {
            printErr("sandbox: \(failure); killed the whole sandbox")
            return sandboxSetupStatus
        }

        switch result.termination {
        case .setupFailed(let message, _):
            printErr("sandbox: \(message)")
        case .execFailed(let e):
            printErr("sandbox: \(p.plan.command[0]): \(String(cString: strerror(e)))")
        case .timedOut:
            printErr("sandbox: timed out after \(r.timeout ?? p.policy.limits.timeoutSeconds ?? 0)s; killed the whole sandbox")
        default:
            break
        }
        let (count, text) = options.audit.summary(for: result.sandboxID)
        if count > 0 {
            printErr("sandbox \(result.sandboxID): \(count) audit event\(count == 1 ? "" : "s"): \(text)\(r.audit.map { " (audit: \($0))" } ?? "")")
        }
        if !result.leftovers.isEmpty {
            printErr("sandbox: could not remove: \(result.leftovers.joined(separator: ", "))")
        }
        return result.exitCode
    }

    /// `sandbox exec`'s status for a failure of its own (the full CLI's `Exit.sandboxSetup`).
    public static let sandboxSetupStatus: Int32 = 125

    /// scripts/bench-sandbox: the supervisor's own cost per launch, without process start-up,
    /// argument parsing or policy loading (what a long-lived supervisor pays).
    private static func benchmark(_ plan: LaunchPlan, repeat count: Int, options: RunOptions) throws(SandboxError) {
        var total = 0.0
        for _ in 1..<count {
            let t0 = monotonicNow()
            var p = plan
            p.sandboxID = SandboxID.make()
            _ = try SandboxRunner.run(p, options: options)
            total += monotonicNow() - t0
        }
        let pool = options.networkNamespaces.map { p in
            p.failure.map { "; no network namespaces ahead of time: \($0)" } ?? "; \(p.counts.handedOut) network namespaces made ahead of time"
        } ?? ""
        let trees = options.sharedTrees.map { t in
            "; /proc covers cloned from a shared tree; " + (t.seed >= 0 ? "mount namespaces copied from a seed" : t.seedProblem ?? "no seed")
        } ?? "; \(SharedTrees.unavailableReason ?? "no shared trees")"
        let parts = options.parts.map { p in
            let c = p.counts
            return "; \(c.devices) /dev trees and \(c.namespaces) user namespaces made ahead of time" + p.failures.map { " (\($0))" }.joined()
        } ?? ""
        printErr("bench: \(count - 1) in-process launches, mean \(Int(total / Double(count - 1) * 1e6)) us\(pool)\(parts)\(trees)")
    }

    private static func bind(_ s: String, readOnly: Bool) throws(ExecUsageError) -> MountSpec {
        let parts = s.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        let src = parts[0]
        let dst = parts.count > 1 ? parts[1] : src
        guard !src.isEmpty, !dst.isEmpty else { throw ExecUsageError("--\(readOnly ? "ro" : "rw") \(s): expected SRC[:DST]") }
        return MountSpec(kind: readOnly ? .readOnly(source: src) : .readWrite(source: src), destination: dst)
    }

    private static func tmpfsSpec(_ s: String) throws(ExecUsageError) -> MountSpec {
        let parts = s.split(separator: ":", maxSplits: 1).map(String.init)
        var size: UInt64?
        if parts.count > 1 {
            guard let v = ByteSize.parse(parts[1]) else { throw ExecUsageError("--tmpfs \(s): bad size '\(parts[1])' (e.g. 64M, 1G)") }
            size = v
        }
        return MountSpec(kind: .tmpfs(size: size, mode: 0o1777), destination: parts.first ?? s)
    }
}

public func hostEnvironment() -> [String: String] {
    var env: [String: String] = [:]
    var p = environ
    while let entry = p.pointee {
        let s = String(cString: entry)
        if let eq = s.firstIndex(of: "=") { env[String(s[..<eq])] = String(s[s.index(after: eq)...]) }
        p += 1
    }
    return env
}

public func printErr(_ s: String, to fd: Int32 = 2) {
    let line = s + "\n"
    _ = line.withCString { write(fd, $0, strlen($0)) }
}

