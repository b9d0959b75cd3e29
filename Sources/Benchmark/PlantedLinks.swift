// Links agent.py left in /app that lead out of it.
//
// A link `/app/out.txt -> /tests/expected.txt` makes a test that compares the two compare the
// answer key with itself. The verifier's /app used to be mounted `nosymfollow`, but that covers
// only path walks on that mount: `cp -a /app /tmp/w`, an untarred archive or `git clone /app`
// recreate the link on the verifier's own /tmp, where it is followed, and `realpath` hands the
// target back to open directly. And it broke honest work: a venv a test script makes
// in /app has a linked `bin/python3`. So once the agent's sandboxes are gone and before the
// verifier starts, the supervisor resolves every link under /app as the kernel would from where
// it stands (links inside /app followed, `..` included, at most 40 of them) and removes each one
// whose path leaves /app for anything but the host's read-only system directories (/usr, /etc,
// ...), recording it against agent.py. Links that stay inside /app (a venv's `python ->
// python3`) or lead into the system (`python3 -> /usr/bin/python3`) are kept. A link recreated
// from an archive or a git object the test itself unpacks is not seen here (docs/benchmarks.md).
//
// On a task's image the agent wrote the whole root as its root, and the verifier's root is
// that same tree: a link anywhere the agent made (its upper layer) is resolved in the merged
// tree, `/` being the image's root, and removed when its path passes through what only the
// verifier has or what differs between the two sandboxes (`/tests`, `/logs`, `/solution`,
// `/tmp`, the toolbox, `/proc`, `/sys`, `/dev`'s links into `/proc`). Everything else it can reach is the image's
// or the agent's own, which the agent could read anyway.

import Glibc
import SupervisorIO

enum PlantedLinks {
    /// The verifier's read-only system directories: the host's own files in both sandboxes.
    static let systemDirectories: [[UInt8]] = ["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc"].map { Array($0.utf8) }
    static let hopLimit = 40
    static let entryLimit = 1_000_000
    static let depthLimit = 128

    /// Removes every link under `app` (the working copy, `/app` in the verifier) whose path
    /// leads out of it; returns each as `/app/PATH -> TARGET`, or why /app could not be checked
    /// (then the task is not graded).
    static func sweep(app: Int32) -> Result<[String], BenchmarkError> {
        remove(walking: app, label: "/app", in: app) { leavesApp(from: $0, target: $1, lookup: $2) }
    }

    /// The links under `walked` (shown below `label`) that `leads` says go where they must
    /// not, judged on the tree as the agent left it (a link through a removed one is judged on
    /// where it led), then removed through `tree` (the same tree, or the merged one it is a
    /// layer of); returns each as `LABEL/PATH -> TARGET`.
    private static func remove(walking walked: Int32, label: String, in tree: Int32,
                               leads: (LinkWalk.Components, [UInt8], (LinkWalk.Components) -> LinkWalk.Entry?) -> Bool) -> Result<[String], BenchmarkError> {
        let links: [LinkWalk.Link]
        do throws(IOFailure) {
            links = try LinkWalk.links(under: walked, entryLimit: entryLimit, depthLimit: depthLimit, label: label)
        } catch {
            return .failure(BenchmarkError(error))
        }
        let leaving = links.filter { leads(Array($0.path.dropLast()), $0.target) { LinkWalk.entry(under: tree, $0) } }
        var removed: [String] = []
        for link in leaving {
            let shown = (label == "/" ? "" : label) + "/" + link.path.map(Self.shown).joined(separator: "/") + " -> " + Self.shown(link.target)
            if let e = LinkWalk.removeLink(under: tree, link.path), e != ENOENT {
                return .failure(BenchmarkError(.io, "\(shown): cannot remove: \(FileSystem.errorText(e))"))
            }
            removed.append(shown)
        }
        return .success(removed)
    }

    /// The top-level names of an image's root that are the verifier's own or differ between
    /// the agent's sandbox and the verifier's (mounts, pseudo file systems).
    static let verifierOnly: [[UInt8]] = ["tests", "logs", "solution", "tmp", "proc", "sys"].map { Array($0.utf8) }
    /// Paths below them too: the toolbox, the sandbox's /dev links into /proc (a link to
    /// /dev/fd/3 is whatever the test has open as 3) and its own /dev mounts (/dev/shm, a
    /// review's). /dev/null and its kin are fine.
    static let verifierOnlyBelow: [LinkWalk.Components] = [VerifierTools.mountPoint, "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr",
                                                           "/dev/shm", "/dev/pts", "/dev/mqueue"].map {
        $0.split(separator: "/").map { Array($0.utf8) }
    }

    /// Removes every link in an image task's upper layer (`upper`, what the agent made) whose
    /// path, resolved in the merged tree (`root`, mounted: the verifier's), passes through
    /// `verifierOnly` or the toolbox; returns each as `/PATH -> TARGET`.
    static func sweepImage(upper: String, root: String) -> Result<[String], BenchmarkError> {
        let (u, r) = (FileSystem.openDirectory(upper), FileSystem.openDirectory(root))
        defer { if u >= 0 { close(u) }; if r >= 0 { close(r) } }
        guard u >= 0, r >= 0 else { return .failure(BenchmarkError(.io, "\(u < 0 ? upper : root): \(FileSystem.errorText())")) }
        return remove(walking: u, label: "/", in: r) { reachesVerifier(from: $0, target: $1, lookup: $2) }
    }

