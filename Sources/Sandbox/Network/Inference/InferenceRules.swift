/// What the inference gate lets through to a model vendor: stateless inference calls only.
///
/// The vendors keep state per account: stored completions and responses, files, batches,
/// vector stores, assistants, conversations, containers. Train and held-out runs share the
/// runner's key, so a held-out agent.py that could leave an object there would have a later
/// train agent.py list it and print it into the trace the coding agent reads. Here every
/// request is judged before the vendor sees a byte of it:
/// - the endpoint must be one of `endpoints` (POST, an exact path, no percent-encoding);
/// - the body must be one strict JSON object (`StrictJSON`), which is what is forwarded;
/// - `store` is forced to false where the vendor would keep the exchange (OpenAI Responses
///   stores by default; Chat Completions when asked);
/// - fields that read or write state kept by the vendor are refused (`conversation`,
///   `previous_response_id`, `background`, Anthropic's `container` and `mcp_servers`);
/// - tools must be run by the client: a server-side tool would have the vendor fetch a URL,
///   search, run code in a container or call an MCP server, each of which is state or a
///   route past the proxy's allowlist (a held-out run fetching `https://x.example/?bits`).
///
/// The vendor's prompt cache is state too: a later request's usage (`cached_tokens`,
/// `cache_read_input_tokens`) and latency show whether its prefix was sent before, within an
/// organisation. A held-out run's requests therefore ask for no caching: Anthropic caches only
/// at `cache_control` breakpoints, which are removed (so a held-out prompt is never cached);
/// OpenAI's `prompt_cache_key` and `prompt_cache_retention` are removed. OpenAI caches long
/// prompts (1,024 tokens and more) whatever the request says: only a key of another
/// organisation for held-out runs (`gate.held_out_env`) separates that (docs/benchmarks.md: The inference gate).
enum InferenceRules {
    enum Endpoint: Equatable {
        case anthropicMessages, anthropicCountTokens
        case openAIResponses, openAIChat, openAICompletions, openAIEmbeddings, openAIModerations
    }

    /// OpenAI's and Anthropic's stateless calls (and everything that speaks their formats:
    /// LiteLLM, vLLM, OpenRouter's OpenAI-compatible API).
    static let endpoints: [String: Endpoint] = [
        "/v1/messages": .anthropicMessages,
        "/v1/messages/count_tokens": .anthropicCountTokens,
        "/v1/responses": .openAIResponses,
        "/v1/chat/completions": .openAIChat,
        "/v1/completions": .openAICompletions,
        "/v1/embeddings": .openAIEmbeddings,
        "/v1/moderations": .openAIModerations,
    ]

    /// Whether `target` asks for a generation (Messages, Responses, Chat, Completions): the
    /// requests whose failure by the vendor `gate.infra_retries` counts.
    static func isGeneration(_ target: String) -> Bool {
        let path = target.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? target
        switch endpoints[path] {
        case .anthropicMessages?, .openAIResponses?, .openAIChat?, .openAICompletions?: return true
        default: return false
        }
    }

    /// Tool types that the client runs (the model only names a call): OpenAI's function and
    /// custom tools and its client-executed shell, patch and computer tools; Anthropic's
    /// custom tools (no `type`, or `custom`) and its client tools by prefix (`bash_20250124`).
    static let openAIClientTools: Set<String> = ["function", "custom", "local_shell", "shell", "apply_patch", "computer_use_preview", "computer_use"]
    static let anthropicClientToolPrefixes = ["bash_", "text_editor_", "computer_", "memory_"]

    enum Verdict: Equatable {
        /// Forward with this body; `notes` says what the gate changed (for the audit line).
        case forward(body: [UInt8], notes: [String])
        case refuse(String)
    }

    /// `target` is the request target of the request line (path and query).
    static func judge(method: String, target: String, body: [UInt8], heldOut: Bool = false) -> Verdict {
        let path: Substring, query: Substring?
        if let q = target.firstIndex(of: "?") {
            path = target[..<q]
            query = target[target.index(after: q)...]
        } else {
            path = target[...]
            query = nil
        }
        guard let endpoint = endpoints[String(path)] else {
            return .refuse("\(method) \(path.prefix(120)) is not a stateless inference call")
        }
        guard method == "POST" else { return .refuse("\(method) \(path): only POST reaches an inference endpoint") }
        // Claude Code's `?beta=true`, and nothing else (`?store=true` would be another way in).
        if let query, query != "beta=true" {
            return .refuse("\(path): a query string other than beta=true")
        }
        let json: StrictJSON
        do {
            json = try StrictJSON.parse(body)
        } catch {
            return .refuse("\(path): the body is not strict JSON (\(error.reason) at byte \(error.offset))")
        }
        guard case .object = json else { return .refuse("\(path): the body is not a JSON object") }
        return judgeBody(endpoint, path: String(path), json, heldOut: heldOut)
    }

