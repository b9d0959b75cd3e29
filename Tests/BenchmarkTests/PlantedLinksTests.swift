import Foundation
import Sandbox
import SandboxPolicy
import SupervisorIO
import Testing
import TestSupport

@testable import Benchmark

/// Links agent.py leaves in /app that lead into the verifier's files: each is
/// removed before the verifier starts and recorded against agent.py, however the test then
/// reaches it (directly, copied, resolved, through a directory link, `..` after a link inside
/// /app, /proc); links that stay in /app or lead into the system are kept; a venv a test script
/// makes in /app works (Terminal-Bench 1's run-uv-pytest.sh).
@Suite("Links agent.py leaves in /app")
struct PlantedLinksTests {
    /// A tree below /app for `leavesApp`: path -> what is there.
    static func lookup(_ tree: [String: LinkWalk.Entry]) -> (LinkWalk.Components) -> LinkWalk.Entry? {
        { path in tree[path.map { String(decoding: $0, as: UTF8.self) }.joined(separator: "/")] }
    }

    /// `rule` (leavesApp, reachesVerifier) for a link at `link` (below its top) to `target`.
    static func judged(_ rule: (LinkWalk.Components, [UInt8], (LinkWalk.Components) -> LinkWalk.Entry?) -> Bool,
                       _ link: String, _ target: String, _ tree: [String: LinkWalk.Entry]) -> Bool {
        rule(link.split(separator: "/").dropLast().map { Array($0.utf8) }, Array(target.utf8), lookup(tree))
    }

    static func leaves(_ link: String, _ target: String, _ tree: [String: LinkWalk.Entry] = [:]) -> Bool {
        judged({ PlantedLinks.leavesApp(from: $0, target: $1, lookup: $2) }, link, target, tree)
    }

    @Test("a link's path is judged as the kernel walks it: links inside /app followed, `..` after one of them included")
    func resolution() {
        // Out of /app.
        #expect(Self.leaves("out.txt", "/tests/expected.txt"))
        #expect(Self.leaves("a/out.txt", "../../tests/expected.txt", ["a": .directory]))
        #expect(Self.leaves("out.txt", "/proc/self/cwd/expected.txt"))
        #expect(Self.leaves("out.txt", "/tmp/expected"))
        #expect(Self.leaves("out.txt", "/usr/../tests/expected.txt"))
        #expect(Self.leaves("out.txt", "/app/../tests/expected.txt"))
        #expect(Self.leaves("t", "/tests"))
        // `d -> .` is /app itself: `d/../tests` is /tests, though it reads as /app/tests.
        #expect(Self.leaves("out.txt", "d/../tests/expected.txt", ["d": .link(Array(".".utf8))]))
        #expect(Self.leaves("out.txt", "d/x", ["d": .link(Array("/tests".utf8))]))
        // A loop, and more than 40 links in a row.
        #expect(Self.leaves("out.txt", "l1", ["l1": .link(Array("l2".utf8)), "l2": .link(Array("l1".utf8))]))
        // `..` after a system link shallower than its spelling (Debian's openssl package:
        // /usr/lib/ssl/certs -> /etc/ssl/certs), and a system link that leads out of the system
        // (/etc/mtab -> ../proc/self/mounts): both out (a review's bypass, the first).
        #expect(Self.leaves("out.txt", "/usr/lib/ssl/certs/../../../tests/expected.txt"))
        #expect(Self.leaves("out.txt", "/usr/bin/X11/../../tests/expected.txt"))
        #expect(Self.leaves("out.txt", "d/../../../tests/expected.txt", ["d": .link(Array("/usr/lib/ssl/certs".utf8))]))
        #expect(Self.leaves("out.txt", "/etc/mtab"))
        // Inside /app, or into the system: kept.
        #expect(!Self.leaves("out.txt", "real/x.txt", ["real": .directory]))
        #expect(!Self.leaves("venv/bin/python", "python3"))
        #expect(!Self.leaves("venv/bin/python3", "/usr/bin/python3"))
        #expect(!Self.leaves("out.txt", "/app/real/x.txt"))
        #expect(!Self.leaves("a/b/out.txt", "../x", ["a": .directory, "a/b": .directory]))
        #expect(!Self.leaves("out.txt", "d/../x", ["d": .link(Array("sub/inner".utf8)), "sub": .directory, "sub/inner": .directory]))
        #expect(!Self.leaves("lib", "/lib64/ld-linux-x86-64.so.2"))
    }

