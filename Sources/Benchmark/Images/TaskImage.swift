// A task's environment as its image: the files its Dockerfile built (or its `docker_image`
// held), unpacked once on the host and shared read-only by every task on that image.
//
// Per task the supervisor mounts an overlay over the unpacked files (`TaskScratch.mountImage`):
// the image is its read-only lower layer, the task's own upper layer lives on the task's
// tmpfs, and the overlay becomes the root of the agent's sandbox and then of the verifier's
// (`PlanOverrides.imageRoot`). The payload is root inside its user namespace, as every
// Terminal-Bench task expects, and the image's system users (_apt, postgres, www-data) are its
// other ids, 0-65535 there; on the host they are a range of unprivileged ids of their own
// (`ids`, `ImageIDs`), and the unpacked files belong to them, shifted: root inside owns what
// the image's root owns, and with the few capabilities a container's root keeps
// (`Capabilities.imageRoot`, counting only over that range) it installs packages as root.

import Glibc
import SandboxPolicy
import Sandbox
import SupervisorIO

/// An image unpacked for sandboxes whose ids 0… map to the host range `ids`.
public struct TaskImage: Sendable, Equatable, Codable {
    /// The image's id (`sha256:…`), which names its unpacked files.
    public var id: String
    /// Where the image's files are, their owners shifted into `ids`; never mounted writable.
    public var rootfs: String
    /// The image's WORKDIR (`/` when it sets none, as Docker's default).
    public var workingDirectory: String
    /// The image's ENV, `NAME=VALUE`.
    public var environment: [String]
    /// The host ids its sandboxes' ids 0… map to, and its files belong to.
    public var ids: HostIDRange
    /// How it was had: `built from …/environment/Dockerfile` or `the image NAME` (docker_image).
    public var origin: String

    public init(id: String, rootfs: String, workingDirectory: String, environment: [String], ids: HostIDRange, origin: String) {
        self.id = id
        self.rootfs = rootfs
        self.workingDirectory = workingDirectory
        self.environment = environment
        self.ids = ids
        self.origin = origin
    }

    /// The sandbox's environment on this image: the image's ENV for every name the policy
    /// does not set, and PATH from the image. The agent's sandbox also takes HOME from the
    /// image, HOME=/root where it names none (Docker's default for root); the verifier keeps
    /// its policy's, a private tmpfs: the agent wrote /root, and a test script sources
    /// `$HOME/.local/bin/env` and runs uv, whose cache is under `$HOME`. Nor does the verifier
    /// take a variable that points its own chain somewhere (`verifierDenied`).
    func environmentOverrides(policy: [String: String], verifier: Bool) -> [String] {
        var out: [String] = []
        var named: Set<String> = []
        for entry in environment {
            guard let eq = entry.firstIndex(of: "=") else { continue }
            let name = String(entry[..<eq])
            named.insert(name)
            if verifier && Self.verifierDenied(name) { continue }
            if name == "PATH" || (name == "HOME" && !verifier) || policy[name] == nil { out.append(entry) }
        }
        if !named.contains("HOME") && !verifier { out.append("HOME=/root") }
        if verifier { out += Self.imageSSH(policy: policy) }
        return out
    }

    /// The verifier policy sets git's `core.sshCommand` to `false`, so that a repository's
    /// configuration cannot make git run a command of the agent's. On an image that kept out
    /// too much: a test that pushes over ssh to the server the agent left running
    /// (git-multibranch) is how the task checks the agent's work. So on an image git runs
    /// `ssh`, the image's, found on the image's PATH as every other program of the image a test
    /// calls (one the agent changed is flagged when it runs: `AgentCodeRuns`), but with no
    /// configuration file: the image's /etc/ssh/ssh_config and root's ~/.ssh/config (ssh reads
    /// the passwd entry's home, /root, not $HOME) are the agent's to have written, and their
    /// ProxyCommand, LocalCommand, KnownHostsCommand or `Match exec` would run its commands
    /// unflagged (found by the session's adversarial review). A test's own `$HOME/.ssh/config`
    /// was never read here either, for the same reason. (Naming that file with `-F` broke
    /// git-multibranch's push, for a reason not found; its expect script answers the host-key
    /// question itself.) `GIT_SSH_VARIANT`: the options ssh takes, told rather than guessed.
    /// On the host's userland `false` stays.
    static func imageSSH(policy: [String: String]) -> [String] {
        let keys = policy.compactMap { key, value -> String? in
            guard key.hasPrefix("GIT_CONFIG_KEY_"), value.lowercased() == "core.sshcommand" else { return nil }
            return "GIT_CONFIG_VALUE_\(key.dropFirst("GIT_CONFIG_KEY_".count))=" + sshCommand
        }
        return keys.isEmpty ? [] : keys + ["GIT_SSH_VARIANT=ssh"]
    }

    static let sshCommand = "ssh -F /dev/null"
}

/// Which tasks run on which image (by task id); a task not listed runs on the host's userland.
public struct TaskImages: Sendable {
    public var byTask: [String: TaskImage]
    /// Tasks whose image could not be had, with why: each is refused (setup_failed) with it.
    public var refused: [String: String] = [:]

    public init(_ byTask: [String: TaskImage] = [:]) { self.byTask = byTask }
}

extension TaskImage {
    /// Who owns what the supervisor makes for a sandbox on this image (its /app, the
    /// verifier's logs): root inside.
    var owner: (uid_t, gid_t) { (ids.uid, ids.gid) }

