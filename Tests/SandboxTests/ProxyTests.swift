@testable import Sandbox
import Foundation
import Testing
import TestSupport

/// Runs a python client inside a sandbox with `policy`; it prints one `label: result` line per
/// attempt.
/// Python helpers for a client inside a proxy sandbox: `via_proxy(target)` sends a CONNECT and
/// returns the status line (and the echo, when tunnelled); `direct(port)` dials loopback.
let proxyClientPrelude = """
    import socket, os
    def via_proxy(target, verb="CONNECT"):
        try:
            s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
        except OSError as e:
            return "no proxy: " + e.strerror
        s.sendall(f"{verb} {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
        head = s.recv(300).decode().split("\\r\\n")[0]
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

    """

private func client(_ script: String, policy: String, audit: String) throws -> Run {
    let dir = try TempDir()
    let path = try dir.file("client.py", proxyClientPrelude + script + "\n")
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
            print("get-denied:", via_proxy("http://127.0.0.1:\(denied.port)/", verb="GET"))
            print("post:", via_proxy("http://127.0.0.1:\(allowed.port)/", verb="POST"))
            """, policy: policy, audit: audit)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("env: http://127.0.0.1:3128"))
        #expect(r.stdout.contains("allowed: HTTP/1.1 200 Connection established | echo:ping"), "\(r.stdout)")
        #expect(r.stdout.contains("denied: HTTP/1.1 403"), "\(r.stdout)")
        // The sandbox's own loopback has nothing on that port: no way around the proxy.
        #expect(r.stdout.contains("direct: Connection refused"), "\(r.stdout)")
        // Plain HTTP (apt's way of asking a proxy): a GET to an allowlisted host:port is
        // forwarded, rebuilt in origin form (the echo server returns what it read first); to
        // another it is refused; any other method is not forwarded (PlainHTTP).
        #expect(r.stdout.contains("get: echo:GET / HTTP/1.1"), "\(r.stdout)")
        #expect(r.stdout.contains("get-denied: HTTP/1.1 403"), "\(r.stdout)")
        #expect(r.stdout.contains("post: HTTP/1.1 405"), "\(r.stdout)")
        let events = try auditEvents(audit).filter { ($0["event"] as? String) == "egress" }
        let ok = events.first { ($0["action"] as? String) == "allowed" }
        #expect(ok?["name"] as? String == "127.0.0.1:\(allowed.port)")
        #expect(ok?["bytes_up"] as? Int == 4)
        #expect(ok?["bytes_down"] as? Int == 9)
        #expect(events.contains { ($0["action"] as? String) == "denied" && ($0["name"] as? String) == "127.0.0.1:\(denied.port)" })
        #expect(events.contains { ($0["action"] as? String) == "allowed" && ($0["detail"] as? String) == "GET over plain HTTP" })
        #expect(events.count == 5, "\(events)")
    }

    @Test("a connection that closes before a complete request head is recorded")
    func incompleteHeadRecorded() throws {
        try requireRoot()
        let dir = try TempDir()
        let policy = try dir.file("proxy.yaml", "extends: base\nnetwork:\n  mode: proxy\n  allow: []\n")
        let audit = dir.path + "/a.jsonl"
        let r = try client("""
            s = socket.create_connection(("127.0.0.1", 3128), timeout=5)
            s.sendall(b"CONNECT example.com:443 HTTP/1.1\\r\\n")
            s.close()
            import time; time.sleep(0.3)
            print("sent half a head")
            """, policy: policy, audit: audit)
        #expect(r.stdout.contains("sent half a head"), "\(r.stdout) \(r.stderr)")
        let e = try auditEvents(audit).first { ($0["event"] as? String) == "egress" }
        #expect(e?["action"] as? String == "denied")
        #expect((e?["detail"] as? String)?.contains("no complete request head") == true, "\(String(describing: e))")
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

@Suite("Egress proxy: internal addresses")
struct ProxyInternalAddressTests {
    static func refused(_ text: String) -> Bool {
        var ss = sockaddr_storage()
        return withUnsafeMutablePointer(to: &ss) { p in
            p.withMemoryRebound(to: sockaddr.self, capacity: 1) { sa -> Bool in
                if text.contains(":") {
                    sa.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { s6 in
                        s6.pointee.sin6_family = sa_family_t(AF_INET6)
                        _ = inet_pton(AF_INET6, text, &s6.pointee.sin6_addr)
                    }
                } else {
                    sa.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { s4 in
                        s4.pointee.sin_family = sa_family_t(AF_INET)
                        _ = inet_pton(AF_INET, text, &s4.pointee.sin_addr)
                    }
                }
                return EgressProxy.isInternal(sa)
            }
        }
    }

    @Test("every special-purpose IPv4 and IPv6 range is internal, at both ends; neighbouring public addresses are not")
    func specialPurposeRanges() {
        let special = [
            "0.0.0.0", "0.255.255.255", "10.0.0.0", "10.255.255.255", "100.64.0.0", "100.127.255.255", "127.0.0.1",
            "127.255.255.255", "169.254.0.0", "169.254.169.254", "172.16.0.0", "172.31.255.255", "192.0.0.0", "192.0.0.255",
            "192.0.2.1", "192.88.99.1", "192.168.0.0", "192.168.255.255", "198.18.0.0", "198.19.255.255", "198.51.100.7",
            "203.0.113.9", "224.0.0.1", "239.255.255.255", "240.0.0.1", "255.255.255.255",
            "::", "::1", "::127.0.0.1", "::ffff:127.0.0.1", "::ffff:8.8.8.8", "64:ff9b::10.0.0.1", "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::1", "100::1", "2001::1", "2001:1ff::1", "2001:db8::1", "2002:0a00:0001::1", "2002:7f00:1::",
            "3fff::1", "5f00::1", "fc00::1", "fdff:ffff::1", "fe80::1", "febf::1", "fec0::1", "ff02::1",
        ]
        let external = [
            "1.1.1.1", "8.8.8.8", "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0", "126.255.255.255",
            "128.0.0.0", "169.253.255.255", "169.255.0.0", "172.15.255.255", "172.32.0.0", "192.0.1.0", "192.167.255.255",
            "192.169.0.0", "198.17.255.255", "198.20.0.0", "223.255.255.255",
            "2606:4700::1111", "2001:4860:4860::8888", "2001:200::1", "64:ff9b::8.8.8.8", "2002:0808:0808::1", "2a00:1450::1",
        ]
        for a in special { #expect(Self.refused(a), "\(a) must be refused") }
        for a in external { #expect(!Self.refused(a), "\(a) is a public address") }
    }

    /// A network namespace of this test's own: `lo` also carries a public-looking address
    /// (8.8.4.4, reachable only inside it), and its /etc/hosts (`ip netns exec` binds
    /// /etc/netns/NAME/hosts) maps a name to it. The supervisor runs inside that namespace.
    @Test("a name resolving to one of this host's own addresses is refused; listed literally, that address is reached, by itself and through the name")
    func ownAddressRefused() throws {
        try requireRoot()
        let ns = "ahtest-\(getpid())-\(UInt16.random(in: 0...UInt16.max))"
        func ip(_ args: String...) throws {
            let r = try runProcess("/usr/sbin/ip", args)
            try #require(r.status == 0, "ip \(args.joined(separator: " ")): \(r.stderr)")
        }
        try ip("netns", "add", ns)
        defer {
            _ = try? runProcess("/usr/sbin/ip", ["netns", "del", ns])
            try? FileManager.default.removeItem(atPath: "/etc/netns/\(ns)")
        }
        try ip("-n", ns, "link", "set", "lo", "up")
        try ip("-n", ns, "addr", "add", "8.8.4.4/32", "dev", "lo")
        try FileManager.default.createDirectory(atPath: "/etc/netns/\(ns)", withIntermediateDirectories: true)
        try "127.0.0.1 localhost\n8.8.4.4 own.example\n".write(toFile: "/etc/netns/\(ns)/hosts", atomically: true, encoding: .utf8)

        let dir = try TempDir()
        let server = try HostEchoServer(address: "0.0.0.0", netns: ns)
        let port = server.port

        // own.example is listed on two ports; its address on one of them only.
        let policy = try dir.file("proxy.yaml", "extends: base\nnetwork:\n  mode: proxy\n  allow: [\"own.example:\(port)\", \"own.example:\(port + 1)\", \"8.8.4.4:\(port)\"]\n")
        let client = try dir.file("client.py", proxyClientPrelude + """
            print("other port:", via_proxy("own.example:\(port + 1)"))
            print("literal:", via_proxy("8.8.4.4:\(port)"))
            print("name:", via_proxy("own.example:\(port)"))
            """)
        let audit = dir.path + "/a.jsonl"
        // `ip netns exec` mounts a fresh /sys without the cgroup hierarchies: limits are not
        // what this test is about.
        let r = try runProcess("/usr/sbin/ip", ["netns", "exec", ns, Built.autoharness, "sandbox", "exec", "--allow-unenforced-limits", "--policy", policy,
                                                "--audit", audit, "--ro", "\(client):/client.py", "--", "python3", "/client.py"])
        withExtendedLifetime(server) {}
        #expect(r.stdout.contains("other port: HTTP/1.1 502"), "\(r.stdout) \(r.stderr)")
        #expect(r.stdout.contains("literal: HTTP/1.1 200 Connection established | echo:ping"), "\(r.stdout) \(r.stderr)")
        #expect(r.stdout.contains("name: HTTP/1.1 200 Connection established | echo:ping"), "\(r.stdout) \(r.stderr)")
        let denied = try auditEvents(audit).first { ($0["event"] as? String) == "egress" && ($0["action"] as? String) == "denied" }
        #expect((denied?["detail"] as? String)?.contains("internal address (8.8.4.4); list 8.8.4.4:\(port + 1) too") == true, "\(String(describing: denied))")
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
