import Glibc
import SupervisorIO

/// Why the gate did not pass something on.
struct GateRefusal: Error {
    var why: String
    /// The proxy's own refusal (a name resolving to an internal address), not the vendor's
    /// failure: `gate.infra_retries` does not count it.
    var byPolicy = false
    init(_ why: String, byPolicy: Bool = false) {
        self.why = why
        self.byPolicy = byPolicy
    }
}

/// Buffered reads over a TLS connection. Consumed bytes are skipped by a cursor and dropped
/// in bulk, and no byte is scanned twice: a body of millions of one-byte chunks costs time in
/// proportion to its size, not to its size times the buffer's.
struct TLSReader {
    let tls: TLSConnection
    private var storage: [UInt8] = []
    private var start = 0
    private var chunk = [UInt8](repeating: 0, count: 16384)

    init(_ tls: TLSConnection) { self.tls = tls }

    /// What has been read and not yet taken.
    var buffered: ArraySlice<UInt8> { storage[start...] }
    private var count: Int { storage.count - start }

    /// More bytes into the buffer; false at the end of the stream or on an error.
    mutating func fill() -> Bool {
        if start > 65536 && start * 2 > storage.count {
            storage.removeFirst(start)
            start = 0
        }
        let n = tls.read(into: &chunk)
        guard n > 0 else { return false }
        storage += chunk[..<n]
        return true
    }

    /// The next `n` buffered bytes, taken.
    private mutating func take(_ n: Int, skipping extra: Int = 0) -> [UInt8] {
        let out = Array(storage[start..<(start + n)])
        start += n + extra
        return out
    }

    /// Up to and without the blank line that ends a head; the rest stays buffered.
    mutating func readHead(cap: Int) -> [UInt8]? {
        var scanned = 0
        while true {
            while scanned + 4 <= count {
                let i = start + scanned
                if storage[i] == 13, storage[i + 1] == 10, storage[i + 2] == 13, storage[i + 3] == 10 {
                    return take(scanned, skipping: 4)
                }
                scanned += 1
            }
            guard count <= cap, fill() else { return nil }
        }
    }

    /// Exactly `n` bytes.
    mutating func read(exactly n: Int) -> [UInt8]? {
        guard n >= 0 else { return nil }
        while count < n { guard fill() else { return nil } }
        return take(n)
    }

    /// One CRLF-terminated line (without it), at most `cap` bytes; a bare LF ends nothing and
    /// the line runs into the cap.
    mutating func readLine(cap: Int) -> [UInt8]? {
        var scanned = 0
        while true {
            while scanned < count {
                let i = start + scanned
                if storage[i] == 10, scanned > 0, storage[i - 1] == 13 { return take(scanned - 1, skipping: 2) }
                scanned += 1
            }
            guard count <= cap, fill() else { return nil }
        }
    }
}

/// A request read whole from the sandbox: its head parsed, its body de-chunked.
struct HTTPRequest {
    var method: String
    var target: String
    /// (name as sent, value), in order.
    var headers: [(String, String)]
    var body: [UInt8]

    /// The sandbox's headers that go upstream, by allowlist: the key, the API's version and
    /// beta features, what the client accepts and who it is. Everything else stays here: the
    /// hop's own headers and those the gate sets (Host, type, length), those that would make
    /// a server read the request as another (method overrides, rewritten URLs, forwarding),
    /// and those that leave state at the vendor for a later request to find (`Idempotency-Key`
    /// stores a response under a key of the client's choosing).
    /// No `OpenAI-Organization` or `OpenAI-Project`: with a key that belongs to several
    /// organisations, they would choose the train one for a held-out request (the key
    /// chooses its own default; project keys are bound to theirs).
    /// No `Accept-Encoding`: the response comes back uncompressed, so the keys in it can be
    /// masked (`KeyMask`).
    static let forwardedHeaders: Set<String> = ["authorization", "x-api-key", "api-key", "anthropic-version", "anthropic-beta",
                                                "openai-beta", "accept", "user-agent"]

    /// A credential header's token: a bearer token after its scheme, else the whole value.
    static func token(_ value: String) -> String {
        if let space = value.firstIndex(of: " "), value[..<space].lowercased() == "bearer" {
            return String(value[value.index(after: space)...]).trimmingSpaces()
        }
        return value
    }

