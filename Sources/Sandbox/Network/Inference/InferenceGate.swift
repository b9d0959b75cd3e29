import Glibc
import SupervisorIO

/// The egress proxy's inference gate for one run of a benchmark tool: the model APIs the
/// runner reaches (`runner.network.inference`) are reached through it only.
///
/// A sandbox's CONNECT to one of `targets` is answered by the proxy itself: TLS with a leaf
/// for the host, signed by this gate's own authority (`TLSAuthority`: made for this run, its
/// key never written anywhere, its name constraints naming these hosts only), which the
/// sandbox trusts through `trustBundle()` at the usual variables. Each request is read whole,
/// judged by `InferenceRules`, and only then sent on, over TLS verified against the system's
/// store (and `upstreamCAFile`), one request per connection. Refused requests never leave the
/// supervisor; both kinds are audit events.
public final class InferenceGate: @unchecked Sendable {
    /// `host:port`, lowercased.
    public let targets: Set<String>
    let authority: TLSAuthority
    let upstream: TLSUpstreamTrust
    /// Request bodies held at once across the gate's connections (each is also parsed and
    /// re-serialized): a sandbox opening its 64 connections with 32 MiB each is refused
    /// past this, not given 2 GiB of the supervisor's memory.
    let bodies: ByteBudget
    /// A held-out run's gate: requests also leave nothing in the vendor's prompt cache that
    /// the gate can keep out of it (`InferenceRules`).
    public let heldOut: Bool
    /// The credentials this gate's run was given (the values of its API-key variables: a
    /// held-out run's from `gate.held_out_env` where that is set). A request that presents
    /// any other in a credential header is refused before the vendor is dialled: a held-out
    /// agent.py that carries the train key (train runs print it; redaction is verbatim only)
    /// would otherwise spend in, and cache prompts for, the train account. Empty: not checked.
    public let credentials: Set<String>
    /// What sandboxes are given instead of each of `credentials`, this gate's own (placeholder →
    /// key): the same length and prefix (up to its last `-` or `_` in the first 16
    /// characters), the rest random letters and digits. The gate swaps a placeholder for its key
    /// in a credential header, after every rule passed, and nowhere else; a request that
    /// presents a key itself (it leaked into a sandbox) or a placeholder in its URL or body is
    /// refused. So no sandbox holds the key, and a placeholder read in a trace is worth nothing
    /// outside this gate's run.
    public let placeholders: [String: String]
    /// A placeholder in a request's body is masked (`*` for each character) instead of
    /// refused: the coding agent's gate. The gate never swaps one there, so the body's copy is
    /// worth nothing; refusing it ended the session of an agent that once printed its
    /// environment (every later request carries that output). Runners' gates refuse.
    public let masksBodyPlaceholders: Bool

    /// The requests this gate judged and sent on that the vendor failed (`VendorFailure`):
    /// what `gate.infra_retries` counts a task's run by. Operator only.
    private let failed = Locked<Int>(0)
    public var vendorFailures: Int { failed.withLock { failed.value } }
    func recordVendorFailure() { failed.withLock { failed.value += 1 } }

    /// The request headers that carry a credential (a bearer token, an API key).
    static let credentialHeaders: Set<String> = ["authorization", "x-api-key", "api-key"]

    /// Whether a variable the tool is passed holds a credential the gate checks: names that
    /// end in `_KEY` or `_TOKEN` (OPENAI_API_KEY, ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN), or
    /// in another word for a secret (`_APIKEY`, `_SECRET`, `_PASSWORD`, `_PAT`, `_AUTH`,
    /// `_CREDENTIALS`): a key under such a name reached sandboxes as it was (a review).
    public static func isCredentialVariable(_ name: String) -> Bool {
        ["_KEY", "_TOKEN", "_APIKEY", "_SECRET", "_PASSWORD", "_PAT", "_AUTH", "_CREDENTIALS"].contains { name.hasSuffix($0) }
    }

    /// Key prefixes that are the vendor's, not the key's secret (kept by a placeholder so that
    /// clients that check a key's shape accept it), longest first.
    static let publicPrefixes = ["sk-ant-api03-", "sk-ant-oat01-", "sk-ant-admin01-", "sk-svcacct-", "sk-admin-", "sk-proj-", "sk-ant-",
                                 "sk-or-v1-", "sk-", "hf_", "gsk_", "xai-", "AIza"]

