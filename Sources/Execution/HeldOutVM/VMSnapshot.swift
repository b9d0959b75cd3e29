import Crypto
import ExperimentModel
import Foundation
import Sandbox
import SupervisorIO
import WireCoding

/// A guest saved once, where it waits for its first gate, and restored for every gate.
///
/// The initramfs is the same for every gate (`GuestImage.initramfs`), and the guest stops at
/// the same point each time (stage 2's `ready`, before the export is mounted: nothing of a
/// gate, no share and no held-out data has reached it). So the first gate boots it once and
/// saves that state (qemu's migration stream, over a Unix socket of ours, to a file); every
/// gate then starts a new qemu from a copy of that state (`-incoming`), gives it the time and
/// fresh entropy from the host (`go`), and only then the export with the request, agent.py
/// and the shares. Each gate's guest is a new process with new memory: nothing one gate's
/// guest did (its page cache, counters, tmpfs) reaches the next one's.
///
/// The state is the guest's memory, which the gate trusts as it trusts the kernel: it is kept
/// in `gate.vm.snapshot_dir` (root's, writable by no one else, as the kernel directory) under
/// a name that digests everything that made it (qemu, the kernel, the initramfs, memory,
/// CPUs, acceleration, the device layout), so a change to any of them makes a new one.
struct VMSnapshot {
    let path: String

    /// Names the device layout `HeldOutVM.qemuArguments` makes: a change there must change it.
    static let layout = "ahvm-layout-1: virtio-serial(results,egress,control) virtfs(ahx,multidevs=remap) qmp"

