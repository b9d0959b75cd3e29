import CSandboxLaunch
import CSeccomp
import Glibc
import Logging
import SandboxPolicy

/// How a sandboxed command ended.
public struct SandboxResult: Sendable {
    public enum Termination: Sendable, Equatable {
        case exited(Int32)
        case signaled(Int32)
        /// `limits.timeout` expired; the whole tree was killed.
        case timedOut
        /// A setup stage failed; `message` reads like `mount /proc: Operation not permitted`.
        case setupFailed(message: String, errno: Int32)
        /// execve failed (ENOENT → 127, anything else → 126).
        case execFailed(errno: Int32)
    }

    public var sandboxID: String
    public var termination: Termination
    /// The command's exit status by the conventions of `timeout(1)`/`env(1)`: its own code,
    /// 128+N for signal N, 124 timeout, 125 setup failure, 126 not executable, 127 not found.
    public var exitCode: Int32 {
        switch termination {
        case .exited(let c): return c
        case .signaled(let s): return 128 + s
        case .timedOut: return 124
        case .setupFailed: return 125
        case .execFailed(let e): return e == ENOENT || e == ENOTDIR ? 127 : 126
        }
    }
    /// Refusals recorded for this sandbox.
    public var violations: [AuditEvent]
    public var memoryLimitHit: Bool
    public var pidsLimitHit: Bool
    public var enforcement: [LimitEnforcement]
    /// Anything the supervisor could not clean up (cgroup paths). Empty on success.
    public var leftovers: [String]
    /// The monitor was created inside its cgroup v2 directory by clone3(CLONE_INTO_CGROUP)
    /// rather than joining it as its first act after a fork.
    public var bornInCgroup = false
}

public struct RunOptions: @unchecked Sendable {
    public var audit: AuditLog
    public var logger: Logger
    /// Continue when a requested cgroup limit cannot be enforced (it is logged as NOT
    /// ENFORCED). Off by default: limits fail closed.
    public var allowUnenforcedLimits = false
    /// Supervisor fds for the payload's stdin/stdout/stderr (-1: inherit).
    public var stdio: (Int32, Int32, Int32) = (-1, -1, -1)
    /// Read end of a pipe; each byte written to it is a signal number to forward to the
    /// payload (how the CLI passes on ^C and SIGTERM).
    public var signalFD: Int32 = -1
    /// The cgroup layout to use; nil means this process's own (`CgroupHost.current`).
    public var cgroupHost: CgroupHost?
    /// Lets another thread freeze and thaw the whole sandbox while it runs.
    public var control: SandboxControl?
    /// Held-out runs: records the sandbox's read-only bind sources, whose cached pages the
    /// supervisor drops once the held-out sandboxes are gone.
    public var pageCache: PageCacheEviction?
    /// Create the monitor inside its v2 cgroup with clone3(CLONE_INTO_CGROUP) where the
    /// kernel has it (off: fork, then the monitor joins; kernels before 5.7 always do that).
    public var cloneIntoCgroup = true
    /// Start the monitor as the launcher executable (`Launcher.shared`) when there is one;
    /// off, or without one, it is a fork of this process.
    public var useLauncher = true

    public init(audit: AuditLog = AuditLog(), logger: Logger = Logger(label: "autoharness.sandbox")) {
        self.audit = audit
        self.logger = logger
    }
}

/// Freezes and thaws a running sandbox from another thread (e.g. the coding agent while a
/// gate's held-out tasks run, so nothing it does can overlap them).
///
/// The cgroup freezer, not signals: every thread of every process in the sandbox's cgroup
/// stops, whatever it does with SIGCONT, a zombie thread-group leader or a fork in flight,
/// and `freeze` returns only once the kernel reports the cgroup frozen. A supervisor killed
/// while a sandbox is frozen leaves it frozen; the next supervisor's first launch ends it
/// (`SandboxCgroup.sweepOrphans`).
public final class SandboxControl: @unchecked Sendable {
    private let lock = Mutex()
    private var cgroup: SandboxCgroup?
    private var frozen = false

