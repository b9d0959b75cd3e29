import ArgumentParser
import Experiment
import ExperimentModel
import Glibc
import Logging
import Sandbox
import SandboxCLI
import SandboxPolicy

struct SandboxCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sandbox",
        abstract: "Run commands in policy-defined sandboxes.",
        subcommands: [SandboxExec.self, SandboxServe.self]
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
        var r = ExecRequest()
        (r.policy, r.policyDirs, r.variables, r.readOnly, r.readWrite, r.tmpfs) = (policy, policyDirs, variables, readOnly, readWrite, tmpfs)
        (r.chdir, r.env, r.timeout, r.audit) = (chdir, env, timeout, audit)
        (r.allowUnenforcedLimits, r.debug, r.benchRepeat, r.command) = (allowUnenforcedLimits, debug, benchRepeat, command)
        try Self.execute(r)
    }

    /// Loads the policy (through `PolicyCache`, whose entries the front also uses) and runs
    /// the rest of `sandbox exec` as the front does (`SandboxExecution`). Throws `ExitCode`
    /// with the status, or what `Exit.exit` reports.
    static func execute(_ r: ExecRequest) throws {
        Timing.mark("arguments parsed")
        let prepared: SandboxExecution.Prepared
        do {
            prepared = try prepare(r)
        } catch let e as ExecUsageError {
            throw ValidationError(e.message)
        }
        throw ExitCode(SandboxExecution.launch(prepared))
    }

    /// `r`'s policy loaded (from the cache while no layer file has changed) and its plan
    /// compiled, with `environment` as the caller's: for a one-shot launch and for one the
    /// launch service runs.
    static func prepare(_ r: ExecRequest, environment: [String: String] = hostEnvironment()) throws -> SandboxExecution.Prepared {
        let command = try SandboxExecution.command(of: r)
        let vars = try SandboxExecution.variables(of: r)
        var loader = PolicyLocator.loader(r.policyDirs)
        loader.usesCache = true
        loader.cacheKeyLaunchCode = SandboxExecution.launchCode
        let policy = try loader.load(r.policy, variables: vars, requireAllPlaceholders: true)
        Timing.mark("policy loaded")
        return try SandboxExecution.prepare(r, command: command, policy: policy, environment: environment)
    }
}

