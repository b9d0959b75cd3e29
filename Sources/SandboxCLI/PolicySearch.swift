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

    /// `share/autoharness/NAME` of an installation, canonical, or nil.
    public static func installed(_ name: String, executableDirectory dir: String) -> String? {
        canonical(dir + "/../share/autoharness/" + name) ?? canonical(dir + "/../../share/autoharness/" + name)
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

    /// The directory of the running executable (`/proc/self/exe`).
    public static func executableDirectory() -> String {
        directory(of: executablePath() ?? ".")
    }

    public static func executablePath() -> String? {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buf, 4095)
        guard n > 0 else { return nil }
        return String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    public static func directory(of path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return slash == path.startIndex ? "/" : String(path[..<slash])
    }
}
