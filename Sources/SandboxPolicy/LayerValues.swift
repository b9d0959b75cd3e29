import Foundation
import Yams

/// The values of a policy layer's own kinds, read by `LayerParser`: paths with their
/// placeholders, bounded integers, sizes, file modes.
extension LayerParser {
    // MARK: - Paths and placeholders

    /// Syntax-checks `literal`'s placeholders and fills them in. With `requireAllPlaceholders`,
    /// each placeholder without a value is an error naming it.
    mutating func substitute(_ literal: String, at node: Node, placeholderHint: String)
        -> (text: String, unresolved: [String])?
    {
        let template: Template
        do {
            template = try Template(parsing: literal)
        } catch {
            reader.error(at: node, error.message)
            return nil
        }
        let result = template.substitute(variables)
        if requireAllPlaceholders && !result.unresolved.isEmpty {
            for name in result.unresolved {
                reader.error(at: node, "placeholder {\(name)} has no value (pass --var \(name)=\(placeholderHint))")
            }
            return nil
        }
        return result
    }

    /// A path field: placeholders, then absolute, no `..`, normalised. `what` names the field
    /// in messages ("ro source", "chdir").
    mutating func path(_ literal: String, at node: Node, what: String, placeholderHint: String)
        -> ResolvedPath?
    {
        // Judge the text as written first: "relative/{x}" can never become absolute.
        guard literal.hasPrefix("/") || literal.hasPrefix("{") else {
            reader.error(at: node, "\(what) '\(literal)' must be an absolute path")
            return nil
        }
        guard let (text, unresolved) = substitute(literal, at: node, placeholderHint: placeholderHint) else { return nil }
        let origin = text == literal ? "" : " (from '\(literal)')"
        if unresolved.isEmpty && !text.hasPrefix("/") {
            reader.error(at: node, "\(what) '\(text)'\(origin) must be an absolute path")
            return nil
        }
        do {
            return ResolvedPath(path: try SandboxPath.normalize(text), isConcrete: unresolved.isEmpty)
        } catch {
            switch error {
            case .dotDot: reader.error(at: node, "\(what) '\(text)'\(origin) has a '..' component; write the path without it")
            case .nul: reader.error(at: node, "\(what)\(origin) contains a NUL byte")
            case .tooLong: reader.error(at: node, "\(what)\(origin) is longer than PATH_MAX")
            }
            return nil
        }
    }

    // MARK: - Values of a policy's own kinds

    /// A decimal integer in `min...max`.
    mutating func integer(_ node: Node, _ what: String, min: UInt64, max: UInt64) -> UInt64? {
        guard let spelled = reader.text(node, what) else { return nil }
        guard spelled.allSatisfy(\.isASCIIDigit), let value = UInt64(spelled), (min...max).contains(value) else {
            let range = min == 1 ? "a positive integer" : "an integer"
            reader.error(at: node, "\(what) must be \(range) no larger than \(max) (got '\(spelled)')")
            return nil
        }
        return value
    }

    mutating func byteSize(_ node: Node, _ what: String) -> UInt64? {
        guard let spelled = reader.text(node, what) else { return nil }
        guard let value = ByteSize.parse(spelled), value > 0, value <= Limits.maxBytes else {
            reader.error(at: node, "\(what) must be a positive size such as 1024, 512K, 64M or 1.5G, at most \(ByteSize.format(Limits.maxBytes)) (got '\(spelled)')")
            return nil
        }
        return value
    }

    /// Permission bits in octal, as `chmod` takes them: `1777`, `"0755"`, `0o700`. The digits
    /// are read as octal even when YAML would call them a decimal integer.
    mutating func fileMode(_ node: Node) -> UInt32? {
        guard let spelled = reader.text(node, "tmpfs mode") else { return nil }
        let digits = spelled.hasPrefix("0o") ? String(spelled.dropFirst(2)) : spelled
        guard !digits.isEmpty, digits.allSatisfy({ ("0"..."7").contains($0) }), let mode = UInt32(digits, radix: 8),
            mode <= 0o7777
        else {
            reader.error(at: node, "tmpfs mode must be octal permission bits such as 1777 or 0755 (got '\(spelled)')")
            return nil
        }
        return mode
    }
}