    private static func judgeBody(_ endpoint: Endpoint, path: String, _ json: StrictJSON, heldOut: Bool) -> Verdict {
        var body = json
        var notes: [String] = []
        if let why = reference(in: json, path: path) { return .refuse(why) }
        func refusedFields(_ names: [String]) -> String? {
            names.first { json[$0] != nil && json[$0] != .null }
        }
        switch endpoint {
        case .openAIResponses:
            if let f = refusedFields(["conversation", "previous_response_id", "prompt"]) {
                return .refuse("\(path): `\(f)` refers to state the vendor keeps")
            }
            if let b = json["background"], b != .bool(false), b != .null {
                return .refuse("\(path): `background` runs are stored by the vendor")
            }
            if json["store"] != .bool(false) {
                body = body.setting("store", to: .bool(false))
                notes.append("store forced false")
            }
            if let why = openAITools(json["tools"], path: path) { return .refuse(why) }
        case .openAIChat:
            if let s = json["store"], s != .bool(false), s != .null {
                body = body.setting("store", to: .bool(false))
                notes.append("store forced false")
            }
            if let f = refusedFields(["web_search_options"]) {
                return .refuse("\(path): `\(f)`: the vendor would fetch from the web")
            }
            if let why = openAITools(json["tools"], path: path) { return .refuse(why) }
        case .anthropicMessages, .anthropicCountTokens:
            if let f = refusedFields(["container", "mcp_servers"]) {
                return .refuse("\(path): `\(f)` reaches state or servers beyond the model")
            }
            if let why = anthropicTools(json["tools"], path: path) { return .refuse(why) }
        case .openAICompletions, .openAIEmbeddings, .openAIModerations:
            break
        }
        if heldOut {
            let (uncached, removed) = withoutCacheRequests(body, endpoint)
            body = uncached
            if removed > 0 { notes.append("\(removed) prompt-cache request(s) removed (held-out run)") }
        }
        return .forward(body: body.serialized(), notes: notes)
    }

    /// `body` without what asks the vendor to cache a prompt, and how many were removed:
    /// Anthropic's `cache_control` wherever it stands, at any depth (the request's own, each
    /// tool, each system block, each content block, and blocks nested in those: a
    /// `tool_result`'s `search_result` content, a `document` source's content; the SDK's types
    /// accept a breakpoint there and the vendor honours it, found by a red team), never inside
    /// a tool's schema, a tool call's input or the request's metadata and output format, which
    /// are the caller's; OpenAI's `prompt_cache_key` and `prompt_cache_retention`.
    static func withoutCacheRequests(_ body: StrictJSON, _ endpoint: Endpoint) -> (StrictJSON, Int) {
        var removed = 0
        func drop(_ keys: Set<String>, from value: StrictJSON) -> StrictJSON {
            guard case .object(let members) = value else { return value }
            let kept = members.filter { !keys.contains($0.key) }
            removed += members.count - kept.count
            return .object(kept)
        }
        /// Every `cache_control` below `value`, but in what the caller owns.
        func strip(_ value: StrictJSON, top: Bool) -> StrictJSON {
            switch value {
            case .array(let items):
                return .array(items.map { strip($0, top: false) })
            case .object(let members):
                let call = value["type"] == .string("tool_use") || value["type"] == .string("server_tool_use")
                var out: [StrictJSON.Member] = []
                for m in members {
                    if m.key == "cache_control" { removed += 1; continue }
                    let callers = m.key == "input_schema" || (call && m.key == "input")
                        || (top && ["metadata", "output_format", "response_format", "tool_choice"].contains(m.key))
                    out.append(callers ? m : StrictJSON.Member(key: m.key, value: strip(m.value, top: false)))
                }
                return .object(out)
            default:
                return value
            }
        }
        switch endpoint {
        case .anthropicMessages, .anthropicCountTokens:
            return (strip(body, top: true), removed)
        case .openAIResponses, .openAIChat, .openAICompletions, .openAIEmbeddings:
            return (drop(["prompt_cache_key", "prompt_cache_retention"], from: body), removed)
        case .openAIModerations:
            return (body, 0)
        }
    }

