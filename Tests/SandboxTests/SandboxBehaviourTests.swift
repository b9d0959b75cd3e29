import Foundation
import Sandbox
import SandboxPolicy
import Testing

@Suite("What the sandbox allows")
struct AllowedBehaviourTests {
    @Test("python3 runs")
    func pythonRuns() throws {
        try requireRoot()
        let r = try autoharness(["sandbox", "exec", "--", "python3", "-c", "import json, os; print(json.dumps(6*7), os.getuid())"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "42 1000\n")
    }

    @Test("writes to a read-write bind persist on the host, owned by the mapped host uid")
    func readWriteBindPersists() throws {
        try requireRoot()
        let dir = try TempDir(mode: 0o777)
        let r = try autoharness(["sandbox", "exec", "--rw", "\(dir.path):/out", "--", "/bin/sh", "-c", "echo persisted > /out/result.txt"])
        #expect(r.status == 0, "\(r.stderr)")
        let path = dir.path + "/result.txt"
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "persisted\n")
        let attrs = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attrs[.ownerAccountID] as? NSNumber)?.intValue == 65534)
    }

    @Test("a mount inside a read-only bind whose mount point the source lacks is refused before launch, naming both entries and the path to create; with the path created it works")
    func mountPointInsideReadOnlyBind() throws {
        try requireRoot()
        let view = try TempDir(), notes = try TempDir(mode: 0o777)
        let file = try notes.file("learnings.md", "")
        chmod(file, 0o666)
        let args = ["sandbox", "exec", "--ro", "\(view.path):/data", "--rw", "\(file):/data/learnings.md", "--",
                    "/bin/sh", "-c", "echo noted >> /data/learnings.md"]
        let refused = try autoharness(args)
        #expect(refused.status == 125, "\(refused.stderr)")
        #expect(refused.stderr.contains("--rw: rw \(file) -> /data/learnings.md cannot be mounted: /data/learnings.md lies inside the read-only bind ro \(view.path) -> /data (--ro)"), "\(refused.stderr)")
        #expect(refused.stderr.contains("Create \(view.path)/learnings.md (an empty file) first"), "\(refused.stderr)")
        _ = try view.file("learnings.md", "")
        let r = try autoharness(args)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(try String(contentsOfFile: file, encoding: .utf8) == "noted\n")
    }

    @Test("stdout, stderr and the exit code pass through")
    func stdioAndExitCode() throws {
        try requireRoot()
        let r = try autoharness(["sandbox", "exec", "--", "/bin/sh", "-c", "echo out; echo err >&2; exit 3"])
        #expect(r.status == 3)
        #expect(r.stdout == "out\n")
        #expect(r.stderr == "err\n")
    }

    @Test("stdin passes through")
    func stdinPassesThrough() throws {
        try requireRoot()
        let dir = try TempDir()
        let input = try dir.file("in.txt", "from stdin\n")
        let r = try autoharness(["sandbox", "exec", "--", "/bin/cat"], stdinPath: input)
        #expect(r.stdout == "from stdin\n")
    }

    @Test("death by signal N exits 128+N")
    func signalExit() throws {
        try requireRoot()
        #expect(try probe("raise", "9").status == 137)
        #expect(try probe("raise", "15").status == 143)
    }

    @Test("command not found exits 127, not executable exits 126")
    func execFailures() throws {
        try requireRoot()
        let missing = try autoharness(["sandbox", "exec", "--", "no-such-command-xyz"])
        #expect(missing.status == 127)
        #expect(missing.stderr.contains("No such file or directory"))
        let notExec = try autoharness(["sandbox", "exec", "--", "/etc/ld.so.cache"])
        #expect(notExec.status == 126)
    }

    @Test("set-up failures exit 125 and name the stage")
    func setupFailure() throws {
        try requireRoot()
        let r = try autoharness(["sandbox", "exec", "--ro", "/no/such/source", "--", "/bin/true"])
        #expect(r.status == 125)
        #expect(r.stderr.contains("bind source /no/such/source: No such file or directory"))
        // A mount point missing in a read-only bind is refused before launch.
        let ro = try autoharness(["sandbox", "exec", "--tmpfs", "/usr/no-such-dir", "--", "/bin/true"])
        #expect(ro.status == 125)
        #expect(ro.stderr.contains("lies inside the read-only bind ro /usr -> /usr"), "\(ro.stderr)")
        // One of the wrong type fails at the mount stage, which names the entry.
        let file = try autoharness(["sandbox", "exec", "--tmpfs", "/usr/bin/env", "--", "/bin/true"])
        #expect(file.status == 125)
        #expect(file.stderr.contains("sandbox: mount tmpfs /usr/bin/env"), "\(file.stderr)")
        #expect(file.stderr.contains("Not a directory"), "\(file.stderr)")
    }

    @Test("the payload is pid 2 under its own init, with its own hostname")
    func namespaces() throws {
        try requireRoot()
        let r = try autoharness(["sandbox", "exec", "--", "/bin/sh", "-c", "echo $$; cat /proc/sys/kernel/hostname; ls /proc | grep -cE '^[0-9]+$'"])
        let lines = r.stdout.split(separator: "\n")
        #expect(lines.first == "2")
        #expect(lines.dropFirst().first == "sandbox")
        // init, the shell, and grep/ls: a handful, never the host's hundreds
        #expect((Int(lines.last ?? "") ?? 999) < 8)
    }

    @Test("SIGTERM to the supervisor is forwarded to the payload")
    func signalForwarded() throws {
        try requireRoot()
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Built.autoharness)
        p.arguments = ["sandbox", "exec", "--", "/bin/sleep", "30"]
        try p.run()
        usleep(500_000)
        p.terminate()  // SIGTERM
        p.waitUntilExit()
        #expect(p.terminationStatus == 143)
    }

    @Test("sandbox exec reads --name=VALUE and --name VALUE alike, and a form only ArgumentParser knows still works")
    func optionSpellings() throws {
        try requireRoot()
        let script = "pwd; echo \"$GREETING\""
        // Plain spellings: read by the launcher's own argument reader.
        let eq = try autoharness(["sandbox", "exec", "--chdir=/tmp", "--env=GREETING=hi", "--", "/bin/sh", "-c", script])
        let spaced = try autoharness(["sandbox", "exec", "--chdir", "/tmp", "--env", "GREETING=hi", "--", "/bin/sh", "-c", script])
        // Without `--`: the command starts at the first word that is not an option.
        let bare = try autoharness(["sandbox", "exec", "--chdir", "/tmp", "--env", "GREETING=hi", "/bin/sh", "-c", script])
        for r in [eq, spaced, bare] {
            #expect(r.status == 0 && r.stdout == "/tmp\nhi\n", "\(r.status) \(r.stdout) \(r.stderr)")
        }
        let flags = try autoharness(["sandbox", "exec", "-v", "--env", "GREETING=hi", "--timeout", "30", "--", "/bin/sh", "-c", script])
        #expect(flags.status == 0 && flags.stdout == "/\nhi\n" && flags.stderr.contains("via cgroup v"), "\(flags.stderr)")
        // A repeated single-value option is left to ArgumentParser (the last one counts)...
        let repeated = try autoharness(["sandbox", "exec", "--chdir", "/usr", "--chdir", "/tmp", "--", "/bin/pwd"])
        #expect(repeated.status == 0 && repeated.stdout == "/tmp\n", "\(repeated.status) \(repeated.stderr)")
        // ...and so is a value that looks like an option, which it refuses (125: sandbox exec's own failure).
        let negative = try autoharness(["sandbox", "exec", "--timeout", "-1", "--", "/bin/true"])
        #expect(negative.status == 125, "\(negative.status) \(negative.stderr)")
    }

    @Test("debug output says which limits are enforced by what")
    func enforcementLogged() throws {
        try requireRoot()
        let r = try autoharness(["sandbox", "exec", "-v", "--", "/bin/true"])
        #expect(r.status == 0)
        #expect(r.stderr.contains("memory=2G via cgroup v"))
        #expect(r.stderr.contains("pids=512 via cgroup v"))
        #expect(r.stderr.contains("nofile=1024 via rlimit"))
    }

    @Test("a limit no controller can enforce fails closed unless explicitly allowed")
    func unenforceableLimitFailsClosed() throws {
        try requireRoot()
        var limits = Limits()
        limits.memory = 64 << 20
        let policy = Policy(name: "t", mounts: minimalMounts, limits: limits)
        let plan = try PlanCompiler.compile(policy: policy, command: ["/usr/bin/true"], hostEnvironment: [:])
        var options = RunOptions()
        options.cgroupHost = CgroupHost(v1: [:], v2: nil)  // a host with no usable controllers
        #expect(throws: SandboxError.self) { try SandboxRunner.run(plan, options: options) }
        do {
            _ = try SandboxRunner.run(plan, options: options)
        } catch {
            #expect(error.code == .cgroup)
            #expect(error.message.contains("limits.memory cannot be enforced"))
        }
        options.allowUnenforcedLimits = true
        let r = try SandboxRunner.run(plan, options: options)
        #expect(r.exitCode == 0)
        #expect(r.enforcement.contains { $0.limit == "memory" && $0.mechanism.hasPrefix("NOT ENFORCED") })
    }
}

