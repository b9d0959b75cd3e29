@testable import Experiment
@testable import ExperimentModel
import Foundation
import Testing
import TestSupport

// Fail closed on a full disk: every write of the supervisor's own — the
// ledger, a view, a snapshot, a train trace, staging, the report, the audit file — that
// fails stops what it was part of with the path and the error, exit 5; in `autoharness run`
// the coding agent is stopped at once and the run's end is recorded if the ledger takes it.
// Each test fills a small tmpfs and puts it exactly where one write path goes.

/// A small tmpfs, filled to its last page, bound over `target` (a directory, or a file)
/// with `target`'s contents copied in first: the next write under `target` fails with
/// ENOSPC and nothing else changes. The filler lives outside what is bound, so the target
/// shows no extra entry. `release()` (or the end of the test) unmounts both.
final class FullMount {
    let target: String
    let backing: String
    private var mounted = false

    /// `inodes`: out of inodes (nothing more can be created) rather than out of blocks.
    init(over target: String, in temp: TempDir, size: String = "1m", inodes: Bool = false) throws {
        self.target = target
        backing = temp.path + "/full-" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        let directory = FileManager.default.fileExists(atPath: target + "/.")
        let script = """
            set -e
            mkdir -p "$1"
            mount -t tmpfs -o size=\(size)\(inodes ? ",nr_inodes=64" : "") autoharness-full "$1"
            if [ "$3" = dir ]; then mkdir "$1/d"; cp -a "$2/." "$1/d/"; else cp -a "$2" "$1/d"; fi
            if [ "$4" = inodes ]; then i=0; while touch "$1/i$i" 2>/dev/null; do i=$((i+1)); done
            else dd if=/dev/zero of="$1/filler" bs=4k status=none 2>/dev/null || true; fi
            mount --bind "$1/d" "$2"
            """
        let r = try runProcess("/bin/sh", ["-c", script, "sh", backing, target, directory ? "dir" : "file", inodes ? "inodes" : "blocks"])
        try #require(r.status == 0, "could not put a full tmpfs over \(target): \(r.stderr)")
        mounted = true
        // Really full: a one-byte file cannot be written (or, out of inodes, created).
        let probe = try runProcess("/bin/dd", ["if=/dev/zero", "of=\(backing)/probe", "bs=1", "count=1", "status=none"])
        try #require(probe.status != 0 && probe.stderr.contains("No space left on device"), "the tmpfs is not full: \(probe.stderr)")
    }

    func release() {
        guard mounted else { return }
        mounted = false
        _ = try? runProcess("/bin/umount", [target])
        _ = try? runProcess("/bin/umount", ["-l", backing])
    }

    deinit { release() }
}

/// agent.py that solves every task and makes one refused call (ptrace) per task it runs.
let tracingSolver = Agents.all + """

    import ctypes
    _run = HarnessAgent.run
    def run(self, instruction, workdir):
        _run(self, instruction, workdir)
        ctypes.CDLL(None).syscall(101, 16, 1, 0, 0)  # ptrace: refused and audited
    HarnessAgent.run = run
    """

/// The `×N` of the syscall violations recorded against agent.py during train runs.
func trainPtraces(_ exp: Experiment) throws -> Int {
    try exp.rows("violation").filter { ($0["actor"] as? String) == "agent.py (train run)" && ($0["detail"] as? String ?? "").contains("ptrace") }
        .map { $0["count"] as? Int ?? 0 }.reduce(0, +)
}

/// The one gate of `exp` ended as interrupted with no score; once `full` is gone the ledger verifies.
func expectInterruptedGate(_ exp: Experiment, then full: FullMount) throws {
    let attempts = try exp.rows("gate_attempt")
    #expect(attempts.count == 1 && attempts.first?["reason"] as? String == "interrupted" && attempts.first?["valScore"] == nil, "\(attempts)")
    full.release()
    #expect(try exp.run("status", "--verify").status == 0)
}

