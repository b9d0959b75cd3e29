import Benchmark
import Foundation
import Sandbox
import SandboxPolicy
import SupervisorIO

/// A gate's held-out phase in a virtual machine of its own (`gate.held_out_runtime: vm`).
///
/// Whatever two sandboxes share is a channel, and sandboxes on one kernel share the kernel:
/// its page cache, lock tables, global counters (socket cookies, inode numbers handed out in
/// per-CPU batches) and clocks. A held-out agent.py that writes into any of them can be read
/// by untrusted code that runs later (a train agent.py printing into its trace, the thawed
/// coding agent). So each gate boots a fresh guest (qemu, Debian's kernel), runs the held-out
/// tasks in it with the same adapter, policies and launcher as on the host (the VM is a wall
/// under the sandbox, not instead of it), reads back one answer (`GuestAnswer`: rewards,
/// status classes, violation counts) and destroys the guest. Its kernel, memory and every
/// counter in them go with it.
///
/// What the host still shares with the guest: the read-only 9p shares (qemu reads them
/// through the host's page cache, so the caller evicts them afterwards as it does for host
/// runs), the gate's wall time (docs/held-out.md: gate.reply_time), and the answer.
public final class HeldOutVM {
    let settings: VMSettings
    let kernel: GuestKernel
    let qemu: String
    /// `kvm` or `tcg`, as resolved by `prepare`.
    let accel: VMSettings.Accel
    let log: (@Sendable (String) -> Void)?

    static var supportedBenchmarks: [String] { BenchmarkKinds.inVM }
    static let workPrefix = "held-out-vm-"
    static let qemuSandbox = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
    static let qemuBinary = "/usr/bin/qemu-system-x86_64"

    /// Checks the kernel, qemu and the acceleration the settings allow. Throws
    /// `ExperimentError(.state)` saying what to change; nothing is counted yet.
    init(settings: VMSettings, log: (@Sendable (String) -> Void)?) throws {
        self.settings = settings
        self.log = log
        guard access(Self.qemuBinary, X_OK) == 0 else {
            throw ExperimentError(.state, "held-out VM: \(Self.qemuBinary) not found (apt-get install qemu-system-x86, or scripts/install-vm)")
        }
        qemu = Self.qemuBinary
        kernel = try GuestKernel.load(settings.kernelDirectory)
        switch settings.accel {
        case .kvm: accel = .kvm
        case .tcg:
            guard settings.allowEmulation else {
                throw ExperimentError(.state, "gate.vm.accel: tcg needs gate.vm.allow_emulation: true (software emulation makes every held-out task 10-50x slower)")
            }
            accel = .tcg
        case .auto:
            let probe = Self.probeKVMCached(kernel: kernel, qemu: qemu)
            if probe.works {
                accel = .kvm
            } else if settings.allowEmulation {
                accel = .tcg
                log?("held-out VM: no working KVM here (\(probe.why)); emulating (gate.vm.allow_emulation: true)")
            } else {
                throw ExperimentError(.state, "held-out VM: no working KVM on this host (\(probe.why)); set gate.vm.allow_emulation: true to emulate (10-50x slower), or gate.held_out_runtime: host")
            }
        }
    }

