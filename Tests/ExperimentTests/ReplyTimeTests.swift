import Foundation
import Ledger
import Testing
import TestSupport

@testable import Experiment
@testable import Evidence
@testable import ExperimentModel

/// A gate's duration is a channel out of the held-out split: agent.py can sleep in held-out
/// tasks for as long as it wants the gate to take. `gate.reply_time` holds everything the gate
/// produces (its ledger rows, commit and answer) to an instant set by the configuration.
@Suite("Gate reply time")
struct ReplyTimeTests {
    @Test("the padded grid: powers of two seconds from 1; worst_case answers at its bound and falls back to the grid past it",
          arguments: [(0.0, 1.0), (0.4, 1.0), (1.0, 1.0), (1.01, 2.0), (3.9, 4.0), (100, 128), (4800, 8192)])
    func grid(elapsed: Double, release: Double) {
        #expect(ReplyTime.padded.release(after: elapsed) == release)
        for bound in [0.5, 600.0] {
            #expect(ReplyTime.worstCase(seconds: bound).release(after: elapsed) == (elapsed <= bound ? bound : release))
        }
    }

    @Test("capacity: log2 of the instants a gate can end at")
    func capacity() {
        // 1, 2, 4, ..., 8192: 14 instants.
        #expect(abs(ReplyTime.padded.capacityBits(worst: 4800) - log2(14)) < 1e-9)
        #expect(abs(ReplyTime.padded.capacityBits(worst: 100) - 3) < 1e-9)
        #expect(ReplyTime.worstCase(seconds: 600).capacityBits(worst: 600) == 0)
    }

    @Test("config: worst_case needs reply_after, reply_after needs worst_case, both named at their line",
          arguments: [
            ("gate:\n  reply_time: worst_case\n", "exp/experiment_config.yaml:4: gate.reply_time: worst_case needs gate.reply_after"),
            ("gate:\n  reply_after: 60\n", "exp/experiment_config.yaml:4: gate.reply_after: used only with gate.reply_time: worst_case"),
            ("gate:\n  reply_time: padded\n  reply_after: 60\n", "exp/experiment_config.yaml:5: gate.reply_after: used only with"),
            ("gate:\n  reply_time: never\n", "exp/experiment_config.yaml:4: gate.reply_time: 'never' is not allowed (allowed: padded, worst_case)"),
            ("gate:\n  reply_time: worst_case\n  reply_after: 0\n", "exp/experiment_config.yaml:5: gate.reply_after: must be a number from 1 to 604800"),
          ])
    func configRefused(yaml: String, message: String) throws {
        let refused = try ExperimentInputTests.refusal(yaml)
        #expect(refused?.hasPrefix(message) == true, "\(refused ?? "accepted")")
        let ok = try ExperimentConfig.parse("benchmark: local\ndataset: d\ngate:\n  reply_time: worst_case\n  reply_after: 90\n", file: "f")
        #expect(ok.gate.replyTime == .worstCase(seconds: 90))
        #expect(try ExperimentConfig.parse("benchmark: local\ndataset: d\n", file: "f").gate.replyTime == .padded)
    }

    /// An agent.py that solves nothing and sleeps `seconds` in every task: its held-out tasks
    /// decide how long the gate takes.
    static func sleeper(_ seconds: Double) -> String {
        """
        import time
        class HarnessAgent:
            def run(self, instruction, workdir):
                time.sleep(\(seconds))
        """
    }

    /// The gate's start row is written a few milliseconds after its clock starts; its outcome
    /// row after the padded wait, which a busy machine delays (0.46 s seen with two suites of
    /// VM and image tasks beside it; over 0.8 s in CI, when the binaries' hashing and the host
    /// inspection still ran after the wait). A quarter of the point, and at least 0.8 s, still
    /// tells one grid point from the next (a reply never comes before its point).
    static let early = 0.1
    static func late(_ point: Double) -> Double { max(0.8, point / 4) }
    /// worst_case's grid points are 7 s apart (9, 16): a reply up to 3 s late still names its
    /// point, on a machine three test processes keep busy (0.99 s late seen).
    static let lateOnWideGrid = 3.0

