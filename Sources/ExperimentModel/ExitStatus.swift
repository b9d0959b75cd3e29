import ArgumentParser
import Benchmark
import Ledger
import Sandbox
import SandboxPolicy
import SupervisorIO

/// Exit statuses: the one table for the CLI and for the coding agent's requests through the
/// broker (docs/operations.md "Exit codes" and `--help` repeat it). Sandboxed commands pass theirs through (`sandbox exec`: see `SandboxResult.exitCode`
/// for 124-127 and 128+N).
public enum Exit {
    /// Success; `gate`: accepted; `run`: ended by one of its limits after working.
    public static let ok: Int32 = 0
    /// `gate`: rejected. A check found a problem: `status --verify` (tampering),
    /// `policy check`, `doctor`. `run`: stopped by a crash loop of the coding agent.
    public static let failure: Int32 = 1
    /// Usage, configuration or state error: a bad flag or file, an unprepared experiment, a
    /// refused request (held-out ids, a spent budget asked for more).
    public static let usage: Int32 = 2
    /// `run`: nothing left to do: a budget is spent, or restarts / sessions without progress
    /// reached their bound. The reason is the last line on stderr. The coding agent's client
    /// exits with it for a request made while the run is stopping (not run).
    public static let nothingLeft: Int32 = 3
    /// Another supervisor holds the experiment lock (its pid and purpose are named).
    public static let lockBusy: Int32 = 4
    /// An I/O or ledger error: disk full, EIO, an unreadable or inconsistent ledger. Nothing
    /// was recorded half-way; the path and errno are named.
    public static let ioError: Int32 = 5
    /// `sandbox exec --timeout` expired.
    public static let timeout: Int32 = 124
    /// A sandbox could not be set up (stage and errno named).
    public static let sandboxSetup: Int32 = 125
    /// Interrupted (`run` abandoning its request on a second SIGINT/SIGTERM/SIGHUP, or a
    /// signal before it started): 128 + the signal number, 130 for SIGINT.
    public static func interrupted(by signal: Int32) -> Int32 { 128 + signal }

    /// The one mapping from what went wrong to the table above, for every command and for
    /// the coding agent's requests through the broker.
    public static func code(for error: any Error) -> Int32 {
        switch error {
        case let e as ExitCode: return e.rawValue
        case let e as any AutoharnessError: return code(for: e.category)
        // Every error type of ours has a category (ArchitectureTests holds them to it); what
        // is left comes from Foundation's file and process calls (CocoaError, POSIXError):
        // the system failed an operation. (The CLI sorts ArgumentParser's own errors out
        // first: `Exit.code(forCommandLine:)`.)
        default: return ioError
        }
    }

    /// The status of each category of failure.
    public static func code(for category: ErrorCategory) -> Int32 {
        switch category {
        case .usage, .state, .refused: return usage
        case .locked: return lockBusy
        case .io: return ioError
        case .sandboxSetup: return sandboxSetup
        }
    }

}