@Suite("A full disk: every write path fails closed", .serialized)
struct DiskFullTests {
    @Test("snapshots: gate and benchmark fail before anything is counted, naming the snapshot and ENOSPC (exit 5); afterwards the gate runs")
    func snapshots() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.setAgent(Agents.all)
        let full = try FullMount(over: exp.root + "/.autoharness/snapshots", in: exp.temp)
        for verb in ["gate", "benchmark"] {
            let r = try exp.run(verb)
            #expect(r.status == 5, "\(verb): \(r.status) \(r.stderr)")
            #expect(r.stderr.contains("snapshot \(exp.root)/.autoharness/snapshots/") && r.stderr.contains("No space left on device (ENOSPC)"), "\(r.stderr)")
        }
        #expect(try exp.rows("gate_started").isEmpty && exp.rows("train_run").isEmpty)
        full.release()
        #expect(try exp.run("status", "--verify").status == 0)
        #expect(try exp.run("gate").status == 0)
    }

    @Test("traces: a train run whose traces cannot be written is not recorded, starts no further task, and still records what agent.py did (exit 5, the trace path and ENOSPC)")
    func traces() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.setAgent(tracingSolver)
        let train = try exp.split().train
        try #require(train.count > 3)
        try FileManager.default.createDirectory(atPath: exp.root + "/workspace/traces/latest", withIntermediateDirectories: true)
        let full = try FullMount(over: exp.root + "/workspace/traces/latest", in: exp.temp)
        let r = try exp.run("benchmark")
        #expect(r.status == 5, "\(r.status) \(r.stdout) \(r.stderr)")
        #expect(r.stderr.contains("trace \(exp.root)/workspace/traces/latest/") && r.stderr.contains("No space left on device (ENOSPC)")
                    && r.stderr.contains("its results were not recorded"), "\(r.stderr)")
        #expect(try exp.rows("train_run").isEmpty, "a train run without its traces was recorded")
        // max_concurrency 2: at most the two tasks already running when the first trace
        // failed ran at all (one ptrace each), not the whole train split.
        let ran = try trainPtraces(exp)
        #expect(ran >= 1 && ran <= 2, "\(ran) of \(train.count) train tasks ran after the first trace could not be written")
        full.release()
        #expect(try exp.run("status", "--verify").status == 0)
        #expect(try exp.run("benchmark").status == 0)
        #expect(try exp.rows("train_run").count == 1)
        #expect(FileManager.default.fileExists(atPath: exp.root + "/workspace/traces/latest/\(train[0])/result.json"))
    }

    @Test("the scratch root out of inodes: no task is scored for what the supervisor could not set up; benchmark and gate fail (exit 5, the scratch root and ENOSPC), the gate ends as interrupted")
    func scratchRoot() throws {
        try requireRoot()
        let temp = try TempDir()
        // A scratch root must be on tmpfs: one of this test's own under /dev/shm.
        let scratch = "/dev/shm/autoharness-test-" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
        try FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let exp = try Experiment(config: ["scratch": scratch])
        try exp.setAgent(Agents.all)
        let full = try FullMount(over: scratch, in: temp, inodes: true)
        defer { full.release() }
        for verb in ["benchmark", "gate"] {
            let r = try exp.run(verb)
            #expect(r.status == 5, "\(verb): \(r.status) \(r.stdout) \(r.stderr)")
            #expect(r.stderr.contains("task scratch directory under \(scratch)") && r.stderr.contains("No space left on device"), "\(r.stderr)")
        }
        #expect(try exp.rows("train_run").isEmpty)
        try expectInterruptedGate(exp, then: full)
    }

    @Test("the held-out page-cache journal: a held-out sandbox whose sources cannot be journaled does not start, and the gate fails (exit 5, the journal and ENOSPC) as interrupted, with no score")
    func heldOutJournal() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.setAgent(Agents.all)
        let journal = exp.root + "/.autoharness/held-out-sources"
        _ = FileManager.default.createFile(atPath: journal, contents: nil)
        let full = try FullMount(over: journal, in: exp.temp)
        defer { full.release() }
        let r = try exp.run("gate")
        #expect(r.status == 5, "\(r.status) \(r.stdout) \(r.stderr)")
        #expect(r.stderr.contains("page-cache journal \(journal): No space left on device (ENOSPC); the held-out sandbox was not started"), "\(r.stderr)")
        try expectInterruptedGate(exp, then: full)
    }

    @Test("views: a gate's record and commit stand when its views cannot be written (exit 5, the view's path); status --verify calls them behind, and the next locked command repairs them")
    func views() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.setAgent(Agents.all)
        let before = try exp.file("workspace/results.tsv")
        let full = try FullMount(over: exp.root + "/workspace", in: exp.temp)
        let r = try exp.run("gate")
        #expect(r.status == 5, "\(r.status) \(r.stdout) \(r.stderr)")
        #expect(r.stderr.contains("cannot write \(exp.root)/workspace/") && r.stderr.contains("No space left on device"), "\(r.stderr)")
        let attempts = try exp.rows("gate_attempt")
        #expect(attempts.count == 1 && attempts.first?["accepted"] as? Bool == true, "\(attempts)")
        full.release()
        #expect(try exp.file("workspace/results.tsv") == before)
        let verify = try exp.run("status", "--verify")
        #expect(verify.status == 0 && verify.stdout.contains("behind"), "\(verify.status) \(verify.stdout) \(verify.stderr)")
        #expect(try exp.run("benchmark", "--task-ids", exp.split().train[0]).status == 0)
        #expect(try exp.file("workspace/results.tsv") != before)
        let clean = try exp.run("status", "--verify")
        #expect(clean.status == 0 && !clean.stdout.contains("behind"), "\(clean.stdout)")
    }

    @Test("report: a report that cannot be written fails with its path and the error (exit 5)")
    func report() throws {
        try requireRoot()
        let exp = try Experiment()
        let dir = exp.temp.path + "/reports"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let full = try FullMount(over: dir, in: exp.temp)
        let r = try exp.run("report", "--out", dir + "/report.html")
        #expect(r.status == 5 && r.stderr.contains("cannot write \(dir)/report.html") && r.stderr.contains("No space left on device"), "\(r.status) \(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: dir + "/report.html"))
        full.release()
    }

    @Test("staging: writing the coding agent's agent.py into a full directory fails with the path and ENOSPC, and leaves no temporary file")
    func staging() throws {
        try requireRoot()
        let temp = try TempDir()
        let dir = temp.path + "/staging"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let full = try FullMount(over: dir, in: temp)
        defer { full.release() }
        let staging = Staging(path: dir, owner: (65534, 65534))
        do {
            try staging.replaceAgent(with: Array("print('x')\n".utf8))
            Issue.record("writing into a full staging directory succeeded")
        } catch let e as ExperimentError {
            #expect(e.kind == .io && e.message == "\(dir)/agent.py: No space left on device (ENOSPC)", "\(e.message)")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: dir).isEmpty)
    }

    @Test("sandbox exec --audit: an audit file that refuses a line kills the whole sandbox (125, the file and ENOSPC)")
    func sandboxAudit() throws {
        try requireRoot()
        let temp = try TempDir()
        let dir = temp.path + "/audit"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let full = try FullMount(over: dir, in: temp)
        defer { full.release() }
        let r = try autoharness(["sandbox", "exec", "--audit", dir + "/audit.jsonl", "--", "python3", "-c",
                                 "import ctypes, time; ctypes.CDLL(None).syscall(101, 16, 1, 0, 0); time.sleep(30); print('AFTER')"])
        #expect(r.status == 125, "\(r.status) \(r.stdout) \(r.stderr)")
        #expect(r.stderr.contains("audit file \(dir)/audit.jsonl: No space left on device (ENOSPC); killed the whole sandbox"), "\(r.stderr)")
        #expect(!r.stdout.contains("AFTER"))
    }
}

