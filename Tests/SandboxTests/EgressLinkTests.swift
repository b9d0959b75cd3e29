@testable import Sandbox
import Foundation
import Testing
import TestSupport

/// Socket helpers for the link's tests (blocking sockets, short timeouts).
private enum Sock {
    static func pair() -> (Int32, Int32) {
        var p: [Int32] = [-1, -1]
        _ = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &p)
        return (p[0], p[1])
    }

    static func timeout(_ fd: Int32, seconds: Int = 10) {
        var tv = timeval(tv_sec: seconds, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }

    static func sendAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool {
        var at = 0
        while at < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + at, $0.count - at, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return false }
            at += n
        }
        return true
    }

    /// Everything until EOF (or an error/timeout: then what came so far).
    static func readAll(_ fd: Int32, cap: Int = 64 << 20) -> [UInt8] {
        var out: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while out.count < cap {
            let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            out += buf[0..<n]
        }
        return out
    }

    static func frame(_ type: UInt8, _ id: UInt32, _ payload: [UInt8]) -> [UInt8] { EgressLink.frame(type, id, payload) }
}

/// A pair of linked ends over one socketpair (the virtio-serial port's stand-in): an opener
/// and an acceptor whose streams echo what they receive, reversed in case, until EOF.
private final class EchoLinks: @unchecked Sendable {
    let opener: EgressLink
    let acceptor: EgressLink
    let tags = Locked<[String]>([])

    init(stall: Bool = false) {
        let (a, b) = Sock.pair()
        opener = EgressLink(port: a, role: .opener)
        let tags = self.tags
        acceptor = EgressLink(port: b, role: .acceptor) { tag, fd in
            tags.withLock { tags.value.append(tag) }
            Thread {
                defer { close(fd) }
                // "stall": the first stream never reads (its window fills and stays full).
                if stall && tag == "stall" { sleep(30); return }
                var buf = [UInt8](repeating: 0, count: 65536)
                while true {
                    let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
                    if n <= 0 { break }
                    guard Sock.sendAll(fd, buf[0..<n].map { $0 ^ 0x20 }) else { return }
                }
                shutdown(fd, Int32(SHUT_WR))
            }.start()
        }
        opener.start()
        acceptor.start()
    }

    func stop() {
        opener.stop()
        acceptor.stop()
    }
}

