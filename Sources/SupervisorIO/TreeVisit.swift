import Glibc

/// A tree read entry by entry (a directory a node and the supervisor must hold alike).
public enum TreeVisit {
    /// What `visit` hands over with an entry besides its status.
    public enum TreeContent {
        case none
        /// A symbolic link's target, as stored.
        case link([UInt8])
        /// A regular file, open for reading (valid only during the call).
        case file(Int32)
    }

    /// Every entry under `root`, depth first in name order (bytewise), never through a link:
    /// its path relative to `root`, its status, and a link's target or a regular file's
    /// descriptor. Stops at the first entry that cannot be listed, opened or read.
    public static func visit(_ root: String, _ visit: (_ path: String, _ st: stat, _ content: TreeContent) -> Void) throws(IOFailure) {
        func walk(_ dir: Int32, _ prefix: String) throws(IOFailure) {
            guard let names = FileSystem.entries(of: dir) else { throw IOFailure("cannot list", root + "/" + prefix, errno: errno) }
            for name in names.sorted(by: { FileSystem.display($0) < FileSystem.display($1) }) {
                let shown = prefix + FileSystem.display(name)
                guard let st = FileSystem.entryStatus(at: dir, name) else { throw IOFailure("cannot stat", root + "/" + shown, errno: errno) }
                switch st.st_mode & S_IFMT {
                case S_IFDIR:
                    visit(shown, st, .none)
                    let sub = FileSystem.openDirectory(at: dir, name)
                    guard sub >= 0 else { throw IOFailure("cannot open", root + "/" + shown, errno: errno) }
                    defer { close(sub) }
                    try walk(sub, shown + "/")
                case S_IFREG:
                    let fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK)
                    guard fd >= 0 else { throw IOFailure("cannot open", root + "/" + shown, errno: errno) }
                    defer { close(fd) }
                    visit(shown, st, .file(fd))
                case S_IFLNK:
                    var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                    let n = readlinkat(dir, name, &target, Int(PATH_MAX))
                    guard n >= 0 else { throw IOFailure("cannot read the link", root + "/" + shown, errno: errno) }
                    visit(shown, st, .link(target[..<n].map { UInt8(bitPattern: $0) }))
                default:
                    visit(shown, st, .none)
                }
            }
        }
        let fd = FileSystem.openDirectory(root)
        guard fd >= 0 else { throw IOFailure("cannot open", root, errno: errno) }
        defer { close(fd) }
        try walk(fd, "")
    }
}
