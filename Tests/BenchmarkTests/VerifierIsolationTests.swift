import Foundation
import Sandbox
import SandboxPolicy
import Testing

@testable import Benchmark

/// agent.py writes /app; the verifier then runs the task's tests over /app. Nothing agent.py
/// left there may run as part of the judge unless the task's own test runs it on purpose.
/// Each task below is a test.sh written the ordinary way, and agent.py plants what would
/// hijack it: a module that exits 0 where the test expects a real check. Every vector runs
/// twice: under the shipped verifier policy (reward 0: the planted code never ran) and under
/// a verifier weakened the way ours was before (cwd /app, PYTHONSAFEPATH empty, which Python
/// treats as unset), where the live vectors must succeed (reward 1), so each test proves its
/// vector is real. The others (start-up hooks, a shadowing executable) are not reachable even
/// then, and stay as checks against a later change that would put /app on a search path.
@Suite("The verifier never runs what agent.py planted in /app")
struct VerifierIsolationTests {
    /// The check every task makes: the answer must be 7. Planted code that shadows `json`
    /// or the runner module exits 0 before the check, and the reward becomes 1.
    static let check = "import json, sys; sys.exit(0 if json.load(open('/app/answer.json'))['v'] == 7 else 1)"

    struct Vector: Sendable, CustomTestStringConvertible {
        var id: String
        /// test.sh's command deciding the reward (exit 0 → 1).
        var test: String
        /// Files agent.py writes under /app (relative path → contents).
        var plant: [String: String]
        /// Whether the weakened verifier falls for it (the vector is live there).
        var weakFalls: Bool
        var testDescription: String { id }
    }

    static let forged = "import sys\nsys.exit(0)\n"

    static let vectors: [Vector] = [
        // python3 -c puts the working directory first on sys.path.
        .init(id: "cwd-module-shadow", test: "python3 -c \"\(check)\"", plant: ["json/__init__.py": forged], weakFalls: true),
        // A test that cds into /app itself: PYTHONSAFEPATH keeps the cwd off sys.path.
        .init(id: "cd-app-module-shadow", test: "cd /app && python3 -c \"\(check)\"", plant: ["json.py": forged], weakFalls: true),
        // python3 -m finds the runner module in the cwd first.
        .init(id: "runner-module-shadow", test: "cd /app && PYTHONPATH=/tests python3 -m checker", plant: ["checker.py": forged],
              weakFalls: true),
        // Interpreter start-up hooks and .pth files in /app (never on sys.path here).
        .init(id: "startup-hooks", test: "cd /app && python3 -c \"\(check)\"",
              plant: ["sitecustomize.py": forged, "usercustomize.py": forged, "hook.pth": "import sys; sys.exit(0)\n"], weakFalls: false),
        // A repository agent.py made in /app whose config runs a command on `git status`.
        .init(id: "git-fsmonitor", test: "cd /app && git status --porcelain >/dev/null 2>&1; test -e /tmp/hook-ran",
              plant: [".git-fsmonitor": "touch /tmp/hook-ran; false #"], weakFalls: true),
        // An executable named like the interpreter, beside the answer.
        .init(id: "executable-shadow", test: "cd /app && python3 -c \"\(check)\"", plant: ["python3": "#!/bin/sh\nexit 0\n"], weakFalls: false),
    ]

    /// A benchmark with one task per vector; `checker` (in each task's tests) is the module
    /// the -m vector runs.
    static func benchmark(_ dir: TempDir) throws -> LocalBenchmark {
        for v in vectors {
            try dir.file("tasks/\(v.id)/instruction.md", "Write {\"v\": 7} to answer.json.\nvector: \(v.id)\n")
            try dir.file("tasks/\(v.id)/tests/checker.py", Self.check.replacingOccurrences(of: "; ", with: "\n") + "\n")
            try dir.file("tasks/\(v.id)/tests/test.sh", """
                #!/bin/bash
                if \(v.test); then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
                """, mode: 0o755)
        }
        return try LocalBenchmark(directory: dir.path)
    }

