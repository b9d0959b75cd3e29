import CSeccomp
import CSystemCalls
import Glibc

/// symlink and symlinkat under `seccomp.watch_links`, seen by the supervisor before they run.
///
/// A verifier's test can make a link into its own answer key from what agent.py left (a tar
/// member, a committed git link) and compare the key with itself without opening it through
/// the link (GNU diff and Python's filecmp compare by `stat`; an O_PATH descriptor raises no
/// open event; `realpath` first). The guard on the key's opens cannot see those; the link's
/// making can. So the call waits while the supervisor reads its target and name from the
/// caller's memory and resolves them in the caller's view (`ahs_link_leads_into`: the caller's
/// root and directory, prefix by prefix); a link into a watched directory (or through procfs,
/// a magic link, the root itself) is recorded as a `planted_link`, flagged, and the call goes
/// on either way: honest tests link into their own files too (`ln -s /tests/data /tmp/d`).
enum LinkWatch {
    static let symlinkNumber = SeccompCompiler.resolve("symlink") ?? -1

    /// The link the caller is making and whether it leads into `watched`; nil when its
    /// arguments cannot be read (the call then goes on unjudged, and the kernel answers it).
    static func judge(pid: UInt32, nr: Int32, args: [UInt64], watched: [String]) -> (link: String, into: Bool)? {
        let symlinkat = nr != symlinkNumber
        guard let target = StatfsAnswer.readPath(pid: pid, address: args[0]),
              let name = StatfsAnswer.readPath(pid: pid, address: symlinkat ? args[2] : args[1]), !target.isEmpty, !name.isEmpty else { return nil }
        let dirfd = symlinkat ? Int32(truncatingIfNeeded: args[1]) : AT_FDCWD
        let shown = String(decoding: name, as: UTF8.self) + " -> " + String(decoding: target, as: UTF8.self)
        let copies = watched.map { strdup($0)! }
        defer { copies.forEach { free($0) } }
        let rc = (name + [0]).withUnsafeBufferPointer { n in
            (target + [0]).withUnsafeBufferPointer { t in
                n.withMemoryRebound(to: CChar.self) { n in
                    t.withMemoryRebound(to: CChar.self) { t in
                        copies.map { Optional(UnsafePointer($0)) }.withUnsafeBufferPointer { g in
                            ahs_link_leads_into(Int32(bitPattern: pid), dirfd, n.baseAddress, t.baseAddress, g.baseAddress, Int32(copies.count))
                        }
                    }
                }
            }
        }
        // Not told (the caller's view unreadable): recorded, as a link that may lead there.
        return (shown, rc != 0)
    }
}
