import Experiment
import ExperimentModel
import Glibc
import Sandbox
import SandboxCLI
import SandboxPolicy

/// Where bare policy names (`base`, `benchmark-task`) and templates are looked up, for this
/// binary (`PolicySearch` holds the rules, shared with the `sandbox exec` front).
enum PolicyLocator {
    static func searchPaths(explicit: [String]) -> [String] {
        PolicySearch.paths(explicit: explicit, executableDirectory: executableDirectory())
    }

    static func executableDirectory() -> String { Launcher.executableDirectory() }

    /// The static broker client bound into the coding agent's sandbox as `autoharness`:
    /// `$AUTOHARNESS_CLIENT`, or `autoharness-client` next to this binary, or in `bin/` of an
    /// installation that has this binary in `libexec/autoharness/` (behind its front).
    static func clientBinary() -> String {
        if let env = getenv("AUTOHARNESS_CLIENT") { return String(cString: env) }
        let dir = executableDirectory()
        // Canonical: it is bound into the sandbox, where a source with `..` is refused.
        if dir.hasSuffix("/libexec/autoharness"), let installed = PolicySearch.canonical(dir + "/../../bin/autoharness-client") {
            return installed
        }
        return dir + "/autoharness-client"
    }

    static func loader(_ explicit: [String]) -> PolicyLoader {
        PolicyLoader(searchPaths: searchPaths(explicit: explicit))
    }

    /// The templates directory: `$AUTOHARNESS_TEMPLATE_DIR`, an installed
    /// `share/autoharness/templates`, or a source checkout's `templates/`.
    static func templatesDirectory() -> String? {
        if let env = getenv("AUTOHARNESS_TEMPLATE_DIR") { return String(cString: env) }
        // Canonical: the path ends up in configs as a bind source, where `..` is refused.
        if let installed = PolicySearch.installed("templates", executableDirectory: executableDirectory()),
           access(installed + "/PROGRAM.md", R_OK) == 0 { return installed }
        return PolicySearch.nearestAncestor(of: executableDirectory(), containing: "templates/PROGRAM.md").map { $0 + "/templates" }
    }

    /// `templatesDirectory()`, or a configuration error saying how to point at one.
    static func requireTemplates() throws -> String {
        guard let t = templatesDirectory() else {
            throw ExperimentError(.usage, "templates directory not found (set AUTOHARNESS_TEMPLATE_DIR)")
        }
        return t
    }
}