    static func reaches(_ link: String, _ target: String, _ tree: [String: LinkWalk.Entry] = [:]) -> Bool {
        judged({ PlantedLinks.reachesVerifier(from: $0, target: $1, lookup: $2) }, link, target, tree)
    }

    @Test("on a task's image a link the agent made anywhere is judged in the merged tree: through /tests, /logs, /tmp, /proc, the toolbox or /dev/fd it is the verifier's; elsewhere the image's")
    func imageResolution() {
        // Paths below the image's root (`app/out.txt` is /app/out.txt).
        #expect(Self.reaches("app/out.txt", "/tests/expected.txt"))
        #expect(Self.reaches("app/out.txt", "../tests/expected.txt", ["app": .directory]))
        // `..` of the root is the root.
        #expect(Self.reaches("app/out.txt", "../../../../tests", ["app": .directory]))
        #expect(Self.reaches("app/out.txt", "/proc/self/cwd/x"))
        #expect(Self.reaches("app/out.txt", "/tmp/key"))
        #expect(Self.reaches("app/out.txt", "/logs/verifier/reward.txt"))
        #expect(Self.reaches("app/out.txt", "/dev/fd/3"))
        #expect(Self.reaches("app/out.txt", "/dev/pts/../shm/expected"))
        #expect(Self.reaches("app/out.txt", "/opt/autoharness/verifier-tools/bin/python3.13"))
        // Through the image's own links and the agent's, anywhere in the tree.
        #expect(Self.reaches("app/out.txt", "/var/run/../tests/x", ["var": .directory, "var/run": .link(Array("/run".utf8))]))
        #expect(Self.reaches("app/out.txt", "/root/k/expected.txt", ["root": .directory, "root/k": .link(Array("/tests".utf8))]))
        #expect(Self.reaches("root/k", "/tests"))
        #expect(Self.reaches("app/out.txt", "l1", ["app": .directory, "app/l1": .link(Array("l2".utf8)), "app/l2": .link(Array("l1".utf8))]))
        // The image's and the agent's own files: kept.
        #expect(!Self.reaches("app/venv/bin/python", "/usr/bin/python3.12"))
        #expect(!Self.reaches("usr/local/bin/tool", "../lib/tool/run", ["usr": .directory, "usr/local": .directory]))
        #expect(!Self.reaches("app/null", "/dev/null"))
        #expect(!Self.reaches("etc/alternatives/x", "/usr/bin/x"))
        #expect(!Self.reaches("app/data", "/srv/data"))
    }

    /// Every task's test: compare /app/out.txt with the answer key, reached as `vector` says.
    static let vectors: [(id: String, plant: String, test: String)] = [
        ("direct", "os.symlink('/tests/expected.txt', 'out.txt')", "cmp -s /app/out.txt /tests/expected.txt"),
        ("copied", "os.symlink('/tests/expected.txt', 'out.txt')", "cp -a /app /tmp/w && cmp -s /tmp/w/out.txt /tests/expected.txt"),
        ("resolved", "os.symlink('/tests/expected.txt', 'out.txt')", "cmp -s \"$(readlink -f /app/out.txt)\" /tests/expected.txt"),
        ("directory", "os.symlink('/tests', 'k')", "cmp -s /app/k/expected.txt /tests/expected.txt"),
        ("dotdot", "os.symlink('.', 'd'); os.symlink('d/../tests/expected.txt', 'out.txt')", "cmp -s /app/out.txt /tests/expected.txt"),
        ("proc", "os.symlink('/proc/self/cwd/expected.txt', 'out.txt')", "cmp -s /app/out.txt /tests/expected.txt"),
        ("tmp", "os.symlink('/tmp/key', 'out.txt')", "cp /tests/expected.txt /tmp/key && cmp -s /app/out.txt /tmp/key"),
        ("system-dotdot", "os.symlink('/usr/lib/ssl/certs/../../../tests/expected.txt', 'out.txt')", "cmp -s /app/out.txt /tests/expected.txt"),
    ]