struct SandboxServe: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Run `sandbox exec` launches for the front, with parts made ahead.",
        discussion: """
            A resident supervisor for one-shot launches. `autoharness sandbox exec` (the front \
            that scripts/install puts in bin/) hands each launch to the service answering at the \
            socket, and stands in for its sandbox as before: the command reads and writes the \
            caller's own stdin, stdout and stderr, the caller's signals reach it, its exit status \
            is the caller's, and the caller's end kills the sandbox. Every layer is built per \
            launch as in a one-shot launch; the service has ready what a long-lived supervisor \
            makes once or ahead of time (the policy's load, network namespaces, /dev trees, user \
            namespaces, template roots and /proc's covers), so a launch takes about two thirds of the time.

            Served only: root clients (SO_PEERCRED) in the service's namespaces and root \
            directory, with its capabilities, no_new_privs and seccomp filters, running this very \
            build, whose AUTOHARNESS_* settings equal the service's, with a command line in the \
            plain spellings. Anything else, and every launch while no service answers, the front \
            runs itself. A served sandbox runs in the service's cgroup subtree, with the \
            service's resource limits where the policy sets none, the caller's umask and working \
            directory.

            The socket's directory must be root's and writable by no one else, and so must every \
            directory above it (a sticky one aside). The front \
            looks at $AUTOHARNESS_LAUNCH_SERVICE when set (a socket path, or `off`). SIGINT or \
            SIGTERM stop the service: launches under way are killed and cleaned up first. One \
            service per socket: it holds SOCKET.lock while it runs.

            Started by the front: when no service answers at the socket, the front starts one \
            there (`--same-cgroup --idle-exit 60s --log`, in a session of its own, with PID 1's \
            resource limits and no nice value, I/O priority, CPU mask or oom_score_adj of the \
            caller's) and runs that launch itself; the launches after it are served. It serves \
            only clients in the cgroup it started in, so a sandbox is made where the caller's \
            own would be, and stops after 60 s without a launch; none is started for a \
            relative socket path. $AUTOHARNESS_LAUNCH_SERVICE=off turns both off. A service \
            that only declines (another build, cgroup or confinement) counts as idle. Every \
            served sandbox has its caller's nice value, I/O priority, CPUs, oom_score_adj and \
            resource limits, as in the caller's own launch. A service without --same-cgroup \
            (systemd's) declines a caller whose cgroup limits (memory, pids, CPU quota, huge \
            pages, I/O) are tighter than its own: served, its sandbox would be made outside \
            them; the log names the file and both values.

            Socket activation: started by systemd with a socket passed down (LISTEN_FDS; \
            templates/systemd, `scripts/install --service`), the service serves on that socket \
            instead of making one. It must be a listening Unix stream socket bound to a path, \
            the file there root's and writable by root alone (SocketMode=0600), in a directory \
            as above. systemd keeps it: a service that stops leaves it \
            listening, and systemd starts the service again at the next client.

            Examples:
              autoharness sandbox serve &
              autoharness sandbox serve --socket /srv/ah/launch.sock &
              AUTOHARNESS_LAUNCH_SERVICE=/srv/ah/launch.sock autoharness sandbox exec -- id -u
              autoharness sandbox serve --idle-exit 10m      # as the systemd unit runs it
            """
    )

    @Option(name: .long, help: "The socket to listen at (default \(LaunchService.defaultSocket)); with a socket passed down by systemd, the path it must be bound to.")
    var socket: String?

    @Option(name: .customLong("idle-exit"), help: ArgumentHelp("Stop after this long with no launch under way and no new client (600, 10m, 1h).", valueName: "duration"))
    var idleExitText: String?

    @Flag(name: .customLong("same-cgroup"), help: "Serve only clients in the cgroup this service started in; others launch themselves. The front starts its service so.")
    var sameCgroup = false

    @Flag(name: .long, help: "Append the service's messages to SOCKET.log beside its socket (made 0600) instead of stderr, once it listens.")
    var log = false

    var idleExit: Double? { idleExitText.flatMap(DurationString.parse) }

    func validate() throws {
        if let idleExitText, !(idleExit.map { $0 > 0 } ?? false) {
            throw ExperimentError(.usage, "sandbox serve: --idle-exit \(idleExitText): expected a duration above 0 (seconds, or with s, m or h)")
        }
    }

    func run() throws {
        let startedIn = LaunchService.ownCgroups()
        let stop = ProcessSignals.channel([SIGINT, SIGTERM, SIGHUP])
        let server: LaunchServer
        // Any failure declines: the front then reports it as a one-shot launch does.
        let prepare: LaunchServer.Prepare = { request, environment in try? SandboxExec.prepare(request, environment: environment) }
        do {
            if let passed = try LaunchServer.passedSocket() {
                server = try LaunchServer(passed: passed, expected: socket, prepare: prepare)
            } else {
                server = try LaunchServer(path: socket ?? LaunchService.defaultSocket, prepare: prepare)
            }
        } catch {
            throw ExperimentError(.usage, "sandbox serve", cause: error)
        }
        if log {
            do { try server.logBesideSocket() } catch { throw ExperimentError(.usage, "sandbox serve: --log", cause: error) }
        }
        if sameCgroup { server.onlyCgroups = startedIn }
        let origin = server.activated ? " (a socket passed down by systemd)" : ""
        let idle = idleExit.map { "; stops after \(DurationString.format($0)) without a launch" } ?? ""
        printErr("autoharness: serving sandbox exec at \(server.path)\(origin) (pid \(getpid())); SIGINT or SIGTERM stops\(idle)")
        let done = server.serve(stop: stop, idleExit: idleExit)
        let why = done.idle ? " (idle for \(DurationString.format(idleExit ?? 0)))" : ""
        printErr("autoharness: stopped serving at \(server.path)\(why): \(done.served) launches served, \(done.declined) declined, \(done.refused) connections refused")
    }
}
