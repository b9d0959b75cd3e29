import Foundation

/// The one check on `runner.binds` against what agent.py's runner must never see.
///
/// A benchmark tool's runner sandbox also runs agent.py, so a bind that is, or contains, the
/// benchmark's held-out data (a local dataset's tasks, tau2's expected actions, BIRD's gold
/// SQL) would hand every test task to agent.py, and so would a bind inside that data. Paths
/// are compared after resolving symlinks, and by device and inode: whatever name reaches a
/// directory (a symlink, another bind mount of it, `..`) cannot slip past a string comparison.
package enum RunnerBinds {
    /// A directory or file agent.py must not see, and the rest of the sentence that says why
    /// a bind containing it is refused ("runner.binds: B …").
    package struct Protected {
        var path: String
        var what: String
        /// Whether a bind inside `path` is refused too: true for data; false for a checkout
        /// whose own virtualenv an operator binds (BIRD's ADK), guarded by its data's entry.
        var inside = true
    }

    /// Throws a usage error naming the first bind that is, contains or (`inside`) lies in a
    /// protected path, and the setting it came from.
    package static func refuse(_ binds: [(setting: String, path: String)], exposing protected: [Protected]) throws {
        for p in protected {
            let real = resolved(p.path)
            let ancestors = Set(lineage(real).compactMap(identity))
            for (setting, b) in binds {
                let rb = resolved(b)
                if within(real, rb) || identity(rb).map({ ancestors.contains($0) }) == true {
                    throw ExperimentError(.usage, "\(setting): \(b) \(p.what)")
                }
                if p.inside, within(rb, real) || identity(real).map({ Set(lineage(rb).compactMap(identity)).contains($0) }) == true {
                    let who = setting.hasSuffix("runner.binds") ? "agent.py's runner" : setting.hasSuffix("triage.binds") ? "the triage"
                        : setting.hasPrefix("runner.") || setting == toolPath ? "the tool's sandboxes" : "the coding agent"
                    throw ExperimentError(.usage, "\(setting): \(b) lies inside \(p.path), which \(who) must never see; \(setting.hasSuffix("home_seed") ? "seed its home from elsewhere" : "bind only the tool's install")")
                }
            }
        }
    }

    /// The setting named for a path a tool's sandboxes get that no bind setting names (its
    /// install's directories, scripts, data: a worker node checks them all).
    package static let toolPath = "a path the tool runs with"

    /// `runner.binds` alone (the setting named in refusals).
    package static func refuse(_ binds: [String], exposing protected: [Protected]) throws {
        try refuse(binds.map { ("runner.binds", $0) }, exposing: protected)
    }

    /// Whether `path` is `directory` or lies below it (by name).
    package static func within(_ path: String, _ directory: String) -> Bool {
        path == directory || path.hasPrefix(directory.hasSuffix("/") ? directory : directory + "/")
    }

    static func resolved(_ path: String) -> String { URL(fileURLWithPath: path).resolvingSymlinksInPath().standardizedFileURL.path }

    /// `path`, its parent, and so on up to `/`.
    static func lineage(_ path: String) -> [String] {
        var out = [path], p = path
        while p != "/" && !p.isEmpty {
            p = (p as NSString).deletingLastPathComponent
            out.append(p.isEmpty ? "/" : p)
        }
        return out
    }

    struct Identity: Hashable { var device: UInt64, inode: UInt64 }

    static func identity(_ path: String) -> Identity? {
        var st = stat()
        guard stat(path, &st) == 0 else { return nil }
        return Identity(device: UInt64(st.st_dev), inode: UInt64(st.st_ino))
    }
}

extension RunnerBinds.Protected {
    /// A worker node's own directories (`autoharness worker`): its state directory holds its
    /// sealing key, the nonces and each request's tasks while they run (held-out ones too), its
    /// scratch root every task's tmpfs. A request's binds are the supervisor's host paths,
    /// and on a node laid out otherwise one could contain them.
    package static func workerDirectories(state: String, scratch: String) -> [Self] {
        [.init(path: state, what: "contains this worker's state directory \(state) (its sealing key, and each request's tasks while they run, held-out ones too)"),
         .init(path: scratch, what: "contains this worker's scratch root \(scratch) (every task's tmpfs, held-out ones too)")]
    }
}
