import Benchmark
import ExperimentModel
import Foundation
import Sandbox
import SandboxPolicy
import SupervisorIO

// What crosses between the host and a held-out VM besides the read-only shares: the console's
// tail (for the operator), the results port (the one answer), the egress port (the guest
// sandboxes' connections, through the host's proxies).

/// The last 64 KiB of qemu's console (the guest's kernel and init stages), kept for the
/// operator when a boot fails. Never shown to the coding agent.
final class ConsoleTail: @unchecked Sendable {
    private let lock = NSLock()
    private var buffer: [UInt8] = []
    static let keep = 64 << 10

    func drain(_ handle: FileHandle) {
        while true {
            let d = handle.availableData
            if d.isEmpty { return }
            lock.lock()
            buffer += d
            if buffer.count > 2 * Self.keep { buffer.removeFirst(buffer.count - Self.keep) }
            lock.unlock()
        }
    }

    var bytes: [UInt8] {
        lock.lock()
        defer { lock.unlock() }
        return Array(buffer.suffix(Self.keep))
    }
}

/// The host end of the guest's results port: a listening Unix socket in the supervisor's
/// private scratch directory that qemu connects its virtio-serial chardev to.
final class ResultsPort {
    let path: String
    private var fd: Int32

    enum Outcome: Equatable { case complete, bootTimeout, timeout, tooLarge, closed }

    init(path: String) throws {
        self.path = path
        fd = try Self.listen(path)
    }

    /// A Unix socket listening at `path` (qemu connects its chardev to it as it starts).
    static func listen(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ExperimentError(.io, "held-out VM: socket: \(ErrnoName.describe(errno))") }
        guard let addr = UnixSocket.address(path) else {
            Glibc.close(fd)
            throw ExperimentError(.io, "held-out VM: socket path too long: \(path)")
        }
        // qemu connects as its own unprivileged uid (`vm-exec`): the socket is writable by
        // all, reached only through its 0700 work directory (root's, and qemu's by its
        // read-search capability).
        guard UnixSocket.bind(fd, addr) == 0, chmod(path, 0o666) == 0, Glibc.listen(fd, 1) == 0 else {
            let e = errno
            Glibc.close(fd)
            throw ExperimentError(.io, "held-out VM: bind \(path): \(ErrnoName.describe(e))")
        }
        return fd
    }

    func close() {
        if fd >= 0 { Glibc.close(fd); fd = -1 }
        unlink(path)
    }

    /// Accepts qemu's one connection and reads until the guest's `end` line is in and the
    /// connection closes (qemu exits after the guest powers off), or a deadline or the cap.
    func read(bootDeadline: Double, deadline: Double, cap: Int) -> (outcome: Outcome, bytes: [UInt8], firstByte: Double?) {
        var conn: Int32 = -1
        defer { if conn >= 0 { Glibc.close(conn) } }
        var out: [UInt8] = []
        var first: Double?
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            let now = monotonicNow()
            let limit = first == nil ? min(bootDeadline, deadline) : deadline
            if now >= limit { return (first == nil ? .bootTimeout : .timeout, out, first) }
            var pfd = pollfd(fd: conn >= 0 ? conn : fd, events: Int16(POLLIN), revents: 0)
            let r = poll(&pfd, 1, Int32(min(1000, max(1, (limit - now) * 1000))))
            if r < 0 && errno != EINTR { return (.closed, out, first) }
            guard r > 0 else { continue }
            if conn < 0 {
                conn = accept(fd, nil, nil)
                if conn >= 0 { _ = fcntl(conn, F_SETFD, FD_CLOEXEC) }
                continue
            }
            let n = buffer.withUnsafeMutableBytes { Glibc.read(conn, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR || errno == EAGAIN { continue }; return (.closed, out, first) }
            if n == 0 { return (Self.isComplete(out) ? .complete : .closed, out, first) }
            if first == nil { first = monotonicNow() }
            out += buffer[0..<n]
            if out.count > cap { return (.tooLarge, out, first) }
        }
    }

    static func isComplete(_ bytes: [UInt8]) -> Bool {
        guard let text = String(validating: bytes, as: UTF8.self) else { return false }
        return text.split(separator: "\n").last?.hasPrefix("ahvm1 end ") == true
    }
}

/// The host's end of a held-out VM's egress: the proxies that serve the guest sandboxes'
/// connections, with the host's allowlist and inference gate, recording into the gate's
/// audit. One per sandbox class whose policy has `network: proxy` (`agent`: the tool's
/// sandboxes holding agent.py; `tool`: the scorer's; `task`: the agent phase of a task
/// autoharness runs, to its package mirrors); nil: that class has no network, and a stream the
/// guest opens for it is refused and recorded. The class is the guest's word (its tag): it
/// decides which allowlist applies only among the ones the config gives, and whose a
/// violation is counted as. So is a task's position after it (`agent-3`, `GuestEgress.tag`):
/// it decides only which task a vendor failure is counted against (`perTask`).
struct VMEgress {
    let agent: EgressProxy?
    let tool: EgressProxy?
    var task: EgressProxy? = nil
    let agentAudit: AuditLog
    let toolAudit: AuditLog
    /// The vendor's failures per task of the request, when the phase counts them.
    var perTask: SlotFailures? = nil
    static let sandbox = "held-out-vm"
}

