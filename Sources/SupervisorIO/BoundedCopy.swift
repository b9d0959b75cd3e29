import CSystemCalls
import Glibc

/// Copying a tree an untrusted process wrote and may still be changing (a runner's working
/// directory for a shell tool call), within a budget: regular files and directories only,
/// never through a link, never off the source's file system, at most `maxDepth` levels,
/// `maxEntries` entries and `maxBytes` bytes (a file's size counts whole, so a sparse file costs
/// what its copy would), each file read no further than the budget left. Errors name the entry
/// by its path under the top.
public struct CopyBudget: Sendable {
    public var maxDepth = 32
    public var maxEntries = 20_000
    public var maxBytes: Int64 = 256 << 20
    public init() {}
}

extension FileSystem {
    /// The directory `path` (relative, `/`-separated bytes, no NUL) opened beneath `dir`: no
    /// component a link, `..` or a mount crossing (openat2's RESOLVE_BENEATH,
    /// RESOLVE_NO_SYMLINKS, RESOLVE_NO_XDEV). -1 and errno on failure.
    public static func openDirectory(beneath dir: Int32, _ path: [UInt8]) -> Int32 {
        guard !path.contains(0) else {
            errno = EINVAL
            return -1
        }
        let p = path.isEmpty ? Array(".".utf8) : path
        return (p.map { CChar(bitPattern: $0) } + [0]).withUnsafeBufferPointer { ahs_open_directory_beneath(dir, $0.baseAddress) }
    }

    /// Copies the tree under `source` into the empty directory `destination` within `budget`,
    /// every copy owned by `owner` (see `CopyBudget`).
    public static func copyUntrustedTree(from source: Int32, to destination: Int32, owner: (uid_t, gid_t), budget: CopyBudget,
                                         label: String) throws(IOFailure) {
        guard let top = fileStatus(source) else { throw IOFailure("cannot stat", label, errno: errno) }
        var entries = 0
        var bytes: Int64 = 0
        try copyLevel(source, destination, device: top.st_dev, owner: owner, budget: budget, depth: 0, path: label,
                      entries: &entries, bytes: &bytes)
    }

    private static func copyLevel(_ source: Int32, _ destination: Int32, device: dev_t, owner: (uid_t, gid_t), budget: CopyBudget,
                                  depth: Int, path: String, entries: inout Int, bytes: inout Int64) throws(IOFailure) {
        guard depth < budget.maxDepth else { throw IOFailure("cannot copy", path, reason: "deeper than \(budget.maxDepth) directories") }
        // Read no further than the budget allows: a directory of 200,000 names costs no more
        // than one of `maxEntries`.
        let room = max(0, budget.maxEntries - entries)
        guard let (names, total) = FileSystem.entries(of: source, keeping: room, stoppingPast: room, where: { _ in true }) else {
            throw IOFailure("cannot list", path, errno: errno)
        }
        guard total <= room else { throw IOFailure("cannot copy", path, reason: "more than \(budget.maxEntries) entries") }
        for n in names {
            let here = path + "/" + display(n)
            entries += 1
            guard entries <= budget.maxEntries else { throw IOFailure("cannot copy", here, reason: "more than \(budget.maxEntries) entries") }
            guard let st = entryStatus(at: source, n) else { throw IOFailure("cannot stat", here, errno: errno) }
            guard st.st_dev == device else { throw IOFailure("cannot copy", here, reason: "on another file system") }
            if isDirectory(st) {
                let s = openDirectory(at: source, n)
                guard s >= 0 else { throw IOFailure("cannot open", here, errno: errno) }
                defer { close(s) }
                guard let opened = fileStatus(s), opened.st_dev == device, opened.st_ino == st.st_ino else {
                    throw IOFailure("cannot copy", here, reason: "changed while it was copied")
                }
                guard mkdirat(destination, n, 0o700) == 0 else { throw IOFailure("cannot create", here, errno: errno) }
                let d = openDirectory(at: destination, n)
                guard d >= 0 else { throw IOFailure("cannot open", here, errno: errno) }
                defer { close(d) }
                try copyLevel(s, d, device: device, owner: owner, budget: budget, depth: depth + 1, path: here, entries: &entries, bytes: &bytes)
                guard fchown(d, owner.0, owner.1) == 0, fchmod(d, mode_t(st.st_mode) & 0o755) == 0 else { throw IOFailure("cannot chown", here, errno: errno) }
            } else if isRegular(st) {
                bytes += Int64(st.st_size)
                guard bytes <= budget.maxBytes else { throw IOFailure("cannot copy", here, reason: "more than \(budget.maxBytes >> 20) MiB in all") }
                try copyBoundedFile(source, n, to: destination, owner: owner, device: device, limit: Int64(st.st_size), path: here)
            } else {
                throw IOFailure("cannot copy", here, reason: "neither a regular file nor a directory")
            }
        }
    }

    /// One regular file, at most `limit` bytes of it (a file that grew since its size was
    /// counted is refused).
    private static func copyBoundedFile(_ source: Int32, _ n: Name, to destination: Int32, owner: (uid_t, gid_t), device: dev_t, limit: Int64,
                                        path: String) throws(IOFailure) {
        // O_NONBLOCK: a FIFO swapped in for the file must not hang the caller.
        let s = openat(source, n, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)
        guard s >= 0 else { throw IOFailure("cannot copy", path, errno: errno) }
        defer { close(s) }
        guard let st = fileStatus(s), isRegular(st), st.st_dev == device else { throw IOFailure("cannot copy", path, reason: "not a regular file here") }
        let d = openat(destination, n, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard d >= 0 else { throw IOFailure("cannot create", path, errno: errno) }
        defer { close(d) }
        try copyContents(s, to: d, limit: limit, path: path)
        guard fchown(d, owner.0, owner.1) == 0, fchmod(d, mode_t(st.st_mode) & 0o755) == 0 else { throw IOFailure("cannot chown", path, errno: errno) }
    }
}
