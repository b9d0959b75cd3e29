import Benchmark
import Foundation
import SupervisorIO
import Testing
import TestSupport
@testable import Execution
@testable import ExperimentModel

/// A tau-bench shard on a worker node (`executor: ray`), with the tau2 stand-in of the adapter
/// tests (Fixtures/tools/tau2, following tau2-bench 1.0.1's code paths): the node rebuilds the
/// adapter from its own copy of tau2's data for the shard's ids, runs agent.py in its runner
/// against data without answers and re-scores without agent.py; a node whose copy of what
/// decides rewards differs, that lacks a shard's task, or whose runner could see the data
/// runs nothing.
@Suite("Remote work: a tau-bench shard on the node", .serialized)
struct RemoteTau2Tests {
    /// tau-bench's adapter as the supervisor builds it (retail, the stand-in's package bound).
    static func adapter() throws -> Tau2Adapter {
        var tool = ToolSettings(command: ["/usr/bin/python3"])
        tool.binds = [Tau2AdapterTests.pkg]
        tool.envPass = ["FAKE_MODE", "PYTHONPATH"]
        tool.timeout = 300
        let data = InstalledTree.realPath(Tau2AdapterTests.data)
        return try Tau2Adapter(domain: "retail", dataDirectory: data, scriptsDirectory: Built.packageRoot + "/templates/tau-bench", tool: tool,
                               layout: try #require(Tau2Domain.known["retail"]))
    }

    func request(_ node: RemoteWorkTests.Node, _ tool: NodeTool, _ ids: [String], heldOut: Bool, agent: String, digest: String?? = .none) throws -> WorkRequest {
        try node.request(tool: tool, ids, agent: Array(agent.utf8), heldOut: heldOut, digest: digest)
    }

    @Test("a domain directory that is a link is refused when the adapter is built (the listing a node's copy is compared by would not follow it, and two empty listings match); a data directory behind a link digests, by their resolved paths, the files the directory itself does")
    func linkedDataDigested() throws {
        let temp = try TempDir()
        let real = InstalledTree.realPath(Tau2AdapterTests.data)
        let supervisor = try Self.adapter()
        func adapter(_ data: String) throws -> Tau2Adapter {
            try Tau2Adapter(domain: "retail", dataDirectory: data, scriptsDirectory: supervisor.scriptsDirectory, tool: supervisor.tool, layout: supervisor.layout)
        }
        let data = temp.file("data"), elsewhere = temp.file("retail-elsewhere")
        try FileManager.default.copyItem(atPath: real, toPath: data)
        try FileManager.default.moveItem(atPath: data + "/tau2/domains/retail", toPath: elsewhere)
        try FileManager.default.createSymbolicLink(atPath: data + "/tau2/domains/retail", withDestinationPath: elsewhere)
        #expect { _ = try adapter(data) } throws: { "\($0)".contains("tau2 domain retail: \(data)/tau2/domains/retail: Not a directory") }

        let link = temp.file("data-link")
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: real)
        guard case .tau2(let linked) = try adapter(link).nodeTool, case .tau2(let direct) = try supervisor.nodeTool else {
            Issue.record("not tau2 node tools"); return
        }
        // Listed where the link leads, by the same paths as the directory itself (which the
        // digest hashes with each file's bytes).
        let domain = { (files: [String]) in files.filter { $0.hasPrefix(real + "/tau2/domains/retail/") } }
        #expect(domain(direct.digestedFiles).contains(real + "/tau2/domains/retail/tasks.json"), "\(direct.digestedFiles)")
        #expect(domain(linked.digestedFiles) == domain(direct.digestedFiles), "\(linked.digestedFiles)")
    }

    @Test("a tau-bench shard runs on the node from its own copy of tau2's data: the re-scored rewards and traces (held out: rewards only); another copy of what decides rewards (a task's expected actions, tau2's evaluator), a task the node's data lacks, a runner bind reaching the data, or data behind a link is refused before the nonce")
    func tau2ShardRuns() throws {
        try requireRoot()
        let node = try RemoteWorkTests.Node()
        let adapter = try Self.adapter()
        let tool = try adapter.nodeTool
        guard case .tau2(let settings) = tool else { Issue.record("not a tau2 node tool: \(tool)"); return }
        // What decides a reward is digested: the tasks with their expected actions, the
        // database, tau2's evaluator, autoharness's scripts.
        #expect(settings.digestedFiles.contains { $0.hasSuffix("/tau2/domains/retail/tasks.json") }
                && settings.digestedFiles.contains { $0.hasSuffix("/tau2/domains/retail/db.json") }
                && settings.digestedFiles.contains { $0.hasSuffix("/tau2/user_simulator/simulation_guidelines.md") }
                && settings.digestedFiles.contains { $0.hasSuffix("/pkg/tau2/__init__.py") }
                && settings.digestedFiles.contains { $0.hasSuffix("/templates/tau-bench/autoharness_tau2_score.py") }, "\(settings.digestedFiles)")
        let env = Tau2AdapterTests.env
        // Orders 0 and 3 have reason "broken" (solved by this agent); order 1 does not.
        let agent = Tau2Agents.refunding(reasons: ["broken"])
        let train = try request(node, tool, ["0", "1", "3"], heldOut: false, agent: agent)
        let r = try node.serve(try node.sign(train), environment: env)
        #expect(r.status == 0, "\(r.stderr)")
        let answer = try RemoteWork.check(Array(r.stdout.utf8), for: train)
        #expect(answer.outcomes.map(\.reward) == [1, 0, 1], "\(answer.outcomes)")
        // tau2's reward breakdown for the failed task crosses as its trace.
        let info = try #require(answer.traces["1"]?.first { $0.path == "reward_info.json" }, "\(answer.traces.mapValues { $0.map(\.path) })")
        #expect(String(decoding: info.bytes, as: UTF8.self).contains("\"action_match\": false"))