    /// Why the request's credentials are refused, or nil. Each credential header must carry
    /// one of the run's placeholders: a key itself means it reached a sandbox, anything else
    /// was not given to this run (a held-out agent.py carrying another run's). A placeholder
    /// anywhere but a credential header (the URL, the body) is refused too: the gate swaps it
    /// only there, and a vendor that echoes a body must never be handed a swapped key.
    /// No credential at all is the vendor's to refuse; a run given no keys is not checked.
    /// `bodyPlaceholders` false: a placeholder in the body is left to `mask` (the coding
    /// agent's gate); a key there is refused all the same.
    func credentialRefusal(placeholders: [String: String], keys: Set<String>, bodyPlaceholders: Bool = true) -> String? {
        guard !placeholders.isEmpty else { return nil }
        for (name, value) in headers where InferenceGate.credentialHeaders.contains(name.lowercased()) {
            let token = Self.token(value)
            if placeholders[token] != nil { continue }
            if keys.contains(token) {
                return "the \(name) header carries a real key, which no sandbox is given (it holds a placeholder the gate swaps): the key reached the sandbox some other way"
            }
            return "the \(name) header carries a credential this run was not given (the gate passes only the placeholders autoharness gave this run)"
        }
        for p in placeholders.keys where target.contains(p) {
            return "the request's URL carries this run's key placeholder (it is swapped only in a credential header)"
        }
        for key in keys where target.contains(key) || headers.contains(where: { $0.1.contains(key) }) {
            return "the request carries a real key outside its credential header, which no sandbox is given"
        }
        if let why = Self.secretIn(body, placeholders: bodyPlaceholders ? placeholders : [:], keys: keys) { return "the request's body \(why)" }
        return nil
    }

    /// Overwrites every occurrence of each of `placeholders` in `body` with as many `*` (the
    /// same length: a JSON string stays one). Whether any was found.
    static func mask(_ body: inout [UInt8], _ placeholders: some Sequence<String>) -> Bool {
        var found = false
        for p in placeholders {
            let needle = Array(p.utf8)
            var from = 0
            while let i = index(of: needle, in: body, from: from) {
                body.replaceSubrange(i..<(i + needle.count), with: repeatElement(UInt8(ascii: "*"), count: needle.count))
                found = true
                from = i + needle.count
            }
        }
        return found
    }

    /// Why `body` may not leave (it holds a placeholder or a key), or nil.
    static func secretIn(_ body: [UInt8], placeholders: [String: String], keys: Set<String>) -> String? {
        for p in placeholders.keys where contains(body, Array(p.utf8)) {
            return "carries this run's key placeholder (it is swapped only in a credential header)"
        }
        for k in keys where contains(body, Array(k.utf8)) {
            return "carries a real key, which no sandbox is given"
        }
        return nil
    }

    /// Whether `needle` occurs in `haystack`.
    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool { index(of: needle, in: haystack) != nil }

    /// Where `needle` first occurs in `haystack` at or after `from`, or nil (an empty needle never).
    static func index(of needle: [UInt8], in haystack: [UInt8], from: Int = 0) -> Int? {
        guard !needle.isEmpty, haystack.count >= needle.count, from >= 0 else { return nil }
        let first = needle[0]
        var i = from
        while i <= haystack.count - needle.count {
            if haystack[i] == first && haystack[i..<(i + needle.count)].elementsEqual(needle) { return i }
            i += 1
        }
        return nil
    }

