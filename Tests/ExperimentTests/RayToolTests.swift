import Foundation
import Testing
import TestSupport
@testable import Experiment
import Execution
@testable import ExperimentModel

/// Tool benchmarks (`NodeTool`) with `executor: ray`: each run's ids in shards across two
/// worker nodes of a real cluster, each node running the tool on its shard in its own
/// sandboxes, from its own install at the supervisor's paths.
extension RayClusterTests {
    @Test("a command benchmark with executor: ray: each run's ids in shards across two worker nodes, each running the tool on its shard in its own sandboxes; prepare, a benchmark and a gate give what one machine gives (baseline, split, train rewards and traces, the gate)")
    func commandAcrossTheCluster() throws {
        try requireRoot()
        try Self.sameAsOneMachine(baseline: "baseline: 3/12 tasks pass", trace: "answer.txt", v2: SquareAgents.upTo(6), perRequest: 6) {
            let exp = try Experiment(benchmark: "command")
            try exp.set("tasks", "[" + (1...12).map { "sq-\($0)" }.joined(separator: ", ") + "]")
            try exp.set("command", "[python3, \(Tools.root)/command_bench.py, --tasks, \"{task_ids_file}\", --out, \"{output}\"]", in: "runner")
            try exp.set("binds", "[\(Tools.root)]", in: "runner")
            try exp.setAgent(SquareAgents.upTo(3))
            return exp
        }
    }

    @Test("BFCL with executor: ray: its real tasks in shards across two worker nodes, each node reading them from its own bfcl-eval and grading with BFCL's checker there; prepare, a benchmark and a gate give what one machine gives (baseline, split, train rewards and BFCL's verdicts, the gate)")
    func bfclAcrossTheCluster() throws {
        try requireRoot()
        let venv = try Bfcl.install()
        // v2 calls the first function offered with no arguments: BFCL's checker fails it on
        // the simple tasks (a missing parameter) and on the irrelevance ones (a call).
        let calls = "class HarnessAgent:\n    def run(self, messages, functions):\n"
            + "        return [{'name': functions[0]['name'], 'arguments': {}}]\n"
        try Self.sameAsOneMachine(baseline: "baseline: 4/8 tasks pass", trace: "verdict.json", v2: calls, perRequest: 3) {
            let exp = try Experiment(benchmark: "bfcl", extraArgs: ["--tool", venv + "/bin/bfcl"])
            let path = exp.root + "/experiment_config.yaml"
            let text = try String(contentsOfFile: path, encoding: .utf8)
            try text.replacingOccurrences(of: "# tasks_per_category: 20 ", with: "tasks_per_category: 4 ").write(toFile: path, atomically: true, encoding: .utf8)
            try exp.set("categories", "[simple_python, irrelevance]")
            // agent.py reaches no model: no key, no inference gate (a node would need both).
            try exp.set("env_pass", "[]", in: "runner")
            try exp.set("inference", "[]", in: "runner")
            try exp.set("min_improvement", "0", in: "gate")
            try exp.setAgent(RemoteBfclTests.noCall)
            return exp
        }
    }

    @Test("tau-bench with executor: ray: the tau2 stand-in's retail tasks in shards across two worker nodes, each node running agent.py against its own copy of the data without expected actions and re-scoring without agent.py; prepare, a benchmark and a gate give what one machine gives (tau2's own split, train rewards and reward breakdowns, the gate)")
    func tau2AcrossTheCluster() throws {
        try requireRoot()
        try Self.sameAsOneMachine(baseline: "baseline: 0/12 tasks pass", trace: "reward_info.json", v2: Tau2Agents.refunding(reasons: ["broken"]),
                                  perRequest: 6, environment: Tau2AdapterTests.env) {
            let exp = try Tau2AdapterTests().make()
            try exp.set("min_improvement", "0", in: "gate")
            return exp
        }
    }

    @Test("inspect with executor: ray: the example task's samples in shards across two worker nodes, each request carrying its samples' frozen lines (a held-out one sealed), each node solving with agent.py and scoring with the task's scorers without it; prepare, a benchmark and a gate give what one machine gives (baseline, split, train rewards and exact()'s verdicts, the gate)")
    func inspectAcrossTheCluster() throws {
        try requireRoot()
        try Self.sameAsOneMachine(baseline: "baseline: 0/8 tasks pass", trace: "verdict.json", v2: Inspect.heuristic, perRequest: 4) {
            try InspectTests().make(samples: 8)
        }
    }

