import Glibc
import ArgumentParser
import Benchmark
import Experiment
import Foundation
import Ledger
import Sandbox
import SandboxPolicy

@main
struct Autoharness: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "autoharness",
        abstract: "Supervise self-improving agents so that benchmark cheating is structurally impossible.",
        discussion: """
            autoharness runs the auto-harness loop (benchmark -> coding agent edits agent/agent.py -> \
            gate -> record) with the coding agent and every benchmark task inside sandboxes built \
            from policy files. To see the whole loop offline (a generated benchmark, a scripted \
            coding agent, gates, blocked cheats, an HTML report):

              autoharness demo

            The sandbox is also usable on its own:

              autoharness sandbox exec --policy base -- python3 -c 'print(1)'
              autoharness policy show benchmark-task

            Sandboxes need root (user/mount/pid/net namespaces, id maps, cgroups).

            Exit status, for every command (README "Exit codes"):
              0    success; gate: accepted
              1    gate: rejected; a check failed (status --verify, policy check, doctor);
                   run: the coding agent crashed in a loop
              2    usage, config or state: a bad flag or file, an unprepared experiment,
                   a refused request (held-out task ids, a spent budget)
              3    run: nothing left to do (a budget spent, a bound reached)
              4    another autoharness holds the experiment lock (its pid is named)
              5    I/O or ledger error: disk full, EIO, an unreadable ledger
              124  sandbox exec: --timeout expired
              125  a sandbox could not be set up; sandbox exec: any failure of its own
              126  sandbox exec: the command cannot be executed (127: not found)
              128+N  interrupted by signal N (130 SIGINT): run abandoned on a second
                   signal; sandbox exec: the command was killed by signal N
            """,
        subcommands: [InitCommand.self, PrepareCommand.self, BenchmarkCommand.self, GateCommand.self, StatusCommand.self, RunCommand.self, ReportCommand.self, DemoCommand.self,
                      SandboxCommand.self, PolicyCommand.self, DoctorCommand.self]
    )

    static func main() {
        Timing.mark("process started (loader, static initialisers)")
        // Nothing the supervisor writes to (a child's pipe, a socket, its own stdout) may kill
        // it by closing the other end: writes fail with EPIPE instead, and are checked. The
        // launcher resets every disposition before a sandboxed payload runs.
        signal(SIGPIPE, SIG_IGN)
        // `sandbox exec` captures its command for passthrough, which would also swallow a
        // --help given before the command: answer it here.
        let args = Array(CommandLine.arguments.dropFirst())
        if args.count >= 2, args[0] == "sandbox", args[1] == "exec" {
            let options = args.dropFirst(2).prefix { $0 != "--" && !$0.hasPrefix("/") }
            if args.count == 2 || options.contains(where: { $0 == "-h" || $0 == "--help" }) {
                print(SandboxExec.helpMessage(for: SandboxExec.self, columns: nil))
                return
            }
        }
        // A supervisor in a delegated cgroup v2 moves into a leaf and enables controllers
        // for its sandboxes before the first one starts; say so once, up front.
        // Likewise, sandboxes a killed supervisor left frozen end now, even if this command
        // launches none (a resumed run whose budget is spent).
        if let verb = args.first, ["sandbox", "prepare", "benchmark", "gate", "run", "demo", "doctor"].contains(verb),
           !args.contains("-h"), !args.contains("--help") {
            let host = CgroupHost.current
            if let done = host.delegation { printErr("autoharness: \(done)") }
            for line in host.endOrphanedSandboxes() { printErr("autoharness: \(line)") }
            Timing.mark("cgroup host detected, orphans swept")
        }
        do {
            if args.count >= 2, args[0] == "sandbox", args[1] == "exec", let request = SandboxExecArguments.parse(args.dropFirst(2)) {
                try SandboxExec.execute(request)
                return
            }
            var command = try parseAsRoot(args)
            try command.run()
        } catch {
            Exit.exit(for: error, arguments: args)
        }
    }
}

/// Exit statuses of the CLI itself: the one table (README "Exit codes" and `--help` repeat
/// it). Sandboxed commands pass theirs through (`sandbox exec`: see `SandboxResult.exitCode`
/// for 124-127 and 128+N).
enum Exit {
    /// Success; `gate`: accepted; `run`: ended by one of its limits after working.
    static let ok: Int32 = 0
    /// `gate`: rejected. A check found a problem: `status --verify` (tampering),
    /// `policy check`, `doctor`. `run`: stopped by a crash loop of the coding agent.
    static let failure: Int32 = 1
    /// Usage, configuration or state error: a bad flag or file, an unprepared experiment, a
    /// refused request (held-out ids, a spent budget asked for more).
    static let usage: Int32 = 2
    /// `run`: nothing left to do: a budget is spent, or restarts / sessions without progress
    /// reached their bound. The reason is the last line on stderr. The coding agent's client
    /// exits with it for a request made while the run is stopping (not run).
    static let nothingLeft: Int32 = 3
    /// Another supervisor holds the experiment lock (its pid and purpose are named).
    static let lockBusy: Int32 = 4
    /// An I/O or ledger error: disk full, EIO, an unreadable or inconsistent ledger. Nothing
    /// was recorded half-way; the path and errno are named.
    static let ioError: Int32 = 5
    /// `sandbox exec --timeout` expired.
    static let timeout: Int32 = 124
    /// A sandbox could not be set up (stage and errno named).
    static let sandboxSetup: Int32 = 125
    /// Interrupted (`run` abandoning its request on a second SIGINT/SIGTERM/SIGHUP, or a
    /// signal before it started): 128 + the signal number, 130 for SIGINT.
    static func interrupted(by signal: Int32) -> Int32 { 128 + signal }

    /// The one mapping from what went wrong to the table above, for every command and for
    /// the coding agent's requests through the broker.
    static func code(for error: any Error) -> Int32 {
        switch error {
        case let e as ExitCode: return e.rawValue
        case let e as LedgerError: return e.code == .locked ? lockBusy : ioError
        case let e as ExperimentError: return e.kind == .io ? ioError : usage
        case let e as BenchmarkError: return e.code == .io ? ioError : usage
        case let e as SandboxError:
            switch e.code {
            case .invalidPolicy, .invalidArgument, .sourceMissing: return usage
            case .io: return ioError
            default: return sandboxSetup
            }
        case is ConfigErrors, is ConfigError, is PolicyDiagnostics, is PolicyError: return usage
        default:
            switch Autoharness.exitCode(for: error) {
            case .success: return ok  // --help, --version
            case .validationFailure: return usage  // a bad flag or argument (ArgumentParser's 64)
            // Every error type of ours is named above; what is left comes from Foundation's
            // file and process calls (CocoaError, POSIXError): the system failed an operation.
            default: return ioError
            }
        }
    }

    /// Prints what `error` says and exits with its code. A command that threw `ExitCode`
    /// has said what it had to. `sandbox exec` passes its command's status through, so
    /// every failure of its own is 125 there, a bad flag included.
    static func exit(for error: any Error, arguments: [String]) -> Never {
        let wrapper = arguments.starts(with: ["sandbox", "exec"])
        var code = code(for: error)
        if error is ExitCode {
            // said already
        } else if Autoharness.exitCode(for: error) == .success {
            print(Autoharness.fullMessage(for: error))
        } else if Autoharness.exitCode(for: error) == .validationFailure {
            printErr(Autoharness.fullMessage(for: error))
        } else {
            printErr("\(wrapper ? "sandbox" : "autoharness"): \(error)")
        }
        if wrapper, !(error is ExitCode), code != ok { code = sandboxSetup }
        Glibc.exit(code)
    }
}
