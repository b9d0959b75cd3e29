import Benchmark
@testable import Experiment
@testable import Evidence
@testable import ExperimentModel
import Foundation
import Testing

// The report's explorer: the line diff, the Python colouring, and each attempt's base and
// cluster changes. (The rendered report in headless Chromium: ReportTests.explorerInChromium.)

@Suite("Report explorer")
struct ExplorerTests {
    /// The new text, rebuilt from the old one and the diff's hunks alone.
    static func apply(_ d: LineDiff, to old: String) -> [String] {
        let a = LineDiff.lines(old)
        var out: [String] = []
        var i = 0
        for h in d.hunks {
            let first = h.lines.compactMap(\.old).first.map { $0 - 1 } ?? i
            while i < first { out.append(a[i]); i += 1 }
            for l in h.lines {
                switch l.kind {
                case .same: out.append(a[i]); i += 1
                case .removed: i += 1
                case .added: out.append(l.text)
                }
            }
        }
        while i < a.count { out.append(a[i]); i += 1 }
        return out
    }

    @Test("the diff rebuilds the new text from the old one, counts what changed, and keeps three lines of context per hunk")
    func diff() {
        var rng = SplitMix64(seed: 9)
        for _ in 0..<200 {
            let n = Int(rng.next() % 30), m = Int(rng.next() % 30)
            let old = (0..<n).map { _ in "l\(rng.next() % 6)" }.joined(separator: "\n")
            let new = (0..<m).map { _ in "l\(rng.next() % 6)" }.joined(separator: "\n")
            let d = LineDiff(old: old, new: new)
            #expect(Self.apply(d, to: old) == LineDiff.lines(new), "\(old) -> \(new)")
            let lines = d.hunks.flatMap(\.lines)
            #expect(d.added == lines.filter { $0.kind == .added }.count && d.removed == lines.filter { $0.kind == .removed }.count)
        }
        let old = (1...20).map { "line \($0)" }.joined(separator: "\n") + "\n"
        var changed = LineDiff.lines(old)
        changed[9] = "LINE 10"
        let d = LineDiff(old: old, new: changed.joined(separator: "\n") + "\n")
        #expect(d.hunks.count == 1 && d.hunks[0].header == "@@ -7,7 +7,7 @@" && d.added == 1 && d.removed == 1)
        #expect(d.hunks[0].lines.map(\.kind) == [.same, .same, .same, .removed, .added, .same, .same, .same])
        #expect(LineDiff(old: old, new: old).hunks.isEmpty)

        // A large file with one edit: only the region between the common prefix and suffix is
        // diffed; a rewrite over the cap is counted, not diffed.
        let big = (1...200_000).map { "x = \($0)" }
        var edited = big
        edited[123_456] = "x = changed"
        let one = LineDiff(old: big.joined(separator: "\n"), new: edited.joined(separator: "\n"))
        #expect(!one.tooLarge && one.added == 1 && one.removed == 1 && one.hunks.count == 1 && one.hunks[0].header == "@@ -123454,7 +123454,7 @@")
        let rewrite = LineDiff(old: big.prefix(8_000).joined(separator: "\n"), new: big.prefix(8_000).map { $0 + "!" }.joined(separator: "\n"))
        #expect(rewrite.tooLarge && rewrite.hunks.isEmpty && rewrite.added == 8_000 && rewrite.removed == 8_000)
    }

