import CSeccomp
import CSystemCalls
import Glibc

/// Links made or renamed under `seccomp.watch_links`, seen by the supervisor before the call runs.
///
/// A verifier's test can make a link into its own answer key from what agent.py left (a tar
/// member, a committed git link) and compare the key with itself without opening it through
/// the link (GNU diff and Python's filecmp compare by `stat`; an O_PATH descriptor raises no
/// open event; `realpath` first). The guard on the key's opens cannot see those; the link's
/// making can. So symlink, symlinkat, link, linkat, rename, renameat and renameat2 wait while
/// the supervisor reads their names from the caller's memory and resolves them in the caller's
/// view (`ahs_link_leads_into`, `ahs_move_leads_into`: the caller's root and directories, the
/// target prefix by prefix; a symbolic link hard-linked or moved judged from where it will be,
/// and every link below a directory moved); a link into a watched directory (or through procfs,
/// a magic link, the root itself, or a directory that does not exist yet followed by `..`) is
/// recorded as a `planted_link`, flagged, and the call goes on either way: honest tests link
/// into their own files too (`ln -s /tests/data /tmp/d`).
enum LinkWatch {
    static let numbers: [String: Int32] = Dictionary(uniqueKeysWithValues: SyscallProfile.linkCalls.compactMap { n in SeccompCompiler.resolve(n).map { (n, $0) } })
    static let renameExchange: UInt64 = 2

    /// What the caller is doing, shown, and whether it leads into `watched`; nil when its
    /// arguments cannot be read (the call then goes on unjudged, and the kernel answers it).
    static func judge(pid: UInt32, nr: Int32, args: [UInt64], watched: [String]) -> (link: String, into: Bool)? {
        guard let name = numbers.first(where: { $0.value == nr })?.key else { return nil }
        let at = AT_FDCWD
        func fd(_ i: Int) -> Int32 { Int32(truncatingIfNeeded: args[i]) }
        func path(_ i: Int) -> [UInt8]? { StatfsAnswer.readPath(pid: pid, address: args[i]).flatMap { $0.isEmpty ? nil : $0 } }
        switch name {
        case "symlink", "symlinkat":
            let symlinkat = name == "symlinkat"
            guard let target = path(0), let link = path(symlinkat ? 2 : 1) else { return nil }
            let rc = withGuarded(watched) { g, n in
                cString(link) { l in cString(target) { t in ahs_link_leads_into(Int32(bitPattern: pid), symlinkat ? fd(1) : at, l, t, g, n) } }
            }
            return (show(link) + " -> " + show(target), rc != 0)
        case "link", "linkat":
            // With AT_SYMLINK_FOLLOW the new name is the file the link leads to, not the link.
            if name == "linkat" && args[4] & UInt64(AT_SYMLINK_FOLLOW) != 0 { return nil }
            let (o, n, od, nd) = name == "link" ? (0, 1, at, at) : (1, 3, fd(0), fd(2))
            guard let old = path(o), let new = path(n) else { return nil }
            return (show(new) + " (hard link of " + show(old) + ")", moved(pid, od, old, nd, new, hard: true, watched) != 0)
        default:
            let (o, n, od, nd) = name == "rename" ? (0, 1, at, at) : (1, 3, fd(0), fd(2))
            guard let old = path(o), let new = path(n) else { return nil }
            var rc = moved(pid, od, old, nd, new, hard: false, watched)
            if name == "renameat2" && args[4] & renameExchange != 0 && rc == 0 { rc = moved(pid, nd, new, od, old, hard: false, watched) }
            return (show(old) + " renamed " + show(new), rc != 0)
        }
    }

    static func moved(_ pid: UInt32, _ olddir: Int32, _ old: [UInt8], _ newdir: Int32, _ new: [UInt8], hard: Bool, _ watched: [String]) -> Int32 {
        withGuarded(watched) { g, n in
            cString(old) { o in cString(new) { w in ahs_move_leads_into(Int32(bitPattern: pid), olddir, o, newdir, w, hard ? 1 : 0, g, n) } }
        }
    }

    static func show(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

    static func cString<R>(_ bytes: [UInt8], _ body: (UnsafePointer<CChar>) -> R) -> R {
        (bytes + [0]).withUnsafeBufferPointer { p in p.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) } }
    }

    static func withGuarded<R>(_ watched: [String], _ body: (UnsafePointer<UnsafePointer<CChar>?>?, Int32) -> R) -> R {
        let copies = watched.map { strdup($0)! }
        defer { copies.forEach { free($0) } }
        return copies.map { Optional(UnsafePointer($0)) }.withUnsafeBufferPointer { body($0.baseAddress, Int32(copies.count)) }
    }
}
