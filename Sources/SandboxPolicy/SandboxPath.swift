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
