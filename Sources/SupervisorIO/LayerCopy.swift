import CSystemCalls
import Glibc

extension FileSystem {
    /// Copies an overlay's upper layer (`source`, a directory written by a sandbox) into the
    /// empty directory `destination`, as an upper layer of another overlay: every entry with
    /// its owner, mode (set-id bits included), extended attributes (the overlay's own:
    /// `trusted.overlay.opaque`; file capabilities; ACLs), modification time and hard links;
    /// symlinks as links (never followed); whiteouts (character devices 0/0), FIFOs and
    /// sockets as nodes. Any other device is refused: nothing in a sandbox can make one.
    /// Deeper than `maxDepth` directories is refused rather than recursed into. Errors name
    /// the entry by its path under `source`.
    public static func copyLayer(from source: String, to destination: String, maxDepth: Int = 256) throws(IOFailure) {
        let s = openDirectory(source), d = openDirectory(destination)
        defer {
            if s >= 0 { close(s) }
            if d >= 0 { close(d) }
        }
        guard s >= 0 else { throw IOFailure("cannot open", source, errno: errno) }
        guard d >= 0 else { throw IOFailure("cannot open", destination, errno: errno) }
        var copier = LayerCopier(destinationRoot: d, maxDepth: maxDepth, label: source)
        try copier.copyChildren(of: s, to: d, relative: "", depth: 0)
        guard let st = fileStatus(s) else { throw IOFailure("cannot stat", source, errno: errno) }
        try copier.finishDirectory(d, like: s, st, path: source)
    }
}

private struct LayerCopier {
    let destinationRoot: Int32
    let maxDepth: Int
    let label: String
    /// Hard links: (device, inode) of a source file with more than one link, and the first
    /// copy's path relative to the destination's root (every component a directory made here).
    var linked: [UInt64: [UInt64: String]] = [:]

    init(destinationRoot: Int32, maxDepth: Int, label: String) {
        self.destinationRoot = destinationRoot
        self.maxDepth = maxDepth
        self.label = label
    }

    mutating func copyChildren(of source: Int32, to destination: Int32, relative: String, depth: Int) throws(IOFailure) {
        guard depth < maxDepth else { throw IOFailure("cannot copy", label + "/" + relative, reason: "more than \(maxDepth) directories deep") }
        guard let names = FileSystem.entries(of: source) else { throw IOFailure("cannot list", label + "/" + relative, errno: errno) }
        for n in names {
            let rel = relative + FileSystem.display(n)
            let path = label + "/" + rel
            guard let st = FileSystem.entryStatus(at: source, n) else { throw IOFailure("cannot stat", path, errno: errno) }
            switch st.st_mode & S_IFMT {
            case S_IFDIR:
                guard mkdirat(destination, n, 0o700) == 0 else { throw IOFailure("cannot create", path, errno: errno) }
                let sub = FileSystem.openDirectory(at: source, n), made = FileSystem.openDirectory(at: destination, n)
                defer {
                    if sub >= 0 { close(sub) }
                    if made >= 0 { close(made) }
                }
                guard sub >= 0, made >= 0 else { throw IOFailure("cannot open", path, errno: errno) }
                try copyChildren(of: sub, to: made, relative: rel + "/", depth: depth + 1)
                try finishDirectory(made, like: sub, st, path: path)
            case S_IFREG:
                if st.st_nlink > 1, let first = linked[UInt64(st.st_dev)]?[UInt64(st.st_ino)] {
                    guard linkat(destinationRoot, first, destination, n, 0) == 0 else { throw IOFailure("cannot link", path, errno: errno) }
                    continue
                }
                try copyFile(n, from: source, to: destination, st, path: path)
                if st.st_nlink > 1 { linked[UInt64(st.st_dev), default: [:]][UInt64(st.st_ino)] = rel }
            case S_IFLNK:
                var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let len = readlinkat(source, n, &target, Int(PATH_MAX))
                guard len >= 0 else { throw IOFailure("cannot readlink", path, errno: errno) }
                target[len] = 0
                guard symlinkat(target, destination, n) == 0 else { throw IOFailure("cannot symlink", path, errno: errno) }
                try finishEntry(n, in: destination, st, path: path)
            case S_IFCHR where st.st_rdev == 0, S_IFIFO, S_IFSOCK:
                guard mknodat(destination, n, st.st_mode & (S_IFMT | 0o7777), 0) == 0 else { throw IOFailure("cannot create", path, errno: errno) }
                try finishEntry(n, in: destination, st, path: path)
            default:
                throw IOFailure("cannot copy", path, reason: "a device node")
            }
        }
    }

