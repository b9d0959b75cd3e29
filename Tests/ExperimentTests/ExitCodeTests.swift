import Foundation
import Glibc
import Testing
import TestSupport

/// The exit-code table (`Exit`, docs/operations.md "Exit codes", `autoharness --help`): each code provoked
/// for real through the built binary. 3 (`run` with nothing left to do) is tested with the
/// run's stopping (StoppingTests, RunTests).
@Suite("Exit codes: one table, each code provoked for real")
struct ExitCodeTests {
    @Test("the table is in --help, which exits 0")
    func helpShowsTable() throws {
        let r = try autoharness(["--help"])
        #expect(r.status == 0)
        for row in ["0    success; gate: accepted", "1    gate: rejected", "2    usage, config or state", "3    run: nothing left to do",
                    "4    another autoharness holds the experiment lock", "5    I/O or ledger error", "124  sandbox exec: --timeout expired",
                    "125  a sandbox could not be set up", "128+N  interrupted by signal N"] {
            #expect(r.stdout.contains(row), "--help lacks '\(row)'")
        }
    }

    @Test("0 accepted, 1 rejected")
    func acceptedAndRejected() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.setAgent(Agents.all)
        let accepted = try exp.run("gate")
        #expect(accepted.status == 0 && accepted.stdout.contains("ACCEPTED"), "\(accepted.stdout) \(accepted.stderr)")
        try exp.setAgent(Agents.all + "\n# a tie\n")
        let rejected = try exp.run("gate")
        #expect(rejected.status == 1 && rejected.stdout.contains("REJECTED"), "\(rejected.stdout) \(rejected.stderr)")
    }

    @Test("2 for a bad flag or command, no experiment, a broken config and an unprepared experiment (never ArgumentParser's 64)")
    func usageConfigState() throws {
        let exp = try Experiment(prepare: false)
        let flag = try exp.run("gate", "--bogus")
        #expect(flag.status == 2 && flag.stderr.contains("--bogus") && flag.stderr.contains("Usage:"), "\(flag.status) \(flag.stderr)")
        let verb = try autoharness(["no-such-command"])
        #expect(verb.status == 2, "\(verb.status) \(verb.stderr)")
        let nowhere = try autoharness(["status", "-C", exp.temp.path + "/nowhere"])
        #expect(nowhere.status == 2 && nowhere.stderr.contains("no experiment at"), "\(nowhere.status) \(nowhere.stderr)")
        let unprepared = try exp.run("gate")
        #expect(unprepared.status == 2 && unprepared.stderr.contains("not prepared yet"), "\(unprepared.status) \(unprepared.stderr)")
        let config = exp.root + "/experiment_config.yaml"
        try (try String(contentsOfFile: config, encoding: .utf8) + "\nbogus_key: 1\n").write(toFile: config, atomically: true, encoding: .utf8)
        let broken = try exp.run("status")
        #expect(broken.status == 2 && broken.stderr.contains("unknown key 'bogus_key'"), "\(broken.status) \(broken.stderr)")
    }

    @Test("4 when another process holds the experiment lock, for every command that takes it")
    func lockBusy() throws {
        try requireRoot()
        let exp = try Experiment()
        let lock = exp.root + "/.autoharness/lock"
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/flock")
        // --no-fork: the lock's holder is the process the test kills, not a child it leaves.
        holder.arguments = ["--no-fork", "--exclusive", lock, "/bin/sleep", "120"]
        try holder.run()
        defer {
            kill(holder.processIdentifier, SIGKILL)
            holder.waitUntilExit()
        }
        var held = false
        for _ in 0..<250 where !held {
            held = try runProcess("/usr/bin/flock", ["--nonblock", lock, "/bin/true"]).status != 0
            if !held { usleep(20_000) }
        }
        try #require(held, "flock(1) never took \(lock)")
        for verb in ["prepare", "benchmark", "gate", "run"] {
            let r = try exp.run(verb)
            #expect(r.status == 4 && r.stderr.contains("holds the experiment lock \(lock)"), "\(verb): \(r.status) \(r.stderr)")
        }
        // Reading needs no lock.
        #expect(try exp.run("status").status == 0)
    }

    @Test("5 on a full disk (a small tmpfs, in a mount namespace of the test's own) and on a ledger that is not one, naming the path and the error")
    func ioAndLedgerErrors() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.setAgent(Agents.all)
        let mountPoint = exp.temp.path + "/full"
        try FileManager.default.createDirectory(atPath: mountPoint, withIntermediateDirectories: true)
        // The copy of the experiment on a 16 MiB tmpfs, filled up; the mount ends with the
        // namespace when the shell exits. With 4 KiB already in the lock file (its page is
        // reused when the holder is written), the first write to fail is the ledger's.
        let script = """
            set -e
            mount -t tmpfs -o size=16m autoharness-test "$1"
            cp -a "$2/." "$1/"
            if [ "$4" = ledger ]; then head -c 4096 /dev/zero > "$1/.autoharness/lock"; fi
            dd if=/dev/zero of="$1/filler" bs=4k status=none 2>/dev/null || true
            "$3" gate -C "$1"
            """
        for (first, failing) in [("lock", "/.autoharness/lock: No space left on device"), ("ledger", "/.autoharness/ledger.sqlite")] {
            let r = try runProcess("/usr/bin/unshare", ["--mount", "--propagation", "private", "/bin/sh", "-c", RayClusterTests.dropLoopMounts + "\n" + script, "sh",
                                                        mountPoint, exp.root, Built.autoharness, first])
            #expect(r.status == 5 && r.stderr.contains(mountPoint + failing), "\(first): \(r.status): \(r.stdout) \(r.stderr)")
        }

        let ledger = exp.root + "/.autoharness/ledger.sqlite"
        try Data(repeating: 0x41, count: 8192).write(to: URL(fileURLWithPath: ledger))
        for args in [["status"], ["status", "--verify"], ["gate"]] {
            let r = try exp.run(args)
            #expect(r.status == 5 && r.stderr.contains(ledger), "\(args): \(r.status) \(r.stderr)")
        }
    }

    @Test("5 for the coding agent's request that hits a ledger error, which also stops the run (5); and for a run stopped because a record could not be written even though its end row was then recorded")
    func runStoppedByLedger() throws {
        try requireRoot()
        let exp = try Experiment()
        let home = exp.root + "/.autoharness/run/home"
        // Each run's agent makes one request that must be recorded, when the test says so.
        try exp.configureRun(command: ["python3", "-c", """
            import os, subprocess, time
            while True:
                if os.path.exists('/home/agent/go1'):
                    r = subprocess.run(['autoharness', 'benchmark', '--task-ids', 'no-such-task'], capture_output=True, text=True)
                    print('BENCHMARK' + '-EXIT', r.returncode, r.stderr.strip().replace('\\n', ' | '), flush=True)  # not the text of this script, which the log shows
                    break
                if os.path.exists('/home/agent/go2'):
                    subprocess.run(['autoharness', 'record'], capture_output=True)
                    break
                time.sleep(0.05)
            time.sleep(120)
            print('STILL' + ' RUNNING', flush=True)
            """])
        let wal = exp.root + "/.autoharness/ledger.sqlite-wal"

        // 1. Writes to the ledger's WAL fail (EPERM: immutable, even for root): the broker
        // answers the agent's request with the table's code, and the run stops (5).
        let first = try BackgroundRun(exp, maxHours: "0.1")
        try first.wait("agent start") { (try? exp.rows("run_started").count) == 1 && FileManager.default.fileExists(atPath: home) && FileManager.default.fileExists(atPath: wal) }
        let chattr = { (flag: String) in try runProcess("/usr/bin/chattr", [flag, wal]) }
        try #require(try chattr("+i").status == 0, "chattr +i \(wal)")
        defer { _ = try? chattr("-i") }
        _ = FileManager.default.createFile(atPath: home + "/go1", contents: nil)
        try first.wait("the agent's first answer") { exp.agentLog.contains("BENCHMARK-EXIT") }
        #expect(try chattr("-i").status == 0)
        #expect(exp.agentLog.contains("BENCHMARK-EXIT 5 autoharness: cannot append to the ledger"), "\(exp.agentLog)")
        #expect(exp.agentLog.contains("the run is stopping"), "\(exp.agentLog)")
        #expect(try first.finish() == 5, "\(first.stderr)")
        #expect(!exp.agentLog.contains("STILL RUNNING"))

        // 2. Another writer holds the ledger's write lock until the supervisor has given up
        // on a record (its busy timeout is 30 s), then lets go: the run's end is recorded.
        let ready = exp.temp.path + "/held", release = exp.temp.path + "/release"
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        holder.arguments = ["-c", """
            import os, sqlite3, sys, time
            c = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=0)
            c.execute('BEGIN IMMEDIATE')
            open(sys.argv[2], 'w').close()
            while not os.path.exists(sys.argv[3]): time.sleep(0.05)
            c.execute('ROLLBACK')
            """, exp.root + "/.autoharness/ledger.sqlite", ready, release]
        let second = try BackgroundRun(exp, maxHours: "0.1")
        // Its start row is written after its home is made afresh.
        try second.wait("the second run's agent") { (try? exp.rows("run_started").count) == 2 && FileManager.default.fileExists(atPath: home) }
        try holder.run()
        defer {
            if holder.isRunning { kill(holder.processIdentifier, SIGKILL) }
            holder.waitUntilExit()
        }
        try second.wait("the ledger's write lock") { FileManager.default.fileExists(atPath: ready) }
        _ = FileManager.default.createFile(atPath: home + "/go2", contents: nil)
        try second.wait("a failed record") { second.stderr.contains("could not record") }
        _ = FileManager.default.createFile(atPath: release, contents: nil)
        #expect(try second.finish() == 5, "\(second.stderr)")
        // The end of the run was recorded: the code came from the record that failed, not from the last append.
        let ended = try exp.rows("run_ended")
        #expect((ended.last?["reason"] as? String)?.hasPrefix("the ledger could not be written") == true, "\(ended)")
    }

    @Test("5 from the coding agent's client when the supervisor cannot be reached (a 1 would read as a rejected gate)")
    func clientUnreachable() throws {
        let r = try runProcess(Built.directory + "/autoharness-client", ["gate"], environment: ["AUTOHARNESS_BROKER": "/nonexistent/broker.sock"])
        #expect(r.status == 5 && r.stderr.contains("broker is not reachable at /nonexistent/broker.sock"), "\(r.status) \(r.stderr)")
    }

    @Test("sandbox exec: the command's own status passes through; 124 timeout, 125 for any failure of its own (a bad flag included), 127 not found, 128+N killed by N")
    func sandboxExec() throws {
        try requireRoot()
        #expect(try autoharness(["sandbox", "exec", "--", "/bin/sh", "-c", "exit 2"]).status == 2)
        #expect(try autoharness(["sandbox", "exec", "--timeout", "1", "--", "/bin/sleep", "30"]).status == 124)
        let missing = try autoharness(["sandbox", "exec", "--ro", "/no/such/source", "--", "/bin/true"])
        #expect(missing.status == 125 && missing.stderr.contains("/no/such/source"), "\(missing.stderr)")
        let flag = try autoharness(["sandbox", "exec", "--timeout", "soon", "--", "/bin/true"])
        #expect(flag.status == 125, "a wrapper's bad option must not look like the command's own 2 or 64: \(flag.status) \(flag.stderr)")
        // A mistyped option before the command is not taken for the program (127).
        let unknown = try autoharness(["sandbox", "exec", "--tmeout", "1", "--", "/bin/true"])
        #expect(unknown.status == 125 && unknown.stderr.contains("unknown option '--tmeout'"), "\(unknown.status) \(unknown.stderr)")
        let policy = try autoharness(["sandbox", "exec", "--policy", "/no/such/policy.yaml", "--", "/bin/true"])
        #expect(policy.status == 125, "\(policy.status) \(policy.stderr)")
        #expect(try autoharness(["sandbox", "exec", "--", "/no/such/binary"]).status == 127)
        #expect(try autoharness(["sandbox", "exec", "--", "/bin/sh", "-c", "kill -TERM $$"]).status == 128 + SIGTERM)
    }

    @Test("130 when run is interrupted twice: the second SIGINT abandons the gate in progress")
    func interruptedTwice() throws {
        try requireRoot()
        let exp = try Experiment()
        // The agent gates an agent.py whose tasks sleep for minutes: the first SIGINT waits
        // for that gate, the second abandons it.
        try exp.configureRun(command: ["python3", Fixtures.agents + "/slow_gate.py"])
        let p = try exp.start("run", "--max-hours", "0.1")
        defer {
            if p.isRunning { kill(p.processIdentifier, SIGKILL) }
            p.waitUntilExit()
        }
        let deadline = Date().addingTimeInterval(120)
        while (try? exp.rows("gate_started").count) != 1 {
            try #require(p.isRunning, "run ended (\(p.terminationStatus)) before the gate started: \(exp.agentLog)")
            try #require(Date() < deadline, "the gate never started: \(exp.agentLog)")
            usleep(50_000)
        }
        kill(p.processIdentifier, SIGINT)
        usleep(500_000)
        #expect(p.isRunning, "the first SIGINT must let the gate in progress finish")
        kill(p.processIdentifier, SIGINT)
        p.waitUntilExit()
        #expect(p.terminationReason == .exit && p.terminationStatus == 130, "\(p.terminationReason) \(p.terminationStatus)")
        // The next command that takes the lock records the abandoned gate as interrupted.
        let next = try exp.run("prepare")
        #expect(next.status == 2, "\(next.status) \(next.stderr)")
        #expect(try exp.rows("gate_attempt").first?["reason"] as? String == "interrupted")
        #expect(try exp.run("status", "--verify").status == 0)
    }
}
