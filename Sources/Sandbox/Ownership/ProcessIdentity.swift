import Glibc

/// A process as no other process can pass for it: pid, start time and pid namespace.
///
/// What a supervisor leaves on the host while it works (per-task scratch mounts, sandbox
/// cgroups, the broker's socket) carries the identity of the supervisor that made it, so a
/// later supervisor removes exactly the leftovers of supervisors that are gone and nothing
/// of one that still runs. A pid alone would not do: once its owner dies the kernel hands the
/// pid to another process, which would then protect a dead run's leftovers for as long as it
/// lives. The start time (clock ticks since boot, field 22 of /proc/PID/stat) tells the two
/// apart: with the pid it names one process for the life of the system.
public struct ProcessIdentity: Sendable, Equatable {
    public var pid: pid_t
    public var startTime: UInt64
    /// Inode of the pid namespace `pid` is numbered in.
    public var pidNamespace: UInt64

    public init(pid: pid_t, startTime: UInt64, pidNamespace: UInt64) {
        self.pid = pid
        self.startTime = startTime
        self.pidNamespace = pidNamespace
    }

    /// This process.
    public static let current = ProcessIdentity(pid: getpid(), startTime: startTime(of: getpid()) ?? 0, pidNamespace: ownPidNamespace)

    /// A running process of this pid namespace, or nil if `pid` names none.
    public static func of(_ pid: pid_t) -> ProcessIdentity? {
        startTime(of: pid).map { ProcessIdentity(pid: pid, startTime: $0, pidNamespace: ownPidNamespace) }
    }

    /// Whether the process still runs. One numbered in another pid namespace (a supervisor in
    /// a container that shares this host's /dev/shm or cgroup tree) is taken to be alive: its
    /// pid means nothing here, and leaving its things alone is the safe mistake.
    public var isAlive: Bool {
        guard pidNamespace == Self.ownPidNamespace else { return true }
        return Self.startTime(of: pid) == startTime
    }

    /// `oPID-START-PIDNS`: the identity as part of a file or cgroup name. A name is created
    /// atomically, so an owner recorded this way can never be half-written by a supervisor
    /// killed at that moment.
    public var tag: String { "o\(pid)-\(startTime)-\(pidNamespace)" }

    /// Parses `tag`; nil for anything else.
    public init?(tag: Substring) {
        guard tag.first == "o" else { return nil }
        let f = tag.dropFirst().split(separator: "-", omittingEmptySubsequences: false)
        guard f.count == 3, let pid = pid_t(f[0]), pid > 0, let start = UInt64(f[1]), let ns = UInt64(f[2]) else { return nil }
        self.init(pid: pid, startTime: start, pidNamespace: ns)
    }

    /// Inode of this process's pid namespace.
    static let ownPidNamespace: UInt64 = {
        var st = stat()
        return stat("/proc/self/ns/pid", &st) == 0 ? UInt64(st.st_ino) : 0
    }()

    /// Start time of `pid` in clock ticks since boot (field 22 of /proc/PID/stat), nil if no
    /// such process.
    static func startTime(of pid: pid_t) -> UInt64? {
        let text = readText("/proc/\(pid)/stat")
        // The command name (field 2) may contain spaces and parentheses: fields are counted
        // from the last ')'.
        guard let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        return fields.count > 19 ? UInt64(fields[19]) : nil
    }
}
