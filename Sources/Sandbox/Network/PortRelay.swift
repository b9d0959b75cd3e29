import CSystemCalls
import Glibc
import SupervisorIO

/// TCP from one network namespace to the ports another's processes listen on, and nothing
/// else: how a verifier reaches the services the agent phase left running (`Survivors`)
/// without sharing their namespace (its abstract Unix sockets, its /proc/net, its ports, the
/// agent's egress proxy).
///
/// Every `interval` the relay lists the sockets listening in `from` (its /proc/net/tcp and
/// tcp6, read by a thread inside it) and, for each new one, listens on the same loopback
/// address and port in `into` (a wildcard listener on 127.0.0.1 and ::1). Each connection
/// accepted there is dialled to the same address and port in `from`, on a thread of its own,
/// and its bytes copied both ways. (The agent phase's egress proxy, which listened in `from`,
/// ended with its payload: nothing of it is relayed.) A port taken in `into` by the time the relay would listen there stays the taker's.
public final class PortRelay: @unchecked Sendable {
    private let from: NamespaceThread
    private let into: NamespaceThread
    private let interval: Double
    private let lock = Mutex()
    private var stopped = false
    private var listeners: [Endpoint: Int32] = [:]
    private var connections: [Endpoint: Int] = [:]
    private var open: Set<Int32> = []
    /// Connections being set up or relayed (each holds two descriptors and a thread).
    private var active = 0
    /// Endpoints not relayed because `maxListeners` were already.
    private var refused: Set<Endpoint> = []
    private var wake: (Int32, Int32) = (-1, -1)

    /// At most this many listeners and relayed connections at once: the survivors choose how
    /// many ports they listen on, and each costs the supervisor a descriptor (an adversarial
    /// review pinned it at 11 000 with 12 600 ports, and another task's setup failed for want
    /// of one).
    public static let maxListeners = 64
    public static let maxConnections = 256

    /// How many ports the survivors listened on beyond `maxListeners`, not relayed.
    public var notRelayed: Int { lock.withLock { refused.count } }

    /// An address (4 or 16 bytes) and port.
    struct Endpoint: Hashable, Comparable {
        var address: [UInt8]
        var port: UInt16
        var description: String {
            address.count == 4 ? "\(address.map(String.init).joined(separator: ".")):\(port)" : "[\(Self.ipv6(address))]:\(port)"
        }
        static func < (a: Endpoint, b: Endpoint) -> Bool { (a.port, a.description) < (b.port, b.description) }
        static func ipv6(_ a: [UInt8]) -> String {
            a == [UInt8](repeating: 0, count: 15) + [1] ? "::1" : stride(from: 0, to: 16, by: 2).map { String(UInt16(a[$0]) << 8 | UInt16(a[$0 + 1]), radix: 16) }.joined(separator: ":")
        }
    }

