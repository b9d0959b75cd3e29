// Supervisor-side file operations on trees a sandbox wrote.
//
// Everything under a task's `app/` and `logs/` was last written by code we do not trust (the
// agent, and a verifier that ran code the agent left). The supervisor is root, so a path
// walk through such a tree could be redirected by a planted symlink to any host file. Every
// operation here therefore works relative to directory fds, opens with O_NOFOLLOW, never
// crosses into another filesystem, and treats names as raw bytes (a hostile name need not
// be UTF-8). Plain libc throughout: this sits on the per-task path.
//
// Callers name the file in their own errors where they know better (a task's `app/`).

import CSystemCalls
import Glibc
import WireCoding

public enum FileSystem {
    /// A directory entry name as raw bytes, NUL-terminated for the *at() calls.
    public typealias Name = [CChar]

    public static func name(_ s: String) -> Name { Array(s.utf8CString) }
    public static func display(_ n: Name) -> String { String(decoding: n.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self) }

    public static func errorText(_ e: Int32 = errno) -> String { String(cString: strerror(e)) }

    /// Opens a directory without following a final symlink. -1 and errno on failure.
    public static func openDirectory(_ path: String) -> Int32 {
        open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    }

    public static func openDirectory(at dir: Int32, _ name: Name) -> Int32 {
        openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
    }

    public static func fileStatus(_ fd: Int32) -> stat? {
        var st = stat()
        return fstat(fd, &st) == 0 ? st : nil
    }

    /// `statfs.f_type` of the file system holding `fd` (TMPFS_MAGIC, ...), or nil with errno.
    public static func filesystemType(_ fd: Int32) -> Int? {
        let t = ahs_filesystem_type(fd)
        return t < 0 ? nil : t
    }

    public static func entryStatus(at dir: Int32, _ name: Name) -> stat? {
        var st = stat()
        return fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 ? st : nil
    }

    public static func isDirectory(_ st: stat) -> Bool { (st.st_mode & S_IFMT) == S_IFDIR }
    public static func isRegular(_ st: stat) -> Bool { (st.st_mode & S_IFMT) == S_IFREG }
    public static func isSymlink(_ st: stat) -> Bool { (st.st_mode & S_IFMT) == S_IFLNK }

    /// The names in a directory (without `.` and `..`). Read through a fresh open file
    /// description so the caller's fd offset is untouched.
    public static func entries(of dir: Int32) -> [Name]? {
        entries(of: dir, keeping: .max) { _ in true }?.names
    }

    /// The names in a directory that `include` accepts, at most `limit` of them (a sandbox
    /// can make millions), and how many it accepted in all.
    public static func entries(of dir: Int32, keeping limit: Int, where include: (Name) -> Bool) -> (names: [Name], total: Int)? {
        entries(of: dir, keeping: limit, stoppingPast: nil, where: include)
    }

    /// `entries(of:keeping:where:)`, reading no further than `stop` accepted names when given
    /// (the total is then at most `stop + 1`: more than `stop` exist).
    public static func entries(of dir: Int32, keeping limit: Int, stoppingPast stop: Int?, where include: (Name) -> Bool) -> (names: [Name], total: Int)? {
        let fd = openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0, let d = fdopendir(fd) else {
            if fd >= 0 { close(fd) }
            return nil
        }
        defer { closedir(d) }
        var names: [Name] = []
        var total = 0
        while let e = readdir(d) {
            let n: Name = DirectoryEntry.cName(e)
            if n == [46, 0] || n == [46, 46, 0] || !include(n) { continue }
            total += 1
            if let stop, total > stop { break }
            if names.count < limit { names.append(n) }
        }
        return (names, total)
    }

    /// The names in the directory at `path` (not following a final symlink), sorted, as
    /// text (for names the supervisor chose or only compares; use `entries` to open one).
    /// Empty if it cannot be listed.
    public static func names(in path: String) -> [String] {
        let dir = openDirectory(path)
        guard dir >= 0 else { return [] }
        defer { close(dir) }
        return (entries(of: dir) ?? []).map(display).sorted()
    }

    // MARK: - Creating

