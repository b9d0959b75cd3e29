import Foundation
import SandboxPolicy
import Yams

/// The config's own kinds of value, read over `YAMLReader`'s shapes; problems are recorded
/// with their `file:line`, never thrown.
final class ConfigReader {
    let yaml: YAMLReader
    /// Problems of the whole file (a key that is missing), with no line.
    private var unplaced: [ConfigError] = []

    /// Every key read so far, by its dotted path (`gate.vm.cpus`), for checks that involve
    /// more than one key and for the places recorded in the config.
    var placed: [String: Node] = [:]

    init(file: String) { yaml = YAMLReader(file: file) }

    /// The node of the key at `path`, if the file gave it.
    func node(_ path: String) -> Node? { placed[path] }

    /// Where the key at `path` is, as `file:line`, if the file gave it.
    func place(_ path: String) -> String? {
        placed[path].map { n in let at = yaml.location(of: n); return "\(at.file):\(at.line)" }
    }

    var errors: [ConfigError] {
        yaml.problems.map { ConfigError(file: $0.location.file, line: $0.location.line, message: $0.message) } + unplaced
    }

    func error(_ node: Node, _ message: String) { yaml.error(at: node, message) }

    func fileError(_ message: String) { unplaced.append(ConfigError(file: yaml.file, line: nil, message: message)) }

    /// `allowed: nil` accepts any key (a free-form map such as an environment).
    func mapping(_ node: Node, _ what: String, allowed: [String]?, _ each: (String, Node) -> Void) {
        guard let fields = yaml.fields(of: node, in: what, allowed: allowed) else { return }
        for key in fields.keys { if let value = fields[key] { each(key, value) } }
    }

    func string(_ node: Node, _ key: String) -> String? {
        guard let s = yaml.text(node, key) else { return nil }
        guard !s.isEmpty else {
            error(node, "\(key): expected a non-empty string")
            return nil
        }
        return s
    }

    func oneOf(_ node: Node, _ key: String, _ allowed: [String]) -> String? {
        guard let s = string(node, key) else { return nil }
        guard allowed.contains(s) else {
            error(node, "\(key): '\(s)' is not allowed (allowed: \(allowed.joined(separator: ", ")))")
            return nil
        }
        return s
    }

    /// A non-empty list of distinct items, each one of `allowed`.
    func subset(_ node: Node, _ key: String, _ allowed: [String]) -> [String]? {
        guard let items = strings(node, key) else { return nil }
        guard !items.isEmpty else {
            error(node, "\(key): expected at least one of \(allowed.joined(separator: ", "))")
            return nil
        }
        if let bad = items.first(where: { !allowed.contains($0) }) {
            error(node, "\(key): '\(bad)' is not allowed (allowed: \(allowed.joined(separator: ", ")))")
            return nil
        }
        if let twice = items.enumerated().first(where: { items[..<$0.offset].contains($0.element) })?.element {
            error(node, "\(key): '\(twice)' is listed twice")
            return nil
        }
        return items
    }

    func number(_ node: Node, _ key: String, _ range: ClosedRange<Double>) -> Double? {
        guard let s = string(node, key) else { return nil }
        guard let x = Double(s), x.isFinite, range.contains(x) else {
            error(node, "\(key): must be a number from \(Self.shown(range.lowerBound)) to \(Self.shown(range.upperBound)) (got '\(s)')")
            return nil
        }
        return x
    }

    func integer(_ node: Node, _ key: String, _ range: ClosedRange<Int>) -> Int? {
        guard let s = string(node, key) else { return nil }
        guard let x = Int(s), range.contains(x) else {
            error(node, "\(key): must be a whole number from \(range.lowerBound) to \(range.upperBound) (got '\(s)')")
            return nil
        }
        return x
    }

    /// A list of `host:port` strings (port 1-65535, host without scheme or path).
    func hostPorts(_ node: Node, _ key: String) -> [String]? {
        guard let items = strings(node, key) else { return nil }
        for item in items {
            guard let colon = item.lastIndex(of: ":"), let port = Int(item[item.index(after: colon)...]), (1...65535).contains(port),
                  item[item.index(after: colon)...].first != "0",
                  colon != item.startIndex, !item.contains("/"), !item.contains(" ") else {
                error(node, "\(key): '\(item)' is not host:port (e.g. api.anthropic.com:443)")
                continue
            }
            // A pattern names one domain's hosts: `*.` and at least two labels (`*.com` and `*`
            // would take in every model API under them).
            let host = item[..<colon]
            if host.contains("*") && !(host.hasPrefix("*.") && !host.dropFirst(2).contains("*") && host.dropFirst(2).contains(".")
                                        && !host.hasSuffix(".")) {
                error(node, "\(key): '\(item)' is too broad a pattern: `*.` and a domain of at least two labels (e.g. *.pythonhosted.org:443)")
            }
        }
        return items
    }

    func absolutePath(_ node: Node, _ key: String) -> String? {
        guard let s = string(node, key) else { return nil }
        guard s.hasPrefix("/") else {
            error(node, "\(key): must be an absolute path (got '\(s)')")
            return nil
        }
        return s
    }

    func strings(_ node: Node, _ key: String) -> [String]? {
        guard let items = yaml.list(node, key) else { return nil }
        return items.compactMap { yaml.text($0, key) }
    }

    /// A number as a config would write it (a whole one without a fraction).
    static func shown(_ x: Double) -> String { x == x.rounded() && abs(x) < 1e15 ? String(Int(x)) : String(x) }
}
