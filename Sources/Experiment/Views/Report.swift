import ExperimentModel
import Foundation

/// `autoharness report`: one self-contained HTML file (inline SVG and CSS, no scripts, no
/// network) for the operator. It shows exact scores and held-out violations, so it is
/// written outside anything a sandbox mounts.
public enum Report {
    /// `agentSource` gives a snapshot's agent.py by sha256 (`ExperimentSupervisor.snapshotSource`),
    /// for the explorer's diffs; `learnings` is workspace/learnings.md as the coding agent left it
    /// (`ExperimentSupervisor.learningsText`).
    public static func html(_ s: ExperimentState, config: ExperimentConfig, title: String, agentSource: (String) -> String? = { _ in nil },
                            learnings: String? = nil) -> String {
        let explorer = Explorer(s, source: agentSource)
        var body = "<h1>\(esc(title))</h1>\n"
        let best = s.best.map { String(format: "%.4f", $0) } ?? "–"
        if let u = config.unverifiedRewards {
            body += "<p class=\"summary\"><b>rewards UNVERIFIED</b>: \(esc(u))</p>\n"
        }
        if let v = config.vendorAccounts.sharedNote {
            body += "<p class=\"summary\"><b>vendor account SHARED</b>: \(esc(v))</p>\n"
        }
        body += "<p class=\"summary\">benchmark <b>\(esc(config.benchmark))</b> · \(s.iterations.count - 1) accepted iteration(s) · "
        body += "best val_score <b>\(best)</b> · \(s.gateAttempts.count) gate attempt(s) · suite \(s.suite.count) task(s) · "
        body += "\(s.violations.count) violation record(s)</p>\n"
        if !s.agentSessions.isEmpty {
            let u = s.agentUsage
            body += "<p class=\"summary\">coding agent: \(s.agentSessions.count) session(s) · \(esc(u.summary))"
            if let c = u.costUSD, s.iterations.count > 1 {
                body += " · <b>\(AgentUsage.dollars(c / Double(s.iterations.count - 1)))</b> per accepted improvement"
            }
            body += " <small>(as the agent's CLI reported it)</small></p>\n"
        }
        if s.benchmarkCost.reported {
            let c = s.benchmarkCost
            body += "<p class=\"summary\">benchmark model spend: train <b>\(AgentUsage.dollars(c.train))</b> · held-out <b>\(AgentUsage.dollars(c.heldOut))</b>"
            body += " <small>(as its tools reported it; held-out as totals only)</small></p>\n"
        }

        // val_score per gate attempt, accepted vs rejected, best-so-far line.
        var points: [(x: Double, y: Double, cls: String, label: String)] = []
        var bestLine: [(Double, Double)] = [(0, s.baseline?.valScore ?? 0)]
        var running = s.baseline?.valScore ?? 0
        for a in s.gateAttempts {
            let x = Double(a.attempt)
            if let v = a.valScore {
                points.append((x, v, a.accepted ? "ok" : "no", "attempt \(a.attempt): \(String(format: "%.4f", v)) \(a.accepted ? "accepted" : "rejected")"))
                if a.accepted { running = max(running, v) }
            } else {
                points.append((x, 0, "none", "attempt \(a.attempt): \(a.reason)"))
            }
            bestLine.append((x, running))
        }
        body += section("val_score per gate attempt", "green: accepted, red: rejected, grey: not scored (suite below threshold or interrupted); the line is the best accepted so far",
                        chart(xMax: Double(max(1, s.gateAttempts.count)), yMax: 1, yLabel: "val_score", xLabel: "gate attempt",
                              lines: [("best", bestLine)], points: points))

        // Suite size at each attempt (after promotion for accepted ones).
        let suiteLine = [(0.0, 0.0)] + s.gateAttempts.map { (Double($0.attempt), Double($0.suiteTotal + ($0.accepted ? $0.promoted.count : 0))) }
        let suiteMax = Self.countAxis(suiteLine.map(\.1).max() ?? 1)
        body += section("regression suite size", "tasks in the suite after each gate attempt",
                        chart(xMax: Double(max(1, s.gateAttempts.count)), yMax: suiteMax, yLabel: "tasks", xLabel: "gate attempt",
                              lines: [("suite", suiteLine)], points: []))

        // Rolling batches: the suite and the clusters at each batch's end, and how it ended.
        let ended = s.batches.compactMap(\.ended)
        if !ended.isEmpty {
            let at = { (v: (BatchEndedRecord) -> Int) in [(0.0, 0.0)] + ended.map { (Double($0.batch), Double(v($0))) } }
            let lines = [("suite size", at(\.suiteSize)), ("clusters open", at(\.clustersOpen)), ("clusters resolved", at(\.clustersClosed))]
            let top = Self.countAxis(Double(ended.map { max($0.suiteSize, $0.clustersOpen, $0.clustersClosed) }.max() ?? 1))
            body += section("rolling batches", "at the end of each batch (loop.batch_size \(config.loop.batchSize)): tasks in the regression suite, failure clusters open and resolved",
                            chart(xMax: Double(max(1, ended.count)), yMax: top, yLabel: "count", xLabel: "batch", lines: lines, points: [], legend: true))
            var brows = "<tr><th>batch</th><th>revealed</th><th>ended by</th><th>gate attempts</th><th>promoted</th><th>clusters resolved</th><th>open / resolved</th><th>suite</th></tr>\n"
            for e in ended {
                brows += "<tr><td>\(e.batch)</td><td>\(e.revealed)</td><td>\(esc(e.endedBy))</td><td>\(esc(e.attempts.map(String.init).joined(separator: ", ")))</td>"
                brows += "<td>\(esc(e.promoted.joined(separator: ", ")))</td><td>\(esc(e.clustersResolved.joined(separator: ", ")))</td>"
                brows += "<td>\(e.clustersOpen) / \(e.clustersClosed)</td><td>\(e.suiteSize)</td></tr>\n"
            }
            body += "<table>\n\(brows)</table>\n"
        }

        // Train pass rate per train run.
        let trainLine = s.trainRuns.enumerated().map { i, r -> (Double, Double) in
            let n = max(1, r.results.count)
            return (Double(i + 1), Double(r.results.values.filter { $0 >= 0.5 }.count) / Double(n))
        }
        body += section("train pass rate", "share of the train tasks run that passed, per `benchmark` run",
                        chart(xMax: Double(max(1, trainLine.count)), yMax: 1, yLabel: "pass rate", xLabel: "train run",
                              lines: [("train", trainLine)], points: trainLine.map { ($0.0, $0.1, "ok", String(format: "%.0f%%", $0.1 * 100)) }))

        // Violations by actor and kind: one bar each, largest first, its count at its end.
        var totals: [String: Int] = [:]
        for v in s.violations {
            totals["\(v.record.actor)\(v.record.heldOut == true ? " (held-out)" : ""): \(v.record.kind)", default: 0] += v.record.occurrences
        }
        let bars = totals.sorted { $0.value != $1.value ? $0.value > $1.value : $0.key < $1.key }.map { (label: $0.key, count: $0.value) }
        body += section("violations by kind", "how many times each refused call, denied connection or limit happened, by who made it; largest first",
                        bars.isEmpty ? "<p class=\"note\">none recorded</p>" : barChart(bars))

        // Tables.
        var diffOf: [Int: LineDiff] = [:]
        for e in explorer.entries where e.outcome == .accepted {
            if let it = s.gateAttempts.first(where: { $0.attempt == e.attempt })?.iteration, let d = e.diff { diffOf[it] = d }
        }
        var rows = "<tr><th>iteration</th><th>val_score</th><th>commit</th><th>suite</th><th>agent.py lines vs the previous</th><th>time</th><th>description (gate -m)</th></tr>\n"
        for it in s.iterations {
            rows += "<tr><td>\(it.iteration)</td><td>\(String(format: "%.4f", it.valScore))</td><td><code>\(esc(it.commit))</code></td>"
            rows += "<td>\(it.evalsPassed)/\(it.evalsTotal)</td><td>\(diffOf[it.iteration].map { "+\($0.added) −\($0.removed)" } ?? "–")</td><td>\(esc(it.timestamp))</td>"
            rows += "<td>\(esc(it.description ?? ""))</td></tr>\n"
        }
        body += "<h2>Iterations</h2>\n<table>\n\(rows)</table>\n"
        if !s.suiteReviews.isEmpty || !s.pendingSuite.isEmpty {
            body += "<h2>Suite review</h2>\n<p class=\"note\">the operator's decisions (`autoharness suite`); waiting: \(s.pendingSuite.isEmpty ? "none" : esc(s.pendingSuite.joined(separator: ", ")))</p>\n<table>\n"
            for r in s.suiteReviews {
                body += "<tr><td>\(esc(r.time))</td><td>\(esc(r.record.actor))</td><td>\(esc(r.record.action))</td><td>\(esc(r.record.task))</td><td>\(esc(r.record.reason))</td></tr>\n"
            }
            body += "</table>\n"
        }
        if let last = s.triageRuns.last {
            let triaged = FailureBook(s).clusters.filter { $0.triage != nil }
            body += "<h2>Triage</h2>\n<p class=\"note\">the triage command's reading of the train failure records (`triage:`), \(s.triageRuns.count) run(s); "
                + "the latest (\(esc(last.record.trigger)), \(esc(last.record.exit))): \(last.record.entries.count) of \(last.record.records) record(s) kept, \(last.record.refused) refused; "
                + "clusters with the same label rank as one</p>\n<table>\n<tr><th>rank</th><th>cluster</th><th>label</th><th>severity</th><th>ranked with</th><th>open</th><th>hypotheses</th></tr>\n"
            for c in triaged.prefix(40) {
                let t = c.triage!
                body += "<tr><td>\(c.rank)</td><td><code>\(esc(c.id))</code></td><td>\(esc(t.label ?? ""))</td><td>\(esc(t.severity?.rawValue ?? ""))</td>"
                body += "<td>\(esc(Views.idList(c.mergedWith)))</td><td>\(c.open)</td><td>\(esc(t.hypotheses.joined(separator: " · ")))</td></tr>\n"
            }
            body += "</table>\n"
            for p in last.record.problems { body += "<p class=\"note\">refused: \(esc(p))</p>\n" }
        }
        if !s.clusterReviews.isEmpty {
            body += "<h2>Cluster review</h2>\n<p class=\"note\">the operator's decisions about which failure clusters are one root cause (`autoharness failures`)</p>\n<table>\n"
            for r in s.clusterReviews {
                let what = r.record.label.map { "label “\($0)”" } ?? r.record.with.map { "merge with \($0)" } ?? r.record.action.rawValue
                body += "<tr><td>\(esc(r.time))</td><td>\(esc(r.record.actor))</td><td><code>\(esc(r.record.cluster))</code></td><td>\(esc(what))</td><td>\(esc(r.record.reason))</td></tr>\n"
            }
            body += "</table>\n"
        }
        if !s.needsHuman.isEmpty {
            body += "<h2>Needs from a human</h2>\n<p class=\"note\">what the coding agent asked for (`autoharness needs-human`), oldest first</p>\n<table>\n"
            for n in s.needsHuman { body += "<tr><td>\(esc(n.time))</td><td>\(esc(n.record.actor))</td><td>\(esc(n.record.text))</td></tr>\n" }
            body += "</table>\n"
        }
        if let learnings, !learnings.isEmpty {
            body += "<h2>Learnings</h2>\n<p class=\"note\">workspace/learnings.md, the coding agent's notes as it left them (shown as text)</p>\n"
            body += "<pre class=\"learn\">\(esc(learnings))</pre>\n"
        }
        body += explorerSection(explorer)
        body += agentCodeSection(s)
        var vrows = "<tr><th>time</th><th>actor</th><th>kind</th><th>detail</th></tr>\n"
        for v in s.violations {
            vrows += "<tr><td>\(esc(v.time))</td><td>\(esc(v.record.actor))\(v.record.heldOut == true ? " (held-out)" : "")</td>"
            vrows += "<td>\(esc(v.record.kind))</td><td>\(readable(v.record.detail))</td></tr>\n"
        }
        body += "<h2>Violations</h2>\n<table>\n\(vrows)</table>\n"
        return """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8"/>
            <meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'; img-src 'none'"/>
            <title>\(esc(title))</title>
            <style>
            body{font:14px/1.4 system-ui,sans-serif;margin:2em auto;max-width:980px;color:#222}
            h1{font-size:1.5em}h2{font-size:1.15em;margin-top:1.6em}.summary{color:#444}
            table{border-collapse:collapse;width:100%;font-size:12px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
            th{background:#f3f3f3}code{font-size:12px}.note{color:#666;font-size:12px;margin:0}
            svg{background:#fafafa;border:1px solid #ddd}.axis{stroke:#888}.grid{stroke:#e4e4e4}
            .ok{fill:#2a9d4b}.no{fill:#d33}.none{fill:#999}text{font-size:11px;fill:#444}
            .esc{color:#b00;background:#fde8e8;border-radius:2px;padding:0 2px;font-size:11px}.bar{fill:#1f6fb4}
            details.att{border:1px solid #ddd;border-left:5px solid #999;margin:4px 0;padding:2px 8px}
            details.att.ok{border-left-color:#2a9d4b}details.att.no{border-left-color:#d33}
            summary{cursor:pointer;font-size:13px}.tag{font-size:11px;color:#555}
            pre.learn{font:12px/1.35 ui-monospace,monospace;background:#fcfcfc;white-space:pre-wrap;border:1px solid #ddd;padding:6px}
            pre.diff{font:12px/1.35 ui-monospace,monospace;background:#fcfcfc;overflow-x:auto;margin:6px 0;padding:4px 0}
            pre.diff>span{display:block;white-space:pre;padding:0 6px}.d-a{background:#e6ffec}.d-r{background:#ffebe9}
            .d-h{color:#6f42c1;background:#f5f0ff}.ln{color:#999;display:inline-block;min-width:3.5em}
            .py-k{color:#a626a4;font-weight:600}.py-s{color:#50a14f}.py-c{color:#a0a1a7;font-style:italic}.py-n{color:#986801}.py-f{color:#4078f2}
            </style></head><body>
            \(body)</body></html>

            """
    }

