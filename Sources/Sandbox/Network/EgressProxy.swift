import CSandboxLaunch
import Glibc

/// The HTTP CONNECT proxy of a `network: proxy` sandbox.
///
/// Its listening socket lives on the sandbox's own loopback (127.0.0.1:3128, inside the
/// sandbox's network namespace, where `HTTPS_PROXY` points), but it is served here, by the
/// supervisor, which opens the outbound connection from the host's namespace. A tunnel is
/// opened only to a `host:port` on the policy's allowlist; names are resolved by the proxy
/// (the sandbox has no resolver) and a name that resolves to a loopback, private or
/// link-local address is refused unless that literal address is itself allowlisted. Every
/// request, allowed or denied, is an audit event, with the bytes moved each way.
final class EgressProxy: @unchecked Sendable {
    /// The fixed port inside every proxy sandbox.
    static let port: UInt16 = 3128
    static let maxConnections = 64

    private let listener: Int32
    private let allow: Set<String>
    private let audit: AuditLog
    private let sandbox: String
    private let lock = Mutex()
    private var open: Set<Int32> = []
    private var stopped = false

    init(listener: Int32, allow: [String], audit: AuditLog, sandbox: String) {
        self.listener = listener
        self.allow = Set(allow.map { $0.lowercased() })
        self.audit = audit
        self.sandbox = sandbox
    }

    func start() {
        detachedThread { [self] in acceptLoop() }
    }

    /// Closes the listener and every tunnel (the sandbox is gone).
    func stop() {
        lock.withLock {
            stopped = true
            shutdown(listener, Int32(SHUT_RDWR))
            for fd in open { shutdown(fd, Int32(SHUT_RDWR)) }
        }
    }

    private func acceptLoop() {
        while true {
            let c = ahl_accept_cloexec(listener)
            if c < 0 {
                if errno == EINTR { continue }
                break
            }
            let admitted: Bool = lock.withLock {
                guard !stopped, open.count < Self.maxConnections else { return false }
                open.insert(c)
                return true
            }
            guard admitted else {
                send(c, "HTTP/1.1 503 Too many connections\r\n\r\n")
                close(c)
                continue
            }
            detachedThread { [self] in
                serve(c)
                lock.withLock { _ = open.remove(c) }
                close(c)
            }
        }
        close(listener)
    }

    /// `host:port` is allowed if listed exactly, or if a `*.domain:port` entry covers it: a
    /// name ending in `.domain` (one or more labels deeper; never `domain` itself, never an
    /// IP literal). Remote sandbox providers hand out per-sandbox host names.
    static func allowed(_ target: String, by allow: Set<String>) -> Bool {
        if allow.contains(target) { return true }
        guard let colon = target.lastIndex(of: ":") else { return false }
        let host = target[..<colon], port = target[colon...]
        guard !host.allSatisfy({ $0.isNumber || $0 == "." || $0 == ":" || $0 == "[" || $0 == "]" }) else { return false }
        var rest = host[...]
        while let dot = rest.firstIndex(of: ".") {
            rest = rest[rest.index(after: dot)...]
            if !rest.isEmpty && allow.contains("*.\(rest)\(port)") { return true }
        }
        return false
    }

    private func serve(_ client: Int32) {
        guard let head = readHead(client), let line = head.split(separator: "\r\n", omittingEmptySubsequences: false).first else { return }
        let parts = line.split(separator: " ")
        guard parts.count == 3, parts[0] == "CONNECT", parts[2].hasPrefix("HTTP/1.") else {
            record(String(line.prefix(120)), allowed: false, why: "not a CONNECT request")
            send(client, "HTTP/1.1 405 Only CONNECT is supported\r\n\r\n")
            return
        }
        let target = String(parts[1]).lowercased()
        guard let (host, port) = Self.split(target) else {
            record(target, allowed: false, why: "malformed host:port")
            send(client, "HTTP/1.1 400 Bad request\r\n\r\n")
            return
        }
        guard Self.allowed(target, by: allow) else {
            record(target, allowed: false, why: "not on the allowlist")
            send(client, "HTTP/1.1 403 Forbidden by autoharness policy\r\n\r\n")
            return
        }
        let upstream: Int32
        switch connect(host: host, port: port) {
        case .success(let fd): upstream = fd
        case .failure(let why):
            record(target, allowed: false, why: why)
            send(client, "HTTP/1.1 502 \(why)\r\n\r\n")
            return
        }
        lock.withLock { _ = open.insert(upstream) }
        defer {
            lock.withLock { _ = open.remove(upstream) }
            close(upstream)
        }
        send(client, "HTTP/1.1 200 Connection established\r\n\r\n")
        let (up, down) = relay(client, upstream)
        record(target, allowed: true, why: nil, up: up, down: down)
    }

