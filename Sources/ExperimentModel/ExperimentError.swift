import SupervisorIO

public struct ExperimentError: Error, CustomStringConvertible, Sendable {
    /// `locked`: another supervisor holds the experiment lock.
    public enum Kind: Sendable { case usage, refused, state, io, locked }
    public var kind: Kind
    public var message: String
    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }
    /// An I/O failure of the supervisor's own files, as `.io` naming the path and errno.
    public init(_ failure: IOFailure) { self.init(.io, failure.description) }
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
