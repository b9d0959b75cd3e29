import CSystemCalls
import Glibc
import SupervisorIO

/// Runs qemu, for the held-out VM, with least privilege (`Sources/CSystemCalls/qemu_jail.c`
/// says what it gets): namespaces of its own, a read-only root holding only what it needs, an
/// unprivileged uid with CAP_DAC_READ_SEARCH alone.
///
/// qemu opens the files its 9p shares export itself: through the host's own mounts (usually
/// `relatime`), a guest that reads a file unread for a day updates its atime, which a later
/// sandbox can `stat` (a review read back all four held-out instructions this way, one file
/// per bit). So each share is bound (recursively) read-only and `noatime` at a staging path
/// below the export qemu is given, in qemu's mount namespace; qemu runs as a child that dies
/// with this process, which kills it when the process that started it exits.
public enum ReadOnlyShares {
    /// What the jailed program gets besides the system: the shares, the files it reads, the
    /// directory it works in (its `export` subdirectory holds the shares' staging paths), and
    /// its ids.
    public struct Jail: Sendable {
        public var shares: [(source: String, target: String)]
        public var reads: [String]
        public var work: String
        public var uid: UInt32
        public var gid: UInt32

        public init(shares: [(source: String, target: String)], reads: [String], work: String, uid: UInt32, gid: UInt32) {
            (self.shares, self.reads, self.work, self.uid, self.gid) = (shares, reads, work, uid, gid)
        }
    }

    /// Runs `argv` in `jail`; returns its wait status, or throws what failed before it
    /// started (a failure inside the jail is the child's exit status 126, said on stderr).
    public static func run(_ jail: Jail, argv: [String]) throws(SandboxError) -> Int32 {
        var failed: Int32 = -1
        let rc = withCStrings(jail.shares.map(\.source)) { sources in
            withCStrings(jail.shares.map(\.target)) { targets in
                withCStrings(jail.reads) { reads in
                    withCStrings(argv) { args in
                        jail.work.withCString { work in
                            let cargs = args.map { UnsafeMutablePointer(mutating: $0) } + [nil]
                            let (s, t, r) = (sources.map { Optional($0) }, targets.map { Optional($0) }, reads.map { Optional($0) })
                            return s.withUnsafeBufferPointer { sp in
                                t.withUnsafeBufferPointer { tp in
                                    r.withUnsafeBufferPointer { rp in
                                        var j = ahs_jail(sources: sp.baseAddress, targets: tp.baseAddress, nshares: Int32(s.count),
                                                         reads: rp.baseAddress, nreads: Int32(r.count), work: work, uid: jail.uid, gid: jail.gid)
                                        return ahs_exec_jailed(&j, cargs, &failed)
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        guard rc >= 0 else {
            let what = failed >= 0 ? "read-only bind of \(jail.shares[Int(failed)].source)" : "namespaces, \(jail.work) or fork for \(argv.first ?? "?")"
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
