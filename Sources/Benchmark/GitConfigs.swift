// What of a git repository agent.py left in /app the verifier's git may read as configuration.
//
// git treats a repository's config as code: filter drivers (`filter.<name>.clean`, `smudge`,
// `process`) and diff and merge drivers that /app/.gitattributes switches on, `include.path`,
// aliases, `core.*` commands. The verifier's environment overrides the keys it can name
// (policies/verifier.yaml), but a driver's name is agent.py's choice. A test script that runs
// `git add -A` over an agent-made /app would run agent code as a child of git, and that code can
// read the task's tests (the answer key) and leave the answer in /app before the test looks
// (found by an adversarial review). So once the agent's sandboxes are gone and before
// the verifier starts, the supervisor rewrites every git configuration file under /app to the
// few keys below, each value checked, and drops everything else: no key that names a command
// survives, whatever the file's syntax. Repositories keep their format, remotes and branches.

import Glibc
import SupervisorIO

enum GitConfigs {
    /// How a kept key's value must look.
    enum Value {
        case boolean
        case digits
        case choice([String])
        /// Printable text without quotes or backslashes.
        case text
    }

    /// Kept keys by section (lowercase), for sections without a subsection.
    static let plain: [String: [String: Value]] = [
        "core": ["repositoryformatversion": .digits, "bare": .boolean, "filemode": .boolean, "logallrefupdates": .boolean,
                 "ignorecase": .boolean, "precomposeunicode": .boolean, "symlinks": .boolean],
        "extensions": ["objectformat": .choice(["sha1", "sha256"])],
        "user": ["name": .text, "email": .text],
    ]
    /// Kept keys of sections with a subsection (`[remote "origin"]`), whose name must be plain.
    static let named: [String: [String: Value]] = [
        "remote": ["url": .text, "pushurl": .text, "fetch": .text],
        "branch": ["remote": .text, "merge": .text],
    ]

    /// How many entries of /app are looked at, at most, and how deep (more, or deeper: the
    /// task is not graded).
    static let entryLimit = 1_000_000
    static let depthLimit = 128

    /// Rewrites every git configuration file under `app` (a directory holding `config` and
    /// any of `HEAD`, `objects`, `refs`, `commondir` is a git directory; its `config` is
    /// rewritten, a `config.worktree` removed),
    /// giving the new files `owner`. Returns how many were rewritten, or why /app could not be
    /// made safe (more than `entryLimit` entries, deeper than `depthLimit`, a write that failed).
    static func sanitize(app: Int32, owner: (uid_t, gid_t)) -> Result<Int, BenchmarkError> {
        var seen = 0
        var rewritten = 0
        func walk(_ dir: Int32, depth: Int, path: String) throws(BenchmarkError) {
            guard let names = FileSystem.entries(of: dir) else { throw BenchmarkError(.io, "\(path): \(FileSystem.errorText())") }
            seen += names.count
            guard seen <= entryLimit else {
                throw BenchmarkError(.io, "/app holds more than \(entryLimit) entries: its git repositories could not all be checked")
            }
            // A git directory at any depth can be the one git uses (a gitfile at /app/.git
            // names it), so a tree too deep to look through is not graded (an adversarial
            // review reached git through a repository 70 levels down).
            guard depth < depthLimit else {
                throw BenchmarkError(.io, "/app is deeper than \(depthLimit) levels: its git repositories could not all be checked")
            }
            // A git directory holds HEAD, or is the common directory a linked worktree's
            // `commondir` names (objects/ and refs/, possibly no HEAD): git reads its config.
            let display = Set(names.map(FileSystem.display))
            if display.contains("config") && !display.isDisjoint(with: ["HEAD", "objects", "refs", "commondir"]) {
                try rewrite(dir, path: path)
                rewritten += 1
            }
            for n in names {
                guard let st = FileSystem.entryStatus(at: dir, n), FileSystem.isDirectory(st) else { continue }
                let sub = FileSystem.openDirectory(at: dir, n)
                guard sub >= 0 else { throw BenchmarkError(.io, "\(path)/\(FileSystem.display(n)): \(FileSystem.errorText())") }
                defer { close(sub) }
                try walk(sub, depth: depth + 1, path: path + "/" + FileSystem.display(n))
            }
        }
        func rewrite(_ gitDir: Int32, path: String) throws(BenchmarkError) {
            var text = ""
            if case .success(let bytes) = FileSystem.readSmallFile(at: gitDir, "config", limit: 1 << 20) {
                text = String(decoding: bytes, as: UTF8.self)
            }
            // Whatever `config` was (a file, a link, too large), it is replaced; git cannot read
            // a directory as its config (it stops), so one is left as it is.
            switch FileSystem.removeEntry(at: gitDir, "config") {
            case nil: break
            case EISDIR?: return
            case let e?: throw BenchmarkError(.io, "\(path)/config: \(FileSystem.errorText(e))")
            }
            if let e = FileSystem.writeFile(at: gitDir, "config", Array(kept(text).utf8), mode: 0o644, owner: owner) {
                throw BenchmarkError(.io, "\(path)/config: \(FileSystem.errorText(e))")
            }
            _ = FileSystem.removeEntry(at: gitDir, "config.worktree")
        }
        do throws(BenchmarkError) {
            try walk(app, depth: 0, path: "/app")
            return .success(rewritten)
        } catch {
            return .failure(error)
        }
    }