    public init() {}

    func attach(_ c: SandboxCgroup) {
        lock.withLock { cgroup = c }
    }

    func detach() {
        lock.withLock {
            cgroup = nil
            frozen = false
        }
    }

    /// Freezes the whole sandbox and verifies it; a no-op when no sandbox is running.
    /// Throws (having thawed) if the freeze cannot be verified.
    public func freeze() throws(SandboxError) {
        var failure: SandboxError?
        lock.withLock {
            guard let cgroup, !frozen else { return }
            do throws(SandboxError) {
                try cgroup.freeze()
                frozen = true
            } catch {
                failure = error
            }
        }
        if let failure { throw failure }
    }

    /// True while the kernel reports the running sandbox frozen.
    public var isFrozen: Bool { lock.withLock { cgroup?.isFrozen ?? false } }

    /// Whether the running sandbox has a cgroup freezer (nil: no sandbox running).
    public var canFreeze: Bool? { lock.withLock { cgroup.map { $0.freezer != nil } } }

    /// Kills the whole running sandbox and waits until none of its processes is left.
    /// Returns false if some were still there after `seconds`.
    public func stop(within seconds: Double) -> Bool {
        kill()
        let deadline = monotonicNow() + seconds
        while !processIDs.isEmpty {
            if monotonicNow() > deadline { return false }
            usleep(5_000)
        }
        return true
    }

    /// Host pids of every process in the running sandbox (its monitor included).
    public var processIDs: [pid_t] { lock.withLock { cgroup?.remainingProcesses() ?? [] } }

    /// Kills every process of the running sandbox, frozen or not.
    public func kill() {
        lock.withLock {
            cgroup?.killAll()
            frozen = false
        }
    }

    public func thaw() throws(SandboxError) {
        lock.withLock {
            cgroup?.thaw()
            frozen = false
        }
    }
}

/// Runs launch plans. `run` blocks its thread until the sandbox is gone and cleaned up;
/// call it from a dedicated thread, never from a cooperative-pool task.
public enum SandboxRunner {
    /// Read once: the kernel's Landlock ABI does not change while we run.
    static let landlockABI = ahl_landlock_abi()

