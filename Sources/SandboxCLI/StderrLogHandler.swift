import Glibc
import Logging

/// Writes each log line straight to fd 2 (or the client's stderr, for a served launch) with one
/// write(2), so lines appear in order with the sandboxed command's own output and survive an
/// abrupt exit.
public struct StderrLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    public let label: String
    public let fd: Int32

    public init(label: String, fd: Int32 = 2) {
        self.label = label
        self.fd = fd
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let line = "autoharness[\(event.level)]: \(event.message)\n"
        _ = line.withCString { write(fd, $0, strlen($0)) }
    }
}
