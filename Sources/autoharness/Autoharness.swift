import Glibc
import ArgumentParser
import Sandbox

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
            """,
        subcommands: [InitCommand.self, PrepareCommand.self, BenchmarkCommand.self, GateCommand.self, StatusCommand.self, RunCommand.self, ReportCommand.self, DemoCommand.self,
                      SandboxCommand.self, PolicyCommand.self, DoctorCommand.self]
    )

    static func main() {
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
        }
        Self.main(nil)
    }
}

/// Exit statuses of the CLI itself: the one table (README "Exit codes" and `--help` repeat
/// it). Sandboxed commands pass theirs through (`sandbox exec`: see `SandboxResult.exitCode`
/// for 124-127 and 128+N).
enum Exit {
    /// Success; `gate`: accepted; `run`: ended by one of its limits after working.
    static let ok: Int32 = 0
    /// `gate`: rejected. A check found a problem: `status --verify` (tampering),
    /// `policy check`, `doctor`.
    static let failure: Int32 = 1
    /// Usage, configuration or state error: a bad flag or file, an unprepared experiment, a
    /// refused request (held-out ids, a spent budget asked for more).
    static let usage: Int32 = 2
    /// `run`: nothing left to do: a budget is spent, or restarts / sessions without progress
    /// reached their bound. The reason is the last line on stderr.
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
    /// Interrupted (SIGINT twice, or SIGINT/SIGTERM to a command that cannot finish cleanly):
    /// 128 + the signal number, 130 for SIGINT.
    static let interrupted: Int32 = 130
}
