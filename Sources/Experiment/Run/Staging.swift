import Foundation
import Sandbox
import Glibc
import SandboxPolicy

/// Reading and writing `agent.py` inside a directory someone else may control.
///
/// Every access goes through a descriptor of the directory and `*at` calls with
/// `O_NOFOLLOW`, so a symlink planted as `agent.py` (or swapped in between two calls) is
/// refused rather than followed, and a FIFO cannot block the supervisor (`O_NONBLOCK`).
/// Why a copy-back refused agent.py (recorded as a violation).
struct CopyBackRefusal: Error {
    var reason: String
    /// Set when a system call failed (EIO, say) rather than the file being unacceptable.
    var errno: Int32?
    init(_ reason: String, errno: Int32? = nil) {
        self.reason = reason
        self.errno = errno
    }
}

enum AgentFile {
    static let name = "agent.py"
    static let maxBytes = 1 << 20

    static func read(directoryFD dir: Int32, maxBytes: Int) -> Result<[UInt8], CopyBackRefusal> {
        let fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else {
            switch errno {
            case ELOOP: return .failure(CopyBackRefusal("is a symbolic link, which is never followed"))
            case ENOENT: return .failure(CopyBackRefusal("does not exist"))
            default: return .failure(CopyBackRefusal(String(cString: strerror(errno)), errno: errno))
            }
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { return .failure(CopyBackRefusal(String(cString: strerror(errno)), errno: errno)) }
        guard (st.st_mode & S_IFMT) == S_IFREG else { return .failure(CopyBackRefusal("is not a regular file")) }
        guard st.st_nlink == 1 else { return .failure(CopyBackRefusal("has \(st.st_nlink) hard links; a copy-back takes only a file with one")) }
        guard st.st_size <= maxBytes else { return .failure(CopyBackRefusal("is \(st.st_size) bytes, more than the \(maxBytes)-byte limit")) }
        // Read one byte past the limit: the size may have changed since fstat.
        var bytes = [UInt8](repeating: 0, count: maxBytes + 1)
        var total = 0
        while total < bytes.count {
            let n = bytes.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + total, $0.count - total) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { return .failure(CopyBackRefusal(String(cString: strerror(errno)), errno: errno)) }
            if n == 0 { break }
            total += n
        }
        guard total <= maxBytes else { return .failure(CopyBackRefusal("grew past the \(maxBytes)-byte limit while being read")) }
        return .success(Array(bytes[0..<total]))
    }

    /// Replaces `agent.py` in the directory atomically: a fresh temporary name created with
    /// O_EXCL|O_NOFOLLOW, fsync, then renameat over the old entry (whatever it was).
    /// `directory` names the directory in errors.
    static func write(_ bytes: [UInt8], directoryFD dir: Int32, owner: (uid_t, gid_t)?, directory: String) throws {
        let tmp = ".agent.py.autoharness-\(getpid())"
        _ = unlinkat(dir, tmp, 0)
        let fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw ExperimentError(.io, "\(directory)/\(name): \(ErrnoName.describe(errno))") }
        var failure: Int32?
        var off = 0
        while off < bytes.count && failure == nil {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + off, $0.count - off) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { failure = n < 0 ? errno : ENOSPC } else { off += n }
        }
        if failure == nil, let owner, fchown(fd, owner.0, owner.1) != 0 { failure = errno }
        if failure == nil, fchmod(fd, 0o644) != 0 || fsync(fd) != 0 { failure = errno }
        close(fd)
        if failure == nil, renameat(dir, tmp, dir, name) != 0 { failure = errno }
        if let failure {
            _ = unlinkat(dir, tmp, 0)
            throw ExperimentError(.io, "\(directory)/\(name): \(ErrnoName.describe(failure))")
        }
    }
}

/// The coding agent's writable copy of `agent/`, and what the supervisor takes from it.
///
/// The agent may create, rename and delete freely in here (editors save by rename); the
/// supervisor takes `agent.py` only, read through `AgentFile`, and reports every other
/// entry as a violation without reading it.
struct Staging {
    let path: String
    let owner: (uid_t, gid_t)