    /// A regular file: its bytes, then owner, mode, attributes and times, in that order (a
    /// chown clears set-id bits and file capabilities).
    func copyFile(_ n: FileSystem.Name, from source: Int32, to destination: Int32, _ st: stat, path: String) throws(IOFailure) {
        let s = openat(source, n, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        guard s >= 0 else { throw IOFailure("cannot open", path, errno: errno) }
        defer { close(s) }
        guard let now = FileSystem.fileStatus(s), now.st_mode & S_IFMT == S_IFREG else { throw IOFailure("cannot copy", path, reason: "not a regular file") }
        let d = openat(destination, n, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard d >= 0 else { throw IOFailure("cannot create", path, errno: errno) }
        defer { close(d) }
        while true {
            let r = ahs_copy_range(s, d, 1 << 30)
            if r > 0 { continue }
            if r == 0 { break }
            if errno == EINTR { continue }
            guard errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP else {
                throw IOFailure("cannot copy", path, errno: errno)
            }
            try copyBytes(s, d, path: path)
            break
        }
        guard fchown(d, now.st_uid, now.st_gid) == 0, fchmod(d, now.st_mode & 0o7777) == 0 else {
            throw IOFailure("cannot chown", path, errno: errno)
        }
        try copyAttributes(from: s, to: d, path: path)
        var times = [now.st_atim, now.st_mtim]
        guard futimens(d, &times) == 0 else { throw IOFailure("cannot set times of", path, errno: errno) }
    }

    /// What copy_file_range cannot do, by reading and writing (from the current offsets).
    func copyBytes(_ s: Int32, _ d: Int32, path: String) throws(IOFailure) {
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let r = buffer.withUnsafeMutableBytes { read(s, $0.baseAddress, $0.count) }
            if r < 0 && errno == EINTR { continue }
            guard r >= 0 else { throw IOFailure("cannot read", path, errno: errno) }
            if r == 0 { return }
            var done = 0
            while done < r {
                let w = buffer.withUnsafeBytes { write(d, $0.baseAddress! + done, r - done) }
                if w < 0 && errno == EINTR { continue }
                guard w > 0 else { throw IOFailure("cannot write", path, errno: errno) }
                done += w
            }
        }
    }

    /// A directory once its entries are in: owner, mode, attributes, times (its entries'
    /// copies changed its modification time).
    func finishDirectory(_ d: Int32, like s: Int32, _ st: stat, path: String) throws(IOFailure) {
        guard fchown(d, st.st_uid, st.st_gid) == 0, fchmod(d, st.st_mode & 0o7777) == 0 else {
            throw IOFailure("cannot chown", path, errno: errno)
        }
        try copyAttributes(from: s, to: d, path: path)
        var times = [st.st_atim, st.st_mtim]
        guard futimens(d, &times) == 0 else { throw IOFailure("cannot set times of", path, errno: errno) }
    }

    /// A link or node: owner, mode (not a link's) and times, by name, never followed.
    func finishEntry(_ n: FileSystem.Name, in dir: Int32, _ st: stat, path: String) throws(IOFailure) {
        guard fchownat(dir, n, st.st_uid, st.st_gid, AT_SYMLINK_NOFOLLOW) == 0 else { throw IOFailure("cannot chown", path, errno: errno) }
        if st.st_mode & S_IFMT != S_IFLNK, fchmodat(dir, n, st.st_mode & 0o7777, 0) != 0 {
            throw IOFailure("cannot chmod", path, errno: errno)
        }
        var times = [st.st_atim, st.st_mtim]
        guard utimensat(dir, n, &times, AT_SYMLINK_NOFOLLOW) == 0 else { throw IOFailure("cannot set times of", path, errno: errno) }
    }

    /// Every extended attribute of `s` set on `d` (the caller is host root: `trusted.*` too).
    func copyAttributes(from s: Int32, to d: Int32, path: String) throws(IOFailure) {
        let size = ahs_flistxattr(s, nil, 0)
        if size < 0 && (errno == ENOTSUP || errno == EOPNOTSUPP) { return }
        guard size >= 0 else { throw IOFailure("cannot list attributes of", path, errno: errno) }
        guard size > 0 else { return }
        var list = [CChar](repeating: 0, count: size)
        let got = ahs_flistxattr(s, &list, UInt(size))
        guard got >= 0 else { throw IOFailure("cannot list attributes of", path, errno: errno) }
        var start = 0
        while start < got {
            var end = start
            while end < got && list[end] != 0 { end += 1 }
            guard end < got else { break }  // the kernel ends every name with a NUL
            let name = Array(list[start...end])
            start = end + 1
            let len = ahs_fgetxattr(s, name, nil, 0)
            guard len >= 0 else { throw IOFailure("cannot read attribute of", path, errno: errno) }
            var value = [UInt8](repeating: 0, count: max(len, 1))
            let read = ahs_fgetxattr(s, name, &value, UInt(len))
            guard read >= 0, ahs_fsetxattr(d, name, value, UInt(read)) == 0 else {
                throw IOFailure("cannot copy attribute \(FileSystem.display(name)) of", path, errno: errno)
            }
        }
    }
}
