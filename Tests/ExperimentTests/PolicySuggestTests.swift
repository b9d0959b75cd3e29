import Foundation
import Testing
import TestSupport

/// `autoharness policy suggest --from-audit`: a recorded session's refusals turned into the
/// smallest policy extending the one it ran under, never what no policy may allow.
@Suite("policy suggest")
struct PolicySuggestTests {
    /// A tight policy beside the shipped ones: a proxy with one host, flock denied on purpose,
    /// small limits.
    static let tight = """
        extends: base
        description: "test: tight"
        seccomp:
          deny: [flock]
        network:
          mode: proxy
          allow: ["a.example:443"]
        limits:
          memory: 256M
          pids: 64
          timeout: 60

        """

    static func line(_ event: String, _ name: String, action: String, policy: String? = "tight", detail: String? = nil, count: Int? = nil) -> String {
        var o: [String: Any] = ["time": "2026-11-29T00:00:00.000Z", "sandbox": "sbx-1", "event": event, "name": name, "action": action]
        if let policy { o["policy"] = policy }
        if let detail { o["detail"] = detail }
        if let count { o["count"] = count }
        let data = try! JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])
        return String(decoding: data, as: UTF8.self)
    }

    @Test("every kind of record: a call outside the profile allowed (counting a folded repeat), a channel call quieted, hosts added to the proxy's list, limits doubled; hard-denied, withheld, argument-ruled, other-ABI, denied-on-purpose, gate-refused and integrity records listed as unclean with exit 1; the file loads, passes lint, and diff shows only what it adds")
    func everyKind() throws {
        let dir = try TempDir()
        _ = try dir.file("tight.yaml", Self.tight)
        let audit = try dir.file("audit.jsonl", [
            Self.line("syscall", "set_thread_area", action: "EPERM"),
            Self.line("repeated", "set_thread_area", action: "counted", detail: "syscall EPERM", count: 30),
            Self.line("syscall", "sched_setaffinity", action: "ENOSYS"),
            Self.line("syscall", "flock", action: "EPERM"),
            Self.line("syscall", "mincore", action: "ENOSYS"),
            Self.line("syscall", "ptrace", action: "EPERM"),
            Self.line("syscall", "ioctl", action: "EPERM"),
            Self.line("syscall", "i386:getpid", action: "kill"),
            Self.line("egress", "b.example:443", action: "denied", detail: "not on the allowlist"),
            Self.line("egress", "b.example:443", action: "denied", detail: "not on the allowlist"),
            Self.line("egress", "a.example:443", action: "allowed"),
            Self.line("egress", "api.example:443", action: "denied", detail: "inference refused: a request body carries the run's placeholder"),
            Self.line("memory_limit", "memory limit reached; the kernel killed a process", action: "kill"),
            Self.line("pids_limit", "pids limit reached; fork/clone failed", action: "EAGAIN"),
            Self.line("timeout", "timeout after 60.0s; killed the sandbox", action: "kill"),
            Self.line("reward_tampering", "/logs/verifier/reward.txt", action: "void"),
            Self.line("syscall", "process_mrelease", action: "EPERM", policy: "other"),
            // Names the sandbox chose (a CONNECT target, a file name) with line breaks: neither
            // may end a comment or a string and add a key of its own.
            Self.line("egress", "c.example:443\nfilesystem:\n  mounts:\n    - rw: /:/host", action: "denied", detail: "not on the allowlist"),
            Self.line("planted_link", "/app/x\nfilesystem:\n  mounts:\n    - rw: /:/host -> /tests", action: "flagged"),
        ].joined(separator: "\n") + "\n")
        let out = dir.file("suggested.yaml")
        let r = try autoharness(["policy", "suggest", "--from-audit", audit, "--policy-dir", dir.path, "-o", out, "tight"])
        #expect(r.status == 1, "\(r.stdout)\(r.stderr)")
        let text = try String(contentsOfFile: out, encoding: .utf8)
        #expect(text.contains("\nextends: \"tight\"\n"), "\(text)")
        #expect(text.contains("  allow:\n    - set_thread_area  # refused 31 times\n"), "\(text)")
        #expect(text.contains("  quiet:\n    - sched_setaffinity  # refused once; not allowed: pins a process to one CPU"), "\(text)")
        #expect(text.contains("network:\n  allow:\n    - \"a.example:443\"\n    - \"b.example:443\"  # CONNECT refused 2 times\n"), "\(text)")
        #expect(text.contains("  memory: 512M  # was 256M") && text.contains("  pids: 128  # was 64") && text.contains("  timeout: 2m  # was 1m"), "\(text)")
        #expect(!text.contains("process_mrelease") && !text.contains("api.example:443\""), "\(text)")
        for (what, why) in [("syscall flock", "denied on purpose by seccomp.deny at \(dir.path)/tight.yaml:4"),
                            ("syscall mincore", "withheld by the default profile"), ("syscall ptrace", "hard-denied"),
                            ("syscall ioctl", "refused by an argument rule"), ("syscall i386:getpid", "another ABI"),
                            ("egress api.example:443: inference refused", "no allowlist changes it"),
                            ("reward_tampering /logs/verifier/reward.txt", "an integrity record")] {
            #expect(r.stderr.contains("not clean by any policy: \(what)") && r.stderr.contains(why), "\(what): \(r.stderr)")
        }
        #expect(r.stderr.contains("left out: 1 record(s) of sandboxes under other"), "\(r.stderr)")
        #expect(text.contains("#   egress c.example:443\\u{a}filesystem:") && text.contains("not a host:port a policy takes")
                && text.contains("#   planted_link /app/x\\u{a}filesystem:") && !text.contains("\nfilesystem:"), "\(text)")

        // What it suggests loads, is clean by lint, and adds exactly what it says.
        let lint = try autoharness(["policy", "lint", "--policy-dir", dir.path, out])
        #expect(lint.status == 0, "\(lint.stdout)\(lint.stderr)")
        let diff = try autoharness(["policy", "diff", "--policy-dir", dir.path, "tight", out])
        let plus = diff.stdout.split(separator: "\n").filter { $0.hasPrefix("+ ") }.map(String.init)
        #expect(plus == ["+ syscall set_thread_area", "+ network host b.example:443", "+ memory: A 256M, B 512M", "+ pids: A 64, B 128", "+ timeout: A 60, B 120"], "\(diff.stdout)")
        #expect(!diff.stdout.contains("\n- "), "\(diff.stdout)")

        // An existing output file is never overwritten.
        let again = try autoharness(["policy", "suggest", "--from-audit", audit, "--policy-dir", dir.path, "-o", out, "tight"])
        #expect(again.status != 0 && again.stderr.contains("--output \(out): File exists (EEXIST)"), "\(again.stderr)")
    }

    @Test("--quiet refuses quietly what it would allow; a role whose allowlist the experiment fills gets the setting to change, not a network section")
    func quietAndRole() throws {
        let dir = try TempDir()
        _ = try dir.file("tight.yaml", Self.tight)
        let audit = try dir.file("audit.jsonl", [
            Self.line("syscall", "set_thread_area", action: "EPERM"),
            Self.line("egress", "b.example:443", action: "denied", detail: "not on the allowlist"),
        ].joined(separator: "\n"))
        let r = try autoharness(["policy", "suggest", "--from-audit", audit, "--policy-dir", dir.path, "--quiet", "--role", "coding-agent", "tight"])
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        #expect(r.stdout.contains("  quiet:\n    - set_thread_area  # refused once; not allowed: --quiet") && !r.stdout.contains("  allow:"), "\(r.stdout)")
        #expect(!r.stdout.contains("\nnetwork:") && r.stdout.contains("experiment_config.yaml's sandbox.network.allow"), "\(r.stdout)")
        #expect(r.stderr.contains("add to experiment_config.yaml's sandbox.network.allow: b.example:443"), "\(r.stderr)")
    }

    @Test("what a hostile session can put in its audit buys nothing: internal addresses, names libseccomp lacks, folded refusals without a reason, prctl's option rule and limits at their largest are unclean; a count out of range or an overlong line fails at its line; an unknown --sandbox fails")
    func hostileRecords() throws {
        let dir = try TempDir()
        _ = try dir.file("tight.yaml", Self.tight)
        _ = try dir.file("big.yaml", "extends: tight\nlimits:\n  memory: 1024T\n  pids: 4194304\n  timeout: 168h\n")
        var lines = [
            Self.line("egress", "127.0.0.1:22", action: "denied", detail: "not on the allowlist"),
            Self.line("egress", "169.254.169.254:80", action: "denied", detail: "not on the allowlist"),
            Self.line("egress", "[::1]:22", action: "denied", detail: "not on the allowlist"),
            Self.line("egress", "-x.com:443", action: "denied", detail: "not on the allowlist"),
            Self.line("repeated", "evil.example:443", action: "counted", detail: "egress denied", count: 5),
            Self.line("syscall", "syscall_460", action: "ENOSYS"),
            Self.line("syscall", "prctl", action: "EPERM"),
        ]
        let audit = try dir.file("audit.jsonl", lines.joined(separator: "\n"))
        let r = try autoharness(["policy", "suggest", "--from-audit", audit, "--policy-dir", dir.path, "tight"])
        #expect(r.status == 1 && !r.stdout.contains("\nnetwork:") && !r.stdout.contains("  allow:"), "\(r.stdout)\(r.stderr)")
        for (what, why) in [("egress 127.0.0.1:22", "an address of this host or an internal network"),
                            ("egress 169.254.169.254:80", "an address of this host or an internal network"),
                            ("egress [::1]:22", "an address of this host or an internal network"),
                            ("egress -x.com:443", "not a host:port a policy takes"),
                            ("egress evil.example:443 (5)", "folded into a count"),
                            ("syscall syscall_460", "libseccomp has no name for"),
                            ("syscall prctl", "refused by an argument rule")] {
            #expect(r.stderr.contains("not clean by any policy: \(what)") && r.stderr.contains(why), "\(what): \(r.stderr)")
        }
        lines = [Self.line("memory_limit", "m", action: "kill", policy: "big"), Self.line("pids_limit", "p", action: "EAGAIN", policy: "big"),
                 Self.line("timeout", "t", action: "kill", policy: "big")]
        let limits = try dir.file("limits.jsonl", lines.joined(separator: "\n"))
        let l = try autoharness(["policy", "suggest", "--from-audit", limits, "--policy-dir", dir.path])
        #expect(l.status == 1 && !l.stdout.contains("limits:") && l.stderr.contains("limits.pids is at the largest value a policy takes"), "\(l.stdout)\(l.stderr)")

        let count = try dir.file("count.jsonl", Self.line("syscall", "set_thread_area", action: "EPERM", count: 0))
        let c = try autoharness(["policy", "suggest", "--from-audit", count, "--policy-dir", dir.path])
        #expect(c.status != 0 && c.stderr.contains("\(count):1: count 0 is not between 1 and"), "\(c.stderr)")
        let long = try dir.file("long.jsonl", Self.line("syscall", String(repeating: "a", count: 70_000), action: "EPERM"))
        let g = try autoharness(["policy", "suggest", "--from-audit", long, "--policy-dir", dir.path])
        #expect(g.status != 0 && g.stderr.contains("\(long):1: ") && g.stderr.contains("over the 65536-byte line"), "\(g.stderr)")
        let s = try autoharness(["policy", "suggest", "--from-audit", audit, "--policy-dir", dir.path, "--sandbox", "sbx-none", "tight"])
        #expect(s.status != 0 && s.stderr.contains("--sandbox sbx-none: no record of it"), "\(s.stderr)")
    }

    @Test("a policy given as a relative path: the audit's spelling matches it by file, and the suggestion extends it by absolute path, so it loads wherever it is written")
    func relativePolicy() throws {
        let dir = try TempDir()
        try FileManager.default.createDirectory(atPath: dir.path + "/pol", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: dir.path + "/out", withIntermediateDirectories: true)
        _ = try dir.file("pol/tight.yaml", Self.tight)
        let audit = try dir.file("audit.jsonl", Self.line("syscall", "set_thread_area", action: "EPERM", policy: "pol/tight.yaml"))
        let r = try runProcess("/bin/sh", ["-c", "cd \(dir.path) && \(Built.autoharness) policy suggest --from-audit audit.jsonl -o out/s.yaml ./pol/tight.yaml"])
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        let text = try String(contentsOfFile: dir.path + "/out/s.yaml", encoding: .utf8)
        #expect(text.contains("extends: \"\(dir.path)/pol/tight.yaml\"") && text.contains("    - set_thread_area"), "\(text)")
        let check = try autoharness(["policy", "check", dir.path + "/out/s.yaml"])
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
    }

    @Test("an audit line that is not a record fails at its line; an audit naming several policies needs one named; one naming none needs one given")
    func inputs() throws {
        let dir = try TempDir()
        let bad = try dir.file("bad.jsonl", Self.line("syscall", "x", action: "EPERM") + "\n{\"sandbox\": 1}\n")
        let r = try autoharness(["policy", "suggest", "--from-audit", bad, "base"])
        #expect(r.status != 0 && r.stderr.contains("\(bad):2: not an audit record"), "\(r.stderr)")
        let two = try dir.file("two.jsonl", Self.line("syscall", "x", action: "EPERM", policy: "a") + "\n" + Self.line("syscall", "x", action: "EPERM", policy: "b") + "\n")
        let t = try autoharness(["policy", "suggest", "--from-audit", two])
        #expect(t.status != 0 && t.stderr.contains("has records of a, b: give the policy"), "\(t.stderr)")
        let none = try dir.file("none.jsonl", Self.line("syscall", "x", action: "EPERM", policy: nil) + "\n")
        let n = try autoharness(["policy", "suggest", "--from-audit", none])
        #expect(n.status != 0 && n.stderr.contains("names no policy"), "\(n.stderr)")
    }

    @Test("a real sandbox's audit names its policy; the suggestion for a session that pins itself to a CPU, applied, runs the same command with nothing recorded")
    func realSandbox() throws {
        try requireRoot()
        let dir = try TempDir()
        _ = try dir.file("tight.yaml", Self.tight)
        let command = ["--", "/bin/sh", "-c", "taskset -c 0 true; echo ran"]
        let first = dir.file("first.jsonl")
        let r1 = try autoharness(["sandbox", "exec", "--policy-dir", dir.path, "--policy", "tight", "--audit", first] + command)
        #expect(r1.stdout.contains("ran"), "\(r1.stdout)\(r1.stderr)")
        let recorded = try String(contentsOfFile: first, encoding: .utf8)
        #expect(recorded.contains("\"name\":\"sched_setaffinity\"") && recorded.contains("\"policy\":\"tight\""), "\(recorded)")

        // No policy given: the audit names it.
        let out = dir.file("pinned.yaml")
        let s = try autoharness(["policy", "suggest", "--from-audit", first, "--policy-dir", dir.path, "-o", out])
        #expect(s.status == 0, "\(s.stdout)\(s.stderr)")
        let second = dir.file("second.jsonl")
        let r2 = try autoharness(["sandbox", "exec", "--policy-dir", dir.path, "--policy", "pinned", "--audit", second] + command)
        #expect(r2.stdout.contains("ran"), "\(r2.stdout)\(r2.stderr)")
        let after = (try? String(contentsOfFile: second, encoding: .utf8)) ?? ""
        #expect(after.isEmpty, "recorded under the suggested policy: \(after)")
    }
}

