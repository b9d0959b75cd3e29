import Foundation
@testable import Sandbox
import Testing
import TestSupport

@Suite("Inference gate: strict JSON")
struct StrictJSONTests {
    func parse(_ text: String) -> Result<StrictJSON, StrictJSON.Malformed> {
        Result { () throws(StrictJSON.Malformed) in try StrictJSON.parse(Array(text.utf8)) }
    }

    func reason(_ text: String) -> String? {
        if case .failure(let m) = parse(text) { return m.reason }
        return nil
    }

    @Test("a duplicate key is refused at any depth, however it is spelled")
    func duplicates() {
        #expect(reason(#"{"store": false, "model": "x", "store": true}"#)?.hasPrefix("duplicate key") == true)
        // The same key through an escape: two parsers that disagree on escapes would disagree
        // on the value.
        #expect(reason(#"{"store": false, "st\u006fre": true}"#)?.hasPrefix("duplicate key") == true)
        #expect(reason(#"{"tools": [{"type": "function", "type": "web_search"}]}"#)?.hasPrefix("duplicate key") == true)
    }

    @Test("what RFC 8259 does not allow is refused", arguments: [
        (#"{"a": 1} x"#, "bytes after the JSON value"),
        (#"{"a": "\ud800"}"#, "lone high surrogate"),
        (#"{"a": "\udc00"}"#, "lone low surrogate"),
        (#"{"a": 01}"#, "expected ',' or '}'"),
        (#"{"a": NaN}"#, "not a JSON value"),
        (#"{"a": 1.}"#, "digits expected after '.'"),
        (#"{"a": "x\#u{01}"}"#, "control character in a string"),
        (#"{"a": 'x'}"#, "not a JSON value"),
        ("{\"a\": 1,}", "expected a key"),
        (#"{"a": "\x"}"#, "unknown escape"),
    ])
    func malformed(text: String, why: String) {
        #expect(reason(text) == why, "\(text)")
    }

    @Test("invalid UTF-8 and nesting past the limit are refused")
    func bytesAndDepth() {
        var bytes = Array(#"{"a": "x"#.utf8)
        bytes += [0xC3, 0x28]
        bytes += Array(#""}"#.utf8)
        #expect(throws: StrictJSON.Malformed.self) { try StrictJSON.parse(bytes) }
        let deep = String(repeating: "[", count: 200) + String(repeating: "]", count: 200)
        #expect(reason(deep)?.hasPrefix("nested deeper") == true)
        let fine = String(repeating: "[", count: 100) + String(repeating: "]", count: 100)
        #expect(reason(fine) == nil)
        // Many small values: a 32 MiB body of them would be about 1 GiB parsed.
        let many = "[" + Array(repeating: "0", count: StrictJSON.maxValues).joined(separator: ",") + "]"
        #expect(reason(many)?.hasPrefix("more than") == true)
    }

    @Test("serializing keeps order, number text and meaning; escapes are decoded once")
    func roundTrip() throws {
        let text = #"{"z": 1.50e3, "a": [true, null, -0, "\u00e9\n\"\\\/"], "k": {"\ud83d\ude00": 12345678901234567890}}"#
        let v = try StrictJSON.parse(Array(text.utf8))
        let out = String(decoding: v.serialized(), as: UTF8.self)
        #expect(out == #"{"z":1.50e3,"a":[true,null,-0,"é\u000a\"\\/"],"k":{"😀":12345678901234567890}}"#)
        // What Foundation reads from ours is what it reads from the original.
        let a = try JSONSerialization.jsonObject(with: Data(text.utf8)) as? NSDictionary
        let b = try JSONSerialization.jsonObject(with: Data(out.utf8)) as? NSDictionary
        #expect(a == b)
    }
}

@Suite("Inference gate: which calls pass")
struct InferenceRulesTests {
    func judge(_ target: String, _ body: String, method: String = "POST") -> InferenceRules.Verdict {
        InferenceRules.judge(method: method, target: target, body: Array(body.utf8))
    }

    @Test("a held-out run's request asks for no prompt caching: every cache_control the Messages API reads and OpenAI's cache keys go; a caller's own schema and tool input keep theirs; train runs keep all")
    func heldOutPromptCache() throws {
        let anthropic = """
            {"model":"c","max_tokens":5,"cache_control":{"type":"ephemeral"},
             "system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],
             "tools":[{"name":"t","input_schema":{"type":"object","properties":{"cache_control":{"type":"string"}}},"cache_control":{"type":"ephemeral"}}],
             "messages":[{"role":"user","content":[{"type":"text","text":"a","cache_control":{"type":"ephemeral","ttl":"1h"}}]},
                         {"role":"assistant","content":[{"type":"tool_use","id":"x","name":"t","input":{"cache_control":"kept"}}]},
                         {"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":[{"type":"text","text":"r","cache_control":{"type":"ephemeral"}}],"cache_control":{"type":"ephemeral"}}]}]}
            """
        let held = try #require(forwarded(InferenceRules.judge(method: "POST", target: "/v1/messages", body: Array(anthropic.utf8), heldOut: true)))
        // Six breakpoints removed; the schema's property and the tool call's input stay.
        #expect(held.1.contains("6 prompt-cache request(s) removed (held-out run)"), "\(held.1)")
        #expect(held.0.components(separatedBy: "cache_control").count - 1 == 2, "\(held.0)")
        #expect(held.0.contains("\"properties\":{\"cache_control\":{\"type\":\"string\"}}") && held.0.contains("\"input\":{\"cache_control\":\"kept\"}"), "\(held.0)")
        let train = try #require(forwarded(judge("/v1/messages", anthropic)))
        #expect(train.0.components(separatedBy: "cache_control").count - 1 == 8 && train.1.isEmpty, "\(train)")

        // Breakpoints nested deeper than the blocks the API documents them on: a document's
        // own content, a tool result's search result's content, and deeper still.
        let nested = """
            {"model":"c","max_tokens":5,"messages":[{"role":"user","content":[
              {"type":"document","source":{"type":"content","content":[{"type":"text","text":"d","cache_control":{"type":"ephemeral"}}]}},
              {"type":"tool_result","tool_use_id":"x","content":[{"type":"search_result","source":"s","title":"t",
                "content":[{"type":"text","text":"r","cache_control":{"type":"ephemeral"}}]}]},
              {"type":"text","text":"q","extra":{"deeper":[{"cache_control":{"type":"ephemeral"}}]}}]}]}
            """
        let heldNested = try #require(forwarded(InferenceRules.judge(method: "POST", target: "/v1/messages", body: Array(nested.utf8), heldOut: true)))
        #expect(!heldNested.0.contains("cache_control") && heldNested.1.contains("3 prompt-cache request(s) removed (held-out run)"), "\(heldNested)")

        let chat = #"{"model":"g","messages":[{"role":"user","content":"a"}],"prompt_cache_key":"k","prompt_cache_retention":"24h"}"#
        let heldChat = try #require(forwarded(InferenceRules.judge(method: "POST", target: "/v1/chat/completions", body: Array(chat.utf8), heldOut: true)))
        #expect(!heldChat.0.contains("prompt_cache") && heldChat.1 == ["2 prompt-cache request(s) removed (held-out run)"], "\(heldChat)")
        #expect(try #require(forwarded(judge("/v1/chat/completions", chat))).0.contains("prompt_cache_key"))
        let responses = #"{"model":"g","input":"a","store":false,"prompt_cache_key":"k"}"#
        #expect(!(try #require(forwarded(InferenceRules.judge(method: "POST", target: "/v1/responses", body: Array(responses.utf8), heldOut: true)))).0.contains("prompt_cache"))
    }

    func forwarded(_ v: InferenceRules.Verdict) -> (String, [String])? {
        if case .forward(let b, let n) = v { return (String(decoding: b, as: UTF8.self), n) }
        return nil
    }

    func refused(_ v: InferenceRules.Verdict) -> String? {
        if case .refuse(let why) = v { return why }
        return nil
    }

    @Test("only the stateless endpoints, by POST, at their exact paths", arguments: [
        ("POST", "/v1/chat/completions", true), ("POST", "/v1/messages?beta=true", true), ("POST", "/v1/responses", true),
        ("POST", "/v1/embeddings", true), ("POST", "/v1/messages/count_tokens", true), ("POST", "/v1/completions", true),
        ("GET", "/v1/chat/completions", false), ("GET", "/v1/responses/resp_1", false), ("POST", "/v1/files", false),
        ("GET", "/v1/files", false), ("POST", "/v1/batches", false), ("POST", "/v1/messages/batches", false),
        ("POST", "/v1/vector_stores", false), ("POST", "/v1/assistants", false), ("POST", "/v1/threads/runs", false),
        ("POST", "/v1/conversations", false), ("POST", "/v1/chat/completions/chatcmpl-1", false),
        ("DELETE", "/v1/responses/resp_1", false), ("POST", "/v1/chat/%63ompletions", false),
        ("POST", "/v1/messages/../files", false), ("POST", "//v1/messages", false), ("POST", "/v1/messages?x=%41", false),
        ("PUT", "/v1/messages", false),
    ])
    func endpoints(method: String, target: String, passes: Bool) {
        let v = judge(target, #"{"model": "m", "messages": []}"#, method: method)
        #expect((forwarded(v) != nil) == passes, "\(method) \(target): \(v)")
    }

    @Test("Responses: `store` is forced false whatever was sent; stored state is neither read nor written")
    func responses() throws {
        for body in [#"{"model": "m", "input": "hi"}"#, #"{"model": "m", "input": "hi", "store": true}"#, #"{"store": "yes", "model": "m"}"#] {
            let (out, notes) = try #require(forwarded(judge("/v1/responses", body)))
            let obj = try #require(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any])
            #expect(obj["store"] as? Bool == false, "\(out)")
            #expect(notes == ["store forced false"])
        }
        let (_, none) = try #require(forwarded(judge("/v1/responses", #"{"model": "m", "store": false}"#)))
        #expect(none.isEmpty)
        #expect(refused(judge("/v1/responses", #"{"model": "m", "previous_response_id": "resp_1"}"#))?.contains("previous_response_id") == true)
        #expect(refused(judge("/v1/responses", #"{"model": "m", "conversation": "conv_1"}"#))?.contains("conversation") == true)
        #expect(refused(judge("/v1/responses", #"{"model": "m", "background": true}"#))?.contains("background") == true)
        #expect(forwarded(judge("/v1/responses", #"{"model": "m", "background": false, "previous_response_id": null}"#)) != nil)
    }

    @Test("Chat Completions: `store: true` becomes false; absent stays absent")
    func chat() throws {
        let (out, notes) = try #require(forwarded(judge("/v1/chat/completions", #"{"model": "m", "store": true, "metadata": {"k": "v"}}"#)))
        #expect(out == #"{"model":"m","store":false,"metadata":{"k":"v"}}"#)
        #expect(notes == ["store forced false"])
        let (plain, n2) = try #require(forwarded(judge("/v1/chat/completions", #"{"model": "m", "messages": []}"#)))
        #expect(plain == #"{"model":"m","messages":[]}"#)
        #expect(n2.isEmpty)
        #expect(refused(judge("/v1/chat/completions", #"{"model": "m", "web_search_options": {}}"#)) != nil)
    }

    @Test("tools the vendor would run are refused; tools the client runs pass", arguments: [
        ("/v1/responses", #"[{"type": "function", "name": "f", "parameters": {}}]"#, true),
        ("/v1/responses", #"[{"type": "custom", "name": "apply"}, {"type": "local_shell"}, {"type": "apply_patch"}]"#, true),
        ("/v1/responses", #"[{"type": "web_search"}]"#, false),
        ("/v1/responses", #"[{"type": "file_search", "vector_store_ids": ["vs_1"]}]"#, false),
        ("/v1/responses", #"[{"type": "code_interpreter", "container": {"type": "auto"}}]"#, false),
        ("/v1/responses", #"[{"type": "mcp", "server_url": "https://x.example", "server_label": "x"}]"#, false),
        ("/v1/responses", #"[{"name": "untyped"}]"#, false),
        ("/v1/responses", #"[{"type": "namespace", "name": "multi_agent_v1", "tools": [{"type": "function", "name": "spawn_agent", "parameters": {}}]}]"#, true),
        ("/v1/responses", #"[{"type": "namespace", "name": "n", "tools": [{"type": "function", "name": "f"}, {"type": "web_search"}]}]"#, false),
        ("/v1/responses", #"[{"type": "namespace", "name": "n", "tools": [{"type": "namespace", "name": "m", "tools": []}]}]"#, false),
        ("/v1/responses", #"[{"type": "namespace", "name": "n", "tools": {"type": "function"}}]"#, false),
        ("/v1/responses", #"[{"type": "namespace", "name": "n", "server_url": "https://x.example", "tools": []}]"#, false),
        ("/v1/chat/completions", #"[{"type": "function", "function": {"name": "f"}}]"#, true),
        ("/v1/chat/completions", #"{"type": "function"}"#, false),
        ("/v1/messages", #"[{"name": "get_weather", "input_schema": {}}, {"type": "custom", "name": "c", "input_schema": {}}]"#, true),
        ("/v1/messages", #"[{"type": "bash_20250124", "name": "bash"}, {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}]"#, true),
        ("/v1/messages", #"[{"type": "web_fetch_20250910", "name": "web_fetch"}]"#, false),
        ("/v1/messages", #"[{"type": "web_search_20250305", "name": "web_search"}]"#, false),
        ("/v1/messages", #"[{"type": "code_execution_20250825", "name": "code_execution"}]"#, false),
        ("/v1/messages", #"[{"type": 7, "name": "x"}]"#, false),
        ("/v1/messages/count_tokens", #"[{"type": "web_fetch_20250910", "name": "web_fetch"}]"#, false),
    ])
    func tools(path: String, tools: String, passes: Bool) {
        let v = judge(path, #"{"model": "m", "tools": \#(tools)}"#)
        #expect((forwarded(v) != nil) == passes, "\(path) \(tools): \(v)")
    }

    @Test("what the vendor would fetch by URL or read from its store is refused; data: URLs and the caller's own schemas pass", arguments: [
        ("/v1/chat/completions", #"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x.example/?bits"}}]}]}"#, false),
        ("/v1/chat/completions", #"{"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]}"#, true),
        ("/v1/chat/completions", #"{"messages": [{"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1"}}]}]}"#, false),
        ("/v1/responses", #"{"input": [{"role": "user", "content": [{"type": "input_file", "file_url": "https://x.example/a.pdf"}]}]}"#, false),
        ("/v1/responses", #"{"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x.example/a.png"}]}]}"#, false),
        ("/v1/responses", #"{"input": [{"type": "item_reference", "id": "msg_1"}]}"#, false),
        ("/v1/responses", #"{"prompt": {"id": "pmpt_1"}}"#, false),
        ("/v1/responses", #"{"tools": [{"type": "shell", "environment": {"type": "container_auto"}}]}"#, false),
        ("/v1/responses", #"{"tools": [{"type": "shell", "environment": {"type": "local"}}, {"type": "shell"}]}"#, true),
        ("/v1/responses", #"{"tools": [{"type": "function", "name": "f", "parameters": {"properties": {"url": {"type": "string"}, "file_id": {}}}}]}"#, true),
        ("/v1/messages", #"{"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "url", "url": "https://x.example/i.png"}}]}]}"#, false),
        ("/v1/messages", #"{"messages": [{"role": "user", "content": [{"type": "document", "source": {"type": "file", "file_id": "file_1"}}]}]}"#, false),
        ("/v1/messages", #"{"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]}"#, true),
        ("/v1/messages", #"{"messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "fetch", "input": {"url": "https://x.example"}}]}]}"#, true),
        ("/v1/moderations", #"{"input": [{"type": "image_url", "image_url": {"url": "https://x.example/i.png"}}]}"#, false),
    ])
    func references(path: String, body: String, passes: Bool) {
        let v = judge(path, body)
        #expect((forwarded(v) != nil) == passes, "\(path) \(body): \(v)")
    }

    @Test("Anthropic: containers and MCP servers are refused")
    func anthropicState() {
        #expect(refused(judge("/v1/messages", #"{"model": "m", "container": "container_1"}"#))?.contains("container") == true)
        #expect(refused(judge("/v1/messages", #"{"model": "m", "mcp_servers": [{"type": "url", "url": "https://x.example"}]}"#)) != nil)
    }

    @Test("a body that is not one strict JSON object is refused")
    func bodies() {
        #expect(refused(judge("/v1/chat/completions", "[1]"))?.contains("not a JSON object") == true)
        #expect(refused(judge("/v1/chat/completions", #"{"store": false, "store": true}"#))?.contains("duplicate key") == true)
        #expect(refused(judge("/v1/chat/completions", ""))?.contains("not strict JSON") == true)
    }
}

@Suite("Inference gate: its certificate authority")
struct InferenceAuthorityTests {
    /// A TLS server side from `authority` for `minted` on one end of a socket pair, our
    /// verifying client (trusting only the authority) for `asked` on the other.
    func handshake(authority: TLSAuthority, minted: String, asked: String) throws -> Result<Void, TLSFailure> {
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let dir = try TempDir()
        let ca = try dir.file("ca.pem", String(decoding: authority.certificatePEM, as: UTF8.self))
        let trust = try TLSUpstreamTrust(extraCAFile: ca)
        // The server thread ends before the socket pair is closed: a thread left running would
        // shut down whatever another test's descriptor of the same number is by then.
        let serverDone = DispatchSemaphore(value: 0)
        // Whichever side closes first, the other's close_notify meets a closed peer: EPIPE, as
        // in the supervisor (which ignores SIGPIPE too), not a signal that ends the test run.
        signal(SIGPIPE, SIG_IGN)
        let server = Thread { [fds] in
            if case .success(let c) = authority.accept(fds[0], host: minted) { c.close() }
            shutdown(fds[0], Int32(SHUT_RDWR))
            serverDone.signal()
        }
        server.start()
        let result: Result<Void, TLSFailure>
        switch trust.connect(fds[1], host: asked) {
        case .success(let c):
            c.close()
            result = .success(())
        case .failure(let f):
            result = .failure(f)
        }
        #expect(serverDone.wait(timeout: .now() + 30) == .success, "the TLS server side did not end")
        return result
    }

    @Test("its leaves verify for its hosts; a leaf it signed for any other name fails on its name constraints; an authority for an address alone still locks names, and lists no IP range (some clients refuse any CA that does)")
    func nameConstraints() throws {
        let authority = try TLSAuthority(hosts: ["api.test", "127.0.0.2"])
        #expect(throws: Never.self) { try handshake(authority: authority, minted: "api.test", asked: "api.test").get() }
        #expect(throws: Never.self) { try handshake(authority: authority, minted: "127.0.0.2", asked: "127.0.0.2").get() }
        let addressOnly = try TLSAuthority(hosts: ["127.0.0.2"])
        #expect(throws: Never.self) { try handshake(authority: addressOnly, minted: "127.0.0.2", asked: "127.0.0.2").get() }
        guard case .failure(let n) = try handshake(authority: addressOnly, minted: "api.test", asked: "api.test") else {
            Issue.record("an authority for an address alone vouched for a name")
            return
        }
        #expect(n.message.contains("permitted subtree violation"), "\(n.message)")
        let dir = try TempDir()
        let pem = try dir.file("ca.pem", String(decoding: authority.certificatePEM, as: UTF8.self))
        let text = try runProcess("/usr/bin/openssl", ["x509", "-in", pem, "-noout", "-text"]).stdout
        #expect(text.contains("DNS:api.test") && !text.contains("IP:"), "\(text)")
        // The gate mints only for its targets; were it made to mint for another host, every
        // client that checks constraints (OpenSSL, Python, Node, Go, rustls) refuses it.
        guard case .failure(let f) = try handshake(authority: authority, minted: "evil.test", asked: "evil.test") else {
            Issue.record("a leaf for evil.test verified")
            return
        }
        #expect(f.message.contains("permitted subtree violation"), "\(f.message)")
        guard case .failure(let g) = try handshake(authority: authority, minted: "api.test", asked: "other.test") else {
            Issue.record("api.test's leaf verified for other.test")
            return
        }
        #expect(g.message.contains("not accepted"), "\(g.message)")
    }

    @Test("two gates have two authorities: one's leaves do not verify under the other")
    func perGate() throws {
        let a = try TLSAuthority(hosts: ["api.test"]), b = try TLSAuthority(hosts: ["api.test"])
        #expect(a.certificatePEM != b.certificatePEM)
        var fds: [Int32] = [0, 0]
        #expect(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let dir = try TempDir()
        let trust = try TLSUpstreamTrust(extraCAFile: try dir.file("b.pem", String(decoding: b.certificatePEM, as: UTF8.self)))
        let server = Thread { [fds] in
            if case .success(let c) = a.accept(fds[0], host: "api.test") { c.close() }
            shutdown(fds[0], Int32(SHUT_RDWR))
        }
        server.start()
        guard case .failure(let f) = trust.connect(fds[1], host: "api.test") else {
            Issue.record("a's leaf verified under b")
            return
        }
        #expect(f.message.contains("not accepted"), "\(f.message)")
    }
}

@Suite("Inference gate: requests on the wire")
struct InferenceExchangeTests {
    /// `raw` sent over TLS (trusting the gate's CA) to a gate for api.test:443 on a socket
    /// pair. No vendor behind it: a request that passes is dialled, and the dial fails.
    func exchange(_ raw: String, bodyBudget: Int = 96 << 20, credentials: Set<String> = [], gate given: InferenceGate? = nil) throws -> (outcome: InferenceExchange.Outcome, reply: String, dialled: Bool) {
        let gate = try given ?? InferenceGate(targets: ["api.test:443"], bodyBudget: bodyBudget, credentials: credentials)
        final class Dialled: @unchecked Sendable { var yes = false }
        let dialled = Dialled()
        let r = try Self.drive(raw, gate: gate) { dialled.yes = true; return .failure(GateRefusal("no vendor in this test")) }
        return (r.outcome, r.reply, dialled.yes)
    }

    /// `raw` sent over TLS (trusting the gate's CA) through one exchange of `gate` for
    /// api.test:443 on a socket pair, `dial` standing for the vendor; the gate's outcome and
    /// what the client read back.
    static func drive(_ raw: String, gate: InferenceGate, stopped: @escaping @Sendable () -> Bool = { false },
                      dial: @escaping @Sendable () -> Result<Int32, GateRefusal>) throws -> (outcome: InferenceExchange.Outcome, reply: String) {
        final class Box: @unchecked Sendable {
            var outcome: InferenceExchange.Outcome?
            let done = DispatchSemaphore(value: 0)
        }
        var fds: [Int32] = [0, 0]
        try #require(socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let dir = try TempDir()
        let trust = try TLSUpstreamTrust(extraCAFile: try dir.file("ca.pem", String(decoding: gate.certificatePEM, as: UTF8.self)))
        let box = Box()
        let server = Thread { [fds] in
            let x = InferenceExchange(gate: gate, client: fds[0], host: "api.test", port: 443, dial: dial, track: { _, _ in }, stopped: stopped)
            box.outcome = x.run()
            shutdown(fds[0], Int32(SHUT_RDWR))
            box.done.signal()
        }
        server.start()
        let c = try trust.connect(fds[1], host: "api.test").get()
        #expect(c.write(Array(raw.utf8)))
        // Nothing more comes: a request cut short ends now, not at the gate's read timeout.
        shutdown(fds[1], Int32(SHUT_WR))
        var reply: [UInt8] = [], buf = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = c.read(into: &buf)
            if n <= 0 { break }
            reply += buf[..<n]
        }
        c.close()
        box.done.wait()
        return (try #require(box.outcome), String(decoding: reply, as: UTF8.self))
    }

    static let body = #"{"model": "m", "messages": [], "store": true}"#

    @Test("request bodies count against the gate's budget: one past it is refused before it is read, by length or by chunk")
    func budget() throws {
        let length = try exchange("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nContent-Length: \(Self.body.utf8.count)\r\n\r\n\(Self.body)",
                                  bodyBudget: 10)
        #expect(!length.dialled && length.outcome.detail.contains("already holds"), "\(length.outcome.detail)")
        let chunked = try exchange("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   + "8\r\n{\"a\": 1}\r\n8\r\n        \r\n0\r\n\r\n", bodyBudget: 10)
        #expect(!chunked.dialled && chunked.outcome.detail.contains("already holds"), "\(chunked.outcome.detail)")
    }

    @Test("what goes upstream: the sandbox's key, API version, beta, accept and user agent headers only (no method override, no Idempotency-Key, no SDK counters, no organisation or project); Host, type and length the gate's")
    func forwardedHead() {
        let req = HTTPRequest(method: "POST", target: "/v1/messages?beta=true", headers: [
            ("x-api-key", "k"), ("anthropic-version", "2023-06-01"), ("Content-Type", "application/x-www-form-urlencoded"),
            ("X-HTTP-Method-Override", "GET"), ("X-Original-URL", "/v1/files"), ("Content-Encoding", "identity"),
            ("Connection", "keep-alive"), ("Host", "api.test"), ("Content-Length", "999"), ("Forwarded", "for=x"),
            ("Idempotency-Key", "held-out-answer-42"), ("x-stainless-retry-count", "3"), ("User-Agent", "Anthropic/Python 0.40.0"),
            ("X-Anything-New", "later"), ("OpenAI-Organization", "org-train"), ("OpenAI-Project", "proj_train"),
        ], body: [])
        let head = String(decoding: req.forwardedHead(host: "api.test", port: 443, bodyLength: 2), as: UTF8.self)
        #expect(head == "POST /v1/messages?beta=true HTTP/1.1\r\nx-api-key: k\r\nanthropic-version: 2023-06-01\r\n"
                + "User-Agent: Anthropic/Python 0.40.0\r\n"
                + "Host: api.test\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n", "\(head)")
    }

    @Test("what comes back: the vendor's status, body headers and request id; its rate-limit counters, retry-after, timing, cookies and connection headers stay at the gate, and a 429's body is the gate's")
    func relayedHead() {
        let vendor = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\nrequest-id: req_1\r\n"
            + "x-ratelimit-remaining-tokens: 149982\r\nanthropic-ratelimit-requests-remaining: 49\r\nanthropic-ratelimit-tokens-reset: 2026-11-27T08:00:00Z\r\n"
            + "retry-after: 7\r\nopenai-processing-ms: 412\r\nSet-Cookie: __cf_bm=abc\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\n"
            + "Transfer-Encoding: chunked\r\n"
        let head = String(decoding: InferenceExchange.relayedHead(Array(vendor.utf8)), as: UTF8.self)
        #expect(head == "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\nrequest-id: req_1\r\n"
                + "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n", "\(head)")
        // A header hidden behind a bare LF or CR inside an allowed line is a line of its own.
        let hidden = "HTTP/1.1 200 OK\r\nContent-Type: application/json\nx-ratelimit-remaining-tokens: 7\r\nVary: a\rretry-after: 3\r\n"
        let judged = String(decoding: InferenceExchange.relayedHead(Array(hidden.utf8)), as: UTF8.self)
        #expect(judged == "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nVary: a\r\nConnection: close\r\n\r\n", "\(judged)")
        // A rate-limit refusal is answered by the gate (its body counts the key's use).
        #expect(InferenceExchange.replacement(forHead: Array("HTTP/1.1 429 Too Many Requests\r\nretry-after: 3\r\n".utf8))?.status == 429)
        #expect(InferenceExchange.replacement(forHead: Array("HTTP/1.1 200 OK\r\n".utf8)) == nil)
        #expect(InferenceExchange.status(Array("HTTP/2 200\r\n".utf8)) == 200)
    }

    @Test("a whole request, by Content-Length or chunked, is judged and only then sent on")
    func passes() throws {
        let plain = try exchange("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nContent-Length: \(Self.body.utf8.count)\r\n\r\n\(Self.body)")
        #expect(plain.dialled && plain.outcome.detail.contains("inference POST /v1/chat/completions (store forced false)"), "\(plain.outcome.detail)")
        #expect(plain.reply.hasPrefix("HTTP/1.1 502"), "\(plain.reply)")
        let half = Self.body.utf8.count / 2
        let a = String(Self.body.prefix(half)), b = String(Self.body.dropFirst(half))
        let chunked = try exchange("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n"
                                   + "\(String(a.utf8.count, radix: 16))\r\n\(a)\r\n\(String(b.utf8.count, radix: 16))\r\n\(b)\r\n0\r\n\r\n")
        #expect(chunked.dialled && chunked.outcome.detail.contains("store forced false"), "\(chunked.outcome.detail)")
    }

    /// A vendor for api.test on one end of a socket pair, TLS under `authority`: it reads the
    /// request's head, then answers `status` (nil: closes without a word), or sends no TLS.
    static func vendor(_ authority: TLSAuthority, status: Int?, tls: Bool = true) -> @Sendable () -> Result<Int32, GateRefusal> {
        {
            var fds: [Int32] = [0, 0]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &fds) == 0 else { return .failure(GateRefusal("socketpair")) }
            let far = fds[1]
            Thread {
                defer { close(far) }
                guard tls, case .success(let c) = authority.accept(far, host: "api.test") else { return }
                var reader = TLSReader(c)
                // The whole request, as a vendor reads it, before any answer.
                let head = String(decoding: reader.readHead(cap: 1 << 16) ?? [], as: UTF8.self).lowercased()
                let length = head.components(separatedBy: "\r\n").first { $0.hasPrefix("content-length:") }
                    .flatMap { Int($0.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) } ?? 0
                _ = reader.read(exactly: length)
                if let status {
                    _ = c.write(Array("HTTP/1.1 \(status) X\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}".utf8))
                }
                c.close()
            }.start()
            return .success(fds[0])
        }
    }

    @Test("vendor failures are counted, per gate, for generation requests: a 500, 502, 503, 504 or 529, a vendor that closes before answering, no TLS, no connection; not a 200, a 400, a 429 (the account's, provoked by load), a 501, a request the gate refused, the proxy's own refusal of an address, a free endpoint's failure (count_tokens), or a failure once the proxy stopped (it cut the connection itself); the audit line says which were counted")
    func vendorFailuresCounted() throws {
        let authority = try TLSAuthority(hosts: ["api.test"])
        let dir = try TempDir()
        let ca = try dir.file("vendor-ca.pem", String(decoding: authority.certificatePEM, as: UTF8.self))
        let request = "POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nContent-Length: \(Self.body.utf8.count)\r\n\r\n\(Self.body)"
        func count(_ dial: @escaping @Sendable () -> Result<Int32, GateRefusal>, raw: String = request,
                   stopped: @escaping @Sendable () -> Bool = { false }) throws -> (Int, String) {
            let gate = try InferenceGate(targets: ["api.test:443"], upstreamCAFile: ca)
            let r = try Self.drive(raw, gate: gate, stopped: stopped, dial: dial)
            #expect(r.outcome.detail.contains("[counted as the vendor's failure]") == (gate.vendorFailures == 1), "\(r.outcome.detail)")
            return (gate.vendorFailures, r.reply)
        }
        for status in [500, 502, 503, 504, 529] {
            let (n, reply) = try count(Self.vendor(authority, status: status))
            #expect(n == 1 && reply.hasPrefix("HTTP/1.1 \(status)"), "\(status): \(n) \(reply)")
        }
        for status in [200, 400, 429, 501] {
            let (n, reply) = try count(Self.vendor(authority, status: status))
            #expect(n == 0 && reply.hasPrefix("HTTP/1.1 \(status)"), "\(status): \(n) \(reply)")
        }
        #expect(try count(Self.vendor(authority, status: nil)).0 == 1, "closed before a response head")
        #expect(try count(Self.vendor(authority, status: nil, tls: false)).0 == 1, "no TLS from the vendor")
        #expect(try count({ .failure(GateRefusal("connection refused")) }).0 == 1, "no connection")
        let refused = try count(Self.vendor(authority, status: 503), raw: "POST /v1/files HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\n\r\n{}")
        #expect(refused.0 == 0 && refused.1.hasPrefix("HTTP/1.1 403"), "\(refused)")
        #expect(try count({ .failure(GateRefusal("resolves to an internal address", byPolicy: true)) }).0 == 0, "the proxy's own refusal")
        let counting = #"{"model": "m", "messages": []}"#
        let free = try count(Self.vendor(authority, status: 503),
                             raw: "POST /v1/messages/count_tokens HTTP/1.1\r\nHost: api.test\r\nContent-Length: \(counting.utf8.count)\r\n\r\n\(counting)")
        #expect(free.0 == 0 && free.1.hasPrefix("HTTP/1.1 503"), "count_tokens: \(free)")
        #expect(try count(Self.vendor(authority, status: nil), stopped: { true }).0 == 0, "after the proxy stopped")
        #expect(try count(Self.vendor(authority, status: 503), stopped: { true }).0 == 0, "after the proxy stopped")
        // Counts add up on one gate (one per tool sandbox), across its exchanges.
        let gate = try InferenceGate(targets: ["api.test:443"], upstreamCAFile: ca)
        for status in [503, 200, 529] { _ = try Self.drive(request, gate: gate, dial: Self.vendor(authority, status: status)) }
        #expect(gate.vendorFailures == 2)
    }

    @Test("credentials: only this run's placeholders pass; a key itself (leaked into the sandbox), a credential the run was not given (a held-out agent.py carrying the train key) and a placeholder in the URL or body are refused before any vendor is dialled; without keys to check nothing is")
    func credentialsChecked() throws {
        func raw(_ header: String, target: String = "/v1/chat/completions", body: String = InferenceExchangeTests.body) -> String {
            "POST \(target) HTTP/1.1\r\nHost: api.test\r\n\(header)Content-Length: \(body.utf8.count)\r\n\r\n\(body)"
        }
        let gate = try InferenceGate(targets: ["api.test:443"], credentials: ["sk-held-out"])
        let p = try #require(gate.placeholder(for: "sk-held-out"))
        #expect(p != "sk-held-out" && p.hasPrefix("sk-") && !p.hasPrefix("sk-held-") && gate.placeholders == [p: "sk-held-out"], "\(p)")
        for (header, why) in [("Authorization: Bearer sk-train\r\n", "was not given"), ("x-api-key: sk-train\r\n", "was not given"),
                              ("api-key: sk-train\r\n", "was not given"), ("Authorization: Bearer \(p)\r\nX-Api-Key: sk-train\r\n", "was not given"),
                              ("authorization: sk-train\r\n", "was not given"), ("Authorization: Bearer sk-held-out\r\n", "a real key"),
                              ("x-api-key: sk-held-out\r\n", "a real key")] {
            let r = try exchange(raw(header), gate: gate)
            #expect(!r.dialled && !r.outcome.allowed && r.reply.hasPrefix("HTTP/1.1 403"), "\(header): \(r.outcome.detail)")
            #expect(r.outcome.detail.contains(why), "\(r.outcome.detail)")
            // The client hears the same whatever the kind: a guessed key is not told from a wrong one.
            #expect(r.reply.contains("the request's credentials are not the ones autoharness gave this run") && !r.reply.contains(why), "\(r.reply)")
            #expect(!r.outcome.detail.contains("sk-train") && !r.outcome.detail.contains("sk-held-out"), "the refusal repeats the key: \(r.outcome.detail)")
        }
        // The placeholder outside a credential header: a vendor that echoed it must not get the key.
        for (request, why) in [(raw("Authorization: Bearer \(p)\r\n", target: "/v1/chat/completions?key=\(p)"), "request's URL carries this run's key placeholder"),
                               (raw("Authorization: Bearer \(p)\r\n", body: #"{"model": "m", "messages": [{"role": "user", "content": "echo \#(p)"}]}"#), "request's body carries this run's key placeholder"),
                               // Spelled with a JSON escape: the gate's re-serialised body is what is checked too.
                               (raw("Authorization: Bearer \(p)\r\n", body: #"{"model": "m", "messages": [{"role": "user", "content": "echo \u0073\#(p.dropFirst())"}]}"#), "forwarded body carries this run's key placeholder"),
                               // A key the sandbox somehow has, anywhere in the request.
                               (raw("Authorization: Bearer \(p)\r\nUser-Agent: sk-held-out\r\n"), "a real key outside its credential header"),
                               (raw("Authorization: Bearer \(p)\r\n", body: #"{"model": "m", "messages": [{"role": "user", "content": "sk-held-out"}]}"#), "body carries a real key")] {
            let r = try exchange(request, gate: gate)
            #expect(!r.dialled && r.outcome.detail.contains(why), "\(why): \(r.outcome.detail)")
        }
        for header in ["Authorization: Bearer \(p)\r\n", "authorization: bearer  \(p)\r\n", "x-api-key: \(p)\r\n", ""] {
            let r = try exchange(raw(header), gate: gate)
            #expect(r.dialled, "\(header): \(r.outcome.detail)")
        }
        #expect(try exchange(raw("Authorization: Bearer sk-anything\r\n")).dialled)
        // Another gate (another run) has other placeholders for the same key.
        let other = try InferenceGate(targets: ["api.test:443"], credentials: ["sk-held-out"])
        #expect(other.placeholder(for: "sk-held-out") != p)
        #expect(!(try exchange(raw("Authorization: Bearer \(p)\r\n"), gate: other).dialled))
    }

    @Test("the coding agent's gate masks its placeholder in a body (an agent that printed its environment goes on), spelled plainly or with a JSON escape; a key in the body is refused all the same; a held-out gate never masks")
    func bodyPlaceholderMasked() throws {
        let gate = try InferenceGate(targets: ["api.test:443"], credentials: ["sk-coder"], masksBodyPlaceholders: true)
        let p = try #require(gate.placeholder(for: "sk-coder"))
        func raw(_ body: String, _ placeholder: String) -> String {
            "POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer \(placeholder)\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)"
        }
        // The refusing gate (a runner's) does not dial for the same requests.
        let strict = try InferenceGate(targets: ["api.test:443"], credentials: ["sk-coder"])
        let q = try #require(strict.placeholder(for: "sk-coder"))
        for body in [{ (x: String) in #"{"model": "m", "messages": [{"role": "user", "content": "OPENAI_API_KEY=\#(x)"}]}"# },
                     { (x: String) in #"{"model": "m", "messages": [{"role": "user", "content": "\u0073\#(x.dropFirst())"}]}"# }] {
            let r = try exchange(raw(body(p), p), gate: gate)
            #expect(r.dialled, "\(body(p)): \(r.outcome.detail)")
            #expect(!(try exchange(raw(body(q), q), gate: strict).dialled), "\(body(q))")
        }
        let key = try exchange(raw(#"{"model": "m", "messages": [{"role": "user", "content": "sk-coder"}]}"#, p), gate: gate)
        #expect(!key.dialled && key.outcome.detail.contains("body carries a real key"), "\(key.outcome.detail)")
        var bytes = Array("a \(p) b \(p)".utf8)
        #expect(HTTPRequest.mask(&bytes, [p]) && String(decoding: bytes, as: UTF8.self) == "a \(String(repeating: "*", count: p.count)) b \(String(repeating: "*", count: p.count))")
        #expect(!(try InferenceGate(targets: ["api.test:443"], heldOut: true, credentials: ["k"], masksBodyPlaceholders: true)).masksBodyPlaceholders)
    }

    @Test("placeholders keep a key's prefix and length, random after it; the vendor gets the key in the header that carried its placeholder, nowhere else")
    func placeholderSwapped() {
        // Which variables hold keys (made placeholders, compared across accounts): by the
        // words for a secret their names end in (RUNNER_APIKEY reached a sandbox real).
        for name in ["OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN", "RUNNER_APIKEY", "DB_SECRET", "SMTP_PASSWORD", "GH_PAT", "VENDOR_AUTH", "GCP_CREDENTIALS"] {
            #expect(InferenceGate.isCredentialVariable(name), "\(name)")
        }
        for name in ["MODEL_URL", "OPENAI_BASE_URL", "FAKE_MODE", "PATH", "SSL_CERT_FILE"] { #expect(!InferenceGate.isCredentialVariable(name), "\(name)") }
        for (key, prefix) in [("sk-proj-" + String(repeating: "a1", count: 40), "sk-proj-"), ("sk-ant-api03-" + String(repeating: "Zz", count: 45), "sk-ant-api03-"),
                              ("abcdef0123456789abcdef", ""), ("k", ""),
                              // Only a vendor's public prefix is kept: what precedes a '-' or '_' may be secret.
                              ("vllm_local_key_2024", ""), ("sk-train-secret-0123456789", "sk-"), ("0123456789abcde-", "")] {
            let p = InferenceGate.placeholder(shapedLike: key)
            #expect(p != key && p.count == max(key.count, prefix.count + 8) && p.hasPrefix(prefix), "\(key) -> \(p)")
            // Nothing of the key past its prefix is kept (8+ random characters from 62 rarely share the next one).
            #expect(!p.hasPrefix(String(key.prefix(prefix.count + 4))) || key.count < prefix.count + 4, "\(key) -> \(p)")
        }
        let req = HTTPRequest(method: "POST", target: "/v1/messages", headers: [("Authorization", "bearer PH-1"), ("x-api-key", "PH-1"), ("anthropic-version", "PH-1")], body: [])
        let head = String(decoding: req.forwardedHead(host: "api.test", port: 443, bodyLength: 2, keys: ["PH-1": "sk-real"]), as: UTF8.self)
        #expect(head.hasPrefix("POST /v1/messages HTTP/1.1\r\nAuthorization: Bearer sk-real\r\nx-api-key: sk-real\r\nanthropic-version: PH-1\r\n"), "\(head)")
    }

    @Test("refused on the wire before any vendor is dialled", arguments: [
        ("GET /v1/files HTTP/1.1\r\nHost: api.test\r\n\r\n", "403", "not a stateless inference call"),
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: evil.test\r\nContent-Length: 2\r\n\r\n{}", "403", "is not the tunnel's host"),
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nHost: evil.test\r\nContent-Length: 2\r\n\r\n{}", "403", "more than one Host"),
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nX-A: 1\nHost: evil.test\r\nContent-Length: 2\r\n\r\n{}", "400", "control byte (0xa)"),
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}", "400", "both Transfer-Encoding and Content-Length"),
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}", "400", "malformed Content-Length"),
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}", "400", "cannot be judged"),
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nUpgrade: h2c\r\n\r\n", "400", "protocol upgrades"),
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nContent-Length: 99\r\n\r\n{}", "400", "shorter than its Content-Length"),
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nContent-Length: 39\r\n\r\n{\"store\": false, \"store\": true, \"a\": 1}", "403", "duplicate key"),
        // A signed chunk size once reached a negative slice and stopped the supervisor.
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n", "400", "malformed chunk size"),
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n+2\r\n{}\r\n0\r\n\r\n", "400", "malformed chunk size"),
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nTransfer_Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}", "400", "malformed header name"),
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nContent-Encoding: identity\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\n{}", "400", "cannot be judged"),
        ("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n" + String(repeating: "X-T: 1\r\n", count: 33) + "\r\n", "400", "more than 32 trailer lines"),
        ("POST /v1/chat/completions?store=true HTTP/1.1\r\nHost: api.test\r\nContent-Length: 2\r\n\r\n{}", "403", "other than beta=true"),
    ])
    func refused(raw: String, status: String, why: String) throws {
        let r = try exchange(raw)
        #expect(!r.dialled, "the vendor was dialled for \(raw)")
        #expect(!r.outcome.allowed)
        #expect(r.outcome.detail.contains(why), "\(r.outcome.detail)")
        #expect(r.reply.hasPrefix("HTTP/1.1 \(status)"), "\(r.reply)")
        #expect(r.reply.contains("autoharness_inference_gate"), "\(r.reply)")
    }
}

@Suite("Inference gate: memory held for request bodies")
struct ByteBudgetTests {
    @Test("holds share one limit; what one exchange held is given back at its end")
    func sharedLimit() {
        let budget = ByteBudget(limit: 100)
        let a = ByteBudget.Hold(budget), b = ByteBudget.Hold(budget)
        #expect(a.take(60))
        #expect(!b.take(41))
        #expect(b.take(40))
        #expect(!a.take(1))
        a.release()
        #expect(b.take(60))
        #expect(!b.take(1))
        b.release()
        #expect(ByteBudget.Hold(budget).take(100))
    }
}

@Suite("Inference gate: what comes back never carries a key", .serialized)
struct InferenceResponseTests {
    /// `raw` through `gate` to a vendor (TLS, its own CA) that answers with everything it
    /// received, as a reflecting endpoint or a gateway's error page would.
    func reflected(_ raw: String, gate: InferenceGate, vendor: TLSAuthority) throws -> (reply: String, vendorGot: String) {
        final class Got: @unchecked Sendable {
            var text = ""
            let done = DispatchSemaphore(value: 0)
        }
        let got = Got()
        let r = try InferenceExchangeTests.drive(raw, gate: gate) {
            var v: [Int32] = [0, 0]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0, &v) == 0 else { return .failure(GateRefusal("socketpair")) }
            let side = v[1]
            Thread {
                defer { close(side); got.done.signal() }
                guard case .success(let tls) = vendor.accept(side, host: "api.test") else { return }
                var tv = timeval(tv_sec: 1, tv_usec: 0)
                _ = setsockopt(side, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
                var bytes: [UInt8] = [], buf = [UInt8](repeating: 0, count: 65536)
                while true { let n = tls.read(into: &buf); if n <= 0 { break }; bytes += buf[..<n] }
                got.text = String(decoding: bytes, as: UTF8.self)
                // The echo in two writes, split inside the key, and a request id that repeats it.
                let head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nx-request-id: \(got.text.split(separator: "\r\n").first { $0.hasPrefix("Authorization") } ?? "")\r\nContent-Length: \(bytes.count)\r\n\r\n"
                let cut = bytes.count / 2
                _ = tls.write(Array(head.utf8) + bytes[..<cut])
                _ = tls.write(bytes[cut...])
                tls.close()
            }.start()
            return .success(v[0])
        }
        got.done.wait()
        return (r.reply, got.text)
    }

    @Test("a vendor that reflects the request gets the key and the sandbox gets it masked, in the body and the headers, whatever the reads' boundaries; no Accept-Encoding goes up")
    func reflectionMasked() throws {
        let key = "sk-proj-REALKEY" + String(repeating: "x9", count: 30)
        let vendor = try TLSAuthority(hosts: ["api.test"])
        let dir = try TempDir()
        let ca = try dir.file("vendor-ca.pem", String(decoding: vendor.certificatePEM, as: UTF8.self))
        let gate = try InferenceGate(targets: ["api.test:443"], upstreamCAFile: ca, credentials: [key])
        let p = try #require(gate.placeholder(for: key))
        let body = #"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#
        let r = try reflected("POST /v1/chat/completions HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer \(p)\r\nAccept-Encoding: gzip\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)",
                              gate: gate, vendor: vendor)
        #expect(r.vendorGot.contains("Authorization: Bearer \(key)") && !r.vendorGot.lowercased().contains("accept-encoding"), "\(r.vendorGot)")
        #expect(r.reply.hasPrefix("HTTP/1.1 200") && !r.reply.contains(key) && !r.reply.contains("REALKEY"), "\(r.reply)")
        #expect(r.reply.contains("Authorization: Bearer " + String(repeating: "*", count: key.count)), "\(r.reply)")
    }

    @Test("the mask finds a key split over any two reads, and leaves everything else as it was")
    func maskAcrossReads() {
        let key = "sk-abcdefgh12345678"
        let text = Array("head \(key) middle \(key)tail".utf8)
        for cut in 0...text.count {
            var mask = InferenceExchange.KeyMask(["sk-abcdefgh12345678"])
            let out = mask.pass(text[..<cut]) + mask.pass(text[cut...]) + mask.finish()
            let stars = String(repeating: "*", count: key.count)
            #expect(String(decoding: out, as: UTF8.self) == "head \(stars) middle \(stars)tail", "cut \(cut)")
        }
        var none = InferenceExchange.KeyMask([])
        #expect(none.pass(text[...]) == text)
    }
}