    /// Whether `value` has a vendor's key shape: one of `publicPrefixes`, then at least 16 more
    /// characters and no space (what a constant or a variable of another name holding a key
    /// looks like).
    public static func looksLikeKey(_ value: String) -> Bool {
        !value.contains(" ") && publicPrefixes.contains { value.hasPrefix($0) && value.count >= $0.count + 16 }
    }

    /// The variables that tell common TLS clients which CAs to trust: OpenSSL and Python's
    /// ssl, httpx and requests, curl, Node (which adds to its own store; Claude Code), Codex
    /// CLI (its own variable: it reads no SSL_CERT_FILE).
    public static let trustVariables = ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CODEX_CA_CERTIFICATE"]
    /// Debian's bundle of the system store.
    public static let systemBundle = "/etc/ssl/certs/ca-certificates.crt"

    public init(targets: [String], upstreamCAFile: String? = nil, bodyBudget: Int = 96 << 20, heldOut: Bool = false,
                credentials: Set<String> = [], masksBodyPlaceholders: Bool = false) throws(SandboxError) {
        bodies = ByteBudget(limit: bodyBudget)
        self.heldOut = heldOut
        self.masksBodyPlaceholders = masksBodyPlaceholders && !heldOut
        self.credentials = credentials.filter { !$0.isEmpty }
        var made: [String: String] = [:]
        for key in self.credentials.sorted() {
            var p = Self.placeholder(shapedLike: key)
            while made[p] != nil || self.credentials.contains(p) { p = Self.placeholder(shapedLike: key) }
            made[p] = key
        }
        placeholders = made
        var hosts: [String] = []
        for t in targets {
            guard let (host, _) = EgressProxy.split(t.lowercased()) else {
                throw SandboxError(.invalidArgument, "inference gate: \(t) is not host:port")
            }
            hosts.append(EgressProxy.unbracketed(host))
        }
        guard !hosts.isEmpty else { throw SandboxError(.invalidArgument, "inference gate: no hosts") }
        self.targets = Set(targets.map { $0.lowercased() })
        authority = try TLSAuthority(hosts: Array(Set(hosts)).sorted())
        upstream = try TLSUpstreamTrust(extraCAFile: upstreamCAFile)
        // OpenSSL writes to sockets with write(2): a peer that went away must cost an error,
        // not the supervisor (the CLI ignores SIGPIPE too).
        signal(SIGPIPE, SIG_IGN)
    }

    /// The placeholder a sandbox is given for `key` (one of `credentials`), or nil.
    public func placeholder(for key: String) -> String? {
        placeholders.first { $0.value == key }?.key
    }

    /// A random stand-in for `key`: its length (at least 8 random characters), its vendor's
    /// public prefix (`publicPrefixes`: `sk-proj-`, `sk-ant-api03-`, so clients that check a
    /// key's shape still accept it) and nothing else of it, then letters and digits. (Keeping
    /// whatever stood before a `-` kept secret characters of keys like `vllm_local_key_2024`.)
    static func placeholder(shapedLike key: String) -> String {
        let chars = Array(key)
        let keep = publicPrefixes.first { key.hasPrefix($0) && key.count > $0.count }?.count ?? 0
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
        var random = SystemRandomNumberGenerator()
        let tail = (0..<max(chars.count - keep, 8)).map { _ in alphabet[Int(random.next(upperBound: UInt64(alphabet.count)))] }
        return String(chars[..<keep]) + String(tail)
    }

    /// The gate's CA certificate (PEM).
    public var certificatePEM: [UInt8] { authority.certificatePEM }

    /// What a sandbox should trust: `base` (a PEM bundle file: the operator's own, when they
    /// pass one of `trustVariables` in, else the system's store), then the gate's CA. The
    /// tunnels to other allowlisted hosts keep verifying against what the operator chose.
    public func trustBundle(base: String = InferenceGate.systemBundle) -> Result<[UInt8], SandboxError> {
        switch InputFile.read(base, cap: 4 << 20) {
        case .success(var bundle):
            if !bundle.isEmpty && bundle.last != 0x0A { bundle.append(0x0A) }
            return .success(bundle + certificatePEM)
        case .failure(.missing) where base == Self.systemBundle:
            return .success(certificatePEM)
        case .failure(let p):
            return .failure(SandboxError(.sourceMissing, "\(base): \(p.explanation("a CA bundle"))"))
        }
    }

}

/// One CONNECT through the gate: the client's TLS, one request judged and forwarded, the
/// response relayed, both connections closed.
struct InferenceExchange {
    static let headCap = 64 << 10
    /// What a client is told of any credential refusal (the audit keeps which one).
    static let credentialAnswer = "the request's credentials are not the ones autoharness gave this run"
    static let bodyCap = 32 << 20
    /// For the request to arrive once the tunnel is up, and for any write.
    static let requestSeconds = 60
    /// For the vendor's first byte and between bytes (a long non-streamed generation).
    static let responseSeconds = 900

