import CSystemCalls
import Glibc
import SupervisorIO

/// The HTTP CONNECT proxy of a `network: proxy` sandbox.
///
/// Its listening socket lives on the sandbox's own loopback (127.0.0.1:3128, inside the
/// sandbox's network namespace, where `HTTPS_PROXY` points), but it is served here, by the
/// supervisor, which opens the outbound connection from the host's namespace. A tunnel is
/// opened only to a `host:port` on the policy's allowlist; names are resolved by the proxy
/// (the sandbox has no resolver), each resolved address checked and then dialled as is (no
/// second lookup): a special-purpose address (`AddressClass`) or one of this host's own is
/// refused unless that literal address is itself allowlisted. Every request, allowed or
/// denied, is an audit event, with the bytes moved each way.
///
/// In a held-out VM the guest's proxies only forward (`link`): each connection becomes a
/// stream of the `EgressLink` to the host, where an `EgressProxy` without a listener serves
/// it (`adopt`) with the host's allowlist, inference gate and audit.
public final class EgressProxy: @unchecked Sendable {
    /// The fixed port inside every proxy sandbox.
    static let port: UInt16 = 3128
    static let maxConnections = 64
    /// Seconds a dial may take.
    static let connectTimeout = 15

    private let listener: Int32
    private let allow: Set<String>
    /// Model APIs reached only through the inference gate (`InferenceGate.targets`).
    private let inference: InferenceGate?
    /// Forward every connection, as is, over this link (tagged), instead of serving it.
    private let link: (link: EgressLink, tag: String)?
    private let audit: AuditLog
    private let sandbox: String
    private let lock = Mutex()
    private var open: Set<Int32> = []
    private var active = 0
    private var stopped = false

    init(listener: Int32, allow: [String], inference: InferenceGate? = nil, link: (link: EgressLink, tag: String)? = nil,
         audit: AuditLog, sandbox: String) {
        self.listener = listener
        self.allow = Set(allow.map { $0.lowercased() })
        self.inference = inference
        self.link = link
        self.audit = audit
        self.sandbox = sandbox
    }

    /// A proxy without a listener, serving the connections it is handed (`adopt`): the
    /// host's end of a held-out VM's egress.
    public convenience init(allow: [String], inference: InferenceGate?, audit: AuditLog, sandbox: String) {
        self.init(listener: -1, allow: allow, inference: inference, audit: audit, sandbox: sandbox)
    }

    func start() {
        detachedThread { [self] in acceptLoop() }
    }

    /// Closes the listener and every tunnel (the sandbox is gone).
    public func stop() {
        lock.withLock {
            stopped = true
            if listener >= 0 { shutdown(listener, Int32(SHUT_RDWR)) }
            for fd in open { shutdown(fd, Int32(SHUT_RDWR)) }
        }
    }

    /// Waits up to `timeout` seconds for every connection to be served to its end (and
    /// recorded). True if none is left.
    public func drain(timeout: Double) -> Bool {
        let end = monotonicNow() + timeout
        while lock.withLock({ active }) > 0 {
            if monotonicNow() >= end { return false }
            usleep(2_000)
        }
        return true
    }

    /// Serves `client` (a connected socket this proxy now owns) as if it had been accepted.
    /// `vendorFailure` is called for each request of it the inference gate counts as the
    /// vendor's failure (`InferenceGate.vendorFailures` counts them too).
    public func adopt(_ client: Int32, vendorFailure: (@Sendable () -> Void)? = nil) {
        admit(client, vendorFailure: vendorFailure)
    }

    private func acceptLoop() {
        while true {
            let c = ahs_accept_cloexec(listener)
            if c < 0 {
                if errno == EINTR { continue }
                break
            }
            admit(c)
        }
        close(listener)
    }

    private func admit(_ c: Int32, vendorFailure: (@Sendable () -> Void)? = nil) {
        let admitted: Bool = lock.withLock {
            guard !stopped, open.count < Self.maxConnections else { return false }
            open.insert(c)
            active += 1
            return true
        }
        guard admitted else {
            record("-", allowed: false, why: "over \(Self.maxConnections) connections at once")
            send(c, "HTTP/1.1 503 Too many connections\r\n\r\n")
            close(c)
            return
        }
        detachedThread { [self] in
            if let link { forward(c, link) } else { serve(c, vendorFailure: vendorFailure) }
            lock.withLock {
                _ = open.remove(c)
                active -= 1
            }
            close(c)
        }
    }

