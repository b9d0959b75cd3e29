import Foundation
import Testing
import TestSupport

@testable import Benchmark

/// On a task's image the verifier's git may run ssh (a test pushing to the sshd the agent left
/// running), but the image's ssh configuration is the agent's to have written.
@Suite("The verifier's ssh on an image")
struct VerifierSSHTests {
    @Test("a ProxyCommand in the system ssh_config or in the passwd home's ~/.ssh/config runs under plain ssh (the controls) and never under the verifier's ssh command, which reads no configuration file")
    func systemConfigNeverRuns() throws {
        try requireRoot()
        for tool in ["/usr/bin/git", "/usr/bin/ssh"] {
            try #require(access(tool, X_OK) == 0, "\(tool) is missing: Debian's git and openssh-client")
        }
        let dir = try TempDir()
        let out = dir.path + "/out"
        try FileManager.default.createDirectory(atPath: out + "/home/.ssh", withIntermediateDirectories: true)
        chmod(out, 0o777)
        chmod(out + "/home", 0o777)
        chmod(out + "/home/.ssh", 0o777)
        // The agent's configuration: any connection runs its command.
        let config = try dir.file("ssh_config", "Host *\n  ProxyCommand sh -c 'id > /out/system-ran; exit 1'\n")
        // The sandbox's uid needs a passwd entry before ssh reads any configuration.
        let passwd = try dir.file("passwd", "root:x:0:0::/root:/bin/sh\nu:x:1000:1000::/out/home:/bin/sh\n")
        // `userConfig`: written by the sandbox's own user first (ssh refuses one it does not own).
        func gitOverSSH(_ command: String, userConfig: String? = nil) throws -> Run {
            let write = userConfig.map { "printf '%s\\n' '\($0)' > /out/home/.ssh/config && " } ?? "rm -f /out/home/.ssh/config && "
            return try autoharness(["sandbox", "exec", "--ro", config + ":/etc/ssh/ssh_config", "--ro", passwd + ":/etc/passwd", "--rw", out + ":/out",
                                    "--env", "HOME=/out/home", "--env", "GIT_CONFIG_COUNT=1", "--env", "GIT_CONFIG_KEY_0=core.sshCommand",
                                    "--env", "GIT_CONFIG_VALUE_0=" + command, "--env", "GIT_SSH_VARIANT=ssh", "--timeout", "30",
                                    "--", "/bin/sh", "-c", write + "exec /usr/bin/git ls-remote ssh://example.invalid/r"])
        }
        let control = try gitOverSSH("ssh")
        #expect(FileManager.default.fileExists(atPath: out + "/system-ran"), "the control never ran the ProxyCommand: \(control.stderr)")
        try? FileManager.default.removeItem(atPath: out + "/system-ran")

        let verifier = try gitOverSSH(TaskImage.sshCommand)
        #expect(verifier.status != 0)
        #expect(!FileManager.default.fileExists(atPath: out + "/system-ran"), "\(verifier.stderr)")
        // Nor the configuration in the passwd entry's home (the image's /root on a task's
        // image, the agent's to have written): here /out/home.
        let user = "Host *\n  ProxyCommand sh -c \"id > /out/user-ran; exit 1\""
        let control2 = try gitOverSSH("ssh", userConfig: user)
        #expect(FileManager.default.fileExists(atPath: out + "/user-ran"), "the control never read ~/.ssh/config: \(control2.stderr)")
        try? FileManager.default.removeItem(atPath: out + "/user-ran")
        try? FileManager.default.removeItem(atPath: out + "/system-ran")
        _ = try gitOverSSH(TaskImage.sshCommand, userConfig: user)
        #expect(!FileManager.default.fileExists(atPath: out + "/user-ran") && !FileManager.default.fileExists(atPath: out + "/system-ran"))
    }
}
