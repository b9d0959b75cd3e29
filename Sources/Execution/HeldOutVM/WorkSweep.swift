import Foundation
import Sandbox
import SupervisorIO

extension HeldOutVM {
    /// Removes the work directory of a held-out VM whose supervisor is gone (its initramfs names the
    /// held-out ids): root-only, in the scratch root; its qemu died with the supervisor.
    package static func sweepWork(_ scratchRoot: String) -> [String] {
        var out: [String] = []
        for name in FileSystem.names(in: scratchRoot) where name.hasPrefix(workPrefix) {
            let rest = name.dropFirst(workPrefix.count)
            guard let dash = rest.lastIndex(of: "-"), let owner = ProcessIdentity(tag: rest[..<dash]), !owner.isAlive else { continue }
            let path = scratchRoot + "/" + name
            do {
                try FileManager.default.removeItem(atPath: path)
                out.append("removed \(path), the held-out VM work directory of supervisor pid \(owner.pid), which is gone")
            } catch {
                out.append("could not remove \(path) (a held-out VM's, whose supervisor is gone): \(error)")
            }
        }
        return out
    }
}