    public static func run(_ plan: LaunchPlan, options: RunOptions) throws(SandboxError) -> SandboxResult {
        guard geteuid() == 0 else {
            throw SandboxError(.notPrivileged, "sandboxes need root (CAP_SYS_ADMIN, CAP_SETUID, CAP_SETGID in the initial namespaces) to build namespaces and write id maps")
        }
        let log = options.logger
        try options.pageCache?.record(plan)
        let cgroup = try SandboxCgroup(id: plan.sandboxID, limits: plan.limits, host: options.cgroupHost ?? .current,
                                       allowUnenforced: options.allowUnenforcedLimits, freezable: options.control != nil)
        for line in SandboxCgroup.sweepNow(options.cgroupHost ?? .current) { log.warning("\(line)") }
        defer { options.control?.detach() }
        Timing.mark("cgroups created")
        var enforcement = cgroup.enforcement
        for r in plan.rlimits {
            let clamped = r.value < r.requested ? " (lowered from \(r.requested) to the host's hard limit)" : ""
            enforcement.append(.init(limit: r.name, value: String(r.value), mechanism: "rlimit (per process)\(clamped)"))
        }
        if let t = plan.limits.timeoutSeconds { enforcement.append(.init(limit: "timeout", value: "\(t)s", mechanism: "supervisor kills the pid namespace")) }
        if plan.landlock != .off {
            let abi = Self.landlockABI
            enforcement.append(.init(limit: "landlock", value: plan.landlock.rawValue,
                                     mechanism: abi > 0 ? "Landlock ABI \(abi) (writes only beneath read-write mounts)" : "NOT APPLIED: the kernel has no Landlock"))
        }
        log.debug("sandbox \(plan.sandboxID): policy \(plan.policyName); limits: \(enforcement.map(\.description).joined(separator: "; "))")

        let storage = CPlan(plan, stdio: options.stdio, cgroupJoin: cgroup.selfJoinFiles)
        // The v2 directory held open across the fork: clone3 places the monitor by this fd.
        var intoFD: Int32 = -1
        if options.cloneIntoCgroup, let target = cgroup.cloneTarget {
            intoFD = open(target.directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if intoFD >= 0 {
                storage.plan.cgroup_into_fd = intoFD
                storage.plan.cgroup_into_join = Int32(target.joinIndex)
            }
        }
        var child = ahl_child()
        let launcher = options.useLauncher ? Launcher.shared : nil
        let rc = withUnsafePointer(to: &storage.plan) { p in launcher.map { ahl_spawn_exec(p, $0.fd, &child) } ?? ahl_spawn(p, &child) }
        if intoFD >= 0 { close(intoFD) }
        guard rc == 0 else {
            cgroup.remove()
            throw SandboxError(.launch, "fork: \(String(cString: strerror(rc)))", errno: rc)
        }
        Timing.mark((child.born_in_cgroup != 0 ? "monitor cloned into its cgroup" : "monitor forked") + (launcher != nil ? " (launcher)" : ""))
        log.debug("sandbox \(plan.sandboxID): monitor \(launcher.map { "is the launcher \($0.path)" } ?? "forked from the supervisor (\(options.useLauncher ? Launcher.unavailableReason ?? "" : "launcher turned off"))")")
        if child.born_in_cgroup != 0 {
            log.debug("sandbox \(plan.sandboxID): monitor created inside \(cgroup.cloneTarget!.directory) by clone3(CLONE_INTO_CGROUP)")
        }
        options.control?.attach(cgroup)
        var session = Session(plan: plan, child: child, cgroup: cgroup, options: options)
        let result = session.supervise()
        var r = result
        r.enforcement = enforcement
        r.bornInCgroup = child.born_in_cgroup != 0
        withExtendedLifetime(storage) {}
        return r
    }
}

/// One running sandbox, seen from the supervisor.
private struct Session {
    let plan: LaunchPlan
    let child: ahl_child
    let cgroup: SandboxCgroup
    let options: RunOptions

    var notifyFD: Int32 = -1
    var proxy: EgressProxy?
    var setupError: (stage: Int32, errno: Int32, index: Int32)?
    var execErrno: Int32?
    var waitStatus: Int32?
    var timedOut = false
    var killed = false

    init(plan: LaunchPlan, child: ahl_child, cgroup: SandboxCgroup, options: RunOptions) {
        self.plan = plan
        self.child = child
        self.cgroup = cgroup
        self.options = options
    }

    mutating func supervise() -> SandboxResult {
        var ownError: String?
        if let err = handshake() {
            ownError = err
            // The monitor is our own child, not yet reaped: kill it directly, since a monitor
            // that is stuck would never read a kill byte. Its death takes the sandbox with it.
            sendControl(UInt8(AHL_CTL_KILL))
            kill(child.pid, SIGKILL)
        }
        eventLoop()
        proxy?.stop()
        Timing.mark("sandbox ran and exited")
        var status: Int32 = 0
        while waitpid(child.pid, &status, 0) < 0 && errno == EINTR {}
        if notifyFD >= 0 { close(notifyFD) }
        close(child.report_fd)
        close(child.control_fd)

        let memHit = cgroup.memoryLimitHit()
        let pidsHit = cgroup.pidsLimitHit()
        if memHit { record(.memoryLimit, "memory limit reached; the kernel killed a process", action: "kill") }
        if pidsHit { record(.pidsLimit, "pids limit reached; fork/clone failed", action: "EAGAIN") }
        let leftovers = cgroup.remove()
        options.audit.finish(sandbox: plan.sandboxID)
        Timing.mark("cleaned up")

        let termination: SandboxResult.Termination
        if let ownError {
            termination = .setupFailed(message: ownError, errno: 0)
        } else if timedOut {
            termination = .timedOut
        } else if let e = setupError {
            termination = .setupFailed(message: describe(stage: e.stage, index: e.index) + ": " + String(cString: strerror(e.errno)), errno: e.errno)
        } else if let e = execErrno {
            termination = .execFailed(errno: e)
        } else if let st = waitStatus {
            termination = (st & 0x7f) == 0 ? .exited((st >> 8) & 0xff) : .signaled(st & 0x7f)
        } else if (status & 0x7f) == 0 {
            // The monitor ended without a report from init (e.g. init was killed).
            termination = .setupFailed(message: "sandbox init ended without reporting (monitor status \((status >> 8) & 0xff))", errno: 0)
        } else {
            termination = .signaled(status & 0x7f)
        }
        return SandboxResult(
            sandboxID: plan.sandboxID, termination: termination,
            violations: options.audit.events.filter { $0.sandbox == plan.sandboxID },
            memoryLimitHit: memHit, pidsLimitHit: pidsHit, enforcement: [], leftovers: leftovers)
    }

