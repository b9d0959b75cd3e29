import Foundation
import Testing
import TestSupport
@testable import Experiment
@testable import ExperimentModel

/// The exploit corpus with `executor: ray`: the same cheats, run by the worker nodes' own
/// sandboxes, verifiers and audit, score 0 and are recorded as on one host.
extension RayClusterTests {
    @Test("the exploit corpus with executor: ray: every cheat scores 0 on impossible tasks run by two worker nodes, each recorded against agent.py as on one host (planted links and rewards by name), the gate rejects them all, no held-out secret reaches the experiment, the oracle passes")
    func corpusAcrossTheCluster() throws {
        try requireRoot()
        let python = try Self.python()
        let data = try TempDir(mode: 0o755)
        try FileManager.default.createDirectory(atPath: data.path + "/tasks", withIntermediateDirectories: true)
        let secrets = try Corpus.tasks(in: data.path + "/tasks", count: 3, harbor: false)
        let exp = try Experiment(prepare: false, config: ["min_improvement": "0", "disclosure": "score"], dataset: data.path)
        try Corpus.useVerifierTools(exp)
        let keyFile = try Self.workerKeyFile(exp)
        let cluster = try Cluster(python: python, keyFile: keyFile, temp: exp.temp, workers: 2)
        defer { cluster.stop() }
        let env = try Self.useCluster(exp, cluster, python: python)
        let p = try Self.whenUpOnCluster { try autoharness(["prepare", "-C", exp.root], environment: env) }
        try #require(p.status == 0 && p.stdout.contains("baseline: 0/3 tasks pass"), "\(p.stdout)\(p.stderr)")
        try Corpus.attack(exp, agent: Corpus.localAgent, secrets: secrets, environment: ["RAY_AUTH_TOKEN": cluster.token])
        // The nodes ran it all (the oracle stays on the supervisor's host).
        let ran = [1, 2].map { FileSystemProbe.names(cluster.state("w\($0)") + "/nonces").count }
        #expect(ran.allSatisfy { $0 > 0 }, "requests per worker node: \(ran)")
    }
}