    let gate: InferenceGate
    let client: Int32
    let host: String
    let port: UInt16
    /// Dials the upstream (the proxy's own checks of the resolved address), or says why not.
    let dial: () -> Result<Int32, GateRefusal>
    /// Called with the upstream socket while it is open (the proxy closes it when stopped).
    let track: (Int32, Bool) -> Void
    /// Whether the proxy has stopped (its sandbox is gone): it cut the vendor's connections
    /// itself, so what fails after that is not the vendor's.
    var stopped: () -> Bool = { false }
    /// Also told of each failure the gate counts: whose it is where one gate serves several
    /// tasks' streams (a held-out VM's, `EgressProxy.adopt`).
    var onVendorFailure: (() -> Void)? = nil

    struct Outcome {
        var allowed: Bool
        var detail: String
        var up = 0
        var down = 0
    }

    func run() -> Outcome {
        Self.setTimeout(client, seconds: Self.requestSeconds)
        let name = EgressProxy.unbracketed(host)
        let tls: TLSConnection
        switch gate.authority.accept(client, host: name) {
        case .success(let c): tls = c
        case .failure(let f): return Outcome(allowed: false, detail: "inference: no TLS from the sandbox (\(f.message))")
        }
        defer { tls.close() }
        var reader = TLSReader(tls)
        let held = ByteBudget.Hold(gate.bodies)
        defer { held.release() }
        let request: HTTPRequest
        switch HTTPRequest.read(&reader, headCap: Self.headCap, bodyCap: Self.bodyCap, hold: held, continueTo: tls) {
        case .success(let r): request = r
        case .failure(let f):
            refuse(tls, status: 400, f.why)
            return Outcome(allowed: false, detail: "inference refused: \(f.why)")
        }
        let line = "\(request.method) \(request.target.prefix(120))"
        if let why = request.hostMismatch(host: host, port: port) {
            refuse(tls, status: 403, why)
            return Outcome(allowed: false, detail: "inference refused: \(line): \(why)")
        }
        if let why = request.credentialRefusal(placeholders: gate.placeholders, keys: gate.credentials, bodyPlaceholders: !gate.masksBodyPlaceholders) {
            // One answer for every kind: which one it was would tell a guessed key from a wrong one.
            refuse(tls, status: 403, Self.credentialAnswer)
            return Outcome(allowed: false, detail: "inference refused: \(line): \(why)")
        }
        var body: [UInt8], notes: [String]
        switch InferenceRules.judge(method: request.method, target: request.target, body: request.body, heldOut: gate.heldOut) {
        case .refuse(let why):
            refuse(tls, status: 403, why)
            return Outcome(allowed: false, detail: "inference refused: \(why)")
        case .forward(let b, let n):
            body = b
            notes = n
        }
        // What is sent, as the gate re-serialised it (a JSON escape spelled the placeholder
        // past the check of the bytes as received).
        if gate.masksBodyPlaceholders, HTTPRequest.mask(&body, gate.placeholders.keys) {
            notes.append("a key placeholder in the body masked")
        }
        if let why = HTTPRequest.secretIn(body, placeholders: gate.placeholders, keys: gate.credentials) {
            refuse(tls, status: 403, Self.credentialAnswer)
            return Outcome(allowed: false, detail: "inference refused: \(line): the forwarded body \(why)")
        }
        let described = "inference \(line)" + (notes.isEmpty ? "" : " (\(notes.joined(separator: ", ")))")
        // A generation request the vendor failed: counted for `gate.infra_retries`, and said in
        // the audit line. Only generations (free calls, count_tokens and moderations, would let
        // agent.py buy a background failure rate by volume), and never once the proxy stopped.
        let generation = InferenceRules.isGeneration(request.target)
        let vendorFailed = { () -> String in
            guard generation && !stopped() else { return "" }
            gate.recordVendorFailure()
            onVendorFailure?()
            return " [counted as the vendor's failure]"
        }

        let fd: Int32
        switch dial() {
        case .success(let s): fd = s
        case .failure(let f):
            let counted = f.byPolicy ? "" : vendorFailed()
            refuse(tls, status: 502, "autoharness could not reach \(host): \(f.why)")
            return Outcome(allowed: false, detail: "\(described): \(f.why)" + counted)
        }
        track(fd, true)
        defer {
            track(fd, false)
            close(fd)
        }
        Self.setTimeout(fd, seconds: Self.responseSeconds)
        let vendor: TLSConnection
        switch gate.upstream.connect(fd, host: name) {
        case .success(let c): vendor = c
        case .failure(let f):
            let counted = vendorFailed()
            refuse(tls, status: 502, "autoharness could not reach \(host): \(f.message)")
            return Outcome(allowed: false, detail: "\(described): upstream TLS: \(f.message)" + counted)
        }
        defer { vendor.close() }
        let head = request.forwardedHead(host: host, port: port, bodyLength: body.count, keys: gate.placeholders)
        guard vendor.write(head), vendor.write(body) else {
            let counted = vendorFailed()
            refuse(tls, status: 502, "autoharness: the request could not be sent to \(host)")
            return Outcome(allowed: true, detail: "\(described): sending failed" + counted, up: 0, down: 0)
        }
        let (down, counted) = relayResponse(from: vendor, to: tls, vendorFailed: vendorFailed)
        return Outcome(allowed: true, detail: described + counted, up: head.count + body.count, down: down)
    }