    /// Waits for the monitor to unshare (it joined its cgroups before that), writes the id
    /// maps, then lets it continue. Returns a message if the sandbox must be abandoned.
    mutating func handshake() -> String? {
        switch nextMessage(timeoutMS: 10_000) {
        case .message(let m) where m.kind == AHL_MSG_UNSHARED.rawValue:
            break
        case .message(let m):
            handle(m, fd: -1)
            return nil  // a setup error already reported by the child
        case .eof, .timeout:
            return "sandbox monitor did not start"
        }
        Timing.mark("namespaces unshared")
        let pid = child.pid
        let id = plan.identity
        do throws(SandboxError) {
            // setgroups must be denied before gid_map is written; the maps give the sandbox
            // exactly one uid and one gid, both unprivileged on the host.
            try SandboxCgroup.write("/proc/\(pid)/setgroups", "deny")
            try SandboxCgroup.write("/proc/\(pid)/uid_map", "\(id.uid) \(id.hostUID) 1\n")
            try SandboxCgroup.write("/proc/\(pid)/gid_map", "\(id.gid) \(id.hostGID) 1\n")
            Timing.mark("id maps written")
        } catch {
            return "id maps: \(error.message)"
        }
        sendControl(UInt8(AHL_CTL_GO))
        return nil
    }

    mutating func eventLoop() {
        let deadline = plan.limits.timeoutSeconds.map { monotonicNow() + $0 }
        var reportOpen = true
        var req: UnsafeMutablePointer<seccomp_notif>?
        var resp: UnsafeMutablePointer<seccomp_notif_resp>?
        _ = seccomp_notify_alloc(&req, &resp)
        defer { seccomp_notify_free(req, resp) }
        var signalOpen = options.signalFD >= 0

        while reportOpen || notifyFD >= 0 {
            var fds: [pollfd] = []
            if reportOpen { fds.append(pollfd(fd: child.report_fd, events: Int16(POLLIN), revents: 0)) }
            if notifyFD >= 0 { fds.append(pollfd(fd: notifyFD, events: Int16(POLLIN), revents: 0)) }
            if signalOpen { fds.append(pollfd(fd: options.signalFD, events: Int16(POLLIN), revents: 0)) }
            var timeout: Int32 = -1
            if let deadline, !timedOut {
                let left = deadline - monotonicNow()
                if left <= 0 {
                    timedOut = true
                    record(.timeout, "timeout after \(plan.limits.timeoutSeconds!)s; killed the sandbox", action: "kill")
                    killSandbox()
                    continue
                }
                timeout = Int32(min(left * 1000 + 1, 60_000))
            }
            let n = poll(&fds, nfds_t(fds.count), timeout)
            if n < 0 && errno != EINTR { break }
            if n <= 0 { continue }
            for p in fds where p.revents != 0 {
                if p.fd == child.report_fd {
                    var m = ahl_msg()
                    var fd: Int32 = -1
                    let got = ahl_recv_msg(child.report_fd, &m, &fd)
                    if got <= 0 {
                        reportOpen = false
                        Timing.mark("sandbox processes gone")
                    } else { handle(m, fd: fd) }
                } else if p.fd == notifyFD {
                    if p.revents & Int16(POLLIN) != 0, let req, let resp {
                        answerNotification(req, resp)
                    } else if p.revents & Int16(POLLHUP | POLLERR) != 0 {
                        close(notifyFD)
                        notifyFD = -1
                    }
                } else if p.fd == options.signalFD {
                    var b: UInt8 = 0
                    if read(options.signalFD, &b, 1) == 1 { sendControl(b) } else { signalOpen = false }
                }
            }
        }
    }

