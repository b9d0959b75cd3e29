import Glibc

/// Where bare policy names (`base`, `benchmark-task`) are looked up, for the binary in
/// `executableDirectory`: `--policy-dir` first, then `$AUTOHARNESS_POLICY_DIR`, then an
/// installed `share/autoharness/policies` (beside `bin/`, or two levels up from
/// `libexec/autoharness/`, where `scripts/install` puts the full CLI behind its front), then a
/// source checkout's `policies/` found by walking up from the binary (so
/// `.build/debug/autoharness` works in place). The front asks with the full CLI's directory:
/// both must find the same files for a cached policy to stand.
public enum PolicySearch {
    public static func paths(explicit: [String], executableDirectory dir: String) -> [String] {
        var paths = explicit
        if let env = getenv("AUTOHARNESS_POLICY_DIR") { paths.append(String(cString: env)) }
        if let installed = installed("policies", executableDirectory: dir) { paths.append(installed) }
        if let checkout = nearestAncestor(of: dir, containing: "policies/base.yaml") { paths.append(checkout + "/policies") }
        return paths
    }

    /// `share/autoharness/NAME` of an installation, canonical, or nil: beside the binary's
    /// `bin/`, or, for the full CLI in `libexec/autoharness/` (behind its front), beside that
    /// `libexec/`.
    public static func installed(_ name: String, executableDirectory dir: String) -> String? {
        let prefix = dir.hasSuffix("/libexec/autoharness") ? dir + "/../.." : dir + "/.."
        return canonical(prefix + "/share/autoharness/" + name)
    }

    /// `path` with `..`, `.` and symlinks resolved, or nil if it does not exist.
    public static func canonical(_ path: String) -> String? {
        guard let r = realpath(path, nil) else { return nil }
        defer { free(r) }
        return String(cString: r)
    }

    /// `dir` or the closest of its (up to six) ancestors holding `relative`: a source
    /// checkout running `.build/<triple>/<config>/autoharness` in place.
    public static func nearestAncestor(of start: String, containing relative: String) -> String? {
        var dir = start
        for _ in 0..<6 {
            if access(dir + "/" + relative, R_OK) == 0 { return dir }
            guard let slash = dir.lastIndex(of: "/"), dir != "/" else { break }
            dir = slash == dir.startIndex ? "/" : String(dir[..<slash])
        }
        return nil
    }
}
