import ArgumentParser
import Benchmark
import Experiment
import ExperimentModel
import Foundation
import Glibc
import Ledger
import Sandbox
import SandboxCLI
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

            Exit status, for every command (docs/operations.md "Exit codes"):
              0    success; gate: accepted
              1    gate: rejected; a check failed (status --verify, policy check, doctor);
                   run: the coding agent crashed in a loop
              2    usage, config or state: a bad flag or file, an unprepared experiment,
                   a refused request (held-out task ids, a spent budget)
              3    run: nothing left to do (a budget spent, a bound reached)
              4    another autoharness holds the experiment lock (its pid is named)
              5    I/O or ledger error: disk full, EIO, an unreadable ledger (the path is
                   named); run: stopped because a write failed
              124  sandbox exec: --timeout expired
              125  a sandbox could not be set up; sandbox exec: any failure of its own
              126  sandbox exec: the command cannot be executed (127: not found)
              128+N  interrupted by signal N (130 SIGINT): run abandoned on a second
                   signal; sandbox exec: the command was killed by signal N
            """,
        subcommands: [InitCommand.self, ConfigCommand.self, ImagesCommand.self, PrepareCommand.self, BenchmarkCommand.self, GateCommand.self, CandidateCommand.self, TriageCommand.self, StatusCommand.self, FailuresCommand.self, SuiteCommand.self, NeedsHumanCommand.self, RunCommand.self, ReportCommand.self, EvidenceCommand.self, AuditCommand.self, DemoCommand.self, SimulateGateCommand.self,
                      SandboxCommand.self, PolicyCommand.self, DoctorCommand.self, WorkerCommand.self, WorkerKeyCommand.self, VMGuestCommand.self, VMExecCommand.self]
    )

    static func main() {
        Timing.mark("process started (loader, static initialisers)")
        // Nothing the supervisor writes to (a child's pipe, a socket, its own stdout) may kill
        // it by closing the other end: writes fail with EPIPE instead, and are checked. The
        // launcher resets every disposition before a sandboxed payload runs.
        signal(SIGPIPE, SIG_IGN)
        // Before any sandbox: every one inherits a set audit loginuid, so none can move the
        // host's audit session counter (`LoginUID`).
        if let failure = LoginUID.pin() { printErr("autoharness: warning: the audit loginuid could not be set (\(failure))") }
        // `sandbox exec` captures its command for passthrough, which would also swallow a
        // --help given before the command: answer it here.
        let args = Array(CommandLine.arguments.dropFirst())
        if args.count >= 2, args[0] == "sandbox", args[1] == "exec" {
            if args.count == 2 || ExecArguments.asksForHelp(args.dropFirst(2)) {
                print(SandboxExec.helpMessage(for: SandboxExec.self, columns: nil))
                return
            }
        }
        // A supervisor in a delegated cgroup v2 moves into a leaf and enables controllers
        // for its sandboxes before the first one starts; say so once, up front.
        // Likewise, sandboxes a killed supervisor left frozen end now, even if this command
        // launches none (a resumed run whose budget is spent).
        // (`sandbox exec`'s help is asked before its command: a `-h` after it is the command's.)
        let asksForHelp = args.starts(with: ["sandbox", "exec"]) ? args.count == 2 || ExecArguments.asksForHelp(args.dropFirst(2))
            : args.contains("-h") || args.contains("--help")
        if let verb = args.first, ["sandbox", "prepare", "benchmark", "gate", "run", "demo", "doctor", "triage"].contains(verb), !asksForHelp {
            let host = CgroupHost.current
            if let done = host.delegation { printErr("autoharness: \(done)") }
            for line in host.endOrphanedSandboxes() { printErr("autoharness: \(line)") }
            Timing.mark("cgroup host detected, orphans swept")
        }
        // Commands that launch sandboxes by the hundred keep network namespaces, /dev trees and
        // user namespaces ready, made while the current sandbox runs (NetworkNamespacePool,
        // SandboxPartsPool), and clone /proc's
        // covers from trees built once (SharedTrees); `sandbox exec` launches one, and
        // `sandbox serve` launches them for the front.
        if let verb = args.first, ["prepare", "benchmark", "gate", "run", "demo"].contains(verb)
            || (args.starts(with: ["sandbox", "serve"]) && !asksForHelp) {
            NetworkNamespacePool.install()
            SandboxPartsPool.install()
            SharedTrees.install()
        }
        do {
            if args.count >= 2, args[0] == "sandbox", args[1] == "exec", let request = ExecArguments.parse(args.dropFirst(2)) {
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

extension Exit {
    /// `Exit.code(for:)`, with ArgumentParser's own outcomes sorted out first: `--help` and
    /// `--version` are 0, a bad flag or argument is 2 (never ArgumentParser's 64).
    static func code(forCommandLine error: any Error) -> Int32 {
        if error is ExitCode { return code(for: error) }
        switch Autoharness.exitCode(for: error) {
        case .success: return ok
        case .validationFailure: return usage
        default: return code(for: error)
        }
    }

    /// Prints what `error` says and exits with its code. A command that threw `ExitCode`
    /// has said what it had to. `sandbox exec` passes its command's status through, so
    /// every failure of its own is 125 there, a bad flag included.
    static func exit(for error: any Error, arguments: [String]) -> Never {
        let wrapper = arguments.starts(with: ["sandbox", "exec"])
        var code = code(forCommandLine: error)
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
