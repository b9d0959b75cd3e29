import Foundation
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
    /// - Throws: ``LedgerError`` `.io`. Failures before the rename leave `path` untouched and
    ///   no temporary file; a failure to sync the directory after the rename means the new
    ///   content is in place but might not survive a power cut.
    public static func write(_ bytes: [UInt8], to path: String, mode: mode_t = 0o644) throws(LedgerError) {
        let (directory, name) = POSIX.split(path)
        guard !name.isEmpty, name != ".", name != ".." else {
            throw LedgerError(.io, "cannot write \(path): not a file path")
        }

        var temporary = ""
        var fd: Int32 = -1
        // O_EXCL with a random name: never reuse (or follow) a file someone else prepared.
        for _ in 0..<16 {
            temporary = "\(directory)/.\(name).tmp-\(getpid())-\(String(UInt64.random(in: .min ... .max), radix: 36))"
            do {
                fd = try POSIX.open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, mode: mode)
                break
            } catch where error.errno == EEXIST {
                continue
            } catch {
                throw LedgerError(.io, "cannot write \(path) (a temporary file next to it)", errno: error.errno)
            }
        }
        guard fd >= 0 else { throw LedgerError(.io, "cannot create a temporary file next to \(path)", errno: EEXIST) }

        var renamed = false
        defer { if !renamed { POSIX.unlink(temporary) } }
        do {
            // Errors name the file being replaced: the temporary name means nothing to a reader.
            try POSIX.fchmod(fd, mode, path)
            try POSIX.pwriteAll(fd, bytes, at: 0, path)
            try POSIX.fsync(fd, path)
        } catch {
            POSIX.close(fd)
            throw error
        }
        POSIX.close(fd)

        try POSIX.rename(temporary, path)
        renamed = true

        let dirfd = try POSIX.open(directory, O_RDONLY | O_DIRECTORY)
        defer { POSIX.close(dirfd) }
        try POSIX.fsync(dirfd, directory)
    }

    /// The pid in `name` if it is a temporary file of `write` (`.NAME.tmp-PID-RANDOM`, RANDOM
    /// in base 36), else nil.
    public static func temporaryOwner(_ name: String) -> pid_t? {
        guard name.hasPrefix("."), let mark = name.range(of: ".tmp-", options: .backwards), mark.lowerBound > name.index(after: name.startIndex) else { return nil }
        let f = name[mark.upperBound...].split(separator: "-", omittingEmptySubsequences: false)
        guard f.count == 2, let pid = pid_t(f[0]), pid > 0, !f[1].isEmpty,
              f[1].allSatisfy({ ("0"..."9").contains($0) || ("a"..."z").contains($0) }) else { return nil }
        return pid
    }

    /// Removes the temporary files that writers killed before their rename left in
    /// `directory` (those of this process excepted), and returns their names. Only for a
    /// directory whose writers the caller has excluded (it holds the lock they take): the pid
    /// in a name does not say whether that writer still runs.
    public static func removeTemporaries(in directory: String) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        var removed: [String] = []
        for name in names.sorted() {
            guard let pid = temporaryOwner(name), pid != getpid() else { continue }
            var st = stat()
            // Never a directory or a link someone put there under such a name.
            guard lstat(directory + "/" + name, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
            if unlink(directory + "/" + name) == 0 { removed.append(name) }
        }
        return removed
    }

    /// Atomically replaces `path` with `data`; see the `[UInt8]` overload.
    public static func write(_ data: Data, to path: String, mode: mode_t = 0o644) throws(LedgerError) {
        try write([UInt8](data), to: path, mode: mode)
    }

    /// Atomically replaces `path` with the UTF-8 bytes of `text`.
    public static func write(_ text: String, to path: String, mode: mode_t = 0o644) throws(LedgerError) {
        try write(Array(text.utf8), to: path, mode: mode)
    }
}
