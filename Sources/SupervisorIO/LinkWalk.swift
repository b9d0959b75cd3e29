import Glibc

/// Symbolic links in a tree a sandbox wrote, looked at without following any of them
/// (`PlantedLinks` decides which lead out of it).
public enum LinkWalk {
    /// A path below the walked directory, one name per component (bytes, no NUL).
    public typealias Components = [[UInt8]]

    public struct Link: Sendable {
        public var path: Components
        public var target: [UInt8]
    }

    /// What is at a path: a link's target, or another kind of entry.
    public enum Entry: Equatable {
        case link([UInt8])
        case directory
        case other
    }

    /// Every symbolic link under `dir`, following none and descending into no link, at most
    /// `entryLimit` entries looked at and `depthLimit` levels deep (more: an `IOFailure`).
    public static func links(under dir: Int32, entryLimit: Int, depthLimit: Int, label: String) throws(IOFailure) -> [Link] {
        var out: [Link] = []
        var seen = 0
        func walk(_ d: Int32, _ prefix: Components, depth: Int) throws(IOFailure) {
            let here = label + prefix.map { "/" + String(decoding: $0, as: UTF8.self) }.joined()
            guard depth < depthLimit else { throw IOFailure("cannot check", here, reason: "deeper than \(depthLimit) levels") }
            guard let names = FileSystem.entries(of: d) else { throw IOFailure("cannot list", here, errno: errno) }
            seen += names.count
            guard seen <= entryLimit else { throw IOFailure("cannot check", label, reason: "more than \(entryLimit) entries") }
            for n in names {
                guard let st = FileSystem.entryStatus(at: d, n) else { continue }
                let name = n.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }
                if FileSystem.isSymlink(st) {
                    guard let target = readLink(at: d, n) else { throw IOFailure("cannot readlink", here + "/" + FileSystem.display(n), errno: errno) }
                    out.append(Link(path: prefix + [name], target: target))
                } else if FileSystem.isDirectory(st) {
                    let sub = FileSystem.openDirectory(at: d, n)
                    guard sub >= 0 else { throw IOFailure("cannot open", here + "/" + FileSystem.display(n), errno: errno) }
                    defer { close(sub) }
                    try walk(sub, prefix + [name], depth: depth + 1)
                }
            }
        }
        try walk(dir, [], depth: 0)
        return out
    }

    /// What `path` under `dir` is, reached without following any link on the way (nil when
    /// it does not exist, or a component on the way is not a directory).
    public static func entry(under dir: Int32, _ path: Components) -> Entry? {
        guard let last = path.last else { return .directory }
        guard let parent = openParent(dir, path) else { return nil }
        defer { if parent != dir { close(parent) } }
        let n = name(last)
        guard let st = FileSystem.entryStatus(at: parent, n) else { return nil }
        if FileSystem.isSymlink(st) { return readLink(at: parent, n).map { .link($0) } ?? .other }
        return FileSystem.isDirectory(st) ? .directory : .other
    }

    /// Removes the link at `path` under `dir` (never following one on the way): nil, or errno.
    public static func removeLink(under dir: Int32, _ path: Components) -> Int32? {
        guard let last = path.last, let parent = openParent(dir, path) else { return ENOENT }
        defer { if parent != dir { close(parent) } }
        let n = name(last)
        guard let st = FileSystem.entryStatus(at: parent, n), FileSystem.isSymlink(st) else { return EINVAL }
        return unlinkat(parent, n, 0) == 0 ? nil : errno
    }

    private static func name(_ bytes: [UInt8]) -> FileSystem.Name { bytes.map { CChar(bitPattern: $0) } + [0] }

    /// The directory holding `path`'s last component, opened through directories only.
    private static func openParent(_ dir: Int32, _ path: Components) -> Int32? {
        var current = dir
        for component in path.dropLast() {
            let next = FileSystem.openDirectory(at: current, name(component))
            if current != dir { close(current) }
            guard next >= 0 else { return nil }
            current = next
        }
        return current
    }

    private static func readLink(at dir: Int32, _ n: FileSystem.Name) -> [UInt8]? {
        var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let len = readlinkat(dir, n, &target, Int(PATH_MAX))
        guard len >= 0 else { return nil }
        return target[0..<len].map { UInt8(bitPattern: $0) }
    }
}

/// Every entry of a tree, following no link and descending into no link: `visit` is given each
/// one's directory, name, status and path below the top ("/a/b"), and goes into a directory
/// when it returns true. More than `entryLimit` entries or `depthLimit` levels is an
/// `IOFailure` naming `label`.
public enum TreeWalk {
    public static func walk(_ root: Int32, label: String, entryLimit: Int, depthLimit: Int,
                            _ visit: (_ dir: Int32, _ name: FileSystem.Name, _ status: stat, _ path: String) throws(IOFailure) -> Bool) throws(IOFailure) {
        var seen = 0
        func walk(_ d: Int32, _ prefix: String, depth: Int) throws(IOFailure) {
            guard depth < depthLimit else { throw IOFailure("cannot check", label + prefix, reason: "deeper than \(depthLimit) levels") }
            guard let names = FileSystem.entries(of: d) else { throw IOFailure("cannot list", label + prefix, errno: errno) }
            seen += names.count
            guard seen <= entryLimit else { throw IOFailure("cannot check", label, reason: "more than \(entryLimit) entries") }
            for n in names {
                guard let st = FileSystem.entryStatus(at: d, n) else { continue }
                let shown = prefix + "/" + FileSystem.display(n)
                guard try visit(d, n, st, shown), FileSystem.isDirectory(st) else { continue }
                let sub = FileSystem.openDirectory(at: d, n)
                guard sub >= 0 else { throw IOFailure("cannot open", label + shown, errno: errno) }
                defer { close(sub) }
                try walk(sub, shown, depth: depth + 1)
            }
        }
        try walk(root, "", depth: 0)
    }
}

/// What a scorer must not meet in a runner's output: anything but files and directories.
public enum IrregularFiles {
    /// Removes every FIFO, socket, device node and symbolic link under `path` (following no
    /// link, descending into no link); returns each removed one's path below `path`.
    public static func remove(under path: String) throws(IOFailure) -> [String] {
        let root = FileSystem.openDirectory(path)
        guard root >= 0 else {
            if errno == ENOENT { return [] }
            throw IOFailure("cannot open", path, errno: errno)
        }
        defer { close(root) }
        var removed: [String] = []
        try TreeWalk.walk(root, label: path, entryLimit: 1_000_000, depthLimit: 128) { d, n, st, shown throws(IOFailure) in
            guard !FileSystem.isDirectory(st), !FileSystem.isRegular(st) else { return true }
            guard unlinkat(d, n, 0) == 0 || errno == ENOENT else { throw IOFailure("cannot remove", path + shown, errno: errno) }
            removed.append(String(shown.dropFirst()))
            return false
        }
        return removed
    }
}
