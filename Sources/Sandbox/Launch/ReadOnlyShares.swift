import CSystemCalls
import Glibc
import SupervisorIO

/// Runs a program (qemu, for the held-out VM) that reads host directories on a guest's behalf,
/// so that nothing it reads moves the host's access times.
///
/// qemu runs as root and opens the files its 9p shares export itself: through the host's own
/// mounts (usually `relatime`), a guest that reads a file unread for a day updates its atime,
/// which a later sandbox can `stat` (a review read back all four held-out instructions this
/// way, one file per bit). Here the calling thread gets a mount namespace of its own, each
/// share is bound (recursively) read-only and `noatime` at a staging path the program is given
/// instead, and the program runs as a child that dies with this process, which dies with (kills
/// the child on) the exit of the process that started it.
public enum ReadOnlyShares {
    /// Binds every `(source, target)` and runs `argv`; returns its wait status, or throws
    /// what failed before it started.
    public static func run(shares: [(source: String, target: String)], argv: [String]) throws(SandboxError) -> Int32 {
        var failed: Int32 = -1
        let rc = withCStrings(shares.map(\.source)) { sources in
            withCStrings(shares.map(\.target)) { targets in
                withCStrings(argv) { args in
                    let cargs = args.map { UnsafeMutablePointer(mutating: $0) } + [nil]
                    return ahs_exec_with_readonly_shares(sources.map { Optional($0) }, targets.map { Optional($0) }, Int32(shares.count),
                                                         cargs, &failed)
                }
            }
        }
        guard rc >= 0 else {
            let what = failed >= 0 ? "read-only bind of \(shares[Int(failed)].source)" : "mount namespace or fork for \(argv.first ?? "?")"
            throw SandboxError(.launch, "\(what): \(ErrnoName.describe(-rc))")
        }
        return rc
    }

    private static func withCStrings<R>(_ strings: [String], _ body: ([UnsafePointer<CChar>]) -> R) -> R {
        let copies = strings.map { strdup($0)! }
        defer { copies.forEach { free($0) } }
        return body(copies.map { UnsafePointer($0) })
    }
}
