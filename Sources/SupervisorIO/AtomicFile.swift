import Glibc

/// Replaces a file so that a reader sees the old content or the new, never a mix, and a
/// crash leaves one of the two: write a temporary file in the same directory (rename is only
/// atomic within a file system), fsync it, rename it over the target, fsync the directory (so
/// the rename itself survives a power cut).
///
/// The views the agent reads (results.tsv, suite.json, train_results.json) are written this
/// way: a half-written suite.json must never be what a gate or an agent reads. If `path` is a
/// symbolic link, the link itself is replaced, never the file it points at. A crash between
/// creating and renaming the temporary file can leave a `.NAME.tmp-PID-RANDOM` file behind;
/// it is never read, and `removeTemporaries` removes it.
public enum AtomicFile {
    /// Atomically replaces `path` with `bytes`, created with exactly `mode` (the umask does
    /// not apply).
    ///
    /// - Throws: ``IOFailure`` naming `path`. Failures before the rename leave `path`
    ///   untouched and no temporary file; a failure to sync the directory after the rename
    ///   means the new content is in place but might not survive a power cut.
    public static func write(_ bytes: [UInt8], to path: String, mode: mode_t = 0o644) throws(IOFailure) {
        let (directory, name) = POSIX.split(path)
        let dir = try POSIX.open(directory, O_RDONLY | O_DIRECTORY)
        defer { POSIX.close(dir) }
        try write(bytes, in: dir, name: name, mode: mode, owner: nil, path: path)
    }

    /// Atomically replaces entry `name` of the directory `dir` (which a sandbox may write:
    /// nothing here follows a link, and whatever `name` was is replaced, never written
    /// through), created with `mode` and, if given, `owner`. `path` names the file in errors.
    public static func write(_ bytes: [UInt8], in dir: Int32, name: String, mode: mode_t, owner: (uid_t, gid_t)?,
                             path: String) throws(IOFailure) {
        guard !name.isEmpty, name != ".", name != "..", !name.contains("/") else {
            throw IOFailure("cannot write (not a file name)", path, errno: EINVAL)
        }
        var temporary = ""
        var fd: Int32 = -1
        // O_EXCL with a random name: never reuse (or follow) a file someone else prepared.
        for _ in 0..<16 {
            temporary = ".\(name).tmp-\(getpid())-\(String(UInt64.random(in: .min ... .max), radix: 36))"
            repeat { fd = openat(dir, temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode) } while fd < 0 && errno == EINTR
            if fd >= 0 || errno != EEXIST { break }
        }
        // Errors name the file being replaced: the temporary name means nothing to a reader.
        guard fd >= 0 else { throw IOFailure("cannot write", path + " (a temporary file next to it)", errno: errno) }
        var renamed = false
        defer { if !renamed { _ = unlinkat(dir, temporary, 0) } }
        do throws(IOFailure) {
            if let owner, fchown(fd, owner.0, owner.1) != 0 { throw IOFailure("cannot chown", path, errno: errno) }
            try POSIX.fchmod(fd, mode, path)
            try POSIX.pwriteAll(fd, bytes, at: 0, path)
            try POSIX.fsync(fd, path)
        } catch {
            POSIX.close(fd)
            throw error
        }
        POSIX.close(fd)
        guard renameat(dir, temporary, dir, name) == 0 else { throw IOFailure("cannot rename a temporary file to", path, errno: errno) }
        renamed = true
        try POSIX.fsync(dir, POSIX.split(path).directory)
    }

    /// The pid in `name` if it is a temporary file of `write` (`.NAME.tmp-PID-RANDOM`, RANDOM
    /// in base 36), else nil.
    public static func temporaryOwner(_ name: String) -> pid_t? {
        guard name.hasPrefix("."), let mark = lastRange(of: ".tmp-", in: name), mark.lowerBound > name.index(after: name.startIndex) else { return nil }
        let f = name[mark.upperBound...].split(separator: "-", omittingEmptySubsequences: false)
        guard f.count == 2, let pid = pid_t(f[0]), pid > 0, !f[1].isEmpty,
              f[1].allSatisfy({ ("0"..."9").contains($0) || ("a"..."z").contains($0) }) else { return nil }
        return pid
    }

    private static func lastRange(of needle: String, in s: String) -> Range<String.Index>? {
        var i = s.endIndex
        while i > s.startIndex {
            i = s.index(before: i)
            if s[i...].hasPrefix(needle) { return i..<s.index(i, offsetBy: needle.count) }
        }
        return nil
    }

    /// Removes the temporary files that writers killed before their rename left in
    /// `directory` (those of this process excepted), and returns their names. Only for a
    /// directory whose writers the caller has excluded (it holds the lock they take): the pid
    /// in a name does not say whether that writer still runs.
    public static func removeTemporaries(in directory: String) -> [String] {
        let dir = FileSystem.openDirectory(directory)
        guard dir >= 0 else { return [] }
        defer { close(dir) }
        var removed: [String] = []
        for n in FileSystem.entries(of: dir) ?? [] {
            let name = FileSystem.display(n)
            guard let pid = temporaryOwner(name), pid != getpid() else { continue }
            // Never a directory or a link someone put there under such a name.
            guard let st = FileSystem.entryStatus(at: dir, n), FileSystem.isRegular(st) else { continue }
            if unlinkat(dir, n, 0) == 0 { removed.append(name) }
        }
        return removed.sorted()
    }

    /// Atomically replaces `path` with the UTF-8 bytes of `text`.
    public static func write(_ text: String, to path: String, mode: mode_t = 0o644) throws(IOFailure) {
        try write(Array(text.utf8), to: path, mode: mode)
    }
}
