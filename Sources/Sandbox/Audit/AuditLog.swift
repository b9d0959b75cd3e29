import Glibc
import PolicyModel
import SupervisorIO

/// Something the sandbox refused or stopped, as the supervisor saw it.
public struct AuditEvent: Sendable, Equatable {
    public enum Kind: String, Sendable {
        /// A syscall outside the allowlist (or with a refused argument) was attempted.
        case syscall
        /// The wall-clock timeout expired and the whole tree was killed.
        case timeout
        /// The memory controller killed a process of the sandbox.
        case memoryLimit = "memory_limit"
        /// A fork/clone failed because of the pids limit.
        case pidsLimit = "pids_limit"
        /// How many further events of one name were counted but not logged one by one.
        case repeated
        /// A request to the egress proxy, allowed or denied (`name` is host:port).
        case egress
        /// A verifier's reward file changed by a process other than its test script (`name`
        /// is the file's path in the verifier's sandbox); the reward is void.
        case rewardTampering = "reward_tampering"
        /// State shared by every task of a benchmark (a database cluster's roles or settings)
        /// changed during a run (`name` is what kind of state); the run's scores are void.
        case sharedStateChanged = "shared_state_changed"
        /// A symbolic link agent.py left in /app that leads out of it (`name` is `/app/PATH ->
        /// TARGET`), removed before the verifier started.
        case plantedLink = "planted_link"
        /// A FIFO, socket, device or link a runner left in its output (`name` is its path
        /// there), removed before the scorer started.
        case irregularFile = "irregular_file"
    }

    public var time: String
    public var sandbox: String
    public var kind: Kind
    /// Syscall name (`ptrace`, `i386:getpid`, `x32:getpid`) or a short detail for other kinds.
    public var name: String
    public var number: Int32?
    /// Host pid of the process that made the call.
    public var pid: Int32?
    /// The same process's pid inside the sandbox.
    public var sandboxPID: Int32?
    public var arguments: [UInt64]
    /// "EPERM", "ENOSYS" or "kill".
    public var action: String
    /// For `repeated`: how many events were folded into this line.
    public var count: Int?
    /// Why (e.g. "not on the allowlist").
    public var detail: String?
    /// For allowed `egress`: bytes sent by the sandbox and received by it.
    public var bytesUp: Int?
    public var bytesDown: Int?
    /// The policy the sandbox ran under (its name, or its file for a policy given by path),
    /// filled by the log for every sandbox it was told of (`AuditLog.policy(_:for:)`).
    public var policy: String?

    /// The kind of the events a `repeated` line counts (its detail says, e.g. "egress
    /// denied"); the event's own kind otherwise.
    public var countedKind: Kind {
        guard kind == .repeated else { return kind }
        return detail?.hasPrefix("egress ") == true ? .egress : .syscall
    }

    /// False for what the policy let through: an allowed connection, or a count of them.
    public var isViolation: Bool {
        countedKind != .egress || (kind == .egress ? action != "allowed" : detail != "egress allowed")
    }

    public init(time: String = AuditEvent.now(), sandbox: String, kind: Kind, name: String, number: Int32? = nil,
                pid: Int32? = nil, sandboxPID: Int32? = nil, arguments: [UInt64] = [], action: String, count: Int? = nil) {
        self.count = count
        self.time = time
        self.sandbox = sandbox
        self.kind = kind
        self.name = name
        self.number = number
        self.pid = pid
        self.sandboxPID = sandboxPID
        self.arguments = arguments
        self.action = action
    }

    /// One JSON object, no trailing newline.
    public var jsonLine: String {
        var f: [String] = [
            "\"time\":\(json(time))", "\"sandbox\":\(json(sandbox))", "\"event\":\(json(kind.rawValue))",
            "\"name\":\(json(name))",
        ]
        if let number { f.append("\"nr\":\(number)") }
        if let pid { f.append("\"pid\":\(pid)") }
        if let sandboxPID { f.append("\"sandbox_pid\":\(sandboxPID)") }
        if !arguments.isEmpty {
            f.append("\"args\":[" + arguments.map { "\"0x\(String($0, radix: 16))\"" }.joined(separator: ",") + "]")
        }
        f.append("\"action\":\(json(action))")
        if let count { f.append("\"count\":\(count)") }
        if let detail { f.append("\"detail\":\(json(detail))") }
        if let bytesUp { f.append("\"bytes_up\":\(bytesUp)") }
        if let bytesDown { f.append("\"bytes_down\":\(bytesDown)") }
        if let policy { f.append("\"policy\":\(json(policy))") }
        return "{" + f.joined(separator: ",") + "}"
    }

