import Glibc
import Logging

/// Writes each log line straight to fd 2 with one write(2), so lines appear in order with
/// the sandboxed command's own output and survive an abrupt exit.
struct StderrLogHandler: LogHandler {
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .info
    let label: String

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let line = "autoharness[\(event.level)]: \(event.message)\n"
        _ = line.withCString { write(2, $0, strlen($0)) }
    }
}