    /// agent.py: answers wrongly and plants the files of the vector its instruction names.
    static func agent() -> String {
        var plants: [String: [String: String]] = [:]
        for v in vectors { plants[v.id] = v.plant }
        let json = String(decoding: try! JSONSerialization.data(withJSONObject: plants, options: [.sortedKeys]), as: UTF8.self)
        return """
            import json, os
            PLANTS = json.loads(\(String(reflecting: json)))
            class HarnessAgent:
                def run(self, instruction, workdir):
                    json.dump({"v": 6}, open(os.path.join(workdir, "answer.json"), "w"))
                    vector = instruction.split("vector: ")[1].strip()
                    for rel, text in PLANTS[vector].items():
                        if rel == ".git-fsmonitor":
                            import subprocess
                            subprocess.run(["git", "init", "-q", workdir], check=True)
                            subprocess.run(["git", "-C", workdir, "config", "core.fsmonitor", text], check=True)
                            continue
                        path = os.path.join(workdir, rel)
                        os.makedirs(os.path.dirname(path), exist_ok=True)
                        with open(path, "w") as f:
                            f.write(text)
                        os.chmod(path, 0o755)
                    print("planted", sorted(PLANTS[vector]))
            """
    }

    /// `sanitizesGitConfigs` off: the control shows what the verifier policy alone does
    /// (GitConfigsTests shows the rewrite).
    func outcome(_ vector: Vector, verifierPolicy: String, policyDirs: [String], sanitizesGitConfigs: Bool = true) throws -> TaskOutcome {
        let dir = try TempDir()
        let bench = try Self.benchmark(dir)
        let agent = try makeAgent(Self.agent())
        let scratch = try makeScratchRoot()
        var config = TaskRunConfiguration(policyLoader: PolicyLoader(searchPaths: policyDirs + [Paths.policies]),
                                          agentDirectory: agent.path, scratchRoot: scratch.path)
        config.verifierPolicy = verifierPolicy
        config.sanitizesGitConfigs = sanitizesGitConfigs
        let runner = try TaskRunner(configuration: config)
        let task = try #require(bench.task(vector.id))
        return withExtendedLifetime((agent, scratch, dir)) { runner.run(task, traceDirectory: nil) }
    }

    @Test("planted modules, runner shadows, start-up hooks and executables in /app do not hijack the tests", arguments: vectors)
    func plantedFilesDoNotRun(_ vector: Vector) throws {
        try requireRoot()
        let shipped = try outcome(vector, verifierPolicy: "verifier", policyDirs: [])
        #expect(shipped.reward == 0, "\(vector.id): the planted code ran in the verifier (\(shipped.status) \(shipped.detail ?? ""))")
        #expect(shipped.status == .failed, "\(vector.id): \(shipped.status) \(shipped.detail ?? "")")

        // The same attack against a verifier run from /app without PYTHONSAFEPATH.
        let weak = try TempDir()
        try weak.file("weak-verifier.yaml", """
            extends: verifier
            description: "the verifier with cwd /app and no PYTHONSAFEPATH (test control only)"
            filesystem:
              chdir: /app
            env:
              set:
                PYTHONSAFEPATH: ""
                GIT_CONFIG_COUNT: "0"
            """)
        let control = try outcome(vector, verifierPolicy: "weak-verifier", policyDirs: [weak.path], sanitizesGitConfigs: false)
        if vector.weakFalls {
            #expect(control.reward == 1, "\(vector.id): the attack did not work even against the weakened verifier, so this test proves nothing (\(control.status) \(control.detail ?? ""))")
        } else {
            #expect(control.reward == 0, "\(vector.id): \(control.status)")
        }
    }

    @Test("the verifier starts in the read-only tests directory with PYTHONSAFEPATH and no user site, BASH_ENV or ENV")
    func verifierEnvironment() throws {
        try requireRoot()
        let policy = try PolicyLoader(searchPaths: [Paths.policies]).load("verifier", requireAllPlaceholders: false)
        #expect(policy.chdir == "/tests")
        let env = policy.env.set
        #expect(env["PYTHONSAFEPATH"] == "1")
        #expect(env["PYTHONNOUSERSITE"] == "1")
        #expect(env["BASH_ENV"] == nil && env["ENV"] == nil)
        #expect(!(env["PATH"] ?? "").split(separator: ":").contains { $0.hasPrefix("/app") || $0 == "." || $0.isEmpty })
        #expect(env["PYTHONPATH"] == nil)
        #expect(env["GIT_CONFIG_KEY_0"] == "core.fsmonitor" && env["GIT_CONFIG_VALUE_0"] == "false")
    }
}