    mutating func handle(_ m: ahl_msg, fd: Int32) {
        switch UInt32(m.kind) {
        case AHL_MSG_LISTENER.rawValue:
            Timing.mark("payload privileges dropped, seccomp installed")
            if notifyFD >= 0 { close(notifyFD) }
            notifyFD = fd
        case AHL_MSG_SETUP_ERROR.rawValue:
            setupError = (m.stage, m.err, m.index)
        case AHL_MSG_PROXY_LISTENER.rawValue:
            guard plan.network.mode == .proxy, proxy == nil else {
                if fd >= 0 { close(fd) }
                return
            }
            let p = EgressProxy(listener: fd, allow: plan.network.allow, audit: options.audit, sandbox: plan.sandboxID)
            p.start()
            proxy = p
        case AHL_MSG_EXEC_ERROR.rawValue:
            execErrno = m.err
        case AHL_MSG_EXIT.rawValue:
            Timing.mark("payload exited")
            waitStatus = Int32(truncatingIfNeeded: m.value)
        case AHL_MSG_STARTED.rawValue:
            Timing.mark("filesystem built, payload forked")
        default:
            if fd >= 0 { close(fd) }
        }
    }

    /// Reports a refused syscall and answers it. The payload's thread is blocked in the
    /// kernel until this reply, so it never proceeds past a refused call.
    mutating func answerNotification(_ req: UnsafeMutablePointer<seccomp_notif>, _ resp: UnsafeMutablePointer<seccomp_notif_resp>) {
        memset(req, 0, MemoryLayout<seccomp_notif>.size)
        guard seccomp_notify_receive(notifyFD, req) == 0 else { return }  // the caller died meanwhile
        let d = req.pointee.data
        let native = SeccompCompiler.isNative(arch: d.arch, nr: d.nr)
        let name = SeccompCompiler.name(nr: d.nr, arch: d.arch)
        let refusal = plan.filter.refusal(nr: d.nr, nativeArch: native)
        let args = [d.args.0, d.args.1, d.args.2, d.args.3, d.args.4, d.args.5]
        resp.pointee.id = req.pointee.id
        resp.pointee.flags = 0
        if native && plan.filter.quietNumbers.contains(d.nr) {
            // seccomp.quiet: refused as the kernel would if it lacked the call, unreported.
            resp.pointee.val = 0
            resp.pointee.error = -ENOSYS
            _ = seccomp_notify_respond(notifyFD, resp)
            return
        }
        if native && plan.filter.emulated.contains(d.nr) {
            // sysinfo: constants instead of the host's counters (not a violation).
            let ok = Self.writeSysinfo(pid: req.pointee.pid, address: args[0], notifyFD: notifyFD, id: req.pointee.id)
            resp.pointee.val = 0
            resp.pointee.error = ok ? 0 : -EFAULT
            _ = seccomp_notify_respond(notifyFD, resp)
            return
        }
        var routine = false
        if native && name == "clone3" {
            // glibc tries clone3 before clone for every thread; only a clone3 asking for new
            // namespaces is an attempt worth reporting. The flags live in user memory.
            let flags = readWord(pid: req.pointee.pid, address: args[0])
            routine = flags.map { $0 & ArgumentRules.namespaceFlags == 0 } ?? false
        }
        if native && (name == "set_mempolicy" || (name == "mbind" && args[5] & ArgumentRules.mbindMoveFlags == 0)) {
            routine = true  // a memory-policy hint (ArgumentRules.mbindMoveFlags): refused, not reported
        }
        if !routine {
            record(.syscall, name, number: d.nr, pid: Int32(bitPattern: req.pointee.pid),
                   sandboxPID: sandboxPID(of: Int32(bitPattern: req.pointee.pid)), arguments: args,
                   action: refusal.map { ErrnoName.name($0) } ?? "kill")
        }
        resp.pointee.val = 0
        resp.pointee.error = -(refusal ?? EPERM)
        _ = seccomp_notify_respond(notifyFD, resp)
        if refusal == nil && !killed {
            killed = true
            killSandbox()
        }
    }

