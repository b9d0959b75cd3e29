import Foundation
import Sandbox
import SandboxPolicy

/// `autoharness policy suggest --from-audit`: from what a benign session's sandbox was refused,
/// the smallest policy that `extends:` the one it ran under and would have refused none of it.
/// Never a hard-denied system call, one the default profile withholds as a channel, one
/// refused by an argument rule (allowing the name would lift the rule), another ABI, or what a
/// policy of the chain denies on purpose: those are listed as what no policy makes clean.
/// Mounts are not suggested: the audit records refused calls and connections, not paths.
public enum PolicySuggest {
    /// One line of an audit file, as far as a suggestion needs it.
    public struct Record: Sendable {
        public var sandbox: String
        public var event: String
        public var name: String
        public var action: String
        public var detail: String?
        public var count: Int
        public var policy: String?

        /// What a `repeated` line counted (`syscall`, `egress`), else the event itself.
        var counted: String { event == "repeated" ? String((detail ?? "").prefix { $0 != " " }) : event }
        var refusedEgress: Bool {
            event == "egress" ? action == "denied" : event == "repeated" && detail == "egress denied"
        }
    }

    static let maxLine = 64 << 10
    /// Counts beyond this are not the audit log's (its counters are per sandbox run), and
    /// their sums could overflow.
    static let maxCount = 1 << 40

    /// The audit file's lines; a line that is not an audit record fails with its number.
    public static func records(_ text: String, file: String) throws -> [Record] {
        var out: [Record] = []
        for (i, line) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() where !line.isEmpty {
            // The supervisor's lines are a few hundred bytes; a longer one is not its.
            guard line.utf8.count <= maxLine else {
                throw ExperimentError(.usage, "\(file):\(i + 1): \(line.utf8.count) bytes, over the \(maxLine)-byte line of an audit record")
            }
            guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                  let sandbox = o["sandbox"] as? String, let event = o["event"] as? String,
                  let name = o["name"] as? String, let action = o["action"] as? String else {
                throw ExperimentError(.usage, "\(file):\(i + 1): not an audit record (sandbox, event, name and action expected)")
            }
            let count = (o["count"] as? Int) ?? 1
            guard (1...maxCount).contains(count) else {
                throw ExperimentError(.usage, "\(file):\(i + 1): count \(count) is not between 1 and \(maxCount)")
            }
            out.append(Record(sandbox: sandbox, event: event, name: name, action: action, detail: o["detail"] as? String,
                              count: count, policy: o["policy"] as? String))
        }
        return out
    }

    /// What was refused and what the suggested policy does about it.
    public struct Suggestion: Sendable {
        /// System calls to allow, with how often each was refused.
        public var allow: [(name: String, count: Int)] = []
        /// System calls to refuse without a report, with how often and why not allowed.
        public var quiet: [(name: String, count: Int, why: String)] = []
        /// Hosts to add to the proxy's allowlist, with how many connections were refused.
        public var hosts: [(host: String, count: Int)] = []
        /// The experiment's setting that holds the role's allowlist (the policy's is replaced
        /// by it), when the hosts belong there.
        public var hostsKey: String?
        /// Limits to raise: key, new value as written, old value, how often it was hit.
        public var limits: [(key: String, value: String, was: String, count: Int)] = []
        /// What no policy makes clean, with how often and why.
        public var unclean: [(what: String, count: Int, why: String)] = []
        /// Records of other policies' sandboxes, left out, by policy.
        public var otherPolicies: [String: Int] = [:]
        public var considered = 0
        public var sandboxes = 0

        /// The next session would be clean under the suggested policy.
        public var complete: Bool { unclean.isEmpty }
    }

    /// The experiment setting that replaces a role's `network.allow` when it runs.
    static func allowlistKey(_ role: PolicyRole?) -> String? {
        switch role {
        case .codingAgent?: return "sandbox.network.allow"
        case .runner?, .scorer?: return "runner.network.allow"
        case .triage?: return "triage.network.allow"
        default: return nil
        }
    }

