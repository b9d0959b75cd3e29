import Glibc
import Logging

/// Writes each log line straight to fd 2 with one write(2), so lines appear in order with
/// the sandboxed command's own output and survive an abrupt exit.
public struct StderrLogHandler: LogHandler {
    public var metadata: Logger.Metadata = [:]
    public var logLevel: Logger.Level = .info
    public let label: String

    public init(label: String) {
        self.label = label
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        let line = "autoharness[\(event.level)]: \(event.message)\n"
        _ = line.withCString { write(2, $0, strlen($0)) }
    }
}
