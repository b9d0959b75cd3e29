@testable import Sandbox
import Foundation
import Testing
import TestSupport

/// Runs a python client inside a sandbox with `policy`; it prints one `label: result` line per
/// attempt.
private func client(_ script: String, policy: String, audit: String) throws -> Run {
    let dir = try TempDir()
    let path = try dir.file("client.py", """
        import socket, os
        def via_proxy(target, verb="CONNECT"):
            try:
                s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
            except OSError as e:
                return "no proxy: " + e.strerror
            s.sendall(f"{verb} {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
            head = s.recv(200).decode().split("\\r\\n")[0]
            if " 200 " in head:
                s.sendall(b"ping")
                return head + " | " + s.recv(100).decode()
            return head
        def direct(port):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=3)
                return "connected"
            except OSError as e:
                return e.strerror
        \(script)
        """)
    return try autoharness(["sandbox", "exec", "--policy", policy, "--audit", audit, "--ro", "\(path):/client.py", "--", "python3", "/client.py"])
}

@Suite("Egress proxy (network: proxy)")
struct ProxyTests {
    @Test("only allowlisted host:port pairs are reachable, through the proxy, and every request is audited")
    func allowlistEnforced() throws {
        try requireRoot()
        let allowed = try HostEchoServer()
        let denied = try HostEchoServer()
        let dir = try TempDir()
        let policy = try dir.file("proxy.yaml", "extends: base\nnetwork:\n  mode: proxy\n  allow: [\"127.0.0.1:\(allowed.port)\"]\n")
        let audit = dir.path + "/a.jsonl"
        let r = try client("""
            print("env:", os.environ.get("HTTPS_PROXY"))
            print("allowed:", via_proxy("127.0.0.1:\(allowed.port)"))
            print("denied:", via_proxy("127.0.0.1:\(denied.port)"))
            print("direct:", direct(\(allowed.port)))
            print("get:", via_proxy("http://127.0.0.1:\(allowed.port)/", verb="GET"))
            """, policy: policy, audit: audit)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("env: http://127.0.0.1:3128"))
        #expect(r.stdout.contains("allowed: HTTP/1.1 200 Connection established | echo:ping"), "\(r.stdout)")
        #expect(r.stdout.contains("denied: HTTP/1.1 403"), "\(r.stdout)")
        // The sandbox's own loopback has nothing on that port: no way around the proxy.
        #expect(r.stdout.contains("direct: Connection refused"), "\(r.stdout)")
        #expect(r.stdout.contains("get: HTTP/1.1 405"), "\(r.stdout)")
        let events = try auditEvents(audit).filter { ($0["event"] as? String) == "egress" }
        let ok = events.first { ($0["action"] as? String) == "allowed" }
        #expect(ok?["name"] as? String == "127.0.0.1:\(allowed.port)")
        #expect(ok?["bytes_up"] as? Int == 4)
        #expect(ok?["bytes_down"] as? Int == 9)
        #expect(events.contains { ($0["action"] as? String) == "denied" && ($0["name"] as? String) == "127.0.0.1:\(denied.port)" })
        #expect(events.count == 3)
    }

    @Test("an allowlisted name that resolves to an internal address is refused")
    func internalResolutionRefused() throws {
        try requireRoot()
        let server = try HostEchoServer()
        let dir = try TempDir()
        let policy = try dir.file("proxy.yaml", "extends: base\nnetwork:\n  mode: proxy\n  allow: [\"localhost:\(server.port)\"]\n")
        let audit = dir.path + "/a.jsonl"
        let r = try client("print(\"name:\", via_proxy(\"localhost:\(server.port)\"))", policy: policy, audit: audit)
        #expect(r.stdout.contains("name: HTTP/1.1 502"), "\(r.stdout)")
        let e = try auditEvents(audit).first { ($0["event"] as? String) == "egress" }
        #expect(e?["action"] as? String == "denied")
        #expect((e?["detail"] as? String)?.contains("internal address") == true)
    }

    @Test("without proxy mode there is no proxy and no route out")
    func noProxyWithoutProxyMode() throws {
        try requireRoot()
        let server = try HostEchoServer()
        let dir = try TempDir()
        let policy = try dir.file("lo.yaml", "extends: base\nnetwork:\n  mode: loopback\n")
        let r = try client("print(\"proxy:\", via_proxy(\"127.0.0.1:\(server.port)\"))\nprint(\"direct:\", direct(\(server.port)))",
                           policy: policy, audit: dir.path + "/a.jsonl")
        #expect(r.stdout.contains("proxy: no proxy: Connection refused"), "\(r.stdout)")
        #expect(r.stdout.contains("direct: Connection refused"))
    }
}

@Suite("Egress proxy allowlist matching")
struct ProxyAllowlistTests {
    @Test("*.domain:port covers deeper names on that port only; never the bare domain, another port or an IP literal")
    func wildcard() {
        let allow: Set<String> = ["api.openai.com:443", "*.e2b.app:443"]
        #expect(EgressProxy.allowed("api.openai.com:443", by: allow))
        #expect(EgressProxy.allowed("49983-abc123.e2b.app:443", by: allow))
        #expect(EgressProxy.allowed("a.b.e2b.app:443", by: allow))
        #expect(!EgressProxy.allowed("e2b.app:443", by: allow))
        #expect(!EgressProxy.allowed("x.e2b.app:80", by: allow))
        #expect(!EgressProxy.allowed("evil-e2b.app:443", by: allow))
        #expect(!EgressProxy.allowed("x.e2b.app.evil.com:443", by: allow))
        #expect(!EgressProxy.allowed("api.openai.com:80", by: allow))
        #expect(!EgressProxy.allowed("10.0.0.1:443", by: ["*.0.0.1:443"]))
    }
}
