// Which files of a task's environment/ reach /app when the task runs without its image.
//
// environment/ is a Dockerfile's build context, not the image: it may hold files the
// Dockerfile never copies (a reference solution kept beside the sources, hidden test inputs,
// a task's own test_outputs.py), and seeding /app with the whole directory would hand them to
// agent.py. So a task with a Dockerfile gets only what its COPY and ADD instructions name from
// the context, at the same relative paths; a file no instruction names never reaches /app.
// What cannot be read for certain is left out rather than guessed: a source with a variable
// (`$VAR`), a copy from another stage or image (`--from`), a URL, a heredoc. A .dockerignore
// pattern removes what it matches (its `!` exceptions are not applied: left out, never added).

import FoundationEssentials
import Glibc
import SupervisorIO

enum DockerfileCopies {
    /// The context-relative source patterns of the Dockerfile's COPY and ADD instructions
    /// (globs as Docker writes them), or nil when one copies the whole context (`.`).
    static func sources(_ text: String) -> [String]? {
        var patterns: [String] = []
        for instruction in instructions(text) {
            var words = instruction.words
            guard let keyword = words.first?.uppercased(), keyword == "COPY" || keyword == "ADD" else { continue }
            words.removeFirst()
            if words.contains(where: { $0.hasPrefix("--from") }) || words.contains(where: { $0.hasPrefix("<<") }) { continue }
            words.removeAll { $0.hasPrefix("--") }
            guard words.count >= 2 else { continue }
            for raw in words.dropLast() {
                if raw.contains("$") || raw.contains("://") || raw.hasPrefix("git@") { continue }
                let parts = raw.split(separator: "/").filter { $0 != "." && !$0.isEmpty }
                if parts.contains("..") { continue }
                if parts.isEmpty { return nil }
                patterns.append(parts.joined(separator: "/"))
            }
        }
        return patterns
    }

    /// Instructions with their continuation lines joined, comments and blank lines dropped,
    /// split into words (the JSON form's strings, or the shell form's whitespace-separated words).
    static func instructions(_ text: String) -> [(line: String, words: [String])] {
        var out: [(String, [String])] = []
        var pending = ""
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let line = trimmed(raw)
            if pending.isEmpty && (line.isEmpty || line.hasPrefix("#")) { continue }
            if line.hasPrefix("#") { continue }  // a comment inside a continued instruction
            if line.hasSuffix("\\") {
                pending += line.dropLast() + " "
                continue
            }
            let whole = pending + line
            pending = ""
            out.append((whole, words(of: whole)))
        }
        if !pending.isEmpty { out.append((pending, words(of: pending))) }
        return out
    }

    static func words(of instruction: String) -> [String] {
        let parts = instruction.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
        guard parts.count > 1 else { return parts }
        // The JSON form: KEYWORD [flags] ["src", ..., "dest"]
        let rest = parts.dropFirst().drop { $0.hasPrefix("--") }
        let flags = Array(parts.dropFirst().prefix { $0.hasPrefix("--") })
        let tail = rest.joined(separator: " ")
        if tail.hasPrefix("["), let data = tail.data(using: .utf8),
           let list = try? JSONDecoder().decode([String].self, from: data) {
            return [parts[0]] + flags + list
        }
        return parts
    }

    /// Whether `relative` (a path under environment/) is copied by one of `patterns`, lies
    /// inside a copied directory, or is a directory on the way to one (and so must be made).
    static func includes(_ relative: String, patterns: [String], ignored: [String]) -> Bool {
        let parts = relative.split(separator: "/").map(String.init)
        if ignored.contains(where: { matches($0, parts, prefixOnly: false) }) { return false }
        return patterns.contains { matches($0, parts, prefixOnly: true) }
    }

    /// Whether `pattern`'s components match `parts` one by one (fnmatch, `*` never crossing a
    /// `/`): for a path deeper than the pattern, its first components; with `prefixOnly`, a
    /// shallower path matches when it is an ancestor of what the pattern can name.
    static func matches(_ pattern: String, _ parts: [String], prefixOnly: Bool) -> Bool {
        let p = pattern.split(separator: "/").map(String.init)
        if parts.count < p.count && !prefixOnly { return false }
        for (i, part) in parts.prefix(p.count).enumerated() where p[i] != "**" {
            if fnmatch(p[i], part, 0) != 0 { return false }
        }
        return true
    }

    /// What of `task`'s environment/ seeds /app (`FileSystem.copyTree`'s `include`): nil, all
    /// of it, when there is no Dockerfile (and no `docker_image`: then nothing, the image
    /// holds what it holds) or the Dockerfile copies the whole context.
    static func filter(_ task: BenchmarkTask) -> ((String) -> Bool)? {
        let environment = task.environmentDirectory
        guard case .success(let bytes) = InputFile.read(environment + "/Dockerfile", cap: 1 << 20) else {
            return task.dockerImage == nil ? nil : { _ in false }
        }
        guard let patterns = sources(String(decoding: bytes, as: UTF8.self)) else { return nil }
        var ignored: [String] = []
        if case .success(let i) = InputFile.read(environment + "/.dockerignore", cap: 1 << 20) {
            ignored = Self.ignored(String(decoding: i, as: UTF8.self))
        }
        return { includes($0, patterns: patterns, ignored: ignored) }
    }

    static func trimmed<S: StringProtocol>(_ s: S) -> String {
        String(s.drop { " \t\r".contains($0) }.reversed().drop { " \t\r".contains($0) }.reversed())
    }

    /// .dockerignore's patterns (comments, blanks and `!` exceptions dropped).
    static func ignored(_ text: String) -> [String] {
        text.split(separator: "\n").map { trimmed($0) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") && !$0.hasPrefix("!") }
            .map { $0.split(separator: "/").filter { $0 != "." && !$0.isEmpty }.joined(separator: "/") }
            .filter { !$0.isEmpty }
    }
}
