import BrokerWire
import Glibc
import WireCoding

// The `autoharness` the coding agent runs inside its sandbox. It holds no logic of its own:
// it sends its arguments to the supervisor's broker socket and prints what comes back, so
// `autoharness gate` inside the sandbox prints what the supervisor decided, and nothing the
// client could be made to do changes that.

/// The client's own failures are I/O errors (5 in the CLI's table, `Exit.ioError`): a 1
/// would read as a rejected gate to an agent that checks the exit status.
func die(_ message: String) -> Never {
    let line = "autoharness: \(message)\n"
    _ = line.withCString { write(2, $0, strlen($0)) }
    exit(5)
}

let path = getenv("AUTOHARNESS_BROKER").map { String(cString: $0) } ?? BrokerWire.sandboxSocket
let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
guard fd >= 0 else { die("socket: \(String(cString: strerror(errno)))") }
var addr = sockaddr_un()
addr.sun_family = sa_family_t(AF_UNIX)
let pathBytes = Array(path.utf8)
guard pathBytes.count < MemoryLayout.size(ofValue: addr.sun_path) else { die("broker socket path too long: \(path)") }
withUnsafeMutableBytes(of: &addr.sun_path) { raw in
    for (i, b) in pathBytes.enumerated() { raw[i] = b }
}
let connected = withUnsafePointer(to: &addr) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
}
guard connected == 0 else {
    die("the supervisor's broker is not reachable at \(path): \(String(cString: strerror(errno))) (this autoharness is a client: it works only inside a run started by `autoharness run`)")
}
guard Descriptor.writeAll(fd, BrokerWire.encodeRequest(Array(CommandLine.arguments.dropFirst()))) == nil else {
    die("sending the request failed: \(String(cString: strerror(errno)))")
}
while true {
    guard let header = BrokerWire.readExact(fd, 5) else { die("the broker closed the connection without an answer") }
    guard let length = BrokerWire.frameLength(header: header), length <= BrokerWire.maxFrame, let body = BrokerWire.readExact(fd, length) else { die("malformed answer from the broker") }
    switch BrokerWire.FrameKind(rawValue: header[0]) {
    case .stdout?: _ = body.withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
    case .stderr?: _ = body.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
    case .exit?:
        let code = Int32(String(decoding: body, as: UTF8.self)) ?? 1
        exit(code)
    case nil: die("malformed answer from the broker")
    }
}
