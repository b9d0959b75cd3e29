import Benchmark
import Foundation
import Testing
import TestSupport
@testable import Execution
@testable import ExperimentModel

/// An inspect shard on a worker node (`executor: ray`), with the real inspect_ai and the
/// example task: the node holds inspect at the supervisor's paths but not the experiment's
/// frozen samples, so each request carries its samples' lines (a held-out one sealed), and
/// the node runs the solve phase with agent.py and the task's scorers without it, as one host.
@Suite("Remote work: an inspect shard on the node", .serialized)
struct RemoteInspectTests {
    @Test("an inspect shard runs on the node from the samples its request carries: exact()'s rewards and verdicts (held out: rewards only); a task without its sample, a sample under another id, another copy of inspect's or the task's code, or a runner bind of inspect's install is refused before the nonce")
    func inspectShardRuns() throws {
        try requireRoot()
        let exp = try InspectTests().make()
        defer { exp.removeScratch() }
        let venv = try Inspect.install()
        let site = try #require(FileSystemProbe.names(venv + "/lib").first { $0.hasPrefix("python") }.map { venv + "/lib/" + $0 + "/site-packages" })
        let scripts = Built.packageRoot + "/templates/inspect"
        var tool = ToolSettings(command: [venv + "/bin/python"])
        tool.timeout = 600
        var adapter = try InspectAdapter(environmentDirectory: venv, sitePackages: site, python: venv + "/bin/python", scriptsDirectory: scripts,
                                         taskSpec: scripts + "/theory_of_mind.py@theory_of_mind", samplesFile: exp.root + "/.autoharness/inspect-samples.jsonl",
                                         tool: tool, only: nil)
        adapter.agentModel = "mockllm/model"
        let nodeTool = try adapter.nodeTool
        guard case .inspect(let settings) = nodeTool else { Issue.record("not an inspect node tool: \(nodeTool)"); return }
        // What decides a reward is digested: inspect's scorers, the task file, autoharness's scripts.
        #expect(settings.digestedFiles.contains { $0.hasSuffix("/inspect_ai/scorer/_match.py") }
                && settings.digestedFiles.contains(scripts + "/theory_of_mind.py")
                && settings.digestedFiles.contains(scripts + "/autoharness_inspect_score.py"), "\(settings.digestedFiles.filter { !$0.contains("/inspect_ai/") })")

        let node = try RemoteWorkTests.Node()
        let frozen = try Inspect.samples(exp)
        let agent = Array(Inspect.heuristic.utf8)
        func request(_ ids: [String], heldOut: Bool, tool: NodeTool = nodeTool, digest: String?? = .none,
                     data: @escaping (String) -> [UInt8]? = { adapter.nodeData($0) }) throws -> WorkRequest {
            try node.request(tool: tool, ids, agent: agent, heldOut: heldOut, digest: digest, nodeData: data)
        }
        // Samples the heuristic passes and fails (exact() against the frozen targets).
        let ids = frozen.keys.sorted()
        let passing = ids.filter { frozen[$0].map(Inspect.heuristicPasses) == true }, failing = ids.filter { !passing.contains($0) }
        try #require(passing.count >= 4 && failing.count >= 3, "\(passing.count) passing, \(failing.count) failing")
        // The sample's whole line travels with its id (target and all); nothing else does.
        let train = try request([passing[0], failing[0], passing[1]], heldOut: false)
        #expect(train.tasks.allSatisfy { $0.files.count == 1 && $0.files[0].path == NodeToolWork.dataFile })
        let r = try node.serve(try node.sign(train))
        #expect(r.status == 0, "\(r.stderr)")
        let answer = try RemoteWork.check(Array(r.stdout.utf8), for: train)
        func rewards(_ r: WorkRequest) -> [Double] { r.tasks.map { frozen[$0.id].map(Inspect.heuristicPasses) == true ? 1.0 : 0.0 } }
        let expected = rewards(train)
        #expect(answer.outcomes.map(\.reward) == expected && expected == [1, 0, 1], "\(answer.outcomes)")
        #expect(answer.traces.values.contains { $0.contains { $0.path == "verdict.json" } }, "\(answer.traces.mapValues { $0.map(\.path) })")

        let held = try request([failing[1], passing[2]], heldOut: true)
        let h = try node.serve(try node.sign(held))
        #expect(h.status == 0, "\(h.stderr)")
        let heldAnswer = try RemoteWork.check(Array(h.stdout.utf8), for: held, answerKey: node.answerKey)
        #expect(heldAnswer.outcomes.map(\.reward) == rewards(held) && rewards(held) == [0, 1], "\(heldAnswer.outcomes)")
        #expect(heldAnswer.traces.isEmpty && heldAnswer.outcomes.allSatisfy { $0.detail == nil && $0.failures == nil }, "\(heldAnswer.outcomes)")
        #expect(node.nonces.count == 2 && node.workDirectories.isEmpty)

        func refused(_ request: WorkRequest, _ words: [String]) throws {
            let o = try node.serve(try node.sign(request))
            #expect(o.status != 0 && words.allSatisfy(o.stderr.contains) && !node.nonces.contains(request.nonce), "\(words): \(o.stderr)")
        }
        // Refused before the nonce: a task sent without its sample...
        let other = failing[2]
        try refused(try request([other], heldOut: false, data: { _ in nil }), ["sends files its tool does not take"])
        // ...a sample under another id (the task carries another task's sample)...
        try refused(try request([other], heldOut: false, data: { _ in adapter.nodeData(passing[0]) }), ["this node's copy of the tool cannot run the shard's tasks"])
        // ...two tasks whose lines were swapped (each line's id must be its task's)...
        let (x, y) = (failing[2], passing[3])
        try refused(try request([x, y], heldOut: false, data: { adapter.nodeData($0 == x ? y : x) }), ["this node's copy of the tool cannot run the shard's tasks", "under its id"])
        // ...another copy of the files that decide rewards...
        try refused(try request([other], heldOut: false, digest: .some(String(repeating: "0", count: 64))), ["is not the supervisor's (0000000000000000)"])
        // ...and a runner bind of inspect's install (its packaged datasets are hidden by path).
        var exposed = settings
        exposed.tool.binds = [venv]
        try refused(try request([other], heldOut: false, tool: .inspect(exposed)), ["on this node, runner.binds: \(venv) is inspect_ai's install"])
        #expect(node.nonces.count == 2 && node.workDirectories.isEmpty)
        // A sample too large for a request is the supervisor's usage error, naming it.
        #expect { _ = try request([other], heldOut: false, data: { _ in [UInt8](repeating: 0x20, count: WorkLimits.maxFile + 1) }) } throws: {
            "\($0)".contains("task \(other): its data for the node is") && "\($0)".contains("over the \(WorkLimits.maxFile)")
        }
    }
}