    /// `gate.held_out_runtime: auto`: a VM where this benchmark runs in one and qemu, the
    /// guest kernel and KVM (or the operator's `allow_emulation`) are there; otherwise nil (the
    /// host runtime) and why.
    static func resolveAuto(settings: VMSettings, benchmark: String, log: (@Sendable (String) -> Void)?) -> (vm: HeldOutVM?, why: String) {
        guard supportedBenchmarks.contains(benchmark) else {
            return (nil, "benchmark '\(benchmark)' does not run in the held-out VM yet")
        }
        guard access(qemuBinary, X_OK) == 0 else { return (nil, "no \(qemuBinary) (scripts/install-vm)") }
        let kernel: GuestKernel
        do { kernel = try GuestKernel.load(settings.kernelDirectory) } catch { return (nil, "no usable guest kernel (\(error))") }
        var chosen = settings
        var why = ""
        if settings.accel != .tcg {
            let probe = probeKVMCached(kernel: kernel, qemu: qemuBinary)
            if probe.works {
                chosen.accel = .kvm
                why = "a KVM guest boots here"
            } else {
                why = "no working KVM here: \(probe.why)"
            }
        }
        if chosen.accel != .kvm {
            guard settings.allowEmulation else { return (nil, why) }
            chosen.accel = .tcg
            why = "emulated, gate.vm.allow_emulation: true" + (why.isEmpty ? "" : "; " + why)
        }
        do {
            return (try HeldOutVM(settings: chosen, log: log), why)
        } catch {
            return (nil, "\(error)")
        }
    }