    /// A `struct sysinfo` (x86_64/aarch64 layout, 112 bytes) agreeing with the sandbox's
    /// masked /proc: uptime 1000 s, no load, total memory as the host has it and all of it
    /// free, no swap, one process. Written into the caller's memory through /proc/PID/mem,
    /// opened before the notification id is checked still valid (so the pid cannot have been
    /// reused by another process in between). /proc/PID/mem writes even where the process
    /// itself may not (a read-only page, its code, the vDSO), so the range must lie in
    /// writable mappings, as the kernel's own copy-out requires; otherwise EFAULT.
    static func writeSysinfo(pid: UInt32, address: UInt64, notifyFD: Int32, id: UInt64) -> Bool {
        let fd = open("/proc/\(pid)/mem", O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let mapsFD = open("/proc/\(pid)/maps", O_RDONLY | O_CLOEXEC)
        guard mapsFD >= 0 else { return false }
        defer { close(mapsFD) }
        guard seccomp_notify_id_valid(notifyFD, id) == 0 else { return false }
        guard mappingsWritable(maps: readAllBytes(mapsFD), from: address, count: 112) else { return false }
        var info = [UInt8](repeating: 0, count: 112)
        func put(_ v: UInt64, at offset: Int, size: Int = 8) {
            for i in 0..<size { info[offset + i] = UInt8(truncatingIfNeeded: v >> (8 * UInt64(i))) }
        }
        let total = Self.hostMemoryTotal
        put(1000, at: 0)           // uptime
        put(total, at: 32)         // totalram (loads[3] at 8..31 stay 0)
        put(total, at: 40)         // freeram
        put(1, at: 80, size: 2)    // procs (after shared, buffer, totalswap, freeswap)
        put(1, at: 104, size: 4)   // mem_unit (after pad, totalhigh, freehigh)
        let n = info.withUnsafeBytes { pwrite(fd, $0.baseAddress, 112, off_t(Int64(bitPattern: address))) }
        return n == 112
    }

    /// MemTotal of the host in bytes, as the sandbox's /proc/meminfo shows it.
    static let hostMemoryTotal: UInt64 = {
        let text = readText("/proc/meminfo")
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix("MemTotal:") }),
              let kb = UInt64(line.split(separator: " ").dropFirst().first ?? "") else { return 0 }
        return kb * 1024
    }()

    mutating func record(_ kind: AuditEvent.Kind, _ name: String, number: Int32? = nil, pid: Int32? = nil,
                         sandboxPID: Int32? = nil, arguments: [UInt64] = [], action: String) {
        options.audit.record(AuditEvent(sandbox: plan.sandboxID, kind: kind, name: name, number: number, pid: pid,
                                        sandboxPID: sandboxPID, arguments: arguments, action: action))
    }

    /// Asks the monitor to kill init (which takes the pid namespace with it). A frozen
    /// monitor cannot act on that, so a frozen sandbox is killed through its cgroup instead,
    /// without thawing it first.
    func killSandbox() {
        if cgroup.isFrozen { cgroup.killAll() }
        sendControl(UInt8(AHL_CTL_KILL))
    }

    func sendControl(_ byte: UInt8) {
        var b = byte
        _ = send(child.control_fd, &b, 1, Int32(MSG_NOSIGNAL))
    }

    enum Next { case message(ahl_msg), eof, timeout }