    /// The suggestion for `records` (those of a policy in `policyNames`, its spellings in the
    /// audit, when the audit names policies)
    /// against the policy as loaded, whose compiled filter allows `allowed`. `quietly`: what
    /// would be allowed is refused without a report instead.
    public static func suggest(_ records: [Record], input: PolicyLintInput, policyNames: Set<String>, allowed: Set<String>,
                               role: PolicyRole?, sandbox: String? = nil, quietly: Bool = false) -> Suggestion {
        let policy = input.policy
        var s = Suggestion()
        let named = records.contains { $0.policy != nil }
        var mine: [Record] = []
        for r in records where sandbox == nil || r.sandbox == sandbox {
            if named, !policyNames.contains(r.policy ?? "") {
                s.otherPolicies[r.policy ?? "(none named)", default: 0] += r.count
                continue
            }
            mine.append(r)
        }
        s.sandboxes = Set(mine.map(\.sandbox)).count
        var counts: [String: Int] = [:]
        var order: [String] = []
        var kinds: [String: Record] = [:]
        for r in mine {
            let key: String
            switch r.counted {
            case "syscall": key = "syscall \(r.name)"
            case "egress":
                guard r.refusedEgress else { continue }  // allowed connections are not violations
                // A folded line does not say why its connections were refused: it counts
                // toward a host only beside a record that does (below).
                let listed = (r.detail ?? "").hasPrefix("not on the allowlist")
                key = listed ? "host \(r.name)" : r.event == "repeated" ? "folded \(r.name)" : "egress \(r.name): \(r.detail ?? "refused")"
            default: key = "\(r.counted) \(r.name)"
            }
            if counts[key] == nil { order.append(key); kinds[key] = r }
            counts[key, default: 0] += r.count
            s.considered += r.count
        }
        var hosts: [(String, Int)] = []
        for key in order {
            let r = kinds[key]!, n = counts[key]!
            if key.hasPrefix("folded ") {
                if counts["host \(r.name)"] == nil {
                    s.unclean.append(("egress \(r.name)", n, "refusals folded into a count (over the audit's per-name limit) without a record of why"))
                }
            } else if key.hasPrefix("syscall ") {
                judgeSyscall(r.name, n, input: input, allowed: allowed, quietly: quietly, into: &s)
            } else if key.hasPrefix("host ") {
                hosts.append((r.name, n + (counts["folded \(r.name)"] ?? 0)))
            } else if key.hasPrefix("egress ") {
                s.unclean.append((key, n, "refused by the proxy or the inference gate for what was sent, not for where: no allowlist changes it"))
            } else {
                judgeOther(r, n, policy: policy, into: &s)
            }
        }
        // Names in an audit come partly from the sandbox (a CONNECT target, a file name): only
        // a plain host:port becomes a list entry.
        hosts = hosts.filter { h, n in
            guard let entry = HostPort.normalize(h) else {
                s.unclean.append(("egress \(h)", n, "not a host:port a policy takes"))
                return false
            }
            if EgressProxy.isInternalLiteral(String(entry[..<entry.lastIndex(of: ":")!])) {
                s.unclean.append(("egress \(h)", n, "an address of this host or an internal network: only an operator who knows what listens there lists it"))
                return false
            }
            return true
        }
        if !hosts.isEmpty {
            if policy.network.mode != .proxy {
                for (h, n) in hosts { s.unclean.append(("egress \(h)", n, "the policy's network is \(policy.network.mode.rawValue), not the proxy an allowlist needs")) }
            } else {
                s.hosts = hosts.map { (host: $0.0, count: $0.1) }
                s.hostsKey = allowlistKey(role)
            }
        }
        return s
    }

