@testable import Sandbox
import Glibc
import SupervisorIO
import Testing

/// The plain-HTTP requests the egress proxy forwards (`PlainHTTP`): GET and HEAD in absolute
/// form only, rebuilt so the server reads exactly the one request the allowlist judged.
struct PlainHTTPTests {
    static func parse(_ head: String) -> Result<PlainHTTP.Request, PlainHTTP.Refused> { PlainHTTP.parse(head) }

    @Test("apt's request: origin form to the server, Host from the URL, one request (Connection: close), the proxy's headers gone")
    func aptRequest() throws {
        let head = "GET http://Deb.Debian.org/debian/dists/bookworm/InRelease HTTP/1.1\r\nHost: deb.debian.org\r\nUser-Agent: Debian APT-HTTP/1.3 (2.6.1)\r\n"
            + "Cache-Control: max-age=0\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nProxy-Authorization: Basic eDp5\r\nIf-Modified-Since: Sat, 28 Nov 2026 00:00:00 GMT\r\n\r\n"
        let r = try Self.parse(head).get()
        #expect(r.method == "GET" && r.target == "deb.debian.org:80" && r.host == "deb.debian.org" && r.port == 80)
        #expect(r.upstreamHead == "GET /debian/dists/bookworm/InRelease HTTP/1.1\r\nHost: deb.debian.org\r\nUser-Agent: Debian APT-HTTP/1.3 (2.6.1)\r\n"
                + "Cache-Control: max-age=0\r\nIf-Modified-Since: Sat, 28 Nov 2026 00:00:00 GMT\r\nConnection: close\r\n\r\n")
        let ported = try Self.parse("HEAD http://127.0.0.1:8080?x=1 HTTP/1.0\r\n\r\n").get()
        #expect(ported.target == "127.0.0.1:8080" && ported.upstreamHead == "HEAD /?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nConnection: close\r\n\r\n")
        let v6 = try Self.parse("GET http://[::1]:81/p HTTP/1.1\r\n\r\n").get()
        #expect(v6.target == "[::1]:81" && v6.host == "[::1]")
    }

    @Test("refused: a body (Content-Length, chunked), another method, an origin-form or https URL, userinfo, a fragment, a folded or control-character header, a bad port", arguments: [
        "POST http://h/ HTTP/1.1\r\n\r\n",
        "PUT http://h/ HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        "GET http://h/ HTTP/1.1\r\nContent-Length: 5\r\n\r\n",
        "GET http://h/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET /path HTTP/1.1\r\nHost: h\r\n\r\n",
        "GET https://h/ HTTP/1.1\r\n\r\n",
        "GET http://user:pw@h/ HTTP/1.1\r\n\r\n",
        "GET http://h/#frag HTTP/1.1\r\n\r\n",
        "GET http://h/ HTTP/1.1\r\nX-A: 1\r\n folded: 2\r\n\r\n",
        "GET http://h/ HTTP/1.1\r\nX-A: a\u{0}b\r\n\r\n",
        "GET http://h/ HTTP/1.1\r\nX-A: a\nGET http://other/ HTTP/1.1\r\n\r\n",
        "GET http://h:0/ HTTP/1.1\r\n\r\n",
        "GET http://h/ HTTP/1.1\r\nHost\t: evil.example\r\n\r\n",
        "GET http://h/ HTTP/1.1\r\nTransfer-Encoding\t: chunked\r\n\r\n",
        "GET http://h/ HTTP/1.1\r\nContent-Length : 5\r\n\r\n",
        "GET http://h:99999/ HTTP/1.1\r\n\r\n",
        "GET http://h/ HTTP/2\r\n\r\n",
        "GET http://h/a\u{1}b HTTP/1.1\r\n\r\n",
        "GET http:// HTTP/1.1\r\n\r\n",
    ])
    func refused(head: String) {
        if case .success(let r) = Self.parse(head) { Issue.record("forwarded: \(r.upstreamHead.debugDescription)") }
    }

    /// A socket pair: one end for the test (a sandbox's client), one for the proxy to adopt.
    static func pair() -> (Int32, Int32) {
        var p: [Int32] = [-1, -1]
        _ = socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &p)
        return (p[0], p[1])
    }

    @Test("a request head sent a byte at a time is given up after 10 s in all (not 10 s per byte), and recorded")
    func slowHeadCut() throws {
        let audit = AuditLog()
        let proxy = EgressProxy(allow: ["127.0.0.1:9"], inference: nil, audit: audit, sandbox: "s")
        let (client, served) = Self.pair()
        defer { close(client); proxy.stop() }
        proxy.adopt(served)
        let start = monotonicNow()
        var closed = false
        for byte in Array("GET http://127.0.0.1:9/ HTTP/1.1\r\n".utf8) {
            if send(client, [byte], 1, Int32(MSG_NOSIGNAL)) != 1 { closed = true; break }
            var p = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
            if poll(&p, 1, 2_000) > 0 { closed = true; break }  // the proxy closed (EOF)
        }
        #expect(closed && monotonicNow() - start < 14, "still open after \(monotonicNow() - start) s")
        #expect(proxy.drain(timeout: 5))
        #expect(audit.events.contains { $0.action == "denied" && ($0.detail ?? "").contains("no complete request head") }, "\(audit.events)")
    }

    @Test("a client that hangs up while a server keeps silent ends its plain-HTTP request at once, recorded, its connection freed")
    func hangUpFreesConnection() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        defer { close(listener) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, len) } }
        _ = listen(listener, 8)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &len) } }
        let port = UInt16(bigEndian: addr.sin_port)
        let audit = AuditLog()
        let proxy = EgressProxy(allow: ["127.0.0.1:\(port)"], inference: nil, audit: audit, sandbox: "s")
        defer { proxy.stop() }
        let (client, served) = Self.pair()
        proxy.adopt(served)
        let head = Array("GET http://127.0.0.1:\(port)/slow HTTP/1.1\r\nHost: x\r\n\r\n".utf8)
        #expect(send(client, head, head.count, Int32(MSG_NOSIGNAL)) == head.count)
        let upstream = accept(listener, nil, nil)  // the silent server takes the request and says nothing
        defer { close(upstream) }
        usleep(300_000)
        close(client)
        #expect(proxy.drain(timeout: 3), "the connection was held after its client hung up")
        #expect(audit.events.contains { $0.name == "127.0.0.1:\(port)" && $0.action == "allowed" && $0.detail == "GET over plain HTTP" }, "\(audit.events)")
    }
}
