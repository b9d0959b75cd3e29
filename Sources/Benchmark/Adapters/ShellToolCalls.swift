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
//     TMPDIR is there), taken as bytes (no NUL, no `.` or `..` component) and opened beneath
//     that directory's descriptor with openat2 (no link, no climbing out, no mount crossed);
//   - its tree is copied within `budget` (regular files and directories only, on the output's
//     file system, bounded depth, entries and bytes) into a tmpfs of the call's own and bound
//     read-only at the same path in a fresh sandbox, where `bash -c <command>` runs: no network,
//     nothing else of the runner (agent.py, /work/in, the rest of /work/out), no environment but
//     the policy's, 30 s at most;
//   - its exit status and its stdout and stderr (each at most `outputCap`) go back. Nothing is
//     copied back: a writable working directory (srt's `allowWrite`) is refused by the shim.
// At most `slots` connections are taken at once (a slot before accept: the rest wait in the
// kernel), each must send its whole request within 5 s of being taken, and when the runner's
// sandbox ends every connection is shut and every call's sandbox killed.

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
    /// Seconds a connection has to send its whole request.
    static let requestSeconds = 5.0
    /// What a call's working directory may hold.
    static let budget = CopyBudget()

    private let listener: Int32
    private let run: ToolRun
    /// The host directory holding the socket (bound into the runner).
    let directory: String
    private let runnerUID: uid_t
    private let slots = DispatchSemaphore(value: ShellToolCalls.slots)
    private let done = DispatchGroup()
    private let loopEnded = DispatchSemaphore(value: 0)
    private let lock = NSLockLite()
    private var stopped = false
    /// Connections being served and the calls' sandboxes running, for `stop`.
    private var connections: Set<Int32> = []
    private var running: [ObjectIdentifier: SandboxSignals] = [:]
    /// Calls served, and calls refused (for the run's log).
    private(set) var served = 0
    private(set) var refused = 0
    /// Calls whose client went before they ended (tau2's timeout kills srt): not run, or killed.
    private(set) var abandoned = 0

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
        var wake = timeval(tv_sec: 0, tv_usec: 200_000)
        guard UnixSocket.bind(fd, address) == 0, chmod(path, 0o666) == 0, listen(fd, 16) == 0,
              setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wake, socklen_t(MemoryLayout<timeval>.size)) == 0 else {
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

    /// Stops accepting, shuts every connection, kills every call's sandbox, waits for them and
    /// says how many calls there were.
    func stop(label: String) {
        // Under the lock: a handler closes its descriptor only after taking it out of the set,
        // so no number shut here can have been reused meanwhile.
        let calls = lock.locked { () -> [SandboxSignals] in
            stopped = true
            for c in connections { shutdown(c, Int32(SHUT_RDWR)) }
            for s in running.values { s.kill() }
            return Array(running.values)
        }
        loopEnded.wait()
        done.wait()
        let killed = (calls.isEmpty ? "" : ", \(calls.count) killed when the runner ended") + (abandoned == 0 ? "" : ", \(abandoned) abandoned by their client")
        run.context.log("\(label): \(served) shell tool call(s) run in sandboxes of their own, \(refused) refused\(killed)")
    }

    /// Takes connections until `stop`: a slot first (connections beyond `slots` wait in the
    /// listen backlog, not here), then accept, which wakes every 200 ms (SO_RCVTIMEO) to see
    /// whether the run has ended. The loop closes the listener itself, so no descriptor is
    /// closed under a thread still using it.
    private func acceptLoop() {
        defer {
            close(listener)
            loopEnded.signal()
        }
        while !lock.locked({ stopped }) {
            slots.wait()
            let c = UnixSocket.accept(listener)
            if c < 0 {
                let e = errno
                slots.signal()
                if e == EINTR || e == EAGAIN || e == EWOULDBLOCK { continue }
                // Out of descriptors (this process's or the system's): wait, not end.
                if e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM {
                    usleep(100_000)
                    continue
                }
                return
            }
            // Entered under the lock `stop` sets `stopped` under: a call is either counted
            // before `stop` waits, or refused here.
            let serving = lock.locked { () -> Bool in
                if stopped { return false }
                done.enter()
                connections.insert(c)
                return true
            }
            guard serving else {
                close(c)
                slots.signal()
                return
            }
            DispatchQueue.global().async { [self] in
                defer {
                    lock.locked { _ = connections.remove(c) }
                    close(c)
                    slots.signal()
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
        setsockopt(c, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let answer: [String: JSONValue]
        // The runner's user (every sandbox's host user is the same unprivileged id) in a pid
        // namespace of its own: a host process of that user is not the runner. A peer already
        // gone (the runner ended while its call waited for a slot) is not served either.
        let peer = UnixSocket.peer(c), sandboxed = peer.flatMap { UnixSocket.inOtherPidNamespace($0.pid) }
        if peer?.uid == runnerUID && sandboxed == nil {
            answer = ["error": .string(Self.gone)]
        } else if peer?.uid == runnerUID && sandboxed == true {
            if let request = Self.readRequest(c, deadline: TaskRunner.now() + Self.requestSeconds), case .object(let r)? = JSONValue.parse(request),
                  let command = r["command"]?.string, let cwd = r["cwd"]?.string {
                answer = call(command, cwd: cwd, connection: c)
            } else {
                answer = ["error": .string("not a request: {\"command\": \"...\", \"cwd\": \"...\"}, at most \(Self.requestLimit) bytes in \(Int(Self.requestSeconds)) s")]
            }
        } else {
            // Read (bounded) before answering: closing on an unread request would reset the
            // connection, and the caller would not learn why.
            _ = Self.readRequest(c, deadline: TaskRunner.now() + Self.requestSeconds)
            answer = ["error": .string("not the runner's connection")]
        }
        lock.locked {
            if answer["error"] == nil { served += 1 } else if answer["error"]?.string == Self.gone { abandoned += 1 } else { refused += 1 }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        guard let bytes = try? encoder.encode(JSONValue.object(answer)) else { return }
        var sent = 0
        let all = Array(bytes)
        while sent < all.count {
            let n = all[sent...].withUnsafeBytes { send(c, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return }
            sent += n
        }
    }

    /// The request, read to its end by `deadline` (each wait bounded by the time left).
    static func readRequest(_ c: Int32, deadline: Double) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while out.count <= requestLimit {
            let left = deadline - TaskRunner.now()
            guard left > 0 else { return nil }
            var timeout = timeval(tv_sec: Int(left), tv_usec: Int((left - left.rounded(.down)) * 1_000_000) + 1)
            setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            let n = read(c, &buffer, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return nil }
            if n == 0 { return out }
            out += buffer[0..<n]
        }
        return nil
    }

    /// The directory `cwd` names under the runner's output, taken as bytes (a Swift string
    /// splits by characters, and a character can hold the `/` after it) and opened beneath the
    /// output directory (`FileSystem.openDirectory(beneath:)`); nil (with why) when it is not
    /// there or not below it.
    func openWorkingDirectory(_ cwd: String) -> (fd: Int32, error: String?) {
        let bytes = Array(cwd.utf8), prefix = Array(Self.outputPath.utf8)
        guard !bytes.contains(0), bytes.starts(with: prefix), bytes.count == prefix.count || bytes[prefix.count] == UInt8(ascii: "/") else {
            return (-1, "the working directory \(cwd.debugDescription) is not under \(Self.outputPath) (the runner's TMPDIR)")
        }
        let parts = bytes[prefix.count...].split(separator: UInt8(ascii: "/"))
        if parts.contains(where: { $0.elementsEqual([UInt8(ascii: ".")]) || $0.elementsEqual([UInt8(ascii: "."), UInt8(ascii: ".")]) }) {
            return (-1, "the working directory \(cwd.debugDescription) has a . or .. component")
        }
        let out = run.openOutput()
        guard out >= 0 else { return (-1, "the runner's output: \(FileSystem.errorText())") }
        defer { close(out) }
        let fd = FileSystem.openDirectory(beneath: out, Array(parts.joined(separator: [UInt8(ascii: "/")])))
        guard fd >= 0 else {
            let e = errno
            let why = e == ENOTDIR || e == ELOOP || e == EXDEV ? "not a directory of the output (a link, or a mount, is never followed)" : FileSystem.errorText(e)
            return (-1, "\(cwd.debugDescription): \(why)")
        }
        return (fd, nil)
    }

    static let gone = "the client has gone"

    /// Whether the client at the other end of `c` has gone (closed, not only half-closed as
    /// the shim does once it has sent its request).
    static func hungUp(_ c: Int32) -> Bool {
        var p = pollfd(fd: c, events: Int16(POLLIN), revents: 0)
        return poll(&p, 1, 0) > 0 && p.revents & Int16(POLLHUP) != 0
    }

    /// Runs `command` in a sandbox of its own, in a read-only copy of `cwd`; nothing when the
    /// client on `connection` has gone, and the sandbox killed if it goes meanwhile (tau2's own
    /// 30 s timeout kills srt: its call must not hold a slot after).
    func call(_ command: String, cwd: String, connection: Int32? = nil) -> [String: JSONValue] {
        if let c = connection, Self.hungUp(c) { return ["error": .string(Self.gone)] }
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
            try FileSystem.copyUntrustedTree(from: source, to: copy, owner: owner, budget: Self.budget, label: cwd)
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
            // Killed by `stop` when the runner's sandbox ends.
            let signals = try SandboxSignals()
            options.signals = signals
            let key = ObjectIdentifier(signals)
            guard lock.locked({ () -> Bool in
                if stopped { return false }
                running[key] = signals
                return true
            }) else { return ["error": .string("the runner's sandbox has ended")] }
            defer { lock.locked { _ = running.removeValue(forKey: key) } }
            // The client watched every 250 ms until the call ends (`finished`); the watcher
            // is gone before the connection is closed (`watcherGone`).
            let finished = DispatchSemaphore(value: 0), watcherGone = DispatchSemaphore(value: 0), abandoned = DispatchSemaphore(value: 0)
            if let c = connection {
                DispatchQueue.global().async {
                    defer { watcherGone.signal() }
                    while finished.wait(timeout: .now() + 0.25) == .timedOut {
                        if Self.hungUp(c) {
                            abandoned.signal()
                            signals.kill()
                            _ = finished.wait(timeout: .distantFuture)
                            return
                        }
                    }
                }
            }
            defer {
                if connection != nil {
                    finished.signal()
                    watcherGone.wait()
                }
            }
            // (`finished` is signalled twice on success; the watcher takes one and ends.)
            result = try SandboxRunner.run(plan, options: options)
            finished.signal()
            if abandoned.wait(timeout: .now()) == .success { return ["error": .string(Self.gone)] }
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