    static func read(_ r: inout TLSReader, headCap: Int, bodyCap: Int, hold: ByteBudget.Hold,
                     continueTo tls: TLSConnection) -> Result<HTTPRequest, GateRefusal> {
        let busy = GateRefusal("the gate already holds \(hold.budget.limit >> 20) MiB of request bodies (too many large requests at once)")
        guard let head = r.readHead(cap: headCap) else { return .failure(GateRefusal("no complete request head (closed, over \(headCap / 1024) KiB, or too slow)")) }
        // CR and LF only as the CRLF between lines, no other control byte: a bare LF inside a
        // value would end a line for the vendor's parser and smuggle in a header of its own.
        for (i, b) in head.enumerated() where b < 0x20 && b != 9 || b == 0x7F {
            let crlf = (b == 13 && i + 1 < head.count && head[i + 1] == 10) || (b == 10 && i > 0 && head[i - 1] == 13)
            if !crlf { return .failure(GateRefusal("a control byte (0x\(String(b, radix: 16))) in the request head")) }
        }
        guard let text = String(validating: head, as: UTF8.self) else { return .failure(GateRefusal("the request head is not UTF-8")) }
        let lines = text.split(separator: "\r\n", omittingEmptySubsequences: false)
        let parts = lines[0].split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[2] == "HTTP/1.1" || parts[2] == "HTTP/1.0", parts[1].hasPrefix("/") else {
            return .failure(GateRefusal("not an HTTP/1.1 request line: \(lines[0].prefix(80))"))
        }
        var headers: [(String, String)] = []
        for l in lines.dropFirst() {
            guard let colon = l.firstIndex(of: ":") else { return .failure(GateRefusal("a header line without ':'")) }
            let name = String(l[..<colon])
            // No '_': some servers read it as '-' (Transfer_Encoding).
            guard !name.isEmpty, name.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }) else {
                return .failure(GateRefusal("a malformed header name"))
            }
            headers.append((name, String(l[l.index(after: colon)...]).trimmingSpaces()))
        }
        var req = HTTPRequest(method: String(parts[0]), target: String(parts[1]), headers: headers, body: [])
        if req.values("upgrade").count > 0 { return .failure(GateRefusal("protocol upgrades are not inference calls")) }
        if let enc = req.values("content-encoding").first(where: { $0.lowercased() != "identity" }) {
            return .failure(GateRefusal("a request body with Content-Encoding \(enc.prefix(30)) cannot be judged"))
        }
        let chunked = req.values("transfer-encoding").contains { $0.lowercased().contains("chunked") }
        let lengths = req.values("content-length")
        if chunked && !lengths.isEmpty { return .failure(GateRefusal("both Transfer-Encoding and Content-Length")) }
        if req.values("transfer-encoding").contains(where: { $0.lowercased() != "chunked" }) {
            return .failure(GateRefusal("a transfer coding other than chunked"))
        }
        if req.values("expect").contains(where: { $0.lowercased() == "100-continue" }) {
            guard tls.write(Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)) else { return .failure(GateRefusal("the client went away")) }
        }
        if chunked {
            var body: [UInt8] = []
            while true {
                guard let sizeLine = r.readLine(cap: 1024) else { return .failure(GateRefusal("a truncated chunked body")) }
                let hex = String(decoding: sizeLine, as: UTF8.self).split(separator: ";").first.map { $0.trimmingSpaces() } ?? ""
                // Hex digits only: Int(_:radix:) would also take a sign ("-1").
                guard !hex.isEmpty, hex.count <= 8, hex.allSatisfy(\.isHexDigit), hex.allSatisfy(\.isASCII),
                      let size = Int(hex, radix: 16) else { return .failure(GateRefusal("a malformed chunk size")) }
                if size == 0 {
                    // Trailers (at most 32), then the blank line.
                    var trailers = 0
                    while true {
                        guard let t = r.readLine(cap: 8192) else { return .failure(GateRefusal("a truncated chunked body")) }
                        if t.isEmpty { break }
                        trailers += 1
                        guard trailers <= 32 else { return .failure(GateRefusal("more than 32 trailer lines")) }
                    }
                    break
                }
                guard body.count + size <= bodyCap else { return .failure(GateRefusal("a request body over \(bodyCap >> 20) MiB")) }
                guard hold.take(size) else { return .failure(busy) }
                guard let data = r.read(exactly: size), let end = r.read(exactly: 2), end == [13, 10] else {
                    return .failure(GateRefusal("a truncated chunked body"))
                }
                body += data
            }
            req.body = body
        } else if let first = lengths.first {
            guard lengths.allSatisfy({ $0 == first }), first.allSatisfy({ $0.isASCII && $0.isNumber }), first.count <= 12, let n = Int(first) else {
                return .failure(GateRefusal("a malformed Content-Length"))
            }
            guard n <= bodyCap else { return .failure(GateRefusal("a request body over \(bodyCap >> 20) MiB")) }
            guard hold.take(n) else { return .failure(busy) }
            guard let data = r.read(exactly: n) else { return .failure(GateRefusal("a body shorter than its Content-Length")) }
            req.body = data
        }
        return .success(req)
    }

    func values(_ name: String) -> [String] {
        headers.filter { $0.0.lowercased() == name }.map(\.1)
    }

    /// A `Host` naming another site than the tunnel's: on a shared front (a CDN) it would
    /// route the request to that site.
    func hostMismatch(host: String, port: UInt16) -> String? {
        let hosts = values("host")
        guard hosts.count <= 1 else { return "more than one Host header" }
        guard let h = hosts.first?.lowercased() else { return nil }
        let expected = port == 443 ? [host, "\(host):443"] : ["\(host):\(port)"]
        return expected.contains(h) ? nil : "Host \(h.prefix(80)) is not the tunnel's host \(host)"
    }

    /// The head sent upstream: the request line, the sandbox's allowed headers, then
    /// Host, Content-Length of the judged body, and Connection: close.
    /// `keys` (placeholder → key): a credential header's placeholder goes upstream as its key.
    func forwardedHead(host: String, port: UInt16, bodyLength: Int, keys: [String: String] = [:]) -> [UInt8] {
        var text = "\(method) \(target) HTTP/1.1\r\n"
        for (name, value) in headers where Self.forwardedHeaders.contains(name.lowercased()) {
            var sent = value
            if InferenceGate.credentialHeaders.contains(name.lowercased()), let key = keys[Self.token(value)] {
                sent = Self.token(value) == value ? key : "Bearer \(key)"
            }
            text += "\(name): \(sent)\r\n"
        }
        text += "Host: \(port == 443 ? host : "\(host):\(port)")\r\nContent-Type: application/json\r\n"
        text += "Content-Length: \(bodyLength)\r\nConnection: close\r\n\r\n"
        return Array(text.utf8)
    }
}

extension StringProtocol {
    func trimmingSpaces() -> String {
        var s = self[...]
        while s.first == " " || s.first == "\t" { s = s.dropFirst() }
        while s.last == " " || s.last == "\t" { s = s.dropLast() }
        return String(s)
    }
}