@Suite("Egress link (the held-out VM's streams to the host's proxy)")
struct EgressLinkTests {
    @Test("eight streams of 3 MiB each (twelve windows) cross both ways intact, with half closes passed on")
    func manyStreamsIntact() throws {
        let links = EchoLinks()
        defer { links.stop() }
        let size = 3 << 20
        let results = Locked<[Int: Bool]>([:])
        let group = DispatchGroup()
        for i in 0..<8 {
            group.enter()
            Thread {
                defer { group.leave() }
                guard let fd = links.opener.open(tag: "agent") else { return }
                defer { close(fd) }
                Sock.timeout(fd, seconds: 30)
                let data = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ i) }
                // Written by one thread while this one reads: the echo comes back as it goes.
                Thread {
                    _ = Sock.sendAll(fd, data)
                    shutdown(fd, Int32(SHUT_WR))
                }.start()
                let back = Sock.readAll(fd)
                results.withLock { results.value[i] = back == data.map { $0 ^ 0x20 } }
            }.start()
        }
        #expect(group.wait(timeout: .now() + 60) == .success)
        #expect(results.withLock { results.value } == Dictionary(uniqueKeysWithValues: (0..<8).map { ($0, true) }))
        #expect(links.tags.withLock { links.tags.value.count } == 8)
        #expect(links.opener.failure == nil && links.acceptor.failure == nil)
    }

    @Test("a stream whose reader stalls holds its window and nothing else: another stream still completes")
    func stalledStreamDoesNotBlock() throws {
        let links = EchoLinks(stall: true)
        defer { links.stop() }
        let stalled = try #require(links.opener.open(tag: "stall"))
        defer { close(stalled) }
        // Far more than a window: the writer blocks once the link stops reading it.
        let writer = Thread { _ = Sock.sendAll(stalled, [UInt8](repeating: 7, count: 8 << 20)) }
        writer.start()
        usleep(300_000)
        let fd = try #require(links.opener.open(tag: "agent"))
        defer { close(fd) }
        Sock.timeout(fd)
        #expect(Sock.sendAll(fd, Array("hello".utf8)))
        shutdown(fd, Int32(SHUT_WR))
        #expect(Sock.readAll(fd) == Array("HELLO".utf8))
    }

    @Test("the opener holds at most maxStreams streams; a closed one frees its place")
    func streamLimit() throws {
        let links = EchoLinks()
        defer { links.stop() }
        var fds: [Int32] = []
        for _ in 0..<EgressLink.maxStreams { fds.append(try #require(links.opener.open(tag: "agent"))) }
        #expect(links.opener.open(tag: "agent") == nil)
        // One closed both ways (the echo side closes too): its place comes back.
        shutdown(fds[0], Int32(SHUT_WR))
        _ = Sock.readAll(fds[0])
        close(fds.removeFirst())
        var again: Int32?
        for _ in 0..<100 where again == nil {
            again = links.opener.open(tag: "agent")
            if again == nil { usleep(20_000) }
        }
        #expect(again != nil)
        for fd in fds + [again ?? -1] where fd >= 0 { close(fd) }
        #expect(links.opener.open(tag: "Bad Tag!") == nil)
        #expect(links.acceptor.open(tag: "agent") == nil)
    }

    /// The acceptor (the host) against a peer that breaks the protocol: each case ends the
    /// link with a protocol error, and a stream it had opened sees its connection end.
    static let brokenFrames: [String: (frames: [[UInt8]], expected: String)] = {
        let open = Sock.frame(1, 1, Array("agent".utf8))
        return [
            "unknown type": ([open, Sock.frame(9, 1, [])], "unknown frame type"),
            "oversized frame": ([open, [2, 0, 0, 0, 1, 0, 1, 0, 1]], "bytes (at most"),
            // 640 KiB without waiting for a CREDIT: the unread local socket takes part of it
            // (and is credited), the window the rest, and then no more.
            "DATA beyond the window": ([open] + Array(repeating: Sock.frame(2, 1, [UInt8](repeating: 1, count: 16 << 10)), count: 40), "beyond the window"),
            "OPEN out of order": ([Sock.frame(1, 3, Array("agent".utf8))], "out of order"),
            "a frame for a stream never opened": ([Sock.frame(3, 5, [])], "never opened"),
            "a bad tag": ([Sock.frame(1, 1, Array("../x".utf8))], "tag"),
            "DATA after EOF": ([open, Sock.frame(3, 1, []), Sock.frame(2, 1, [1])], "after EOF"),
            "a CREDIT beyond the window": ([open, Sock.frame(5, 1, [0, 0, 0, 1])], "CREDIT beyond"),
            "an empty DATA frame": ([open, Sock.frame(2, 1, [])], "empty DATA"),
        ]
    }()

    /// The acceptor (the host) against a peer that breaks the protocol: each case ends the
    /// link with a protocol error, and a stream it had opened sees its connection end.
    @Test("the host's end refuses a broken protocol and stops", arguments: Array(EgressLinkTests.brokenFrames.keys).sorted())
    func protocolErrors(_ name: String) throws {
        let (frames, expected) = Self.brokenFrames[name]!
        let (a, b) = Sock.pair()
        Sock.timeout(a, seconds: 5)
        let opened = Locked<[Int32]>([])
        // Streams the host side opens are held (not read), as a proxy waiting for a head.
        let link = EgressLink(port: b, role: .acceptor) { _, fd in opened.withLock { opened.value.append(fd) } }
        link.start()
        defer {
            link.stop()
            close(a)
            for fd in opened.withLock({ opened.value }) { close(fd) }
        }
        for f in frames { _ = Sock.sendAll(a, f) }
        #expect(link.waitUntilEnded(timeout: 5), "\(name): the link kept going")
        #expect(link.failure?.contains(expected) == true, "\(name): \(link.failure ?? "no failure")")
        // The port was closed: the peer reads its end (a reset, when the link left bytes of
        // the peer's unread), not the 5 s timeout of a port still open.
        var buf = [UInt8](repeating: 0, count: 64)
        var n = 1
        while n > 0 { n = recv(a, &buf, 64, 0) }
        let e = errno
        #expect(n == 0 || e == ECONNRESET, "\(name): the port is still open (\(String(cString: strerror(e))))")
        // A stream it had opened ends too (after what was delivered before the error).
        for fd in opened.withLock({ opened.value }) {
            Sock.timeout(fd, seconds: 2)
            var r = 1
            while r > 0 { r = recv(fd, &buf, 64, 0) }
            #expect(r == 0, "\(name): a stream outlived the link")
        }
    }

    @Test("the opener refuses a stream opened by the acceptor's side")
    func openerRefusesOpen() throws {
        let (a, b) = Sock.pair()
        let link = EgressLink(port: b, role: .opener)
        link.start()
        defer { link.stop(); close(a) }
        _ = Sock.sendAll(a, Sock.frame(1, 1, Array("agent".utf8)))
        #expect(link.waitUntilEnded(timeout: 5))
        #expect(link.failure?.contains("acceptor opened") == true, "\(link.failure ?? "none")")
    }

    /// The whole path a held-out VM's sandbox takes, without the VM: a guest proxy that only
    /// forwards, the link, and the host's proxy that judges and records.
    @Test("through the link, the host's proxy applies its allowlist and records every request; the guest's forwarder records nothing")
    func hostJudgesGuestConnections() throws {
        let allowed = try HostEchoServer()
        let denied = try HostEchoServer()
        let (a, b) = Sock.pair()
        let hostAudit = AuditLog(), guestAudit = AuditLog()
        let host = EgressProxy(allow: ["127.0.0.1:\(allowed.port)"], inference: nil, audit: hostAudit, sandbox: "held-out-vm")
        let tags = Locked<[String]>([])
        let acceptor = EgressLink(port: b, role: .acceptor) { tag, fd in
            tags.withLock { tags.value.append(tag) }
            host.adopt(fd)
        }
        let opener = EgressLink(port: a, role: .opener)
        acceptor.start()
        opener.start()
        // The guest's sandbox-facing listener, as the launcher would hand it over.
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, len) } }
        _ = listen(listener, 8)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &len) } }
        let guest = EgressProxy(listener: listener, allow: [], link: (opener, "agent"), audit: guestAudit, sandbox: "guest")
        guest.start()
        defer {
            guest.stop()
            opener.stop()
            acceptor.stop()
            host.stop()
        }
        func connect(_ target: String) -> String {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            defer { close(fd) }
            Sock.timeout(fd)
            var to = addr
            guard withUnsafePointer(to: &to, { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, len) } }) == 0 else { return "no connect" }
            _ = Sock.sendAll(fd, Array("CONNECT \(target) HTTP/1.1\r\nHost: \(target)\r\n\r\n".utf8))
            var head = [UInt8](repeating: 0, count: 39)
            let n = recv(fd, &head, head.count, Int32(MSG_WAITALL))
            let line = String(decoding: head[0..<max(0, n)], as: UTF8.self)
            guard line.hasPrefix("HTTP/1.1 200 Connection established\r\n\r\n") else { return line.split(separator: "\r\n").first.map(String.init) ?? "" }
            _ = Sock.sendAll(fd, Array("ping".utf8))
            return "200 | " + String(decoding: Sock.readAll(fd), as: UTF8.self)
        }
        #expect(connect("127.0.0.1:\(allowed.port)") == "200 | echo:ping")
        #expect(connect("127.0.0.1:\(denied.port)").hasPrefix("HTTP/1.1 403"))
        #expect(host.drain(timeout: 10))
        let events = hostAudit.events.filter { $0.kind == .egress }
        #expect(events.contains { $0.name == "127.0.0.1:\(allowed.port)" && $0.action == "allowed" && $0.sandbox == "held-out-vm" }, "\(events)")
        #expect(events.contains { $0.name == "127.0.0.1:\(denied.port)" && $0.action == "denied" }, "\(events)")
        #expect(guestAudit.events.isEmpty, "\(guestAudit.events)")
        #expect(tags.withLock { tags.value } == ["agent", "agent"])
    }

    @Test("a server that writes a 4 MiB response and closes at once loses none of it to a slow reader on the other side")
    func closeAfterResponseDelivers() throws {
        let (a, b) = Sock.pair()
        let size = 4 << 20
        let body = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let acceptor = EgressLink(port: b, role: .acceptor) { _, fd in
            // As the host's proxy does: the response, then a full close (no half close first).
            Thread {
                Sock.timeout(fd, seconds: 30)
                _ = Sock.sendAll(fd, body)
                close(fd)
            }.start()
        }
        let opener = EgressLink(port: a, role: .opener)
        acceptor.start()
        opener.start()
        defer { opener.stop(); acceptor.stop() }
        let fd = try #require(opener.open(tag: "agent"))
        defer { close(fd) }
        Sock.timeout(fd, seconds: 30)
        usleep(300_000)  // the server is done and gone before the reader starts
        var got: [UInt8] = []
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = buf.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n <= 0 { break }
            got += buf[0..<n]
            usleep(500)  // a slow reader
        }
        #expect(got.count == size && got == body, "\(got.count) of \(size) bytes")
    }

    @Test("a peer sending one-byte frames without reading gets a CREDIT per quarter window, not a frame back per frame in")
    func creditsCoalesced() throws {
        let (a, b) = Sock.pair()
        let sink = Locked<[Int32]>([])
        let link = EgressLink(port: b, role: .acceptor) { _, fd in
            sink.withLock { sink.value.append(fd) }
            Thread {
                var buf = [UInt8](repeating: 0, count: 65536)
                while recv(fd, &buf, buf.count, 0) > 0 {}
            }.start()
        }
        link.start()
        defer {
            link.stop()
            close(a)
            for fd in sink.withLock({ sink.value }) { close(fd) }
        }
        // 200,000 one-byte DATA frames (2.6 MB on the wire), within the credit as granted.
        var frames = Sock.frame(1, 1, Array("agent".utf8))
        for _ in 0..<200_000 { frames += Sock.frame(2, 1, [7]) }
        #expect(Sock.sendAll(a, frames))
        usleep(500_000)
        // What came back: a CREDIT per 64 KiB passed on (three here), not 200,000 of them.
        _ = fcntl(a, F_SETFL, fcntl(a, F_GETFL) | O_NONBLOCK)
        var back = 0
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = recv(a, &buf, buf.count, 0)
            if n <= 0 { break }
            back += n
        }
        #expect(back <= 13 * 8, "\(back) bytes queued back for 200,000 bytes in")
        #expect(link.failure == nil)
    }
}