    /// The state's file for this configuration, in `directory`.
    static func locate(directory: String, qemu: String, kernel: GuestKernel, initramfs: [UInt8], memoryMiB: Int, cpus: Int,
                       accel: VMSettings.Accel) throws -> VMSnapshot {
        var st = stat()
        guard stat(qemu, &st) == 0 else { throw ExperimentError(.state, "held-out VM: \(qemu): \(ErrnoName.describe(errno))") }
        var key = SHA256()
        key.update(data: Array("\(layout)\nqemu \(qemu) \(st.st_dev) \(st.st_ino) \(st.st_size) \(st.st_mtim.tv_sec).\(st.st_mtim.tv_nsec)\n".utf8))
        key.update(data: Array("memory \(memoryMiB) cpus \(cpus) accel \(accel.rawValue)\n".utf8))
        // The firmware and option ROMs qemu loads (their sizes are in the state: another
        // seabios or ipxe package refuses it), and under KVM the host kernel and CPU (the
        // guest's CPUID is the host's).
        for dir in ["/usr/share/qemu", "/usr/share/seabios", "/usr/lib/ipxe/qemu"] {
            for name in FileSystem.names(in: dir).sorted() {
                var f = stat()
                if stat(dir + "/" + name, &f) == 0 {
                    key.update(data: Array("\(dir)/\(name) \(f.st_dev) \(f.st_ino) \(f.st_size) \(f.st_mtim.tv_sec)\n".utf8))
                }
            }
        }
        if accel == .kvm {
            var u = utsname()
            uname(&u)
            let release = withUnsafeBytes(of: &u.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            key.update(data: Array("kernel \(release)\n".utf8))
            if case .success(let cpu) = InputFile.read("/proc/cpuinfo", cap: 4 << 20) {
                key.update(data: cpu.split(separator: 0x0A).filter { $0.starts(with: Array("flags".utf8)) || $0.starts(with: Array("model".utf8)) }.prefix(3).flatMap { $0 })
            }
        }
        switch InputFile.read(kernel.vmlinuz, cap: 64 << 20) {
        case .success(let bytes): key.update(data: bytes)
        case .failure(let p): throw ExperimentError(.state, "held-out VM: \(kernel.vmlinuz): \(p.explanation("the guest kernel"))")
        }
        key.update(data: initramfs)
        try Self.checkDirectory(directory)
        return VMSnapshot(path: directory + "/" + Array(key.finalize()).prefix(16).map { String(format: "%02x", $0) }.joined() + ".state")
    }

    /// Made if missing: root's, and writable by no one else (the state is guest memory).
    static func checkDirectory(_ directory: String) throws {
        if let e = FileSystem.makeDirectories(directory, mode: 0o700) {
            throw ExperimentError(.state, "held-out VM: gate.vm.snapshot_dir \(directory): \(ErrnoName.describe(e))")
        }
        var st = stat()
        guard lstat(directory, &st) == 0, st.st_mode & S_IFMT == S_IFDIR, st.st_uid == 0, st.st_mode & 0o022 == 0 else {
            throw ExperimentError(.state, "held-out VM: gate.vm.snapshot_dir \(directory) must be a directory of root's that no one else can write (a saved guest is trusted as its kernel is)")
        }
    }

    /// Where a saver writes before renaming: named by its owner (pid, start time, pid
    /// namespace) and a random part, so two savers never share one and a dead one's is known.
    var partialPath: String { path + "." + ProcessIdentity.current.tag + "-" + String(UInt64.random(in: 0...UInt64.max), radix: 16) + ".partial" }

    /// Partial states of savers that are gone (killed mid-save).
    static func removeAbandoned(in directory: String) {
        for name in FileSystem.names(in: directory) where name.hasSuffix(".partial") {
            let parts = name.dropLast(".partial".count).split(separator: ".")
            guard parts.count >= 2, let dash = parts[parts.count - 1].lastIndex(of: "-"),
                  let owner = ProcessIdentity(tag: parts[parts.count - 1][..<dash]), !owner.isAlive else { continue }
            unlink(directory + "/" + name)
        }
    }

    /// Each restore marks its state used (its modification time), so states no gate has used
    /// for a week (another qemu, kernel, memory size or CPU count) can go.
    func markUsed() {
        _ = utimensat(AT_FDCWD, path, nil, 0)
        _ = utimensat(AT_FDCWD, digestPath, nil, 0)
    }

    /// Removes saved states (and ones moved aside) unused for `days`, all but `keeping`.
    static func removeUnused(in directory: String, keeping: String, days: Double = 7) {
        let cutoff = Double(time(nil)) - days * 86_400
        for name in FileSystem.names(in: directory) where name.hasSuffix(".state") || name.hasSuffix(".state.failed") || name.hasSuffix(".state.sha256") {
            let path = directory + "/" + name
            var st = stat()
            guard path != keeping, path != keeping + ".sha256", lstat(path, &st) == 0, Double(st.st_mtim.tv_sec) < cutoff else { continue }
            unlink(path)
        }
    }

    /// A saved state that did not restore (qemu or its firmware changed in a way the name
    /// does not see): moved aside, so the next gate saves a new one. Returns where it went.
    func quarantine() -> String {
        let aside = path + ".failed"
        unlink(aside)
        unlink(digestPath)
        return rename(path, aside) == 0 ? aside : path
    }

    /// The SHA-256 of the state's bytes, written when it was saved (root's, 0600, beside it):
    /// checked as each gate streams the state into its qemu.
    var digestPath: String { path + ".sha256" }

    /// The digest recorded when the state was saved; nil when there is none that is root's
    /// and only root's.
    var recordedDigest: String? {
        var st = stat()
        guard lstat(digestPath, &st) == 0, st.st_mode & S_IFMT == S_IFREG, st.st_uid == 0, st.st_mode & 0o077 == 0,
              case .success(let bytes) = InputFile.read(digestPath, cap: 128) else { return nil }
        let text = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return text.count == 64 && text.allSatisfy(\.isHexDigit) ? text : nil
    }

    /// The saved state, if there is one that is root's and only root's, with its digest (one
    /// saved before digests were recorded, or whose digest is gone, is saved again).
    var exists: Bool {
        var st = stat()
        return lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFREG && st.st_uid == 0 && st.st_mode & 0o077 == 0 && recordedDigest != nil
    }
}

/// qemu's machine protocol (QMP) over its Unix socket: one JSON object per line.
final class QMP {
    private let fd: Int32
    private var pending: [UInt8] = []