    /// Creates the directory (owned by the sandbox user) holding a copy of `source`.
    static func create(at path: String, from source: [UInt8], owner: (uid_t, gid_t)) throws -> Staging {
        try removeTree(path)
        guard mkdir(path, 0o755) == 0, chown(path, owner.0, owner.1) == 0 else {
            throw ExperimentError(.io, "\(path): \(String(cString: strerror(errno)))")
        }
        let s = Staging(path: path, owner: owner)
        try s.replaceAgent(with: source)
        return s
    }

    func withDirectory<T>(_ body: (Int32) throws -> T) throws -> T {
        let dir = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard dir >= 0 else { throw ExperimentError(.io, "staging \(path): \(String(cString: strerror(errno)))") }
        defer { close(dir) }
        return try body(dir)
    }

    /// The agent.py a request will judge, or why it cannot be taken.
    func takeAgent() throws -> Result<[UInt8], CopyBackRefusal> {
        try withDirectory { AgentFile.read(directoryFD: $0, maxBytes: AgentFile.maxBytes) }
    }

    /// Puts `bytes` back as the staging agent.py (after a rejected gate, `on_reject: revert`).
    func replaceAgent(with bytes: [UInt8]) throws {
        try withDirectory { try AgentFile.write(bytes, directoryFD: $0, owner: owner, directory: path) }
    }

    /// What an entry of staging other than agent.py is, for the record. None is ever taken.
    enum Extra: Equatable {
        /// Python's `__pycache__`, editors' swap and backup files: not worth a word.
        case routine
        /// Anything else: dropped, with a notice in the broker's reply.
        case dropped
        /// What would change imports if it were taken (`*.pth`, sitecustomize/usercustomize,
        /// a package): recorded as a violation.
        case importHook
    }

    static func classify(_ name: String, isPackage: Bool) -> Extra {
        if name == "__pycache__" || name.hasSuffix("~") || name.hasPrefix(".#")
            || (name.hasPrefix(".") && [".swp", ".swo", ".swx"].contains { name.hasSuffix($0) }) { return .routine }
        if isPackage || name.hasSuffix(".pth") || ["sitecustomize.py", "usercustomize.py"].contains(name) { return .importHook }
        return .dropped
    }

    /// Entries other than agent.py with their class (names as listed; nothing is followed: a
    /// package is a real directory holding an `__init__.py` entry): at most `limit` names,
    /// and how many there are in all.
    func extraEntries(limit: Int = .max) throws -> (entries: [(name: String, kind: Extra)], total: Int) {
        try withDirectory { dir in
            let fd = dup(dir)
            guard fd >= 0, let d = fdopendir(fd) else { throw ExperimentError(.io, "staging \(path): \(String(cString: strerror(errno)))") }
            defer { closedir(d) }
            var entries: [(name: String, kind: Extra)] = []
            var total = 0
            while let e = readdir(d) {
                let name = DirectoryEntry.name(e)
                guard name != "." && name != ".." && name != AgentFile.name else { continue }
                total += 1
                guard entries.count < limit else { continue }
                var isPackage = false
                if DirectoryEntry.type(e) == UInt8(DT_DIR) {
                    let sub = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                    if sub >= 0 {
                        var st = stat()
                        isPackage = fstatat(sub, "__init__.py", &st, AT_SYMLINK_NOFOLLOW) == 0
                        close(sub)
                    }
                }
                entries.append((name, Self.classify(name, isPackage: isPackage)))
            }
            return (entries.sorted { $0.name < $1.name }, total)
        }
    }
}

/// Removes a tree the sandbox user may have built (arbitrarily deep, any names): `rm -rf
/// --one-file-system`, which walks with directory descriptors and never follows links.
func removeTree(_ path: String) throws {
    var st = stat()
    guard lstat(path, &st) == 0 else { return }
    let p = Process()
    p.executableURL = URL(fileURLWithPath: "/bin/rm")
    p.arguments = ["-rf", "--one-file-system", "--", path]
    try p.run()
    p.waitUntilExit()
    guard p.terminationStatus == 0, lstat(path, &st) != 0 else {
        throw ExperimentError(.io, "could not remove \(path) (rm exit \(p.terminationStatus))")
    }
}