extension RealAgentTests {
    /// One session without progress, after which `max_restarts: 0` ends the run: exit 3.
    func runOnce(_ exp: Experiment) throws {
        var environment = ProcessInfo.processInfo.environment
        environment["ANTHROPIC_API_KEY"] = "sk-ant-test"
        let r = try autoharness(["run", "--max-hours", "0.25", "-C", exp.root], environment: environment)
        #expect(r.status == 3 && r.stderr.contains("max_restarts"), "\(r.stdout) \(r.stderr) \(String(exp.agentLog.suffix(3000)))")
    }

    @Test("policy suggest: a benign Claude Code session that pins a command to one CPU records a violation; the suggestion, applied as the experiment's coding-agent policy, passes lint and the next session records none")
    func claudeSuggested() throws {
        try requireRoot()
        let turns: [[[String: Any]]] = [
            // `autoharness status`: a session that asked nothing of the supervisor and ended
            // quickly would count as a crash.
            [["tool": "Bash", "input": ["command": "taskset -c 0 python3 -c 'print(6*7)'; echo pin-exit-$?; autoharness status >/dev/null", "description": "pin the benchmark"]]],
            [["text": "Stopping."]],
        ]
        let values = ["budget": "0", "max_restarts": "0"]
        let model1 = try FakeModel(turns: turns)
        let exp1 = try claudeExperiment(model1, values: values)
        try runOnce(exp1)
        #expect(model1.toolResults().contains { $0.contains("pin-exit-") }, "\(model1.toolResults())")
        let violations = try exp1.rows("violation")
        #expect(violations.contains { ($0["detail"] as? String)?.contains("sched_setaffinity") == true }, "\(violations)")

        let dir = try TempDir(mode: 0o755)
        let out = dir.file("pinned.yaml")
        let s = try autoharness(["policy", "suggest", "--from-audit", exp1.root + "/.autoharness/run/audit.jsonl",
                                 "-C", exp1.root, "--role", "coding-agent", "-o", out])
        #expect(s.status == 0, "\(s.stdout)\(s.stderr)")
        let text = try String(contentsOfFile: out, encoding: .utf8)
        #expect(text.contains("\nextends: \"coding-agent\"\n") && text.contains("    - sched_setaffinity") && !text.contains("  allow:"), "\(text)")
        let lint = try autoharness(["policy", "lint", "--policy-dir", dir.path, "--role", "coding-agent", out])
        #expect(lint.status == 0, "\(lint.stdout)\(lint.stderr)")

        let model2 = try FakeModel(turns: turns)
        let exp2 = try claudeExperiment(model2, values: values)
        let config = exp2.root + "/experiment_config.yaml"
        var yaml = try String(contentsOfFile: config, encoding: .utf8)
        try #require(yaml.contains("  coding_agent_policy: coding-agent"), "\(yaml)")
        yaml = yaml.replacingOccurrences(of: "  coding_agent_policy: coding-agent", with: "  coding_agent_policy: pinned\n  policy_dir: \(dir.path)")
        try yaml.write(toFile: config, atomically: true, encoding: .utf8)
        try runOnce(exp2)
        #expect(model2.toolResults().contains { $0.contains("pin-exit-") }, "\(model2.toolResults())")
        let after = try exp2.rows("violation")
        #expect(after.isEmpty, "\(after)")
        let audit = (try? String(contentsOfFile: exp2.root + "/.autoharness/run/audit.jsonl", encoding: .utf8)) ?? ""
        #expect(!audit.split(separator: "\n").contains { !$0.contains("\"action\":\"allowed\"") }, "\(audit)")
    }
}
