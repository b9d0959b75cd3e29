import Foundation

/// The one check on `runner.binds` against what agent.py's runner must never see.
///
/// A benchmark tool's runner sandbox also runs agent.py, so a bind that is, or contains, the
/// benchmark's held-out data (a local dataset's tasks, tau2's expected actions, BIRD's gold
/// SQL) would hand every test task to agent.py. Paths are compared after resolving symlinks,
/// and by device and inode: a bind names a protected path when it is that path or one of its
/// ancestors, whatever name reaches it (a symlink, another bind mount of the same directory,
/// `..`), so an alias cannot slip past a string comparison.
enum RunnerBinds {
    /// A directory or file agent.py must not see, and the sentence that says why.
    struct Protected {
        var path: String
        var what: String
    }

    /// Throws a usage error naming the first bind that is or contains a protected path.
    static func refuse(_ binds: [String], exposing protected: [Protected]) throws {
        for p in protected {
            let real = resolved(p.path)
            let ancestors = Set(lineage(real).compactMap(identity))
            for b in binds {
                let rb = resolved(b)
                let byName = real == rb || real.hasPrefix(rb.hasSuffix("/") ? rb : rb + "/")
                let byInode = identity(rb).map { ancestors.contains($0) } ?? false
                if byName || byInode {
                    throw ExperimentError(.usage, "runner.binds: \(b) \(p.what)")
                }
            }
        }
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
