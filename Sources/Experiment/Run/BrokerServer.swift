import BrokerWire
import ExperimentModel
import Foundation
import Glibc
import SupervisorIO
import Synchronization
import WireCoding

/// Who sent a broker request, as the kernel says (SO_PEERCRED; host pid and uid).
public struct BrokerPeer: Sendable {
    public var pid: Int32
    public var uid: UInt32
}

/// What the supervisor answers to one request.
public struct BrokerReply: Sendable {
    public var stdout: String
    public var stderr: String
    public var exit: Int32
    public init(stdout: String = "", stderr: String = "", exit: Int32) {
        self.stdout = stdout
        self.stderr = stderr
        self.exit = exit
    }
}

/// The Unix socket the coding agent's `autoharness` talks to.
///
/// One thread accepts and answers connections one at a time, so requests are serialised
/// (a gate never overlaps a benchmark or another gate); clients that connect meanwhile wait
/// in the listen backlog. A client gets 5 seconds to send its request and must keep reading
/// its answer: a stalled or silent peer cannot hold the broker. Requests are bounded
/// (`BrokerWire.maxRequest`) and decoded without interpretation; the handler decides.
final class BrokerServer: Sendable {
    typealias Handler = @Sendable (Result<[String], BrokerWire.RequestError>, BrokerPeer) -> BrokerReply

    let path: String
    private let listener: Int32
    private let handler: Handler
    private let done = DispatchSemaphore(value: 0)
    private let stopping = Synchronization.Mutex(false)

    /// Binds a fresh socket at `path` (a stale socket from a killed run is replaced; any
    /// other file there is an error) with mode 0666: its directory is what confines it.
    init(path: String, handler: @escaping Handler) throws {
        self.path = path
        self.handler = handler
        var st = stat()
        if lstat(path, &st) == 0 {
            guard (st.st_mode & S_IFMT) == S_IFSOCK else { throw ExperimentError(.io, "\(path) exists and is not a socket") }
            unlink(path)
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ExperimentError(.io, "broker socket: \(String(cString: strerror(errno)))") }
        guard let addr = UnixSocket.address(path) else {
            close(fd)
            throw ExperimentError(.io, "broker socket path too long (\(path.utf8.count) bytes): \(path)")
        }
        guard UnixSocket.bind(fd, addr) == 0, chmod(path, 0o666) == 0, listen(fd, 16) == 0 else {
            let e = String(cString: strerror(errno))
            close(fd)
            throw ExperimentError(.io, "broker socket \(path): \(e)")
        }
        listener = fd
    }

    func start() {
        let t = Thread { [self] in
            serve()
            done.signal()
        }
        t.stackSize = 4 << 20
        t.start()
    }

    /// Stops accepting; a request being answered is finished first (this waits for it).
    func stop() {
        stopping.withLock {
            $0 = true
            shutdown(listener, Int32(SHUT_RDWR))
        }
        done.wait()
        close(listener)
        unlink(path)
    }

    private func serve() {
        while true {
            let c = UnixSocket.accept(listener)
            if c < 0 {
                if errno == EINTR || errno == ECONNABORTED { continue }
                return
            }
            let stop = stopping.withLock { $0 }
            if stop {
                close(c)
                return
            }
            answer(c)
            close(c)
        }
    }

    private func answer(_ c: Int32) {
        let credentials = UnixSocket.peer(c)
        let peer = BrokerPeer(pid: credentials?.pid ?? 0, uid: credentials?.uid ?? 0)
        // A client that does not read its reply holds the (single-threaded) broker at most
        // this long; ours reads at once.
        setTimeout(c, SO_SNDTIMEO, seconds: 5)

        // 5 seconds for the whole request, however it is trickled in.
        let deadline = Self.now() + 5
        let request: Result<[String], BrokerWire.RequestError>
        if let header = Self.read(c, 8, deadline: deadline) {
            switch BrokerWire.bodyLength(header: header) {
            case .failure(let e): request = .failure(e)
            case .success(let n):
                if let body = Self.read(c, n, deadline: deadline) {
                    request = BrokerWire.decodeArguments(body)
                } else {
                    request = .failure(.truncated)
                }
            }
        } else {
            request = .failure(.truncated)
        }
        let reply = handler(request, peer)
        var out: [UInt8] = []
        if !reply.stdout.isEmpty { out += BrokerWire.frame(.stdout, Array(reply.stdout.utf8)) }
        if !reply.stderr.isEmpty { out += BrokerWire.frame(.stderr, Array(reply.stderr.utf8)) }
        out += BrokerWire.frame(.exit, Array(String(reply.exit).utf8))
        _ = Descriptor.writeAll(c, out)
        // Closing with unread input would reset the connection and could destroy the answer
        // before the client reads it: end our side, then discard what is left (bounded in
        // bytes and time, so a peer that keeps sending cannot hold the broker).
        shutdown(c, Int32(SHUT_WR))
        setTimeout(c, SO_RCVTIMEO, seconds: 0, microseconds: 200_000)
        var sink = [UInt8](repeating: 0, count: 4096)
        var drained = 0
        while drained < 64 * 1024 {
            let n = Glibc.read(c, &sink, sink.count)
            if n <= 0 { break }
            drained += n
        }
    }

    static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    /// Exactly `count` bytes before `deadline`, or nil.
    static func read(_ fd: Int32, _ count: Int, deadline: Double) -> [UInt8]? {
        var buf = [UInt8](repeating: 0, count: count)
        var off = 0
        while off < count {
            let left = deadline - now()
            guard left > 0 else { return nil }
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let r = poll(&p, 1, Int32(left * 1000) + 1)
            if r < 0 && errno == EINTR { continue }
            guard r > 0 else { return nil }
            let n = buf.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress! + off, count - off) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return nil }
            off += n
        }
        return buf
    }

    private func setTimeout(_ fd: Int32, _ option: Int32, seconds: Int, microseconds: Int = 0) {
        var tv = timeval(tv_sec: seconds, tv_usec: microseconds)
        _ = setsockopt(fd, SOL_SOCKET, option, &tv, socklen_t(MemoryLayout<timeval>.size))
    }
}