    mutating func nextMessage(timeoutMS: Int32) -> Next {
        var p = pollfd(fd: child.report_fd, events: Int16(POLLIN), revents: 0)
        var r: Int32
        repeat { r = poll(&p, 1, timeoutMS) } while r < 0 && errno == EINTR
        guard r > 0 else { return .timeout }
        var m = ahl_msg()
        var fd: Int32 = -1
        guard ahl_recv_msg(child.report_fd, &m, &fd) > 0 else { return .eof }
        if fd >= 0 { close(fd) }
        return .message(m)
    }

    func describe(stage: Int32, index: Int32) -> String {
        let name = String(cString: ahl_stage_name(stage))
        if stage == AHL_STAGE_MOUNT_ENTRY.rawValue || stage == AHL_STAGE_OPEN_SOURCE.rawValue,
           index >= 0, Int(index) < plan.mounts.count {
            let m = plan.mounts[Int(index)]
            return "\(name) \(m.summary) (\(m.origin))"
        }
        if stage == AHL_STAGE_RLIMIT.rawValue, index >= 0, Int(index) < plan.rlimits.count {
            return "\(name) \(plan.rlimits[Int(index)].name)"
        }
        if stage == AHL_STAGE_CHDIR.rawValue { return "\(name) \(plan.workingDirectory)" }
        if stage == AHL_STAGE_JOIN_CGROUP.rawValue {
            let files = cgroup.selfJoinFiles
            if index >= 0, Int(index) < files.count { return "\(name) (\(files[Int(index)]))" }
        }
        return name
    }
}

/// The sandbox-namespace pid of a host pid (last field of NSpid), if still readable.
func sandboxPID(of pid: Int32) -> Int32? {
    for line in readText("/proc/\(pid)/status").split(separator: "\n") where line.hasPrefix("NSpid:") {
        return line.split(whereSeparator: { $0 == "\t" || $0 == " " }).last.flatMap { Int32($0) }
    }
    return nil
}

