import Glibc
import WireCoding

/// The broker's wire format, shared by the supervisor and the in-sandbox client. It is
/// deliberately tiny (no Foundation, no JSON) so the client stays a small static binary and
/// the supervisor's parser has little to get wrong.
///
/// Request (client → supervisor), one per connection:
///
///     "AHB2" | u32 length N (≤ maxRequest) | N bytes: argv joined by NUL
///
/// Reply (supervisor → client), a sequence of frames ending with exactly one exit frame:
///
///     kind (1 byte: 'o' stdout, 'e' stderr, 'x' exit) | u32 length | bytes
///
/// Both are `WireCoding.Frame`s (little-endian; "AHB1" was the big-endian framing before).
///
/// The exit frame's bytes are the decimal exit status. Anything else is a protocol error.
public enum BrokerWire {
    public static let magic: [UInt8] = Array("AHB2".utf8)
    public static let maxRequest = 64 * 1024
    public static let maxArguments = 256
    public static let maxFrame = 16 * 1024 * 1024
    /// Where the socket is inside the coding agent's sandbox.
    public static let sandboxSocket = "/run/autoharness/broker.sock"
    public static let socketName = "broker.sock"

    public enum FrameKind: UInt8, Sendable {
        case stdout = 0x6F  // 'o'
        case stderr = 0x65  // 'e'
        case exit = 0x78    // 'x'
    }

    public static func encodeRequest(_ argv: [String]) -> [UInt8] {
        var body: [UInt8] = []
        for (i, a) in argv.enumerated() {
            if i > 0 { body.append(0) }
            body += Array(a.utf8)
        }
        return Frame.tagged(magic, body)
    }

    public enum RequestError: Error, Equatable, Sendable, CustomStringConvertible {
        case badMagic, tooLarge(Int), tooManyArguments(Int), notUTF8, truncated

        public var description: String {
            switch self {
            case .badMagic: return "not a broker request (bad magic)"
            case .tooLarge(let n): return "request of \(n) bytes exceeds \(BrokerWire.maxRequest)"
            case .tooManyArguments(let n): return "\(n) arguments exceed \(BrokerWire.maxArguments)"
            case .notUTF8: return "arguments are not valid UTF-8"
            case .truncated: return "request truncated"
            }
        }
    }

    /// Validates a request header (the first 8 bytes) and returns the body length.
    public static func bodyLength(header: [UInt8]) -> Result<Int, RequestError> {
        guard header.count == 8 else { return .failure(.truncated) }
        guard Array(header[0..<4]) == magic else { return .failure(.badMagic) }
        guard let length = Frame.u32(header[4...]) else { return .failure(.truncated) }
        let n = Int(length)
        guard n <= maxRequest else { return .failure(.tooLarge(n)) }
        return .success(n)
    }

    public static func decodeArguments(_ body: [UInt8]) -> Result<[String], RequestError> {
        if body.isEmpty { return .success([]) }
        let parts = body.split(separator: 0, omittingEmptySubsequences: false)
        guard parts.count <= maxArguments else { return .failure(.tooManyArguments(parts.count)) }
        var out: [String] = []
        for p in parts {
            guard let s = String(validating: p, as: UTF8.self) else { return .failure(.notUTF8) }
            out.append(s)
        }
        return .success(out)
    }

    public static func frame(_ kind: FrameKind, _ bytes: [UInt8]) -> [UInt8] {
        Frame.tagged([kind.rawValue], bytes)
    }

    /// The length in a reply frame's five-byte header (kind, u32), or nil if it is short.
    public static func frameLength(header: [UInt8]) -> Int? {
        header.count == 5 ? Frame.u32(header[1...]).map(Int.init) : nil
    }

    /// Reads exactly `count` bytes, or nil on EOF, error or timeout.
    public static func readExact(_ fd: Int32, _ count: Int) -> [UInt8]? {
        var buf = [UInt8](repeating: 0, count: count)
        var off = 0
        while off < count {
            let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress! + off, count - off) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return nil }
            off += n
        }
        return buf
    }
}