    /// The start-up line of a supervisor whose held-out phases run on the host: why, and what
    /// they can still carry to later runs through the shared kernel (docs/held-out.md: "Host-wide
    /// counters", measured here: ~290,000 memfds/s against ~17,000 of scrambling noise per CPU).
    static func hostRuntimeLine(why: String) -> String {
        let cpus = Double(max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))))
        func bits(_ seconds: Double) -> Int { Int(log2(1 + 290_000 * seconds / (17_000 * cpus)).rounded()) }
        return "held-out runtime: host (\(why)); through the shared kernel a held-out phase can still move the inode-number "
            + "counters by what it creates, about \(bits(10)) bits per gate for a 10 s phase and \(bits(600)) at 600 s on \(Int(cpus)) CPU(s) "
            + "(docs/held-out.md: Host-wide counters), and its duration is gate.reply_time's to hide; gate.held_out_runtime: vm closes the kernel's channels"
    }

    struct Run {
        var answer: GuestAnswer
        /// From qemu's start to the guest's first byte on the results port (its kernel, init
        /// and `vm-guest` start), and to qemu's exit.
        var bootSeconds: Double
        var totalSeconds: Double
        var shares: [String]
    }

    /// Boots a guest for `request`, waits for its answer and its exit, and parses the
    /// answer. `beforeBoot` gets the host directories qemu will read (the caller records them
    /// for page-cache eviction before anything reads them). Throws on any failure: the gate
    /// ends as interrupted (it was counted when it started).
    func run(_ request: GuestRequest, image: GuestImage, scratch: String, privateDirectory: String,
             deadline seconds: Double, egress: VMEgress? = nil, beforeBoot: ([String]) throws -> Void) throws -> Run {
        let start = monotonicSeconds()
        let work = Self.workDirectory(in: scratch)
        guard mkdir(work, 0o700) == 0 else {
            throw ExperimentError(.io, "held-out VM: mkdir \(work): \(ErrnoName.describe(errno))")
        }
        defer { try? FileManager.default.removeItem(atPath: work) }
        // qemu sees each share at an empty staging directory, where `vm-exec` binds it
        // read-only and noatime in qemu's own mount namespace (ReadOnlyShares).
        var staged: [(source: String, target: String)] = []
        for s in image.shares {
            let target = work + "/shares/" + s.tag
            guard mkdir(work + "/shares", 0o700) == 0 || errno == EEXIST, mkdir(target, 0o700) == 0 else {
                throw ExperimentError(.io, "held-out VM: mkdir \(target): \(ErrnoName.describe(errno))")
            }
            staged.append((s.path, target))
        }
        let requestBytes = Array(try JSONEncoder().encode(request))
        do {
            try AtomicFile.write(image.initramfs(kernel: kernel, request: requestBytes), to: work + "/initramfs", mode: 0o600)
        } catch {
            throw ExperimentError(.io, "held-out VM: \(work)/initramfs: \(error)")
        }
        let listener = try ResultsPort(path: work + "/results.sock")
        defer { listener.close() }
        // The guest sandboxes' egress, when the request has any: a second port, whose streams
        // the host's proxies serve (`EgressLink`); stopped, with every connection recorded,
        // before the answer counts.
        let egressPort = try egress.map { try EgressPort(path: work + "/egress.sock", proxies: $0) }
        var egressFinished = false
        defer { if !egressFinished { _ = egressPort?.finish() } }
        try beforeBoot(image.shares.map(\.path))

        let cpus = min(settings.cpus ?? request.concurrency, max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))))
        var args = ["-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
                    // qemu's own seccomp filter, as a second wall behind the guest kernel: an
                    // escape into the qemu process cannot exec, fork, change credentials or
                    // scheduling, nor make the obsolete calls.
                    "-sandbox", Self.qemuSandbox,
                    "-accel", accel.rawValue, "-cpu", accel == .kvm ? "host" : "max",
                    "-m", "\(settings.memoryMiB)", "-smp", "\(cpus)",
                    "-kernel", kernel.vmlinuz, "-initrd", work + "/initramfs",
                    // quiet: only the init stages' own lines reach the console; cgroup_no_v1:
                    // the guest's supervisor uses cgroup v2 alone.
                    "-append", "console=ttyS0 panic=-1 quiet cgroup_no_v1=all",
                    "-serial", "stdio",
                    "-device", "virtio-serial-pci",
                    "-chardev", "socket,id=ah,path=\(Self.optionValue(work))/results.sock",
                    "-device", "virtserialport,chardev=ah,name=ah.results"]
        if egressPort != nil {
            args += ["-chardev", "socket,id=eg,path=\(Self.optionValue(work))/egress.sock",
                     "-device", "virtserialport,chardev=eg,name=ah.egress"]
        }
        for (s, stage) in zip(image.shares, staged) {
            args += ["-virtfs", "local,path=\(Self.optionValue(stage.target)),mount_tag=\(s.tag),security_model=none,readonly=on"]
        }
        egressPort?.start()
        let p = Process()
        p.executableURL = URL(fileURLWithPath: image.binary)
        p.arguments = ["vm-exec"] + staged.flatMap { ["--share", "\($0.source)=\($0.target)"] } + ["--", qemu] + args
        p.environment = ["PATH": "/usr/bin:/bin"]
        p.standardInput = FileHandle.nullDevice
        let console = Pipe()
        p.standardOutput = console
        p.standardError = console
        let tail = ConsoleTail()
        let reader = Thread { tail.drain(console.fileHandleForReading) }
        reader.start()
        do { try p.run() } catch {
            throw ExperimentError(.io, "held-out VM: cannot start \(qemu): \(error)")
        }
        // Only this qemu, by pid, whatever happens from here.
        let pid = p.processIdentifier
        var killed = false
        defer {
            if p.isRunning { kill(pid, SIGKILL); killed = true }
            p.waitUntilExit()
        }
        log?("held-out VM: booting (\(accel == .kvm ? "KVM" : "emulated"), kernel \(kernel.version), \(cpus) CPU(s), \(settings.memoryMiB) MiB, \(image.shares.count) read-only shares)")

        let read = listener.read(bootDeadline: start + settings.bootTimeout, deadline: start + seconds, cap: GuestAnswer.maxBytes)
        let boot = read.firstByte.map { $0 - start }
        if read.outcome != .complete, p.isRunning { kill(pid, SIGKILL); killed = true }
        p.waitUntilExit()
        _ = killed
        let total = monotonicSeconds() - start
        // What failed, as a fixed phrase: the message reaches the coding agent (an interrupted
        // gate's reply), so anything the guest chose (a line number, a stream id, the time it
        // took) goes only to the console log, the operator's.
        func failure(_ what: String, detail: String = "") -> ExperimentError {
            let logPath = privateDirectory + "/held-out-vm-console.log"
            let note = "\n[autoharness] held-out VM: \(what) after \(Int(total)) s\(detail.isEmpty ? "" : ": " + detail)\n"
            try? AtomicFile.write(tail.bytes + Array(note.utf8), to: logPath, mode: 0o600)
            return ExperimentError(.io, "held-out VM: \(what); its console is in \(logPath); the gate's held-out phase did not finish and nothing of it was scored")
        }
        // qemu has exited: the link ends with its socket; every connection is served to its
        // end (and recorded) before the answer is taken.
        egressFinished = true
        if let broken = egressPort?.finish() { throw failure("the guest's egress did not end cleanly", detail: broken) }
        switch read.outcome {
        case .complete: break
        case .bootTimeout: throw failure("no answer began within gate.vm.boot_timeout (\(Int(settings.bootTimeout)) s)")
        case .timeout: throw failure("no complete answer within the held-out phase's bound (\(Int(seconds)) s)")
        case .tooLarge: throw failure("the answer exceeded \(GuestAnswer.maxBytes) bytes")
        case .closed: throw failure("the guest closed its results port without an answer", detail: "qemu exit \(p.terminationStatus)")
        }
        let answer: GuestAnswer
        do { answer = try GuestAnswer.parse(read.bytes, requested: request.ids) } catch {
            throw failure("a malformed answer", detail: "\(error)")
        }
        return Run(answer: answer, bootSeconds: boot ?? total, totalSeconds: total, shares: image.shares.map(\.path))
    }

    /// The directory `run` works in below `scratch`. Named by its owner (pid, start time, pid
    /// namespace: no earlier supervisor with this pid holds it), so the next start removes it
    /// if this process dies (Leftovers.sweepVMWork).
    static func workDirectory(in scratch: String, random: UInt64 = .random(in: 0...UInt64.max)) -> String {
        scratch + "/" + workPrefix + ProcessIdentity.current.tag + "-" + String(random, radix: 16)
    }

    /// Why `run` cannot make its sockets below `scratch` (their paths would be longer than a
    /// Unix socket's address holds), or nil.
    static func socketRoom(scratch: String) -> String? {
        let longest = workDirectory(in: scratch, random: .max) + "/results.sock"
        let room = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1
        guard longest.utf8.count > room else { return nil }
        return "held-out VM: the scratch root \(scratch) is too long for the VM's sockets (\(longest.utf8.count) bytes of the \(room) a socket path may have)"
    }

    /// A value inside one of qemu's `key=value,...` options: a comma is written twice.
    static func optionValue(_ s: String) -> String { s.replacingOccurrences(of: ",", with: ",,") }

    /// `autoharness doctor`'s lines for `gate.held_out_runtime: vm`: qemu, the guest kernel,
    /// KVM (a probe boot when `/dev/kvm` opens), and what a gate with `accel: auto` would use.
    /// Never a problem for the exit status: the runtime is used only when an experiment asks.
    public static func doctorLines(kernelDirectory: String = VMSettings.defaultKernelDirectory,
                                   progress: (String) -> Void) -> [(topic: String, status: String, detail: String)] {
        var out: [(String, String, String)] = []
        let hint = "scripts/install-vm installs qemu, Debian's kernel and busybox"
        let haveQEMU = access(qemuBinary, X_OK) == 0
        out.append(("vm qemu", haveQEMU ? "ok" : "MISSING", haveQEMU ? "\(qemuBinary): " + (ToolCheck.version(of: qemuBinary) ?? "version unknown") : "\(qemuBinary) not found: \(hint)"))
        var kernel: GuestKernel?
        do {
            let k = try GuestKernel.load(kernelDirectory)
            kernel = k
            out.append(("vm kernel", "ok", "\(k.version) in \(kernelDirectory), \(k.modules.count) modules, static busybox"))
        } catch {
            out.append(("vm kernel", "MISSING", "\(error)"))
        }
        var kvm = (works: false, why: "not probed: qemu or the guest kernel is missing")
        if haveQEMU, let kernel {
            if access("/dev/kvm", R_OK | W_OK) == 0 { progress("doctor: probing KVM with a guest boot (up to 20 s)...") }
            // A fresh probe (doctor is where an operator checks after fixing KVM), remembered
            // for the supervisors that follow.
            unlink("/run/autoharness/kvm-probe")
            kvm = probeKVMCached(kernel: kernel, qemu: qemuBinary)
        }
        out.append(("vm kvm", kvm.works ? "ok" : "info", kvm.why))
        let use: String
        if !haveQEMU || kernel == nil {
            use = "gate.held_out_runtime: vm cannot run here (\(hint)); auto (the default) uses host"
        } else if kvm.works {
            use = "gate.held_out_runtime: vm runs each gate's held-out split in a fresh KVM guest; auto (the default) uses it for the \(supportedBenchmarks.joined(separator: ", ")) benchmarks"
        } else {
            use = "gate.held_out_runtime: vm runs only emulated here (gate.vm.allow_emulation: true; 10-50x slower per task); auto (the default) uses host unless allow_emulation is set"
        }
        out.append(("vm gate", "info", use))
        return out
    }

    /// `probeKVM`, remembered until the next boot (in /run, root's) for this qemu and kernel: a
    /// host whose KVM hangs would otherwise pay the probe's 20 s at every supervisor's start.
    static func probeKVMCached(kernel: GuestKernel, qemu: String) -> (works: Bool, why: String) {
        let dir = "/run/autoharness", path = dir + "/kvm-probe"
        var q = stat()
        let boot = InputFile.read("/proc/sys/kernel/random/boot_id", cap: 64).map { String(decoding: $0, as: UTF8.self) }
        guard stat(qemu, &q) == 0, case .success(let id) = boot else { return probeKVM(kernel: kernel, qemu: qemu) }
        let key = "\(id.trimmingCharacters(in: .whitespacesAndNewlines)) \(q.st_size) \(q.st_mtim.tv_sec) \(kernel.version)"
        // Trusted only if root's and writable by no one else (it decides where held-out runs go).
        var st = stat()
        if lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_uid == 0, st.st_mode & 0o022 == 0,
           case .success(let bytes) = InputFile.read(path, cap: 4096) {
            let lines = String(decoding: bytes, as: UTF8.self).split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            if lines.count >= 3, lines[0] == key, lines[1] == "works" || lines[1] == "broken" {
                return (lines[1] == "works", lines[2] + " (probed earlier this boot)")
            }
        }
        let probe = probeKVM(kernel: kernel, qemu: qemu)
        if geteuid() == 0, mkdir(dir, 0o700) == 0 || errno == EEXIST {
            let why = probe.why.replacingOccurrences(of: "\n", with: " ")
            try? AtomicFile.write(Array("\(key)\n\(probe.works ? "works" : "broken")\n\(why)\n".utf8), to: path, mode: 0o600)
        }
        return probe
    }

    /// A probe boot with KVM: `/dev/kvm` can exist and open while no guest runs (DESIGN.md:
    /// this machine kind dies on an MSR write with `-cpu host` and hangs in the firmware
    /// otherwise), so only a guest that reaches its init and writes to the port counts.
    static func probeKVM(kernel: GuestKernel, qemu: String, timeout: Double = 20) -> (works: Bool, why: String) {
        guard access("/dev/kvm", R_OK | W_OK) == 0 else { return (false, "/dev/kvm: \(ErrnoName.describe(errno))") }
        let dir = "/run/autoharness-kvm-probe-\(getpid())"
        rmdir(dir)
        guard mkdir(dir, 0o700) == 0 else { return (false, "mkdir \(dir): \(ErrnoName.describe(errno))") }
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var r = Initramfs()
        r.characterDevice("/dev/console", major: 5, minor: 1)
        r.directory("/proc")
        r.file("/.ahvm/busybox", kernel.busybox, mode: 0o755)
        r.file("/.ahvm/init", Array("#!/.ahvm/busybox sh\necho ahvm-probe-ok\n/.ahvm/busybox poweroff -f\n".utf8), mode: 0o755)
        do { try AtomicFile.write(r.archive(), to: dir + "/initramfs", mode: 0o600) } catch { return (false, "\(error)") }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: qemu)
        p.arguments = ["-nodefaults", "-no-user-config", "-nographic", "-no-reboot", "-accel", "kvm", "-cpu", "host", "-m", "256",
                       "-kernel", kernel.vmlinuz, "-initrd", dir + "/initramfs", "-serial", "stdio",
                       "-append", "console=ttyS0 panic=-1 quiet rdinit=/.ahvm/init"]
        p.standardInput = FileHandle.nullDevice
        let out = Pipe()
        p.standardOutput = out
        p.standardError = out
        let tail = ConsoleTail()
        let reader = Thread { tail.drain(out.fileHandleForReading) }
        reader.start()
        do { try p.run() } catch { return (false, "cannot start qemu: \(error)") }
        let end = monotonicSeconds() + timeout
        while p.isRunning && monotonicSeconds() < end { usleep(50_000) }
        if p.isRunning { kill(p.processIdentifier, SIGKILL) }
        p.waitUntilExit()
        let text = String(decoding: tail.bytes, as: UTF8.self)
        if text.contains("ahvm-probe-ok") { return (true, "a probe guest booted") }
        let last = text.split(separator: "\n").last(where: { !$0.trimmingCharacters(in: .whitespaces).isEmpty }).map(String.init) ?? ""
        let when = p.terminationReason == .uncaughtSignal && p.terminationStatus == SIGKILL
            ? "a probe guest did not boot within \(Int(timeout)) s"
            : "qemu exited (status \(p.terminationStatus)) before a probe guest booted"
        return (false, when + (last.isEmpty ? "" : ": " + String(last.prefix(160))))
    }
}

