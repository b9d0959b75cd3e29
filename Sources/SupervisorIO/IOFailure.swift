// SupervisorIO: the one place the supervisor opens, reads, writes, copies or removes files —
// above all anything a sandbox could have written (task trees, traces, the coding agent's
// staging copy and home). Every call here works relative to directory descriptors where a
// sandbox could have planted a link, never follows a symlink it did not choose to, caps what
// it reads, opens close-on-exec, and fails with the path and the errno.

import Glibc

/// A system call on a file failed: what was being done, to which path, and the errno.
public struct IOFailure: Error, CustomStringConvertible, Sendable, Equatable {
    /// What was being done, e.g. `cannot write`, `cannot open`.
    public var action: String
    public var path: String
    /// The failing call's errno; 0 when no call failed but the file was refused (`reason`).
    public var errno: Int32
    /// Why a file was refused (`not a regular file`), where no errno says it.
    public var reason: String?

    public init(_ action: String, _ path: String, errno: Int32) {
        self.action = action
        self.path = path
        self.errno = errno
    }

    public init(_ action: String, _ path: String, reason: String) {
        self.init(action, path, errno: 0)
        self.reason = reason
    }

    /// `cannot write /x/y` (the errno not included).
    public var message: String { "\(action) \(path)" }

    /// `cannot write /x/y: No space left on device (ENOSPC)`.
    public var description: String { "\(message): \(reason ?? ErrnoName.describe(errno))" }
}
