import SupervisorIO
// Errors from loading a policy. Every error that can be pinned to a line carries its
// `file:line`, because an operator fixing a policy at night needs the line, not a guess.

/// One problem found in a policy, usually at a specific line.
public struct PolicyError: Error, CustomStringConvertible, Sendable, Equatable {
    /// Where the offending YAML node is; nil for problems with no line (e.g. a missing file).
    public var location: SourceLocation?
    public var message: String
    /// The error this one reports against the policy, kept for a caller that must tell what
    /// it was (not compared: two errors at one place with one text are the same problem).
    public var cause: (any Error)?

    public init(_ message: String, at location: SourceLocation? = nil) {
        self.message = message
        self.location = location
    }

    /// `context: cause` as the message (the cause alone when `context` is empty), the cause kept.
    public init(_ context: String, cause: any Error, at location: SourceLocation? = nil) {
        self.init(context.isEmpty ? "\(cause)" : "\(context): \(cause)", at: location)
        self.cause = cause
    }

    public static func == (a: PolicyError, b: PolicyError) -> Bool { a.location == b.location && a.message == b.message }

    /// `file:line: message`, or just the message when there is no location.
    public var description: String {
        guard let location else { return message }
        return "\(location): \(message)"
    }
}

/// Every problem found while loading a policy and the policies it extends.
///
/// The loader keeps going after the first error so that one run of `policy check` reports
/// everything wrong with a file, rather than one fix-and-rerun cycle per mistake.
public struct PolicyDiagnostics: Error, CustomStringConvertible, Sendable {
    public var errors: [PolicyError]

    public init(errors: [PolicyError]) {
        self.errors = errors
    }

    /// One error per line.
    public var description: String {
        errors.map(\.description).joined(separator: "\n")
    }
}

extension PolicyError: AutoharnessError {
    public var category: ErrorCategory { .usage }
}

extension PolicyDiagnostics: AutoharnessError {
    public var category: ErrorCategory { .usage }
}