    /// Whether `target`, a link's target in directory `directory` (components below /app),
    /// resolves to somewhere outside /app other than the system directories. `lookup` says what
    /// is at a path below /app.
    static func leavesApp(from directory: LinkWalk.Components, target: [UInt8], lookup: (LinkWalk.Components) -> LinkWalk.Entry?) -> Bool {
        resolve(from: directory, target: target, lookup: lookup,
                absolute: { rest in absolute(rest).map { .inside($0) } ?? .out(!isSystem(rest)) },
                aboveTop: { true }, passes: { _ in false })
    }

    /// Whether `target`, a link's target in `directory` (components below an image's root),
    /// passes through a verifier-only path as the kernel resolves it there (`..` of the root
    /// is the root). `lookup` says what is at a path in the merged tree.
    static func reachesVerifier(from directory: LinkWalk.Components, target: [UInt8], lookup: (LinkWalk.Components) -> LinkWalk.Entry?) -> Bool {
        resolve(from: directory, target: target, lookup: lookup, absolute: { .inside($0) }, aboveTop: nil) { current in
            current.count == 1 && verifierOnly.contains(current[0]) || verifierOnlyBelow.contains(current)
        }
    }

    enum Restart { case inside(LinkWalk.Components), out(Bool) }

    /// The kernel's walk of a link's target below a top directory: links followed (at most
    /// `hopLimit`), `..` taken. `absolute`: where an absolute path leads (below the top, or
    /// out with the answer); `aboveTop`: the answer for `..` at the top (nil: stay there);
    /// `passes`: true ends the walk with true.
    private static func resolve(from directory: LinkWalk.Components, target: [UInt8], lookup: (LinkWalk.Components) -> LinkWalk.Entry?,
                                absolute: (LinkWalk.Components) -> Restart, aboveTop: (() -> Bool)?,
                                passes: (LinkWalk.Components) -> Bool) -> Bool {
        var current = directory
        var pending = components(target)
        var hops = 0
        func restart(_ parts: LinkWalk.Components) -> Bool? {
            switch absolute(parts) {
            case .inside(let inside): (current, pending) = ([], inside); return nil
            case .out(let answer): return answer
            }
        }
        if target.first == UInt8(ascii: "/"), let answer = restart(pending) { return answer }
        while !pending.isEmpty {
            let c = pending.removeFirst()
            if c.isEmpty || c == [UInt8(ascii: ".")] { continue }
            if c == [UInt8(ascii: "."), UInt8(ascii: ".")] {
                if current.isEmpty {
                    if let aboveTop { return aboveTop() }
                } else {
                    current.removeLast()
                }
                continue
            }
            current.append(c)
            if passes(current) { return true }
            switch lookup(current) {
            case .link(let next)?:
                hops += 1
                guard hops <= hopLimit else { return true }
                current.removeLast()
                if next.first == UInt8(ascii: "/") {
                    if let answer = restart(components(next) + pending) { return answer }
                } else {
                    pending = components(next) + pending
                }
            case .directory?, .other?, nil:
                // nil: nothing there (yet): the rest is read as written.
                continue
            }
        }
        return false
    }

    /// An absolute path's components below /app when it names /app (`/app/x` -> `x`), else nil.
    private static func absolute(_ parts: LinkWalk.Components) -> LinkWalk.Components? {
        let named = parts.drop { $0.isEmpty || $0 == [UInt8(ascii: ".")] }
        guard named.first == Array("app".utf8) else { return nil }
        return Array(named.dropFirst())
    }

    /// Whether an absolute path outside /app lies in a system directory, and so leads where it
    /// does in the verifier, which has the host's: written without `..` (a system link can be
    /// shallower than its spelling: `/usr/lib/ssl/certs -> /etc/ssl/certs`, so
    /// `/usr/lib/ssl/certs/../../../tests` is /tests, found by a review), and resolved by this
    /// host's kernel into a system directory too (`/etc/mtab -> ../proc/self/mounts` is not).
    private static func isSystem(_ parts: LinkWalk.Components) -> Bool {
        if parts.contains([UInt8(ascii: "."), UInt8(ascii: ".")]) { return false }
        let named = parts.filter { !$0.isEmpty && $0 != [UInt8(ascii: ".")] }
        guard let first = named.first, systemDirectories.contains(first),
              let path = String(validating: [UInt8(ascii: "/")] + Array(named.joined(separator: [UInt8(ascii: "/")])), as: UTF8.self),
              let resolved = realpath(path, nil) else { return false }
        defer { free(resolved) }
        let there = components(Array(String(cString: resolved).utf8))
        return there.first.map(systemDirectories.contains) ?? false
    }

    /// A link's path or target for the audit and the run's note: control bytes escaped.
    static func shown(_ bytes: [UInt8]) -> String {
        String(decoding: bytes, as: UTF8.self).unicodeScalars.map { u in
            u.value < 0x20 || u.value == 0x7F ? "\\x" + String(u.value, radix: 16) : String(u)
        }.joined()
    }

    private static func components(_ path: [UInt8]) -> LinkWalk.Components {
        path.split(separator: UInt8(ascii: "/"), omittingEmptySubsequences: true).map(Array.init)
    }
}
