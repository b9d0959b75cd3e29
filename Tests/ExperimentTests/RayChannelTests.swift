import Foundation
import Testing
import TestSupport

/// The held-out channels of one host, mounted with `executor: ray`: the nodes run the held-out
/// requests, so what a held-out task leaves on its node (the page cache of a file train
/// sandboxes read too) is the node's to clear, and the gate's reply time is the supervisor's
/// to keep however long the nodes took.
extension RayClusterTests {
    @Test("the held-out channels with executor: ray: pages of a shared file that held-out tasks read on their nodes are gone from the page cache after the gate, a later train task's read timing does not single them out, and a worst_case gate ends reply_after seconds after it began")
    func heldOutChannelsOnTheCluster() throws {
        try requireRoot()
        let python = try Self.python()
        // Prepared on this host; the gate and the spy's run then go to two worker nodes, whose
        // policies include the test's shared-task policy as the supervisor's do.
        let replyAfter = 60.0
        let s = try PageCacheTests.setUp(extraConfig: ["reply_time": "worst_case\n  reply_after: \(Int(replyAfter))"])
        let keyFile = try Self.workerKeyFile(s.exp)
        let cluster = try Cluster(python: python, keyFile: keyFile, temp: s.exp.temp, workers: 2, environment: ["AUTOHARNESS_POLICY_DIR": s.dir.path])
        defer { cluster.stop() }
        let env = try Self.useCluster(s.exp, cluster, python: python)
        try s.exp.setAgent(PageCacheTests.toucher)
        let g = try Self.whenUpOnCluster { try autoharness(["gate", "-C", s.exp.root], environment: env) }
        #expect(g.status == 0 || g.status == 1, "\(g.stdout)\(g.stderr)")
        #expect(g.stderr.contains("executor: ray:"), "\(g.stderr)")
        // Both nodes took requests (the suite's and the held-out ones: the host runs none).
        let ran = [1, 2].map { FileSystemProbe.names(cluster.state("w\($0)") + "/nonces").count }
        #expect(ran.allSatisfy { $0 > 0 }, "requests per worker node: \(ran)")
        let left = try PageCacheTests.resident(s.blob)
        #expect(left.isDisjoint(with: s.heldOutPages), "held-out pages still cached after the gate: \(left.intersection(s.heldOutPages).sorted())")
        // Control: the same agent in a train request on a node leaves its pages cached (train
        // runs evict nothing), so the held-out tasks' reads did reach the host's page cache.
        let control = try autoharness(["benchmark", "--task-ids", s.train[0], "-C", s.exp.root], environment: env)
        #expect(control.status == 0 || control.status == 1, "\(control.stderr)")
        let read = try PageCacheTests.pages(for: try String(contentsOfFile: Experiment.fixture + "/tasks/\(s.train[0])/instruction.md", encoding: .utf8))
        #expect(read.isSubset(of: try PageCacheTests.resident(s.blob)), "a train task's pages were not cached: the nodes' sandboxes did not read the blob")
        // The reply waited for reply_after, not for the nodes (which took far less).
        let (d, _) = try ReplyTimeTests.gateDurations(s.exp)
        try #require(d.count == 1, "\(d)")
        #expect(d[0] > replyAfter - ReplyTimeTests.early && d[0] < replyAfter + ReplyTimeTests.lateOnWideGrid, "\(d)")
        // A later train task on a node times its reads: held-out pages no faster than untouched ones.
        let ratio = try PageCacheTests.spyRatio(s, environment: env).ratio
        #expect(ratio > 0.5, "held-out pages read \(String(format: "%.2f", ratio))× as long as untouched ones")
    }
}
