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
    static func receive(_ node: RemoteWorkTests.Node, offer: String, archive: String, environment: [String: String] = [:]) throws -> Run {
        try runProcess(Built.autoharness, ["worker", "--supervisor-key", node.keyFile, "--state", node.state, "--receive-image", offer],
                       environment: ProcessInfo.processInfo.environment.merging(environment) { _, given in given }, stdinPath: archive)
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

        let toolbox = try WorkDigest.tree(tools.directory)
        // The request, as the supervisor builds it for executor: ray.
        func request(heldOut: Bool = false, withImage: Bool = true) throws -> WorkRequest {
            var work = try RemoteWork(key: node.key, policySearchPaths: [Built.packageRoot + "/policies"])
            work.defaultAgentTimeout = 120
            work.binarySHA256 = try WorkDigest.file(Built.autoharness)
            var r = try work.request([task], agentPy: Array(Self.agent.utf8), heldOut: heldOut, concurrency: 1,
                                     answerTo: heldOut ? NodeSealKey.publicText(node.answerKey) : nil)
            r.verifierTools = tools.directory
            r.verifierToolsSHA256 = toolbox
            if withImage { r.tasks[0].image = WorkImage(image, archiveSHA256: archive.sha256) }
            return r
        }
        let early = try request()
        let refused = try node.serve(try node.sign(early))
        #expect(refused.status == 2 && refused.stderr.contains("does not hold task img-0's image"), "\(refused.status) \(refused.stderr)")
        #expect(node.nonces.isEmpty, "a request the node could not run claimed its nonce")
        // Other verifier tools than the supervisor's (another digest): refused before the nonce too.
        var otherTools = try request()
        otherTools.verifierToolsSHA256 = String(repeating: "0", count: 64)
        let toolsRefused = try node.serve(try node.sign(otherTools))
        #expect(toolsRefused.status == 2 && toolsRefused.stderr.contains("verifier tools") && node.nonces.isEmpty, "\(toolsRefused.stderr)")

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
                                                       "--check-image", archive.sha256, "--check-image", String(repeating: "cd", count: 32),
                                                       "--check-verifier-tools", tools.directory])
        let report = try JSONDecoder().decode(NodeReport.self, from: Data(check.stdout.utf8))
        #expect(report.images == [archive.sha256], "\(check.stdout)")
        // The node's toolbox digest is the supervisor's; a node reporting another is given nothing.
        #expect(report.verifierToolsSHA256 == toolbox, "\(check.stdout)")
        var otherReport = report
        otherReport.verifierToolsSHA256 = String(repeating: "0", count: 64)
        #expect(NodeCheck.unusable(otherReport, binarySHA256: report.binarySHA256, policiesSHA256: report.policiesSHA256, verifierToolsSHA256: toolbox)?
            .contains("verifier tools") == true)

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

    /// A rootfs as an image's unpacked files in the range `from`, its image for `make`.
    static func fabricatedImage(in dir: String, ids from: HostIDRange) throws -> TaskImage {
        let root = dir + "/rootfs"
        for sub in ["etc", "home/www", "var/log"] { try FileManager.default.createDirectory(atPath: root + "/" + sub, withIntermediateDirectories: true) }
        func file(_ path: String, _ text: String, uid: UInt32, gid: UInt32) throws {
            try text.write(toFile: root + "/" + path, atomically: false, encoding: .utf8)
            try #require(chown(root + "/" + path, uid, gid) == 0)
        }
        try file("etc/owned-by-root", "root\n", uid: from.uid, gid: from.gid)
        try file("home/www/index", "www\n", uid: from.uid + 33, gid: from.gid + 33)
        try file("stray", "stray\n", uid: 5, gid: 5)
        try file("marked", "marked\n", uid: from.uid, gid: from.gid)
        let set = try runProcess("/usr/bin/python3", ["-c", "import os, sys; os.setxattr(sys.argv[1], 'user.autoharness', b'yes')", root + "/marked"])
        try #require(set.status == 0, "\(set.stderr)")
        try #require(link(root + "/marked", root + "/marked-link") == 0)
        try #require(symlink("/etc/passwd", root + "/abs") == 0)
        // A gigabyte of holes (an image's lastlog after a high uid's useradd).
        let fd = open(root + "/var/log/lastlog", O_WRONLY | O_CREAT, 0o644)
        try #require(fd >= 0 && ftruncate(fd, 1 << 30) == 0)
        close(fd)
        for path in ["", "/etc", "/home", "/home/www", "/var", "/var/log", "/var/log/lastlog"] { try #require(lchown(root + path, from.uid, from.gid) == 0) }
        return TaskImage(id: "sha256:" + String(repeating: "5e", count: 32), rootfs: root, workingDirectory: "/", environment: [], ids: from, origin: "a test")
    }

    @Test("an image's archive is its files as they are: owners moved from the supervisor's range into the node's (one outside it to nobody), hard links, links, extended attributes and holes kept (a gigabyte of holes is no gigabyte of archive); a node whose store cannot hold an attribute, or lacks room, refuses it with nothing unpacked; a killed receive's leftovers are cleared")
    func archiveFaithful() throws {
        try requireRoot()
        let temp = try TempDir()
        // A supervisor's range apart from this node's (the default, or /etc/subuid's).
        let ids = try ImageIDs.range()
        let from = HostIDRange(uid: ids.uid == 1_500_000_000 ? 1_400_000_000 : 1_500_000_000, gid: 1_500_000_000, count: ImageIDs.span)
        let image = try Self.fabricatedImage(in: temp.path, ids: from)
        let archive = try ImageArchive.make(image, in: temp.path + "/archives")
        #expect(archive.bytes < 8 << 20, "a sparse file was archived whole: \(archive.bytes) bytes")
        let key = SymmetricKey(size: .bits256)
        let encrypted = temp.file("archive.enc")
        try archive.encrypt(under: key, to: encrypted)

        let node = try RemoteWorkTests.Node()
        let nodeKey = NodeSealKey.publicText(try node.sealKey())
        // What a receive killed mid-way left.
        try FileManager.default.createDirectory(atPath: node.state + "/images/.partial-\(archive.sha256)-1/root", withIntermediateDirectories: true)
        // An expired offer is refused.
        let stale = Data(try archive.offer(key: key, to: nodeKey, signedWith: node.key, validFor: -1)).base64EncodedString()
        let expired = try Self.receive(node, offer: stale, archive: encrypted)
        #expect(expired.status == 2 && expired.stderr.contains("expired"), "\(expired.stderr)")
        // tar runs with none of the worker's environment: TAR_OPTIONS would leave a file out.
        let taken = try Self.receive(node, offer: try Self.offer(archive, key: key, to: nodeKey, signer: node.key), archive: encrypted,
                                     environment: ["TAR_OPTIONS": "--exclude=./marked"])
        #expect(taken.status == 0, "\(taken.stderr)")
        let rootfs = node.state + "/images/\(archive.sha256)-\(ids.uid)-\(ids.gid)"
        #expect(Self.stored(node) == [(rootfs as NSString).lastPathComponent], "\(Self.stored(node))")
        func owner(_ path: String) -> String {
            var st = stat()
            return lstat(rootfs + "/" + path, &st) == 0 ? "\(st.st_uid):\(st.st_gid)" : "missing"
        }
        #expect(owner("etc/owned-by-root") == "\(ids.uid):\(ids.gid)")
        #expect(owner("home/www/index") == "\(ids.uid + 33):\(ids.gid + 33)")
        #expect(owner("stray") == "\(ids.uid + 65534):\(ids.gid + 65534)", "an owner outside the supervisor's range kept its id")
        #expect(owner("") == "\(ids.uid):\(ids.gid)")
        var a = stat(), b = stat()
        #expect(lstat(rootfs + "/marked", &a) == 0 && lstat(rootfs + "/marked-link", &b) == 0 && a.st_ino == b.st_ino && a.st_nlink == 2)
        let get = try runProcess("/usr/bin/python3", ["-c", "import os, sys; print(os.getxattr(sys.argv[1], 'user.autoharness').decode())", rootfs + "/marked"])
        #expect(get.stdout == "yes\n", "\(get.stderr)")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: rootfs + "/abs")) == "/etc/passwd")
        var holes = stat()
        #expect(lstat(rootfs + "/var/log/lastlog", &holes) == 0 && holes.st_size == 1 << 30 && holes.st_blocks * 512 < 1 << 20, "\(holes.st_blocks) blocks")

        // A store on ramfs holds no extended attribute: tar warns and exits 0; refused all the same.
        let bare = try RemoteWorkTests.Node()
        try FileManager.default.createDirectory(atPath: bare.state, withIntermediateDirectories: true)
        try #require(mount("none", bare.state, "ramfs", 0, "mode=0700") == 0)
        defer { umount2(bare.state, Int32(MNT_DETACH)) }
        let bareKey = NodeSealKey.publicText(try bare.sealKey())
        let lost = try Self.receive(bare, offer: try Self.offer(archive, key: key, to: bareKey, signer: bare.key), archive: encrypted)
        #expect(lost.status != 0 && lost.stderr.contains("unpacking task image") && lost.stderr.contains("user.autoharness"), "\(lost.status) \(lost.stderr)")
        #expect(Self.stored(bare).isEmpty, "\(Self.stored(bare))")
        // A store without room for twice the archive and a gigabyte: refused before anything is written.
        let small = try RemoteWorkTests.Node()
        try FileManager.default.createDirectory(atPath: small.state, withIntermediateDirectories: true)
        try #require(mount("none", small.state, "tmpfs", 0, "size=256m,mode=0700") == 0)
        defer { umount2(small.state, Int32(MNT_DETACH)) }
        let smallKey = NodeSealKey.publicText(try small.sealKey())
        let full = try Self.receive(small, offer: try Self.offer(archive, key: key, to: smallKey, signer: small.key), archive: encrypted)
        #expect(full.status != 0 && full.stderr.contains("no room"), "\(full.status) \(full.stderr)")
        #expect(Self.stored(small).isEmpty, "\(Self.stored(small))")
    }

    @Test("a tree's digest is kept under its fingerprint and read again only when an entry changed: a file rewritten with other content of the same size changes it")
    func treeDigestCached() throws {
        let temp = try TempDir()
        let root = temp.file("tools"), cache = temp.file("digests")
        try FileManager.default.createDirectory(atPath: root + "/bin", withIntermediateDirectories: true)
        try "uv 1\n".write(toFile: root + "/bin/uv", atomically: false, encoding: .utf8)
        let first = try WorkDigest.tree(root, cache: cache)
        let direct = try WorkDigest.tree(root)
        #expect(first == direct)
        #expect(try FileManager.default.contentsOfDirectory(atPath: cache).count == 1)
        #expect(try WorkDigest.tree(root, cache: cache) == first)
        // The same size, other bytes: its change time moved, so the contents are read again.
        try "uv 2\n".write(toFile: root + "/bin/uv", atomically: false, encoding: .utf8)
        let second = try WorkDigest.tree(root, cache: cache)
        let uncached = try WorkDigest.tree(root)
        #expect(second != first && second == uncached)
    }
}
