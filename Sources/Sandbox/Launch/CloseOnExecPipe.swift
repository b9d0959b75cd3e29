import CSystemCalls

/// A pipe whose two ends are close-on-exec from the moment they exist (pipe2): no sandbox
/// launched at that moment by another thread inherits either end. Nil with errno set.
public func closeOnExecPipe() -> (read: Int32, write: Int32)? {
    var fds: [Int32] = [-1, -1]
    guard ahs_cloexec_pipe(&fds) == 0 else { return nil }
    return (fds[0], fds[1])
}
