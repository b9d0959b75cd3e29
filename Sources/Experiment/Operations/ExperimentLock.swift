import ExperimentModel
import Foundation
import Glibc
import Ledger
import SupervisorIO

/// Makes sure one autoharness at a time works on an experiment: two supervisors appending
/// to one ledger would each be consistent, but their git commits, views and gate decisions
/// would interleave.
///
/// It is an exclusive, non-blocking `flock` on a file. The kernel drops the lock when the
/// holder exits however it exits (kill -9 included), so there is never a stale lock to clean
/// up by hand; the file's *contents* only say who holds it (pid, purpose, since when) for the
/// error message of whoever is refused. The file is never deleted: unlinking a lock file lets
/// two processes lock two different inodes under one name.
public final class ExperimentLock: @unchecked Sendable {
    /// Who holds a lock, as written in the lock file.
    public struct Holder: Codable, Sendable, Equatable {
        public var pid: Int32
        public var purpose: String
        /// ``Timestamp`` text.
        public var since: String
    }

    public let path: String
    /// What this lock wrote into the file.
    public let holder: Holder

    private let mutex = NSLock()
    private var fd: Int32 // -1 once released; guarded by `mutex`

    /// Takes the lock or fails at once.
    ///
    /// - Parameters:
    ///   - path: The lock file (created 0600 if missing; a symbolic link is refused).
    ///   - purpose: What this process is doing ("run", "gate", …), shown to anyone refused.
    /// - Throws: ``ExperimentError`` `.locked` naming the holder's pid, purpose and start time
    ///   when another process (or another `ExperimentLock` in this one) holds it; `.io` otherwise.
    public init(path: String, purpose: String) throws(ExperimentError) {
        self.path = path
        let fd: Int32
        do throws(IOFailure) { fd = try POSIX.open(path, O_RDWR | O_CREAT | O_NOFOLLOW, mode: 0o600) } catch { throw ExperimentError(error) }
        let patience = monotonicNow() + 1
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            if code == EINTR { continue }
            if code == EWOULDBLOCK {
                let holder = Self.readHolder(fd, path)
                // A lock released a moment ago (its record emptied first) stays held while a
                // child some thread of the releasing process is starting still has a copy of
                // its descriptor, between that child's fork and its exec (which closes it):
                // seen under load, with a second supervisor in the same process. A holder
                // that says who it is is refused at once.
                if holder == nil && monotonicNow() < patience {
                    usleep(10_000)
                    continue
                }
                POSIX.close(fd)
                throw ExperimentError(.locked, Self.refusal(path: path, holder: holder))
            }
            POSIX.close(fd)
            throw ExperimentError(IOFailure("cannot lock", path, errno: code))
        }
        holder = Holder(pid: getpid(), purpose: purpose, since: Timestamp.format(Date()))
        do throws(IOFailure) {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys]
            var text = (try? encoder.encode(holder)) ?? Data()
            text.append(UInt8(ascii: "\n"))
            try POSIX.ftruncate(fd, 0, path)
            try POSIX.pwriteAll(fd, [UInt8](text), at: 0, path)
        } catch {
            POSIX.close(fd)
            throw ExperimentError(error)
        }
        self.fd = fd
    }

    /// Releases the lock (also done on deinit). Idempotent. The holder text is erased first,
    /// so a later reader never sees a pid that no longer holds the lock.
    public func release() {
        mutex.lock()
        defer { mutex.unlock() }
        guard fd >= 0 else { return }
        _ = Glibc.ftruncate(fd, 0)
        POSIX.close(fd) // closing the last descriptor of the open file drops the flock
        fd = -1
    }

    deinit { release() }

    /// Reads who holds the lock. The holder writes its details just after locking, so a
    /// contender can catch the file empty or half-written: retry briefly before giving up.
    private static func readHolder(_ fd: Int32, _ path: String) -> Holder? {
        for attempt in 0..<5 {
            if let bytes = try? POSIX.pread(fd, limit: 4096, path),
               let holder = try? JSONDecoder().decode(Holder.self, from: Data(bytes)) {
                return holder
            }
            if attempt < 4 { usleep(20_000) }
        }
        return nil
    }

    private static func refusal(path: String, holder: Holder?) -> String {
        guard let holder else {
            return "another process holds the experiment lock \(path) (it has not said who it is; see `fuser \(path)`)"
        }
        return "another autoharness (pid \(holder.pid), purpose \"\(holder.purpose)\", since \(holder.since)) holds the experiment lock \(path)"
    }
}
