import SupervisorIO
/// The one error type of the Sandbox library: a code callers can switch on, a message a
/// person can act on (it names the file, path or value at fault), and the underlying errno
/// when there is one.
public struct SandboxError: Error, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String {
            case invalidPolicy, invalidArgument, sourceMissing, seccomp, cgroup, launch,
                notPrivileged, io
        }
        private let value: Value
        private init(_ v: Value) { value = v }

        /// A policy or policy override is malformed or contradictory.
        public static let invalidPolicy = Code(.invalidPolicy)
        /// A command-line value is malformed.
        public static let invalidArgument = Code(.invalidArgument)
        /// A bind source does not exist (and is not optional).
        public static let sourceMissing = Code(.sourceMissing)
        /// libseccomp refused to build the filter.
        public static let seccomp = Code(.seccomp)
        /// A requested limit cannot be enforced, or cgroup setup failed.
        public static let cgroup = Code(.cgroup)
        /// The sandbox could not be started.
        public static let launch = Code(.launch)
        /// The supervisor lacks the privileges a sandbox needs.
        public static let notPrivileged = Code(.notPrivileged)
        /// Reading or writing a supervisor-side file failed.
        public static let io = Code(.io)

        public var description: String { value.rawValue }
    }

    public var code: Code
    public var message: String
    /// errno of the failing call, if any.
    public var errno: Int32?

    public init(_ code: Code, _ message: String, errno: Int32? = nil) {
        self.code = code
        self.message = message
        self.errno = errno
    }

    public var description: String { message }
}

extension SandboxError: AutoharnessError {
    public var category: ErrorCategory {
        switch code {
        case .invalidPolicy, .invalidArgument, .sourceMissing: return .usage
        case .io: return .io
        default: return .sandboxSetup
        }
    }
}