    /// The policies' own host ids must lie outside the image's range (files a policy's
    /// sandbox wrote would otherwise be the image sandboxes' to take). The verifier needs the
    /// verifier tools: on an image every other program (the shell that runs test.sh, the C
    /// library) is the agent's to have changed, and only the toolbox's run nothing of the
    /// image's (scripts/install-verifier-tools).
    func check(_ policies: [Policy], tools: VerifierTools?) throws(BenchmarkError) {
        for p in policies where ids.holds(uid: p.identity.hostUID) || ids.holds(gid: p.identity.hostGID) {
            throw BenchmarkError(.configuration, "policy \(p.name) runs as host \(p.identity.hostUID):\(p.identity.hostGID), inside the image \(id)'s host ids (\(ids.count) from \(ids.uid):\(ids.gid))")
        }
        guard tools != nil else {
            throw BenchmarkError(.configuration, "a task on its image is verified with the verifier tools (sandbox.verifier_tools, scripts/install-verifier-tools): on the image every other program is the agent's to have changed")
        }
    }

    /// A sandbox of `policy` on this image, whose overlay is mounted at `root`: the overlay as
    /// its root, the image's WORKDIR and environment, its ids, and `lo` up (where the policy
    /// has no network at all) with every port root's to bind, as in a container.
    func apply(to overrides: inout PlanOverrides, root: String?, policy: Policy, verifier: Bool) {
        overrides.imageRoot = root
        overrides.imageFiles = rootfs
        overrides.imageIDs = ids
        overrides.loopback = true
        overrides.workingDirectory = workingDirectory
        overrides.environment += environmentOverrides(policy: policy.env.set, verifier: verifier)
    }

    /// Variables of the image's ENV a verifier does not take: each tells the shell, the loader,
    /// the C library, uv, pip or Python what to load or where to look (a `PYTHONPATH=/app`
    /// puts the agent's sitecustomize.py into pytest's interpreter), and /app and /root are
    /// the agent's. A task's own variables (`DATA_DIR`, `DEBIAN_FRONTEND`) pass.
    static func verifierDenied(_ name: String) -> Bool {
        let prefixes = ["PYTHON", "LD_", "UV_", "PYTEST", "PIP_", "CONDA", "VIRTUAL_ENV", "BASH_FUNC_", "GLIBC_", "MALLOC_",
                        "XDG_", "PERL", "RUBY", "NODE_", "GCONV_", "SSL_", "REQUESTS_", "CURL_"]
        let names: Set<String> = ["BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "CDPATH", "GLOBIGNORE", "IFS", "HOSTALIASES",
                                  "RES_OPTIONS", "LOCALDOMAIN", "TMPDIR", "HOME", "SHELL", "LANGUAGE", "LC_ALL", "LOCPATH", "NLSPATH", "TZDIR"]
        return names.contains(name) || prefixes.contains { name.hasPrefix($0) }
    }

    /// The PATH a sandbox of `policy` has on this image.
    func path(policy: Policy) -> String? {
        environmentOverrides(policy: policy.env.set, verifier: true).last { $0.hasPrefix("PATH=") }.map { String($0.dropFirst(5)) }
            ?? policy.env.set["PATH"]
    }

    /// Files at the root of the image that the verifier's own chain would read as its
    /// configuration, and which the agent made or changed (its upper layer holds them): hidden
    /// from the verifier (an empty, unreadable file in their place). /etc/ld.so.preload names
    /// libraries every dynamically linked program loads, the toolbox's Python included; the
    /// others are where pytest looks for its rootdir, ini options and conftest.py above
    /// /tests (a conftest.py there can pass every test).
    static let verifierConfiguration = ["etc/ld.so.preload", "conftest.py", "pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml",
                                        "pyproject.toml", "tox.ini", "setup.cfg", "setup.py", "__init__.py"]

    static func hiddenFromVerifier(upper: String) -> [MountSpec] {
        verifierConfiguration.compactMap { name in
            guard let st = inUpper(upper, name) else { return nil }
            // A whiteout (a character device 0/0) is the agent's deletion of the image's file.
            if st.st_mode & S_IFMT == S_IFCHR && st.st_rdev == 0 { return nil }
            return MountSpec(kind: .hide, destination: "/" + name)
        }
    }

    /// The status of `relative` in the agent's upper layer, never through a link the agent
    /// made (`/etc -> /` would otherwise have the supervisor look at the host's files).
    static func inUpper(_ upper: String, _ relative: String) -> stat? {
        var path = upper
        var st = stat()
        let parts = relative.split(separator: "/")
        for (i, part) in parts.enumerated() {
            path += "/" + part
            guard lstat(path, &st) == 0 else { return nil }
            if i < parts.count - 1 && st.st_mode & S_IFMT != S_IFDIR { return nil }
        }
        return parts.isEmpty ? nil : st
    }
}

extension TaskScratch {
    /// The image's /app in the task's overlay (`mountImage`), made empty and owned by `owner`
    /// where the image holds none; opened without following a link.
    func imageApp(owner: (uid_t, gid_t), root rootPath: String? = nil) throws(BenchmarkError) -> Int32 {
        let root = rootPath.map { FileSystem.openDirectory($0) } ?? FileSystem.openDirectory(at: fd, FileSystem.name("root"))
        guard root >= 0 else { throw BenchmarkError(.io, "\(rootPath ?? path + "/root"): \(FileSystem.errorText())") }
        defer { close(root) }
        let existing = FileSystem.openDirectory(at: root, FileSystem.name("app"))
        if existing >= 0 { return existing }
        guard let made = FileSystem.makeDirectory(at: root, "app", mode: 0o755, owner: owner) else {
            throw BenchmarkError(.io, "\(path)/root/app: \(FileSystem.errorText())")
        }
        return made
    }
}
