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
    /// a container, or a Ray worker's, sharing this host's /dev/shm or cgroup tree) is looked
    /// for among every process when this one is in the initial pid namespace, which sees them
    /// all: a process of that namespace whose innermost pid (`NSpid`) is its.
    /// From any other namespace it cannot be seen and is taken to be alive: leaving its things
    /// alone is the safe mistake.
    public var isAlive: Bool {
        guard pidNamespace == Self.ownPidNamespace else {
            guard Self.ownPidNamespace == Self.initialPidNamespace else { return true }
            return Self.runsElsewhere(self)
        }
        return Self.startTime(of: pid) == startTime
    }

    /// The initial pid namespace's inode (the kernel's constant PROC_PID_INIT_INO).
    static let initialPidNamespace: UInt64 = 0xEFFF_FFFC

    /// Whether some process here is `owner`, numbered in another pid namespace.
    static func runsElsewhere(_ owner: ProcessIdentity) -> Bool {
        guard let dir = opendir("/proc") else { return true }
        defer { closedir(dir) }
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let pid = pid_t(name) else { continue }
            var st = stat()
            guard stat("/proc/\(pid)/ns/pid", &st) == 0, UInt64(st.st_ino) == owner.pidNamespace else { continue }
            let status = readText("/proc/\(pid)/status")
            guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("NSpid:") }),
                  let inner = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).last.flatMap({ pid_t($0) }) else { continue }
            // The pid alone: a start time read from here can differ from the one the owner read
            // (a time namespace shifts it), and a pid reused there only keeps things longer.
            if inner == owner.pid { return true }
        }
        return false
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
    public static let ownPidNamespace: UInt64 = {
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