@Suite("Policy CLI")
struct PolicyCLITests {
    @Test("policy check reports file:line errors and exits 1")
    func checkReportsLines() throws {
        let dir = try TempDir()
        let bad = try dir.file("bad.yaml", "extends: base\nlimits:\n  memroy: 1G\nnetwork:\n  mode: internet\n")
        let r = try autoharness(["policy", "check", bad])
        #expect(r.status == 1)
        #expect(r.stderr.contains("\(bad):3:"), "\(r.stderr)")
        #expect(r.stderr.contains("\(bad):5:"), "\(r.stderr)")
    }

    @Test("policy check accepts the shipped policies")
    func checkShipped() throws {
        let r = try autoharness(["policy", "check", "base", "benchmark-task", "verifier", "coding-agent"])
        #expect(r.status == 0, "\(r.stderr)")
    }

    @Test("policy show prints the mount table, allowlist and limit enforcement")
    func show() throws {
        let r = try autoharness(["policy", "show", "benchmark-task", "--json"])
        #expect(r.status == 0, "\(r.stderr)")
        let obj = try #require(JSONSerialization.jsonObject(with: Data(r.stdout.utf8)) as? [String: Any])
        let seccomp = try #require(obj["seccomp"] as? [String: Any])
        #expect((seccomp["allowed"] as? [String])?.contains("read") == true)
        #expect((seccomp["denied_eperm"] as? [String])?.contains("ptrace") == true)
        let mounts = try #require(obj["mounts"] as? [[String: Any]])
        #expect(mounts.contains { ($0["destination"] as? String) == "/app" })
    }
}

/// Plans a sandbox against `source`, then replaces `source` with a different directory before
/// launching: the monitor must notice the identity change.
enum SwapHarness {
    static func runWithSwap(source: String) throws -> (exitCode: Int32, message: String) {
        let policy = Policy(name: "swap", mounts: minimalMounts + [
            MountSpec(kind: .readOnly(source: source), destination: "/data"),
        ], limits: Limits())
        let plan = try PlanCompiler.compile(policy: policy, command: ["/usr/bin/true"], hostEnvironment: [:])
        try FileManager.default.moveItem(atPath: source, toPath: source + ".moved")
        try FileManager.default.createDirectory(atPath: source, withIntermediateDirectories: false)
        let r = try SandboxRunner.run(plan, options: RunOptions())
        if case .setupFailed(let m, _) = r.termination { return (r.exitCode, m) }
        return (r.exitCode, "\(r.termination)")
    }
}

/// /usr plus the merged-/usr symlinks: enough for /usr/bin/true to run.
let minimalMounts: [MountSpec] = [MountSpec(kind: .readOnly(source: "/usr"), destination: "/usr")]
    + ["/bin", "/lib", "/lib64"].map { MountSpec(kind: .readOnly(source: $0), destination: $0, optional: true, keepSymlink: true) }