    /// `mkdir -p` for supervisor-chosen paths (trace directories); each level it creates gets
    /// exactly `mode` (mkdir alone would apply the process umask). Returns errno on failure.
    public static func makeDirectories(_ path: String, mode: mode_t) -> Int32? {
        var current = path.hasPrefix("/") ? "" : "."
        for component in path.split(separator: "/") {
            current += "/" + component
            if mkdir(current, mode) == 0 {
                if chmod(current, mode) != 0 { return errno }
            } else if errno != EEXIST {
                return errno
            }
        }
        var st = stat()
        guard stat(path, &st) == 0 else { return errno }
        return isDirectory(st) ? nil : ENOTDIR
    }

    /// Creates directory `name` in `dir` with exactly `mode` (no umask), owned by
    /// `owner`, and returns an fd for it.
    public static func makeDirectory(at dir: Int32, _ name: String, mode: mode_t, owner: (uid_t, gid_t)?) -> Int32? {
        let n = Self.name(name)
        guard mkdirat(dir, n, 0o700) == 0 else { return nil }
        let fd = openDirectory(at: dir, n)
        guard fd >= 0 else { return nil }
        if let owner, fchown(fd, owner.0, owner.1) != 0 {
            close(fd)
            return nil
        }
        guard fchmod(fd, mode) == 0 else {
            close(fd)
            return nil
        }
        return fd
    }

    /// Writes `bytes` to a new or truncated regular file `name` in `dir` (never through a
    /// symlink), with `mode` and, if given, `owner`. Returns errno on failure.
    @discardableResult
    public static func writeFile(at dir: Int32, _ name: String, _ bytes: [UInt8], mode: mode_t, owner: (uid_t, gid_t)? = nil) -> Int32? {
        let fd = openat(dir, Self.name(name), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, mode)
        guard fd >= 0 else { return errno }
        defer { close(fd) }
        guard fchmod(fd, mode) == 0 else { return errno }
        if let owner, fchown(fd, owner.0, owner.1) != 0 { return errno }
        return Descriptor.writeAll(fd, bytes[...])
    }

    /// Opens `name` in `dir` with `flags` plus O_NOFOLLOW and O_CLOEXEC (a final symlink is
    /// refused with ELOOP). -1 and errno on failure.
    public static func openFile(at dir: Int32, _ name: String, _ flags: Int32, mode: mode_t = 0) -> Int32 {
        var fd: Int32
        repeat { fd = openat(dir, Self.name(name), flags | O_NOFOLLOW | O_CLOEXEC, mode) } while fd < 0 && errno == EINTR
        return fd
    }

    /// Removes the non-directory entry `name` of `dir` (a link is removed, never followed).
    /// Returns errno on failure; an entry that is not there is not a failure.
    public static func removeEntry(at dir: Int32, _ name: String) -> Int32? {
        unlinkat(dir, Self.name(name), 0) == 0 || errno == ENOENT ? nil : errno
    }

    // MARK: - Reading

    public typealias ReadError = InputFile.Problem

    /// Reads regular file `name` in `dir`, refusing symlinks (O_NOFOLLOW), FIFOs and devices,
    /// and anything larger than `limit` bytes (`InputFile`).
    public static func readSmallFile(at dir: Int32, _ name: String, limit: Int) -> Result<[UInt8], ReadError> {
        InputFile.read(at: dir, name, cap: limit)
    }

    /// The contents of a supervisor-owned log file, at most `cap` bytes: when longer, the
    /// first and last halves around a marker saying how much was left out (the start shows
    /// what ran, the end shows how it failed).
    public static func readCapped(at dir: Int32, _ name: String, cap: Int) -> [UInt8]? {
        let fd = openat(dir, Self.name(name), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        guard let st = fileStatus(fd), isRegular(st) else { return nil }
        let size = Int(st.st_size)
        func readRange(_ offset: Int, _ count: Int) -> [UInt8] {
            var out = [UInt8](repeating: 0, count: count)
            var done = 0
            while done < count {
                let n = out.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + done, count - done, off_t(offset + done)) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                done += n
            }
            return Array(out[0..<done])
        }
        if size <= cap { return readRange(0, size) }
        let half = cap / 2
        let marker = Array("\n[autoharness: \(size - 2 * half) bytes of \(size) left out]\n".utf8)
        return readRange(0, half) + marker + readRange(size - half, half)
    }

    // MARK: - Copying the task environment