/// Reads 8 bytes of another process's memory (for reporting only; never trusted).
func readWord(pid: UInt32, address: UInt64) -> UInt64? {
    let fd = open("/proc/\(pid)/mem", O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var v: UInt64 = 0
    let n = pread(fd, &v, 8, off_t(Int64(bitPattern: address)))
    return n == 8 ? v : nil
}

func monotonicNow() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

/// The C view of a plan. Every pointer the forked children read is allocated here, before
/// the fork, and freed only after the sandbox is gone.
final class CPlan {
    var plan = ahl_plan()
    private var strings: [UnsafeMutablePointer<CChar>] = []
    private var argv: UnsafeMutablePointer<UnsafePointer<CChar>?>
    private var envp: UnsafeMutablePointer<UnsafePointer<CChar>?>
    private var mounts: UnsafeMutablePointer<ahl_mount>
    private var rlimits: UnsafeMutablePointer<ahl_rlimit>
    private var bpf: UnsafeMutableRawPointer
    private var scratch: UnsafeMutablePointer<Int32>
    private var join: UnsafeMutablePointer<UnsafePointer<CChar>?>

    init(_ p: LaunchPlan, stdio: (Int32, Int32, Int32), cgroupJoin: [String]) {
        argv = .allocate(capacity: p.command.count + 1)
        envp = .allocate(capacity: p.environment.count + 1)
        mounts = .allocate(capacity: max(1, p.mounts.count))
        rlimits = .allocate(capacity: max(1, p.rlimits.count))
        bpf = .allocate(byteCount: max(8, p.filter.bpf.count), alignment: 8)
        scratch = .allocate(capacity: p.mounts.count + Int(AHL_DEVICE_COUNT))
        join = .allocate(capacity: cgroupJoin.count + 1)
        func c(_ s: String) -> UnsafePointer<CChar> {
            let d = strdup(s)!
            strings.append(d)
            return UnsafePointer(d)
        }
        for (i, a) in p.command.enumerated() { argv[i] = c(a) }
        argv[p.command.count] = nil
        for (i, e) in p.environment.enumerated() { envp[i] = c(e) }
        envp[p.environment.count] = nil
        for (i, m) in p.mounts.enumerated() {
            var cm = ahl_mount()
            cm.dest = c(m.destination)
            switch m.kind {
            case .bind(let source, let readOnly, let device, let inode, let isDirectory, let noSymlinks):
                cm.kind = AHL_MOUNT_BIND.rawValue
                cm.source = c(source)
                cm.flags = (readOnly ? UInt32(AHL_MOUNT_READONLY) : 0) | (isDirectory ? UInt32(AHL_MOUNT_SOURCE_DIR) : 0)
                    | (noSymlinks ? UInt32(AHL_MOUNT_NO_SYMLINKS) : 0)
                cm.dev = device
                cm.ino = inode
            case .tmpfs(let size, let mode):
                cm.kind = AHL_MOUNT_TMPFS.rawValue
                cm.size = size
                cm.mode = mode
            case .hide:
                cm.kind = AHL_MOUNT_HIDE.rawValue
            case .symlink(let target):
                cm.kind = AHL_MOUNT_SYMLINK.rawValue
                cm.source = c(target)
            }
            mounts[i] = cm
        }
        for (i, r) in p.rlimits.enumerated() { rlimits[i] = ahl_rlimit(resource: r.resource, soft: r.value, hard: r.value) }
        p.filter.bpf.withUnsafeBytes { bpf.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }

        plan.argv = UnsafePointer(argv)
        plan.envp = UnsafePointer(envp)
        plan.search_path = c(p.searchPath)
        plan.cwd = c(p.workingDirectory)
        plan.hostname = c(p.identity.hostname)
        plan.uid = p.identity.uid
        plan.gid = p.identity.gid
        plan.mounts = UnsafePointer(mounts)
        plan.n_mounts = UInt32(p.mounts.count)
        plan.rlimits = UnsafePointer(rlimits)
        plan.n_rlimits = UInt32(p.rlimits.count)
        plan.bpf = UnsafeRawPointer(bpf)
        plan.bpf_len = UInt32(p.filter.instructionCount)
        plan.seccomp_flags = 0
        plan.loopback_up = p.network.mode == .none ? 0 : 1
        plan.proxy_port = p.network.mode == .proxy ? EgressProxy.port : 0
        plan.stdio = (stdio.0, stdio.1, stdio.2)
        plan.cap_last = UInt32(Capabilities.lastCap)
        plan.root_size = 4 << 20
        plan.scratch_fds = scratch
        for (i, f) in cgroupJoin.enumerated() { join[i] = c(f) }
        join[cgroupJoin.count] = nil
        plan.cgroup_join = UnsafePointer(join)
        plan.cgroup_into_fd = -1
        plan.cgroup_into_join = -1
        plan.landlock = p.landlock == .off ? 0 : p.landlock == .required ? 2 : 1
        let block = Self.argumentBlocks
        plan.wipe_start = (block.argStart, block.envStart)
        plan.wipe_end = (block.argEnd, block.envEnd)
    }

    /// arg_start, arg_end, env_start, env_end: fields 48-51 of /proc/self/stat.
    static let argumentBlocks: (argStart: UInt64, argEnd: UInt64, envStart: UInt64, envEnd: UInt64) = {
        let stat = readText("/proc/self/stat")
        // Fields after the command name (which may contain spaces) start after the last ')'.
        guard let close = stat.lastIndex(of: ")") else { return (0, 0, 0, 0) }
        let fields = stat[stat.index(after: close)...].split(separator: " ").map { UInt64($0) ?? 0 }
        // fields[0] is field 3 (state) of proc(5)
        guard fields.count >= 49 else { return (0, 0, 0, 0) }
        return (fields[45], fields[46], fields[47], fields[48])
    }()

    deinit {
        for s in strings { free(s) }
        argv.deallocate()
        envp.deallocate()
        mounts.deallocate()
        rlimits.deallocate()
        bpf.deallocate()
        scratch.deallocate()
        join.deallocate()
    }
}
