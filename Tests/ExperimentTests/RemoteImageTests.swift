import Benchmark
import Crypto
import Foundation
import Sandbox
import Testing
import TestSupport
@testable import Execution
@testable import ExperimentModel

/// Task images on a worker node, with the real podman and the real `autoharness worker`: the
/// supervisor's archive of an image goes to the node encrypted and signed, the node unpacks
/// only the archive the offer names, and a request's task then runs on that image there.
@Suite("Remote work: task images on a worker node", .serialized)
struct RemoteImageTests {
    /// Writes the image's input into /app: only the task's image has /opt/data/input.txt.
    static let agent = """
        class HarnessAgent:
            def run(self, instruction, workdir):
                with open("/opt/data/input.txt") as f:
                    data = f.read()
                with open("/app/answer.txt", "w") as f:
                    f.write(data)
        """
    /// 1 only on the image: the agent's answer is the image's input, and the image's WORKDIR
    /// holds what its build made.
    static let test = """
        #!/bin/bash
        if [ "$(cat /app/answer.txt)" = "$(cat /opt/data/input.txt)" ] && [ -f /srv/work/built.txt ]; then
            echo 1 > /logs/verifier/reward.txt
        else
            echo 0 > /logs/verifier/reward.txt
        fi

        """

    /// An offer of `archive` to the node whose sealing key is `node`, as the supervisor makes it.
    static func offer(_ archive: ImageArchive, key: SymmetricKey, to node: String, signer: Curve25519.Signing.PrivateKey) throws -> String {
        Data(try archive.offer(key: key, to: node, signedWith: signer)).base64EncodedString()
    }

    /// `autoharness worker --receive-image` on `node` with `offer`, the file `archive` on stdin.
    static func receive(_ node: RemoteWorkTests.Node, offer: String, archive: String) throws -> Run {
        try runProcess(Built.autoharness, ["worker", "--supervisor-key", node.keyFile, "--state", node.state, "--receive-image", offer], stdinPath: archive)
    }