    /// UTC, RFC 3339 with milliseconds.
    public static func now() -> String {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        var t = ts.tv_sec
        var tmv = tm()
        gmtime_r(&t, &tmv)
        func p(_ v: Int32, _ w: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, w - s.count)) + s
        }
        return "\(p(tmv.tm_year + 1900, 4))-\(p(tmv.tm_mon + 1, 2))-\(p(tmv.tm_mday, 2))T\(p(tmv.tm_hour, 2)):\(p(tmv.tm_min, 2)):\(p(tmv.tm_sec, 2)).\(p(Int32(ts.tv_nsec / 1_000_000), 3))Z"
    }
}

/// JSON string literal for `s`.
func json(_ s: String) -> String {
    var out = "\""
    for u in s.unicodeScalars {
        switch u {
        case "\"": out += "\\\""
        case "\\": out += "\\\\"
        case "\n": out += "\\n"
        case "\r": out += "\\r"
        case "\t": out += "\\t"
        case _ where u.value < 0x20:
            let h = String(u.value, radix: 16)
            out += "\\u" + String(repeating: "0", count: 4 - h.count) + h
        default: out.unicodeScalars.append(u)
        }
    }
    return out + "\""
}

/// Appends audit events to a JSON Lines file (one `write` per event, O_APPEND, so several
/// sandboxes may share one file) and keeps them for the end-of-run summary.
///
/// A hostile payload can make thousands of refused calls a second. Each sandbox therefore
/// logs the first `perNameLimit` events of each name individually and only counts the rest
/// (written as one `repeated` line by `finish(sandbox:)`); beyond `distinctNameLimit` names
/// per sandbox, new names are folded into `other`. File and memory use stay bounded whatever
/// the payload does, and every attempt is still counted.
public final class AuditLog: @unchecked Sendable {
    private let fd: Int32
    public let path: String?
    private let lock = Mutex()
    private var _events: [AuditEvent] = []
    /// Per sandbox: events seen per name (including suppressed ones).
    private var seen: [String: [String: Int]] = [:]
    /// Per sandbox: the policy it runs under, named on each of its lines (`policy suggest`
    /// reads an audit shared by several sandboxes policy by policy).
    private var policies: [String: String] = [:]
    public var perNameLimit = 20
    public var distinctNameLimit = 200
    /// The first line that could not be written to the file (path and errno), if any.
    private var _writeFailure: String?
    /// Called once, from the thread that recorded the event, when the file first refuses a
    /// line (a full disk): a run that cannot keep its audit stops rather than go on unaudited.
    public let onWriteFailure: (@Sendable (String) -> Void)?

    /// A log that keeps events in memory only.
    public init() {
        fd = -1
        path = nil
        onWriteFailure = nil
    }