    /// A held-out guest's proxy: the connection's bytes, untouched, to the host's proxy.
    private func forward(_ client: Int32, _ link: (link: EgressLink, tag: String)) {
        guard let up = link.link.open(tag: link.tag) else {
            send(client, "HTTP/1.1 503 No link to the host's proxy\r\n\r\n")
            return
        }
        lock.withLock { _ = open.insert(up) }
        _ = Self.relay(client, up)
        lock.withLock { _ = open.remove(up) }
        close(up)
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

    private func serve(_ client: Int32, vendorFailure: (@Sendable () -> Void)?) {
        guard let head = readHead(client), let line = head.split(separator: "\r\n", omittingEmptySubsequences: false).first else {
            // A connection that never finishes its request (closed early, stalled, oversized)
            // could still be a probe: recorded, not silent.
            record("-", allowed: false, why: "no complete request head (closed, over 8 KiB, or 10 s without one)")
            return
        }
        let parts = line.split(separator: " ")
        guard parts.count == 3, parts[0] == "CONNECT", parts[2].hasPrefix("HTTP/1.") else {
            // No tunnel to keep the inference gate's rules on: a plain request never goes to it.
            switch PlainHTTP.parse(head) {
            case .success(let request) where inference?.targets.contains(request.target) != true:
                serveHTTP(client, request)
            case .success(let request):
                record(request.target, allowed: false, why: "plain HTTP to a model API")
                send(client, "HTTP/1.1 403 Forbidden by autoharness policy\r\n\r\n")
            case .failure(let refused):
                record(String(line.prefix(120)), allowed: false, why: refused.why)
                send(client, "HTTP/1.1 405 Only CONNECT, or GET and HEAD over plain HTTP\r\n\r\n")
            }
            return
        }
        let target = String(parts[1]).lowercased()
        guard let (host, port) = Self.split(target) else {
            record(target, allowed: false, why: "malformed host:port")
            send(client, "HTTP/1.1 400 Bad request\r\n\r\n")
            return
        }
        if let gate = inference, gate.targets.contains(target) {
            send(client, "HTTP/1.1 200 Connection established\r\n\r\n")
            let exchange = InferenceExchange(
                gate: gate, client: client, host: host, port: port,
                dial: { [self] in connect(host: host, port: port) },
                track: { [self] (fd: Int32, opened: Bool) in
                    lock.withLock {
                        if opened { _ = open.insert(fd) } else { _ = open.remove(fd) }
                        // Stopped meanwhile: the new connection is cut at once.
                        if opened && stopped { shutdown(fd, Int32(SHUT_RDWR)) }
                    }
                },
                stopped: { [self] in lock.withLock { stopped } }, onVendorFailure: vendorFailure)
            let outcome = exchange.run()
            record(target, allowed: outcome.allowed, why: outcome.detail, up: outcome.up, down: outcome.down)
            return
        }
        guard Self.allowed(target, by: allow) else {
            record(target, allowed: false, why: "not on the allowlist")
            send(client, "HTTP/1.1 403 Forbidden by autoharness policy\r\n\r\n")
            return
        }
        withUpstream(target, host: host, port: port, client: client) { upstream in
            send(client, "HTTP/1.1 200 Connection established\r\n\r\n")
            let (up, down) = Self.relay(client, upstream)
            record(target, allowed: true, why: nil, up: up, down: down)
        }
    }

    /// A connection to an allowed `host:port` for `client`'s request, tracked while `body`
    /// uses it, then closed. A connect that fails is recorded and answered 502; a proxy
    /// stopped meanwhile (its sandbox, or the held-out VM, is gone) opens nothing.
    private func withUpstream(_ target: String, host: String, port: UInt16, client: Int32, _ body: (Int32) -> Void) {
        let upstream: Int32
        switch connect(host: host, port: port) {
        case .success(let fd): upstream = fd
        case .failure(let f):
            record(target, allowed: false, why: f.why)
            send(client, "HTTP/1.1 502 \(f.why)\r\n\r\n")
            return
        }
        let live: Bool = lock.withLock {
            guard !stopped else { return false }
            open.insert(upstream)
            return true
        }
        defer {
            lock.withLock { _ = open.remove(upstream) }
            close(upstream)
        }
        guard live else {
            record(target, allowed: false, why: "the proxy stopped")
            return
        }
        body(upstream)
    }

    /// A plain-HTTP GET or HEAD (`PlainHTTP`) to an allowlisted host:port: the rebuilt head
    /// to the server, then its response to the client until the server closes; nothing more
    /// the client sends on this connection is read.
    private func serveHTTP(_ client: Int32, _ request: PlainHTTP.Request) {
        let what = "\(request.method) over plain HTTP"
        guard Self.allowed(request.target, by: allow) else {
            record(request.target, allowed: false, why: "not on the allowlist (\(what))")
            send(client, "HTTP/1.1 403 Forbidden by autoharness policy\r\n\r\n")
            return
        }
        withUpstream(request.target, host: request.host, port: request.port, client: client) { upstream in
            relayResponse(request, what: what, upstream: upstream, client: client)
        }
    }

    /// The rebuilt head to the server, then its response to the client until the server
    /// closes; a client that hangs up ends it too (its connection, thread and the server's
    /// are freed, not held for the timeout).
    private func relayResponse(_ request: PlainHTTP.Request, what: String, upstream: Int32, client: Int32) {
        guard sendAll(upstream, Array(request.upstreamHead.utf8)[...]) else {
            record(request.target, allowed: true, why: "\(what): the server closed before the request was sent")
            return
        }
        var down = 0
        var buf = [UInt8](repeating: 0, count: 65536)
        var fds = [pollfd(fd: upstream, events: Int16(POLLIN), revents: 0), pollfd(fd: client, events: Self.pollRDHUP, revents: 0)]
        while poll(&fds, 2, 300_000) > 0 {
            if fds[1].revents & (Self.pollRDHUP | Int16(POLLHUP) | Int16(POLLERR)) != 0 { break }
            guard fds[0].revents != 0 else { continue }
            let n = buf.withUnsafeMutableBytes { recv(upstream, $0.baseAddress, $0.count, 0) }
            if n <= 0 || !sendAll(client, buf[0..<n]) { break }
            down += n
        }
        record(request.target, allowed: true, why: what, up: request.upstreamHead.utf8.count, down: down)
    }

    /// Reads until the end of the request head (max 8 KiB, 10 s for the whole head: a byte
    /// every few seconds must not hold a connection for hours).
    private func readHead(_ fd: Int32) -> String? {
        var buf = [UInt8]()
        var chunk = [UInt8](repeating: 0, count: 1024)
        let deadline = monotonicNow() + 10
        while buf.count < 8192 {
            var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let left = Int32(max(0, (deadline - monotonicNow()) * 1000))
            guard left > 0, poll(&p, 1, left) > 0 else { return nil }
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

    /// A connected socket to `host:port`, or why not.
    private func connect(host: String, port: UInt16) -> Result<Int32, GateRefusal> {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var res: UnsafeMutablePointer<addrinfo>?
        let literal = Self.isIPLiteral(host)
        let name = Self.unbracketed(host)
        guard getaddrinfo(name, String(port), &hints, &res) == 0, let first = res else {
            return .failure(GateRefusal("cannot resolve \(host)"))
        }
        defer { freeaddrinfo(first) }
        var ai: UnsafeMutablePointer<addrinfo>? = first
        var lastError = "connection failed"
        var tried = false
        while let a = ai {
            defer { ai = a.pointee.ai_next }
            // A name resolving to an internal address reaches it only where the allowlist
            // names that address and port too: the operator vouched for it (a registry mirror
            // on the LAN, a proxy the resolver points every name at), not DNS.
            if !literal && Self.isInternal(a.pointee.ai_addr) {
                let address = Self.text(a.pointee.ai_addr)
                let listed = (Int32(a.pointee.ai_family) == AF_INET6 ? "[\(address)]" : address) + ":\(port)"
                if !allow.contains(listed) {
                    lastError = "\(host) resolves to an internal address (\(address)); list \(listed) too to allow it"
                    continue
                }
            }
            tried = true
            let fd = socket(a.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            if fd < 0 { continue }
            // A bound on connect (Linux applies the send timeout to it), then none.
            var limit = timeval(tv_sec: Self.connectTimeout, tv_usec: 0)
            _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
            if Glibc.connect(fd, a.pointee.ai_addr, a.pointee.ai_addrlen) == 0 {
                var none = timeval()
                _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, socklen_t(MemoryLayout<timeval>.size))
                return .success(fd)
            }
            lastError = String(cString: strerror(errno))
            close(fd)
        }
        return .failure(GateRefusal(lastError, byPolicy: !tried))
    }

    /// Copies bytes both ways until either side closes. Returns (client→upstream, upstream→client).
    static func relay(_ a: Int32, _ b: Int32) -> (Int, Int) {
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

    /// POLLRDHUP (Linux, <poll.h> with _GNU_SOURCE): the peer closed or shut down its side.
    static let pollRDHUP: Int16 = 0x2000

    /// Every byte of `bytes` to socket `fd` (never SIGPIPE): false when the peer is gone.
    private func sendAll(_ fd: Int32, _ bytes: ArraySlice<UInt8>) -> Bool {
        var offset = bytes.startIndex
        while offset < bytes.endIndex {
            let m = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if m < 0 && errno == EINTR { continue }
            if m <= 0 { return false }
            offset += m
        }
        return true
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

    static func text(_ sa: UnsafeMutablePointer<sockaddr>) -> String {
        var buf = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        if Int32(sa.pointee.sa_family) == AF_INET {
            var a = sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
            inet_ntop(AF_INET, &a, &buf, socklen_t(buf.count))
        } else {
            var a = sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
            inet_ntop(AF_INET6, &a, &buf, socklen_t(buf.count))
        }
        return String(cString: buf)
    }

    /// `[::1]` → `::1`: the address in an IPv6 `host:port` target.
    static func unbracketed(_ host: String) -> String {
        host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
    }

    /// True when `host` (a `host:port` entry's host, `[v6]` bracketed) is an IP address the
    /// proxy counts as internal: an allowlist entry naming it reaches this host's own or an
    /// internal network (`isInternal`). Names are not resolved: the proxy refuses a name that
    /// resolves to such an address unless the address itself is listed.
    public static func isInternalLiteral(_ host: String) -> Bool {
        let h = unbracketed(host)
        var a4 = in_addr(), a6 = in6_addr()
        if inet_pton(AF_INET, h, &a4) == 1 {
            var sa = sockaddr_in()
            sa.sin_family = sa_family_t(AF_INET)
            sa.sin_addr = a4
            return withUnsafeMutablePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { isInternal($0) } }
        }
        if inet_pton(AF_INET6, h, &a6) == 1 {
            var sa = sockaddr_in6()
            sa.sin6_family = sa_family_t(AF_INET6)
            sa.sin6_addr = a6
            return withUnsafeMutablePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { isInternal($0) } }
        }
        return false
    }

    static func isIPLiteral(_ host: String) -> Bool {
        var a4 = in_addr(), a6 = in6_addr()
        let h = unbracketed(host)
        return inet_pton(AF_INET, h, &a4) == 1 || inet_pton(AF_INET6, h, &a6) == 1
    }

    /// True for any address the proxy must not dial for a name: every range of IANA's IPv4
    /// and IPv6 special-purpose registries that is not globally reachable (loopback,
    /// private, shared, link-local, benchmarking, documentation, multicast, reserved, …), the
    /// IPv4-mapped/compatible, NAT64 and 6to4 forms of those, and every address of this
    /// host's own interfaces (a name resolving to the host's public address would reach
    /// services listening on all interfaces). An operator reaches an internal `host:port` only
    /// by listing the literal address.
    static func isInternal(_ sa: UnsafeMutablePointer<sockaddr>) -> Bool {
        switch Int32(sa.pointee.sa_family) {
        case AF_INET:
            let a = sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt32(bigEndian: $0.pointee.sin_addr.s_addr) }
            return AddressClass.isSpecialPurpose(v4: a) || HostAddresses.current.v4.contains(a)
        case AF_INET6:
            let bytes = sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { p in
                withUnsafeBytes(of: p.pointee.sin6_addr) { Array($0) }
            }
            return AddressClass.isSpecialPurpose(v6: bytes) || HostAddresses.current.v6.contains(bytes)
        default:
            return true
        }
    }
}

/// IANA's special-purpose address registries, as predicates (the entries marked not
/// globally reachable, plus multicast and the reserved blocks), and the cloud platform
/// endpoints that sit in public space.
enum AddressClass {
    /// (network, prefix length) for IPv4.
    static let v4Blocks: [(UInt32, Int)] = [
        (0x0000_0000, 8),    // 0.0.0.0/8 "this network"
        (0x0A00_0000, 8),    // 10/8 private
        (0x6440_0000, 10),   // 100.64/10 shared (CGN)
        (0x7F00_0000, 8),    // 127/8 loopback
        (0xA9FE_0000, 16),   // 169.254/16 link-local (cloud metadata)
        (0xA83F_8110, 32),   // 168.63.129.16 Azure's platform endpoint (wireserver), public space
        (0xAC10_0000, 12),   // 172.16/12 private
        (0xC000_0000, 24),   // 192.0.0/24 IETF protocol assignments
        (0xC000_0200, 24),   // 192.0.2/24 TEST-NET-1
        (0xC058_6300, 24),   // 192.88.99/24 6to4 relay anycast (deprecated)
        (0xC0A8_0000, 16),   // 192.168/16 private
        (0xC612_0000, 15),   // 198.18/15 benchmarking
        (0xC633_6400, 24),   // 198.51.100/24 TEST-NET-2
        (0xCB00_7100, 24),   // 203.0.113/24 TEST-NET-3
        (0xE000_0000, 4),    // 224/4 multicast
        (0xF000_0000, 4),    // 240/4 reserved, and 255.255.255.255
    ]

    static func isSpecialPurpose(v4 a: UInt32) -> Bool {
        v4Blocks.contains { net, len in a >> UInt32(32 - len) == net >> UInt32(32 - len) }
    }

    static func isSpecialPurpose(v6 b: [UInt8]) -> Bool {
        guard b.count == 16 else { return true }
        func v4(at i: Int) -> UInt32 { UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3]) }
        func prefix(_ p: [UInt8], bits: Int) -> Bool {
            for i in 0..<(bits / 8) where b[i] != p[i] { return false }
            let rest = bits % 8
            return rest == 0 || (b[bits / 8] >> UInt8(8 - rest)) == (p[bits / 8] >> UInt8(8 - rest))
        }
        let zero = [UInt8](repeating: 0, count: 16)
        if prefix(zero, bits: 96) { return true }  // ::, ::1, IPv4-compatible ::a.b.c.d
        if prefix(zero, bits: 80) && b[10] == 0xFF && b[11] == 0xFF { return true }  // ::ffff:a.b.c.d mapped
        if prefix([0x00, 0x64, 0xFF, 0x9B] + zero, bits: 96) { return isSpecialPurpose(v4: v4(at: 12)) }  // 64:ff9b::/96 NAT64
        if prefix([0x00, 0x64, 0xFF, 0x9B, 0x00, 0x01] + zero, bits: 48) { return true }  // 64:ff9b:1::/48 local NAT64
        if prefix([0x01, 0x00] + zero, bits: 64) { return true }  // 100::/64 discard
        if prefix([0x20, 0x01] + zero, bits: 23) { return true }  // 2001::/23 IETF protocol assignments (Teredo, …)
        if prefix([0x20, 0x01, 0x0D, 0xB8] + zero, bits: 32) { return true }  // 2001:db8::/32 documentation
        if prefix([0x20, 0x02] + zero, bits: 16) { return isSpecialPurpose(v4: v4(at: 2)) }  // 2002::/16 6to4
        if prefix([0x3F, 0xFF] + zero, bits: 20) { return true }  // 3fff::/20 documentation
        if prefix([0x5F, 0x00] + zero, bits: 16) { return true }  // 5f00::/16 segment routing
        if prefix([0xFC] + zero, bits: 7) { return true }  // fc00::/7 unique-local
        if prefix([0xFE, 0x80] + zero, bits: 10) { return true }  // fe80::/10 link-local
        if prefix([0xFE, 0xC0] + zero, bits: 10) { return true }  // fec0::/10 site-local (deprecated)
        if b[0] == 0xFF { return true }  // ff00::/8 multicast
        return false
    }
}

