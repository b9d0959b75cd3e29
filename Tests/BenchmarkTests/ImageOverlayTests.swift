import Foundation
import Sandbox
import SandboxPolicy
import SupervisorIO
import Testing
import TestSupport

@testable import Benchmark

/// A task's root on its image is an overlay of the image (on disk) under the task's tmpfs.
@Suite("A task's overlay on its image")
struct ImageOverlayTests {
    @Test("a directory of the overlay reports its own inode number, the one its directory entry lists: a made-up number, which the kernel makes again each time it reloads the inode, once refused a task on a busy host (the plan stats a bind source such as /app and the launcher checks it again when it opens it: ESTALE)")
    func inodeNumbersPersist() throws {
        try requireRoot()
        let temp = try TempDir()
        // The image's files on disk, owned by the sandboxes' root as an unpacked image is.
        let ids = HostIDRange(uid: 1_000_000, gid: 1_000_000, count: 65536)
        let rootfs = temp.path + "/rootfs"
        try FileManager.default.createDirectory(atPath: rootfs + "/app", withIntermediateDirectories: true)
        #expect(chown(rootfs, ids.uid, ids.gid) == 0 && chown(rootfs + "/app", ids.uid, ids.gid) == 0)
        let image = TaskImage(id: "sha256:overlay-test", rootfs: rootfs, workingDirectory: "/app", environment: [], ids: ids, origin: "a test")
        let scratchRoot = temp.path + "/scratch"
        try FileManager.default.createDirectory(atPath: scratchRoot, withIntermediateDirectories: true)
        let scratch = try TaskScratch(root: scratchRoot)
        defer { _ = scratch.remove() }
        try scratch.mountImage(image)
        var st = stat()
        #expect(stat(scratch.imageAppPath, &st) == 0, "\(scratch.imageAppPath): errno \(errno)")
        let dir = try #require(opendir(scratch.imageRootPath))
        defer { closedir(dir) }
        var listed: UInt64?
        while listed == nil, let e = readdir(dir) {
            if DirectoryEntry.name(e) == "app" { listed = UInt64(e.pointee.d_ino) }
        }
        #expect(listed != nil && UInt64(st.st_ino) == listed, "/app: stat says inode \(st.st_ino), its directory entry \(listed ?? 0)")
    }

    @Test("on an image the verifier's git runs the image's ssh with only the test's own ssh configuration, as every other image program a test calls; on the host's userland and in the agent phase the policy's false stays")
    func verifierSSHOnImage() throws {
        let policy = try PolicyLoader(searchPaths: [Paths.policies]).load("verifier", variables: ["workdir": "/w", "tests_dir": "/t", "logs_dir": "/l"])
        let key = try #require(policy.env.set.first { $0.key.hasPrefix("GIT_CONFIG_KEY_") && $0.value == "core.sshCommand" }?.key)
        let value = "GIT_CONFIG_VALUE_" + key.dropFirst("GIT_CONFIG_KEY_".count)
        #expect(policy.env.set[value] == "false")
        let image = TaskImage(id: "sha256:ssh-test", rootfs: "/nonexistent", workingDirectory: "/app", environment: ["PATH=/usr/bin:/bin"],
                              ids: HostIDRange(uid: 1_000_000, gid: 1_000_000, count: 65536), origin: "a test")
        let overrides = image.environmentOverrides(policy: policy.env.set, verifier: true)
        #expect(overrides.contains(value + "=" + TaskImage.sshCommand) && overrides.contains("GIT_SSH_VARIANT=ssh"), "\(overrides)")
        #expect(!image.environmentOverrides(policy: policy.env.set, verifier: false).contains { $0.hasPrefix("GIT_CONFIG_VALUE_") })
    }
}
