import Sandbox

/// Writes of the supervisor's own that failed during a run: a train trace, a task's scratch
/// directory, a held-out sandbox's page-cache journal (a full disk, an I/O error). None of
/// them is anything a task did, so none is ever scored: the first one stops the run from
/// starting further tasks, and the operation that ran it fails with its message (path and
/// errno) instead of recording results the supervisor could not keep.
public final class WriteFailures: Sendable {
    private let first = Locked<String?>(nil)

    public init() {}

    /// Keeps `message` if it is the first failure.
    public func record(_ message: String) {
        first.withLock { if first.value == nil { first.value = message } }
    }

    /// The first failure, or nil.
    public var failure: String? { first.withLock { first.value } }
}
