import Foundation
import Sandbox
import Testing
import TestSupport

@testable import Benchmark

/// Links into the answer key that the test itself makes from what agent.py left (an archive's
/// member, a git object): the open through such a link is refused while the verifier waits
/// (`AnswerKeyGuard`), the test sees EPERM and the task scores 0, recorded against agent.py.
/// Tests that name their files, relatively or in a copy, pass untouched.
@Suite("The answer key opened only by names without links")
struct AnswerKeyGuardTests {
    /// (task, what agent.py leaves in /app, the test's check). The attacks score 1 without the
    /// guard: the test compares the link's target with itself.
    static let attacks: [(id: String, plant: String, test: String)] = [
        ("tar", """
            import tarfile
            link = tarfile.TarInfo("out.txt"); link.type = tarfile.SYMTYPE; link.linkname = "/tests/expected.txt"
            with tarfile.open("out.tar", "w") as t: t.addfile(link)
            """, "mkdir /tmp/x && tar -xf /app/out.tar -C /tmp/x && cmp /tmp/x/out.txt /tests/expected.txt"),
        ("git", """
            import subprocess
            os.symlink("/tests/expected.txt", "out.txt")
            env = dict(os.environ, GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@a", GIT_COMMITTER_NAME="a", GIT_COMMITTER_EMAIL="a@a", HOME=workdir)
            for c in (["init", "-q"], ["add", "out.txt"], ["commit", "-qm", "answer"]):
                subprocess.run(["git"] + c, check=True, env=env)
            """, "git -c safe.directory='*' clone -q /app /tmp/r && cmp /tmp/r/out.txt /tests/expected.txt"),
        ("pathlib", """
            import tarfile
            link = tarfile.TarInfo("k"); link.type = tarfile.SYMTYPE; link.linkname = "/tests"
            with tarfile.open("out.tar", "w") as t: t.addfile(link)
            """, "mkdir /tmp/x && tar -xf /app/out.tar -C /tmp/x && python3 -c \"import sys; sys.exit(open('/tmp/x/k/expected.txt').read() != 'the-answer\\\\n')\""),
        // The directory opened through the link, its file then by a name relative to it.
        ("dirfd", """
            import tarfile
            link = tarfile.TarInfo("k"); link.type = tarfile.SYMTYPE; link.linkname = "/tests"
            with tarfile.open("out.tar", "w") as t: t.addfile(link)
            """, "mkdir /tmp/x && tar -xf /app/out.tar -C /tmp/x && python3 -c \"import os, sys; d = os.open('/tmp/x/k', os.O_RDONLY | os.O_DIRECTORY); sys.exit(os.read(os.open('expected.txt', os.O_RDONLY, dir_fd=d), 99) != b'the-answer\\\\n')\""),
    ]

    /// The stated residuals: the test resolves the link it made first, or changes directory
    /// through it, and opens the key by a name without links. They score 1; the link left in
    /// the verifier's /tmp is flagged.
    static let residuals: [(id: String, plant: String, test: String, link: String)] = [
        ("resolved", """
            import tarfile
            link = tarfile.TarInfo("out.txt"); link.type = tarfile.SYMTYPE; link.linkname = "/tests/expected.txt"
            with tarfile.open("out.tar", "w") as t: t.addfile(link)
            """, "mkdir /tmp/x && tar -xf /app/out.tar -C /tmp/x && cmp \"$(realpath /tmp/x/out.txt)\" /tests/expected.txt",
         "/tmp/x/out.txt -> /tests/expected.txt"),
        ("cd-through", """
            import tarfile
            link = tarfile.TarInfo("k"); link.type = tarfile.SYMTYPE; link.linkname = "../tests"
            with tarfile.open("out.tar", "w") as t: t.addfile(link)
            """, "mkdir -p /tmp/x && tar -xf /app/out.tar -C /tmp && cd /tmp/k && cmp expected.txt /tests/expected.txt",
         "/tmp/k -> ../tests"),
    ]

    /// Honest checks: the answer key by its name, relatively, copied, read by Python.
    static let honest: [(id: String, test: String)] = [
        ("named", "cmp /app/out.txt /tests/expected.txt"),
        ("relative", "cd /tests && cmp /app/out.txt expected.txt"),
        ("copied", "cp -r /tests /tmp/t && cmp /app/out.txt /tmp/t/expected.txt"),
        ("python", "python3 -c \"import sys; sys.exit(open('/tests/expected.txt').read() != open('/app/out.txt').read())\""),
        // A reopen of a descriptor the test holds, and a link inside the task's own tests.
        ("stdin", "cat /dev/stdin < /tests/expected.txt | cmp /app/out.txt -"),
        ("inner-link", "cmp /app/out.txt /tests/alias.txt && cmp /app/out.txt /tests/sub/up.txt && cmp /app/out.txt /tests/data/expected.txt"),
    ]