    /// `tools` as a list (absent or null: none), or nil when it is something else.
    /// A place in the request where the vendor would fetch a URL or read an object it keeps:
    /// an image or file by URL (a held-out run's GET to `https://x.example/?bits` writes, a
    /// train run's reads back), a `file_id`, an Anthropic `url` or `file` source, a Responses
    /// `item_reference`. Searched everywhere but in the tool and output-format schemas and a
    /// tool call's own input, whose keys are the caller's.
    static func reference(in json: StrictJSON, path: String, depth: Int = 0) -> String? {
        switch json {
        case .array(let items):
            for item in items { if let why = reference(in: item, path: path, depth: depth + 1) { return why } }
        case .object(let members):
            let type = json["type"]
            if type == .string("item_reference") { return "\(path): an `item_reference` reads a stored item" }
            if depth > 0, type == .string("url") || type == .string("file") {
                return "\(path): a content source the vendor fetches or keeps (`\(type == .string("url") ? "url" : "file")`)"
            }
            for m in members {
                if depth == 0, ["tools", "response_format", "text", "tool_choice", "metadata"].contains(m.key) { continue }
                if type == .string("tool_use") || type == .string("server_tool_use"), m.key == "input" { continue }
                switch m.key {
                case "file_id", "file_url", "container_id":
                    if m.value != .null { return "\(path): `\(m.key)` names something the vendor fetches or keeps" }
                case "image_url", "url":
                    let url: StrictJSON? = m.value["url"] ?? m.value
                    if case .string(let s)? = url, !s.hasPrefix("data:") {
                        return "\(path): `\(m.key)` has the vendor fetch a URL (only data: URLs pass)"
                    }
                default: break
                }
                if let why = reference(in: m.value, path: path, depth: depth + 1) { return why }
            }
        default: break
        }
        return nil
    }

    private static func toolList(_ tools: StrictJSON?) -> [StrictJSON]? {
        switch tools {
        case nil, .null?: return []
        case .array(let items)?: return items
        default: return nil
        }
    }

    static func openAITools(_ tools: StrictJSON?, path: String, nested: Bool = false) -> String? {
        guard let items = toolList(tools) else { return "\(path): `tools` is not a list" }
        for tool in items {
            guard case .string(let type)? = tool["type"] else { return "\(path): a tool without a `type`" }
            // A namespace groups tools under one name (Codex 0.163 sends its sub-agent tools
            // so): it passes when every tool in it would, one level deep.
            if type == "namespace" && !nested {
                guard case .object(let fields) = tool, fields.allSatisfy({ ["type", "name", "description", "tools"].contains($0.key) }) else {
                    return "\(path): a namespace tool with keys other than type, name, description and tools"
                }
                if let why = openAITools(tool["tools"], path: path, nested: true) { return why }
                continue
            }
            if !openAIClientTools.contains(type) {
                return "\(path): tool type `\(type.prefix(60))` runs at the vendor (only tools the client runs pass)"
            }
            // The shell tool runs at the vendor, in a container with its own network, unless
            // its environment is the client's.
            if type == "shell", let env = tool["environment"], env != .null, env["type"] != .string("local") {
                return "\(path): a shell tool whose environment is the vendor's container"
            }
        }
        return nil
    }

    static func anthropicTools(_ tools: StrictJSON?, path: String) -> String? {
        guard let items = toolList(tools) else { return "\(path): `tools` is not a list" }
        for tool in items {
            guard case .object = tool else { return "\(path): a tool that is not an object" }
            switch tool["type"] {
            case nil, .null?, .string("custom")?: continue
            case .string(let type)? where anthropicClientToolPrefixes.contains(where: { type.hasPrefix($0) }): continue
            case .string(let type)?: return "\(path): tool type `\(type.prefix(60))` runs at the vendor (only tools the client runs pass)"
            default: return "\(path): a tool whose `type` is not a string"
            }
        }
        return nil
    }
}
