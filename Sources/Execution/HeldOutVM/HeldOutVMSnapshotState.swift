import Crypto
import ExperimentModel
import Foundation
import SupervisorIO
import WireCoding

/// The saved guest (`VMSnapshot`): `save` boots the generic guest once, before any held-out
/// data exists, and writes its migrated state; `restore` streams it into each gate's qemu.
extension HeldOutVM {
    /// Copies `source` to its end into `destination`; the bytes copied and their SHA-256 (each
    /// chunk digested before it is written). More than `limit` bytes, or a failed read or
    /// write, throws naming the side.
    static func copyStream(from source: Int32, named what: String, to destination: Int32, named where_: String,
                           limit: Int = .max) throws -> (bytes: Int, sha256: String) {
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        var total = 0
        var digest = SHA256()
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(source, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n >= 0 else { throw ExperimentError(.io, "reading \(what): \(ErrnoName.describe(errno))") }
            if n == 0 { return (total, WorkDigest.hex(digest.finalize())) }
            total += n
            guard total <= limit else { throw ExperimentError(.io, "\(what) is over \(limit >> 20) MiB") }
            digest.update(data: buffer[0..<n])
            if let e = Descriptor.writeAll(destination, buffer[0..<n]) { throw ExperimentError(.io, "writing \(where_): \(ErrnoName.describe(e))") }
        }
    }

    /// A saved state whose bytes are not those it was saved with (its digest file, written
    /// as it was saved): the gate is refused, never run on a guest someone changed.
    struct TamperedState: Error {
        var recorded: String?
        var streamed: String
    }

    /// One connection accepted from `listener`, or -1 at `deadline`.
    static func acceptOne(_ listener: Int32, deadline: Double) -> Int32 {
        while monotonicNow() < deadline {
            var pfd = pollfd(fd: listener, events: Int16(POLLIN), revents: 0)
            guard poll(&pfd, 1, 100) > 0 else { continue }
            let c = UnixSocket.accept(listener)
            if c >= 0 { return c }
        }
        return -1
    }

    /// Streams the saved state into the qemu that listens at `work/incoming.sock` (started
    /// paused: `-S`), and lets the guest run once it is in and its bytes are the ones saved
    /// (`TamperedState` otherwise, the guest never having run). Returns their SHA-256.
    static func restore(_ snapshot: VMSnapshot, into work: String, deadline: Double, alive: () -> Bool) throws -> String {
        var sock: Int32 = -1
        while sock < 0 {
            sock = try QMP.connect(work + "/incoming.sock")
            if sock < 0 {
                guard alive() else { throw ExperimentError(.io, "qemu exited before it listened for the saved state") }
                guard monotonicNow() < deadline else { throw ExperimentError(.io, "qemu did not listen for the saved state") }
                usleep(5_000)
            }
        }
        defer { close(sock) }
        let file = open(snapshot.path, O_RDONLY | O_CLOEXEC)
        guard file >= 0 else { throw ExperimentError(.io, "\(snapshot.path): \(ErrnoName.describe(errno))") }
        defer { close(file) }
        // The CLI ignores SIGPIPE: a qemu that stops reading is an EPIPE here.
        let streamed = try copyStream(from: file, named: snapshot.path, to: sock, named: "qemu's incoming state").sha256
        shutdown(sock, Int32(SHUT_WR))
        let recorded = snapshot.recordedDigest
        guard recorded == streamed else { throw TamperedState(recorded: recorded, streamed: streamed) }
        let qmp = try QMP(path: work + "/qmp.sock", deadline: deadline, alive: alive)
        if try qmp.waitForStatus(["paused", "running"], deadline: deadline, alive: alive) == "paused" {
            try qmp.execute("cont", deadline: deadline)
        }
        return streamed
    }

