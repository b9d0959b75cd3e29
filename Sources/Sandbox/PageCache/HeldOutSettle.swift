import Glibc

/// What a held-out phase leaves in the host's kernel, removed or scrambled once its last
/// sandbox (or its VM) is gone and before anything untrusted runs again: the pages it brought
/// into the page cache (`PageCacheEviction`) and the host-wide counters it moved
/// (`InodeNumberNoise`).
///
/// The clean-up fails closed. The phase's journal (the page-cache journal, made to exist for
/// the phase) is removed only once both are done, so a supervisor that dies meanwhile, or
/// whose noise fails, leaves it; the next start of the experiment (or of a worker) does both
/// again before anything untrusted runs, and refuses to go on while the noise fails. While
/// the journal is there the clean-up is `owed`: the coding agent frozen for the gate is ended
/// rather than thawed (`RunDesk.gate`).
public enum HeldOutSettle {
    public struct Outcome: Sendable {
        /// What was done, a line each, for the operator's log.
        public var lines: [String]
        /// Why the clean-up is not done (nothing untrusted may run until it is).
        public var failure: String?
    }

    public typealias Noise = @Sendable (_ onHost: Bool) -> InodeNumberNoise.Report

    /// After a held-out phase on this host (`onHost`) or in a VM (the guest moved no inode
    /// counter or session serial of the host's, only the process serial through qemu's
    /// threads). `noise`: tests stand in a failing one.
    public static func settle(_ cache: PageCacheEviction, onHost: Bool,
                              noise: Noise = { InodeNumberNoise.perturb(onHost: $0) }) -> Outcome {
        cache.markOwed()
        var o = finish(evicted: "\(cache.evict(keepingJournal: true))", noise(onHost), removeJournal: cache.removeJournal)
        // Parts built while the held-out sandboxes ran carry their timing (SandboxPartsPool).
        if onHost { o.lines.append(SandboxPartsPool.discardTimedParts()) }
        return o
    }

    /// `settle`, its lines logged after `prefix` (whether or not anyone listens, the work is
    /// done); returns why the clean-up is not done, or nil.
    public static func settle(_ cache: PageCacheEviction, onHost: Bool, log: ((String) -> Void)?, prefix: String) -> String? {
        let o = settle(cache, onHost: onHost)
        for line in o.lines { log?(prefix + line) }
        return o.failure
    }

    /// The outcome of an eviction and the noise after it; the journal removed only if the
    /// noise succeeded.
    private static func finish(evicted: String, _ report: InodeNumberNoise.Report, removeJournal: () -> Void) -> Outcome {
        var o = Outcome(lines: [evicted, "\(report)"])
        if let failure = report.failure {
            o.failure = "moving the host's counters failed: \(failure)"
        } else {
            removeJournal()
        }
        return o
    }

    /// At a start: the clean-up a supervisor that died, or failed, during or after a held-out
    /// phase left owed (its journal), done now with the full noise (it is not known whether
    /// the phase ran here or in a VM). nil when nothing was owed.
    public static func settleLeftover(journal: String,
                                      noise: Noise = { InodeNumberNoise.perturb(onHost: $0) }) -> Outcome? {
        guard let evicted = PageCacheEviction.evictLeftover(journal: journal, keepingJournal: true) else { return nil }
        return finish(evicted: "a held-out run was cut off; \(evicted)", noise(true), removeJournal: { _ = unlink(journal) })
    }

    /// Whether a held-out phase's clean-up is owed (its journal is there).
    public static func owed(journal: String) -> Bool { access(journal, F_OK) == 0 }
}