    static func benchmark(_ dir: TempDir) throws -> LocalBenchmark {
        try answerKeyBenchmark(dir, vectors.map { ($0.id, "\($0.test)") }
                               + [("honest", "cmp -s /app/out.txt /tests/expected.txt && [ -x /app/env ]")])
    }

    static func agent() -> String {
        // The honest task: links that stay in /app, and one into the system: kept.
        plantingAgent(Dictionary(uniqueKeysWithValues: vectors.map { ($0.id, $0.plant) }), otherwise: """
                    os.makedirs("real")
                    open("real/answer.txt", "w").write("the-answer\\n")
                    os.symlink("real/answer.txt", "out.txt")
                    os.symlink("/usr/bin/env", "env")
            """)
    }

    @Test("links from /app into the answer key score 0 however the test reaches them, each recorded against agent.py; links inside /app and into the system are kept")
    func linksIntoTheAnswerKey() throws {
        try requireRoot()
        let dir = try TempDir()
        let bench = try Self.benchmark(dir)
        let audit = AuditLog()
        let traces = try TempDir()
        let h = try Harness(agent: Self.agent(), configure: { $0.audit = audit })
        for v in Self.vectors {
            let outcome = h.run(try #require(bench.task(v.id)), trace: traces.path + "/" + v.id)
            #expect(outcome.reward == 0, "\(v.id): \(outcome.status) \(outcome.detail ?? "")")
            let events = audit.events.filter { $0.kind == .plantedLink }
            #expect(events.contains { $0.name.hasPrefix("/app/") && $0.action == "removed" }, "\(v.id): \(events)")
            #expect(outcome.detail?.contains("removed") == true || (read(traces.path + "/" + v.id + "/result.json") ?? "").contains("link(s) leading out of /app"),
                    "\(v.id): \(outcome.detail ?? "")")
        }
        let before = audit.events.filter { $0.kind == .plantedLink }.count
        let honest = h.run(try #require(bench.task("honest")))
        #expect(honest.reward == 1, "\(honest.status) \(honest.detail ?? "")")
        #expect(audit.events.filter { $0.kind == .plantedLink }.count == before)
    }

    /// Terminal-Bench 1's run-uv-pytest.sh, as its tasks ship it (after uv's installer, which
    /// the verifier tools stand in for), run from /app.
    static let runUvPytest = """
        #!/bin/bash
        cd /app
        uv venv .tbench-testing
        source .tbench-testing/bin/activate
        uv pip install pytest==8.4.1
        uv run pytest /tests/test_outputs.py -rA
        if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi

        """

    @Test("Terminal-Bench 1's run-uv-pytest.sh: an honest answer passes (the venv it makes in /app works); a .tbench-testing agent.py left whose activate writes the reward is replaced, and a wrong answer scores 0")
    func tbenchTestingVenv() throws {
        try requireRoot()
        let tools = try VerifierToolsTests.toolbox()
        let dir = try TempDir()
        let bench = try VerifierToolsTests.benchmark(dir, script: Self.runUvPytest, tasks: ["right": "forty-two", "wrong": "forty-one"])
        let traces = try TempDir()
        let plant = """
            os.makedirs(os.path.join(workdir, ".tbench-testing/bin"))
            open(os.path.join(workdir, ".tbench-testing/bin/activate"), "w").write("echo 1 > /logs/verifier/reward.txt; exit 0\\n")
            """
        let h = try Harness(agent: VerifierToolsTests.agent(extra: plant), configure: { $0.verifierTools = tools })
        let right = h.run(try #require(bench.task("right")), trace: traces.path + "/right")
        let log = (read(traces.path + "/right/verifier.stdout") ?? "") + (read(traces.path + "/right/verifier.stderr") ?? "")
        #expect(right.status == .passed && right.reward == 1, "\(right.status) \(right.detail ?? "")\n\(log)")
        #expect(log.contains("2 passed"), "\(log)")
        let wrong = h.run(try #require(bench.task("wrong")), trace: traces.path + "/wrong")
        let wlog = (read(traces.path + "/wrong/verifier.stdout") ?? "") + (read(traces.path + "/wrong/verifier.stderr") ?? "")
        #expect(wrong.reward == 0, "\(wrong.status) \(wrong.detail ?? "")\n\(wlog)")
    }
}
