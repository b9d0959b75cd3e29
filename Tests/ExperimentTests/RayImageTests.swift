import Foundation
import Sandbox
import Testing
import TestSupport
@testable import Benchmark
@testable import Experiment
@testable import ExperimentModel

/// Tasks on their own image with `executor: ray`: each worker node runs them on the image the
/// supervisor built, sent to it once as an encrypted, signed archive (`ImageArchive`).
extension RayClusterTests {
    /// Six Terminal-Bench-shaped tasks sharing one environment/ (one image, built FROM the
    /// bootstrapped base): only on it are /opt/data/input.txt and /srv/work/built.txt.
    static func imageTasks(in dataset: String) throws {
        for k in 1...6 {
            let t = dataset + "/tasks/img-\(k)"
            try TaskImageTests.makeTaskDirectories(t)
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

    @Test("tasks on their image with executor: ray: the image is archived once and sent to each worker node that lacks it (encrypted, signed, then held there by digest, not sent again), each node runs the tasks on it in its own sandboxes; prepare, a benchmark and a gate give what one machine gives (baseline, split, train rewards and the verifier's output, the gate)")
    func imageTasksAcrossTheCluster() throws {
        try requireRoot()
        try TaskImageTests.requireImageHost()
        let tools = try TaskImageTests.toolbox()
        let data = try TempDir()
        try Self.imageTasks(in: data.path + "/bench")
        let nothing = "class HarnessAgent:\n    def run(self, instruction, workdir):\n        pass\n"
        try Self.sameAsOneMachine(baseline: "baseline: 0/", trace: "verifier.stdout", v2: RemoteImageTests.agent, perRequest: 2, check: { cluster, runs in
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
            let exp = try Experiment(benchmark: "local", extraArgs: ["--dataset", data.path + "/bench"])
            let path = exp.root + "/experiment_config.yaml"
            let config = try String(contentsOfFile: path, encoding: .utf8)
                .replacingOccurrences(of: "# verifier_tools: \(tools.directory)", with: "verifier_tools: \(tools.directory)")
            try #require(config.contains("\n  verifier_tools: \(tools.directory)"), "\(config)")
            try config.write(toFile: path, atomically: true, encoding: .utf8)
            try exp.setAgent(nothing)
            let built = try exp.run(["images"], environment: [:])
            try #require(built.status == 0, "\(built.stdout)\(built.stderr)")
            return exp
        }
    }
}