    /// What the node's image store holds (names), partial directories included.
    static func stored(_ node: RemoteWorkTests.Node) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: node.state + "/images")) ?? []).sorted()
    }

    @Test("a task image reaches a node only as the supervisor's archive: an offer signed by another key, sealed to another node, with altered ciphertext or naming another digest is refused with nothing unpacked; the right one is unpacked with its owners in the node's range, once; a request naming the image is refused before its nonce where the node lacks it, and runs its task on it there (train: reward and trace; held out: reward only), where the same task off its image fails")
    func imageOnTheNode() throws {
        try requireRoot()
        try TaskImageTests.requireImageHost()
        let tools = try TaskImageTests.toolbox()
        let temp = try TempDir()
        let task = try TaskImageTests.makeTask(in: temp.path + "/bench", id: "img-0", solve: "#!/bin/bash\n", test: Self.test)
        let store = TaskImageStore(directory: temp.path + "/store")
        let ids = try ImageIDs.range()
        let problems = try store.prepare([task], ids: ids) { _ in }
        try #require(problems.isEmpty, "\(problems)")
        let image = try #require(store.load([task]).images.byTask[task.id])

        // Archived once: a second make reads the digest it kept.
        let archive = try ImageArchive.make(image, in: temp.path + "/archives")
        let again = try ImageArchive.make(image, in: temp.path + "/archives")
        #expect(again.sha256 == archive.sha256 && again.bytes == archive.bytes && archive.bytes > 1 << 20)
        let (sha, size) = try ImageArchive.digest(archive.path)
        #expect(sha == archive.sha256 && size == archive.bytes)

        let node = try RemoteWorkTests.Node()
        let nodeKey = NodeSealKey.publicText(try node.sealKey())
        let key = SymmetricKey(size: .bits256)
        let encrypted = temp.file("archive.enc")
        try archive.encrypt(under: key, to: encrypted)

        // The request, as the supervisor builds it for executor: ray.
        func request(heldOut: Bool = false, withImage: Bool = true) throws -> WorkRequest {
            var work = try RemoteWork(key: node.key, policySearchPaths: [Built.packageRoot + "/policies"])
            work.defaultAgentTimeout = 120
            work.binarySHA256 = try WorkDigest.file(Built.autoharness)
            var r = try work.request([task], agentPy: Array(Self.agent.utf8), heldOut: heldOut, concurrency: 1,
                                     answerTo: heldOut ? NodeSealKey.publicText(node.answerKey) : nil)
            r.verifierTools = tools.directory
            if withImage { r.tasks[0].image = WorkImage(image, archiveSHA256: archive.sha256) }
            return r
        }
        let early = try request()
        let refused = try node.serve(try node.sign(early))
        #expect(refused.status == 2 && refused.stderr.contains("does not hold task img-0's image"), "\(refused.status) \(refused.stderr)")
        #expect(node.nonces.isEmpty, "a request the node could not run claimed its nonce")

        // Refused, nothing unpacked: each attempt really reached the worker and was turned down.
        let otherSigner = Curve25519.Signing.PrivateKey()
        let forged = try Self.receive(node, offer: try Self.offer(archive, key: key, to: nodeKey, signer: otherSigner), archive: encrypted)
        #expect(forged.status == 2 && forged.stderr.contains("not signed by the supervisor"), "\(forged.stderr)")
        let elsewhere = NodeSealKey.publicText(Curve25519.KeyAgreement.PrivateKey())
        let otherNode = try Self.receive(node, offer: try Self.offer(archive, key: key, to: elsewhere, signer: node.key), archive: encrypted)
        #expect(otherNode.status == 2 && otherNode.stderr.contains("for another node"), "\(otherNode.stderr)")
        var bytes = try Array(Data(contentsOf: URL(fileURLWithPath: encrypted)))
        bytes[bytes.count / 2] ^= 0x40
        let altered = temp.file("altered.enc")
        FileManager.default.createFile(atPath: altered, contents: Data(bytes))
        let tampered = try Self.receive(node, offer: try Self.offer(archive, key: key, to: nodeKey, signer: node.key), archive: altered)
        #expect(tampered.status == 2 && tampered.stderr.contains("does not decrypt"), "\(tampered.stderr)")
        var other = archive
        other.sha256 = String(repeating: "ab", count: 32)
        let misnamed = try Self.receive(node, offer: try Self.offer(other, key: key, to: nodeKey, signer: node.key), archive: encrypted)
        #expect(misnamed.status == 2 && misnamed.stderr.contains("not the one its offer names"), "\(misnamed.stderr)")
        #expect(Self.stored(node).isEmpty, "refused offers left \(Self.stored(node))")

        // The supervisor's offer: unpacked under the archive's digest, root inside owning the
        // image's root, a file its build made there.
        let taken = try Self.receive(node, offer: try Self.offer(archive, key: key, to: nodeKey, signer: node.key), archive: encrypted)
        #expect(taken.status == 0, "\(taken.stderr)")
        let rootfs = node.state + "/images/\(archive.sha256)-\(ids.uid)-\(ids.gid)"
        #expect(Self.stored(node) == [(rootfs as NSString).lastPathComponent], "\(Self.stored(node))")
        var st = stat()
        #expect(lstat(rootfs + "/srv/work/built.txt", &st) == 0 && st.st_uid == ids.uid && st.st_gid == ids.gid, "\(st.st_uid):\(st.st_gid)")
        #expect((try? String(contentsOfFile: rootfs + "/opt/data/input.txt", encoding: .utf8)) == "input-img-0\n")
        let check = try runProcess(Built.autoharness, ["worker", "--check", "--state", node.state, "--policy-dir", Built.packageRoot + "/policies",
                                                       "--check-image", archive.sha256, "--check-image", String(repeating: "cd", count: 32)])
        let report = try JSONDecoder().decode(NodeReport.self, from: Data(check.stdout.utf8))
        #expect(report.images == [archive.sha256], "\(check.stdout)")

        // A train request runs its task on the image; held out, the reward alone comes back.
        let train = try request()
        let ran = try node.serve(try node.sign(train))
        #expect(ran.status == 0, "\(ran.stderr)")
        let answer = try RemoteWork.check(Array(ran.stdout.utf8), for: train)
        #expect(answer.outcomes.map(\.reward) == [1], "\(answer.outcomes) \(ran.stderr)")
        #expect(answer.traces[task.id]?.isEmpty == false)
        let held = try request(heldOut: true)
        let heldRan = try node.serve(try node.sign(held))
        #expect(heldRan.status == 0, "\(heldRan.stderr)")
        let heldAnswer = try RemoteWork.check(Array(heldRan.stdout.utf8), for: held, answerKey: node.answerKey)
        #expect(heldAnswer.outcomes.map(\.reward) == [1] && heldAnswer.traces.isEmpty, "\(heldAnswer)")
        // The same task off its image (the node's own userland) fails: the reward above is the image's.
        let bare = try request(withImage: false)
        let bareRan = try node.serve(try node.sign(bare))
        let bareAnswer = try RemoteWork.check(Array(bareRan.stdout.utf8), for: bare)
        #expect(bareAnswer.outcomes.map(\.reward) == [0], "\(bareAnswer.outcomes)")
        #expect(node.workDirectories.isEmpty)
    }
}
