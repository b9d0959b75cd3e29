import SupervisorIO

public struct ExperimentError: Error, CustomStringConvertible, Sendable {
    /// `locked`: another supervisor holds the experiment lock.
    public enum Kind: Sendable { case usage, refused, state, io, locked }
    public var kind: Kind
    /// The whole text for the operator (the cause's text after the context, when there is one).
    public var message: String
    /// The error this one reports in the supervisor's words (a failed write, a task's or a
    /// policy's error), kept for a caller that must tell what it was.
    public var cause: (any Error)?
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }
    /// `context: cause` as the message (the cause alone when `context` is empty), the cause kept.
    public init(_ kind: Kind, _ context: String, cause: any Error) {
        self.init(kind, context.isEmpty ? "\(cause)" : "\(context): \(cause)")
        self.cause = cause
    }
    /// An I/O failure of the supervisor's own files, as `.io` naming the path and errno.
    public init(_ failure: IOFailure) {
        self.init(.io, failure.description)
        cause = failure
    }
    /// The same, said as `path: reason` (no action), for a file the message is about.
    public init(_ kind: Kind, path failure: IOFailure) {
        self.init(kind, "\(failure.path): \(failure.reason ?? ErrnoName.describe(failure.errno))")
        cause = failure
    }
    public var description: String { message }
}

extension ExperimentError: AutoharnessError {
    public var category: ErrorCategory {
        switch kind {
        case .usage: return .usage
        case .refused: return .refused
        case .state: return .state
        case .io: return .io
        case .locked: return .locked
        }
    }
}
