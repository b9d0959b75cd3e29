import Glibc

/// How a sandboxed command ended.
public struct SandboxResult: Sendable {
    public enum Termination: Sendable, Equatable {
        case exited(Int32)
        case signaled(Int32)
        /// `limits.timeout` expired; the whole tree was killed.
        case timedOut
        /// A setup stage failed; `message` reads like `mount /proc: Operation not permitted`.
        case setupFailed(message: String, errno: Int32)
        /// execve failed (ENOENT → 127, anything else → 126).
        case execFailed(errno: Int32)
    }

    public var sandboxID: String
    public var termination: Termination
    /// The command's exit status by the conventions of `timeout(1)`/`env(1)`: its own code,
    /// 128+N for signal N, 124 timeout, 125 setup failure, 126 not executable, 127 not found.
    public var exitCode: Int32 {
        switch termination {
        case .exited(let c): return c
        case .signaled(let s): return 128 + s
        case .timedOut: return 124
        case .setupFailed: return 125
        case .execFailed(let e): return e == ENOENT || e == ENOTDIR ? 127 : 126
        }
    }
    /// Refusals recorded for this sandbox.
    public var violations: [AuditEvent]
    public var memoryLimitHit: Bool
    public var pidsLimitHit: Bool
    public var enforcement: [LimitEnforcement]
    /// Anything the supervisor could not clean up (cgroup paths). Empty on success.
    public var leftovers: [String]
    /// The monitor was created inside its cgroup v2 directory by clone3(CLONE_INTO_CGROUP)
    /// rather than joining it as its first act after a fork.
    public var bornInCgroup = false
    /// The payload's pid as the supervisor sees it, where `RunOptions.findPayloadPID` asked
    /// for it and it was found; nil otherwise.
    public var payloadPID: Int32?
}
