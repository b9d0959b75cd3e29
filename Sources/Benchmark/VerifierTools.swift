// What a verifier needs is provided, not fetched.
//
// Terminal-Bench 2.0's test scripts begin by fetching their judge: `apt-get install curl`, uv's
// installer piped from `curl` into `sh`, `source $HOME/.local/bin/env`, then `uvx -p 3.13 -w
// pytest==8.4.1 -w pytest-json-ctrf==0.3.5 pytest ...`, which downloads a Python and pytest.
// A verifier has no network, so all of it failed and every such task scored 0; and whatever
// that preamble runs is whatever the environment hands it. The verifier tools
// (scripts/install-verifier-tools) are that preamble's answers, read-only at `mountPoint`:
// uv and uvx, a link to a Python 3.13, pinned wheels of pytest and its plugin, and shims for
// `curl` (uv's installer URL alone is answered, from the toolbox) and `apt-get` (installs
// nothing). uv then runs offline on those wheels only, and reads no configuration file: a
// `uv.toml` or `pyproject.toml` agent.py left in /app could otherwise name its own index or
// wheels, and so its own pytest.

import Glibc
import SandboxPolicy
import SupervisorIO

public struct VerifierTools: Sendable, Equatable {
    /// Where the toolbox is inside a verifier sandbox.
    public static let mountPoint = "/opt/autoharness/verifier-tools"
    static let manifestCap = 64 << 10

    /// The toolbox on this host.
    public let directory: String
    /// The toolbox has an empty virtual environment (`venv/`), given as `VIRTUAL_ENV`: uv takes
    /// the active environment before a `.venv` in the working directory, so `uv run` from /app
    /// never runs the interpreter of a /app/.venv agent.py left (it runs it to ask what it is).
    public let hasVirtualEnvironment: Bool

    /// Checks `directory` holds an installed toolbox; the error names what is missing and how
    /// to install it.
    /// The executables a verifier's chain runs: unreadable inside every sandbox.
    static let unreadable = ["bin/bash", "bin/python3.13", "bin/uv", "bin/uvx"]

    public init(directory: String) throws(BenchmarkError) {
        let hint = "run scripts/install-verifier-tools, which prints the directory to give"
        guard directory.hasPrefix("/") else {
            throw BenchmarkError(.configuration, "sandbox.verifier_tools: '\(directory)' is not an absolute path (\(hint))")
        }
        for (path, kind, what) in [("bin/uv", S_IFREG, "uv"), ("bin/uvx", S_IFREG, "uvx"), ("bin/curl", S_IFREG, "the curl shim"),
                                   ("bin/apt-get", S_IFREG, "the apt-get shim"), ("share/uv-install.sh", S_IFREG, "uv's offline installer"),
                                   ("bin/bash", S_IFREG, "the static shell"), ("etc/nsswitch.conf", S_IFREG, "nsswitch.conf"),
                                   ("home/.local/bin/env", S_IFREG, "uv's env file"), ("wheels", S_IFDIR, "the wheels directory")] {
            guard LocalBenchmark.kind(directory + "/" + path) == kind else {
                throw BenchmarkError(.configuration, "sandbox.verifier_tools: \(directory)/\(path) (\(what)) is missing: \(hint)")
            }
        }
        // The Python is the toolbox's own, standard library included (a toolbox that linked
        // to a Python elsewhere predates that, and would load the sandbox's root's files).
        guard access(directory + "/bin/python3.13", X_OK) == 0, LocalBenchmark.kind(directory + "/lib/python3.13/os.py") == S_IFREG else {
            throw BenchmarkError(.configuration, "sandbox.verifier_tools: \(directory) holds no Python of its own (bin/python3.13 and lib/python3.13): \(hint)")
        }
        // The programs a verifier's chain runs are unreadable to it (root's, 0711), so none of
        // its processes is dumpable: agent code a test starts opened the test script's
        // /proc/PID/mem and wrote the reward from the test script's own process.
        for name in Self.unreadable {
            var st = stat()
            guard stat(directory + "/" + name, &st) == 0, st.st_uid == 0, st.st_mode & 0o077 == 0o011 else {
                throw BenchmarkError(.configuration, "sandbox.verifier_tools: \(directory)/\(name) must be root's and mode 0711 (a verifier's process running it must not be dumpable): \(hint)")
            }
        }
        self.directory = directory
        hasVirtualEnvironment = LocalBenchmark.kind(directory + "/venv/pyvenv.cfg") == S_IFREG
    }

    /// The binds of a verifier sandbox whose `$HOME` is `home`: the toolbox, what uv's installer leaves in `$HOME/.local/bin` (read-only: the test script
    /// sources its `env`, so nothing else may write it), and the toolbox's nsswitch.conf (files only)
    /// over the host's or the image's. A service named there is a library the C library loads
    /// from the sandbox's root: into the static shell it crashes it (a host's `passwd: files
    /// systemd`), and on a task's image it would be a library the agent could have changed.
    public func mounts(home: String) -> [MountSpec] {
        [MountSpec(kind: .readOnly(source: directory), destination: Self.mountPoint),
         MountSpec(kind: .readOnly(source: directory + "/home/.local/bin"), destination: (home == "/" ? "" : home) + "/.local/bin"),
         MountSpec(kind: .readOnly(source: directory + "/etc/nsswitch.conf"), destination: "/etc/nsswitch.conf")]
    }

    /// What a held-out VM must share for the same verifier to run in it.
    public var hostPaths: [String] { [directory] }

    /// The verifier's environment on top of its policy's: the toolbox first on `PATH` (so
    /// its `curl`, `apt-get` and `pip` answer the preamble), uv offline on the toolbox's wheels.
    /// Before the toolbox, `home`/.venv/bin: where its `pip install` puts pytest and the rest,
    /// on the toolbox's Python (`home` is the verifier's own HOME, a tmpfs nothing else writes;
    /// the directory exists once a test script ran `pip install`).
    /// `UV_NO_CONFIG` is the verifier policy's, for every verifier (policies/verifier.yaml).
    public func environment(policyPath: String?, home: String) -> [String] {
        [
            "PATH=\(home)/.venv/bin:\(Self.mountPoint)/bin:\(policyPath ?? "/usr/local/bin:/usr/bin:/bin")",
            "UV_OFFLINE=1",
            "UV_NO_INDEX=1",
            "UV_FIND_LINKS=\(Self.mountPoint)/wheels",
            "UV_PYTHON_DOWNLOADS=never",
            "UV_PYTHON_PREFERENCE=only-system",
        ] + (hasVirtualEnvironment ? ["VIRTUAL_ENV=\(Self.mountPoint)/venv"] : [])
    }

    /// The scripts among `paths` that fetch uv or run uvx (Terminal-Bench 2.0's preamble):
    /// without the tools they score 0 offline. The first 64 KiB of each is read.
    public static func fetchingScripts(_ paths: [String]) -> [String] {
        paths.filter { path in
            guard case .success(let bytes) = InputFile.read(path, cap: 1 << 20) else { return false }
            let text = String(decoding: bytes.prefix(64 << 10), as: UTF8.self)
            return text.contains("astral.sh/uv") || text.contains("uvx ")
        }
    }
}