    static func judgeSyscall(_ name: String, _ n: Int, input: PolicyLintInput, allowed: Set<String>, quietly: Bool, into s: inout Suggestion) {
        if !name.unicodeScalars.allSatisfy({ ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_" || $0 == ":" }) {
            s.unclean.append(("syscall \(name)", n, "not a system call's name"))
        } else if name.contains(":") || name == "other" || SeccompCompiler.resolve(name) == nil {
            s.unclean.append(("syscall \(name)", n, name == "other" ? "names past the audit's per-sandbox limit, folded: read the sandbox's own records"
                : name.contains(":") ? "another ABI's call: killed whatever a policy says" : "a number libseccomp has no name for here: no policy can list it"))
        } else if SyscallProfile.hardDenied.contains(name) {
            s.unclean.append(("syscall \(name)", n, "hard-denied: refused and reported whatever a policy says"))
        } else if let why = PolicyLint.withheld[name] {
            s.unclean.append(("syscall \(name)", n, "withheld by the default profile: it \(why)"))
        } else if allowed.contains(name) && SyscallProfile.conditional.union(SyscallProfile.ruledWhenAllowed).contains(name) {
            s.unclean.append(("syscall \(name)", n, "refused by an argument rule (ArgumentRules); allowing the name would lift the rule for every argument"))
        } else if allowed.contains(name) {
            s.unclean.append(("syscall \(name)", n, "the policy allows it already: recorded under another policy?"))
        } else if input.policy.seccomp.deny.contains(name) {
            let at = input.places["seccomp.deny.\(name)"].map { " at \($0)" } ?? ""
            s.unclean.append(("syscall \(name)", n, "denied on purpose by seccomp.deny\(at): remove it there if that was a mistake"))
        } else if let why = PolicyLint.neverAllowed[name] {
            s.quiet.append((name, n, why))
        } else if quietly {
            s.quiet.append((name, n, "--quiet: refused as before, no longer reported"))
        } else {
            s.allow.append((name, n))
        }
    }

    static func judgeOther(_ r: Record, _ n: Int, policy: Policy, into s: inout Suggestion) {
        let l = policy.limits
        func doubled(_ key: String, _ value: String?, _ twice: String?, _ set: Bool) {
            guard let value, let twice else {
                s.unclean.append((r.counted, n, set ? "limits.\(key) is at the largest value a policy takes" : "no \(key) limit in the policy: hit under another policy?"))
                return
            }
            if !s.limits.contains(where: { $0.key == key }) { s.limits.append((key, twice, value, n)) }
        }
        // Doubled, at most the largest value a policy takes; at it already, nothing to raise.
        func twice(_ v: UInt64, _ max: UInt64) -> UInt64? { v >= max ? nil : v > max / 2 ? max : v * 2 }
        switch r.counted {
        case "memory_limit": doubled("memory", l.memory.map(ByteSize.format), l.memory.flatMap { twice($0, Limits.maxBytes) }.map(ByteSize.format), l.memory != nil)
        case "pids_limit": doubled("pids", l.pids.map { String($0) }, l.pids.flatMap { twice($0, Limits.maxCounts["pids"]!) }.map { String($0) }, l.pids != nil)
        case "timeout":
            let t = l.timeoutSeconds.flatMap { $0 >= Limits.maxTimeoutSeconds ? nil : min($0 * 2, Limits.maxTimeoutSeconds) }
            doubled("timeout", l.timeoutSeconds.map(DurationString.format), t.map(DurationString.format), l.timeoutSeconds != nil)
        default:
            s.unclean.append(("\(r.counted) \(r.name)", n, "an integrity record (what the sandbox did to what is judged), never a policy's to allow"))
        }
    }

    /// The suggested policy file: `extends: parent` and only what the session needs, each
    /// entry with why; comments say what it cannot make clean.
    /// `parent`: what `extends:` names (a policy name, or an absolute path).
    public static func yaml(_ s: Suggestion, parent: String, policy: Policy, audit: String) -> String {
        var out = "# Suggested by `autoharness policy suggest` from \(commentSafe(audit)):\n"
        out += "# \(s.considered) record(s) of \(s.sandboxes) sandbox(es) under \(commentSafe(parent)). Review it, then check it:\n"
        out += "# autoharness policy lint FILE\n"
        out += "extends: \(quoted(parent))\n"
        out += "description: \(quoted("\(policy.name), with what a recorded benign session needed"))\n"
        if !s.allow.isEmpty || !s.quiet.isEmpty {
            out += "\nseccomp:\n"
            if !s.allow.isEmpty {
                out += "  allow:\n"
                for a in s.allow { out += "    - \(a.name)  # refused \(times(a.count))\n" }
            }
            if !s.quiet.isEmpty {
                out += "  # Still refused (ENOSYS, so callers fall back), no longer reported.\n  quiet:\n"
                for q in s.quiet { out += "    - \(q.name)  # refused \(times(q.count)); not allowed: \(commentSafe(q.why))\n" }
            }
        }
        if !s.hosts.isEmpty {
            if let key = s.hostsKey {
                out += "\n# The hosts below go in experiment_config.yaml's \(key), not here: the experiment's list\n"
                out += "# replaces this policy's network.allow when the sandbox runs.\n"
                for h in s.hosts { out += "#   - \(quoted(h.host))  # \(times(h.count)) refused\n" }
            } else {
                out += "\nnetwork:\n  allow:\n"
                for h in policy.network.allow { out += "    - \(quoted(h))\n" }
                for h in s.hosts { out += "    - \(quoted(h.host))  # CONNECT refused \(times(h.count))\n" }
            }
        }
        if !s.limits.isEmpty {
            out += "\n# Doubled: the audit says a limit was reached, not how much was needed.\nlimits:\n"
            for l in s.limits { out += "  \(l.key): \(l.value)  # was \(l.was); reached \(times(l.count))\n" }
        }
        if !s.unclean.isEmpty {
            out += "\n# No policy makes these clean:\n"
            for u in s.unclean { out += "#   \(commentSafe(u.what)) (\(times(u.count))): \(commentSafe(u.why))\n" }
        }
        return out
    }

    /// `s` safe inside a comment line: anything but printable ASCII escaped, so a name the
    /// sandbox chose (a file name with a line break) cannot end the comment and add a key.
    public static func commentSafe(_ s: String) -> String {
        var out = ""
        for u in s.unicodeScalars {
            if u.value >= 0x20 && u.value < 0x7f { out.unicodeScalars.append(u) } else { out += "\\u{\(String(u.value, radix: 16))}" }
        }
        return out
    }

    static func times(_ n: Int) -> String { n == 1 ? "once" : "\(n) times" }

    /// A YAML double-quoted string: backslash, quote and anything but printable ASCII escaped.
    static func quoted(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\\": out += "\\\\"
            case "\"": out += "\\\""
            case _ where u.value >= 0x20 && u.value < 0x7f: out.unicodeScalars.append(u)
            case _ where u.value <= 0xffff: out += "\\u" + String(repeating: "0", count: 4 - String(u.value, radix: 16).count) + String(u.value, radix: 16)
            default: out += "\\U" + String(repeating: "0", count: 8 - String(u.value, radix: 16).count) + String(u.value, radix: 16)
            }
        }
        return out + "\""
    }
}
