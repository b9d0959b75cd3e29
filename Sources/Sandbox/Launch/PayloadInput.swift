import CSystemCalls
import Glibc

/// Standard input for a payload that is given nothing to read.
public enum PayloadInput {
    /// /dev/null, opened afresh through a read-only clone of its mount: close-on-exec, or -1
    /// with errno. (Cloning a mount read-only needs what building any sandbox needs,
    /// `open_tree` and `mount_setattr`; a kernel without them runs no sandbox at all.)
    ///
    /// Never the host's /dev/null as opened on the host's `/dev`: a process may set the times
    /// of any file it can write to "now" through a descriptor (`futimens(0, NULL)` needs write
    /// permission, not ownership, and /dev/null is mode 0666), and a descriptor of the host's
    /// writable mount is not subject to the sandbox's read-only ones. Every later sandbox's
    /// /dev/null is that same inode, whose times it can read: a held-out task could leave a
    /// mark there, to the nanosecond, for the next train run or the coding agent. Through a
    /// read-only mount the same call fails (EROFS). Still /dev/null, not a pipe: programs
    /// treat their stdin by its type (Node reads a pipe with `preadv2(RWF_NOWAIT)`, which the
    /// sandboxes refuse as a page-cache oracle).
    public static func empty() -> Int32 {
        guard readOnlyNull.fd >= 0 else {
            errno = readOnlyNull.errno
            return -1
        }
        let mount = readOnlyNull.fd
        // A new open file description each time: one shared by two sandboxes would carry flags
        // (O_NONBLOCK, O_APPEND set with fcntl) from one to the other.
        return open("/proc/self/fd/\(mount)", O_RDONLY | O_CLOEXEC)
    }

    /// The clone's descriptor, or -1 and why it could not be made.
    private static let readOnlyNull: (fd: Int32, errno: Int32) = {
        let fd = ahs_readonly_clone("/dev/null")
        return (fd, fd >= 0 ? 0 : errno)
    }()
}