    /// Every task whose verifier ran agent code (`AgentCodeRuns`), per run: the baseline, each
    /// train run, each gate attempt (its held-out tasks marked).
    static func agentCodeSection(_ s: ExperimentState) -> String {
        let test = Set(s.split?.test ?? [])
        var rows = ""
        func add(_ when: String, _ code: [String: [String]]?) {
            for (id, lines) in (code ?? [:]).sorted(by: { $0.key < $1.key }) {
                rows += "<tr><td>\(esc(when))</td><td>\(esc(id))\(test.contains(id) ? " (held-out)" : "")</td>"
                rows += "<td>\(lines.map { readable($0) }.joined(separator: "<br/>"))</td></tr>\n"
            }
        }
        add("baseline", s.baseline?.agentCode)
        for (i, r) in s.trainRuns.enumerated() { add("train run \(i + 1)", r.agentCode) }
        for a in s.gateAttempts { add("gate attempt \(a.attempt)", a.agentCode) }
        let note = "tasks whose verifier executed a file from /app, or opened a code file there other than through git: code agent.py "
            + "wrote ran before the verdict, and a test that trusts what it returns can be fooled. A reason to look, not a verdict: "
            + "the rewards stand (docs/benchmarks.md, verifier integrity)"
        return "<h2>Verifiers that ran agent code</h2>\n<p class=\"note\">\(note)</p>\n"
            + (rows.isEmpty ? "<p class=\"note\">none</p>\n" : "<table>\n<tr><th>run</th><th>task</th><th>what ran</th></tr>\n\(rows)</table>\n")
    }

