// The one reader of the YAML files people hand autoharness: sandbox policies (`LayerParser`)
// and experiment configs (`ExperimentConfig.parse`).
//
// Both are read the same way: composed with Yams's basic resolver (every plain scalar is a
// string; bool and null are recognised by spelling, YAML 1.2 core schema), walked once, and
// every problem recorded with its file, line and column instead of thrown, so one pass reports
// everything wrong in a file. A syntax error or a repeated key is one problem at the line the
// operator has to edit (Yams names a duplicate's first occurrence; this names the repeat).
// What each file's keys mean stays with its reader; the shapes (a mapping with known keys, a
// list, one value, true or false) and their messages live here.

import Yams

/// One problem found in a YAML file, where it is.
public struct YAMLProblem: Error, Sendable, Equatable {
    public var location: SourceLocation
    public var message: String
}

/// Typed reads of a YAML tree that record problems instead of throwing.
public final class YAMLReader {
    /// The file the text came from, as problems name it.
    public let file: String
    /// Every problem recorded so far, in the order found.
    public private(set) var problems: [YAMLProblem] = []

    public init(file: String) { self.file = file }

    /// The tree of `text`, nil for an empty document; or the one problem that stops reading
    /// it (`document` names what a file holds, for a second `---` document).
    public static func compose(_ text: String, file: String, document: String) -> Result<Node?, YAMLProblem> {
        do {
            return .success(try tree(text))
        } catch {
            return .failure(problem(of: error, in: text, file: file, document: document))
        }
    }

    /// The tree of `text` as every reader composes it, or Yams's error (`problem(of:)`
    /// places it). UTF-8 explicitly: the default consults an environment variable and prints.
    /// The basic resolver tags every plain scalar as a string; the default one runs a set of
    /// regular expressions over each scalar, which cost milliseconds per policy load.
    public static func tree(_ text: String) throws -> Node? { try Yams.compose(yaml: text, .basic, .default, .utf8) }

    /// A Yams error as a problem at the line to fix.
    public static func problem(of error: any Error, in text: String, file: String, document: String) -> YAMLProblem {
        func at(_ line: Int, _ column: Int = 1) -> SourceLocation { SourceLocation(file: file, line: line, column: column) }
        guard let yamlError = error as? YamlError else { return YAMLProblem(location: at(1), message: "YAML: \(error)") }
        func detail(_ context: YamlError.Context?, _ problem: String) -> String {
            guard let context, !context.text.isEmpty else { return "YAML syntax error: \(problem)" }
            return "YAML syntax error: \(problem) (\(context.text) at line \(context.mark.line))"
        }
        switch yamlError {
        case .composer(_, "but found another document", let mark, _):
            return YAMLProblem(location: at(mark.line, mark.column), message: "\(document) holds one YAML document; remove this second '---' document")
        case .scanner(let context, let problem, let mark, _),
            .parser(let context, let problem, let mark, _),
            .composer(let context, let problem, let mark, _):
            return YAMLProblem(location: at(mark.line, mark.column), message: detail(context, problem))
        case .reader(let problem, let offset, _, _):
            let line = offset.map { offset in 1 + text.prefix(offset).filter { $0 == "\n" }.count } ?? 1
            return YAMLProblem(location: at(line), message: "cannot read YAML: \(problem)")
        case .duplicatedKeysInMapping(let duplicates, let context):
            let key = duplicates.first ?? "?"
            let first = at(context.mark.line, context.mark.column)
            let others = duplicates.dropFirst().map { "'\($0)'" }
            let also = others.isEmpty ? "" : " (also repeated: \(others.joined(separator: ", ")))"
            if let line = YAMLDuplicateKey.repeatLine(of: key, firstAt: context.mark.line, column: context.mark.column, in: text) {
                return YAMLProblem(location: at(line, context.mark.column), message: "duplicate key '\(key)' (first at line \(first.line), column \(first.column))\(also)")
            }
            return YAMLProblem(location: first, message: "duplicate key '\(key)' in this mapping\(also)")
        default:
            return YAMLProblem(location: at(1), message: "YAML: \(yamlError)")
        }
    }

    // MARK: - Problems

    public func location(of node: Node) -> SourceLocation {
        SourceLocation(file: file, line: node.mark?.line ?? 0, column: node.mark?.column ?? 1)
    }

    public func error(at node: Node, _ message: String) { error(at: location(of: node), message) }

    public func error(at location: SourceLocation, _ message: String) {
        problems.append(YAMLProblem(location: location, message: message))
    }

    /// The problems sorted by line and column, those at one place in the order found.
    public var sortedProblems: [YAMLProblem] {
        problems.enumerated().sorted {
            let a = $0.element.location, b = $1.element.location
            return (a.line, a.column, $0.offset) < (b.line, b.column, $1.offset)
        }.map(\.element)
    }

    // MARK: - Shapes

    /// The keys of a mapping as written, each with its key node.
    public struct Fields {
        private var entries: [String: (key: Node, value: Node)] = [:]
        /// The keys in the order written.
        public private(set) var keys: [String] = []

        public subscript(_ key: String) -> Node? { entries[key]?.value }
        public func keyNode(_ key: String) -> Node? { entries[key]?.key }

