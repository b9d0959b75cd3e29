import CSandboxLaunch
import CSandboxSpawn
import CSeccomp
import CSystemCalls
import Glibc
import PolicyModel
import SupervisorIO

/// One running sandbox, seen from the supervisor.
struct Session {
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
    /// When the payload counts as quiet, and the pool may refill and `RunOptions.whenQuiet`
    /// run (nil: not yet, or done).
    var quietAfter: Double?
    static let quietBeforeRefill = 0.003
    /// The pools were told to refill when the payload was about to exec.
    var refilled = false

    init(plan: LaunchPlan, child: ahl_child, cgroup: SandboxCgroup, options: RunOptions) {
        self.plan = plan
        self.child = child
        self.cgroup = cgroup
        self.options = options
        options.audit.policy(plan.policyName, for: plan.sandboxID)
    }

    /// The monitor entered a user namespace made ahead of time, whose id maps are written: the
    /// handshake has nothing to write and the monitor waits for no go-ahead.
    var mapsWritten = false

    /// Why the supervisor gave the sandbox up (reported as a setup failure).
    var ownError: String?
    /// Held plans: the handshake is done (`prepare`), and whether the payload said it waits.
    var prepared = false
    var held = false
    /// Held plans: the report socket reached its end before the payload was held.
    var reportEnded = false
    /// References to the sandbox's two mount namespaces (init's, and the payload's own that
    /// locks init's mounts), released after the end (`NamespaceRelease`).
    var initMountNS: Int32 = -1
    var payloadMountNS: Int32 = -1
    var initPID: Int32 = 0
    /// The payload's pid as this process sees it (`RunOptions.findPayloadPID`): the sender of
    /// the report the payload makes itself just before its exec (the seccomp listener), taken
    /// from the kernel's record of it, which holds even if the payload has ended by the time
    /// the report is read. A sandbox without a listener leaves it nil (a verifier's reward then
    /// counts as written by someone else). Init's children, read when the fork is reported,
    /// raced a short payload's end under load.
    var payloadPID: Int32?

    mutating func supervise() -> SandboxResult {
        if !prepared {
            if let err = handshake() { abandon(err) }
        } else if ownError == nil && awaitHeld() {
            var go = UInt8(AHL_CTL_RUN)
            if send(child.report_fd, &go, 1, Int32(MSG_NOSIGNAL)) != 1 {
                abandon("could not release the held sandbox: \(String(cString: strerror(errno)))", monitorResponds: true)
            }
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
        let leftovers = cgroup.removeHandingOver(to: options.pageCache)
        options.audit.finish(sandbox: plan.sandboxID)
        Timing.mark("cleaned up")
        NamespaceRelease.release(payloadMountNS)
        NamespaceRelease.release(initMountNS)

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
            memoryLimitHit: memHit, pidsLimitHit: pidsHit, enforcement: [], leftovers: leftovers, payloadPID: payloadPID)
    }

    /// Held plans: the handshake; the build goes on without us until `awaitHeld`.
    mutating func prepare() {
        prepared = true
        if let err = handshake() { abandon(err) }
    }

    /// Held plans: waits until the payload reports it is held (true), or the build failed
    /// or timed out (false; the sandbox is then on its way out and `supervise` says why).
    /// The bound is the plan's own timeout: a build that hangs must not hold the caller longer
    /// than the run itself could have.
    mutating func awaitHeld() -> Bool {
        if held { return true }
        if ownError != nil || setupError != nil || execErrno != nil || waitStatus != nil || reportEnded { return false }
        let limit = plan.limits.timeoutSeconds ?? Limits.maxTimeoutSeconds
        let deadline = monotonicNow() + limit
        while !held {
            let left = deadline - monotonicNow()
            guard left > 0 else {
                abandon("sandbox not built within \(limit) s", monitorResponds: true)
                return false
            }
            var p = pollfd(fd: child.report_fd, events: Int16(POLLIN), revents: 0)
            let n = poll(&p, 1, Int32(min(left * 1000 + 1, 60_000)))
            if n == 0 || (n < 0 && errno == EINTR) { continue }
            var m = ahl_msg()
            var fd: Int32 = -1
            var sender: Int32 = 0
            guard n > 0, ahl_recv_msg(child.report_fd, &m, &fd, &sender) > 0 else {
                // eventLoop reads the end again (a closed socket stays readable).
                reportEnded = true
                return false
            }
            handle(m, fd: fd, sender: sender)
            if setupError != nil || execErrno != nil || waitStatus != nil { return false }
        }
        return true
    }

