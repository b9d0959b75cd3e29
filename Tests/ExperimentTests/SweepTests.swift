import Foundation
import Sandbox
import Testing
import TestSupport

// What a supervisor killed with SIGKILL leaves behind, and the next start that removes it
// (without touching what a live supervisor has).

/// agent.py whose every task runs `sleep MARKER` (a process findable by its command line).
private func sleepingAgent(_ marker: String) -> String {
    "import subprocess\nclass HarnessAgent:\n    def run(self, instruction, workdir):\n        subprocess.run(['sleep', '\(marker)'])\n"
}

private func waitFor(_ what: String, seconds: Double = 60, _ condition: () throws -> Bool) throws {
    let deadline = Date().addingTimeInterval(seconds)
    while try !condition() {
        try #require(Date() < deadline, "waited \(Int(seconds))s for \(what)")
        usleep(100_000)
    }
}

/// What one supervisor has under a scratch root: its directories and their markers.
private func scratchEntries(_ root: String, ownedBy pid: Int32) -> Set<String> {
    let names = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
    let dirs = names.filter { $0.contains(".o\(pid)-") }.map { String($0.prefix { $0 != "." }) }
    return Set(names.filter { $0.contains(".o\(pid)-") } + dirs)
}

private func mounted(under root: String) -> [String] {
    let mounts = procText("/proc/self/mountinfo") ?? ""
    return mounts.split(separator: "\n").compactMap { line in
        let f = line.split(separator: " ")
        return f.count > 4 && f[4].hasPrefix(root + "/") ? String(f[4]) : nil
    }
}

@Suite("Leftovers of a supervisor killed with SIGKILL", .serialized)
struct SweepTests {
    /// The scratch directory a mount under `scratch` belongs to (a task's scratch holds the
    /// verifier's logs tmpfs as a mount of its own).
    static func scratchName(_ mount: String, under scratch: String) -> String {
        String(mount.dropFirst(scratch.count + 1).split(separator: "/").first ?? "")
    }