    @Test("Python lines are coloured and every character of the source is text, never markup")
    func highlight() {
        #expect(PythonHighlight.html("def run(self, x):  # go") ==
                "<span class=\"py-k\">def</span> <span class=\"py-f\">run</span>(<span class=\"py-k\">self</span>, x):  <span class=\"py-c\"># go</span>")
        #expect(PythonHighlight.html("s = 'a\\'<b>' + \"</span>\" if 3.5e2 else None") ==
                "s = <span class=\"py-s\">&#39;a\\&#39;&lt;b&gt;&#39;</span> + <span class=\"py-s\">&quot;&lt;/span&gt;&quot;</span> <span class=\"py-k\">if</span> "
                + "<span class=\"py-n\">3.5e2</span> <span class=\"py-k\">else</span> <span class=\"py-k\">None</span>")
        let hostile = "<script>&\"x\"</script><!-- 'unterminated"
        let out = PythonHighlight.html(hostile)
        #expect(!out.contains("<script") && !out.contains("<!--") && out.contains("&lt;script&gt;&amp;"))
        // Strip the spans the highlighter made: what remains is the escaped source.
        let text = out.replacingOccurrences(of: "<span class=\"py-[a-z]\">", with: "", options: .regularExpression)
            .replacingOccurrences(of: "</span>", with: "")
        #expect(text == Report.esc(hostile))
        // A prepended scalar makes `<` part of one Character with it: escaped all the same.
        let prepended = "# \u{0600}<script \u{0600}>x\u{0600}</script>"
        let highlighted = PythonHighlight.html(prepended).replacingOccurrences(of: "<span class=\"py-c\">", with: "").replacingOccurrences(of: "</span>", with: "")
        #expect(!highlighted.unicodeScalars.contains { $0 == "<" || $0 == ">" }, "\(highlighted)")
        #expect(!Report.esc(prepended).unicodeScalars.contains { $0 == "<" || $0 == ">" })
        #expect(Report.esc("it's") == "it&#39;s")
    }

    @Test("each attempt is compared with the last accepted agent.py before it, and shows the clusters its train phases resolved and broke")
    func entries() throws {
        let x = FailureEvidence(check: "x", errorClass: "E", excerpt: "x failed")
        let y = FailureEvidence(check: "y", errorClass: "E", excerpt: "y failed")
        var s = try FailureBookTests.state([
            FailureBookTests.run(1, "v0", ["a": [x], "b": [x]]),
            // attempt 1 (v1) accepted: a and b pass -> x resolved
            .accepted(attempt: 1, agentSHA256: "v1"),
            FailureBookTests.run(3, "v1", source: "gate", attempt: 1, ["a": [], "b": []]),
            // attempt 2 (v2) rejected: a fails x again and b fails y
            FailureBookTests.run(4, "v2", source: "gate", attempt: 2, ["a": [x], "b": [y]]),
        ])
        func attempt(_ n: Int, _ sha: String, accepted: Bool, iteration: Int?) -> GateAttemptRecord {
            var r = GateAttemptRecord(attempt: n, agentSHA256: sha, accepted: accepted, reason: accepted ? "accepted" : "suite", suitePassed: 0,
                                      suiteTotal: 0, valScore: nil, bestBefore: nil, promoted: [], commit: nil, iteration: iteration)
            r.outcome = accepted ? .accepted : .suiteBelowThreshold
            return r
        }
        s.gateAttempts = [attempt(1, "v1", accepted: true, iteration: 1), attempt(2, "v2", accepted: false, iteration: nil)]
        s.iterations = [IterationRecord(iteration: 0, valScore: 0, commit: "baseline", evalsPassed: 0, evalsTotal: 0, timestamp: "t", agentSHA256: "v0")]
        let sources = ["v0": "a = 1\n", "v1": "a = 2\n", "v2": "a = 2\nb = 3\n"]
        let e = Explorer(s, source: { sources[$0] }).entries
        let cx = FailureSignature.clusterID(FailureSignature.of(x)), cy = FailureSignature.clusterID(FailureSignature.of(y))
        #expect(e.map(\.baseIteration) == [0, 1])
        #expect(e[0].diff.map { ($0.added, $0.removed) }! == (1, 1) && e[1].diff.map { ($0.added, $0.removed) }! == (1, 0))
        #expect(e[0].resolved == [cx] && e[0].broken == [])
        #expect(e[1].resolved == [] && e[1].broken == [cx, cy].sorted())
        #expect(Explorer(s, source: { _ in nil }).entries.allSatisfy { $0.diff == nil }, "a missing snapshot shows no diff")
    }
}