/// The vendor failures the host's gate counted per task of a held-out VM's request, by the
/// position the guest's stream tags carry. The guest runs each task in a run of its own and
/// tags its streams; a tag naming no position of the request counts against none.
final class SlotFailures: Sendable {
    private let counts: Locked<[Int]>

    init(tasks: Int) { counts = Locked([Int](repeating: 0, count: tasks)) }

    func add(_ slot: Int) {
        counts.withLock { if counts.value.indices.contains(slot) { counts.value[slot] += 1 } }
    }

    var all: [Int] { counts.withLock { counts.value } }
}

/// The listening socket of the guest's `ah.egress` port, and the `EgressLink` over qemu's
/// connection to it.
final class EgressPort: @unchecked Sendable {
    private let listener: Int32
    let path: String
    private let proxies: VMEgress
    private let state = Locked<(link: EgressLink?, closed: Bool)>((nil, false))
    private let acceptorDone = Locked<Bool>(true)

    init(path: String, proxies: VMEgress) throws {
        self.path = path
        self.proxies = proxies
        listener = try ResultsPort.listen(path)
    }

    /// Accepts qemu's connection (on a thread of its own) and starts the link over it.
    func start() {
        acceptorDone.withLock { acceptorDone.value = false }
        let t = Thread { [self] in
            defer { acceptorDone.withLock { acceptorDone.value = true } }
            while !state.withLock({ state.value.closed }) {
                var pfd = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
                guard poll(&pfd, 1, 200) > 0 else { continue }
                let c = EgressLink.acceptCloexec(listener)
                guard c >= 0 else { continue }
                state.withLock {
                    guard !state.value.closed else { close(c); return }
                    let proxies = self.proxies
                    let link = EgressLink(port: c, role: .acceptor) { tag, fd in proxies.serve(tag: tag, fd) }
                    state.value.link = link
                    link.start()
                }
                return
            }
        }
        t.start()
    }

    /// Ends the link and the proxies' connections, waiting for each to be served to its end
    /// and recorded. Returns what went wrong, if anything: the link's protocol error (its text
    /// is the guest's doing), or connections still open. Call once qemu is gone.
    func finish() -> String? {
        let link: EgressLink? = state.withLock {
            state.value.closed = true
            return state.value.link
        }
        // The acceptor leaves within its poll interval; only then is the listener closed (a
        // number it might still use cannot be reused meanwhile).
        shutdown(listener, Int32(SHUT_RDWR))
        let end = monotonicNow() + 5
        while !acceptorDone.withLock({ acceptorDone.value }) && monotonicNow() < end { usleep(5_000) }
        close(listener)
        unlink(path)
        var problem: String?
        if let link {
            // qemu is gone, so the link has seen its socket close (or stops here).
            _ = link.waitUntilEnded(timeout: 5)
            link.stop()
            problem = link.failure
        }
        for p in [proxies.agent, proxies.tool, proxies.task].compactMap({ $0 }) {
            p.stop()
            if !p.drain(timeout: 20) && problem == nil { problem = "a connection of the guest's was still open 20 s after the VM ended" }
        }
        // Repeats past the audit's per-name limit, counted.
        proxies.agentAudit.finish(sandbox: VMEgress.sandbox)
        proxies.toolAudit.finish(sandbox: VMEgress.sandbox)
        return problem
    }
}

extension VMEgress {
    /// A stream the guest opened: to its class's proxy, or refused and recorded.
    func serve(tag: String, _ fd: Int32) {
        let (kind, slot) = Self.parse(tag)
        let isAgent = kind == "agent" || kind == "task"
        if let proxy = kind == "task" ? task : isAgent ? agent : tool {
            if let perTask, let slot {
                proxy.adopt(fd) { perTask.add(slot) }
            } else {
                proxy.adopt(fd)
            }
            return
        }
        var e = AuditEvent(sandbox: Self.sandbox, kind: .egress, name: "-", action: "denied")
        e.detail = "a \(isAgent ? "sandbox holding agent.py" : "scorer") in the held-out VM opened a connection, and its policy has no network"
        (isAgent ? agentAudit : toolAudit).record(e)
        close(fd)
    }

    /// A stream tag's class and task position: `agent`, `tool-12`.
    static func parse(_ tag: String) -> (kind: Substring, slot: Int?) {
        guard let dash = tag.lastIndex(of: "-") else { return (tag[...], nil) }
        return (tag[..<dash], Int(tag[tag.index(after: dash)...]))
    }
}