func monotonicSeconds() -> Double {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
}

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
        var addr = sockaddr_un()
        addr.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: addr.sun_path) else {
            Glibc.close(fd)
            throw ExperimentError(.io, "held-out VM: socket path too long: \(path)")
        }
        withUnsafeMutableBytes(of: &addr.sun_path) { raw in
            for (i, b) in bytes.enumerated() { raw[i] = b }
        }
        let ok = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard ok == 0, Glibc.listen(fd, 1) == 0 else {
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
            let now = monotonicSeconds()
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
            if first == nil { first = monotonicSeconds() }
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
/// audit. One per sandbox class whose policy has `network: proxy` (`agent`: the sandboxes
/// holding agent.py; `tool`: the scorer's); nil: that class has no network, and a stream the
/// guest opens for it is refused and recorded. The class is the guest's word (its tag): it
/// decides which allowlist applies only among the ones the config gives, and whose a
/// violation is counted as.
struct VMEgress {
    let agent: EgressProxy?
    let tool: EgressProxy?
    let agentAudit: AuditLog
    let toolAudit: AuditLog
    static let sandbox = "held-out-vm"
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
        let end = monotonicSeconds() + 5
        while !acceptorDone.withLock({ acceptorDone.value }) && monotonicSeconds() < end { usleep(5_000) }
        close(listener)
        unlink(path)
        var problem: String?
        if let link {
            // qemu is gone, so the link has seen its socket close (or stops here).
            _ = link.waitUntilEnded(timeout: 5)
            link.stop()
            problem = link.failure
        }
        for p in [proxies.agent, proxies.tool].compactMap({ $0 }) {
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
        let isAgent = tag == "agent"
        if let proxy = isAgent ? agent : tool {
            proxy.adopt(fd)
            return
        }
        var e = AuditEvent(sandbox: Self.sandbox, kind: .egress, name: "-", action: "denied")
        e.detail = "a \(isAgent ? "sandbox holding agent.py" : "scorer") in the held-out VM opened a connection, and its policy has no network"
        (isAgent ? agentAudit : toolAudit).record(e)
        close(fd)
    }
}