    /// Reads until the end of the request head (max 8 KiB, 10 s).
    private func readHead(_ fd: Int32) -> String? {
        var buf = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 1024)
        while buf.count < 8192 {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&p, 1, 10_000) > 0 else { return nil }
            // Byte by byte up to the blank line, so tunnel bytes sent early are not consumed.
            let n = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, 1, 0) }
            if n <= 0 { return nil }
            buf.append(chunk[0])
            if buf.count >= 4 && buf.suffix(4).elementsEqual([13, 10, 13, 10]) {
                return String(decoding: buf, as: UTF8.self)
            }
        }
        return nil
    }

    private enum Dial { case success(Int32), failure(String) }

    private func connect(host: String, port: UInt16) -> Dial {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>?
        let literal = Self.isIPLiteral(host)
        let name = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        guard getaddrinfo(name, String(port), &hints, &res) == 0, let first = res else {
            return .failure("cannot resolve \(host)")
        }
        defer { freeaddrinfo(first) }
        var ai: UnsafeMutablePointer<addrinfo>? = first
        var lastError = "connection failed"
        while let a = ai {
            defer { ai = a.pointee.ai_next }
            if !literal && Self.isInternal(a.pointee.ai_addr) {
                lastError = "\(host) resolves to an internal address"
                continue
            }
            let fd = socket(a.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            if fd < 0 { continue }
            if Glibc.connect(fd, a.pointee.ai_addr, a.pointee.ai_addrlen) == 0 { return .success(fd) }
            lastError = String(cString: strerror(errno))
            close(fd)
        }
        return .failure(lastError)
    }

    /// Copies bytes both ways until either side closes. Returns (client→upstream, upstream→client).
    private func relay(_ a: Int32, _ b: Int32) -> (Int, Int) {
        var up = 0, down = 0
        var buf = [UInt8](repeating: 0, count: 65536)
        var fds = [pollfd(fd: a, events: Int16(POLLIN), revents: 0), pollfd(fd: b, events: Int16(POLLIN), revents: 0)]
        var aOpen = true, bOpen = true
        while aOpen || bOpen {
            fds[0].events = aOpen ? Int16(POLLIN) : 0
            fds[1].events = bOpen ? Int16(POLLIN) : 0
            if poll(&fds, 2, 300_000) <= 0 { break }  // idle five minutes: give up
            for (i, (from, to)) in [(a, b), (b, a)].enumerated() where fds[i].revents != 0 {
                let n = buf.withUnsafeMutableBytes { recv(from, $0.baseAddress, $0.count, 0) }
                if n <= 0 {
                    shutdown(to, Int32(SHUT_WR))
                    if i == 0 { aOpen = false } else { bOpen = false }
                    continue
                }
                var sent = 0
                while sent < n {
                    let m = buf.withUnsafeBytes { Glibc.send(to, $0.baseAddress! + sent, n - sent, Int32(MSG_NOSIGNAL)) }
                    if m <= 0 { return (up, down) }
                    sent += m
                }
                if i == 0 { up += n } else { down += n }
            }
        }
        return (up, down)
    }

    private func record(_ target: String, allowed: Bool, why: String?, up: Int = 0, down: Int = 0) {
        var e = AuditEvent(sandbox: sandbox, kind: .egress, name: target, action: allowed ? "allowed" : "denied")
        e.detail = why
        if allowed {
            e.bytesUp = up
            e.bytesDown = down
        }
        audit.record(e)
    }

    private func send(_ fd: Int32, _ s: String) {
        _ = s.withCString { Glibc.send(fd, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
    }

    /// `host:port` → (host, port); IPv6 literals in brackets.
    static func split(_ target: String) -> (String, UInt16)? {
        guard let colon = target.lastIndex(of: ":"), let port = UInt16(target[target.index(after: colon)...]), port > 0 else { return nil }
        let host = String(target[..<colon])
        guard !host.isEmpty, host.allSatisfy({ $0.isLetter || $0.isNumber || "-._:[]".contains($0) }) else { return nil }
        return (host, port)
    }

    static func isIPLiteral(_ host: String) -> Bool {
        var a4 = in_addr(), a6 = in6_addr()
        let h = host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host
        return inet_pton(AF_INET, h, &a4) == 1 || inet_pton(AF_INET6, h, &a6) == 1
    }

    /// Loopback, private, link-local, unspecified or unique-local.
    static func isInternal(_ sa: UnsafeMutablePointer<sockaddr>) -> Bool {
        if Int32(sa.pointee.sa_family) == AF_INET {
            let a = sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt32(bigEndian: $0.pointee.sin_addr.s_addr) }
            let b0 = a >> 24, b1 = (a >> 16) & 0xFF
            return b0 == 127 || b0 == 10 || b0 == 0 || (b0 == 172 && (16...31).contains(b1))
                || (b0 == 192 && b1 == 168) || (b0 == 169 && b1 == 254) || (b0 == 100 && (64...127).contains(b1))
        }
        if Int32(sa.pointee.sa_family) == AF_INET6 {
            let bytes = sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { p in
                withUnsafeBytes(of: p.pointee.sin6_addr) { Array($0) }
            }
            let loopbackOrAny = bytes.dropLast().allSatisfy { $0 == 0 } && (bytes.last == 1 || bytes.last == 0)
            let mapped = bytes.prefix(10).allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF
            return loopbackOrAny || (bytes[0] & 0xFE) == 0xFC || (bytes[0] == 0xFE && (bytes[1] & 0xC0) == 0x80) || mapped
        }
        return true
    }
}

/// Runs `body` on a new detached pthread (the proxy's blocking I/O must not occupy the
/// cooperative pool).
func detachedThread(_ body: @escaping @Sendable () -> Void) {
    final class Box: @unchecked Sendable {
        let body: @Sendable () -> Void
        init(_ b: @escaping @Sendable () -> Void) { body = b }
    }
    let box = Unmanaged.passRetained(Box(body)).toOpaque()
    var attr = pthread_attr_t()
    pthread_attr_init(&attr)
    pthread_attr_setdetachstate(&attr, Int32(PTHREAD_CREATE_DETACHED))
    var tid = pthread_t()
    let rc = pthread_create(&tid, &attr, { arg in
        let b = Unmanaged<AnyObject>.fromOpaque(arg!).takeRetainedValue() as! Box
        b.body()
        return nil
    }, box)
    pthread_attr_destroy(&attr)
    if rc != 0 { Unmanaged<AnyObject>.fromOpaque(box).release() }
}