        fileprivate mutating func add(_ key: String, _ keyNode: Node, _ value: Node) {
            entries[key] = (keyNode, value)
            keys.append(key)
        }
    }

    /// A mapping whose keys are plain words from `allowed` (nil: any), each given once; an
    /// unknown key is reported with the allowed ones. An empty value (`limits:` with nothing
    /// under it) is an empty mapping.
    public func fields(of node: Node, in context: String, allowed: [String]?) -> Fields? {
        guard let pairs = pairs(node, context) else { return nil }
        var fields = Fields()
        for (keyNode, value) in pairs {
            guard case .scalar(let scalar) = keyNode else {
                error(at: keyNode, "keys in \(context) must be plain words")
                continue
            }
            if let allowed, !allowed.contains(scalar.string) {
                error(at: keyNode, "unknown key '\(scalar.string)' in \(context) (allowed: \(allowed.joined(separator: ", ")))")
                continue
            }
            guard fields[scalar.string] == nil else {
                error(at: keyNode, "'\(scalar.string)' is given twice in \(context)")
                continue
            }
            fields.add(scalar.string, keyNode, value)
        }
        return fields
    }

    /// A mapping's key and value nodes in order; an empty value is an empty mapping.
    public func pairs(_ node: Node, _ what: String) -> [(Node, Node)]? {
        if Self.isNull(node) { return [] }
        guard case .mapping(let mapping) = node else {
            error(at: node, "\(what) must be a mapping of key: value, not \(Self.shape(of: node))")
            return nil
        }
        return mapping.map { ($0.key, $0.value) }
    }

    /// A list's items; an empty value is an empty list.
    public func list(_ node: Node, _ what: String) -> [Node]? {
        if Self.isNull(node) { return [] }
        guard case .sequence(let sequence) = node else {
            error(at: node, "\(what) must be a list, not \(Self.shape(of: node))")
            return nil
        }
        return Array(sequence)
    }

    /// A scalar's text exactly as written (so `mode: 0755` stays "0755" and `PORT: 08` stays
    /// "08"); YAML's own typing is used only to tell an empty value from an empty string.
    public func text(_ node: Node, _ what: String) -> String? {
        guard case .scalar(let scalar) = node else {
            var message = "\(what) must be a single value, not \(Self.shape(of: node))"
            // `ro: {workdir}` parses as the mapping {workdir: null}.
            if case .mapping(let m) = node, m.count == 1, let value = m.first?.value, Self.isNull(value) {
                message += " (quote values that start with '{': \"{name}...\")"
            }
            error(at: node, message)
            return nil
        }
        if Self.isNull(node) {
            error(at: node, "\(what) needs a value")
            return nil
        }
        if scalar.string.contains("\0") {
            error(at: node, "\(what) contains a NUL byte")
            return nil
        }
        return scalar.string
    }

    /// `true` or `false` (also capitalised, or all capitals), unquoted.
    public func bool(_ node: Node, _ what: String) -> Bool? {
        if node.tag.rawValue == Tag.Name.bool.rawValue, let value = node.bool { return value }
        if let s = node.scalar, s.style == .plain || s.style == .any {
            switch s.string {
            case "true", "True", "TRUE": return true
            case "false", "False", "FALSE": return false
            default: break
            }
        }
        let spelled = node.scalar.map { " (got '\($0.string)')" } ?? ""
        error(at: node, "\(what) must be true or false\(spelled)")
        return nil
    }

    /// An empty value: nothing, `~` or `null` unquoted.
    public static func isNull(_ node: Node) -> Bool {
        guard case .scalar(let s) = node else { return false }
        if node.tag.rawValue == Tag.Name.null.rawValue { return true }
        return (s.style == .plain || s.style == .any) && ["", "~", "null", "Null", "NULL"].contains(s.string)
    }

    public static func shape(of node: Node) -> String {
        switch node {
        case .mapping: return "a mapping"
        case .sequence: return "a list"
        case .scalar, .alias: return "a single value"
        }
    }
}

/// Yams reports where a duplicated key first appears; the operator needs the repeat (the line
/// to delete). Used for policies and experiment configs alike.
public enum YAMLDuplicateKey {
    /// The 1-based line of the repeat of `key`, whose first occurrence is at `line`:`column`
    /// (1-based). In block style the repeat starts in the same column further down, before any
    /// line indented less (which would have left the mapping); nil if it is not found there
    /// (e.g. flow style).
    public static func repeatLine(of key: String, firstAt line: Int, column: Int, in text: String) -> Int? {
        let lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        // `line` is 1-based, so as an index it is the line after the first occurrence.
        for index in lines.indices where index >= line {
            let l = lines[index]
            let indent = l.prefix { $0 == " " }.count
            let content = l.dropFirst(indent)
            if content.isEmpty || content.hasPrefix("#") { continue }
            if indent < column - 1 { break }
            guard indent == column - 1 else { continue }
            for spelling in [key, "\"\(key)\"", "'\(key)'"] where content.hasPrefix(spelling) {
                if content.dropFirst(spelling.count).drop(while: { $0 == " " }).first == ":" { return index + 1 }
            }
        }
        return nil
    }
}
