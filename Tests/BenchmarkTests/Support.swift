import Foundation
import Sandbox
import SandboxPolicy
import Testing

@testable import Benchmark

/// Benchmark tests build real sandboxes: they fail loudly without root, never skip.
func requireRoot() throws {
    try #require(getuid() == 0, "benchmark tests must run as root (every task runs in real sandboxes)")
}

enum Paths {
    static let testsDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().path
    static let packageRoot = URL(fileURLWithPath: testsDirectory).deletingLastPathComponent().deletingLastPathComponent().path
    static let policies = packageRoot + "/policies"
    static func fixture(_ name: String) -> String { testsDirectory + "/Fixtures/" + name }
}

/// A fresh directory, removed (as root, whatever the sandbox left in it) at the end.
final class TempDir {
    let path: String
    init(in parent: String = NSTemporaryDirectory(), mode: mode_t = 0o755) throws {
        path = (parent.hasSuffix("/") ? parent : parent + "/") + "ah-bench-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        chmod(path, mode)
    }
    @discardableResult
    func file(_ name: String, _ contents: String, mode: mode_t = 0o644) throws -> String {
        let p = path + "/" + name
        try FileManager.default.createDirectory(atPath: (p as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try contents.write(toFile: p, atomically: false, encoding: .utf8)
        chmod(p, mode)
        return p
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// A scratch root on /dev/shm (tmpfs), root-owned 0700 as the supervisor would make it.
func makeScratchRoot() throws -> TempDir {
    var st = statvfs()
    try #require(statvfs("/dev/shm", &st) == 0, "/dev/shm must exist (tmpfs) for scratch directories")
    return try TempDir(in: "/dev/shm", mode: 0o700)
}

/// A directory holding `agent.py` with `source` (a HarnessAgent class).
func makeAgent(_ source: String) throws -> TempDir {
    let dir = try TempDir()
    try dir.file("agent.py", source)
    return dir
}

/// A runner over the shipped policies, owning its agent and scratch directories so that
/// they live exactly as long as the runner is in use.
final class Harness {
    let agent: TempDir?
    let scratch: TempDir
    let runner: TaskRunner

    /// `agent` is agent.py's source (nil: oracle mode without an agent directory).
    init(agent source: String?, scratch: TempDir? = nil, oracle: Bool = false,
         observer: (@Sendable (_ taskID: String, _ scratchDirectory: String) -> Void)? = nil,
         configure: (inout TaskRunConfiguration) -> Void = { _ in }) throws {
        DeadlockWatchdog.ensureRunning()
        agent = try source.map(makeAgent)
        self.scratch = try scratch ?? makeScratchRoot()
        var config = TaskRunConfiguration(
            policyLoader: PolicyLoader(searchPaths: [Paths.policies]), agentDirectory: agent?.path ?? "",
            scratchRoot: self.scratch.path)
        config.oracle = oracle
        config.scratchObserver = observer
        configure(&config)
        runner = try TaskRunner(configuration: config)
    }

    func run(_ task: BenchmarkTask, trace: String? = nil) -> TaskOutcome {
        withExtendedLifetime(self) { runner.run(task, traceDirectory: trace) }
    }

    func runAll(_ tasks: [BenchmarkTask], concurrency: Int, trace: (BenchmarkTask) -> String? = { _ in nil },
                progress: (Int, Int, TaskOutcome) -> Void = { _, _, _ in }) -> [TaskOutcome] {
        withExtendedLifetime(self) { runner.runAll(tasks, concurrency: concurrency, traceDirectory: trace, progress: progress) }
    }
}

func fixtureBenchmark(_ name: String) throws -> LocalBenchmark {
    try LocalBenchmark(directory: Paths.fixture(name))
}

func read(_ path: String) -> String? { try? String(contentsOfFile: path, encoding: .utf8) }

func listing(_ path: String) -> [String] {
    ((try? FileManager.default.subpathsOfDirectory(atPath: path)) ?? []).sorted()
}

/// Host processes whose command line contains `marker`.
func hostProcesses(containing marker: String) -> [Int32] {
    let fm = FileManager.default
    let me = getpid()
    return ((try? fm.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { Int32($0) }.filter { pid in
        guard pid != me, let data = fm.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
        return String(decoding: data, as: UTF8.self).contains(marker)
    }
}

/// Collects what the scratch observer saw (agent stdout per task), across threads.
final class Captured: @unchecked Sendable {
    private let lock = NSLock()
    private var values: [String] = []
    func append(_ s: String) { lock.withLock { values.append(s) } }
    var all: [String] { lock.withLock { values } }
}

/// A marker unique to one test, for finding its processes on the host.
func uniqueMarker(_ prefix: String) -> String { "\(prefix)-\(UUID().uuidString.prefix(12).lowercased())" }

/// An agent that solves the basic fixture tasks (or, with `wrong`, answers them all wrongly).
func solverAgentSource(wrong: Bool = false) -> String {
    """
    import os

    WRONG = \(wrong ? "True" : "False")

    class HarnessAgent:
        def run(self, instruction, workdir):
            def put(name, text):
                with open(os.path.join(workdir, name), "w") as f:
                    f.write(text + "\\n")
            if "number 42" in instruction:
                put("answer.txt", "41" if WRONG else "42")
            elif "Add up" in instruction:
                with open(os.path.join(workdir, "data/numbers.txt")) as f:
                    total = sum(int(x) for x in f.read().split())
                put("sum.txt", str(total + (1 if WRONG else 0)))
            elif "/app/done" in instruction:
                if not WRONG:
                    put("done", "")
            elif "hello" in instruction:
                put("greeting.txt", "goodbye" if WRONG else "hello")
            print("handled:", instruction.strip())
    """
}

/// Turns a launcher regression from a hang into a test failure.
///
/// A sandbox monitor forked while another thread of this process was inside pthread_create
/// used to deadlock in glibc's setxid broadcast (its setgroups/setresuid wrappers wait for
/// the half-created thread, which does not exist in the child), and SandboxRunner then
/// waited for it forever; the launcher now makes those calls as raw syscalls. Monitors are
/// single-threaded C that only ever block in poll/read/waitpid, so a direct child of this
/// process named sandbox-init that sleeps in a futex for several seconds is that deadlock:
/// the watchdog kills it (it is this process's own child), the task comes back as
/// setup_failed, and `DeadlockWatchdog.killed` counts it.
enum DeadlockWatchdog {
    private static let lock = NSLock()
    nonisolated(unsafe) private static var count = 0
    private static let started: Void = {
        let t = Thread {
            var since: [Int32: Date] = [:]
            while true {
                Thread.sleep(forTimeInterval: 1)
                let me = getpid()
                var stuck: Set<Int32> = []
                for pid in ((try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap({ Int32($0) }) {
                    guard let stat = read("/proc/\(pid)/stat"), let close = stat.lastIndex(of: ")") else { continue }
                    let comm = stat[stat.index(after: stat.firstIndex(of: "(")!)..<close]
                    let fields = stat[stat.index(close, offsetBy: 2)...].split(separator: " ")
                    guard comm == "sandbox-init", fields.count > 1, Int32(fields[1]) == me,
                          read("/proc/\(pid)/wchan")?.contains("futex") == true else { continue }
                    stuck.insert(pid)
                    let first = since[pid] ?? Date()
                    since[pid] = first
                    if Date().timeIntervalSince(first) > 5 {
                        kill(pid, SIGKILL)
                        lock.withLock { count += 1 }
                    }
                }
                since = since.filter { stuck.contains($0.key) }
            }
        }
        t.start()
    }()

    static func ensureRunning() { _ = started }
    static var killed: Int { lock.withLock { count } }
}

/// Creates and joins short-lived threads until stopped: the process's other threads, as a
/// busy supervisor would have them, at the moments sandboxes are forked.
final class ThreadChurn: @unchecked Sendable {
    private let lock = NSLock()
    private var stopped = false
    private let done = DispatchSemaphore(value: 0)

    init() {
        Thread { [self] in
            while !lock.withLock({ stopped }) {
                var t = pthread_t()
                if pthread_create(&t, nil, { _ in nil }, nil) == 0 { pthread_join(t, nil) }
            }
            done.signal()
        }.start()
    }

    func stop() {
        lock.withLock { stopped = true }
        done.wait()
    }
}

/// Tasks told apart by "vector: ID" in their instruction, each with the answer key
/// `tests/expected.txt` ("the-answer") and a test that writes reward 1 when its shell
/// condition `test` holds.
func answerKeyBenchmark(_ dir: TempDir, _ tasks: [(id: String, test: String)]) throws -> LocalBenchmark {
    for t in tasks {
        try dir.file("tasks/\(t.id)/instruction.md", "vector: \(t.id)\n")
        try dir.file("tasks/\(t.id)/tests/expected.txt", "the-answer\n")
        try dir.file("tasks/\(t.id)/tests/test.sh", """
            #!/bin/bash
            if \(t.test); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
            """, mode: 0o755)
    }
    return try LocalBenchmark(directory: dir.path)
}

/// agent.py for `answerKeyBenchmark`: in /app, runs `plants[vector]` (Python, given `os` and
/// `workdir`) for its task's vector, else `otherwise` (Python, indented for the method).
func plantingAgent(_ plants: [String: String], otherwise: String) -> String {
    let json = String(decoding: try! JSONSerialization.data(withJSONObject: plants, options: [.sortedKeys]), as: UTF8.self)
    return """
        import json, os
        PLANTS = json.loads(\(String(reflecting: json)))
        class HarnessAgent:
            def run(self, instruction, workdir):
                os.chdir(workdir)
                vector = instruction.split("vector: ")[1].strip()
                if vector in PLANTS:
                    exec(PLANTS[vector], {"os": os, "workdir": workdir})
                    return
        \(otherwise)
        """
}
