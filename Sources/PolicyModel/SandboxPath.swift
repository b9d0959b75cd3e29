// Path rules for mount sources, destinations and `chdir`. Paths are compared as strings
// everywhere after this point (duplicate destinations, "lies under"), so they must have
// exactly one spelling: normalised here, once.

/// Shared by the policy loader and the plan compiler (which also checks command-line mounts
/// and sources after symlink resolution), so the rules exist once.
public enum SandboxPath {
    /// Paths the launcher creates itself in every sandbox; a policy mounting over them could
    /// replace the fresh `/proc` (and with it the PID-namespace view) or the minimal `/dev`.
    public static let reservedDestinations = ["/proc", "/dev"]

    public enum Problem: Error, Equatable {
        case dotDot
        case nul
        case tooLong
    }

    /// Collapses `//`, drops `.` components and a trailing `/`. A `..` component is an error
    /// rather than something to resolve: the host side of a bind must not depend on how
    /// `..` meets a symlink, and a policy has no reason to write one.
    ///
    /// `path` is absolute, or starts with an unresolved `{placeholder}` (kept relative).
    public static func normalize(_ path: String) throws(Problem) -> String {
        guard !path.contains("\0") else { throw .nul }
        let components = path.split(separator: "/", omittingEmptySubsequences: true).filter { $0 != "." }
        guard !components.contains("..") else { throw .dotDot }
        let joined = components.joined(separator: "/")
        let normalized = path.hasPrefix("/") ? "/" + joined : joined
        // PATH_MAX includes the terminating NUL.
        guard normalized.utf8.count < 4096 else { throw .tooLong }
        return normalized
    }

    /// True when `path` is strictly below `ancestor` (both normalised).
    public static func isStrictlyUnder(_ path: String, _ ancestor: String) -> Bool {
        guard path != ancestor else { return false }
        return ancestor == "/" ? path.hasPrefix("/") : path.hasPrefix(ancestor + "/")
    }

    /// `path` is `ancestor` or lies below it.
    public static func isAtOrUnder(_ path: String, _ ancestor: String) -> Bool {
        path == ancestor || isStrictlyUnder(path, ancestor)
    }

    /// Why `destination` may not be used, or nil if it may.
    public static func reservedReason(forDestination destination: String) -> String? {
        if destination == "/" {
            return "destination / is reserved: the sandbox root is an empty tmpfs the launcher builds"
        }
        if let reserved = reservedDestinations.first(where: { isAtOrUnder(destination, $0) }) {
            return "destination \(destination) is reserved: the launcher mounts a fresh \(reserved) in every sandbox"
        }
        return nil
    }

    /// Why `source` may not be bound into a sandbox, or nil if it may.
    public static func forbiddenReason(forSource source: String) -> String? {
        if source == "/" {
            return "binding the host root / is not allowed: grant the directories the program needs instead"
        }
        if isAtOrUnder(source, "/proc") {
            return "binding host \(source) is not allowed: host /proc reaches every host process (and /proc/1/root the host's root)"
        }
        return nil
    }
}

/// Which paths of a list lie under which others, for checks over a whole mount table.
///
/// Comparing every mount with every other took 9-11 s for the 20 000 mounts that fit in a
/// 1 MiB policy. Here the paths are sorted once, as bytes with a `/` appended (so that a
/// path's descendants are exactly the keys that start with its key, and they sort together
/// right after it), and one pass keeps the chain of ancestors of the current path on a stack.
/// That is O(L log n) for n paths of total length L, plus the size of the answer, which is at
/// most the sum of the paths' depths (no more than L / 2).
public enum PathTree {
    /// For each of `paths` (normalised, absolute), the indices of the other paths it lies
    /// strictly under, nearest first. Equal paths are not under each other.
    public static func ancestors(_ paths: [String]) -> [[Int]] {
        let keys: [[UInt8]] = paths.map { $0 == "/" ? [0x2F] : Array($0.utf8) + [0x2F] }
        let order = keys.indices.sorted { a, b in
            keys[a] == keys[b] ? a < b : keys[a].lexicographicallyPrecedes(keys[b])
        }
        var result = [[Int]](repeating: [], count: paths.count)
        var chain: [Int] = []
        for i in order {
            while let top = chain.last, keys[i] == keys[top] || !keys[i].starts(with: keys[top]) { chain.removeLast() }
            result[i] = chain.reversed()
            chain.append(i)
        }
        return result
    }

    /// For each of `paths`, the indices of the paths strictly under it, in ascending order.
    public static func descendants(ancestors: [[Int]]) -> [[Int]] {
        var result = [[Int]](repeating: [], count: ancestors.count)
        for (i, list) in ancestors.enumerated() {
            for a in list { result[a].append(i) }
        }
        return result
    }
}