    /// Connects to qemu's QMP socket (made as qemu starts: tried until `deadline`) and leaves
    /// its capabilities negotiation.
    init(path: String, deadline: Double, alive: () -> Bool = { true }) throws {
        var fd: Int32 = -1
        while true {
            fd = try Self.connect(path)
            if fd >= 0 { break }
            guard alive() else { throw ExperimentError(.io, "held-out VM: qemu exited") }
            guard monotonicNow() < deadline else { throw ExperimentError(.io, "held-out VM: qemu's monitor did not start") }
            usleep(10_000)
        }
        self.fd = fd
        _ = try line(deadline: deadline)  // the greeting
        _ = try execute("qmp_capabilities", deadline: deadline)
    }

    deinit { close(fd) }

    /// A connected stream socket to `path`, or -1 while nothing listens there yet.
    static func connect(_ path: String) throws -> Int32 {
        guard let addr = UnixSocket.address(path) else { throw ExperimentError(.io, "held-out VM: socket path too long: \(path)") }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ExperimentError(.io, "held-out VM: socket: \(ErrnoName.describe(errno))") }
        if UnixSocket.connect(fd, addr) == 0 { return fd }
        let e = errno
        close(fd)
        if e == ENOENT || e == ECONNREFUSED { return -1 }
        throw ExperimentError(.io, "held-out VM: connect \(path): \(ErrnoName.describe(e))")
    }

    /// Runs `command` and returns its `return` value; a QMP error is thrown.
    @discardableResult
    func execute(_ command: String, _ arguments: [String: String] = [:], deadline: Double) throws -> Any {
        var object: [String: Any] = ["execute": command]
        if !arguments.isEmpty { object["arguments"] = arguments }
        let data = try JSONSerialization.data(withJSONObject: object) + Data("\n".utf8)
        if let e = Descriptor.writeAll(fd, Array(data)) { throw ExperimentError(.io, "held-out VM: qemu's monitor: \(ErrnoName.describe(e))") }
        while true {
            let reply = try line(deadline: deadline)
            if let error = reply["error"] as? [String: Any] {
                throw ExperimentError(.io, "held-out VM: qemu's monitor refused \(command): \(error["desc"] as? String ?? "\(error)")")
            }
            if let value = reply["return"] { return value }
            // An event ({"event": ...}): not the answer.
        }
    }

    private func line(deadline: Double) throws -> [String: Any] {
        var buffer = [UInt8](repeating: 0, count: 65536)
        while true {
            if let nl = pending.firstIndex(of: 0x0A) {
                let text = Array(pending[..<nl])
                pending.removeFirst(nl + 1)
                guard let object = try? JSONSerialization.jsonObject(with: Data(text)) as? [String: Any] else { continue }
                return object
            }
            let now = monotonicNow()
            guard now < deadline else { throw ExperimentError(.io, "held-out VM: qemu's monitor did not answer in time") }
            var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, Int32(max(1, min(1000, (deadline - now) * 1000)))) > 0 else { continue }
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw ExperimentError(.io, "held-out VM: qemu's monitor closed") }
            pending += buffer[0..<n]
        }
    }

    /// Waits until the guest's run state is `status` (e.g. `paused` once an incoming state is
    /// in), polling.
    func waitForStatus(_ wanted: Set<String>, deadline: Double, alive: () -> Bool = { true }) throws -> String {
        while true {
            guard alive() else { throw ExperimentError(.io, "held-out VM: qemu exited") }
            let r = try execute("query-status", deadline: deadline)
            if let s = (r as? [String: Any])?["status"] as? String, wanted.contains(s) { return s }
            guard monotonicNow() < deadline else { throw ExperimentError(.io, "held-out VM: the guest did not reach \(wanted.sorted()) in time") }
            usleep(5_000)
        }
    }
}
