import SupervisorIO
// Spellings of single values in a policy that are more than a number or a path: the seccomp
// default action and the proxy's `host:port` allowlist entries.

/// `errno(NAME)` or `kill`, the spellings of `SeccompAction` in a policy.
enum SeccompActionSyntax {
    struct Problem: Error {
        var message: String
    }

    static func parse(_ spelled: String) -> Result<SeccompAction, Problem> {
        let s = spelled.filter { $0 != " " }
        if s == "kill" { return .success(.kill) }
        guard s.hasPrefix("errno("), s.hasSuffix(")"), s.count > "errno()".count else {
            return .failure(Problem(message: "seccomp.default_action must be errno(NAME), e.g. errno(ENOSYS) or errno(EPERM), or kill (got '\(spelled)')"))
        }
        let name = String(s.dropFirst("errno(".count).dropLast())
        guard let value = ErrnoName.value(name) else {
            return .failure(Problem(message: "unknown errno name '\(name)' in seccomp.default_action (use a Linux name such as ENOSYS or EPERM)"))
        }
        return .success(.errno(value))
    }
}

/// `host:port` entries of `network.allow`.
public enum HostPort {
    /// The entry with its host lowercased (DNS is case-insensitive and the proxy compares
    /// strings), or nil if it is not a DNS name / IPv4 / `[IPv6]` with a port in 1...65535.
    public static func normalize(_ spelled: String) -> String? {
        guard let colon = spelled.lastIndex(of: ":") else { return nil }
        let host = spelled[..<colon].lowercased()
        let port = spelled[spelled.index(after: colon)...]
        guard !port.isEmpty, port.count <= 5, port.allSatisfy(\.isASCIIDigit), let number = Int(port),
            (1...65535).contains(number)
        else { return nil }
        if host.hasPrefix("[") && host.hasSuffix("]") {
            let inner = host.dropFirst().dropLast()
            guard inner.contains(":"), inner.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else { return nil }
        } else {
            let labels = host.split(separator: ".", omittingEmptySubsequences: false)
            guard !host.isEmpty, host.utf8.count <= 253,
                labels.allSatisfy({ label in
                    !label.isEmpty && label.count <= 63 && label.first != "-" && label.last != "-"
                        && label.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "-") }
                })
            else { return nil }
        }
        return "\(host):\(number)"
    }
}
