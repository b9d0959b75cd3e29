import Benchmark
import Foundation
import Testing
import TestSupport
@testable import Execution
@testable import ExperimentModel

/// Terminal-Bench tasks on a worker node (`executor: ray`, `env_provider: local`), with the
/// real Harbor: each task travels with its files, as a local benchmark's does (a held-out one
/// sealed), and the node runs its agent phase through its own Harbor (at the supervisor's
/// paths) and its tests in autoharness's verifier sandbox, as one host does.
@Suite("Remote work: Harbor tasks on the node", .serialized)
struct RemoteHarborTests {
    /// Solves every task but hello-3, whose seed it leaves alone.
    static let agent = RealHarborTests.harborAgent(run: """
        r = await environment.exec("grep -q word-3 seed.txt || cp seed.txt out.txt")
        print("exec:", r.return_code)
        """)

    @Test("Harbor tasks run on the node from the files their request carries: the verifier's rewards, Harbor's result under the task's [task] name and the failing test's report in the train trace (held out: rewards only, sealed); another copy of autoharness's Harbor environment, a Harbor install the node lacks, two tasks of one Harbor name, a runner bind reaching the worker's own state, or (held out) a runner policy the node cannot enforce is refused before the nonce; a task whose image was refused is refused on the node too; only env_provider: local and a dataset directory go to nodes, said before a run and not when the record is read")
    func harborTasksRun() throws {
        try requireRoot()
        let harbor = try RealHarborTests.harbor()
        let data = try TempDir()
        _ = try RealHarborTests.dataset(in: data.path)
        let exp = try RealHarborTests.localExperiment(harbor: harbor, dataset: data.path)
        defer { exp.removeScratch() }
        let config = try ExperimentConfig.load(exp.root + "/experiment_config.yaml")
        let adapter = try #require(try config.makeAdapter(root: exp.root, checkTools: false) as? HarborAdapter)
        let settings = try adapter.node
        #expect(settings.digestedFiles == [Built.packageRoot + "/templates/terminal-bench/autoharness_harbor_env.py"], "\(settings.digestedFiles)")
        #expect(settings.requiredPaths.contains(harbor) || settings.tool.binds.contains { harbor.hasPrefix($0) }, "\(settings.requiredPaths)")
        // A held-out request's node is checked for the runner's policy too.
        let node = try RemoteWorkTests.Node()
        let agent = Array(Self.agent.utf8)
        func request(_ ids: [String], heldOut: Bool, harbor: HarborNode = settings, digest: String?? = .none) throws -> WorkRequest {
            try node.request(harbor: harbor, ids.map(adapter.boundedTask), agent: agent, heldOut: heldOut, digest: digest)
        }

        // The tasks' files travel (their tests too, never their solution), with Harbor's settings.
        let train = try request(["hello-1", "hello-3"], heldOut: false)
        #expect(train.tasks.allSatisfy { t in t.files.contains { $0.path == "tests/test.sh" } && !t.files.contains { $0.path.hasPrefix("solution/") } })
        #expect(RayNodeExecutor.checkedPolicies([train], otherwise: []) == ["benchmark-task", "verifier", settings.tool.runnerPolicy])
        let r = try node.serve(try node.sign(train))
        #expect(r.status == 0, "\(r.stderr)")
        let answer = try RemoteWork.check(Array(r.stdout.utf8), for: train)
        #expect(answer.outcomes.map(\.reward) == [1, 0], "\(answer.outcomes) \(r.stderr)")
        // Harbor ran the agent phase (its result names hello-1 by directory, hello-3 by [task]
        // name); autoharness's verifier wrote the reward and the failing test's report.
        func file(_ id: String, _ path: String) -> String? { answer.traces[id]?.first { $0.path == path }.map { String(decoding: $0.bytes, as: UTF8.self) } }
        func harborName(_ id: String) -> String? {
            file(id, "harbor-result.json").flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }?["task_name"] as? String
        }
        #expect(harborName("hello-1") == "hello-1" && harborName("hello-3") == "autoharness-test/hello-3", "\(answer.traces["hello-1"]?.map(\.path) ?? [])")
        #expect(file("hello-1", "reward.txt")?.hasPrefix("1") == true && file("hello-3", "reward.txt")?.hasPrefix("0") == true)
        #expect(answer.traces["hello-3"]?.contains { String(decoding: $0.bytes, as: UTF8.self).contains("HARBORMARK-hello-3") } == true)