/// This host's interface addresses, re-read at most once a second (interfaces come and go).
final class HostAddresses: @unchecked Sendable {
    let v4: Set<UInt32>
    let v6: Set<[UInt8]>
    private let read: Double

    private init() {
        var v4 = Set<UInt32>(), v6 = Set<[UInt8]>()
        var list: UnsafeMutablePointer<ifaddrs>?
        if getifaddrs(&list) == 0 {
            var p = list
            while let i = p {
                defer { p = i.pointee.ifa_next }
                guard let sa = i.pointee.ifa_addr else { continue }
                if Int32(sa.pointee.sa_family) == AF_INET {
                    v4.insert(sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { UInt32(bigEndian: $0.pointee.sin_addr.s_addr) })
                } else if Int32(sa.pointee.sa_family) == AF_INET6 {
                    v6.insert(sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { p in withUnsafeBytes(of: p.pointee.sin6_addr) { Array($0) } })
                }
            }
            freeifaddrs(list)
        }
        self.v4 = v4
        self.v6 = v6
        read = monotonicNow()
    }

    private static let cache = Locked<HostAddresses?>(nil)

    static var current: HostAddresses {
        cache.withLock {
            if let c = cache.value, monotonicNow() - c.read < 1 { return c }
            let fresh = HostAddresses()
            cache.value = fresh
            return fresh
        }
    }
}

/// Runs `body` on a new detached pthread (the proxy's blocking I/O must not occupy the
/// cooperative pool). False when the thread could not be made (`body` never runs).
@discardableResult
public func detachedThread(_ body: @escaping @Sendable () -> Void) -> Bool {
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
    return rc == 0
}
