import Foundation
import SandboxPolicy
import Yams

/// One key of experiment_config.yaml, declared once: its name, what it accepts and what it
/// does (docs/config.md's reference is printed from these: `ConfigSchema.reference`), its
/// default (read from a fresh value, never written a second time), and how its value is
/// checked and stored. A section is a key whose value is a mapping of keys. What involves two
/// keys at once is checked after the whole file is read (`ExperimentConfigParser`), which
/// finds each key's node by its dotted name (`ConfigReader.node(_:)`).
package struct ConfigKey<Root> {
    package let name: String
    /// What a value may be, as the reference shows it.
    package let accepts: String
    /// What the key does, for the reference.
    package let summary: String
    /// A section's keys (nil for a value).
    package let keys: [ConfigKey<Root>]?
    /// The value a fresh `Root` holds, as a config would write it (nil: unset).
    let shownDefault: (Root) -> String?
    /// Checks a value (its problems recorded at its line, named by its dotted path) and stores it.
    let store: (ConfigReader, Node, _ path: String, inout Root) -> Void

    /// A key read by code of its own (`accepts` says what it takes, for the reference).
    static func custom(_ name: String, accepts: String, _ summary: String, shown: @escaping (Root) -> String? = { _ in nil },
                       _ store: @escaping (ConfigReader, Node, String, inout Root) -> Void) -> Self {
        Self(name: name, accepts: accepts, summary: summary, keys: nil, shownDefault: shown, store: store)
    }

    /// A value checked by `read` and stored at `field`.
    private static func value<T>(_ name: String, _ accepts: String, _ summary: String, _ field: WritableKeyPath<Root, T>,
                                 shown: @escaping (T) -> String?, _ read: @escaping (ConfigReader, Node, String) -> T?) -> Self {
        custom(name, accepts: accepts, summary, shown: { shown($0[keyPath: field]) }) { r, node, path, root in
            if let x = read(r, node, path) { root[keyPath: field] = x }
        }
    }

    static func text(_ name: String, _ field: WritableKeyPath<Root, String?>, _ summary: String) -> Self {
        value(name, "text", summary, field, shown: { $0 }) { r, n, p in r.string(n, p) }
    }

    static func text(_ name: String, _ field: WritableKeyPath<Root, String>, _ summary: String) -> Self {
        value(name, "text", summary, field, shown: { $0 }) { r, n, p in r.string(n, p) }
    }

    static func path(_ name: String, _ field: WritableKeyPath<Root, String?>, _ summary: String) -> Self {
        value(name, "an absolute path", summary, field, shown: { $0 }) { r, n, p in r.absolutePath(n, p) }
    }

    static func path(_ name: String, _ field: WritableKeyPath<Root, String>, _ summary: String) -> Self {
        value(name, "an absolute path", summary, field, shown: { $0 }) { r, n, p in r.absolutePath(n, p) }
    }

    static func choice(_ name: String, _ field: WritableKeyPath<Root, String?>, _ allowed: [String], _ summary: String) -> Self {
        value(name, allowed.joined(separator: " | "), summary, field, shown: { $0 }) { r, n, p in r.oneOf(n, p, allowed) }
    }

    static func choice(_ name: String, _ field: WritableKeyPath<Root, String>, _ allowed: [String], _ summary: String) -> Self {
        value(name, allowed.joined(separator: " | "), summary, field, shown: { $0 }) { r, n, p in r.oneOf(n, p, allowed) }
    }

    static func choice<E: RawRepresentable & CaseIterable>(_ name: String, _ field: WritableKeyPath<Root, E>, _ summary: String) -> Self
    where E.RawValue == String {
        let allowed = E.allCases.map(\.rawValue)
        return value(name, allowed.joined(separator: " | "), summary, field, shown: { $0.rawValue }) { r, n, p in
            r.oneOf(n, p, allowed).flatMap(E.init(rawValue:))
        }
    }

    /// A non-empty list, each item one of `allowed`, none twice.
    static func choices(_ name: String, _ field: WritableKeyPath<Root, [String]?>, _ allowed: [String], _ summary: String) -> Self {
        value(name, "a list of " + allowed.joined(separator: ", "), summary, field, shown: { $0?.joined(separator: ", ") }) { r, n, p in
            r.subset(n, p, allowed)
        }
    }

    /// `true` or `false`, as written.
    static func flag(_ name: String, _ field: WritableKeyPath<Root, Bool>, _ summary: String) -> Self {
        value(name, "true | false", summary, field, shown: { String($0) }) { r, n, p in r.oneOf(n, p, ["true", "false"]).map { $0 == "true" } }
    }

    static func integer(_ name: String, _ field: WritableKeyPath<Root, Int>, _ range: ClosedRange<Int>, _ summary: String) -> Self {
        value(name, "a whole number, \(range.lowerBound) to \(range.upperBound)", summary, field, shown: { String($0) }) { r, n, p in
            r.integer(n, p, range)
        }
    }

    static func integer(_ name: String, _ field: WritableKeyPath<Root, Int?>, _ range: ClosedRange<Int>, _ summary: String) -> Self {
        value(name, "a whole number, \(range.lowerBound) to \(range.upperBound)", summary, field, shown: { $0.map(String.init) }) { r, n, p in
            r.integer(n, p, range)
        }
    }

    static func number(_ name: String, _ field: WritableKeyPath<Root, Double>, _ range: ClosedRange<Double>, _ summary: String) -> Self {
        value(name, "a number, \(ConfigReader.shown(range.lowerBound)) to \(ConfigReader.shown(range.upperBound))", summary, field,
              shown: { ConfigReader.shown($0) }) { r, n, p in r.number(n, p, range) }
    }

    static func number(_ name: String, _ field: WritableKeyPath<Root, Double?>, _ range: ClosedRange<Double>, _ summary: String) -> Self {
        value(name, "a number, \(ConfigReader.shown(range.lowerBound)) to \(ConfigReader.shown(range.upperBound))", summary, field,
              shown: { $0.map(ConfigReader.shown) }) { r, n, p in r.number(n, p, range) }
    }

    static func strings(_ name: String, _ field: WritableKeyPath<Root, [String]?>, _ summary: String) -> Self {
        value(name, "a list of text", summary, field, shown: { $0?.joined(separator: " ") }) { r, n, p in r.strings(n, p) }
    }

    static func strings(_ name: String, _ field: WritableKeyPath<Root, [String]>, _ summary: String) -> Self {
        value(name, "a list of text", summary, field, shown: Self.listShown) { r, n, p in r.strings(n, p) ?? [] }
    }

    /// A list of absolute paths.
    static func paths(_ name: String, _ field: WritableKeyPath<Root, [String]>, _ summary: String) -> Self {
        value(name, "a list of absolute paths", summary, field, shown: Self.listShown) { r, n, p in
            let items = r.strings(n, p) ?? []
            for b in items where !b.hasPrefix("/") { r.error(n, "\(p): '\(b)' must be an absolute path") }
            return items
        }
    }

    /// A list of environment variable names.
    static func variables(_ name: String, _ field: WritableKeyPath<Root, [String]>, _ summary: String) -> Self {
        value(name, "a list of variable names", summary, field, shown: Self.listShown) { r, n, p in
            let items = r.strings(n, p) ?? []
            for v in items where !EnvSpec.isVariableName(v) { r.error(n, "\(p): '\(v)' is not a variable name") }
            return items
        }
    }

    /// A list of `host:port` entries (an egress allowlist; `*.` patterns of one domain).
    static func hostPorts(_ name: String, _ field: WritableKeyPath<Root, [String]>, _ summary: String) -> Self {
        value(name, "a list of host:port", summary, field, shown: Self.listShown) { r, n, p in r.hostPorts(n, p) ?? [] }
    }

    static func hostPorts(_ name: String, _ field: WritableKeyPath<Root, [String]?>, _ summary: String) -> Self {
        value(name, "a list of host:port", summary, field, shown: { $0.flatMap(Self.listShown) }) { r, n, p in r.hostPorts(n, p) }
    }

    private static func listShown(_ items: [String]) -> String? { items.isEmpty ? nil : items.joined(separator: ", ") }

    /// A mapping of `keys`; `then` checks what the section's keys say together.
    static func section(_ name: String, _ summary: String, _ keys: [ConfigKey<Root>],
                        then check: ((ConfigReader, Node, String, inout Root) -> Void)? = nil) -> Self {
        Self(name: name, accepts: "a mapping", summary: summary, keys: keys, shownDefault: { _ in nil }) { r, node, path, root in
            r.read(node, path, keys, into: &root)
            check?(r, node, path, &root)
        }
    }

    /// A mapping of `keys` that fill the value at `field`.
    static func section<Sub>(_ name: String, _ summary: String, at field: WritableKeyPath<Root, Sub>, _ keys: [ConfigKey<Sub>],
                             then check: ((ConfigReader, Node, String, inout Sub) -> Void)? = nil) -> Self {
        let lifted = keys.map { $0.within(field) }
        return section(name, summary, lifted) { r, node, path, root in check?(r, node, path, &root[keyPath: field]) }
    }

    /// This key, filling the part of `Outer` at `field`.
    func within<Outer>(_ field: WritableKeyPath<Outer, Root>) -> ConfigKey<Outer> {
        let (shown, store) = (shownDefault, self.store)
        return ConfigKey<Outer>(name: name, accepts: accepts, summary: summary, keys: keys?.map { $0.within(field) },
                                shownDefault: { shown($0[keyPath: field]) }) { r, node, path, outer in
            store(r, node, path, &outer[keyPath: field])
        }
    }
}

extension ConfigReader {
    /// Reads the mapping `node` at dotted `path` ("" for the file's top level) whose keys are
    /// `keys` and `others` (any other is refused, naming the allowed ones): each of `keys` is
    /// checked and stored into `root`, and its node kept under its dotted path (`node(_:)`);
    /// each of `others` is handed to `other`.
    func read<Root>(_ node: Node, _ path: String, _ keys: [ConfigKey<Root>], others: [String] = [], into root: inout Root,
                    other: (String, Node) -> Void = { _, _ in }) {
        let prefix = path.isEmpty ? "" : path + "."
        mapping(node, path.isEmpty ? "the config" : path, allowed: keys.map(\.name) + others) { name, value in
            guard let key = keys.first(where: { $0.name == name }) else { return other(name, value) }
            placed[prefix + name] = value
            key.store(self, value, prefix + name, &root)
        }
    }
}
