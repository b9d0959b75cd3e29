import Foundation
import Testing
import TestSupport

@testable import Sandbox

/// The clean-up after a held-out phase fails closed: the phase's journal, the mark that it is
/// owed, goes only once the counters are moved too. The noise here is a stand-in (nothing of
/// the host's kernel is touched).
@Suite("Held-out clean-up fails closed")
struct HeldOutSettleTests {
    static func noise(failing: Bool) -> HeldOutSettle.Noise {
        { _ in
            var r = InodeNumberNoise.Report()
            if failing { r.failure = "no threads left" }
            return r
        }
    }

    @Test("settle: the journal stays (owed) when the noise fails, even if nothing was recorded; it goes when the noise succeeds")
    func journalKeptUntilNoiseSucceeds() throws {
        let dir = try TempDir()
        let journal = dir.path + "/held-out-sources"
        let cache = PageCacheEviction(journal: journal)
        let failed = HeldOutSettle.settle(cache, onHost: true, noise: Self.noise(failing: true))
        #expect(failed.failure?.contains("no threads left") == true, "\(failed)")
        #expect(HeldOutSettle.owed(journal: journal), "a failed clean-up must leave its mark")
        let done = HeldOutSettle.settle(PageCacheEviction(journal: journal), onHost: false, noise: Self.noise(failing: false))
        #expect(done.failure == nil && !HeldOutSettle.owed(journal: journal), "\(done)")
        #expect(done.lines.count == 2, "\(done.lines)")
    }

    @Test("at a start, an owed clean-up is done again; while the noise fails it stays owed and says so; nothing owed is nil")
    func leftoverRedoneUntilItSucceeds() throws {
        let dir = try TempDir()
        let journal = dir.path + "/held-out-sources"
        #expect(HeldOutSettle.settleLeftover(journal: journal, noise: Self.noise(failing: false)) == nil)
        try "/nonexistent-source\n".write(toFile: journal, atomically: true, encoding: .utf8)
        final class Asked: @unchecked Sendable { var onHost: [Bool] = [] }
        let asked = Asked()
        let failing: HeldOutSettle.Noise = { ic in asked.onHost.append(ic); var r = InodeNumberNoise.Report(); r.failure = "x"; return r }
        let again = try #require(HeldOutSettle.settleLeftover(journal: journal, noise: failing))
        #expect(again.failure != nil && HeldOutSettle.owed(journal: journal), "\(again)")
        // Full noise: whether the phase ran here or in a VM is not known.
        #expect(asked.onHost == [true])
        let done = try #require(HeldOutSettle.settleLeftover(journal: journal, noise: Self.noise(failing: false)))
        #expect(done.failure == nil && !HeldOutSettle.owed(journal: journal), "\(done)")
    }

    @Test("the noise on a shared counter is one uniform draw over its whole width, spread over the CPUs, not a sum of per-CPU draws (which clusters in the middle)")
    func sharedNoiseUniformOverItsWidth() {
        let cpus = 32, rounds = 4000
        var low = (threads: 0, sessions: 0, batches: 0)
        for _ in 0..<rounds {
            let d = InodeNumberNoise.draw(cpus: cpus, onHost: true)
            #expect(d.threads.count == cpus && d.sessions.count == cpus && d.pipes.count == cpus)
            // The lowest tenth of each width: a tenth of the draws land there when the total
            // is uniform; a sum of 32 per-CPU draws lands there about never.
            if d.threads.reduce(0, +) < InodeNumberNoise.threadNoise * cpus / 10 { low.threads += 1 }
            if d.sessions.reduce(0, +) < InodeNumberNoise.sessionNoise * cpus / 10 { low.sessions += 1 }
            if d.pipes.map({ $0 / 1024 }).reduce(0, +) < InodeNumberNoise.extraBatches * cpus / 10 { low.batches += 1 }
        }
        for (name, n) in [("threads", low.threads), ("sessions", low.sessions), ("batches", low.batches)] {
            #expect((280...520).contains(n), "\(name): \(n) of \(rounds) in the lowest tenth")
        }
        #expect(InodeNumberNoise.spread(10, over: 4) == [3, 3, 2, 2])
        // After a VM's phase only the process serial moves.
        let vm = InodeNumberNoise.draw(cpus: 2, onHost: false)
        #expect(vm.sessions == [0, 0] && vm.pipes == [0, 0] && vm.memfds == [0, 0])
    }
}
