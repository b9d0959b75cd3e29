import Benchmark
@testable import Experiment
@testable import Evidence
@testable import ExperimentModel
import Foundation
import Ledger
import Sandbox
import SandboxPolicy
import SupervisorIO
import Testing

// One error shape (`AutoharnessError`), one exit table (`Exit`): every error type of the
// project reaches the status docs/operations.md's "Exit codes" names through its category.

@Suite("Exit statuses by error category")
struct ExitStatusTests {
    @Test("each error type's category gives the documented status", arguments: [
        (ExperimentError(.usage, "x"), Exit.usage),
        (ExperimentError(.state, "x"), Exit.usage),
        (ExperimentError(.refused, "x"), Exit.usage),
        (ExperimentError(.locked, "x"), Exit.lockBusy),
        (ExperimentError(.io, "x"), Exit.ioError),
        (IOFailure("write", "/x", errno: ENOSPC), Exit.ioError),
        (LedgerError(.corrupt, "x"), Exit.ioError),
        (BenchmarkError(.configuration, "x"), Exit.usage),
        (BenchmarkError(.io, "x"), Exit.ioError),
        (SandboxError(.invalidPolicy, "x"), Exit.usage),
        (SandboxError(.io, "x"), Exit.ioError),
        (SandboxError(.cgroup, "x"), Exit.sandboxSetup),
        (PolicyError("x"), Exit.usage),
        (ConfigErrors([ConfigError(file: "c.yaml", line: 3, message: "x")]), Exit.usage),
        (Git.Failure(command: "commit", output: "x"), Exit.ioError),
    ] as [(any AutoharnessError, Int32)])
    func mapping(_ c: (any AutoharnessError, Int32)) {
        #expect(Exit.code(for: c.0) == c.1, "\(type(of: c.0)) \(c.0.category)")
    }

    @Test("an error that reports another keeps it: the text reads context then cause, and the cause (a write's errno, a task file's line) is still there to ask")
    func causeKept() throws {
        let write = IOFailure("write", "/x/agent.py", errno: ENOSPC)
        let e = ExperimentError(.io, "snapshot", cause: write)
        #expect(e.message == "snapshot: write /x/agent.py: No space left on device (ENOSPC)", "\(e.message)")
        #expect((e.cause as? IOFailure)?.errno == ENOSPC && Exit.code(for: e) == Exit.ioError)
        let task = BenchmarkError(.invalidTaskFile, "t/task.toml:3: table [agent] is defined twice")
        let b = BenchmarkError(.configuration, "", cause: task)
        #expect(b.message == task.message && (b.cause as? BenchmarkError)?.code == .invalidTaskFile)
        let p = PolicyError("p.yaml", cause: task)
        #expect(p == PolicyError("p.yaml: " + task.message) && p.cause != nil)
    }

    @Test("an error that is not the project's (Foundation's file calls) is the system's: exit 5")
    func foreign() {
        #expect(Exit.code(for: CocoaError(.fileNoSuchFile)) == Exit.ioError)
    }
}
