import Foundation
import Testing

/// Regression tests for the findings of the adversarial review of the sandbox core. Each one
/// replays the attack that worked before its fix.
@Suite("Sandbox hardening: links in bind sources, audit floods, stacked filters, verifier links, argv")
struct HardeningTests {
    @Test("a bind source through a symlink planted by an earlier sandbox is refused")
    func plantedSymlinkSourceRefused() throws {
        try requireRoot()
        let shared = try TempDir(mode: 0o755)
        chown(shared.path, 65534, 65534)
        let secretDir = try TempDir(mode: 0o700)
        _ = try secretDir.file("secret.txt", "ROOT-ONLY\n")
        // Sandbox 1 plants the link in a directory it can write...
        let plant = try autoharness(["sandbox", "exec", "--rw", "\(shared.path):/app", "--", "/bin/ln", "-s", secretDir.path + "/secret.txt", "/app/notes.md"])
        #expect(plant.status == 0, "\(plant.stderr)")
        // ...sandbox 2 is granted that "notes" file and must not get the root-only target.
        let r = try autoharness(["sandbox", "exec", "--ro", "\(shared.path)/notes.md:/work/notes.md", "--", "/bin/cat", "/work/notes.md"])
        #expect(r.status == 125)
        #expect(!r.stdout.contains("ROOT-ONLY"))
        #expect(r.stderr.contains("refusing to follow the symbolic link"), "\(r.stderr)")
    }

    @Test("command-line binds obey the policies' source rules: no host root, no host /proc, not even through a link")
    func commandLineSourcesChecked() throws {
        try requireRoot()
        for source in ["/:/host", "/proc:/hostproc", "/proc/1/root:/x"] {
            let r = try autoharness(["sandbox", "exec", "--ro", source, "--", "/bin/true"])
            #expect(r.status == 125, "\(source): \(r.stderr)")
            #expect(r.stderr.contains("is not allowed"), "\(source): \(r.stderr)")
        }
        // A root-owned link to / passes the symlink rule but not the resolved-source check.
        let dir = try TempDir()
        try FileManager.default.createSymbolicLink(atPath: dir.path + "/root-link", withDestinationPath: "/")
        let r = try autoharness(["sandbox", "exec", "--ro", "\(dir.path)/root-link:/x", "--", "/bin/true"])
        #expect(r.status == 125)
        #expect(r.stderr.contains("binding the host root / is not allowed"), "\(r.stderr)")
    }

    @Test("root-owned system symlinks in bind sources are still followed (/etc/localtime)")
    func systemSymlinkFollowed() throws {
        try requireRoot()
        let r = try autoharness(["sandbox", "exec", "--", "/usr/bin/head", "-c", "4", "/etc/localtime"])
        #expect(r.status == 0)
        #expect(r.stdout == "TZif")
    }

    @Test("a flood of refused calls is counted in full but logged boundedly")
    func auditFloodBounded() throws {
        try requireRoot()
        let dir = try TempDir()
        let audit = dir.path + "/a.jsonl"
        let r = try probe("flood", "20000", "300", options: ["--audit", audit])
        #expect(r.succeeded)
        let events = try auditEvents(audit)
        // 200 distinct names (then "other") × 20 individual lines, plus one `repeated` line each
        #expect(events.count <= 201 * 21)
        let total = events.reduce(0) { $0 + (($1["count"] as? Int) ?? 1) }
        #expect(total == 20000)
        #expect(r.stderr.contains("20000 audit events"))
        #expect(r.stderr.count < 1000, "summary line is not bounded: \(r.stderr.count) bytes")
    }

    @Test("task sandboxes cannot stack their own seccomp filter to hide calls from the audit")
    func stackedFilterRefused() throws {
        try requireRoot()
        let dir = try TempDir()
        for (action, audited) in [("stack-filter", "seccomp"), ("prctl-seccomp", "prctl")] {
            let audit = dir.path + "/\(action).jsonl"
            let r = try probe(action, options: ["--var", "workdir=\(dir.path)", "--var", "agent_dir=\(dir.path)", "--audit", audit],
                              policy: "benchmark-task")
            #expect(r.errnoName == "EPERM", "\(action): \(r.stdout) \(r.stderr)")
            #expect(try auditEvents(audit).contains { ($0["name"] as? String) == audited })
        }
    }

    @Test("a no_symlinks bind (the scorer's view of a runner's output) does not follow a symlink left there to the expected answer (gate review F5)")
    func noSymlinksBindIgnoresPlantedSymlinks() throws {
        try requireRoot()
        let app = try TempDir(mode: 0o777)
        let tests = try TempDir()
        let policy = try TempDir()
        _ = try tests.file("expected.txt", "secret-answer\n")
        // The verifier's /app now follows links (a venv a test makes there has linked
        // interpreters): the supervisor removes those agent.py left that lead out of /app
        // before it starts (PlantedLinksTests). The scorer's view of a runner's output keeps
        // the mount option, tested here.
        _ = try policy.file("view.yaml", """
            extends: base
            description: "a runner's output read through a no_symlinks bind (test)"
            filesystem:
              mounts:
                - rw: "\(app.path):/app"
                  no_symlinks: true
                - ro: "\(tests.path):/tests"
            """)
        try FileManager.default.createSymbolicLink(atPath: app.path + "/out.txt", withDestinationPath: "/tests/expected.txt")
        let compare = ["/bin/sh", "-c", "cmp -s /app/out.txt /tests/expected.txt && echo MATCH || echo NO-MATCH"]
        let viewed = try autoharness(["sandbox", "exec", "--policy", policy.path + "/view.yaml", "--"] + compare)
        #expect(viewed.stdout == "NO-MATCH\n", "\(viewed.stdout) \(viewed.stderr)")
        // Control: the same comparison through an ordinary bind is fooled by the link.
        let plain = try autoharness(["sandbox", "exec", "--rw", "\(app.path):/app", "--ro", "\(tests.path):/tests", "--"] + compare)
        #expect(plain.stdout == "MATCH\n")
    }

    @Test("init's command line does not reveal the supervisor's arguments")
    func supervisorArgumentsWiped() throws {
        try requireRoot()
        let r = try autoharness(["sandbox", "exec", "--env", "X=SECRET-ARG-123", "--", "/bin/cat", "/proc/1/cmdline", "/proc/1/comm"])
        #expect(r.status == 0)
        #expect(!r.stdout.contains("SECRET-ARG-123"))
        #expect(!r.stdout.contains("autoharness"))
        #expect(r.stdout.contains("sandbox-init"))
    }
}
