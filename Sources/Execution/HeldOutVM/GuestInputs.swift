import ExperimentModel
import Foundation
import SupervisorIO

/// The directories a phase's services are built in on the host: below the scratch root,
/// named by their owner like the VM's work directory (the next start removes them if this
/// supervisor dies), each shared read-only at `/.ahvm/in/<name>`; removed after the VM.
final class GuestInputs: GuestInputDirectories {
    let root: String
    private(set) var made: [(name: String, path: String)] = []
    private var created = false

    /// Nothing is made until a service asks for a directory.
    init(scratch: String) {
        root = HeldOutVM.workDirectory(in: scratch)
    }

    /// A new directory `name` (host path), and where the guest sees it.
    func directory(_ name: String) throws -> (host: String, guest: String) {
        if !created {
            guard mkdir(root, 0o711) == 0 else { throw ExperimentError(.io, "held-out VM: mkdir \(root): \(ErrnoName.describe(errno))") }
            created = true
        }
        let path = root + "/" + name
        guard mkdir(path, 0o711) == 0 else { throw ExperimentError(.io, "held-out VM: mkdir \(path): \(ErrnoName.describe(errno))") }
        made.append((name, path))
        return (path, GuestImage.inputRoot + "/" + name)
    }

    func remove() { if created { try? FileManager.default.removeItem(atPath: root) } }
}
