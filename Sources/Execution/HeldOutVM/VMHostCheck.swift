import Benchmark
import ExperimentModel
import Foundation
import Sandbox
import SandboxPolicy
import SupervisorIO

/// What this host offers the held-out VM, for `autoharness doctor` and `accel: auto`: qemu, the
/// guest kernel, whether a KVM guest really boots here (cached), and qemu's jail.
public enum VMHostCheck {
    /// `autoharness doctor`'s lines for `gate.held_out_runtime: vm`: qemu, the guest kernel,
    /// KVM (a probe boot when `/dev/kvm` opens), and what a gate with `accel: auto` would use.
    /// Never a problem for the exit status: the runtime is used only when an experiment asks.
    public static func doctorLines(kernelDirectory: String = VMSettings.defaultKernelDirectory,
                                   progress: (String) -> Void) -> [(topic: String, status: String, detail: String)] {
        var out: [(String, String, String)] = []
        let hint = "scripts/install-vm installs qemu, Debian's kernel and busybox"
        let haveQEMU = access(HeldOutVM.qemuBinary, X_OK) == 0
        out.append(("vm qemu", haveQEMU ? "ok" : "MISSING", haveQEMU ? "\(HeldOutVM.qemuBinary): " + (ToolCheck.version(of: HeldOutVM.qemuBinary) ?? "version unknown") : "\(HeldOutVM.qemuBinary) not found: \(hint)"))
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
            kvm = kvmCached(kernel: kernel, qemu: HeldOutVM.qemuBinary)
        }
        out.append(("vm kvm", kvm.works ? "ok" : "info", kvm.why))
        if haveQEMU, let kernel { out.append(jailLine(kernel)) }
        let use: String
        if !haveQEMU || kernel == nil {
            use = "gate.held_out_runtime: vm cannot run here (\(hint)); auto (the default) uses host"
        } else if kvm.works {
            use = "gate.held_out_runtime: vm runs each gate's held-out split in a fresh KVM guest; auto (the default) uses it for every benchmark that needs nothing of the host's (not bird-interact yet, nor Harbor's docker provider)"
        } else {
            use = "gate.held_out_runtime: vm runs only emulated here (gate.vm.allow_emulation: true; 10-50x slower per task); auto (the default) uses host unless allow_emulation is set"
        }
        out.append(("vm gate", "info", use))
        return out
    }

    /// Whether qemu starts with least privilege here (`vm-exec`, qemu_jail.c): `qemu -version`
    /// run in the jail, in a work directory of its own.
    static func jailLine(_ kernel: GuestKernel) -> (topic: String, status: String, detail: String) {
        var template = Array("/tmp/autoharness-vm-jail-XXXXXX".utf8CString)
        guard let made = mkdtemp(&template) else { return ("vm jail", "FAILED", "mkdtemp in /tmp: \(ErrnoName.describe(errno))") }
        let work = String(cString: made)
        defer { try? FileManager.default.removeItem(atPath: work) }
        guard mkdir(work + "/export", 0o700) == 0 else { return ("vm jail", "FAILED", "mkdir \(work)/export: \(ErrnoName.describe(errno))") }
        guard let binary = GuestImage.canonical("/proc/self/exe") else { return ("vm jail", "FAILED", "cannot resolve this program's path") }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["vm-exec", "--work", work, "--read", kernel.vmlinuz, "--uid", "\(HeldOutVM.qemuID)", "--gid", "\(HeldOutVM.qemuID)", "--", HeldOutVM.qemuBinary, "-version"]
        let out = Pipe()
        (p.standardOutput, p.standardError) = (out, out)
        do { try p.run() } catch { return ("vm jail", "FAILED", "vm-exec: \(error)") }
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        guard p.terminationStatus == 0, text.hasPrefix("QEMU emulator") else {
            return ("vm jail", "FAILED", "qemu did not start with least privilege: \(text.split(separator: "\n").first ?? "exit \(p.terminationStatus)")")
        }
        return ("vm jail", "ok", "qemu runs as uid \(HeldOutVM.qemuID) with CAP_DAC_READ_SEARCH alone and no_new_privs, in mount, pid, network, IPC and UTS namespaces of its own, on a read-only root of /usr, its kernel and its work directory")
    }

    /// `kvmBoot`, remembered until the next boot (in /run, root's) for this qemu and kernel: a
    /// host whose KVM hangs would otherwise pay the probe's 20 s at every supervisor's start.
    static func kvmCached(kernel: GuestKernel, qemu: String) -> (works: Bool, why: String) {
        let dir = "/run/autoharness", path = dir + "/kvm-probe"
        var q = stat()
        let boot = InputFile.read("/proc/sys/kernel/random/boot_id", cap: 64).map { String(decoding: $0, as: UTF8.self) }
        guard stat(qemu, &q) == 0, case .success(let id) = boot else { return kvmBoot(kernel: kernel, qemu: qemu) }
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
        let probe = kvmBoot(kernel: kernel, qemu: qemu)
        if geteuid() == 0, mkdir(dir, 0o700) == 0 || errno == EEXIST {
            let why = probe.why.replacingOccurrences(of: "\n", with: " ")
            try? AtomicFile.write(Array("\(key)\n\(probe.works ? "works" : "broken")\n\(why)\n".utf8), to: path, mode: 0o600)
        }
        return probe
    }

    /// A probe boot with KVM: `/dev/kvm` can exist and open while no guest runs (DESIGN.md:
    /// this machine kind dies on an MSR write with `-cpu host` and hangs in the firmware
    /// otherwise), so only a guest that reaches its init and writes to the port counts.
    static func kvmBoot(kernel: GuestKernel, qemu: String, timeout: Double = 20) -> (works: Bool, why: String) {
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
        let end = monotonicNow() + timeout
        while p.isRunning && monotonicNow() < end { usleep(50_000) }
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
