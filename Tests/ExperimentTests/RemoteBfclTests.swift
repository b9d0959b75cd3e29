import Benchmark
import Foundation
import Testing
import TestSupport
@testable import Execution
@testable import ExperimentModel

/// A BFCL shard on a worker node (`executor: ray`): the node rebuilds BFCL's adapter from its
/// own bfcl-eval install for the shard's ids and runs it in its own sandboxes; a node whose
/// copy of the files that decide rewards differs, or that lacks a shard's task, runs nothing.
@Suite("Remote work: a BFCL shard on the node", .serialized)
struct RemoteBfclTests {
    /// agent.py that never calls a function: irrelevance tasks pass, the others fail.
    static let noCall = "class HarnessAgent:\n    def run(self, messages, functions):\n        return 'no call'\n"

    /// BFCL's adapter as the supervisor builds it: two categories, three tasks each.
    static func adapter() throws -> BfclAdapter {
        let venv = try Bfcl.install()
        var tool = ToolSettings(command: ["python3"])
        tool.timeout = 300
        return try BfclAdapter(packageDirectory: try Bfcl.package(venv), environmentDirectory: venv, checkerPython: venv + "/bin/python",
                               scriptsDirectory: Built.packageRoot + "/templates/bfcl", tool: tool, categories: ["simple_python", "irrelevance"],
                               perCategory: 3, only: nil)
    }

    func request(_ node: RemoteWorkTests.Node, _ tool: NodeTool, _ ids: [String], heldOut: Bool, digest: String?? = .none) throws -> WorkRequest {
        try node.request(tool: tool, ids, agent: Array(Self.noCall.utf8), heldOut: heldOut, digest: digest)
    }

    @Test("a BFCL shard runs on the node from its own install: BFCL's checker's rewards and verdicts (held out: rewards only); another copy of the files that decide rewards, a task the node's copy lacks, a runner bind reaching the node's install, an install resolving elsewhere, or a VM named for a tool is refused before the nonce; the node's check reports the same digest as the supervisor's")
    func bfclShardRuns() throws {
        try requireRoot()
        let node = try RemoteWorkTests.Node()
        let adapter = try Self.adapter()
        let tool = try adapter.nodeTool
        guard case .bfcl(let settings) = tool else { Issue.record("not a BFCL node tool: \(tool)"); return }
        // What decides a reward is digested: the category files, their possible answers, the checker, the scripts.
        #expect(settings.digestedFiles.contains { $0.hasSuffix("/data/possible_answer/BFCL_v4_simple_python.json") }
                && settings.digestedFiles.contains { $0.hasSuffix("/eval_checker/ast_eval/ast_checker.py") }
                && settings.digestedFiles.contains { $0.hasSuffix("/bfcl_eval/model_handler/base_handler.py") }
                && settings.digestedFiles.contains { $0.hasSuffix("/bfcl_eval/constants/model_config.py") }
                && settings.digestedFiles.contains { $0.hasSuffix("/templates/bfcl/autoharness_bfcl_score.py") }, "\(settings.digestedFiles)")

        let train = try request(node, tool, ["irrelevance_1", "simple_python_2"], heldOut: false)
        #expect(train.tasks.allSatisfy { $0.files.isEmpty } && train.toolSHA256 != nil)
        let r = try node.serve(try node.sign(train))
        #expect(r.status == 0, "\(r.stderr)")
        let answer = try RemoteWork.check(Array(r.stdout.utf8), for: train)
        #expect(answer.outcomes.map(\.id) == ["irrelevance_1", "simple_python_2"] && answer.outcomes.map(\.reward) == [1, 0], "\(answer.outcomes)")
        // BFCL's verdict on the failed task (a text where a call was wanted) crosses as its trace.
        let verdict = try #require(answer.traces["simple_python_2"]?.first { $0.path == "verdict.json" }, "\(answer.traces.mapValues { $0.map(\.path) })")
        #expect(String(decoding: verdict.bytes, as: UTF8.self).contains("\"error_type\": \"ast_decoder:decoder_failed\""), "\(String(decoding: verdict.bytes, as: UTF8.self))")