    /// What `copyTree` does with a symbolic link in the source.
    public enum SymlinkCopy: Sendable {
        /// Recreated as the same link (never followed).
        case recreate
        /// The copy fails, naming it.
        case refuse
    }

    /// Copies the tree under `source` (trusted: part of the benchmark, or operator
    /// configuration) into the existing directory `destination`, giving every copy `owner` so
    /// the sandbox's mapped user can change it. Regular files, directories and symlinks (see
    /// `symlinks`) only; setuid/setgid/sticky bits are dropped. `skip` names top-level entries
    /// left out; `include`, if given, is asked for every entry's path relative to the top
    /// (`a/b/c.json`) and leaves out what it refuses (and, for a directory, all below).
    /// Errors name the entry as `label/relative/path`.
    public static func copyTree(from source: Int32, to destination: Int32, owner: (uid_t, gid_t), skip: Set<String>,
                                include: ((String) -> Bool)? = nil, symlinks: SymlinkCopy = .recreate,
                                label: String = "environment", under prefix: String = "") throws(IOFailure) {
        guard let names = entries(of: source) else {
            throw IOFailure("cannot list", label + (prefix.isEmpty ? "" : "/" + prefix.dropLast()), errno: errno)
        }
        for n in names where !skip.contains(display(n)) {
            let relative = prefix + display(n)
            let path = label + "/" + relative
            if let include, !include(relative) { continue }
            guard let st = entryStatus(at: source, n) else { throw IOFailure("cannot stat", path, errno: errno) }
            let mode = mode_t(st.st_mode) & 0o777
            if isDirectory(st) {
                guard mkdirat(destination, n, 0o700) == 0 else { throw IOFailure("cannot create", path, errno: errno) }
                let s = openDirectory(at: source, n), d = openDirectory(at: destination, n)
                defer {
                    if s >= 0 { close(s) }
                    if d >= 0 { close(d) }
                }
                guard s >= 0, d >= 0 else { throw IOFailure("cannot open", path, errno: errno) }
                try copyTree(from: s, to: d, owner: owner, skip: [], include: include, symlinks: symlinks, label: label,
                             under: relative + "/")
                guard fchown(d, owner.0, owner.1) == 0, fchmod(d, mode) == 0 else { throw IOFailure("cannot chown", path, errno: errno) }
            } else if isRegular(st) {
                try copyFile(from: source, n, to: destination, owner: owner, mode: mode, path: path)
            } else if isSymlink(st), symlinks == .recreate {
                var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let len = readlinkat(source, n, &target, Int(PATH_MAX))
                guard len >= 0 else { throw IOFailure("cannot readlink", path, errno: errno) }
                target[len] = 0
                guard symlinkat(target, destination, n) == 0,
                      fchownat(destination, n, owner.0, owner.1, AT_SYMLINK_NOFOLLOW) == 0 else {
                    throw IOFailure("cannot symlink", path, errno: errno)
                }
            } else {
                throw IOFailure("cannot copy", path, reason: symlinks == .refuse ? "neither a regular file nor a directory"
                                                                          : "not a regular file, directory or symlink")
            }
        }
    }

