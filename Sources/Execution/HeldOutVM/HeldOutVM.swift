import Benchmark
import ExperimentModel
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
    package let kernel: GuestKernel
    let qemu: String
    /// `kvm` or `tcg`, as resolved by `prepare`.
    package let accel: VMSettings.Accel
    let log: (@Sendable (String) -> Void)?
    /// The SHA-256 of the saved guest the last gate restored (checked against the one
    /// recorded when it was saved); nil when gates boot their guests.
    package private(set) var restoredStateSHA256: String?

    static let workPrefix = "held-out-vm-"
    static let qemuSandbox = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
    static let qemuBinary = "/usr/bin/qemu-system-x86_64"
    /// The uid and gid qemu runs as (`vm-exec`): no file of the host's belongs to it, and its
    /// pid namespace shows it no other process.
    static let qemuID: UInt32 = 65533

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
            let probe = VMHostCheck.kvmCached(kernel: kernel, qemu: qemu)
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

    /// `gate.held_out_runtime: auto`: a VM where this configuration runs in one and qemu, the
    /// guest kernel and KVM (or the operator's `allow_emulation`) are there; otherwise nil (the
    /// host runtime) and why.
    static func resolveAuto(settings: VMSettings, config: ExperimentConfig, log: (@Sendable (String) -> Void)?) -> (vm: HeldOutVM?, why: String) {
        if let why = BenchmarkKinds.notInVM(config) { return (nil, why) }
        guard access(qemuBinary, X_OK) == 0 else { return (nil, "no \(qemuBinary) (scripts/install-vm)") }
        let kernel: GuestKernel
        do { kernel = try GuestKernel.load(settings.kernelDirectory) } catch { return (nil, "no usable guest kernel (\(error))") }
        var chosen = settings
        var why = ""
        if settings.accel != .tcg {
            let probe = VMHostCheck.kvmCached(kernel: kernel, qemu: qemuBinary)
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
    /// counters", measured here: ~290,000 memfds/s against scrambling noise over 16,384 × CPUs).
    /// `networked`: held-out sandboxes have `lo` up (a tool's runner, not a local benchmark's
    /// tasks), so the host's route-lookup statistics are theirs to move too (~300,000
    /// lookups/s with no noise in the review: log2 of the count).
    static func hostRuntimeLine(why: String, networked: Bool) -> String {
        let cpus = Double(max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))))
        func bits(_ seconds: Double) -> Int { Int(log2(1 + 290_000 * seconds / (17_000 * cpus)).rounded()) }
        func routeBits(_ seconds: Double) -> Int { Int(log2(1 + 300_000 * seconds).rounded()) }
        return "held-out runtime: host (\(why)); through the shared kernel a held-out phase can still move the inode-number "
            + "counters by what it creates, about \(bits(10)) bits per gate for a 10 s phase and \(bits(600)) at 600 s on \(Int(cpus)) CPU(s)"
            + (networked ? ", and, as its runner has a network, the host's route-lookup statistics (/proc/net/stat/rt_cache), about "
                + "\(routeBits(10)) bits for a 10 s phase and \(routeBits(600)) at 600 s" : "")
            + " (docs/held-out.md: Host-wide counters), and its duration is gate.reply_time's to hide; gate.held_out_runtime: vm closes the kernel's channels"
    }

    struct Run {
        var answer: GuestAnswer
        /// From qemu's start to the guest's first byte on the results port (its kernel, init
        /// and `vm-guest` start, or the snapshot's restore and `vm-guest`'s start), and to
        /// qemu's exit.
        var bootSeconds: Double
        var totalSeconds: Double
        var shares: [String]
        /// From qemu's start to the restored guest's running (nil: booted cold).
        var restoreSeconds: Double?
    }

    /// qemu's arguments for a guest working in `work`: the same devices whether it boots or is
    /// restored (a snapshot holds their state; `VMSnapshot.layout` names them): a virtio-serial
    /// controller with the results, egress and control ports (each a Unix socket of the
    /// host's that qemu connects to), one read-only 9p export (`work/export`: the gate's files
    /// and every share, bound below it by `vm-exec`; inode numbers remapped, as the binds are
    /// other filesystems), and the monitor.
    func qemuArguments(work: String, cpus: Int) -> [String] {
        let w = Self.optionValue(work)
        return ["-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
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
                "-chardev", "socket,id=ah,path=\(w)/results.sock", "-device", "virtserialport,chardev=ah,name=ah.results",
                "-chardev", "socket,id=eg,path=\(w)/egress.sock", "-device", "virtserialport,chardev=eg,name=ah.egress",
                "-chardev", "socket,id=ctl,path=\(w)/control.sock", "-device", "virtserialport,chardev=ctl,name=ah.control",
                "-virtfs", "local,path=\(w)/export,mount_tag=ahx,security_model=none,readonly=on,multidevs=remap",
                "-qmp", "unix:\(w)/qmp.sock,server=on,wait=off"]
    }

    /// qemu under `vm-exec` (every `shares` pair bound read-only and noatime in its mount
    /// namespace; qemu dies with it), its console drained into `tail`.
    func launch(_ args: [String], work: String, shares: [(source: String, target: String)], binary: String, tail: ConsoleTail) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["vm-exec", "--work", work, "--read", kernel.vmlinuz, "--uid", "\(Self.qemuID)", "--gid", "\(Self.qemuID)"]
            + shares.flatMap { ["--share", "\($0.source)=\($0.target)"] } + ["--", qemu] + args
        p.environment = ["PATH": "/usr/bin:/bin"]
        p.standardInput = FileHandle.nullDevice
        let console = Pipe()
        p.standardOutput = console
        p.standardError = console
        let reader = Thread { tail.drain(console.fileHandleForReading) }
        reader.start()
        do { try p.run() } catch {
            throw ExperimentError(.io, "held-out VM: cannot start \(qemu)", cause: error)
        }
        return p
    }

    /// The guest's `ready` on the control port (accepted from `listener`): the connection,
    /// or nil when `deadline` passed or qemu closed it first.
    static func awaitReady(_ listener: Int32, deadline: Double) -> Int32? {
        let conn = acceptOne(listener, deadline: deadline)
        guard conn >= 0 else { return nil }
        var got: [UInt8] = []
        while monotonicNow() < deadline {
            var pfd = pollfd(fd: conn, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, 200) > 0 else { continue }
            var b = [UInt8](repeating: 0, count: 64)
            let n = b.withUnsafeMutableBytes { Glibc.read(conn, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { close(conn); return nil }
            got += b[0..<n]
            if got.count > 64 { close(conn); return nil }
            if String(decoding: got, as: UTF8.self).contains("ready\n") { return conn }
        }
        close(conn)
        return nil
    }

    /// The host's `go` on the control port: the time (rounded up, so a certificate made this
    /// second is valid) and 32 fresh random bytes for the guest's pool.
    static func sendGo(_ conn: Int32) -> Bool {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var generator = SystemRandomNumberGenerator()
        let seed = (0..<32).map { _ in UInt8.random(in: 0...255, using: &generator) }
        let line = Array("go \(now.tv_sec + 1) \(seed.map { String(format: "%02x", $0) }.joined())\n".utf8)
        return line.withUnsafeBytes { Glibc.write(conn, $0.baseAddress, $0.count) } == line.count
    }

    /// Boots a guest for `request` (from the saved state when `gate.vm.snapshot` is on: made
    /// now if there is none), waits for its answer and its exit, and parses the answer.
    /// `beforeBoot` gets the host directories qemu will read (the caller records them for
    /// page-cache eviction before anything reads them). Throws on any failure: the gate ends
    /// as interrupted (it was counted when it started).
    func run(_ request: GuestRequest, image: GuestImage, scratch: String, privateDirectory: String,
             deadline seconds: Double, egress: VMEgress? = nil, beforeBoot: ([String]) throws -> Void) throws -> Run {
        let cpus = min(settings.cpus ?? request.concurrency, max(1, Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))))
        let initramfs = GuestImage.initramfs(kernel: kernel)
        var snapshot: VMSnapshot?
        if settings.snapshot {
            let s = try VMSnapshot.locate(directory: settings.snapshotDirectory, qemu: qemu, kernel: kernel, initramfs: initramfs,
                                          memoryMiB: settings.memoryMiB, cpus: cpus, accel: accel)
            if !s.exists { try save(s, initramfs: initramfs, cpus: cpus, scratch: scratch, binary: image.binary, privateDirectory: privateDirectory) }
            snapshot = s
        }
        do {
            return try boot(request, image: image, from: snapshot, initramfs: initramfs, cpus: cpus, scratch: scratch,
                            privateDirectory: privateDirectory, deadline: seconds, egress: egress, beforeBoot: beforeBoot)
        } catch let failure as RestoreFailure {
            // Before `go`: the guest had nothing of the gate. The state goes aside (the next
            // gate saves another) and this gate's guest boots.
            let aside = snapshot?.quarantine() ?? ""
            log?("held-out VM: the saved guest did not restore (\(failure.detail)); moved to \(aside); booting this gate's guest instead")
            return try boot(request, image: image, from: nil, initramfs: initramfs, cpus: cpus, scratch: scratch,
                            privateDirectory: privateDirectory, deadline: seconds, egress: egress, beforeBoot: beforeBoot)
        }
    }

    /// A saved guest that did not come back (thrown before anything of the gate reached it).
    struct RestoreFailure: Error { var detail: String }

    /// One guest for `request`: restored from `snapshot`, or booted when it is nil.
    private func boot(_ request: GuestRequest, image: GuestImage, from snapshot: VMSnapshot?, initramfs: [UInt8], cpus: Int, scratch: String,
                      privateDirectory: String, deadline seconds: Double, egress: VMEgress?, beforeBoot: ([String]) throws -> Void) throws -> Run {
        let start = monotonicNow()
        let work = Self.workDirectory(in: scratch)
        guard mkdir(work, 0o700) == 0, mkdir(work + "/export", 0o700) == 0 else {
            throw ExperimentError(.io, "held-out VM: mkdir \(work): \(ErrnoName.describe(errno))")
        }
        defer { try? FileManager.default.removeItem(atPath: work) }
        // qemu exports `export`; each share is bound read-only and noatime below it, in qemu's
        // own mount namespace, by `vm-exec` (ReadOnlyShares).
        var staged: [(source: String, target: String)] = []
        for (k, s) in image.shares.enumerated() {
            let target = work + "/export/s\(k)"
            guard mkdir(target, 0o700) == 0 else { throw ExperimentError(.io, "held-out VM: mkdir \(target): \(ErrnoName.describe(errno))") }
            staged.append((s.path, target))
        }
        do {
            try image.writeGate(work + "/export/gate", request: Array(try JSONEncoder().encode(request)))
            try AtomicFile.write(initramfs, to: work + "/initramfs", mode: 0o600)
        } catch let e as ExperimentError { throw e } catch {
            throw ExperimentError(.io, "held-out VM: \(work)", cause: error)
        }
        let listener = try ResultsPort(path: work + "/results.sock")
        defer { listener.close() }
        let control = try ResultsPort.listen(work + "/control.sock")
        defer { close(control) }
        // The guest sandboxes' egress, when the request has any: the port's streams go to the
        // host's proxies (`EgressLink`), stopped, with every connection recorded, before the
        // answer counts. Without it the port's socket only listens: nothing is read from it.
        let egressPort = try egress.map { try EgressPort(path: work + "/egress.sock", proxies: $0) }
        let idleEgress = egressPort == nil ? try ResultsPort.listen(work + "/egress.sock") : -1
        defer { if idleEgress >= 0 { close(idleEgress) } }
        var egressFinished = false
        defer { if !egressFinished { _ = egressPort?.finish() } }
        try beforeBoot(image.shares.map(\.path))

        var args = qemuArguments(work: work, cpus: cpus)
        // Not an option list: a comma is not doubled here.
        // Paused (-S) until the state is in and its digest checked (`restore`).
        if snapshot != nil { args += ["-S", "-incoming", "unix:" + work + "/incoming.sock"] }
        egressPort?.start()
        let tail = ConsoleTail()
        let p = try launch(args, work: work, shares: staged, binary: image.binary, tail: tail)
        // Only this qemu, by pid, whatever happens from here.
        let pid = p.processIdentifier
        defer {
            if p.isRunning { kill(pid, SIGKILL) }
            p.waitUntilExit()
        }
        log?("held-out VM: \(snapshot == nil ? "booting" : "restoring its saved guest") (\(accel == .kvm ? "KVM" : "emulated"), kernel \(kernel.version), \(cpus) CPU(s), \(settings.memoryMiB) MiB, \(image.shares.count) read-only shares)")
        func failure(_ what: String, detail: String = "") -> ExperimentError {
            // What failed, as a fixed phrase: the message reaches the coding agent (an
            // interrupted gate's reply), so anything the guest chose (a line number, a stream
            // id, the time it took) goes only to the console log, the operator's.
            let total = monotonicNow() - start
            let logPath = privateDirectory + "/held-out-vm-console.log"
            let note = "\n[autoharness] held-out VM: \(what) after \(Int(total)) s\(detail.isEmpty ? "" : ": " + detail)\n"
            try? AtomicFile.write(tail.bytes + Array(note.utf8), to: logPath, mode: 0o600)
            return ExperimentError(.io, "held-out VM: \(what); its console is in \(logPath); the gate's held-out phase did not finish and nothing of it was scored")
        }
        var restored: Double?
        var go: Int32 = -1
        defer { if go >= 0 { close(go) } }
        if let snapshot {
            snapshot.markUsed()
            do {
                restoredStateSHA256 = try Self.restore(snapshot, into: work, deadline: start + settings.bootTimeout, alive: { p.isRunning })
            } catch let tampered as TamperedState {
                // Not a state that failed to load: one whose bytes changed since it was saved.
                // The guest never ran (qemu started paused); this gate is refused, and the state
                // goes aside for the operator (the next gate saves a new one).
                if p.isRunning { kill(pid, SIGKILL) }
                p.waitUntilExit()
                let aside = snapshot.quarantine()
                log?("held-out VM: the saved guest's bytes are not those it was saved with (SHA-256 \(tampered.streamed), recorded \(tampered.recorded ?? "none")); moved to \(aside)")
                throw ExperimentError(.state, "held-out VM: the saved guest was changed after it was saved (its SHA-256 is not the one recorded then); it was moved aside and this gate refused: nothing of it ran")
            } catch {
                if p.isRunning { kill(pid, SIGKILL) }
                p.waitUntilExit()
                _ = failure("the saved guest could not be restored", detail: "\(error)")
                throw RestoreFailure(detail: "\(error)")
            }
            restored = monotonicNow() - start
            // The restored guest waits in its read of the control port; qemu connected it as
            // it started.
            go = Self.acceptOne(control, deadline: start + settings.bootTimeout)
        } else if let c = Self.awaitReady(control, deadline: start + settings.bootTimeout) {
            go = c
        }
        guard go >= 0, Self.sendGo(go) else {
            if p.isRunning { kill(pid, SIGKILL) }
            p.waitUntilExit()
            throw failure("the guest did not become ready within gate.vm.boot_timeout (\(Int(settings.bootTimeout)) s)")
        }

        let read = listener.read(bootDeadline: start + settings.bootTimeout, deadline: start + seconds, cap: GuestAnswer.maxBytes)
        let boot = read.firstByte.map { $0 - start }
        if read.outcome != .complete, p.isRunning { kill(pid, SIGKILL) }
        // A complete answer: the guest powers off and qemu exits. One that does not within
        // 30 s (an escaped qemu that keeps running) is ended, and its namespace with it.
        let exitBy = monotonicNow() + 30
        while p.isRunning && monotonicNow() < exitBy { usleep(50_000) }
        if p.isRunning { kill(pid, SIGKILL) }
        p.waitUntilExit()
        let total = monotonicNow() - start
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
        return Run(answer: answer, bootSeconds: boot ?? total, totalSeconds: total, shares: image.shares.map(\.path), restoreSeconds: restored)
    }

    /// The directory `run` works in below `scratch`. Named by its owner (pid, start time, pid
    /// namespace: no earlier supervisor with this pid holds it), so the next start removes it
    /// if this process dies (`sweepWork`).
    static func workDirectory(in scratch: String, random: UInt64 = .random(in: 0...UInt64.max)) -> String {
        scratch + "/" + workPrefix + ProcessIdentity.current.tag + "-" + String(random, radix: 16)
    }

    /// Why `run` cannot make its sockets below `scratch` (their paths would be longer than a
    /// Unix socket's address holds), or nil.
    static func socketRoom(scratch: String) -> String? {
        let longest = workDirectory(in: scratch, random: .max) + "/incoming.sock"
        let room = MemoryLayout.size(ofValue: sockaddr_un().sun_path) - 1
        guard longest.utf8.count > room else { return nil }
        return "held-out VM: the scratch root \(scratch) is too long for the VM's sockets (\(longest.utf8.count) bytes of the \(room) a socket path may have)"
    }

    /// A value inside one of qemu's `key=value,...` options: a comma is written twice.
    static func optionValue(_ s: String) -> String { s.replacingOccurrences(of: ",", with: ",,") }
}