/// `autoharness run` in the background, for tests that fill a disk while it runs.
final class BackgroundRun {
    let process = Process()
    let stderrPath: String

    init(_ exp: Experiment, maxHours: String = "0.05") throws {
        stderrPath = exp.temp.path + "/run.stderr"
        _ = FileManager.default.createFile(atPath: stderrPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: Built.autoharness)
        process.arguments = ["run", "--max-hours", maxHours, "-C", exp.root]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: stderrPath))
        try process.run()
    }

    var stderr: String { (try? String(contentsOfFile: stderrPath, encoding: .utf8)) ?? "" }

    func wait(_ what: String, seconds: Double = 120, _ done: () -> Bool) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while !done() {
            try #require(process.isRunning, "run ended (\(process.terminationStatus)) while waiting for \(what): \(stderr)")
            try #require(Date() < deadline, "no \(what) in \(Int(seconds)) s")
            usleep(50_000)
        }
    }

    /// Waits for the run to end by itself (failing the test after `seconds`).
    func finish(seconds: Double = 60) throws -> Int32 {
        let deadline = Date().addingTimeInterval(seconds)
        while process.isRunning && Date() < deadline { usleep(100_000) }
        try #require(!process.isRunning, "the run was still going \(Int(seconds)) s later: \(stderr)")
        return process.terminationStatus
    }

    deinit {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}