    @Test("killed mid task run, mid gate and mid session, then started again: no process, cgroup, mount, scratch directory or socket of the dead supervisor is left, and a live supervisor's are untouched")
    func killedSupervisorsLeaveNothing() throws {
        try requireRoot()
        // A scratch root of this test's own, shared by both experiments.
        let scratch = "/dev/shm/ah-sweep-\(UUID().uuidString.prefix(8).lowercased())"
        defer {
            for m in mounted(under: scratch) { umount2(m, Int32(MNT_DETACH)) }
            try? FileManager.default.removeItem(atPath: scratch)
        }

        // The live supervisor: another experiment benchmarking an agent.py whose tasks sleep
        // for ten minutes (its benchmark's timeouts raised to allow it).
        let dir = try TempDir()
        let bench = dir.path + "/bench"
        #expect(try runProcess("/bin/cp", ["-r", Experiment.fixture, bench]).status == 0)
        for task in try FileManager.default.contentsOfDirectory(atPath: bench + "/tasks") {
            let toml = bench + "/tasks/\(task)/task.toml"
            try (try String(contentsOfFile: toml, encoding: .utf8)).replacingOccurrences(of: "timeout_sec = 20", with: "timeout_sec = 600")
                .write(toFile: toml, atomically: true, encoding: .utf8)
        }
        // Both experiments' supervisors run in a cgroup of this test's own: no other suite's
        // supervisor, starting meanwhile, sweeps what the killed ones leave.
        let enclosure = try CgroupEnclosure()
        var live = Experiment(existing: dir.path + "/live", temp: dir)
        live.enclosure = enclosure
        #expect(try autoharness(["init", live.root, "--benchmark", "local", "--dataset", bench]).status == 0)
        try live.configureRun(command: ["true"], values: ["scratch": scratch])
        #expect(try live.run("prepare").status == 0)
        let liveMarker = "600.\(Int.random(in: 100_000...999_999))"
        try live.setAgent(sleepingAgent(liveMarker))
        let liveRun = try live.start("benchmark")
        let livePID = liveRun.processIdentifier
        defer {
            kill(livePID, SIGKILL)
            liveRun.waitUntilExit()
            try? live.setAgent(Agents.none)
            _ = try? live.run("benchmark", "--task-ids", (try? live.split().train[0]) ?? "")
        }
        try waitFor("the live supervisor's tasks") {
            hostProcesses(containing: "sleep\u{0}" + liveMarker).count == 2 && scratchEntries(scratch, ownedBy: livePID).count == 4
        }
        let liveScratch = scratchEntries(scratch, ownedBy: livePID)
        let liveCgroups = Set(enclosure.sandboxCgroups(ownedBy: livePID))
        let liveTasks = Set(hostProcesses(containing: "sleep\u{0}" + liveMarker))
        try #require(!liveCgroups.isEmpty)

        var exp = try Experiment(config: ["scratch": scratch])
        exp.enclosure = enclosure
        let train = try exp.split().train[0]
        for point in ["task run", "gate", "session"] {
            let marker = "600.\(Int.random(in: 100_000...999_999))"
            let p: Process
            switch point {
            case "task run":
                try exp.setAgent(sleepingAgent(marker))
                p = try exp.start("benchmark")
                try waitFor("a task run") { !hostProcesses(containing: "sleep\u{0}" + marker).isEmpty }
            case "gate":
                // The coding agent writes that agent.py and gates: killed while held-out tasks run.
                let script = "import subprocess\nopen('agent/agent.py', 'w').write(\(String(reflecting: sleepingAgent(marker))))\n"
                    + "print(subprocess.run(['autoharness', 'gate'], capture_output=True, text=True).stdout)\n"
                try exp.configureRun(command: ["python3", "-c", script])
                p = try exp.start("run", "--max-hours", "0.1")
                try waitFor("a gate's held-out tasks") {
                    (try exp.rows("gate_started")).count == 1 && !hostProcesses(containing: "sleep\u{0}" + marker).isEmpty
                }
            default:
                try exp.configureRun(command: ["python3", "-c", "import time\nprint('sleeping', flush=True)\ntime.sleep(\(marker))"])
                p = try exp.start("run", "--max-hours", "0.1")
                try waitFor("the coding agent's session") { exp.agentLog.hasSuffix("sleeping\n") }
            }
            let pid = p.processIdentifier
            kill(pid, SIGKILL)
            p.waitUntilExit()
            // What it left (so that what follows shows a sweep, not a supervisor that tidied up).
            #expect(!enclosure.sandboxCgroups(ownedBy: pid).isEmpty, "\(point): no sandbox cgroup left by the kill")
            if point != "session" {
                #expect(!scratchEntries(scratch, ownedBy: pid).isEmpty && !mounted(under: scratch).filter { !liveScratch.contains(Self.scratchName($0, under: scratch)) }.isEmpty,
                        "\(point): no scratch left by the kill")
            }
            if point != "task run" {
                #expect(FileManager.default.fileExists(atPath: exp.root + "/.autoharness/run/broker/broker.sock"), "\(point): no socket left by the kill")
            }

            // The next start: any command that takes the experiment lock.
            try exp.setAgent(Agents.none)
            let next = try exp.run("benchmark", "--task-ids", train)
            #expect(next.status == 0, "\(point): \(next.stderr)")
            try waitFor("\(point): the killed supervisor's processes to end", seconds: 10) { hostProcesses(containing: marker).isEmpty }
            #expect(enclosure.sandboxCgroups(ownedBy: pid).isEmpty, "\(point): cgroups left: \(enclosure.sandboxCgroups(ownedBy: pid))")
            #expect(scratchEntries(scratch, ownedBy: pid).isEmpty, "\(point): scratch left: \(scratchEntries(scratch, ownedBy: pid))")
            let names = Set((try? FileManager.default.contentsOfDirectory(atPath: scratch)) ?? [])
            #expect(names == liveScratch, "\(point): under the scratch root: \(names.subtracting(liveScratch))")
            #expect(Set(mounted(under: scratch).map { Self.scratchName($0, under: scratch) }).isSubset(of: liveScratch))
            #expect(!(procText("/proc/self/mountinfo") ?? "").contains(exp.root), "\(point): a mount under the experiment")
            let run = (try? FileManager.default.contentsOfDirectory(atPath: exp.root + "/.autoharness/run")) ?? []
            #expect(!run.contains { $0.hasPrefix("broker.sock") }, "\(point): \(run)")
            #expect(!FileManager.default.fileExists(atPath: exp.root + "/.autoharness/run/broker/broker.sock"), "\(point): the socket is left")
            if point != "session" { #expect(next.stderr.contains("scratch director"), "\(point): \(next.stderr)") }
            if point != "task run" { #expect(next.stderr.contains("removed the broker socket"), "\(point): \(next.stderr)") }

            // The live supervisor and all it has are as they were.
            #expect(liveRun.isRunning, "\(point): the live supervisor is gone")
            #expect(scratchEntries(scratch, ownedBy: livePID) == liveScratch, "\(point)")
            #expect(Set(enclosure.sandboxCgroups(ownedBy: livePID)) == liveCgroups, "\(point)")
            #expect(Set(hostProcesses(containing: "sleep\u{0}" + liveMarker)) == liveTasks, "\(point)")
        }

        // Once the live one is killed too, its leftovers go at its next start.
        kill(livePID, SIGKILL)
        liveRun.waitUntilExit()
        try live.setAgent(Agents.none)
        #expect(try live.run("benchmark", "--task-ids", try live.split().train[0]).status == 0)
        try waitFor("the live supervisor's tasks to end", seconds: 10) { hostProcesses(containing: liveMarker).isEmpty }
        #expect((try? FileManager.default.contentsOfDirectory(atPath: scratch)) == [], "the scratch root is not empty")
        #expect(mounted(under: scratch).isEmpty && enclosure.sandboxCgroups(ownedBy: livePID).isEmpty)
    }

    @Test("a broker socket is removed at the next start when the supervisor its marker names is gone (or its pid reused), never while it runs")
    func brokerSocketByOwner() throws {
        try requireRoot()
        let exp = try Experiment()
        let run = exp.root + "/.autoharness/run"
        let socket = run + "/broker/broker.sock"
        try FileManager.default.createDirectory(atPath: run + "/broker", withIntermediateDirectories: true)
        func makeSocket() throws {
            let r = try runProcess("/usr/bin/python3", ["-c", "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])", socket])
            try #require(r.status == 0, "\(r.stderr)")
        }
        let sleeper = try LiveProcess()
        let alive = try #require(ProcessIdentity.of(sleeper.pid))
        let me = ProcessIdentity.current
        let reused = ProcessIdentity(pid: me.pid, startTime: me.startTime - 1, pidNamespace: me.pidNamespace)
        let train = try exp.split().train[0]

        // Its owner runs: left alone (it cannot happen under the experiment lock unless the
        // owner is in another pid namespace, and then it is not ours to judge).
        try makeSocket()
        #expect(FileManager.default.createFile(atPath: run + "/broker.sock." + alive.tag, contents: nil))
        #expect(try exp.run("benchmark", "--task-ids", train).status == 0)
        #expect(FileManager.default.fileExists(atPath: socket) && FileManager.default.fileExists(atPath: run + "/broker.sock." + alive.tag))

        // The owner's pid now names another process: removed, with the marker.
        unlink(run + "/broker.sock." + alive.tag)
        #expect(FileManager.default.createFile(atPath: run + "/broker.sock." + reused.tag, contents: nil))
        let r = try exp.run("benchmark", "--task-ids", train)
        #expect(r.stderr.contains("removed the broker socket \(socket) left by supervisor pid \(me.pid), which is gone"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: socket) && !FileManager.default.fileExists(atPath: run + "/broker.sock." + reused.tag))
        withExtendedLifetime(sleeper) {}
    }

    @Test("temporary files of atomic writes a killed supervisor left (views, agent.py, views-head, history, a snapshot) are removed by the next start; other files stay")
    func cutOffWritesRemoved() throws {
        try requireRoot()
        let exp = try Experiment()
        let snapshot = try #require(try FileManager.default.contentsOfDirectory(atPath: exp.root + "/.autoharness/snapshots").first)
        let history = exp.root + "/.autoharness/run/history"
        try FileManager.default.createDirectory(atPath: history, withIntermediateDirectories: true)
        // What scripts/chaos found after a kill mid-publish: `.NAME.tmp-PID-RANDOM`.
        let dead = try runProcess("/bin/sh", ["-c", "echo $$"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        let planted = ["workspace/.suite.json.tmp-\(dead)-1f2da191f6arx", "agent/.agent.py.tmp-\(dead)-k3", ".autoharness/.views-head.tmp-\(dead)-9z",
                       ".autoharness/run/history/.git-log.txt.tmp-\(dead)-q", ".autoharness/snapshots/\(snapshot)/.agent.py.tmp-\(dead)-0"]
        let kept = ["workspace/.notes.tmp", ".autoharness/.views-head.tmp-x-1"]
        for f in planted + kept { #expect(FileManager.default.createFile(atPath: exp.root + "/" + f, contents: Data("x".utf8))) }

        let r = try exp.run("benchmark", "--task-ids", try exp.split().train[0])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("removed 5 temporary files of writes cut off by a supervisor that is gone"), "\(r.stderr)")
        for f in planted { #expect(!FileManager.default.fileExists(atPath: exp.root + "/" + f), "\(f) is left") }
        for f in kept { #expect(FileManager.default.fileExists(atPath: exp.root + "/" + f), "\(f) was removed") }
        #expect(try FileManager.default.contentsOfDirectory(atPath: exp.root + "/.autoharness/snapshots/" + snapshot) == ["agent.py"])
        let v = try exp.run("status", "--verify")
        #expect(v.status == 0, "\(v.stdout)")
    }
}