    static func benchmark(_ dir: TempDir) throws -> LocalBenchmark {
        let bench = try answerKeyBenchmark(dir, attacks.map { ($0.id, $0.test) } + honest)
        let tests = dir.path + "/tasks/inner-link/tests"
        try FileManager.default.createSymbolicLink(atPath: tests + "/alias.txt", withDestinationPath: "expected.txt")
        try FileManager.default.createDirectory(atPath: tests + "/sub", withIntermediateDirectories: false)
        try FileManager.default.createSymbolicLink(atPath: tests + "/sub/up.txt", withDestinationPath: "/tests/expected.txt")
        // A directory link of the task's own (made again as a directory of hard links), and
        // one to a directory that holds it (left as it is: no endless copy).
        try FileManager.default.createDirectory(atPath: tests + "/fixtures", withIntermediateDirectories: false)
        try "the-answer\n".write(toFile: tests + "/fixtures/expected.txt", atomically: false, encoding: .utf8)
        try FileManager.default.createSymbolicLink(atPath: tests + "/data", withDestinationPath: "fixtures")
        try FileManager.default.createSymbolicLink(atPath: tests + "/sub/back", withDestinationPath: "..")
        return bench
    }

    static func agent() -> String {
        plantingAgent(Dictionary(uniqueKeysWithValues: attacks.map { ($0.id, $0.plant) }),
                      otherwise: "        open(\"out.txt\", \"w\").write(\"the-answer\\n\")")
    }