    /// The configuration `text` cut down to the kept keys, written out afresh.
    static func kept(_ text: String) -> String {
        var sections: [(header: String, lines: [String])] = []
        var current: (section: String, subsection: String?)?
        func add(_ key: String, _ raw: String) {
            guard let (section, subsection) = current else { return }
            let table = subsection == nil ? plain[section] : named[section]
            guard let rule = table?[key.lowercased()], let value = check(raw, rule) else { return }
            let header = subsection.map { "[\(section) \"\($0)\"]" } ?? "[\(section)]"
            if sections.last?.header != header { sections.append((header, [])) }
            sections[sections.count - 1].lines.append("\t\(key.lowercased()) = \(value)")
        }
        for raw in text.split(separator: "\n", omittingEmptySubsequences: false) {
            var line = Substring(raw.trimmingCharacters(in: .whitespaces))
            if line.hasPrefix("[") {
                guard let close = line.firstIndex(of: "]") else { current = nil; continue }
                current = header(line[line.index(after: line.startIndex)..<close])
                line = Substring(line[line.index(after: close)...].trimmingCharacters(in: .whitespaces))
            }
            guard !line.isEmpty, !line.hasPrefix("#"), !line.hasPrefix(";") else { continue }
            guard let eq = line.firstIndex(of: "=") else { continue }  // a bare key is a boolean true: dropped
            add(line[..<eq].trimmingCharacters(in: .whitespaces), line[line.index(after: eq)...].trimmingCharacters(in: .whitespaces))
        }
        return sections.map { ([$0.header] + $0.lines).joined(separator: "\n") + "\n" }.joined()
    }

    /// `[core]`, `[remote "origin"]`; anything else (the old `[section.sub]` form, odd
    /// characters) names no kept section.
    static func header(_ inside: Substring) -> (String, String?)? {
        let parts = inside.split(separator: " ", maxSplits: 1)
        let section = parts.first.map { $0.lowercased() } ?? ""
        guard !section.isEmpty, section.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" }) else { return nil }
        guard parts.count == 2 else { return (section, nil) }
        let quoted = parts[1].trimmingCharacters(in: .whitespaces)
        guard quoted.count >= 2, quoted.hasPrefix("\""), quoted.hasSuffix("\"") else { return nil }
        let name = String(quoted.dropFirst().dropLast())
        guard !name.isEmpty, name.utf8.count <= 200, name.allSatisfy({ ($0.isLetter && $0.isASCII) || $0.isNumber || "._/-".contains($0) }) else { return nil }
        return (section, name)
    }

    /// The value as it will be written, or nil when it does not pass `rule` (then the key is
    /// dropped). A value with a quote, a backslash, a comment or a control character is
    /// dropped rather than parsed.
    static func check(_ raw: String, _ rule: Value) -> String? {
        guard !raw.contains(where: { "\"\\#;".contains($0) || ($0.asciiValue.map { $0 < 0x20 || $0 == 0x7F } ?? false) }) else { return nil }
        let v = raw.trimmingCharacters(in: .whitespaces)
        switch rule {
        case .boolean:
            switch v.lowercased() {
            case "true", "yes", "on", "1": return "true"
            case "false", "no", "off", "0": return "false"
            default: return nil
            }
        case .digits: return !v.isEmpty && v.count <= 3 && v.allSatisfy(\.isNumber) ? v : nil
        case .choice(let options): return options.contains(v.lowercased()) ? v.lowercased() : nil
        case .text: return !v.isEmpty && v.utf8.count <= 1000 ? v : nil
        }
    }
}