    @Test("gate.infra_retries with executor: ray: a vendor failing a fifth of held-out calls, reached from each node through the node's own inference gate; each task's run counts its vendor failures there, the held-out answers carry the counts, the supervisor runs those tasks again, and the gates decide as one machine's against a vendor that never fails")
    func infraRetriesOnTheCluster() throws {
        try requireRoot()
        let python = try Self.python()
        let keys = ["FAKE_API_KEY": InfraRetryTests.trainKey, "FAKE_HELD_OUT_KEY": InfraRetryTests.heldOutKey]
        func make() throws -> Experiment {
            let exp = try CommandAdapterTests().make()
            try exp.set("env_pass", "[FAKE_API_KEY]", in: "runner")
            try exp.set("held_out_runtime", "host\n  held_out_env: {FAKE_API_KEY: FAKE_HELD_OUT_KEY}", in: "gate")
            try exp.set("infra_retries", "5", in: "gate")
            return exp
        }
        let remote = try make()
        defer { remote.removeScratch() }
        let keyFile = try Self.workerKeyFile(remote)
        // The nodes hold the keys (both accounts'); the vendors listen on the cluster's bridge,
        // which this host and every node reach.
        let cluster = try Cluster(python: python, keyFile: keyFile, temp: remote.temp, workers: 2, environment: keys)
        defer { cluster.stop() }
        let failing = try FakeModel(turns: [], outage: ["--fail-account", InfraRetryTests.heldOutKey, "--fail-rate", "0.2", "--fail-seed", "7"],
                                    host: "\(cluster.subnet).1")
        func agent(_ limit: Int, _ tag: Int, _ model: FakeModel) -> String {
            InfraRetryTests.agent(limit: limit, tag: tag).replacingOccurrences(of: "os.environ[\"FAKE_MODEL\"]", with: "\"\(model.address)\"")
        }
        try remote.set("inference", "[\"\(failing.address)\"]\n    upstream_ca: \(failing.caFile)", in: "runner")
        try remote.setAgent(agent(1, 0, failing))
        let env = try Self.useCluster(remote, cluster, python: python).merging(keys) { _, k in k }
        // Three tasks a shard: the node runs each alone, and each count is its task's.
        let config = remote.root + "/experiment_config.yaml"
        try (try String(contentsOfFile: config, encoding: .utf8) + "  tasks_per_request: 3\n").write(toFile: config, atomically: true, encoding: .utf8)
        func onCluster(_ args: String...) throws -> Run { try autoharness(args + ["-C", remote.root], environment: env) }
        let prepared = try Self.whenUpOnCluster { try onCluster("prepare") }
        try #require(prepared.status == 0, "\(prepared.stdout) \(prepared.stderr)")
        // One machine's decisions for the same gates against a vendor that never fails are
        // InfraRetryTests.cleanOutcomes (that test runs them each time and compares).
        for (i, limit) in InfraRetryTests.limits.prefix(6).enumerated() {
            try remote.setAgent(agent(limit, i + 1, failing))
            let g = try onCluster("gate")
            try #require(g.status == 0 || g.status == 1, "\(g.stdout)\(g.stderr)")
        }
        let there = try remote.rows("gate_attempt").map { "\($0["outcome"] ?? "-") \($0["valScore"] ?? "-")" }
        let here = Array(InfraRetryTests.cleanOutcomes.prefix(6))
        #expect(there == here, "with failures, on the cluster:\n\(there)\nwithout, on one machine:\n\(here)")
        #expect(Set(here.map { $0.split(separator: " ")[0] }).count > 1, "\(here)")
        // Every held-out call the vendor failed was counted on its node and retried.
        let failed = failing.requests().filter { $0["failed"] != nil }.count
        let baseline = try #require(try remote.rows("baseline").first)
        let accounts = ([baseline] + (try remote.rows("gate_attempt"))).compactMap { $0["infraRetries"] as? [String: Any] }
        let counted = accounts.reduce(0) { $0 + ($1["failures"] as? Int ?? 0) }
        let retried = accounts.reduce(0) { $0 + ($1["retried"] as? Int ?? 0) }
        #expect(failed > 0 && counted == failed && retried == failed, "vendor failed \(failed), gates counted \(counted), retried \(retried)")
        // Both worker nodes ran held-out requests; none ran on the head.
        #expect([1, 2].allSatisfy { !FileSystemProbe.names(cluster.state("w\($0)") + "/nonces").isEmpty })
        #expect(FileSystemProbe.names(cluster.state("head") + "/nonces").isEmpty)
    }

