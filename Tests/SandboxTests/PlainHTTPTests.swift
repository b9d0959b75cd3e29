@testable import Sandbox
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
        "GET http://h:99999/ HTTP/1.1\r\n\r\n",
        "GET http://h/ HTTP/2\r\n\r\n",
        "GET http://h/a\u{1}b HTTP/1.1\r\n\r\n",
        "GET http:// HTTP/1.1\r\n\r\n",
    ])
    func refused(head: String) {
        if case .success(let r) = Self.parse(head) { Issue.record("forwarded: \(r.upstreamHead.debugDescription)") }
    }
}
