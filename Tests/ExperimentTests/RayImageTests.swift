import Foundation
import Sandbox
import Testing
import TestSupport
@testable import Benchmark
@testable import Experiment
import Execution
@testable import ExperimentModel

/// Terminal-Bench tasks on their own image with `executor: ray` (`env_provider: local`): each
/// worker node runs them on the image the supervisor built, sent to it once as an encrypted,
/// signed archive (`ImageArchive`), their agent phase through the node's Harbor. (A local
/// benchmark's image tasks take the same requests, without Harbor: RemoteImageTests.)
extension RayClusterTests {
    /// Six Terminal-Bench tasks in Harbor's layout sharing one environment/ (one image, built
    /// FROM the bootstrapped base): only on it are /opt/data/input.txt and /srv/work/built.txt.
    static func imageTasks(in dataset: String) throws {
        for k in 1...6 {
            let t = dataset + "/img-\(k)"
            try TaskImageTests.makeTaskDirectories(t)
            try "schema_version = \"1.4\"\n\n[agent]\ntimeout_sec = 120.0\n\n[verifier]\ntimeout_sec = 60.0\n".write(toFile: t + "/task.toml", atomically: true, encoding: .utf8)
            try "Copy the image's input to /app/answer.txt.\n".write(toFile: t + "/instruction.md", atomically: true, encoding: .utf8)
            try """
                FROM \(TaskImageTests.base)
                WORKDIR /srv/work
                COPY input.txt /opt/data/input.txt
                RUN echo built-at-image-time > /srv/work/built.txt

                """.write(toFile: t + "/environment/Dockerfile", atomically: true, encoding: .utf8)
            try "input-shared\n".write(toFile: t + "/environment/input.txt", atomically: true, encoding: .utf8)
            try "#!/bin/bash\ncp /opt/data/input.txt /app/answer.txt\n".write(toFile: t + "/solution/solve.sh", atomically: true, encoding: .utf8)
            try ("#!/bin/bash\necho \"answer: $(cat /app/answer.txt 2>&1)\"\n" + RemoteImageTests.test.dropFirst("#!/bin/bash\n".count))
                .write(toFile: t + "/tests/test.sh", atomically: true, encoding: .utf8)
        }
    }

    @Test("Terminal-Bench tasks on their image with executor: ray: the image is archived once and sent to each worker node that lacks it (encrypted, signed, then held there by digest, not sent again), each node runs the tasks on it, the agent phase through its Harbor and the tests in its own sandboxes; prepare, a benchmark and a gate give what one machine gives (baseline, split, train rewards and the verifier's output, the gate); the driver runs as a user of its own, and reads the pushed image as that user")
    func imageTasksAcrossTheCluster() throws {
        try requireRoot()
        try TaskImageTests.requireImageHost()
        let harbor = try RealHarborTests.harbor()
        _ = try TaskImageTests.toolbox()
        let data = try TempDir()
        try Self.imageTasks(in: data.path + "/bench")
        let nothing = RealHarborTests.harborAgent(run: "pass")
        let copies = RealHarborTests.harborAgent(run: "await environment.exec(\"cp /opt/data/input.txt /app/answer.txt\")")
        // The driver (and the head) as a user of its own: it reads the pushed images as that user.
        try Self.sameAsOneMachine(baseline: "baseline: 0/", trace: "verifier.stdout", v2: copies, perRequest: 2,
                                  driverUser: try DriverUser.resolve("60124:60124"), check: { cluster, runs in
            // Sent once to each node, before the first request; held there since.
            let prepared = runs[0].stderr, later = runs[1].stderr + runs[2].stderr
            #expect(prepared.contains("sending a task image") && prepared.contains("to 2 node(s)"), "\(prepared)")
            #expect(!later.contains("sending a task image"), "\(later)")
            // The image was archived once, and the tasks ran on it: v2 solves only there.
            #expect(prepared.contains("archiving the task image") && !later.contains("archiving"), "\(prepared)\(later)")
            #expect(runs[1].stdout.contains("train: 4/4 passed") && runs[2].stdout.contains("ACCEPTED"), "\(runs[1].stdout)\(runs[2].stdout)")
            let ids = try ImageIDs.range()
            for n in [1, 2] {
                let held = FileSystemProbe.names(cluster.state("w\(n)") + "/images")
                #expect(held.count == 1 && held.allSatisfy { $0.hasSuffix("-\(ids.uid)-\(ids.gid)") }, "node \(n) holds \(held)")
            }
        }) {
            // init's default where podman and the verifier tools are: the images made now,
            // env_provider: local and the tools in the config.
            let exp = try Experiment(benchmark: "terminal-bench", extraArgs: ["--tool", harbor, "--dataset", data.path + "/bench", "--images", "auto"])
            try exp.set("agent_model", "none")
            try exp.set("env_pass", "[]", in: "runner")
            try exp.set("allow", "[]", in: "runner")
            try exp.setAgent(nothing)
            return exp
        }
    }
}