@Suite("A full disk during autoharness run: the coding agent is stopped", .serialized)
struct RunDiskFullTests {
    @Test("a snapshot that cannot be written: the agent's gate answers 5 and the run is stopping, the agent is stopped, the run ends with exit 5 and its end records the path and ENOSPC")
    func snapshotDuringRun() throws {
        try requireRoot()
        let exp = try Experiment()
        // SIGTERM ignored (its print must not race the stop); the SIGKILL after it ends it.
        try exp.configureRun(command: ["python3", "-c", """
            import os, signal, subprocess, time
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while not os.path.exists('/home/agent/go'): time.sleep(0.05)
            with open('/work/agent/agent.py', 'a') as f: f.write('\\n# changed\\n')
            r = subprocess.run(['autoharness', 'gate'], capture_output=True, text=True)
            print('GATE' + '-EXIT', r.returncode, r.stderr.strip().replace('\\n', ' | '), flush=True)
            for i in range(200): time.sleep(0.1)
            print('STILL' + ' RUNNING', flush=True)
            """])
        let run = try BackgroundRun(exp)
        let home = exp.root + "/.autoharness/run/home"
        try run.wait("the agent's start") { FileManager.default.fileExists(atPath: home) && (try? exp.rows("run_started").count) == 1 }
        let full = try FullMount(over: exp.root + "/.autoharness/snapshots", in: exp.temp)
        defer { full.release() }
        _ = FileManager.default.createFile(atPath: home + "/go", contents: nil)
        let status = try run.finish()
        #expect(status == 5, "\(status): \(run.stderr)")
        let answer = exp.agentLog.split(separator: "\n").first { $0.hasPrefix("GATE-EXIT") }.map(String.init) ?? ""
        #expect(answer.hasPrefix("GATE-EXIT 5 ") && answer.contains("No space left on device (ENOSPC)") && answer.contains("the run is stopping"), "\(exp.agentLog)")
        #expect(!exp.agentLog.contains("STILL RUNNING"), "the coding agent went on after a write failed")
        let ended = try exp.rows("run_ended")
        let reason = ended.last?["reason"] as? String ?? ""
        #expect(reason.contains("snapshot \(exp.root)/.autoharness/snapshots/") && reason.contains("ENOSPC"), "\(ended)")
        #expect(try exp.rows("gate_started").isEmpty)
        full.release()
        expectNothingLeft(exp, marker: "GATE' + '-EXIT")
        #expect(try exp.run("status", "--verify").status == 0)
    }

    @Test("an audit file that cannot be written: the agent's refused call stops the run (exit 5, audit.jsonl and ENOSPC in the run's end), and the call is still in the ledger")
    func auditDuringRun() throws {
        try requireRoot()
        let exp = try Experiment()
        // SIGTERM ignored: the stop's SIGTERM races the print after the refused call (it is
        // relayed while the call returns, and a small monitor relays it fast); the SIGKILL 5 s
        // later ends the agent long before it could print STILL RUNNING.
        try exp.configureRun(command: ["python3", "-c", """
            import ctypes, os, signal, time
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            while not os.path.exists('/home/agent/go'): time.sleep(0.05)
            ctypes.CDLL(None).syscall(101, 16, 1, 0, 0)
            print('REFUSED' + '-CALL-MADE', flush=True)
            for i in range(200): time.sleep(0.1)
            print('STILL' + ' RUNNING', flush=True)
            """])
        // The audit file is opened once, as the run starts: the full tmpfs is there first.
        let runDirectory = exp.root + "/.autoharness/run"
        try FileManager.default.createDirectory(atPath: runDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        _ = FileManager.default.createFile(atPath: runDirectory + "/audit.jsonl", contents: nil)
        let full = try FullMount(over: runDirectory + "/audit.jsonl", in: exp.temp)
        defer { full.release() }
        let run = try BackgroundRun(exp)
        let home = runDirectory + "/home"
        try run.wait("the agent's start") { FileManager.default.fileExists(atPath: home) && (try? exp.rows("run_started").count) == 1 }
        _ = FileManager.default.createFile(atPath: home + "/go", contents: nil)
        let status = try run.finish()
        #expect(status == 5, "\(status): \(run.stderr)")
        #expect(exp.agentLog.contains("REFUSED-CALL-MADE"))
        #expect(!exp.agentLog.contains("STILL RUNNING"), "the coding agent went on unaudited")
        let reason = try exp.rows("run_ended").last?["reason"] as? String ?? ""
        #expect(reason.contains("audit file \(runDirectory)/audit.jsonl: No space left on device (ENOSPC)"), "\(reason)")
        let recorded = try exp.rows("violation").filter { ($0["actor"] as? String) == "coding agent" && ($0["detail"] as? String ?? "").contains("ptrace") }
        #expect(!recorded.isEmpty, "the refused call is in memory and must reach the ledger")
        full.release()
        expectNothingLeft(exp, marker: "REFUSED' + '-CALL-MADE")
    }
}
