// Plain-HTTP requests through the egress proxy.
//
// apt's mirrors speak http:// (Debian's and Ubuntu's default sources), and apt asks a proxy
// for such a URL in absolute form (`GET http://deb.debian.org/debian/dists/bookworm/InRelease
// HTTP/1.1`), not with CONNECT. The proxy forwards such a request when its host:port is on
// the allowlist, as it would a CONNECT to it, under stricter rules: GET and HEAD only, no
// body, one request per connection (`Connection: close`), the head rebuilt from the parsed
// request (origin form, `Host` from the URL, the proxy's and hop-by-hop headers dropped), so the
// server reads exactly the one request the allowlist judged, never a second one smuggled
// behind it.

enum PlainHTTP {
    struct Request: Equatable {
        var method: String
        /// `host:port`, lower-case: what the allowlist is asked about.
        var target: String
        var host: String
        var port: UInt16
        /// The head the server gets.
        var upstreamHead: String
    }

    /// tchar of RFC 9110 besides letters and digits.
    static let tokenPunctuation: Set<Unicode.Scalar> = ["!", "#", "$", "%", "&", "'", "*", "+", "-", ".", "^", "_", "`", "|", "~"]

    struct Refused: Error, Equatable {
        var why: String
        init(_ why: String) { self.why = why }
    }

    /// Headers never forwarded: the proxy's own, and those that would make the connection
    /// carry more than the one request (or a body).
    static let dropped: Set<String> = ["host", "connection", "proxy-connection", "keep-alive", "proxy-authorization", "proxy-authenticate",
                                        "te", "trailer", "upgrade", "expect"]

    /// The request in `head` (a request line and headers ending in an empty line), or why it
    /// is not forwarded.
    static func parse(_ head: String) -> Result<Request, Refused> {
        var lines = lines(of: head)
        while lines.last == "" { lines.removeLast() }
        guard let first = lines.first else { return .failure(Refused("an empty request")) }
        let parts = first.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[2] == "HTTP/1.1" || parts[2] == "HTTP/1.0" else { return .failure(Refused("a malformed request line")) }
        let method = String(parts[0])
        guard method == "GET" || method == "HEAD" else { return .failure(Refused("\(method.prefix(16)) is not forwarded: only CONNECT, or GET and HEAD over plain HTTP")) }
        let uri = String(parts[1])
        guard uri.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else { return .failure(Refused("a malformed URL")) }
        guard uri.lowercased().hasPrefix("http://") else { return .failure(Refused("not CONNECT, and not an absolute http:// URL")) }
        let rest = uri.dropFirst(7)
        let end = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        let authority = rest[..<end].lowercased()
        var path = String(rest[end...])
        if path.isEmpty { path = "/" } else if path.hasPrefix("?") { path = "/" + path }
        guard !authority.isEmpty, !authority.contains("@"), !path.contains("#") else { return .failure(Refused("a malformed URL")) }
        let hostPart: String
        let port: UInt16
        if authority.hasPrefix("["), let close = authority.firstIndex(of: "]") {
            hostPart = String(authority[...close])
            let after = authority[authority.index(after: close)...]
            if after.isEmpty { port = 80 } else if after.hasPrefix(":"), let p = UInt16(after.dropFirst()), p > 0 { port = p } else { return .failure(Refused("a malformed port")) }
        } else if let colon = authority.lastIndex(of: ":") {
            hostPart = String(authority[..<colon])
            guard let p = UInt16(authority[authority.index(after: colon)...]), p > 0 else { return .failure(Refused("a malformed port")) }
            port = p
        } else {
            hostPart = authority
            port = 80
        }
        guard let (host, _) = EgressProxy.split(hostPart + ":\(port)") else { return .failure(Refused("a malformed host")) }
        var kept: [String] = []
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":"), !line.hasPrefix(" "), !line.hasPrefix("\t"),
                  line.unicodeScalars.allSatisfy({ $0.value >= 0x20 && $0.value != 0x7F || $0 == "\t" }) else {
                return .failure(Refused("a malformed header line"))
            }
            let name = line[..<colon].lowercased()
            let value = String(line[line.index(after: colon)...].drop { $0 == " " || $0 == "\t" }.reversed().drop { $0 == " " || $0 == "\t" }.reversed())
            // RFC 9110's token: no whitespace before the colon (`Host\t:` would be a second Host).
            guard !name.isEmpty, name.unicodeScalars.allSatisfy({ $0.isASCII && (Self.tokenPunctuation.contains($0) || $0.properties.isAlphabetic || ("0"..."9").contains($0)) }) else {
                return .failure(Refused("a malformed header line"))
            }
            if name == "transfer-encoding" || (name == "content-length" && value != "0") { return .failure(Refused("a request with a body")) }
            if name == "content-length" || dropped.contains(name) { continue }
            kept.append(line)
        }
        let hostHeader = port == 80 ? hostPart : "\(hostPart):\(port)"
        let upstream = "\(method) \(path) HTTP/1.1\r\nHost: \(hostHeader)\r\n" + kept.map { $0 + "\r\n" }.joined() + "Connection: close\r\n\r\n"
        return .success(Request(method: method, target: "\(host):\(port)", host: host, port: port, upstreamHead: upstream))
    }

    /// `text` split at each CRLF (a bare CR or LF stays inside its line, where the header
    /// check refuses it).
    static func lines(of text: String) -> [String] {
        var out: [String] = []
        var current: [UInt8] = []
        let bytes = Array(text.utf8)
        var i = 0
        while i < bytes.count {
            if bytes[i] == 13 && i + 1 < bytes.count && bytes[i + 1] == 10 {
                out.append(String(decoding: current, as: UTF8.self))
                current = []
                i += 2
            } else {
                current.append(bytes[i])
                i += 1
            }
        }
        out.append(String(decoding: current, as: UTF8.self))
        return out
    }
}
