// What a task's task.toml says its agent phase may reach, in Harbor's words (0.25:
// harbor/models/task/config.py, `NetworkMode`, `BaselineNetworkPolicyConfig` for
// `[environment]`, `PhaseNetworkPolicyConfig` for the `[agent]` override, and the deprecated
// `[environment] allow_internet`, which Harbor maps to public or no-network):
//
//   [environment] network_mode = "public" | "no-network" | "allowlist"   (default public)
//                 allowed_hosts = ["pypi.org", "*.pythonhosted.org", "192.0.2.7"]
//   [agent]       network_mode / allowed_hosts                            (over [environment])
//
// Mapped onto the agent phase's egress proxy, which only ever reaches what is listed:
//   - no-network: no proxy at all, not even the operator's package mirrors;
//   - allowlist: the operator's mirrors (`runner.network.allow`) and each allowed host on
//     ports 443 and 80 (a name, a `*.domain` pattern of two labels or more, or a public IP
//     address; never a CIDR range, which the proxy cannot express, nor an internal address,
//     which would reach this host's own services);
//   - public: the operator's mirrors only. Harbor gives such a task the internet; autoharness
//     never does (a held-out run could carry its task anywhere), so a task that needs more
//     than its mirrors says which hosts in `allowlist`.
// The verifier's network is the verifier's policy's, whatever task.toml says.

import Glibc
import Sandbox

/// A task's own word on its agent phase's network (`BenchmarkTask.network`).
public enum TaskNetwork: Sendable, Equatable {
    /// `no-network` (or `allow_internet = false`).
    case noNetwork
    /// `allowlist`: these `host:port` entries besides the operator's.
    case allowlist([String])

    /// What the agent phase's proxy allows for a task with `network` (nil: public, or
    /// task.toml silent), given the operator's mirrors.
    public static func allow(_ network: TaskNetwork?, operator mirrors: [String]) -> [String] {
        switch network {
        case .noNetwork: return []
        case .allowlist(let hosts): return mirrors + hosts.filter { !mirrors.contains($0) }
        case nil: return mirrors
        }
    }

    /// The task's entries (empty for `noNetwork`), for checks against what the coding agent reaches.
    public var entries: [String] {
        if case .allowlist(let hosts) = self { return hosts }
        return []
    }

    /// Reads the network settings of `toml` (a task's task.toml at `path`).
    static func read(_ toml: TaskToml, path: String) throws(BenchmarkError) -> TaskNetwork? {
        func fail(_ entry: TaskToml.Entry, _ table: String, _ why: String) -> BenchmarkError {
            BenchmarkError(.invalidTaskFile, "\(path):\(entry.line): [\(table)] \(why)")
        }
        /// One table's mode and hosts (nil mode: the table does not say).
        func policy(_ table: String) throws(BenchmarkError) -> (mode: String?, hosts: [String]?) {
            var mode: String?
            if let entry = toml.entry(table, "network_mode") {
                guard case .string(let m) = entry.value, ["public", "no-network", "allowlist"].contains(m) else {
                    throw fail(entry, table, "network_mode must be \"public\", \"no-network\" or \"allowlist\" (got \(entry.value.metadataText))")
                }
                mode = m
            } else if table == "environment", let entry = toml.entry(table, "allow_internet") {
                guard case .bool(let b) = entry.value else { throw fail(entry, table, "allow_internet must be true or false") }
                mode = b ? "public" : "no-network"
            }
            guard let entry = toml.entry(table, "allowed_hosts") else { return (mode, nil) }
            guard mode == "allowlist" else { throw fail(entry, table, "allowed_hosts is only valid with network_mode = \"allowlist\"") }
            guard case .array(let items) = entry.value else { throw fail(entry, table, "allowed_hosts must be a list of host names") }
            var hosts: [String] = []
            for item in items {
                guard case .string(let host) = item else { throw fail(entry, table, "allowed_hosts: \(item.metadataText) is not a host name") }
                guard let mapped = Self.entries(host) else {
                    throw fail(entry, table, "allowed_hosts: '\(host)' is not a host autoharness's proxy can allow: a name, a `*.` pattern over a domain of two labels or more, or a public IP address (no ports, paths, CIDR ranges or internal addresses)")
                }
                hosts += mapped.filter { !hosts.contains($0) }
            }
            return (mode, hosts)
        }
        let environment = try policy("environment")
        let agent = try policy("agent")
        // [agent] overrides [environment] only where it sets a mode (Harbor's explicit phase policy).
        let (mode, hosts) = agent.mode != nil ? agent : environment
        switch mode {
        case "no-network": return .noNetwork
        case "allowlist": return .allowlist(hosts ?? [])
        default: return nil
        }
    }

    /// Special-use domains whose names reach this host or its local network (RFC 6761,
    /// RFC 6762, RFC 8375, and `internal`, which clouds' resolvers answer for their metadata).
    static let localDomains = ["localhost", "local", "internal", "home.arpa", "arpa", "localdomain", "lan", "test", "invalid"]

    /// `host` as the proxy's `host:port` entries (443 and 80), or nil when it cannot be one.
    static func entries(_ raw: String) -> [String]? {
        var host = raw.lowercased()
        while host.hasSuffix(".") { host.removeLast() }
        guard !host.isEmpty, !host.contains("/"), !host.contains("@"), host.unicodeScalars.allSatisfy({ $0.value > 0x20 && $0.value < 0x7f }) else {
            return nil
        }
        if host.contains(":") {
            // Only an IPv6 address has colons here (no ports).
            var a6 = in6_addr()
            guard inet_pton(AF_INET6, host, &a6) == 1, !EgressProxy.isInternalLiteral(host) else { return nil }
            return ["[\(host)]:443", "[\(host)]:80"]
        }
        var a4 = in_addr()
        if inet_pton(AF_INET, host, &a4) == 1 {
            guard !EgressProxy.isInternalLiteral(host) else { return nil }
        } else {
            // Another spelling of an address (`0x7f.1`, `2130706433`, `127.1`): the C
            // library's resolver reads it as one.
            guard inet_aton(host, &a4) == 0 else { return nil }
            let name = host.hasPrefix("*.") ? String(host.dropFirst(2)) : host
            let labels = name.split(separator: ".", omittingEmptySubsequences: false)
            // Two labels at least: a single label (`localhost`, `metadata`, a host-file name)
            // is this host's or its network's, as are the names under the special-use domains.
            guard labels.count >= 2, !labels.contains(where: { $0.isEmpty || $0.count > 63 }),
                  name.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." }),
                  !Self.localDomains.contains(where: { name == $0 || name.hasSuffix("." + $0) }) else { return nil }
            // All digits and dots but not an address (`1.2.3.4.5`): refused as well.
            if name.allSatisfy({ $0.isNumber || $0 == "." }) { return nil }
        }
        return ["\(host):443", "\(host):80"]
    }
}