    /// `make()`'s experiment run twice, on this host and with `executor: ray` across two worker
    /// nodes (`perRequest` tasks a shard): prepare (its baseline line `baseline`), a
    /// benchmark with agent.py `v2` (every train task's `trace` file the same) and a gate agree.
    /// `check`, when given, then looks at the cluster and the cluster's prepare, benchmark and gate.
    /// `environment`: variables the supervisor and every node run with (what `env_pass` names).
    static func sameAsOneMachine(baseline: String, trace: String, v2: String, perRequest: Int, environment: [String: String] = [:],
                                 driverUser: DriverUser? = nil, check: ((Cluster, [Run]) throws -> Void)? = nil, _ make: () throws -> Experiment) throws {
        let python = try Self.python()
        let local = try make()
        defer { local.removeScratch() }
        let remote = try make()
        defer { remote.removeScratch() }
        let keyFile = try Self.workerKeyFile(remote)
        let cluster = try Cluster(python: python, keyFile: keyFile, temp: remote.temp, workers: 2, environment: environment, headUser: driverUser)
        defer { cluster.stop() }
        let env = try Self.useCluster(remote, cluster, python: python).merging(environment) { _, given in given }
        let config = remote.root + "/experiment_config.yaml"
        let user = driverUser.map { "  driver_user: \"\($0.uid):\($0.gid)\"\n" } ?? ""
        try (try String(contentsOfFile: config, encoding: .utf8) + "  tasks_per_request: \(perRequest)\n" + user).write(toFile: config, atomically: true, encoding: .utf8)
        func onCluster(_ args: String...) throws -> Run { try autoharness(args + ["-C", remote.root], environment: env) }

        let prepared = try Self.whenUpOnCluster { try onCluster("prepare") }
        try #require(prepared.status == 0, "\(prepared.stdout) \(prepared.stderr)")
        #expect(prepared.stderr.contains("executor: ray: "), "\(prepared.stderr)")
        let here = try local.run(["prepare"], environment: environment)
        try #require(here.status == 0, "\(here.stderr)")
        #expect(try remote.split() == local.split())
        #expect(try remote.baselineScores() == local.baselineScores())
        #expect(prepared.stdout.contains(baseline), "\(prepared.stdout)")

        // agent.py v2: the train runs agree, reward and trace.
        for e in [local, remote] { try e.setAgent(v2) }
        let b1 = try local.run(["benchmark"], environment: environment)
        let b2 = try onCluster("benchmark")
        #expect(b1.status == 0 && b2.status == 0 && b1.stdout == b2.stdout, "\(b1.stdout)\n---\n\(b2.stdout)\(b2.stderr)")
        var traced = 0
        for id in try local.split().train where local.traceFile(id, trace) != nil {
            #expect(remote.traceFile(id, trace) == local.traceFile(id, trace), "\(id)")
            traced += 1
        }
        #expect(traced > 0, "no train task left a \(trace)")
        let g1 = try local.run(["gate"], environment: environment)
        let g2 = try onCluster("gate")
        let uncommitted = { (s: String) in s.replacing(#/committed as [0-9a-f]+/#, with: "committed as X") }
        #expect(g1.status == g2.status && uncommitted(g1.stdout) == uncommitted(g2.stdout), "\(g1.stdout)\n---\n\(g2.stdout) \(g2.stderr)")
        #expect(try remote.lastGateScores() == local.lastGateScores())
        // Both worker nodes took shards; none ran on the head.
        let ran = [1, 2].map { FileSystemProbe.names(cluster.state("w\($0)") + "/nonces").count }
        #expect(ran.allSatisfy { $0 > 0 }, "requests per worker node: \(ran)")
        #expect(FileSystemProbe.names(cluster.state("head") + "/nonces").isEmpty, "a shard ran on the head")
        #expect(remote.scratchMounts().isEmpty)
        try check?(cluster, [prepared, b2, g2])
    }

    /// The file holding `remote`'s work key's public half (what a node's operator installs).
    static func workerKeyFile(_ remote: Experiment) throws -> String {
        let key = try autoharness(["worker-key", "-C", remote.root])
        try #require(key.status == 0, "\(key.stderr)")
        let keyFile = remote.temp.file("supervisor.pub")
        try key.stdout.write(toFile: keyFile, atomically: true, encoding: .utf8)
        return keyFile
    }
}