    /// Gives the sandbox up. Before the handshake is done the monitor is killed directly (it
    /// is our own child, not yet reaped, and one that is stuck would never read a kill byte;
    /// it has no init yet). Afterwards it is asked to kill init, which takes the sandbox with
    /// it: killed itself, it would leave init to be reaped by the host's pid 1.
    mutating func abandon(_ why: String, monitorResponds: Bool = false) {
        if ownError == nil { ownError = why }
        sendControl(UInt8(AHL_CTL_KILL))
        if !monitorResponds { kill(child.pid, SIGKILL) }
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
        if mapsWritten { return nil }
        let pid = child.pid
        let id = plan.identity
        do throws(SandboxError) {
            // The maps give the sandbox one uid and one gid, both unprivileged on the host, and
            // setgroups is denied (before gid_map is written). On a task's image, a span of
            // them (the image's host range), and setgroups allowed: root there drops groups as
            // apt does, with only the gids of that range to take (`Capabilities.imageRoot`).
            try SandboxCgroup.write("/proc/\(pid)/setgroups", id.span > 1 ? "allow" : "deny")
            try SandboxCgroup.write("/proc/\(pid)/uid_map", "\(id.uid) \(id.hostUID) \(id.span)\n")
            try SandboxCgroup.write("/proc/\(pid)/gid_map", "\(id.gid) \(id.hostGID) \(id.span)\n")
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
        let signalFD = options.signals?.readFD ?? -1
        var signalOpen = signalFD >= 0

        while reportOpen || notifyFD >= 0 {
            var fds: [pollfd] = []
            if reportOpen { fds.append(pollfd(fd: child.report_fd, events: Int16(POLLIN), revents: 0)) }
            if notifyFD >= 0 { fds.append(pollfd(fd: notifyFD, events: Int16(POLLIN), revents: 0)) }
            if signalOpen { fds.append(pollfd(fd: signalFD, events: Int16(POLLIN), revents: 0)) }
            var timeout: Int32 = -1
            // The timeout is the payload's: survivors it left (`keepSurvivors`) run until the
            // caller ends them.
            if let deadline, !timedOut, waitStatus == nil {
                let left = deadline - monotonicNow()
                if left <= 0 {
                    timedOut = true
                    record(.timeout, "timeout after \(plan.limits.timeoutSeconds!)s; killed the sandbox", action: "kill")
                    killSandbox()
                    continue
                }
                timeout = Int32(min(left * 1000 + 1, 60_000))
            }
            if let at = quietAfter {
                let wait = Int32(max(0, (at - monotonicNow()) * 1000) + 1)
                timeout = timeout < 0 ? wait : min(timeout, wait)
            }
            let n = poll(&fds, nfds_t(fds.count), timeout)
            if n < 0 && errno != EINTR { break }
            if n == 0, let at = quietAfter, monotonicNow() >= at {
                // Nothing to answer for a while: a good moment for the pool's kernel work,
                // and for the caller's.
                quietAfter = nil
                if !refilled {  // not already as the payload started
                    options.networkNamespaces?.refill()
                    options.parts?.refill()
                }
                options.whenQuiet?()
            }
            if n <= 0 { continue }
            for p in fds where p.revents != 0 {
                if p.fd == child.report_fd {
                    var m = ahl_msg()
                    var fd: Int32 = -1
                    var sender: Int32 = 0
                    let got = ahl_recv_msg(child.report_fd, &m, &fd, &sender)
                    if got <= 0 {
                        reportOpen = false
                        Timing.mark("sandbox processes gone")
                    } else { handle(m, fd: fd, sender: sender) }
                } else if p.fd == notifyFD {
                    if p.revents & Int16(POLLIN) != 0, let req, let resp {
                        answerNotification(req, resp)
                    } else if p.revents & Int16(POLLHUP | POLLERR) != 0 {
                        close(notifyFD)
                        notifyFD = -1
                    }
                } else if p.fd == signalFD {
                    var b: UInt8 = 0
                    if read(signalFD, &b, 1) == 1 {
                        if SandboxSignals.isRequest(b) { sendControl(b) }
                    } else {
                        signalOpen = false
                        if options.signals?.killsOnHangUp == true { sendControl(UInt8(AHL_CTL_KILL)) }
                    }
                }
            }
        }
    }

    mutating func handle(_ m: ahl_msg, fd: Int32, sender: Int32 = 0) {
        switch UInt32(m.kind) {
        case AHL_MSG_LISTENER.rawValue:
            Timing.mark("payload privileges dropped, seccomp installed")
            // The payload sends this itself, just before its exec: the kernel's record of the
            // sender is the payload's pid, whenever this is read (it may have ended since).
            if options.findPayloadPID && sender > 0 { payloadPID = sender }
            if notifyFD >= 0 { close(notifyFD) }
            notifyFD = fd
            // The payload waits in the kernel for each answer: have the kernel switch straight
            // to us on its CPU and back, rather than wake us wherever we last ran (measured in
            // `prepare`: sysinfo at python's and bash's start-up took ~0.45 ms, most of it
            // waiting for this thread to be scheduled). Older kernels: as before.
            let switchesToUs = fd >= 0 && ahs_seccomp_sync_wakeup(fd) == 0
            // The payload is about to exec and this launch's building is over: the moment for
            // the mount namespaces earlier sandboxes left (`NamespaceRelease`) and, where the
            // kernel switches straight to us for the payload's notifications (so the pools'
            // kernel work on the other core does not delay the answers), for the pools to make
            // this launch's parts again. Both then run beside the payload, not beside the next
            // launch's start. Elsewhere the pools wait for a quiet payload or its end.
            NamespaceRelease.payloadStarting()
            if switchesToUs {
                options.networkNamespaces?.refill()
                options.parts?.refill()
                refilled = true
            }
            // The payload has its own mount namespace by now (it sends this after that); it
            // is init's only child until it execs. Any later child of init is an orphan of
            // the payload, in the same namespace: holding that one instead is as good.
            if payloadMountNS < 0, options.releaseNamespacesLater, initPID > 0,
               let pid = readText("/proc/\(initPID)/task/\(initPID)/children").split(separator: " ").first.flatMap({ Int32($0) }) {
                payloadMountNS = NamespaceRelease.hold(pid: pid)
            }
        case AHL_MSG_SETUP_ERROR.rawValue:
            setupError = (m.stage, m.err, m.index)
        case AHL_MSG_PROXY_LISTENER.rawValue:
            guard plan.network.mode == .proxy, proxy == nil else {
                if fd >= 0 { close(fd) }
                return
            }
            let p = EgressProxy(listener: fd, allow: plan.network.allow, inference: options.inferenceGate, link: options.egressLink,
                                audit: options.audit, sandbox: plan.sandboxID)
            p.start()
            proxy = p
        case AHL_MSG_INIT_PID.rawValue:
            // Both mount namespaces are let go of later (NamespaceRelease).
            initPID = Int32(truncatingIfNeeded: m.value)
            if initMountNS < 0 && options.releaseNamespacesLater { initMountNS = NamespaceRelease.hold(pid: initPID) }
        case AHL_MSG_HELD.rawValue:
            Timing.mark("sandbox built, payload held")
            held = true
        case AHL_MSG_EXEC_ERROR.rawValue:
            execErrno = m.err
        case AHL_MSG_EXIT.rawValue:
            Timing.mark("payload exited")
            waitStatus = Int32(truncatingIfNeeded: m.value)
            if m.index == 1 && options.keepSurvivors {
                // What the payload left running keeps no egress: its services answer the
                // verifier (`PortRelay`), and reach nothing beyond their sandbox.
                proxy?.stop()
                options.payloadEnded?(survivingPrograms(), waitStatus!)
            }
        case AHL_MSG_STARTED.rawValue:
            Timing.mark("filesystem built, payload forked")
            if options.delayAtPayloadStartForTests > 0 { usleep(UInt32(options.delayAtPayloadStartForTests * 1e6)) }
            // Where the pools did not refill as the payload started (LISTENER), they may once
            // it has been quiet for a moment (eventLoop), not at once: making a namespace holds
            // a core for 0.5 ms in the kernel, and the payload's first seccomp notification
            // (sysinfo, from python and bash at start-up) then waited that long for a
            // supervisor the kernel does not switch to directly.
            if options.networkNamespaces != nil || options.parts != nil || options.whenQuiet != nil { quietAfter = monotonicNow() + Self.quietBeforeRefill }
        default:
            if fd >= 0 { close(fd) }
        }
    }

    /// The programs of init's descendants (`comm`), at most 20: what the payload left running.
    func survivingPrograms() -> [String] {
        var names: [String] = []
        var queue = initPID > 0 ? [initPID] : []
        var seen = 0
        while let pid = queue.popLast(), seen < 256 {
            seen += 1
            for child in readText("/proc/\(pid)/task/\(pid)/children").split(whereSeparator: { $0 == " " || $0 == "\n" }).compactMap({ Int32($0) }) {
                queue.append(child)
                let comm = readText("/proc/\(child)/comm").split(separator: "\n").first.map(String.init) ?? ""
                if names.count < 20 && !comm.isEmpty { names.append(comm) }
            }
        }
        return names
    }

    /// Reports a refused syscall and answers it. The payload's thread is blocked in the
    /// kernel until this reply, so it never proceeds past a refused call.
    mutating func answerNotification(_ req: UnsafeMutablePointer<seccomp_notif>, _ resp: UnsafeMutablePointer<seccomp_notif_resp>) {
        memset(req, 0, MemoryLayout<seccomp_notif>.size)
        guard seccomp_notify_receive(notifyFD, req) == 0 else { return }  // the caller died meanwhile
        let d = req.pointee.data
        let native = SeccompCompiler.isNative(arch: d.arch, nr: d.nr)
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
        if native && plan.filter.linkWatched.contains(d.nr) {
            // symlink, symlinkat: recorded when the link leads into a watched directory, then
            // made by the kernel as if allowed (`LinkWatch`).
            if let (link, into) = LinkWatch.judge(pid: req.pointee.pid, nr: d.nr, args: args, watched: plan.filter.watchLinks), into {
                var event = AuditEvent(sandbox: plan.sandboxID, kind: .plantedLink, name: link, pid: Int32(bitPattern: req.pointee.pid),
                                       sandboxPID: sandboxPID(of: Int32(bitPattern: req.pointee.pid)), action: "flagged")
                event.detail = "a link into \(plan.filter.watchLinks.joined(separator: " or ")) made or named in the sandbox (by \(readText("/proc/\(req.pointee.pid)/comm").split(separator: "\n").first.map(String.init) ?? "?")): flagged, the call went on"
                options.audit.record(event)
            }
            resp.pointee.val = 0
            resp.pointee.error = 0
            resp.pointee.flags = UInt32(SECCOMP_USER_NOTIF_FLAG_CONTINUE)
            _ = seccomp_notify_respond(notifyFD, resp)
            return
        }
        if native && plan.filter.emulated.contains(d.nr) {
            // sysinfo, statfs, fstatfs: constants instead of the host's counters (not a violation).
            let error: Int32
            if d.nr == StatfsAnswer.statfsNumber || d.nr == StatfsAnswer.fstatfsNumber {
                error = StatfsAnswer.answer(pid: req.pointee.pid, path: d.nr == StatfsAnswer.statfsNumber, args: args,
                                            notifyFD: notifyFD, id: req.pointee.id)
            } else {
                error = Self.writeSysinfo(pid: req.pointee.pid, address: args[0], notifyFD: notifyFD, id: req.pointee.id) ? 0 : EFAULT
            }
            resp.pointee.val = 0
            resp.pointee.error = -error
            _ = seccomp_notify_respond(notifyFD, resp)
            return
        }
        // The payload waits in the kernel until the answer: the two answers above (sysinfo,
        // from python and bash at every start) come before anything they do not need.
        let name = SeccompCompiler.name(nr: d.nr, arch: d.arch)
        let refusal = plan.filter.refusal(nr: d.nr, nativeArch: native)
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
        writeCaller(pid: pid, address: address, bytes: sysinfoReply, notifyFD: notifyFD, id: id)
    }

    /// `bytes` written into the caller's memory at `address`, as the kernel's copy-out would
    /// (see `writeSysinfo`).
    static func writeCaller(pid: UInt32, address: UInt64, bytes: [UInt8], notifyFD: Int32, id: UInt64) -> Bool {
        let fd = open("/proc/\(pid)/mem", O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        let mapsFD = open("/proc/\(pid)/maps", O_RDONLY | O_CLOEXEC)
        guard mapsFD >= 0 else { return false }
        defer { close(mapsFD) }
        guard seccomp_notify_id_valid(notifyFD, id) == 0 else { return false }
        // One PROCMAP_QUERY ioctl per mapping the range touches (Linux 6.11+); older kernels:
        // the whole maps file, read and parsed.
        let count = UInt64(bytes.count)
        switch ahs_range_writable(mapsFD, address, count) {
        case 1: break
        case 0: return false
        default: guard mappingsWritable(maps: readAllBytes(mapsFD), from: address, count: count) else { return false }
        }
        let n = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, bytes.count, off_t(Int64(bitPattern: address))) }
        return n == bytes.count
    }

    /// The answer, the same for every sandbox on this host: built once.
    static let sysinfoReply: [UInt8] = {
        var info = [UInt8](repeating: 0, count: 112)
        func put(_ v: UInt64, at offset: Int, size: Int = 8) {
            for i in 0..<size { info[offset + i] = UInt8(truncatingIfNeeded: v >> (8 * UInt64(i))) }
        }
        let total = hostMemoryTotal
        put(1000, at: 0)           // uptime
        put(total, at: 32)         // totalram (loads[3] at 8..31 stay 0)
        put(total, at: 40)         // freeram
        put(1, at: 80, size: 2)    // procs (after shared, buffer, totalswap, freeswap)
        put(1, at: 104, size: 4)   // mem_unit (after pad, totalhigh, freehigh)
        return info
    }()

    /// MemTotal of the host in bytes, as the sandbox's /proc/meminfo shows it.
    static let hostMemoryTotal: UInt64 = hostMemory("MemTotal") ?? 0

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
        var sender: Int32 = 0
        guard ahl_recv_msg(child.report_fd, &m, &fd, &sender) > 0 else { return .eof }
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