    /// Relays from the namespace `from` (a descriptor: the survivors') into `into` (the
    /// verifier's); both stay the caller's.
    public init(from: Int32, into: Int32, interval: Double = 0.05) throws(SandboxError) {
        self.from = try NamespaceThread(entering: from)
        do throws(SandboxError) {
            self.into = try NamespaceThread(entering: into)
        } catch {
            self.from.stop()
            throw error
        }
        self.interval = interval
        var fds: [Int32] = [-1, -1]
        var failure: SandboxError?
        if socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &fds) != 0 {
            failure = SandboxError(.launch, "socketpair: \(String(cString: strerror(errno)))", errno: errno)
        } else if let e = self.into.run({ ahs_loopback_up() }), e != 0 {
            // `lo` up in `into` now (its sandbox's monitor would, later).
            failure = SandboxError(.launch, "lo up in the relay's namespace: \(String(cString: strerror(-e)))", errno: -e)
        }
        wake = (fds[0], fds[1])
        if failure == nil {
            // The ports already listening are relayed before this returns: a test's first
            // connection finds them.
            refresh()
            if !detachedThread({ [self] in loop() }) { failure = SandboxError(.launch, "no thread for the port relay") }
        }
        if let failure {
            _ = stop()
            throw failure
        }
    }

    /// Stops listening, ends every relayed connection, and says what was relayed: each
    /// endpoint and its connections, sorted.
    public func stop() -> [(String, Int)] {
        let first = lock.withLock { () -> Bool in
            defer { stopped = true }
            guard !stopped else { return false }
            for fd in listeners.values { shutdown(fd, Int32(SHUT_RDWR)) }
            for fd in open { shutdown(fd, Int32(SHUT_RDWR)) }
            var b: UInt8 = 1
            if wake.1 >= 0 { _ = send(wake.1, &b, 1, Int32(MSG_NOSIGNAL)) }
            return true
        }
        if first {
            from.stop()
            into.stop()
        }
        return lock.withLock { connections.sorted { $0.key < $1.key }.map { ($0.key.description, $0.value) } }
    }

    deinit {
        for fd in listeners.values { close(fd) }
        for fd in [wake.0, wake.1] where fd >= 0 { close(fd) }
    }

    private func loop() {
        var next = 0.0
        while true {
            if lock.withLock({ stopped }) { break }
            if monotonicNow() >= next {
                refresh()
                next = monotonicNow() + interval
            }
            var fds = lock.withLock { listeners.map { pollfd(fd: $0.value, events: Int16(POLLIN), revents: 0) } }
            fds.append(pollfd(fd: wake.0, events: Int16(POLLIN), revents: 0))
            let n = poll(&fds, nfds_t(fds.count), Int32(interval * 1000) + 1)
            if n <= 0 { continue }
            for p in fds where p.revents & Int16(POLLIN) != 0 && p.fd != wake.0 {
                let client = ahs_accept_cloexec(p.fd)
                guard client >= 0 else { continue }
                guard let target = lock.withLock({ listeners.first { $0.value == p.fd }?.key }) else { close(client); continue }
                serve(client, to: target)
            }
        }
    }

    /// Listens in `into` for every socket now listening in `from` that has no listener yet.
    private func refresh() {
        // Lowest ports first: where more than `maxListeners` are open, the services a test
        // asks for (80, 8080, 5000) are kept, not an arbitrary slice of the kernel's table.
        let listening = (from.run { PortRelay.listening() } ?? [])
            .sorted { $0.port != $1.port ? $0.port < $1.port : $0.address.lexicographicallyPrecedes($1.address) }
        for endpoint in listening {
            for local in Self.loopbackFor(endpoint) where lock.withLock({ listeners[local] == nil && !stopped && !refused.contains(local) }) {
                guard lock.withLock({ listeners.count < Self.maxListeners }) else {
                    _ = lock.withLock { refused.insert(local) }
                    continue
                }
                guard let fd = into.run({ PortRelay.listen(local) }), fd >= 0 else { continue }
                lock.withLock { listeners[local] = fd }
            }
        }
    }

    /// One accepted connection, dialled in `from` and copied both ways on a thread of its own.
    private func serve(_ client: Int32, to target: Endpoint) {
        guard lock.withLock({ () -> Bool in
            guard active < Self.maxConnections else { return false }
            active += 1
            return true
        }) else { close(client); return }
        let ok = detachedThread { [self] in
            defer { lock.withLock { active -= 1 } }
            let upstream = from.run { PortRelay.socket(for: target) } ?? -1
            defer { close(client) }
            guard upstream >= 0 else { return }
            defer { close(upstream) }
            guard PortRelay.connect(upstream, to: target) else { return }
            let go = lock.withLock { () -> Bool in
                guard !stopped else { return false }
                open.insert(client)
                open.insert(upstream)
                connections[target, default: 0] += 1
                return true
            }
            guard go else { return }
            _ = EgressProxy.relay(client, upstream)
            lock.withLock {
                open.remove(client)
                open.remove(upstream)
            }
        }
        if !ok {
            close(client)
            lock.withLock { active -= 1 }
        }
    }

    /// What a listener on `e` answers for in the other namespace: IPv4's wildcard 127.0.0.1;
    /// IPv6's both loopbacks (a dual-stack socket, Linux's default, takes IPv4 too); an address
    /// on `lo` (127/8, ::1) itself; any other (an interface the survivors' namespace does not
    /// have) nothing. Never a family the listener does not take: a client that resolves
    /// `localhost` tries ::1 first, and a relay there to an IPv4-only server (nginx's
    /// `listen 8080`) would accept and then reset it, where a refusal sends it on to 127.0.0.1.
    static func loopbackFor(_ e: Endpoint) -> [Endpoint] {
        let v4 = Endpoint(address: [127, 0, 0, 1], port: e.port), v6 = Endpoint(address: [UInt8](repeating: 0, count: 15) + [1], port: e.port)
        if e.address.allSatisfy({ $0 == 0 }) { return e.address.count == 4 ? [v4] : [v4, v6] }
        if e.address.count == 4 && e.address[0] == 127 { return [e] }
        if e.address == [UInt8](repeating: 0, count: 15) + [1] { return [e] }
        return []
    }

    /// The TCP sockets listening in this thread's network namespace.
    static func listening() -> [Endpoint] {
        var out: [Endpoint] = []
        for (file, size) in [("tcp", 4), ("tcp6", 16)] {
            for line in readText("/proc/thread-self/net/\(file)").split(separator: "\n").dropFirst() {
                let f = line.split(separator: " ", omittingEmptySubsequences: true)
                guard f.count > 3, f[3] == "0A" else { continue }  // TCP_LISTEN
                let parts = f[1].split(separator: ":")
                guard parts.count == 2, parts[0].count == size * 2, let port = UInt16(parts[1], radix: 16) else { continue }
                // The kernel prints each 32-bit word of the address in host (little-endian) order.
                var bytes: [UInt8] = []
                let hex = Array(parts[0])
                for word in stride(from: 0, to: hex.count, by: 8) {
                    var w: [UInt8] = []
                    for i in stride(from: word, to: word + 8, by: 2) { w.append(UInt8(String(hex[i..<i + 2]), radix: 16) ?? 0) }
                    bytes += w.reversed()
                }
                out.append(Endpoint(address: bytes, port: port))
            }
        }
        return out
    }

    static func socket(for e: Endpoint) -> Int32 {
        Glibc.socket(e.address.count == 4 ? AF_INET : AF_INET6, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    }

    static func listen(_ e: Endpoint) -> Int32 {
        let fd = socket(for: e)
        guard fd >= 0 else { return -1 }
        var one: Int32 = 1
        if e.address.count == 16 { _ = setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, 4) }
        guard withAddress(e, { bind(fd, $0, $1) }) == 0, Glibc.listen(fd, 64) == 0 else {
            close(fd)
            return -1
        }
        return fd
    }

    /// Connects within 5 s.
    static func connect(_ fd: Int32, to e: Endpoint) -> Bool {
        var tv = timeval(tv_sec: 5, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        let r = withAddress(e) { Glibc.connect(fd, $0, $1) }
        tv = timeval(tv_sec: 0, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        return r == 0
    }

    static func withAddress(_ e: Endpoint, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Int32) -> Int32 {
        if e.address.count == 4 {
            var sa = sockaddr_in()
            sa.sin_family = sa_family_t(AF_INET)
            sa.sin_port = e.port.bigEndian
            withUnsafeMutableBytes(of: &sa.sin_addr) { $0.copyBytes(from: e.address) }
            return withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
        var sa = sockaddr_in6()
        sa.sin6_family = sa_family_t(AF_INET6)
        sa.sin6_port = e.port.bigEndian
        withUnsafeMutableBytes(of: &sa.sin6_addr) { $0.copyBytes(from: e.address) }
        return withUnsafePointer(to: &sa) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_in6>.size)) } }
    }
}

