import ExperimentModel
import Foundation
import Glibc
import SandboxPolicy
import SupervisorIO

/// What the coding agent's sandbox is made of: its policy with the run's paths, and the
/// run's directories (staging, home, broker, history) made before it starts.
extension RunDesk {
    func loadPolicy() throws -> Policy {
        let vars = [
            "program_md": layout.program, "agent_staging": paths.staging, "workspace_view": layout.workspace,
            "learnings_md": layout.learnings, "home": paths.home, "broker_dir": paths.broker, "autoharness_bin": settings.clientBinary,
            "history_dir": paths.history,
        ]
        var policy = try supervisor.policyLoader.load(config.codingAgentPolicy, variables: vars)
        if policy.network.mode == .proxy { policy.network.allow = config.networkAllow }
        return policy
    }

    /// The run's directories: staging (a copy of agent/agent.py, or on resume the agent's
    /// edits in progress), its home (kept across restarts within the run), the broker's.
    mutating func prepareDirectories(resumed: Bool, owner: (uid_t, gid_t)) throws {
        let fm = FileManager.default
        try fm.createDirectory(atPath: paths.runDirectory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        if resumed && fm.fileExists(atPath: paths.staging) {
            staging = Staging(path: paths.staging, owner: owner)
        } else {
            let dir = open(layout.agentDirectory, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            guard dir >= 0 else { throw ExperimentError(.io, "\(layout.agentDirectory): \(String(cString: strerror(errno)))") }
            defer { close(dir) }
            switch AgentFile.read(directoryFD: dir, maxBytes: AgentFile.maxBytes) {
            case .success(let bytes): staging = try Staging.create(at: paths.staging, from: bytes, owner: owner)
            case .failure(let why): throw ExperimentError(.io, "\(layout.agentFile) \(why.reason)")
            }
        }
        if !resumed { try removeTree(paths.home) }
        if !fm.fileExists(atPath: paths.home) {
            guard mkdir(paths.home, 0o700) == 0, chown(paths.home, owner.0, owner.1) == 0 else {
                throw ExperimentError(.io, "\(paths.home): \(String(cString: strerror(errno)))")
            }
            if let seed = config.codingAgent.homeSeed {
                let from = seed.hasPrefix("/") ? seed : layout.root + "/" + seed
                try RunLoop.seedHome(from: from, to: paths.home, owner: owner)
            }
        }
        for d in [paths.broker, paths.history] {
            try fm.createDirectory(atPath: d, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
            chmod(d, 0o755)
        }
        try writeHistory()
        // learnings.md is bound read-write as a single file: the sandbox user must own it.
        let fd = open(layout.learnings, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw ExperimentError(.io, "\(layout.learnings): \(String(cString: strerror(errno))) (it must be a regular file)") }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG, fchown(fd, owner.0, owner.1) == 0 else {
            throw ExperimentError(.io, "\(layout.learnings) must be a regular file")
        }
    }

    /// `history/git-log.txt` for the agent: the accepted commits of agent/agent.py with
    /// their diffs, newest first (the agent has no `.git`). Commit messages carry scores only
    /// as `gate.disclosure` allows. Capped at 256 KiB (older history is cut).
    func writeHistory() throws {
        // Subjects only: the trailers name the ledger head, whose row count moves with
        // violations recorded during held-out runs.
        var text = (try? supervisor.git.run(["log", "-p", "--format=commit %h%nDate: %aI%n%n    %s%n", "--", "agent/agent.py"])) ?? ""
        let cap = 256 * 1024
        if text.utf8.count > cap {
            text = String(decoding: Array(text.utf8.prefix(cap)), as: UTF8.self) + "\n[older history cut at 256 KiB]\n"
        }
        try AtomicFile.write(text, to: paths.history + "/git-log.txt", mode: 0o644)
    }
}

extension RunLoop {
    /// Copies the regular files and directories under `from` into the agent's new home,
    /// owned by the sandbox's host user. Anything else (a symbolic link, a device) is an
    /// error naming it: a seed is configuration, and a link would be followed in the sandbox.
    static func seedHome(from: String, to home: String, owner: (uid_t, gid_t)) throws {
        let source = FileSystem.openDirectory(from)
        guard source >= 0 else {
            throw ExperimentError(.io, "coding_agent.home_seed: \(from): \(errno == ENOTDIR || errno == ELOOP ? "not a directory" : ErrnoName.describe(errno))")
        }
        defer { close(source) }
        let destination = FileSystem.openDirectory(home)
        guard destination >= 0 else { throw ExperimentError(.io, "\(home): \(ErrnoName.describe(errno))") }
        defer { close(destination) }
        do throws(IOFailure) {
            try FileSystem.copyTree(from: source, to: destination, owner: owner, skip: [], symlinks: .refuse, label: from)
        } catch {
            throw ExperimentError(.io, "coding_agent.home_seed: " + (error.reason.map { "\(error.path) is \($0)" } ?? error.description))
        }
    }
}
