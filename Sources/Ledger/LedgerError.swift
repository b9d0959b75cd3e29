import SupervisorIO
/// The one error type of the Ledger library: a code callers can switch on, a message a person
/// can act on (it names the file, row or holder at fault), the errno of a failing system call,
/// and the underlying error (SQLite, JSON) when there is one.
public struct LedgerError: Error, CustomStringConvertible, Sendable {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Value: String {
            case io, database, encoding, decoding, corrupt, incompatible
        }
        private let value: Value
        private init(_ v: Value) { value = v }

        /// A system call on the ledger's file failed (open, stat, chmod).
        public static let io = Code(.io)
        /// SQLite reported an error (busy past the timeout, disk full, constraint, trigger).
        public static let database = Code(.database)
        /// A payload could not be encoded as a canonical JSON object.
        public static let encoding = Code(.encoding)
        /// A stored payload could not be decoded as the requested type.
        public static let decoding = Code(.decoding)
        /// A stored row cannot be read as a record (unknown kind): run `verify()`.
        public static let corrupt = Code(.corrupt)
        /// The file is not an autoharness ledger, or was written by a newer schema.
        public static let incompatible = Code(.incompatible)

        public var description: String { value.rawValue }
    }

    public var code: Code
    public var message: String
    /// errno of the failing system call, if any.
    public var errno: Int32?
    /// The error this one wraps (a GRDB `DatabaseError`, an `EncodingError`, …), if any.
    public var cause: (any Error)?

    public init(_ code: Code, _ message: String, errno: Int32? = nil, cause: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.errno = errno
        self.cause = cause
    }

    /// A failed system call on one of the ledger's files.
    public init(_ failure: IOFailure) { self.init(.io, failure.message, errno: failure.errno) }

    public var description: String {
        var text = message
        if let errno { text += ": \(ErrnoName.describe(errno))" }
        if let cause { text += ": \(cause)" }
        return text
    }
}

extension LedgerError: AutoharnessError {
    /// Every ledger failure leaves the record as it was: the system's (or the file's) fault.
    public var category: ErrorCategory { .io }
}