    /// A log that also appends to `path` (created 0600 if missing); `onWriteFailure` is
    /// called once if the file ever refuses a line.
    public init(path: String, onWriteFailure: (@Sendable (String) -> Void)? = nil) throws(SandboxError) {
        let f = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o600)
        guard f >= 0 else { throw SandboxError(.io, "audit file \(path): \(String(cString: strerror(errno)))", errno: errno) }
        fd = f
        self.path = path
        self.onWriteFailure = onWriteFailure
    }

    deinit { if fd >= 0 { close(fd) } }

    /// Names `policy` on every line `sandbox` writes from now until `finish(sandbox:)`.
    public func policy(_ policy: String, for sandbox: String) {
        lock.withLock { policies[sandbox] = policy }
    }

    public func record(_ e: AuditEvent) {
        lock.withLock {
            var names = seen[e.sandbox, default: [:]]
            // Counted per kind, action and name: an allowed connection and a refused one to the
            // same host are different things, and the `repeated` line says which it counts.
            var key = "\(e.kind.rawValue):\(e.action):\(e.name)"
            if names[key] == nil && names.count >= distinctNameLimit { key = "\(e.kind.rawValue):\(e.action):other" }
            let n = names[key, default: 0] + 1
            names[key] = n
            seen[e.sandbox] = names
            if n <= perNameLimit { append(e) }
        }
    }

    /// Writes one `repeated` line per name whose events were only counted, and forgets the
    /// sandbox's counters. The runner calls this when a sandbox is gone.
    public func finish(sandbox: String) {
        lock.withLock {
            defer { policies[sandbox] = nil }
            guard let names = seen.removeValue(forKey: sandbox) else { return }
            for (key, n) in names.sorted(by: { $0.key < $1.key }) where n > perNameLimit {
                // kind and action never contain ':'; the name (host:port) may.
                let parts = key.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false).map(String.init)
                var folded = AuditEvent(sandbox: sandbox, kind: .repeated, name: parts[2], action: "counted", count: n - perNameLimit)
                folded.detail = "\(parts[0]) \(parts[1])"  // what was counted: "egress allowed", "syscall EPERM"
                append(folded)
            }
        }
    }

    private func append(_ e: AuditEvent) {
        var e = e
        if e.policy == nil { e.policy = policies[e.sandbox] }
        _events.append(e)
        guard fd >= 0, _writeFailure == nil else { return }
        let line = e.jsonLine + "\n"
        let count = line.utf8.count
        var written = -1
        repeat { written = line.withCString { write(fd, $0, count) } } while written < 0 && errno == EINTR
        guard written != count else { return }
        // A short write is the disk filling up mid-line.
        let failure = "audit file \(path ?? "?"): \(ErrnoName.describe(written < 0 ? errno : ENOSPC))"
        _writeFailure = failure
        if let onWriteFailure { onWriteFailure(failure) }
    }

    /// The first write the audit file refused (path and error), or nil.
    public var writeFailure: String? { lock.withLock { _writeFailure } }

    public var events: [AuditEvent] { lock.withLock { _events } }

    /// `ptrace ×1, bpf ×2` in first-seen order of names, counting folded repeats.
    public func summary(for sandbox: String? = nil) -> (count: Int, text: String) {
        lock.withLock {
            var order: [String] = []
            var n: [String: Int] = [:]
            for e in _events where sandbox == nil || e.sandbox == sandbox {
                let k = e.kind == .syscall || e.kind == .repeated ? e.name : e.kind.rawValue
                if n[k] == nil { order.append(k) }
                n[k, default: 0] += e.count ?? 1
            }
            let total = n.values.reduce(0, +)
            // The eight most frequent names (first-seen order among equals), then a count.
            let top = order.enumerated().sorted { a, b in
                n[a.element]! != n[b.element]! ? n[a.element]! > n[b.element]! : a.offset < b.offset
            }.prefix(8).map(\.element)
            var text = top.map { "\($0) ×\(n[$0]!)" }.joined(separator: ", ")
            if order.count > top.count { text += ", and \(order.count - top.count) more names" }
            return (total, text)
        }
    }
}

/// A pthread mutex (the library avoids Foundation on the launch path).
public final class Mutex: @unchecked Sendable {
    private var m = pthread_mutex_t()
    public init() { pthread_mutex_init(&m, nil) }
    deinit { pthread_mutex_destroy(&m) }
    public func withLock<T>(_ body: () throws -> T) rethrows -> T {
        pthread_mutex_lock(&m)
        defer { pthread_mutex_unlock(&m) }
        return try body()
    }
}

/// A value behind a `Mutex`.
public final class Locked<Value>: @unchecked Sendable {
    private let mutex = Mutex()
    public var value: Value
    public init(_ value: Value) { self.value = value }
    public func withLock<T>(_ body: () throws -> T) rethrows -> T { try mutex.withLock(body) }
}