/// A thread that has entered a network namespace and runs what it is given there: sockets it
/// makes belong to that namespace, and /proc/thread-self/net is that namespace's. It never
/// returns to the process's namespace; it ends with `stop()`.
final class NamespaceThread: @unchecked Sendable {
    private var mutex = pthread_mutex_t()
    private var cond = pthread_cond_t()
    private var job: (() -> Void)?
    private var done = false
    private var ended = false
    private var entered: Int32 = 0  // 0: not yet; 1: in; -errno: could not

    init(entering namespace: Int32) throws(SandboxError) {
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&cond, nil)
        let fd = fcntl(namespace, F_DUPFD_CLOEXEC, 0)
        guard fd >= 0 else { throw SandboxError(.launch, "the namespace to relay: \(String(cString: strerror(errno)))", errno: errno) }
        let started = detachedThread { [self] in
            let e = ahs_setns_net(fd)
            let r = e == 0 ? 1 : e
            close(fd)
            pthread_mutex_lock(&mutex)
            entered = r
            pthread_cond_broadcast(&cond)
            while !ended {
                if let j = job {
                    j()
                    job = nil
                    done = true
                    pthread_cond_broadcast(&cond)
                } else {
                    pthread_cond_wait(&cond, &mutex)
                }
            }
            pthread_mutex_unlock(&mutex)
        }
        guard started else {
            close(fd)
            throw SandboxError(.launch, "no thread to enter the namespace on")
        }
        pthread_mutex_lock(&mutex)
        while entered == 0 { pthread_cond_wait(&cond, &mutex) }
        let r = entered
        pthread_mutex_unlock(&mutex)
        guard r == 1 else { throw SandboxError(.launch, "setns(CLONE_NEWNET): \(String(cString: strerror(-r)))", errno: -r) }
    }

    /// `body`'s result, run on the thread (one job at a time); nil once stopped.
    func run<T>(_ body: @escaping () -> T) -> T? {
        var result: T?
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        while job != nil && !ended { pthread_cond_wait(&cond, &mutex) }
        guard !ended else { return nil }
        done = false
        job = { result = body() }
        pthread_cond_broadcast(&cond)
        while !done && !ended { pthread_cond_wait(&cond, &mutex) }
        return done ? result : nil
    }

    func stop() {
        pthread_mutex_lock(&mutex)
        ended = true
        pthread_cond_broadcast(&cond)
        pthread_mutex_unlock(&mutex)
    }
}
