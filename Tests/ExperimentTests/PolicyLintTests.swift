import Foundation
import Testing
import TestSupport

/// `autoharness policy lint`: an admin's policy judged before any sandbox runs it.
@Suite("policy lint")
struct PolicyLintTests {
    @Test("the shipped policies pass, each for its role")
    func shippedPass() throws {
        for (policy, role) in [("base", nil), ("benchmark-task", "task"), ("verifier", "verifier"), ("benchmark-runner", "runner"),
                               ("benchmark-scorer", "scorer"), ("triage", "triage"), ("coding-agent", "coding-agent")] as [(String, String?)] {
            let r = try autoharness(["policy", "lint", policy] + (role.map { ["--role", $0] } ?? []))
            #expect(r.status == 0 && r.stdout.contains("\(policy): ok"), "\(policy): \(r.stdout)\(r.stderr)")
        }
    }

    @Test("a policy that reopens what it extends, mounts a host secret or a writable host path, allows a page-cache oracle or clone3, lowers Landlock or lifts a limit fails, each finding at its line; --role task adds no network and a timeout")
    func findings() throws {
        let dir = try TempDir()
        try FileManager.default.createDirectory(atPath: dir.path + "/shared", withIntermediateDirectories: true)
        let file = try dir.file("bad.yaml", """
            extends: benchmark-task
            filesystem:
              landlock: off
              mounts:
                - rw: \(dir.path)/shared:/agent
                - ro: /etc:/hostetc
                - ro: /var/run:/hostrun
            seccomp:
              allow: [mincore, clone3, seccomp, sched_setaffinity]
            network:
              mode: proxy
            limits:
              pids: none
              timeout: none

            """)
        let r = try autoharness(["policy", "lint", "--role", "task", file])
        #expect(r.status == 1, "\(r.stdout)\(r.stderr)")
        for (line, text) in [(3, "filesystem.landlock off lowers the auto of a policy it extends"),
                             (5, "rw /agent makes writable what a policy it extends mounts ro"),
                             (5, "rw \(dir.path)/shared: a read-write bind of a host path"),
                             (6, "ro /etc contains /etc/shadow"),
                             // By the resolved path: /var/run is a link to /run on Debian.
                             (7, "ro /var/run is /run"),
                             (9, "seccomp.allow re-allows seccomp, which a policy it extends denies"),
                             (9, "seccomp.allow mincore: tells or changes which pages are in the page cache"),
                             (9, "seccomp.allow clone3: takes its flags in memory the filter cannot read"),
                             (9, "seccomp.allow sched_setaffinity: pins a process to one CPU"),
                             (11, "network.mode proxy: a task sandbox has no network"),
                             (13, "limits.pids: none lifts the limit a policy it extends sets"),
                             (14, "limits.timeout: none")] {
            #expect(r.stdout.contains("\(file):\(line): \(text)"), "line \(line): \(text)\n\(r.stdout)")
        }
        #expect(r.stdout.contains("\(file): 12 finding(s)"), "\(r.stdout)")
        // Without --role the role's rules are not applied.
        let plain = try autoharness(["policy", "lint", file])
        #expect(plain.status == 1 && !plain.stdout.contains("network.mode proxy") && plain.stdout.contains("\(file): 10 finding(s)"), "\(plain.stdout)")
        // What policy check refuses, lint refuses too.
        let ptrace = try dir.file("ptrace.yaml", "extends: base\nseccomp:\n  allow: [ptrace]\n")
        let p = try autoharness(["policy", "lint", ptrace])
        #expect(p.status == 1 && p.stderr.contains("'ptrace' is always denied"), "\(p.stdout)\(p.stderr)")
    }

    @Test("-C EXP: a bind that reaches the experiment or its dataset fails; one beside them passes")
    func experimentProtected() throws {
        let exp = try Experiment(prepare: false)
        let dir = try TempDir()
        let dataset = try dir.file("dataset.yaml", "extends: base\nfilesystem:\n  mounts:\n    - ro: \(Experiment.fixture):/data\n")
        var r = try autoharness(["policy", "lint", "-C", exp.root, dataset])
        #expect(r.status == 1 && r.stdout.contains("\(dataset):4: ro /data: \(Experiment.fixture) contains the benchmark's tasks"), "\(r.stdout)\(r.stderr)")
        let parent = (exp.root as NSString).deletingLastPathComponent
        let above = try dir.file("above.yaml", "extends: base\nfilesystem:\n  mounts:\n    - ro: \(parent):/data\n")
        r = try autoharness(["policy", "lint", "-C", exp.root, above])
        #expect(r.status == 1 && r.stdout.contains("\(above):4: ro /data: \(parent) contains this experiment"), "\(r.stdout)\(r.stderr)")
        // Without the experiment, the same policy has nothing to be judged against.
        #expect(try autoharness(["policy", "lint", above]).status == 0)
        let beside = try dir.file("beside.yaml", "extends: base\nfilesystem:\n  mounts:\n    - ro: \(dir.path):/data\n")
        r = try autoharness(["policy", "lint", "-C", exp.root, beside])
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
    }

    @Test("a custom policy of any role whose bind reaches the dataset stops prepare before any sandbox starts, at the policy's line; a harmless one does not")
    func customPolicyRefusedAtStart() throws {
        let exp = try Experiment(prepare: false)
        let policies = exp.root + "/policies"
        try FileManager.default.createDirectory(atPath: policies, withIntermediateDirectories: true)
        let config = exp.root + "/experiment_config.yaml"
        let text = try String(contentsOfFile: config, encoding: .utf8)
        try text.replacingOccurrences(of: "  verifier_policy: verifier ", with: "  verifier_policy: my-verifier\n  policy_dir: policies #")
            .write(toFile: config, atomically: true, encoding: .utf8)
        let file = policies + "/my-verifier.yaml"
        try "extends: verifier\nfilesystem:\n  mounts:\n    - ro: \(Experiment.fixture)/tasks:/all-tasks\n".write(toFile: file, atomically: true, encoding: .utf8)
        let r = try exp.run("prepare")
        #expect(r.status != 0 && r.stderr.contains("the verifier policy my-verifier: \(file):4: ro /all-tasks: \(Experiment.fixture)/tasks lies inside \(Experiment.fixture)"), "\(r.stdout)\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: exp.root + "/workspace/train_results.json"))
        try "extends: verifier\nfilesystem:\n  mounts:\n    - ro: /usr/share/zoneinfo:/zoneinfo\n".write(toFile: file, atomically: true, encoding: .utf8)
        let ok = try exp.run("prepare")
        #expect(ok.status == 0, "\(ok.stdout)\(ok.stderr)")
    }
}
