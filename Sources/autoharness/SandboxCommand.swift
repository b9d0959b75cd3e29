import Experiment
import ArgumentParser
import Glibc
import Logging
import Sandbox
import SandboxPolicy

struct SandboxCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sandbox",
        abstract: "Run commands in policy-defined sandboxes.",
        subcommands: [SandboxExec.self]
    )
}

struct SandboxExec: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "exec",
        abstract: "Run COMMAND in a sandbox built from a policy.",
        discussion: """
            The sandbox has its own user, mount, pid, network, IPC, UTS and cgroup namespaces. Its \
            root is an empty tmpfs holding only what the policy (plus --ro/--rw/--tmpfs) grants, a \
            fresh /proc and a minimal /dev. The command runs as a non-zero uid with no \
            capabilities, no_new_privs and a default-deny seccomp filter; each refused syscall is \
            reported (--audit FILE for JSON Lines, and a summary on stderr).

            Exit status: the command's own; 128+N if killed by signal N; 124 on timeout; 125 if \
            the sandbox could not be set up (stderr names the stage and errno); 126 if the \
            command cannot be executed; 127 if it is not found.

            Examples:
              autoharness sandbox exec -- /bin/sh -c 'id -u'
              autoharness sandbox exec --policy benchmark-task --var workdir=$PWD/w \\
                  --var agent_dir=$PWD/agent -- python3 /agent/agent.py
              autoharness sandbox exec --rw /srv/out:/out --timeout 30 -- make -C /out
            """
    )

    @Option(name: .long, help: "Policy name (looked up in the policy directories) or path to a policy file.")
    var policy: String = "base"

    @Option(name: .customLong("policy-dir"), help: "Directory of policy files, searched before the built-in ones.")
    var policyDirs: [String] = []

    @Option(name: .customLong("var"), help: ArgumentHelp("Value for a policy placeholder {NAME}.", valueName: "NAME=VALUE"))
    var variables: [String] = []

    @Option(name: .customLong("ro"), help: ArgumentHelp("Bind host SRC read-only at DST (default: same path).", valueName: "SRC[:DST]"))
    var readOnly: [String] = []

    @Option(name: .customLong("rw"), help: ArgumentHelp("Bind host SRC read-write at DST. The sandbox writes as the policy's host_uid.", valueName: "SRC[:DST]"))
    var readWrite: [String] = []

    @Option(name: .customLong("tmpfs"), help: ArgumentHelp("A private tmpfs at DST (SIZE like 64M; default 64M).", valueName: "DST[:SIZE]"))
    var tmpfs: [String] = []

    @Option(name: .customLong("chdir"), help: "Working directory inside the sandbox.")
    var chdir: String?

    @Option(name: .customLong("env"), help: ArgumentHelp("Set NAME=VALUE, or pass NAME from this environment.", valueName: "NAME[=VALUE]"))
    var env: [String] = []

    @Option(name: .customLong("timeout"), help: "Kill the whole sandbox after SECONDS (exit 124).")
    var timeout: Double?

    @Option(name: .customLong("audit"), help: "Append refused syscalls and limit events to FILE (JSON Lines).")
    var audit: String?

    @Flag(name: .customLong("allow-unenforced-limits"), help: "Run even if a cgroup limit of the policy cannot be enforced on this host.")
    var allowUnenforcedLimits = false

    @Flag(name: [.customShort("v"), .customLong("debug")], help: "Log sandbox set-up (which limits are enforced by what) to stderr.")
    var debug = false

    @Option(name: .customLong("bench-repeat"), help: .hidden)
    var benchRepeat: Int = 1

    @Argument(parsing: .captureForPassthrough, help: "The command and its arguments (after --).")
    var command: [String] = []

    func run() throws {
        try Self.execute(Request(
            policy: policy, policyDirs: policyDirs, variables: variables, readOnly: readOnly, readWrite: readWrite,
            tmpfs: tmpfs, chdir: chdir, env: env, timeout: timeout, audit: audit,
            allowUnenforcedLimits: allowUnenforcedLimits, debug: debug, benchRepeat: benchRepeat, command: command))
    }

    /// What `sandbox exec` was asked, however its arguments were parsed (`SandboxExecArguments`
    /// or ArgumentParser).
    struct Request {
        var policy = "base"
        var policyDirs: [String] = []
        var variables: [String] = []
        var readOnly: [String] = []
        var readWrite: [String] = []
        var tmpfs: [String] = []
        var chdir: String?
        var env: [String] = []
        var timeout: Double?
        var audit: String?
        var allowUnenforcedLimits = false
        var debug = false
        var benchRepeat = 1
        var command: [String] = []
    }

    static func execute(_ r: Request) throws {
        Timing.mark("arguments parsed")
        var cmd = r.command
        if cmd.first == "--" {
            cmd.removeFirst()
        } else if let first = cmd.first, first.hasPrefix("-") {
            // Passthrough takes everything from the first word it does not know; before any
            // `--` that word is a mistyped option, not a program (which would fail with 127).
            throw ValidationError("unknown option '\(first)'; options go before the command, the command after -- (autoharness sandbox exec --help)")
        }
        guard !cmd.isEmpty else { throw ValidationError("no command given; usage: autoharness sandbox exec [OPTIONS] -- COMMAND [ARG...]") }

        var vars: [String: String] = [:]
        for v in r.variables {
            guard let eq = v.firstIndex(of: "="), eq != v.startIndex else { throw ValidationError("--var \(v): expected NAME=VALUE") }
            vars[String(v[..<eq])] = String(v[v.index(after: eq)...])
        }
        // A one-shot launch loads its policy from the cache while no layer file has changed.
        var loader = PolicyLocator.loader(r.policyDirs)
        loader.usesCache = true
        let policy = try loader.load(r.policy, variables: vars, requireAllPlaceholders: true)

        Timing.mark("policy loaded")
        var overrides = PlanOverrides()
        do {
            for s in r.readOnly { overrides.mounts.append(try bind(s, readOnly: true)) }
            for s in r.readWrite { overrides.mounts.append(try bind(s, readOnly: false)) }
            for s in r.tmpfs { overrides.mounts.append(try tmpfsSpec(s)) }
        }
        overrides.workingDirectory = r.chdir
        overrides.environment = r.env
        overrides.timeoutSeconds = r.timeout

        var logger = Logger(label: "autoharness.sandbox") { StderrLogHandler(label: $0) }
        logger.logLevel = r.debug ? .debug : .warning
        var options = RunOptions(logger: logger)
        options.allowUnenforcedLimits = r.allowUnenforcedLimits
        // --bench-repeat measures what a long-lived supervisor pays per launch, pool included.
        if r.benchRepeat > 1 {
            let pool = NetworkNamespacePool.install()
            _ = pool.waitUntilReady(pool.capacity)
            options.networkNamespaces = pool
            options.sharedTrees = SharedTrees.install()
        }
        let signals = try SandboxSignals()
        signals.relay(processSignals: [SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2])
        options.signals = signals
        if let audit = r.audit {
            // Fail closed: a sandbox whose audit file refuses a line (a full disk) is killed
            // whole rather than go on unaudited, as for a timeout.
            options.audit = try AuditLog(path: audit) { _ in signals.kill() }
        }

        let result = try launch(policy: policy, command: cmd, overrides: overrides, options: options, logger: logger,
                                debug: r.debug, benchRepeat: r.benchRepeat).get()
        if let failure = options.audit.writeFailure {
            printErr("sandbox: \(failure); killed the whole sandbox")
            throw ExitCode(Exit.sandboxSetup)
        }

        switch result.termination {
        case .setupFailed(let message, _):
            printErr("sandbox: \(message)")
        case .execFailed(let e):
            printErr("sandbox: \(cmd[0]): \(String(cString: strerror(e)))")
        case .timedOut:
            printErr("sandbox: timed out after \(r.timeout ?? policy.limits.timeoutSeconds ?? 0)s; killed the whole sandbox")
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
        throw ExitCode(result.exitCode)
    }

    private static func launch(policy: Policy, command: [String], overrides: PlanOverrides, options: RunOptions,
                               logger: Logger, debug: Bool, benchRepeat: Int) -> Result<SandboxResult, SandboxError> {
        do throws(SandboxError) {
            let plan = try PlanCompiler.compile(policy: policy, command: command, overrides: overrides, hostEnvironment: hostEnvironment())
            Timing.mark("plan compiled (sources resolved, seccomp exported)")
            if debug {
                for m in plan.mounts { logger.debug("mount \(m.summary)  [\(m.origin)]") }
                for s in plan.skippedMounts { logger.debug("skipped optional \(s) (source missing)") }
                logger.debug("seccomp: \(plan.filter.allowed.count) syscalls allowed, \(plan.filter.instructionCount) BPF instructions")
            }
            if benchRepeat > 1 {
                // scripts/bench-sandbox: the supervisor's own cost per launch, without process
                // start-up, argument parsing or policy loading (what a long-lived supervisor pays).
                var total = 0.0
                for _ in 1..<benchRepeat {
                    let t0 = monotonicSeconds()
                    var p = plan
                    p.sandboxID = SandboxID.make()
                    _ = try SandboxRunner.run(p, options: options)
                    total += monotonicSeconds() - t0
                }
                let pool = options.networkNamespaces.map { p in
                    p.failure.map { "; no network namespaces ahead of time: \($0)" } ?? "; \(p.counts.handedOut) network namespaces made ahead of time"
                } ?? ""
                let trees = options.sharedTrees != nil ? "; /proc covers cloned from a shared tree" : "; \(SharedTrees.unavailableReason ?? "no shared trees")"
                printErr("bench: \(benchRepeat - 1) in-process launches, mean \(Int(total / Double(benchRepeat - 1) * 1e6)) us\(pool)\(trees)")
            }
            return .success(try SandboxRunner.run(plan, options: options))
        } catch {
            return .failure(error)
        }
    }

    private static func bind(_ s: String, readOnly: Bool) throws -> MountSpec {
        let parts = s.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
        let src = parts[0]
        let dst = parts.count > 1 ? parts[1] : src
        guard !src.isEmpty, !dst.isEmpty else { throw ValidationError("--\(readOnly ? "ro" : "rw") \(s): expected SRC[:DST]") }
        return MountSpec(kind: readOnly ? .readOnly(source: src) : .readWrite(source: src), destination: dst)
    }

    private static func tmpfsSpec(_ s: String) throws -> MountSpec {
        let parts = s.split(separator: ":", maxSplits: 1).map(String.init)
        var size: UInt64?
        if parts.count > 1 {
            guard let v = ByteSize.parse(parts[1]) else { throw ValidationError("--tmpfs \(s): bad size '\(parts[1])' (e.g. 64M, 1G)") }
            size = v
        }
        return MountSpec(kind: .tmpfs(size: size, mode: 0o1777), destination: parts.first ?? s)
    }
}

func hostEnvironment() -> [String: String] {
    var env: [String: String] = [:]
    var p = environ
    while let entry = p.pointee {
        let s = String(cString: entry)
        if let eq = s.firstIndex(of: "=") { env[String(s[..<eq])] = String(s[s.index(after: eq)...]) }
        p += 1
    }
    return env
}

func printErr(_ s: String) {
    let line = s + "\n"
    _ = line.withCString { write(2, $0, strlen($0)) }
}

func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}
