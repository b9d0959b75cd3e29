// A benchmark runner's shell tool calls, each in a sandbox of its own (`benchmark-tool-call`).
//
// tau2's banking_knowledge gives the agent a `shell` tool, which tau2 runs under Anthropic's
// sandbox-runtime: `subprocess.run(["srt", "--settings", FILE, command], cwd=<knowledge base>,
// timeout=30)` (tau2-bench src/tau2/knowledge/sandbox_manager.py, SandboxManager.run_command).
// srt needs bubblewrap, and bubblewrap a user namespace, which a sandbox of autoharness's never
// opens from inside. So a runner with `ToolSettings.shellCalls` has autoharness's own `srt`
// first on its PATH (templates/tau-bench/srt-shim/srt), which sends the command and its
// working directory over a Unix socket bound into the runner at `socketPath`, and the
// supervisor runs it:
//   - the working directory must be the runner's output directory or below it (the runner's
//     TMPDIR is there), and is opened one component at a time from that directory's
//     descriptor, never through a link;
//   - its tree (regular files and directories; a link or anything else refuses the call) is
//     copied into a tmpfs of the call's own and bound read-only at the same path in a fresh
//     sandbox, where `bash -c <command>` runs: no network, nothing else of the runner (agent.py,
//     /work/in, the rest of /work/out), no environment but the policy's, 30 s at most;
//   - its exit status and its stdout and stderr (each at most `outputCap`) go back. Nothing is
//     copied back: a writable working directory (srt's `allowWrite`) is refused by the shim.

import Dispatch
import FoundationEssentials
import Glibc
import Sandbox
import SandboxPolicy
import SupervisorIO

final class ShellToolCalls: @unchecked Sendable {
    /// Where the socket is inside the runner.
    static let socketDirectory = "/run/autoharness"
    static let socketName = "srt.sock"
    static let policy = "benchmark-tool-call"
    /// The runner's output directory, as the runner sees it.
    static let outputPath = "/work/out"
    static let requestLimit = 256 << 10
    static let outputCap = 1 << 20
    /// Calls served at once; more wait for a slot.
    static let slots = 4

    private let listener: Int32
    private let run: ToolRun
    /// The host directory holding the socket (bound into the runner).
    let directory: String
    private let runnerUID: uid_t
    private let slots = DispatchSemaphore(value: ShellToolCalls.slots)
    private let done = DispatchGroup()
    private let lock = NSLockLite()
    private var stopped = false
    /// Calls served, and calls refused (for the run's log).
    private(set) var served = 0
    private(set) var refused = 0

    /// The directory of autoharness's srt (host path, bound at the same path).
    let shim: String

    /// Listens in `scratch/calls/` for the runner whose sandbox maps to `runnerUID`.
    init(run: ToolRun, runnerUID: uid_t, shim: String) throws(BenchmarkError) {
        self.run = run
        self.shim = shim
        self.runnerUID = runnerUID
        directory = run.scratch.path + "/calls"
        guard let d = FileSystem.makeDirectory(at: run.scratch.fd, "calls", mode: 0o755, owner: nil) else {
            throw BenchmarkError(.io, "\(directory): \(FileSystem.errorText())")
        }
        close(d)
        let path = directory + "/" + Self.socketName
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0, let address = UnixSocket.address(path) else { throw BenchmarkError(.io, "\(path): a socket: \(FileSystem.errorText())") }
        // The runner's user must be able to connect; nothing else can reach this directory.
        guard UnixSocket.bind(fd, address) == 0, chmod(path, 0o666) == 0, listen(fd, 16) == 0 else {
            let e = errno
            close(fd)
            throw BenchmarkError(.io, "\(path): \(FileSystem.errorText(e))")
        }
        listener = fd
        DispatchQueue(label: "autoharness.shell-tool-calls").async { [self] in acceptLoop() }
    }

    /// The runner's mounts: the socket's directory, the shim's.
    var mounts: [MountSpec] {
        [MountSpec(kind: .readOnly(source: directory), destination: Self.socketDirectory), MountSpec(kind: .readOnly(source: shim), destination: shim)]
    }

    /// The runner's variables: srt first on its PATH, TMPDIR in its output (where tau2 makes
    /// the knowledge base), the socket.
    var environment: [String] {
        ["PATH=\(shim):/usr/local/bin:/usr/bin:/bin", "TMPDIR=\(Self.outputPath)/tmp", "AUTOHARNESS_SRT_SOCKET=\(Self.socketDirectory)/\(Self.socketName)"]
    }

    /// The runner's TMPDIR in its output directory `out`.
    static func makeTemporaryDirectory(in out: Int32, owner: (uid_t, gid_t)) throws(BenchmarkError) {
        guard let t = FileSystem.makeDirectory(at: out, "tmp", mode: 0o700, owner: owner) else {
            throw BenchmarkError(.io, "the runner's TMPDIR (\(outputPath)/tmp): \(FileSystem.errorText())")
        }
        close(t)
    }

    /// Stops accepting, waits for the calls being served and says how many there were.
    func stop(label: String) {
        lock.locked { stopped = true }
        shutdown(listener, Int32(SHUT_RDWR))
        done.wait()
        close(listener)
        run.context.log("\(label): \(served) shell tool call(s) run in sandboxes of their own, \(refused) refused")
    }

    private func acceptLoop() {
        while true {
            let c = UnixSocket.accept(listener)
            if c < 0 {
                if errno == EINTR { continue }
                return
            }
            // Entered under the lock `stop` sets `stopped` under: a call is either counted
            // before `stop` waits, or refused here.
            let serving = lock.locked { () -> Bool in
                if stopped { return false }
                done.enter()
                return true
            }
            guard serving else {
                close(c)
                return
            }
            DispatchQueue.global().async { [self] in
                slots.wait()
                defer {
                    slots.signal()
                    close(c)
                    done.leave()
                }
                serve(c)
            }
        }
    }

