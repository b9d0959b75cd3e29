import SupervisorIO

/// The one error type of the Benchmark library: a code callers can switch on and a message a
/// person can act on. Messages name the file (as `file:line` where there is a line) or the
/// task at fault, because whoever reads them is fixing a benchmark or a configuration, not
/// this library.
public struct BenchmarkError: Error, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String { case invalidBenchmark, invalidTaskFile, configuration, io }
        private let value: Value
        private init(_ v: Value) { value = v }

        /// The benchmark directory or one of its tasks is missing something or is malformed.
        public static let invalidBenchmark = Code(.invalidBenchmark)
        /// A `task.toml` is outside the supported subset; the message carries `file:line`.
        public static let invalidTaskFile = Code(.invalidTaskFile)
        /// A `TaskRunConfiguration` is unusable (scratch root not on tmpfs, policy missing, …).
        public static let configuration = Code(.configuration)
        /// A supervisor-side file operation failed.
        public static let io = Code(.io)

        public var description: String { value.rawValue }
    }

    public var code: Code
    /// The whole text for the operator (the cause's text after the context, when there is one).
    public var message: String
    /// The error this one reports in a benchmark's words, kept for a caller that must tell
    /// what it was.
    public var cause: (any Error)?

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// `context: cause` as the message (the cause alone when `context` is empty), the cause kept.
    public init(_ code: Code, _ context: String, cause: any Error) {
        self.init(code, context.isEmpty ? "\(cause)" : "\(context): \(cause)")
        self.cause = cause
    }

    /// A file the supervisor could not read, write, copy or remove, as `.io` naming it.
    public init(_ failure: IOFailure) { self.init(.io, failure.description) }

    public var description: String { message }
}

extension BenchmarkError: AutoharnessError {
    public var category: ErrorCategory { code == .io ? .io : .usage }
}
