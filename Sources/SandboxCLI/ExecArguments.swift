/// `sandbox exec`'s options read without ArgumentParser, whose reflection over every option
/// of the command (Mirror, protocol conformance lookups in a 100 MB binary) cost about 4 ms
/// of every launch: more than half a bubblewrap sandbox. The full CLI and its front
/// (autoharness-front) both read them here.
///
/// Only the plain spellings are read here: `--name VALUE`, `--name=VALUE`, the two flags,
/// and the command after `--` or at the first word that is not an option. Anything else
/// (an unknown or repeated single-value option, a value that looks like an option, `-h`)
/// returns nil, and ArgumentParser parses the same arguments with its own rules and
/// messages, so both paths accept and refuse exactly the same command lines (the front
/// hands such a line to the full CLI).
public enum ExecArguments {
    /// Whether `sandbox exec`'s options (the words after `exec`, up to the command) ask for
    /// help: `-h` or `--help` among them, not in the command's own arguments.
    public static func asksForHelp(_ arguments: ArraySlice<String>) -> Bool {
        arguments.prefix { $0 != "--" && !$0.hasPrefix("/") }.contains { $0 == "-h" || $0 == "--help" }
    }

    public static func parse(_ arguments: ArraySlice<String>) -> ExecRequest? {
        var r = ExecRequest()
        var seen: Set<String> = []
        var i = arguments.startIndex
        while i < arguments.endIndex {
            let word = arguments[i]
            if word == "--" || !word.hasPrefix("-") {
                r.command = Array(arguments[i...])
                return r
            }
            switch word {
            case "--allow-unenforced-limits": r.allowUnenforcedLimits = true; i += 1; continue
            case "-v", "--debug": r.debug = true; i += 1; continue
            default: break
            }
            guard word.hasPrefix("--") else { return nil }
            let name: Substring
            let value: String
            if let eq = word.firstIndex(of: "=") {
                name = word[word.index(word.startIndex, offsetBy: 2)..<eq]
                value = String(word[word.index(after: eq)...])
                i += 1
            } else {
                name = word.dropFirst(2)
                guard i + 1 < arguments.endIndex, !arguments[i + 1].hasPrefix("-") else { return nil }
                value = arguments[i + 1]
                i += 2
            }
            switch name {
            case "policy-dir": r.policyDirs.append(value)
            case "var": r.variables.append(value)
            case "ro": r.readOnly.append(value)
            case "rw": r.readWrite.append(value)
            case "tmpfs": r.tmpfs.append(value)
            case "env": r.env.append(value)
            case "policy", "chdir", "timeout", "audit", "bench-repeat":
                guard seen.insert(String(name)).inserted else { return nil }
                switch name {
                case "policy": r.policy = value
                case "chdir": r.chdir = value
                case "audit": r.audit = value
                case "timeout":
                    guard let t = Double(value) else { return nil }
                    r.timeout = t
                default:
                    guard let n = Int(value) else { return nil }
                    r.benchRepeat = n
                }
            default:
                return nil
            }
        }
        return r  // no command: ArgumentParser's path says so the same way
    }
}