    /// Seconds from each gate's start row to its outcome row, and the notes written with them.
    static func gateDurations(_ exp: Experiment) throws -> (durations: [Double], notes: [String]) {
        let ledger = try Ledger(path: ExperimentLayout(root: exp.root).ledger, kinds: .experiment)
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        var starts: [Date] = [], durations: [Double] = [], notes: [String] = []
        for r in try ledger.records() {
            let t = try #require(f.date(from: r.time), "\(r.time)")
            if r.kind == .gateStarted { starts.append(t) }
            if r.kind == .gateAttempt, let s = starts.last { durations.append(t.timeIntervalSince(s)) }
            if r.kind == .note { notes.append(r.payload) }
        }
        return (durations, notes)
    }

    /// Seconds from each gate's start row to the instant its evidence row says the host was
    /// inspected.
    static func hostMeasured(_ exp: Experiment) throws -> [Double] {
        let ledger = try Ledger(path: ExperimentLayout(root: exp.root).ledger, kinds: .experiment)
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        let plain = ISO8601DateFormatter()
        var start: Date?, out: [Double] = []
        for r in try ledger.records() {
            if r.kind == .gateStarted { start = f.date(from: r.time) }
            if r.kind == .gateEvidence, let start, let host = try r.decode(GateEvidenceRecord.self).host {
                let t = try #require(f.date(from: host.measuredAt) ?? plain.date(from: host.measuredAt), "\(host.measuredAt)")
                out.append(t.timeIntervalSince(start))
            }
        }
        return out
    }

    @Test("worst_case: gates whose held-out tasks sleep 0 s and 1 s each all end reply_after seconds after they began; one that runs past it ends on the padded grid, and the ledger says so")
    func worstCaseHidesDuration() throws {
        try requireRoot()
        // reply_after 9: the third gate's 10 s of sleeping runs past it with 6 s to spare before
        // the next grid point (16 s), so a busy machine's slower sandboxes do not carry it there.
        let exp = try Experiment(config: ["reply_time": "worst_case\n  reply_after: 9"])
        for seconds in [0.0, 1.0, 5.0] {
            try exp.setAgent(Self.sleeper(seconds))
            let g = try exp.run("gate")
            #expect(g.status == 1 && g.stdout.contains("REJECTED"), "\(g.stdout)\n\(g.stderr)")
        }
        let (d, notes) = try Self.gateDurations(exp)
        try #require(d.count == 3, "\(d)")
        // 4 held-out tasks, 2 at a time: 0 s, 2 s and 10 s of sleeping (plus sandboxes).
        for x in d.prefix(2) { #expect(x > 9 - Self.early && x < 9 + Self.lateOnWideGrid, "\(d)") }
        #expect(d[2] > 16 - Self.early && d[2] < 16 + Self.lateOnWideGrid, "\(d)")
        #expect(notes.count == 1 && notes[0].contains("past gate.reply_after"), "\(notes)")
    }

    @Test("padded: gates whose held-out tasks sleep different times each end a power of two seconds after they began")
    func paddedQuantises() throws {
        try requireRoot()
        let exp = try Experiment()
        // 4 held-out tasks, 2 at a time: 0.9 s, 2 s and 12 s of sleeping. The last is far enough
        // from the first two that a busy machine's slower sandboxes (seconds more per gate) do
        // not put all three on one grid point.
        for seconds in [0.45, 1.0, 6.0] {
            try exp.setAgent(Self.sleeper(seconds))
            let g = try exp.run("gate")
            #expect(g.status == 1, "\(g.stdout)\n\(g.stderr)")
        }
        let (d, notes) = try Self.gateDurations(exp)
        try #require(d.count == 3, "\(d)")
        let grid = d.map { pow(2, log2(max($0, 1)).rounded()) }
        print("padded gates took \(d) s")
        for (x, g) in zip(d, grid) { #expect(x > g - Self.early && x < g + Self.late(g), "\(x) s is not at a power of two: \(d)") }
        // The outcome's host inspection is stamped with the reply's instant (to the second), not
        // its own, which says when the held-out tasks ended (about 12.5 s into the last gate).
        let measured = try Self.hostMeasured(exp)
        #expect(measured.count == 3, "\(measured)")
        for (m, g) in zip(measured, grid) { #expect(m > g - 1 - Self.early, "host measured \(m) s after the gate began, before its reply at \(g) s") }
        // Without the hold these take about 1.6 and 2.9 s and over 12 s (off the grid).
        #expect(Set(grid).count >= 2 && grid[2] >= 16, "\(d)")
        #expect(notes.isEmpty, "\(notes) \(d)")
    }
}