    /// The vendor's response head with its connection headers replaced by `Connection:
    /// close` (one request per tunnel), then every byte until the vendor closes. A response
    /// that is the vendor's failure (`vendorFailureStatuses`, or no head: reset, closed or
    /// silent for `responseSeconds`) calls `vendorFailed` before the client hears of it (its
    /// sandbox may end on it). Returns the bytes relayed and `vendorFailed`'s note.
    private func relayResponse(from vendor: TLSConnection, to tls: TLSConnection, vendorFailed: () -> String) -> (Int, String) {
        var reader = TLSReader(vendor)
        guard let head = reader.readHead(cap: Self.headCap) else {
            let failed = vendorFailed()
            refuse(tls, status: 502, "autoharness: no response head from \(host)")
            return (0, failed)
        }
        let failed = Self.status(head).map(Self.vendorFailureStatuses.contains) == true ? vendorFailed() : ""
        // A rate-limit refusal's body counts the key's use ("Limit L, Used U"): the client gets
        // the status alone, with a message of the gate's.
        if let (status, message) = Self.replacement(forHead: head) {
            refuse(tls, status: status, message)
            return (0, failed)
        }
        // A vendor (or a gateway's error page) that reflects the request would hand the
        // sandbox the key the gate put in it: every key is masked on the way back.
        var mask = KeyMask(gate.credentials)
        var rewritten = Self.relayedHead(head)
        KeyMask.mask(&rewritten, mask.keys)
        guard tls.write(rewritten) else { return (0, failed) }
        var total = rewritten.count
        let first = mask.pass(reader.buffered[...])
        if !first.isEmpty {
            guard tls.write(first) else { return (total, failed) }
            total += first.count
        }
        var buf = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = vendor.read(into: &buf)
            if n <= 0 { break }
            let out = mask.pass(buf[..<n])
            guard out.isEmpty || tls.write(out) else { return (total, failed) }
            total += out.count
        }
        let rest = mask.finish()
        if !rest.isEmpty && tls.write(rest) { total += rest.count }
        return (total, failed)
    }

    /// Each of a run's keys replaced by as many `*` in a byte stream, across the boundaries of
    /// the reads it comes in (the last key's length less one byte is held back until the next
    /// read or the end). Same length: a chunked body's sizes stay right.
    struct KeyMask {
        let keys: [[UInt8]]
        private let hold: Int
        private var carry: [UInt8] = []

        init(_ keys: Set<String>) {
            self.keys = keys.map { Array($0.utf8) }.filter { !$0.isEmpty }
            hold = max(0, (self.keys.map(\.count).max() ?? 0) - 1)
        }

        /// What may be sent of `chunk` now.
        mutating func pass(_ chunk: ArraySlice<UInt8>) -> [UInt8] {
            guard !keys.isEmpty else { return Array(chunk) }
            var buf = carry + chunk
            Self.mask(&buf, keys)
            let emit = max(0, buf.count - hold)
            carry = Array(buf[emit...])
            return Array(buf[..<emit])
        }

        /// What was held back, at the end of the stream.
        mutating func finish() -> [UInt8] {
            defer { carry = [] }
            return carry
        }

        static func mask(_ buf: inout [UInt8], _ keys: [[UInt8]]) {
            for key in keys where buf.count >= key.count {
                var i = 0
                while i + key.count <= buf.count {
                    if buf[i] == key[0] && buf[i..<(i + key.count)].elementsEqual(key) {
                        for j in i..<(i + key.count) { buf[j] = 0x2A }
                        i += key.count
                    } else {
                        i += 1
                    }
                }
            }
        }
    }

    /// Response headers a client gets from the vendor: what it needs to read the body, and the
    /// request's id. Everything else is dropped, by allowlist: the vendors' rate-limit headers
    /// (`x-ratelimit-remaining-tokens`, `anthropic-ratelimit-*`, `retry-after`) count what
    /// every run on the same key spent, so a train agent.py could read how many tokens a
    /// held-out run had just used; a timing header or a cookie is a channel of the same kind.
    static let relayedResponseHeaders: Set<String> = ["content-type", "content-length", "transfer-encoding", "content-encoding",
                                                      "date", "request-id", "x-request-id", "cache-control", "vary"]

    /// The vendor's response head as the client gets it: the status line, the allowed headers,
    /// and `Connection: close`.
    static func relayedHead(_ head: [UInt8]) -> [UInt8] {
        // A bare CR or LF ends a line too: a header after one is judged as a line of its own.
        var lines = String(decoding: head, as: UTF8.self).split(whereSeparator: { $0 == "\r\n" || $0 == "\n" || $0 == "\r" })
        guard !lines.isEmpty else { return Array("\r\n".utf8) }
        let status = lines.removeFirst()
        let kept = lines.filter { l in
            relayedResponseHeaders.contains(l.split(separator: ":", maxSplits: 1).first.map { $0.trimmingSpaces().lowercased() } ?? "")
        }
        return Array(([String(status)] + kept.map(String.init) + ["Connection: close", "", ""]).joined(separator: "\r\n").utf8)
    }

    /// The gate's own answer in place of the vendor's, for a response whose body reads account
    /// state: a rate-limit refusal (429), whose message counts the key's use.
    static func replacement(forHead head: [UInt8]) -> (status: Int, message: String)? {
        status(head) == 429
            ? (429, "the model API refused the request for its rate limit (its message, which counts the key's use, is not relayed)")
            : nil
    }

    /// The statuses a vendor answers when it, not the request, failed: an internal error (500),
    /// a gateway's (502, 504), unavailable (503), Anthropic's overloaded (529). The others are
    /// the request's own (4xx, 501, 505) or the account's (429, which load from the same key
    /// provokes): not counted, so agent.py cannot buy a retry by sending a bad request. (A
    /// 500 can still follow from a request's content at some vendors: docs/loop.md.)
    static let vendorFailureStatuses: Set<Int> = [500, 502, 503, 504, 529]

    /// The status code of a response head, or nil.
    static func status(_ head: [UInt8]) -> Int? {
        let line = head.prefix { $0 != 13 && $0 != 10 }
        let parts = String(decoding: line, as: UTF8.self).split(separator: " ")
        return parts.count >= 2 && parts[0].hasPrefix("HTTP/") ? Int(parts[1]) : nil
    }

    private func refuse(_ tls: TLSConnection, status: Int, _ why: String) {
        let reason = status == 403 ? "Forbidden" : status == 400 ? "Bad Request" : status == 429 ? "Too Many Requests" : "Bad Gateway"
        let message = String(why.prefix(300)).unicodeScalars.map { u -> String in
            u == "\"" || u == "\\" ? "\\\(u)" : u.value < 0x20 ? " " : String(u)
        }.joined()
        let body = "{\"error\":{\"type\":\"autoharness_inference_gate\",\"message\":\"\(message)\"}}"
        let text = "HTTP/1.1 \(status) \(reason)\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
        _ = tls.write(Array(text.utf8))
    }

    static func setTimeout(_ fd: Int32, seconds: Int) {
        var tv = timeval(tv_sec: seconds, tv_usec: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        _ = setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    }
}

/// Bytes held at once by all the holders of one budget.
final class ByteBudget: @unchecked Sendable {
    let limit: Int
    private let lock = Mutex()
    private var used = 0

    init(limit: Int) { self.limit = limit }

    /// What one exchange holds, given back at its end.
    final class Hold {
        let budget: ByteBudget
        private var bytes = 0
        init(_ budget: ByteBudget) { self.budget = budget }

        func take(_ n: Int) -> Bool {
            guard n >= 0 else { return false }
            let ok = budget.lock.withLock {
                guard budget.used + n <= budget.limit else { return false }
                budget.used += n
                return true
            }
            if ok { bytes += n }
            return ok
        }

        func release() {
            budget.lock.withLock { budget.used -= bytes }
            bytes = 0
        }
    }
}
