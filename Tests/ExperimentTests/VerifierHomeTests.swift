@testable import Benchmark
import Experiment
import ExperimentModel
import Foundation
import SandboxPolicy
import SupervisorIO
import Testing

/// The verifier's HOME on a task's image: its own /tmp (the agent owns /root), seeded with the
/// image's own shell start-up files, as Harbor's root with HOME=/root has them.
@Suite(.serialized) struct VerifierHomeTests {
    @Test("on an image, the verifier's login shells read the image's /root/.profile and .bashrc from its own HOME: what the test appends to $HOME/.bashrc is read, what the agent wrote into /root is not")
    func imageStartupFilesSeedTheVerifierHome() throws {
        try TaskImageTests.requireImageHost()
        let dir = NSTemporaryDirectory() + "ah-image-home-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let t = dir + "/tasks/home"
        try TaskImageTests.makeTaskDirectories(t)
        try "Do the thing.\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
        try """
            FROM \(TaskImageTests.base)
            RUN printf 'if [ -f ~/.bashrc ]; then . ~/.bashrc; fi\\n' > /root/.profile && echo 'export FROM_IMAGE=image' > /root/.bashrc

            """.write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
        // The agent rewrites root's start-up files: none of it may reach the verifier.
        try "#!/bin/bash\necho 'export FROM_IMAGE=agent; touch /tmp/agent-ran' > /root/.bashrc\ncp /root/.bashrc /root/.profile\n"
            .write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
        try """
            #!/bin/bash
            { echo "home=$HOME"
              bash -lc 'echo "login=$FROM_IMAGE"'
              echo 'export APPENDED=yes' >> "$HOME/.bashrc"
              bash -lc 'echo "appended=$APPENDED"'
              ls /tmp/agent-ran 2>&1; } > /logs/verifier/out.txt 2>&1
            echo 1 > /logs/verifier/reward.txt

            """.write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
        let task = try #require(try LocalBenchmark(directory: dir).task("home"))
        var config = try TaskImageTests.oracleConfiguration([task], in: dir)
        defer { rmdir(config.scratchRoot) }
        let box = OutBox()
        config.scratchObserver = { _, path in box.read(path + "/logs/out.txt") }
        let outcome = try TaskRunner(configuration: config).run(task, traceDirectory: nil)
        #expect(outcome.reward == 1, "\(outcome)")
        let lines = box.text.split(separator: "\n").map(String.init)
        #expect(lines.first == "home=/tmp", "\(box.text)")
        #expect(lines.contains("login=image") && lines.contains("appended=yes"), "\(box.text)")
        #expect(!box.text.contains("login=agent") && box.text.contains("cannot access '/tmp/agent-ran'"), "\(box.text)")
    }

    @Test("an image whose /root is a link to a host directory seeds nothing from it: the host's start-up files never reach the verifier")
    func linkedRootIsNotFollowed() throws {
        try TaskImageTests.requireImageHost()
        let dir = NSTemporaryDirectory() + "ah-image-home-link-" + UUID().uuidString.prefix(8).lowercased()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        // A host directory holding start-up files, and an image whose /root points at it: read
        // on the host, the link would lead there.
        let host = dir + "/host-home"
        try FileManager.default.createDirectory(atPath: host, withIntermediateDirectories: true)
        try "export FROM_HOST=leaked\n".write(toFile: host + "/.profile", atomically: true, encoding: .utf8)
        let t = dir + "/tasks/linked"
        try TaskImageTests.makeTaskDirectories(t)
        try "Do the thing.\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
        try "FROM \(TaskImageTests.base)\nRUN rm -rf /root && ln -s \(host) /root\n\n"
            .write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
        try "#!/bin/bash\ntrue\n".write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
        try """
            #!/bin/bash
            { echo "login=$(bash -lc 'echo "$FROM_HOST"')"; ls -A "$HOME"; } > /logs/verifier/out.txt 2>&1
            echo 1 > /logs/verifier/reward.txt

            """.write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
        let task = try #require(try LocalBenchmark(directory: dir).task("linked"))
        var config = try TaskImageTests.oracleConfiguration([task], in: dir)
        defer { rmdir(config.scratchRoot) }
        let image = try #require(config.images?.byTask["linked"])
        // The attack is live: the image's /root is the link, and following it finds the file.
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: image.rootfs + "/root")) == host)
        #expect(FileManager.default.fileExists(atPath: image.rootfs + "/root/.profile"))
        let box = OutBox()
        config.scratchObserver = { _, path in box.read(path + "/logs/out.txt") }
        let outcome = try TaskRunner(configuration: config).run(task, traceDirectory: nil)
        #expect(outcome.reward == 1, "\(outcome)")
        #expect(box.text.hasPrefix("login=\n") && !box.text.contains("leaked") && !box.text.contains(".profile"), "\(box.text)")
    }
}

private final class OutBox: @unchecked Sendable {
    var text = "(no out.txt)"
    func read(_ path: String) { text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? "(no out.txt)" }
}