    /// In a trusted tree on a file system of its own (`dir`, at `path`, which the sandbox sees
    /// at `seenAs`): each symbolic link to one of the tree's own regular files, as the sandbox
    /// would resolve it (relative to the link, or under `seenAs`), becomes a hard link to that
    /// file, so it opens through no link; one to a directory of the tree that does not hold
    /// the link becomes a directory whose files are hard links to that one's (its links copied
    /// as links). Links to anything else stay as they are.
    public static func hardLinkInnerLinks(_ dir: Int32, path: String, seenAs: String) {
        guard let tree = fileStatus(dir) else { return }
        var holding: [ino_t] = [tree.st_ino]
        func walk(_ dir: Int32, _ relative: String) {
            for n in entries(of: dir) ?? [] {
                guard let st = entryStatus(at: dir, n) else { continue }
                let name = display(n)
                if isDirectory(st) {
                    let sub = openDirectory(at: dir, n)
                    guard sub >= 0 else { continue }
                    holding.append(st.st_ino)
                    walk(sub, relative + "/" + name)
                    holding.removeLast()
                    close(sub)
                    continue
                }
                guard isSymlink(st) else { continue }
                var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                let len = readlinkat(dir, n, &target, Int(PATH_MAX))
                guard len > 0 else { continue }
                let text = String(decoding: target[..<len].map { UInt8(bitPattern: $0) }, as: UTF8.self)
                let resolved = text.hasPrefix(seenAs + "/") ? path + text.dropFirst(seenAs.count)
                    : text.hasPrefix("/") ? nil : path + relative + "/" + text
                guard let resolved else { continue }
                let file = open(resolved, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
                guard file >= 0 else { continue }
                defer { close(file) }
                // A file of this tree's own file system, never one elsewhere on the host.
                guard let f = fileStatus(file), f.st_dev == tree.st_dev else { continue }
                if isRegular(f), unlinkat(dir, n, 0) == 0 {
                    _ = linkat(AT_FDCWD, "/proc/self/fd/\(file)", dir, n, AT_SYMLINK_FOLLOW)
                } else if isDirectory(f), !holding.contains(f.st_ino), unlinkat(dir, n, 0) == 0, mkdirat(dir, n, f.st_mode & 0o7777) == 0 {
                    let copy = openDirectory(at: dir, n)
                    if copy >= 0 { linkTree(from: file, to: copy, depth: 0); close(copy) }
                }
            }
        }
        walk(dir, "")
    }

    /// `from`'s tree made again in `to` (same file system): directories made, files hard
    /// linked, links copied as links; at most 32 levels.
    private static func linkTree(from: Int32, to: Int32, depth: Int) {
        guard depth < 32 else { return }
        for n in entries(of: from) ?? [] {
            guard let st = entryStatus(at: from, n) else { continue }
            if isDirectory(st) {
                guard mkdirat(to, n, st.st_mode & 0o7777) == 0 else { continue }
                let (s, d) = (openDirectory(at: from, n), openDirectory(at: to, n))
                if s >= 0, d >= 0 { linkTree(from: s, to: d, depth: depth + 1) }
                if s >= 0 { close(s) }
                if d >= 0 { close(d) }
            } else if isSymlink(st) {
                var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
                if readlinkat(from, n, &target, Int(PATH_MAX)) > 0 { _ = symlinkat(target, to, n) }
            } else if isRegular(st) {
                _ = linkat(from, n, to, n, 0)
            }
        }
    }

    /// Copies the regular file `name` of `source` (never through a symlink) to a new file of
    /// the same name in `destination`, owned by `owner` with `mode` (permission bits only).
    /// `path` names it in errors.
    public static func copyFile(from source: Int32, _ n: Name, to destination: Int32, owner: (uid_t, gid_t), mode: mode_t,
                                path: String? = nil) throws(IOFailure) {
        let path = path ?? display(n)
        // O_NONBLOCK: a FIFO put where a file was expected must not hang the supervisor.
        let s = openat(source, n, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        guard s >= 0 else { throw IOFailure("cannot copy", path, errno: errno) }
        defer { close(s) }
        guard let st = fileStatus(s), isRegular(st) else { throw IOFailure("cannot copy", path, reason: "not a regular file") }
        let d = openat(destination, n, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard d >= 0 else { throw IOFailure("cannot create", path, errno: errno) }
        defer { close(d) }
        try copyContents(s, to: d, limit: nil, path: path)
        guard fchown(d, owner.0, owner.1) == 0, fchmod(d, mode & 0o777) == 0 else { throw IOFailure("cannot chown", path, errno: errno) }
    }

    /// `s`'s bytes to `d`, read to the end; with a `limit`, more than that many is refused
    /// (a file that grew while it was copied).
    static func copyContents(_ s: Int32, to d: Int32, limit: Int64?, path: String) throws(IOFailure) {
        var copied: Int64 = 0
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let r = buffer.withUnsafeMutableBytes { read(s, $0.baseAddress, $0.count) }
            if r < 0 && errno == EINTR { continue }
            guard r >= 0 else { throw IOFailure("cannot read", path, errno: errno) }
            if r == 0 { return }
            copied += Int64(r)
            if let limit, copied > limit { throw IOFailure("cannot copy", path, reason: "grew while it was copied") }
            if let e = Descriptor.writeAll(d, buffer[0..<r]) { throw IOFailure("cannot write", path, errno: e) }
        }
    }

    // MARK: - Removing

    /// Removes `path` and everything under it, without following symlinks and without
    /// holding one fd per level: a hostile tree can be deeper than the fd limit or the
    /// thread's stack allows for a recursive walk. The walk keeps only the current
    /// directory open, remembers each ancestor's device/inode, and climbs back through `..`
    /// only after checking it leads to the directory it came from. Returns the problems met
    /// (empty on success).
    @discardableResult
    public static func removeTree(_ path: String) -> [String] {
        var problems: [String] = []
        let slash = path.lastIndex(of: "/")
        let parentPath = slash.map { $0 == path.startIndex ? "/" : String(path[..<$0]) } ?? "."
        let rootName = name(slash.map { String(path[path.index(after: $0)...]) } ?? path)
        let parent = openDirectory(parentPath)
        guard parent >= 0 else { return errno == ENOENT ? [] : ["open \(parentPath): \(errorText())"] }
        defer { close(parent) }

        struct Frame {
            var device: UInt64
            var inode: UInt64
            var nameInParent: Name
            var pendingDirectories: [Name]
        }
        /// Unlinks every non-directory in `dir` and returns its subdirectories.
        func clear(_ dir: Int32, device: UInt64, label: String) -> [Name] {
            guard let names = entries(of: dir) else {
                problems.append("list \(label): \(errorText())")
                return []
            }
            var subdirectories: [Name] = []
            for n in names {
                guard let st = entryStatus(at: dir, n) else { continue }
                if isDirectory(st) {
                    // A mount point (another filesystem) is never descended into.
                    if UInt64(st.st_dev) == device { subdirectories.append(n) } else { problems.append("\(label)/\(display(n)) is a mount point") }
                } else if unlinkat(dir, n, 0) != 0 {
                    problems.append("unlink \(label)/\(display(n)): \(errorText())")
                }
            }
            return subdirectories
        }

        var current = openDirectory(at: parent, rootName)
        if current < 0 {
            if errno == ENOENT { return [] }
            if errno == ENOTDIR || errno == ELOOP {
                if unlinkat(parent, rootName, 0) != 0 { problems.append("unlink \(path): \(errorText())") }
                return problems
            }
            return ["open \(path): \(errorText())"]
        }
        guard let rootStat = fileStatus(current) else {
            close(current)
            return ["stat \(path): \(errorText())"]
        }
        let device = UInt64(rootStat.st_dev)
        var frames = [Frame(device: device, inode: UInt64(rootStat.st_ino), nameInParent: rootName,
                            pendingDirectories: clear(current, device: device, label: path))]
        while !frames.isEmpty {
            if let next = frames[frames.count - 1].pendingDirectories.popLast() {
                let child = openDirectory(at: current, next)
                guard child >= 0 else {
                    // Swapped for a non-directory since the listing: just unlink it.
                    if errno == ENOTDIR || errno == ELOOP { _ = unlinkat(current, next, 0) } else {
                        problems.append("open \(display(next)): \(errorText())")
                    }
                    continue
                }
                guard let st = fileStatus(child), UInt64(st.st_dev) == device else {
                    close(child)
                    problems.append("\(display(next)) changed filesystem while being removed")
                    continue
                }
                close(current)
                current = child
                frames.append(Frame(device: device, inode: UInt64(st.st_ino), nameInParent: next,
                                    pendingDirectories: clear(child, device: device, label: display(next))))
                continue
            }
            let done = frames.removeLast()
            if frames.isEmpty {
                close(current)
                if unlinkat(parent, done.nameInParent, AT_REMOVEDIR) != 0 { problems.append("rmdir \(path): \(errorText())") }
                break
            }
            let up = openat(current, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            let expected = frames[frames.count - 1]
            guard up >= 0, let st = fileStatus(up), UInt64(st.st_dev) == expected.device, UInt64(st.st_ino) == expected.inode else {
                if up >= 0 { close(up) }
                close(current)
                problems.append("\(path): a directory moved during removal; stopped")
                return problems
            }
            close(current)
            current = up
            if unlinkat(current, done.nameInParent, AT_REMOVEDIR) != 0 {
                problems.append("rmdir \(display(done.nameInParent)): \(errorText())")
            }
        }
        return problems
    }
}