    /// Diff lines shown per attempt; the rest is counted.
    static let explorerLines = 400

    /// Every gate attempt as a collapsed block: how it ended, its numbers, the clusters its
    /// train phases resolved and broke, and its agent.py diff against the last accepted one.
    static func explorerSection(_ explorer: Explorer) -> String {
        var out = "<h2>Explorer</h2>\n<p class=\"note\">every gate attempt, accepted or not, with its agent.py against the last accepted version "
            + "(from the supervisor's snapshots) and the failure clusters its train phases resolved or broke; click one to open it</p>\n"
        if explorer.entries.isEmpty { return out + "<p class=\"note\">no gate attempt yet</p>\n" }
        for e in explorer.entries {
            let cls = e.outcome == .accepted ? "ok" : e.outcome == .interrupted ? "none" : "no"
            var summary = "<b>#\(e.attempt)</b> " + (e.message.map { "“\(esc($0))” · " } ?? "")
                + esc(e.outcome.rawValue.replacingOccurrences(of: "_", with: " "))
            if e.outcome != .accepted && e.outcome != .interrupted { summary += ": \(esc(e.reason))" }
            if let v = e.valScore { summary += " · val_score \(String(format: "%.4f", v))" }
            if let b = e.bestBefore { summary += " (best before \(String(format: "%.4f", b)))" }
            if let n = e.heldOutTimedOut {
                summary += " · \(n) held-out timeout(s); over the tasks that finished \(e.valScoreFinished.map { String(format: "%.4f", $0) } ?? "–") (timeout_policy: infra)"
            }
            if let k = e.trials { summary += " · \(k) trials per held-out task" }
            if let t = e.pairedTest {
                summary += " · paired test: mean difference \(String(format: "%+.4f", t.meanDifference)), p \(String(format: "%.4f", t.pValue)) "
                    + "against alpha \(t.alpha) (\(t.accepted ? "better" : "not shown better"))"
            }
            if let r = e.infraRetries { summary += " · model vendor: \(esc(r.summary))" }
            if e.outcome != .interrupted { summary += " · suite \(e.suitePassed)/\(e.suiteTotal)" }
            if !e.promoted.isEmpty { summary += " · \(e.promoted.count) promoted" }
            if let b = e.batch { summary += " · batch \(b)" }
            summary += e.diff.map { " · <span class=\"tag\">+\($0.added) −\($0.removed) vs iteration \(e.baseIteration)</span>" } ?? ""
            if let r = e.ranking { summary += " · best of \(r.ranked.count) candidates on train" }
            let named = { (ids: [String]) in ids.map { id in explorer.triage[id]?.label.map { "\(id) “\($0)”" } ?? id }.joined(separator: ", ") }
            if !e.resolved.isEmpty { summary += " · resolved \(esc(named(e.resolved)))" }
            if !e.broken.isEmpty { summary += " · broke \(esc(named(e.broken)))" }
            out += "<details class=\"att \(cls)\" id=\"attempt-\(e.attempt)\"><summary>\(summary)</summary>\n"
            out += "<p class=\"note\">agent.py sha256 <code>\(esc(String(e.agentSHA256.prefix(16))))</code>"
            if !e.promoted.isEmpty { out += "; promoted: \(esc(e.promoted.joined(separator: ", ")))" }
            out += "</p>\n"
            for id in e.resolved + e.broken {
                if let h = explorer.triage[id]?.hypothesis { out += "<p class=\"note\"><code>\(esc(id))</code> (triage): \(esc(h))</p>\n" }
            }
            if let r = e.ranking { out += candidatesTable(r, diffs: e.exploredDiffs, base: e.baseIteration) }
            out += diffHTML(e.diff, base: e.baseIteration) + "</details>\n"
        }
        return out
    }