        let held = try request(["hello-2", "hello-3"], heldOut: true)
        let h = try node.serve(try node.sign(held))
        #expect(h.status == 0, "\(h.stderr)")
        let heldAnswer = try RemoteWork.check(Array(h.stdout.utf8), for: held, answerKey: node.answerKey)
        #expect(heldAnswer.outcomes.map(\.reward) == [1, 0], "\(heldAnswer.outcomes)")
        #expect(heldAnswer.traces.isEmpty && heldAnswer.outcomes.allSatisfy { $0.detail == nil && $0.failures == nil }, "\(heldAnswer.outcomes)")
        #expect(!h.stdout.contains("HARBORMARK") && !h.stderr.contains("HARBORMARK"))
        #expect(node.nonces.count == 2 && node.workDirectories.isEmpty)

        func refused(_ request: WorkRequest, _ words: [String]) throws {
            let o = try node.serve(try node.sign(request))
            #expect(o.status != 0 && words.allSatisfy(o.stderr.contains) && !node.nonces.contains(request.nonce), "\(words): \(o.stderr)")
        }
        // Refused before the nonce: another copy of the environment module...
        try refused(try request(["hello-2"], heldOut: false, digest: .some(String(repeating: "0", count: 64))), ["autoharness_harbor_env.py (sha256", "is not the supervisor's (0000000000000000)"])
        // ...a Harbor install the node does not have at the supervisor's path...
        var elsewhere = settings
        elsewhere.tool.command = [data.path + "/no-harbor"]
        try refused(try request(["hello-2"], heldOut: true, harbor: elsewhere), ["lacks what Harbor's agent phase needs", data.path + "/no-harbor"])
        // ...two tasks that Harbor would know by one name (hello-2 carrying hello-3's task.toml)...
        var twins = try request(["hello-2", "hello-3"], heldOut: true)
        let toml = try #require(twins.tasks[1].files.firstIndex { $0.path == "task.toml" })
        let mine = try #require(twins.tasks[0].files.firstIndex { $0.path == "task.toml" })
        twins.tasks[0].files[mine] = twins.tasks[1].files[toml]
        try refused(twins, ["the request's tasks: refused, nothing ran", "autoharness-test/hello-3"])
        // ...and a runner bind that would show Harbor's runner the worker's own state (its
        // sealing key, each request's tasks while they run).
        var exposed = settings
        exposed.tool.binds.append(node.temp.path)
        try refused(try request(["hello-2"], heldOut: false, harbor: exposed), ["runner.binds: \(node.temp.path) contains this worker's state directory"])

        // ...a held-out request whose runner policy this node cannot enforce (here: has not)...
        var unenforced = settings
        unenforced.tool.runnerPolicy = "no-such-runner-policy"
        try refused(try request(["hello-2"], heldOut: true, harbor: unenforced), ["fails the host checks a held-out request needs", "no-such-runner-policy"])
        // A task whose image the supervisor could not have is refused with why, as on its host,
        // never run on the node's own userland; the others run.
        var imageless = try request(["hello-1", "hello-2"], heldOut: false)
        imageless.tasks[0].imageRefused = "IMAGE-REFUSED: the build failed"
        let i = try node.serve(try node.sign(imageless))
        #expect(i.status == 0, "\(i.stderr)")
        let refusedImage = try RemoteWork.check(Array(i.stdout.utf8), for: imageless)
        #expect(refusedImage.outcomes.map(\.status) == [.setupFailed, .passed] && refusedImage.outcomes[0].detail?.contains("IMAGE-REFUSED") == true,
                "\(refusedImage.outcomes)")

        // The supervisor sends only what a node can run: the local provider, a dataset directory;
        // it says so when the adapter is made for a run, not when only the record is read.
        var remote = adapter
        remote.environmentProvider = "e2b"
        #expect { _ = try remote.node } throws: { "\($0)".contains("executor: ray runs terminal-bench with env_provider: local") }
        var registry = adapter
        registry.datasetPath = nil
        registry.dataset = "terminal-bench@2.0"
        #expect { _ = try registry.node } throws: { "\($0)".contains("harbor download terminal-bench@2.0 -o DIR") }
        let path = exp.root + "/experiment_config.yaml"
        let text = try String(contentsOfFile: path, encoding: .utf8)
        try #require(text.contains("\nenv_provider: local"), "\(text)")
        let onRay = try ExperimentConfig.parse(text.replacingOccurrences(of: "\nenv_provider: local", with: "\nenv_provider: e2b")
                                               + "\nexecutor:\n  kind: ray\n  address: 127.0.0.1:1\n", file: path)
        #expect(try onRay.makeAdapter(root: exp.root, checkTools: false) is HarborAdapter)
        #expect { _ = try onRay.makeAdapter(root: exp.root, checkTools: true) } throws: { "\($0)".contains("executor: ray runs terminal-bench with env_provider: local") }
    }
}