    /// Boots the generic guest to its `ready`, stops it and saves its state into `snapshot`
    /// (written beside it and renamed: a concurrent supervisor sees a whole file or none).
    func save(_ snapshot: VMSnapshot, initramfs: [UInt8], cpus: Int, scratch: String, binary: String, privateDirectory: String) throws {
        let start = monotonicNow()
        log?("held-out VM: saving a booted guest for every gate to start from (once for this qemu, kernel, memory and CPU count)")
        let work = Self.workDirectory(in: scratch)
        guard mkdir(work, 0o700) == 0, mkdir(work + "/export", 0o700) == 0 else {
            throw ExperimentError(.io, "held-out VM: mkdir \(work): \(ErrnoName.describe(errno))")
        }
        defer { try? FileManager.default.removeItem(atPath: work) }
        try AtomicFile.write(initramfs, to: work + "/initramfs", mode: 0o600)
        var listeners: [Int32] = []
        defer { listeners.forEach { close($0) } }
        for name in ["results", "egress"] { listeners.append(try ResultsPort.listen(work + "/\(name).sock")) }
        let control = try ResultsPort.listen(work + "/control.sock")
        listeners.append(control)
        let tail = ConsoleTail()
        let p = try launch(qemuArguments(work: work, cpus: cpus), work: work, shares: [], binary: binary, tail: tail)
        defer {
            if p.isRunning { kill(p.processIdentifier, SIGKILL) }
            p.waitUntilExit()
        }
        let deadline = start + settings.bootTimeout
        func failure(_ what: String) -> ExperimentError {
            let logPath = privateDirectory + "/held-out-vm-console.log"
            try? AtomicFile.write(tail.bytes + Array("\n[autoharness] held-out VM: saving the guest: \(what)\n".utf8), to: logPath, mode: 0o600)
            return ExperimentError(.io, "held-out VM: the guest to save \(what); its console is in \(logPath) (gate.vm.snapshot: false boots each gate's guest instead)")
        }
        guard let ready = Self.awaitReady(control, deadline: deadline) else { throw failure("did not become ready within gate.vm.boot_timeout") }
        defer { close(ready) }
        let temp = snapshot.partialPath
        VMSnapshot.removeAbandoned(in: String(snapshot.path[..<snapshot.path.lastIndex(of: "/")!]))
        do {
            let qmp = try QMP(path: work + "/qmp.sock", deadline: deadline)
            try qmp.execute("stop", deadline: deadline)
            let incoming = try ResultsPort.listen(work + "/migrate.sock")
            listeners.append(incoming)
            try qmp.execute("migrate", ["uri": "unix:" + work + "/migrate.sock"], deadline: deadline)
            let conn = Self.acceptOne(incoming, deadline: deadline)
            guard conn >= 0 else { throw ExperimentError(.io, "qemu did not send its state") }
            defer { close(conn) }
            let out = open(temp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard out >= 0 else { throw ExperimentError(.io, "\(temp): \(ErrnoName.describe(errno))") }
            var ok = false
            defer { close(out); if !ok { unlink(temp) } }
            let (total, sha256) = try Self.copyStream(from: conn, named: "qemu's state", to: out, named: temp, limit: (settings.memoryMiB + 512) << 20)
            let status = (try qmp.execute("query-migrate", deadline: deadline) as? [String: Any])?["status"] as? String
            guard status == "completed" else { throw ExperimentError(.io, "qemu's migration ended \(status ?? "unknown")") }
            // Its digest first, then the state: a state is never in place without one.
            try AtomicFile.write(Array((sha256 + "\n").utf8), to: snapshot.digestPath, mode: 0o600)
            guard fsync(out) == 0, rename(temp, snapshot.path) == 0 else { throw ExperimentError(.io, "\(snapshot.path): \(ErrnoName.describe(errno))") }
            ok = true
            VMSnapshot.removeUnused(in: String(snapshot.path[..<snapshot.path.lastIndex(of: "/")!]), keeping: snapshot.path)
            log?("held-out VM: saved \(total >> 20) MiB of guest state in \(String(format: "%.1f", monotonicNow() - start)) s to \(snapshot.path)")
        } catch let e as ExperimentError {
            throw failure("could not be saved: \(e.message)")
        }
    }
}
