import Foundation
import Testing
@testable import Benchmark

/// `ChildProcess`, how the supervisor runs git, a tool's --version, a Python's import check and
/// the guest's PostgreSQL programs: input given, output bounded, a timeout that kills.
@Suite("Helper programs the supervisor runs")
struct ChildProcessTests {
    @Test("input reaches the program while its output is read (more than a pipe holds both ways); stderr merged or not")
    func inputAndOutput() throws {
        let big = String(repeating: "x", count: 300_000) + "\n"
        let echoed = try ChildProcess.run(["/bin/sh", "-c", "cat; echo err >&2"], input: big)
        #expect(echoed.succeeded && echoed.output == big + "err\n" && !echoed.truncated)
        let quiet = try ChildProcess.run(["/bin/sh", "-c", "echo out; echo err >&2; exit 3"], standardError: .discarded)
        #expect(quiet.status == 3 && !quiet.succeeded && quiet.output == "out\n")
        // Standard input is empty, never the supervisor's own.
        let stdin = try ChildProcess.run(["/bin/sh", "-c", "wc -c"])
        #expect(stdin.output.trimmingCharacters(in: .whitespacesAndNewlines) == "0")
    }

    @Test("output past the cap is read and dropped (the program finishes), and said so")
    func capped() throws {
        let r = try ChildProcess.run(["/bin/sh", "-c", "yes y | tr -d '\\n' | head -c 1000000; echo; echo done >&2"], outputCap: 1000)
        #expect(r.succeeded && r.truncated && r.output.utf8.count == 1000 && r.output.allSatisfy { $0 == "y" })
    }

    @Test("a program past its timeout is killed by its pid, and one holding the pipe through a child does not hold the supervisor")
    func timeout() throws {
        let start = Date()
        let r = try ChildProcess.run(["/bin/sh", "-c", "echo started; (sleep 5 &); exec sleep 30"], timeout: 1)
        let took = Date().timeIntervalSince(start)
        #expect(r.timedOut && r.signaled && r.status == SIGKILL && !r.succeeded)
        #expect(r.output == "started\n")
        #expect(took < 10, "took \(took) s")
    }

    @Test("a program that cannot start is an error naming it")
    func missing() {
        #expect(throws: BenchmarkError.self) { try ChildProcess.run(["/nonexistent/tool", "--version"]) }
    }
}
