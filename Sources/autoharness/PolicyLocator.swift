import Experiment
import Glibc
import SandboxPolicy

/// Where bare policy names (`base`, `benchmark-task`) are looked up.
enum PolicyLocator {
    /// `--policy-dir` first, then `$AUTOHARNESS_POLICY_DIR`, then an installed
    /// `share/autoharness/policies` next to the binary, then a source checkout's `policies/`
    /// found by walking up from the binary (so `.build/debug/autoharness` works in place).
    static func searchPaths(explicit: [String]) -> [String] {
        var paths = explicit
        if let env = getenv("AUTOHARNESS_POLICY_DIR") { paths.append(String(cString: env)) }
        if let installed = canonical(executableDirectory() + "/../share/autoharness/policies") { paths.append(installed) }
        if let checkout = nearestAncestor(containing: "policies/base.yaml") { paths.append(checkout + "/policies") }
        return paths
    }

    static func executableDirectory() -> String {
        var buf = [CChar](repeating: 0, count: 4096)
        let n = readlink("/proc/self/exe", &buf, 4095)
        guard n > 0 else { return "." }
        let path = String(decoding: buf[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        guard let slash = path.lastIndex(of: "/") else { return "." }
        return String(path[..<slash])
    }

    /// The static broker client bound into the coding agent's sandbox as `autoharness`:
    /// `$AUTOHARNESS_CLIENT`, or `autoharness-client` next to this binary.
    static func clientBinary() -> String {
        if let env = getenv("AUTOHARNESS_CLIENT") { return String(cString: env) }
        return executableDirectory() + "/autoharness-client"
    }

    static func loader(_ explicit: [String]) -> PolicyLoader {
        PolicyLoader(searchPaths: searchPaths(explicit: explicit))
    }

    /// The templates directory: `$AUTOHARNESS_TEMPLATE_DIR`, an installed
    /// `share/autoharness/templates`, or a source checkout's `templates/`.
    static func templatesDirectory() -> String? {
        if let env = getenv("AUTOHARNESS_TEMPLATE_DIR") { return String(cString: env) }
        // Canonical: the path ends up in configs as a bind source, where `..` is refused.
        if let installed = canonical(executableDirectory() + "/../share/autoharness/templates"),
           access(installed + "/PROGRAM.md", R_OK) == 0 { return installed }
        return nearestAncestor(containing: "templates/PROGRAM.md").map { $0 + "/templates" }
    }

    /// `templatesDirectory()`, or a configuration error saying how to point at one.
    static func requireTemplates() throws -> String {
        guard let t = templatesDirectory() else {
            throw ExperimentError(.usage, "templates directory not found (set AUTOHARNESS_TEMPLATE_DIR)")
        }
        return t
    }

    /// `path` with `..`, `.` and symlinks resolved, or nil if it does not exist.
    static func canonical(_ path: String) -> String? {
        guard let r = realpath(path, nil) else { return nil }
        defer { free(r) }
        return String(cString: r)
    }

    /// The binary's directory or the closest of its (up to six) ancestors holding `relative`:
    /// a source checkout running `.build/<triple>/<config>/autoharness` in place.
    static func nearestAncestor(containing relative: String) -> String? {
        var dir = executableDirectory()
        for _ in 0..<6 {
            if access(dir + "/" + relative, R_OK) == 0 { return dir }
            guard let slash = dir.lastIndex(of: "/"), dir != "/" else { break }
            dir = slash == dir.startIndex ? "/" : String(dir[..<slash])
        }
        return nil
    }
}
