import ExperimentModel
import Foundation
import SupervisorIO

/// The guest's kernel, its modules and its busybox, as `scripts/install-vm` lays them out:
///
///     <dir>/vmlinuz            Debian's kernel image (linux-image-amd64)
///     <dir>/busybox            a static busybox: the guest's init stages and nothing else
///     <dir>/modules/order      module file names, one per line, in load order
///     <dir>/modules/*.ko       virtio, virtio_pci, virtio_console, 9p and their dependencies
///
/// Everything here runs as the guest's kernel and PID 1, whose answer the gate trusts, so
/// every file and the directories above them must be root's and writable by no one else.
package struct GuestKernel {
    var directory: String
    package var vmlinuz: String
    var busybox: [UInt8]
    var modules: [(name: String, bytes: [UInt8])]
    /// `6.1.0-56-amd64`, from the image's version string, for `doctor` and logs.
    package var version: String

    static let maxModuleBytes = 8 << 20

    static func load(_ directory: String) throws -> GuestKernel {
        let hint = "run scripts/install-vm (or set gate.vm.kernel_dir)"
        try checkOwnership(directory, hint: hint)
        for f in ["vmlinuz", "busybox", "modules", "modules/order"] { try checkOwnership(directory + "/" + f, hint: hint) }
        let busybox = try read(directory + "/busybox", cap: 8 << 20, hint: hint)
        guard isStaticELF(busybox) else {
            throw ExperimentError(.state, "\(directory)/busybox is not a static executable (the guest has no loader for it): \(hint)")
        }
        let order = String(decoding: try read(directory + "/modules/order", cap: 64 << 10, hint: hint), as: UTF8.self)
        var modules: [(String, [UInt8])] = []
        for name in order.split(separator: "\n").map(String.init) where !name.isEmpty {
            guard name.hasSuffix(".ko"), !name.contains("/") else {
                throw ExperimentError(.state, "\(directory)/modules/order: '\(name)' is not a module file name")
            }
            try checkOwnership(directory + "/modules/" + name, hint: hint)
            modules.append((name, try read(directory + "/modules/" + name, cap: maxModuleBytes, hint: hint)))
        }
        let image = directory + "/vmlinuz"
        let head = InputFile.prefix(image, count: 64 << 10) ?? []
        return GuestKernel(directory: directory, vmlinuz: image, busybox: busybox, modules: modules,
                           version: kernelVersion(head) ?? "unknown")
    }

    /// Root's, not a symlink, writable by no one else (directories and files alike).
    static func checkOwnership(_ path: String, hint: String) throws {
        var st = stat()
        guard lstat(path, &st) == 0 else {
            throw ExperimentError(.state, "held-out VM: \(path): \(ErrnoName.describe(errno)): \(hint)")
        }
        guard st.st_mode & S_IFMT != S_IFLNK else { throw ExperimentError(.state, "held-out VM: \(path) is a symlink; it must be a file or directory of root's") }
        guard st.st_uid == 0, st.st_mode & 0o022 == 0 else {
            throw ExperimentError(.state, "held-out VM: \(path) must be owned by root and writable only by root (it is the guest's kernel or init)")
        }
    }

    static func read(_ path: String, cap: Int, hint: String) throws -> [UInt8] {
        switch InputFile.read(path, cap: cap) {
        case .success(let b): return b
        case .failure(let p): throw ExperimentError(.state, "held-out VM: \(path): \(p.explanation("a guest kernel file")): \(hint)")
        }
    }

    /// An ELF executable with no PT_INTERP program header (no dynamic loader needed).
    static func isStaticELF(_ b: [UInt8]) -> Bool {
        guard b.count > 64, b[0] == 0x7f, b[1] == 0x45, b[2] == 0x4c, b[3] == 0x46, b[4] == 2 else { return false }
        func u16(_ o: Int) -> Int { Int(b[o]) | Int(b[o + 1]) << 8 }
        func u32(_ o: Int) -> Int { u16(o) | u16(o + 2) << 16 }
        let phoff = u32(0x20) | u32(0x24) << 32
        let size = u16(0x36), count = u16(0x38)
        guard size >= 4, phoff > 0, phoff + size * count <= b.count else { return false }
        return !(0..<count).contains { u32(phoff + $0 * size) == 3 }
    }

    /// The release from a bzImage's version string ("6.1.0-56-amd64 (debian-kernel@...").
    static func kernelVersion(_ head: [UInt8]) -> String? {
        guard head.count > 0x210 else { return nil }
        let offset = (Int(head[0x20e]) | Int(head[0x20f]) << 8) + 0x200
        guard offset < head.count else { return nil }
        let tail = head[offset...].prefix(64).prefix { $0 != 0 && $0 != 0x20 }
        return tail.isEmpty ? nil : String(decoding: tail, as: UTF8.self)
    }
}
