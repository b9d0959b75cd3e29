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
        try copier.copyChildren(of: s, to: d, relative: [], depth: 0)
        guard let st = fileStatus(s) else { throw IOFailure("cannot stat", source, errno: errno) }
        try copier.finishDirectory(d, like: s, st, path: source)
    }
}

private struct LayerCopier {
    let destinationRoot: Int32
    let maxDepth: Int
    let label: String
    /// Hard links: (device, inode) of a source file with more than one link, and the first
    /// copy's path relative to the destination's root, as bytes with its NUL (names need not
    /// be UTF-8; every component is a directory made here).
    var linked: [UInt64: [UInt64: [CChar]]] = [:]

    init(destinationRoot: Int32, maxDepth: Int, label: String) {
        self.destinationRoot = destinationRoot
        self.maxDepth = maxDepth
        self.label = label
    }

    /// `relative`: the directory's path under the root as bytes, "" or ending in "/".
    mutating func copyChildren(of source: Int32, to destination: Int32, relative: [CChar], depth: Int) throws(IOFailure) {
        let here = label + "/" + FileSystem.display(relative + [0])
        guard depth < maxDepth else { throw IOFailure("cannot copy", here, reason: "more than \(maxDepth) directories deep") }
        guard let names = FileSystem.entries(of: source) else { throw IOFailure("cannot list", here, errno: errno) }
        for n in names {
            let rel = relative + n.prefix { $0 != 0 }
            let path = label + "/" + FileSystem.display(rel + [0])
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
                try copyChildren(of: sub, to: made, relative: rel + [CChar(UInt8(ascii: "/"))], depth: depth + 1)
                try finishDirectory(made, like: sub, st, path: path)
            case S_IFREG:
                if st.st_nlink > 1, let first = linked[UInt64(st.st_dev)]?[UInt64(st.st_ino)] {
                    guard linkat(destinationRoot, first, destination, n, 0) == 0 else { throw IOFailure("cannot link", path, errno: errno) }
                    continue
                }
                try copyFile(n, from: source, to: destination, st, path: path)
                if st.st_nlink > 1 { linked[UInt64(st.st_dev), default: [:]][UInt64(st.st_ino)] = rel + [0] }
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
        // Only the data: a hole stays a hole (on tmpfs copy_file_range would fill it with
        // pages, and a 600 MB sparse file made in a moment would cost 600 MB here).
        guard ftruncate(d, now.st_size) == 0 else { throw IOFailure("cannot size", path, errno: errno) }
        var offset: off_t = 0
        while offset < now.st_size {
            let data = lseek(s, offset, 3 /* SEEK_DATA */)
            if data < 0 {
                if errno == ENXIO { break }  // no data past `offset`
                throw IOFailure("cannot read", path, errno: errno)
            }
            let hole = min(lseek(s, data, 4 /* SEEK_HOLE */), now.st_size)
            guard hole >= data else { throw IOFailure("cannot read", path, errno: errno) }
            try copyRange(s, d, from: data, to: hole, path: path)
            offset = hole
        }
        guard fchown(d, now.st_uid, now.st_gid) == 0, fchmod(d, now.st_mode & 0o7777) == 0 else {
            throw IOFailure("cannot chown", path, errno: errno)
        }
        try copyAttributes(from: s, to: d, path: path)
        var times = [now.st_atim, now.st_mtim]
        guard futimens(d, &times) == 0 else { throw IOFailure("cannot set times of", path, errno: errno) }
    }

    /// Bytes [start, end) of `s` to the same offsets of `d`: copy_file_range, or where the
    /// file systems cannot, reading and writing.
    func copyRange(_ s: Int32, _ d: Int32, from start: off_t, to end: off_t, path: String) throws(IOFailure) {
        var inOffset = Int64(start), outOffset = Int64(start)
        while inOffset < Int64(end) {
            let r = ahs_copy_range(s, &inOffset, d, &outOffset, UInt(Int64(end) - inOffset))
            if r > 0 { continue }
            if r == 0 { return }  // the file shrank meanwhile
            if errno == EINTR { continue }
            guard errno == EXDEV || errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP else {
                throw IOFailure("cannot copy", path, errno: errno)
            }
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            while inOffset < Int64(end) {
                let want = Int(min(Int64(buffer.count), Int64(end) - inOffset))
                let n = buffer.withUnsafeMutableBytes { pread(s, $0.baseAddress, want, off_t(inOffset)) }
                if n < 0 && errno == EINTR { continue }
                guard n >= 0 else { throw IOFailure("cannot read", path, errno: errno) }
                if n == 0 { return }
                var done = 0
                while done < n {
                    let w = buffer.withUnsafeBytes { pwrite(d, $0.baseAddress! + done, n - done, off_t(inOffset) + off_t(done)) }
                    if w < 0 && errno == EINTR { continue }
                    guard w > 0 else { throw IOFailure("cannot write", path, errno: errno) }
                    done += w
                }
                inOffset += Int64(n)
            }
            return
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