        let held = try request(node, tool, ["7", "8"], heldOut: true, agent: Tau2Agents.refunding(reasons: ["broken", "late", "wrong_size"]))
        let h = try node.serve(try node.sign(held), environment: env)
        #expect(h.status == 0, "\(h.stderr)")
        let heldAnswer = try RemoteWork.check(Array(h.stdout.utf8), for: held, answerKey: node.answerKey)
        #expect(heldAnswer.outcomes.map(\.reward) == [1, 1] && heldAnswer.traces.isEmpty, "\(heldAnswer.outcomes)")
        #expect(heldAnswer.outcomes.allSatisfy { $0.detail == nil && $0.failures == nil }, "\(heldAnswer.outcomes)")
        #expect(node.nonces.count == 2 && node.workDirectories.isEmpty)

        func refused(_ request: WorkRequest, _ words: [String]) throws {
            let o = try node.serve(try node.sign(request), environment: env)
            #expect(o.status != 0 && words.allSatisfy(o.stderr.contains) && !node.nonces.contains(request.nonce), "\(words): \(o.stderr)")
        }
        // Refused before the nonce: the supervisor's files differ from the node's...
        try refused(try request(node, tool, ["0"], heldOut: false, agent: agent, digest: .some(String(repeating: "0", count: 64))),
                    ["this node's copy of the tool's files", "is not the supervisor's (0000000000000000)"])
        // ...a task the node's data does not have...
        try refused(try request(node, tool, ["no-such-task"], heldOut: false, agent: agent),
                    ["this node's copy of the tool cannot run the shard's tasks", "no-such-task"])
        // ...a runner bind that would show agent.py the node's data (every expected action)...
        var exposed = settings
        exposed.tool.binds = [Tau2Agents.fixture]
        try refused(try request(node, .tau2(exposed), ["0"], heldOut: false, agent: agent), ["on this node, runner.binds:", "contains tau2_data_dir"])
        // ...a scripts directory that holds the data (it is mounted into the runner too)...
        var scriptsExposed = settings
        scriptsExposed.scriptsDirectory = Tau2Agents.fixture
        try refused(try request(node, .tau2(scriptsExposed), ["0"], heldOut: false, agent: agent), ["on this node, runner.scripts:", "contains tau2_data_dir"])
        // ...a runner bind of where a link inside the data takes the domain's directory...
        let elsewhere = node.temp.file("retail-elsewhere"), linkedData = node.temp.file("linked-data")
        try FileManager.default.copyItem(atPath: settings.dataDirectory + "/tau2/domains/retail", toPath: elsewhere)
        try FileManager.default.createDirectory(atPath: linkedData + "/tau2/domains", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: linkedData + "/tau2/domains/retail", withDestinationPath: elsewhere)
        var domainLinked = settings
        domainLinked.dataDirectory = linkedData
        domainLinked.tool.binds = [elsewhere]
        try refused(try request(node, .tau2(domainLinked), ["0"], heldOut: false, agent: agent), ["on this node, runner.binds: \(elsewhere) contains tau2's retail domain"])
        // ...and data that is a link here (the supervisor resolved its own).
        let link = node.temp.file("data-link")
        try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: settings.dataDirectory)
        var linked = settings
        linked.dataDirectory = link
        try refused(try request(node, .tau2(linked), ["0"], heldOut: false, agent: agent), ["tau2's data directory \(link) resolves to \(settings.dataDirectory)"])
        #expect(node.nonces.count == 2 && node.workDirectories.isEmpty)

        // No runner bind holding tau2's code: nothing to compare a node's evaluator with.
        var bare = adapter.tool
        bare.binds = []
        let unbound = try Tau2Adapter(domain: "retail", dataDirectory: settings.dataDirectory, scriptsDirectory: settings.scriptsDirectory, tool: bare, layout: settings.layout)
        #expect { _ = try unbound.nodeTool } throws: { "\($0)".contains("no runner bind holds tau2's code") }
    }
}
