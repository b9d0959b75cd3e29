import CSystemCalls

/// Standard input for a payload that is given nothing to read.
public enum PayloadInput {
    /// The read end of a pipe whose write end is already closed: reads see end of file at once,
    /// as from /dev/null, and the pipe is this sandbox's alone (close-on-exec; -1 with errno if
    /// it cannot be made).
    ///
    /// Never the host's /dev/null: a process may set the times of any file it can write to
    /// "now" through a descriptor (`futimens(0, NULL)` needs write permission, not ownership,
    /// and /dev/null is mode 0666), and a descriptor opened on the host's writable /dev is not
    /// subject to the sandbox's read-only mounts. Every later sandbox's /dev/null is that same
    /// inode, whose times it can read: a held-out task could leave a mark there, to the
    /// nanosecond, for the next train run or the coding agent to read.
    public static func empty() -> Int32 { ahs_empty_input() }
}