    /// A gate's ranking of its candidates (`loop.candidates`): train numbers, and each explored
    /// one's agent.py against the same base, folded.
    static func candidatesTable(_ r: CandidatesRankedRecord, diffs: [String: LineDiff], base: Int) -> String {
        var out = "<p class=\"note\">\(r.ranked.count) candidates ran on the train split and were ranked there; only the first met the held-out split</p>\n<table>\n"
        out += "<tr><th>rank</th><th>candidate</th><th>agent.py</th><th>train</th><th>suite</th><th></th><th>message (candidate -m)</th></tr>\n"
        for (i, c) in r.ranked.enumerated() {
            out += "<tr><td>\(i + 1)</td><td>\(c.number)</td><td><code>\(esc(String(c.agentSHA256.prefix(12))))</code></td>"
            out += "<td>\(c.trainPassed)/\(c.trainTotal) (\(String(format: "%.3f", c.trainScore)))</td><td>\(c.suitePassed)/\(c.suiteTotal)\(c.meetsThreshold ? "" : " below threshold")</td>"
            out += "<td>\(i == 0 ? "gated" : "explored")</td><td>\(esc(c.message ?? ""))</td></tr>\n"
        }
        out += "</table>\n"
        for c in r.explored {
            let d = diffs[c.agentSHA256]
            out += "<details class=\"att none\"><summary>explored candidate \(c.number)\(d.map { " · <span class=\"tag\">+\($0.added) −\($0.removed) vs iteration \(base)</span>" } ?? "")</summary>\n"
            out += diffHTML(d, base: base) + "</details>\n"
        }
        return out
    }

    /// An agent.py's diff against iteration `base`, as the explorer shows it.
    static func diffHTML(_ diff: LineDiff?, base: Int) -> String {
        guard let d = diff else { return "<p class=\"note\">agent.py snapshot not available</p>\n" }
        if d.tooLarge {
            return "<p class=\"note\">\(d.removed) line(s) replaced by \(d.added) against iteration \(base): "
                + "over \(LineDiff.maxChanged) changed lines, not shown here (git diff shows them)</p>\n"
        }
        guard !d.hunks.isEmpty else { return "<p class=\"note\">the same agent.py as iteration \(base)</p>\n" }
        var out = "<pre class=\"diff\">"
        var shown = 0, total = 0
        for h in d.hunks {
            total += h.lines.count + 1
            guard shown < explorerLines else { continue }
            out += "<span class=\"d-h\">\(esc(h.header))</span>"
            shown += 1
            for l in h.lines {
                guard shown < explorerLines else { break }
                let (c, mark, n) = l.kind == .added ? ("d-a", "+", l.new) : l.kind == .removed ? ("d-r", "-", l.old) : ("d-s", " ", l.new)
                out += "<span class=\"\(c)\"><span class=\"ln\">\(n.map(String.init) ?? "")</span>\(mark) \(PythonHighlight.html(l.text))</span>"
                shown += 1
            }
        }
        out += "</pre>\n"
        if total > shown { out += "<p class=\"note\">…\(total - shown) more diff line(s) not shown</p>\n" }
        return out
    }

    /// A violation's detail for a reader: escaped control bytes (`\x0a`, which is how the
    /// ledger keeps them so no detail can forge a line) are shown as visible markers — a newline
    /// as ↵ and a line break, a tab as ⇥, any other as its code — never as raw bytes.
    static func readable(_ detail: String) -> String {
        var out = ""
        var rest = Substring(detail)
        while let r = rest.range(of: "\\x") {
            out += esc(String(rest[..<r.lowerBound]))
            let hex = rest[r.upperBound...].prefix(2)
            guard hex.count == 2, let byte = UInt8(hex, radix: 16) else {
                out += "\\x"
                rest = rest[r.upperBound...]
                continue
            }
            switch byte {
            case 0x0A: out += "<span class=\"esc\" title=\"newline\">↵</span><br/>"
            case 0x09: out += "<span class=\"esc\" title=\"tab\">⇥</span>"
            default: out += "<span class=\"esc\" title=\"control byte\">\\x\(hex)</span>"
            }
            rest = rest[rest.index(r.upperBound, offsetBy: 2)...]
        }
        return out + esc(String(rest))
    }

    /// HTML-escaped text. Per Unicode scalar, never per Character: a grapheme cluster can hold
    /// a markup byte behind another scalar (U+0600 followed by `<` is one Character, which
    /// compares equal to neither), and the browser parses scalars.
    static func esc(_ s: String) -> String {
        var out = String.UnicodeScalarView()
        for u in s.unicodeScalars {
            switch u {
            case "<": out.append(contentsOf: "&lt;".unicodeScalars)
            case ">": out.append(contentsOf: "&gt;".unicodeScalars)
            case "&": out.append(contentsOf: "&amp;".unicodeScalars)
            case "\"": out.append(contentsOf: "&quot;".unicodeScalars)
            case "'": out.append(contentsOf: "&#39;".unicodeScalars)
            default: out.append(u)
            }
        }
        return String(out)
    }
}