    @Test("a link the test makes from agent.py's archive or git objects into /tests (to a file, or a directory opened through it): the open is refused (EPERM, seen by the test), the task scores 0 and a planted_link is recorded; honest tests that name the key, relatively, in a copy, by a descriptor they hold or through the task's own links (to a file or a directory) pass with nothing refused")
    func linksTheTestMakes() throws {
        try requireRoot()
        let dir = try TempDir()
        let bench = try Self.benchmark(dir)
        let audit = AuditLog()
        let traces = try TempDir()
        let h = try Harness(agent: Self.agent(), configure: { $0.audit = audit })
        for a in Self.attacks {
            let outcome = h.run(try #require(bench.task(a.id)), trace: traces.path + "/" + a.id)
            let output = (read(traces.path + "/\(a.id)/verifier.stdout") ?? "") + (read(traces.path + "/\(a.id)/verifier.stderr") ?? "")
            #expect(outcome.reward == 0, "\(a.id): \(outcome.status) \(outcome.detail ?? "") \(output)")
            // The test really opened the key through the link, and was refused.
            #expect(output.contains("Operation not permitted") || output.contains("PermissionError"), "\(a.id): \(output)")
            let refused = audit.events.filter { $0.kind == .plantedLink && $0.action == "refused" && $0.name.hasPrefix("/tests") }
            #expect(refused.contains { $0.detail?.contains("through a link") == true }, "\(a.id): \(audit.events.filter { $0.kind == .plantedLink })")
        }
        let before = audit.events.filter { $0.kind == .plantedLink }.count
        for t in Self.honest {
            let outcome = h.run(try #require(bench.task(t.id)), trace: traces.path + "/" + t.id)
            let output = (read(traces.path + "/\(t.id)/verifier.stdout") ?? "") + (read(traces.path + "/\(t.id)/verifier.stderr") ?? "")
            #expect(outcome.reward == 1, "\(t.id): \(outcome.status) \(outcome.detail ?? "") \(output)")
        }
        #expect(audit.events.filter { $0.kind == .plantedLink }.count == before, "\(audit.events.filter { $0.kind == .plantedLink })")
    }

    @Test("stated residuals: a test that resolves the link it made from agent.py's archive, or changes directory through it, opens the key by a name without links and scores 1; the link it left in its /tmp is flagged (a planted_link, action flagged), even after a task whose 300 flagged links filled its own records; honest tests leave none")
    func residualsFlagged() throws {
        try requireRoot()
        let dir = try TempDir()
        let bench = try answerKeyBenchmark(dir, Self.residuals.map { ($0.id, $0.test) } + Self.honest.filter { $0.id != "inner-link" }
                                           + [("flood", "for k in $(seq 300); do ln -s /tests/expected.txt /tmp/l$k; done")])
        let audit = AuditLog()
        let traces = try TempDir()
        // First a task whose test leaves 300 links into the key, each flagged: the supervisor's
        // records are counted per task, so they do not use up the next task's.
        let agent = plantingAgent(Dictionary(uniqueKeysWithValues: Self.residuals.map { ($0.id, $0.plant) }),
                                  otherwise: "        open(\"out.txt\", \"w\").write(\"the-answer\\n\")")
        let h = try Harness(agent: agent, configure: { $0.audit = audit })
        _ = h.run(try #require(bench.task("flood")), trace: traces.path + "/flood")
        #expect(audit.events.filter { $0.kind == .plantedLink && $0.action == "flagged" }.count >= 200)
        for r in Self.residuals {
            let outcome = h.run(try #require(bench.task(r.id)), trace: traces.path + "/" + r.id)
            #expect(outcome.reward == 1, "\(r.id): \(outcome.status) \(outcome.detail ?? "") \(read(traces.path + "/\(r.id)/verifier.stderr") ?? "")")
            #expect(audit.events.contains { $0.kind == .plantedLink && $0.action == "flagged" && $0.name == r.link },
                    "\(r.id): \(audit.events.filter { $0.kind == .plantedLink })")
        }
        let before = audit.events.filter { $0.kind == .plantedLink }.count
        for t in Self.honest where t.id != "inner-link" {
            let outcome = h.run(try #require(bench.task(t.id)), trace: traces.path + "/" + t.id)
            #expect(outcome.reward == 1, "\(t.id): \(outcome.status) \(outcome.detail ?? "")")
        }
        #expect(audit.events.filter { $0.kind == .plantedLink }.count == before, "\(audit.events.filter { $0.kind == .plantedLink })")
    }

    /// Links into the key that the test makes and compares without opening the key through
    /// them (two reviews'): each scores 1 (the test is fooled), and each link is recorded as it
    /// is made or given a new name, even when the test removes it after.
    static func tarOf(_ target: String) -> String {
        """
        import tarfile
        link = tarfile.TarInfo("out.txt"); link.type = tarfile.SYMTYPE; link.linkname = \(String(reflecting: target))
        with tarfile.open("out.tar", "w") as t: t.addfile(link)
        """
    }
    /// A tar of `members`: (name, type, link name), a file's content "decoy".
    static func tarOf(members: [(String, String, String)]) -> String {
        "import io, tarfile\nt = tarfile.open('out.tar', 'w')\n" + members.map { name, type, link in
            "m = tarfile.TarInfo(\(String(reflecting: name))); m.type = tarfile.\(type); m.linkname = \(String(reflecting: link)); "
                + (type == "REGTYPE" ? "m.size = 6; t.addfile(m, io.BytesIO(b'decoy\\n'))" : type == "DIRTYPE" ? "m.mode = 0o755; t.addfile(m)" : "t.addfile(m)")
        }.joined(separator: "\n") + "\nt.close()"
    }
    static let diffThenClean = "(d=$(mktemp -d) && tar -xf /app/out.tar -C $d && diff $d/out.txt /tests/expected.txt; r=$?; rm -rf $d; exit $r)"
    static let unopened: [(id: String, plant: String, test: String, recorded: String)] = [
        ("diff-cleanup", tarOf("/tests/expected.txt"), diffThenClean, "out.txt -> /tests/expected.txt"),
        ("filecmp", tarOf("/tests/expected.txt"), "mkdir /tmp/x && tar -xf /app/out.tar -C /tmp/x && python3 -c \"import filecmp, sys; sys.exit(not filecmp.cmp('/tmp/x/out.txt', '/tests/expected.txt'))\"",
         "out.txt -> /tests/expected.txt"),
        ("kernel-path", tarOf("/usr/lib/ssl/certs/../../../tests/expected.txt"), "mkdir /tmp/x && tar -xf /app/out.tar -C /tmp/x && diff /tmp/x/out.txt /tests/expected.txt",
         "out.txt -> /usr/lib/ssl/certs/../../../tests/expected.txt"),
        ("proc-root", tarOf("/proc/self/root/tests/expected.txt"), "mkdir /tmp/x && tar -xf /app/out.tar -C /tmp/x && diff /tmp/x/out.txt /tests/expected.txt",
         "out.txt -> /proc/self/root/tests/expected.txt"),
        ("relative", tarOf("../../tests/expected.txt"), "mkdir /tmp/x && tar -xf /app/out.tar -C /tmp/x && diff /tmp/x/out.txt /tests/expected.txt",
         "out.txt -> ../../tests/expected.txt"),
        // The link made deep, beside a decoy, then hard-linked where its target is the key.
        ("hard-link", tarOf(members: [("tests/expected.txt", "REGTYPE", ""), ("a", "DIRTYPE", ""), ("a/b", "DIRTYPE", ""), ("a/b/c", "DIRTYPE", ""),
                                      ("a/b/c/d", "DIRTYPE", ""), ("a/b/c/d/l", "SYMTYPE", "../../../../tests/expected.txt"), ("out.txt", "LNKTYPE", "a/b/c/d/l")]),
         diffThenClean, "out.txt (hard link of a/b/c/d/l)"),
        // The link made before the directory its target climbs out of (a git checkout's order).
        ("dir-later", tarOf(members: [("out.txt", "SYMTYPE", "sub/../../../../../tests/expected.txt"), ("sub", "DIRTYPE", "")]),
         "(d=$(mktemp -d) && python3 -c \"import tarfile, sys; tarfile.open('/app/out.tar').extractall(sys.argv[1])\" $d && diff $d/out.txt /tests/expected.txt; r=$?; rm -rf $d; exit $r)",
         "out.txt -> sub/../../../../../tests/expected.txt"),
        // The link's directory moved to where its relative target is the key.
        ("moved", tarOf(members: [("build", "DIRTYPE", ""), ("build/out.txt", "SYMTYPE", "../../tests/expected.txt")]),
         "mkdir /tmp/stage && tar -xf /app/out.tar -C /tmp/stage && mv /tmp/stage/build /tmp/build && diff /tmp/build/out.txt /tests/expected.txt",
         "/tmp/stage/build renamed /tmp/build"),
        // A name through a magic link, which the supervisor cannot follow.
        ("magic-name", "", "cd /tmp && ln -s /tests/expected.txt /proc/self/cwd/out.txt && diff /tmp/out.txt /tests/expected.txt",
         "/proc/self/cwd/out.txt -> /tests/expected.txt"),
    ]

    @Test("a link into the key the test makes and compares by stat (diff, filecmp), through a system link, /proc/self/root, a relative path, a hard link of a deeper link, a directory made after the link, a directory moved, a name through a magic link, removed after: recorded as it is made or named (planted_link, flagged); honest links and moves leave nothing")
    func linksMadeAreRecorded() throws {
        try requireRoot()
        let dir = try TempDir()
        let bench = try answerKeyBenchmark(dir, Self.unopened.map { ($0.id, $0.test) }
                                           + [("honest-link", "ln -s /usr/bin/python3 /tmp/py && ln -s ../app/out.txt /tmp/out && mkdir /tmp/m && ln -s ../py /tmp/m/p && mv /tmp/m /tmp/n && ln /tmp/n/p /tmp/q && cmp /tmp/out /tests/expected.txt")])
        let audit = AuditLog()
        let traces = try TempDir()
        let agent = plantingAgent(Dictionary(uniqueKeysWithValues: Self.unopened.filter { !$0.plant.isEmpty }.map { ($0.id, $0.plant) }),
                                  otherwise: "        open(\"out.txt\", \"w\").write(\"the-answer\\n\")")
        let h = try Harness(agent: agent, configure: { $0.audit = audit })
        for a in Self.unopened {
            let before = audit.events.count
            let outcome = h.run(try #require(bench.task(a.id)), trace: traces.path + "/" + a.id)
            #expect(outcome.reward == 1, "\(a.id): \(outcome.status) \(outcome.detail ?? "") \(read(traces.path + "/\(a.id)/verifier.stderr") ?? "")")
            let made = audit.events.dropFirst(before).filter { $0.kind == .plantedLink && $0.action == "flagged" && $0.detail?.contains("in the sandbox") == true }
            #expect(made.contains { $0.name.hasSuffix(a.recorded) },
                    "\(a.id): \(audit.events.dropFirst(before).filter { $0.kind == .plantedLink })")
        }
        let before = audit.events.count
        let honest = h.run(try #require(bench.task("honest-link")), trace: traces.path + "/honest-link")
        #expect(honest.reward == 1, "\(honest.status) \(honest.detail ?? "")")
        #expect(!audit.events.dropFirst(before).contains { $0.kind == .plantedLink }, "\(audit.events.dropFirst(before))")
    }
}