    /// One call: a request `{"command": "...", "cwd": "/work/out/..."}`, read to its end
    /// (at most `requestLimit` bytes, 5 s), then the answer `{"exit": N, "stdout": base64,
    /// "stderr": base64}` or `{"error": "..."}`.
    private func serve(_ c: Int32) {
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let answer: [String: JSONValue]
        if let peer = UnixSocket.peer(c), peer.uid != runnerUID {
            answer = ["error": .string("not the runner's (uid \(peer.uid))")]
        } else if let request = Self.readRequest(c), case .object(let r)? = JSONValue.parse(request),
                  let command = r["command"]?.string, let cwd = r["cwd"]?.string {
            answer = call(command, cwd: cwd)
        } else {
            answer = ["error": .string("not a request: {\"command\": \"...\", \"cwd\": \"...\"}, at most \(Self.requestLimit) bytes")]
        }
        lock.locked { if answer["error"] == nil { served += 1 } else { refused += 1 } }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let bytes = try? encoder.encode(JSONValue.object(answer)) else { return }
        var sent = 0
        let all = Array(bytes)
        while sent < all.count {
            let n = all[sent...].withUnsafeBytes { write(c, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            sent += n
        }
    }

    static func readRequest(_ c: Int32) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while out.count <= requestLimit {
            let n = read(c, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return nil }
            if n == 0 { return out }
            out += buffer[0..<n]
        }
        return nil
    }

    /// The directory `cwd` names under the runner's output, opened component by component
    /// without following a link; nil (with why) when it is not there or not below it.
    func openWorkingDirectory(_ cwd: String) -> (fd: Int32, error: String?) {
        guard cwd == Self.outputPath || cwd.hasPrefix(Self.outputPath + "/") else {
            return (-1, "the working directory \(cwd) is not under \(Self.outputPath) (the runner's TMPDIR)")
        }
        let parts = cwd.dropFirst(Self.outputPath.count).split(separator: "/").map(String.init)
        if let bad = parts.first(where: { $0 == "." || $0 == ".." }) { return (-1, "the working directory \(cwd) has a \(bad) component") }
        var fd = run.openOutput()
        guard fd >= 0 else { return (-1, "the runner's output: \(FileSystem.errorText())") }
        for part in parts {
            let next = FileSystem.openDirectory(at: fd, FileSystem.name(part))
            let e = errno
            close(fd)
            guard next >= 0 else {
                let why = e == ENOTDIR || e == ELOOP ? "not a directory (or a link, which is never followed)" : FileSystem.errorText(e)
                return (-1, "\(cwd): \(part): \(why)")
            }
            fd = next
        }
        return (fd, nil)
    }

    /// Runs `command` in a sandbox of its own, in a read-only copy of `cwd`.
    func call(_ command: String, cwd: String) -> [String: JSONValue] {
        let context = run.context
        let policy: Policy
        do {
            policy = try context.policyLoader.load(Self.policy, variables: [:])
        } catch {
            return ["error": .string("policy \(Self.policy): \(error)")]
        }
        let (source, problem) = openWorkingDirectory(cwd)
        if let problem { return ["error": .string(problem)] }
        defer { close(source) }
        let scratch: TaskScratch
        do throws(BenchmarkError) {
            scratch = try TaskScratch(root: context.scratchRoot)
        } catch {
            return ["error": .string(error.message)]
        }
        defer { _ = scratch.remove() }
        let owner = (policy.identity.hostUID, policy.identity.hostGID)
        let copy: Int32
        do throws(BenchmarkError) {
            copy = try scratch.makeSandboxDirectory("cwd", owner: owner)
        } catch {
            return ["error": .string(error.message)]
        }
        defer { close(copy) }
        do throws(IOFailure) {
            try FileSystem.copyTree(from: source, to: copy, owner: owner, skip: [], symlinks: .refuse, label: cwd)
        } catch {
            return ["error": .string("copying the working directory: \(error)")]
        }
        var ov = PlanOverrides()
        ov.mounts = [MountSpec(kind: .readOnly(source: scratch.path + "/cwd"), destination: cwd)]
        ov.workingDirectory = cwd
        let out: Int32, err: Int32
        do throws(BenchmarkError) {
            out = try scratch.createOutput("stdout")
            err = try scratch.createOutput("stderr")
        } catch {
            return ["error": .string(error.message)]
        }
        let noInput = PayloadInput.empty()
        defer {
            close(out)
            close(err)
            if noInput >= 0 { close(noInput) }
        }
        guard noInput >= 0 else { return ["error": .string("stdin: \(ErrnoName.describe(errno))")] }
        let result: SandboxResult
        do throws(SandboxError) {
            let plan = try PlanCompiler.compile(policy: policy, command: ["/bin/bash", "-c", command], overrides: ov, hostEnvironment: [:])
            var options = RunOptions(audit: context.audit)
            options.stdio = (noInput, out, err)
            options.pageCache = context.pageCache
            result = try SandboxRunner.run(plan, options: options)
        } catch {
            return ["error": .string("the call's sandbox: \(error.message)")]
        }
        let stdout = FileSystem.readCapped(at: scratch.outFD, "stdout", cap: Self.outputCap) ?? []
        let stderr = FileSystem.readCapped(at: scratch.outFD, "stderr", cap: Self.outputCap) ?? []
        return ["exit": .number(Double(result.exitCode)),
                "stdout": .string(Data(stdout).base64EncodedString()),
                "stderr": .string(Data(stderr).base64EncodedString())]
    }
}
