import Glibc
import SupervisorIO

/// Why a copy-back refused agent.py (recorded as a violation).
package struct CopyBackRefusal: Error {
    package var reason: String
    /// Set when a system call failed (EIO, say) rather than the file being unacceptable.
    package var errno: Int32?
    init(_ reason: String, errno: Int32? = nil) {
        self.reason = reason
        self.errno = errno
    }
}

/// Reading and writing `agent.py` inside a directory someone else may control.
///
/// Every access goes through a descriptor of the directory and `*at` calls with
/// `O_NOFOLLOW`, so a symlink planted as `agent.py` (or swapped in between two calls) is
/// refused rather than followed, and a FIFO cannot block the supervisor (`O_NONBLOCK`).
package enum AgentFile {
    package static let name = "agent.py"
    package static let maxBytes = 1 << 20

    package static func read(directoryFD dir: Int32, maxBytes: Int) -> Result<[UInt8], CopyBackRefusal> {
        switch InputFile.read(at: dir, name, cap: maxBytes, strict: true) {
        case .success(let bytes): return .success(bytes)
        case .failure(.missing): return .failure(CopyBackRefusal("does not exist"))
        case .failure(.symlink): return .failure(CopyBackRefusal("is a symbolic link, which is never followed"))
        case .failure(.notRegular): return .failure(CopyBackRefusal("is not a regular file"))
        case .failure(.hardLinked(let n)): return .failure(CopyBackRefusal("has \(n) hard links; a copy-back takes only a file with one"))
        case .failure(.tooLarge(let size, let cap)): return .failure(CopyBackRefusal("is \(size) bytes, more than the \(cap)-byte limit"))
        case .failure(.failed(let e)): return .failure(CopyBackRefusal(String(cString: strerror(e)), errno: e))
        }
    }

    /// Replaces `agent.py` in the directory atomically (`AtomicFile`: a fresh temporary name
    /// created with O_EXCL|O_NOFOLLOW, fsync, then renameat over the old entry, whatever it
    /// was). `directory` names the directory in errors.
    package static func write(_ bytes: [UInt8], directoryFD dir: Int32, owner: (uid_t, gid_t)?, directory: String) throws {
        do throws(IOFailure) {
            try AtomicFile.write(bytes, in: dir, name: name, mode: 0o644, owner: owner, path: "\(directory)/\(name)")
        } catch {
            throw ExperimentError(.io, path: error)
        }
    }
}