        let held = try request(node, tool, ["irrelevance_0", "simple_python_0"], heldOut: true)
        let h = try node.serve(try node.sign(held))
        #expect(h.status == 0, "\(h.stderr)")
        let heldAnswer = try RemoteWork.check(Array(h.stdout.utf8), for: held, answerKey: node.answerKey)
        #expect(heldAnswer.outcomes.map(\.reward) == [1, 0] && heldAnswer.traces.isEmpty, "\(heldAnswer.outcomes)")
        #expect(heldAnswer.outcomes.allSatisfy { $0.detail == nil && $0.failures == nil }, "\(heldAnswer.outcomes)")
        #expect(node.nonces.count == 2 && node.workDirectories.isEmpty)

        // Refused before the nonce: the supervisor's files differ from the node's (another
        // bfcl-eval there)...
        let other = try request(node, tool, ["irrelevance_1"], heldOut: false, digest: .some(String(repeating: "0", count: 64)))
        let o = try node.serve(try node.sign(other))
        #expect(o.status != 0 && o.stderr.contains("this node's copy of the tool's files") && o.stderr.contains("is not the supervisor's (0000000000000000)")
                && !node.nonces.contains(other.nonce), "\(o.stderr)")
        // ...a task of a category the run does not have...
        let stray = try request(node, tool, ["multiple_0"], heldOut: false)
        let s = try node.serve(try node.sign(stray))
        #expect(s.status != 0 && s.stderr.contains("this node's copy of the tool cannot run the shard's tasks") && s.stderr.contains("multiple_0")
                && !node.nonces.contains(stray.nonce), "\(s.stderr)")
        // ...a runner bind that would show agent.py this node's install (its possible answers),
        // or an install that resolves elsewhere here than on the supervisor's host...
        guard case .bfcl(var exposed) = tool else { return }
        exposed.tool.binds = [(settings.environmentDirectory as NSString).deletingLastPathComponent]
        let bound = try request(node, .bfcl(exposed), ["irrelevance_1"], heldOut: false)
        let e = try node.serve(try node.sign(bound))
        #expect(e.status != 0 && e.stderr.contains("on this node, runner.binds:") && e.stderr.contains("whose data/possible_answer/ holds every task's answer")
                && !node.nonces.contains(bound.nonce), "\(e.stderr)")
        var moved = settings
        moved.environmentRealPath = "/elsewhere/bfcl-venv"
        let elsewhere = try request(node, .bfcl(moved), ["irrelevance_1"], heldOut: false)
        let m = try node.serve(try node.sign(elsewhere))
        #expect(m.status != 0 && m.stderr.contains("resolves to \(settings.environmentRealPath), not to /elsewhere/bfcl-venv") && !node.nonces.contains(elsewhere.nonce),
                "\(m.stderr)")
        // ...and a tool's held-out request naming a VM (not built for tools).
        var inVM = try request(node, tool, ["irrelevance_2"], heldOut: true)
        inVM.vm = VMSettings()
        let v = try node.serve(try node.sign(inVM))
        #expect(v.status != 0 && v.stderr.contains("a tool benchmark's request names a held-out VM") && !node.nonces.contains(inVM.nonce), "\(v.stderr)")
        #expect(node.nonces.count == 2 && node.workDirectories.isEmpty)

        // The node's check reports the digest of the files the supervisor names; one file more
        // or less is another digest, and such a node is given nothing.
        func check(_ files: [String]) throws -> NodeReport {
            let r = try runProcess(Built.autoharness, ["worker", "--check", "--state", node.state, "--policy-dir", Built.packageRoot + "/policies"]
                                   + files.flatMap { ["--check-digest", $0] })
            return try JSONDecoder().decode(NodeReport.self, from: Data(r.stdout.utf8))
        }
        let same = try check(settings.digestedFiles)
        #expect(same.toolSHA256 == train.toolSHA256 && same.toolSHA256 != nil)
        let fewer = try check(Array(settings.digestedFiles.dropLast()))
        #expect(fewer.toolSHA256 != train.toolSHA256)
        #expect(NodeCheck.unusable(fewer, binarySHA256: fewer.binarySHA256, policiesSHA256: fewer.policiesSHA256, toolSHA256: train.toolSHA256)?
                    .contains("its copy of the tool's files") == true)
        let missing = try check(settings.digestedFiles + ["/nonexistent/bfcl/file.py"])
        #expect(missing.toolSHA256 == nil && missing.problems.contains { $0.contains("/nonexistent/bfcl/file.py") }, "\(missing.problems)")
    }
}
