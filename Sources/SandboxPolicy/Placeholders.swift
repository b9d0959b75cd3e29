// `{name}` placeholders: the per-run values (a task's work directory, a staging copy) that a
// shipped policy cannot know. They may appear in bind sources, destinations, `chdir` and
// `env.set` values, and nowhere else. Braces are reserved for placeholders, so a stray `{`
// is a syntax error instead of a silently literal path.

/// A string with `{name}` placeholders, split into literal text and placeholder names.
struct Template: Equatable {
    enum Segment: Equatable {
        case text(String)
        case placeholder(String)
    }

    var segments: [Segment]

    struct SyntaxError: Error {
        var message: String
    }

    /// Splits `s`, rejecting braces that do not form a `{name}` with a valid name.
    init(parsing s: String) throws(SyntaxError) {
        segments = []
        var text = ""
        var rest = Substring(s)
        while let c = rest.first {
            rest = rest.dropFirst()
            switch c {
            case "{":
                guard let close = rest.firstIndex(of: "}") else {
                    throw SyntaxError(message: "unclosed '{' in '\(s)' (placeholders look like {name})")
                }
                let name = String(rest[..<close])
                guard Template.isValidName(name) else {
                    throw SyntaxError(
                        message: "'{\(name)}' in '\(s)' is not a placeholder (names match [a-z_][a-z0-9_]*; braces are reserved for placeholders)"
                    )
                }
                if !text.isEmpty { segments.append(.text(text)) }
                text = ""
                segments.append(.placeholder(name))
                rest = rest[rest.index(after: close)...]
            case "}":
                throw SyntaxError(message: "unmatched '}' in '\(s)' (braces are reserved for placeholders)")
            default:
                text.append(c)
            }
        }
        if !text.isEmpty { segments.append(.text(text)) }
    }

    static func isValidName(_ name: String) -> Bool {
        guard let first = name.unicodeScalars.first, first == "_" || ("a"..."z").contains(first) else { return false }
        return name.unicodeScalars.allSatisfy { $0 == "_" || ("a"..."z").contains($0) || ("0"..."9").contains($0) }
    }

    /// Placeholder names in order of first appearance, without repeats.
    var names: [String] {
        var seen: Set<String> = []
        return segments.compactMap {
            guard case .placeholder(let name) = $0, seen.insert(name).inserted else { return nil }
            return name
        }
    }

    /// Fills in the placeholders `variables` has values for. Values are inserted verbatim
    /// (never rescanned), so a value cannot smuggle in another placeholder. Placeholders
    /// without a value stay as `{name}` and are listed in `unresolved`.
    func substitute(_ variables: [String: String]) -> (text: String, unresolved: [String]) {
        var text = ""
        var unresolved: [String] = []
        for segment in segments {
            switch segment {
            case .text(let t):
                text += t
            case .placeholder(let name):
                if let value = variables[name] {
                    text += value
                } else {
                    text += "{\(name)}"
                    if !unresolved.contains(name) { unresolved.append(name) }
                }
            }
        }
        return (text, unresolved)
    }
}

extension PolicyLoader {
    /// The `{name}` placeholders in `s`, in order of first appearance, without repeats.
    /// Malformed braces are ignored here; the loader reports them.
    public static func placeholders(in s: String) -> [String] {
        var names: [String] = []
        var rest = Substring(s)
        while let open = rest.firstIndex(of: "{") {
            rest = rest[rest.index(after: open)...]
            guard let close = rest.firstIndex(of: "}") else { break }
            let name = String(rest[..<close])
            if Template.isValidName(name) {
                if !names.contains(name) { names.append(name) }
                rest = rest[rest.index(after: close)...]
            }
        }
        return names
    }

    /// The placeholders a policy loaded with `requireAllPlaceholders: false` still needs
    /// values for (so `policy show` can list the `--var`s a launch will need), in the order
    /// mounts, `chdir`, then `env.set` by variable name.
    public static func placeholders(in policy: Policy) -> [String] {
        var strings: [String] = []
        for mount in policy.mounts {
            if let source = mount.source { strings.append(source) }
            strings.append(mount.destination)
        }
        strings.append(policy.chdir)
        strings += policy.env.set.keys.sorted().compactMap { policy.env.set[$0] }
        var names: [String] = []
        for name in strings.flatMap(placeholders(in:)) where !names.contains(name) {
            names.append(name)
        }
        return names
    }
}
