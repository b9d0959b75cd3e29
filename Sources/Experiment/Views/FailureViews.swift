import ExperimentModel
import Foundation

// The failure records and clusters as the coding agent reads them: workspace/failures.json
// (everything), workspace/failures.md (the top unresolved clusters), and the `failures`
// request's answer. Rendered from the ledger like the other views; train tasks only.

extension Views {
    /// Unresolved clusters failures.md lists before pointing at the JSON.
    static let clustersShown = 10

    struct FailuresFile: Encodable {
        struct Summary: Encodable {
            var clusters: Int
            var unresolved: Int
            var records: Int
            var open: Int
            var fixed: Int
            var resolved: Int
        }
        /// Rolling batches, when on: where the loop is and how each batch ended.
        struct Batches: Encodable {
            struct Ended: Encodable {
                var batch: Int
                var ended_by: String
                var gate_attempts: [Int]
                var promoted: [String]
                var clusters_resolved: [String]
                var clusters_open: Int
                var clusters_closed: Int
                var suite_size: Int
                var revealed: Int
            }
            var current: Int
            var current_tasks: [String]
            var revealed: Int
            var gate_attempts_used: Int
            var gate_attempts_allowed: Int
            var ended: [Ended]
        }
        var summary: Summary
        var batches: Batches?
        var clusters: [FailureBook.Cluster]
        var records: [FailureBook.Record]
    }

    static func batches(_ s: ExperimentState) -> FailuresFile.Batches? {
        guard let last = s.batches.last else { return nil }
        return .init(current: last.revealed.batch, current_tasks: last.revealed.tasks.sorted(), revealed: s.visibleTrain.count,
                     gate_attempts_used: last.attempts.count, gate_attempts_allowed: last.revealed.iterations,
                     ended: s.batches.compactMap(\.ended).map {
                         .init(batch: $0.batch, ended_by: $0.endedBy, gate_attempts: $0.attempts, promoted: $0.promoted,
                               clusters_resolved: $0.clustersResolved, clusters_open: $0.clustersOpen, clusters_closed: $0.clustersClosed,
                               suite_size: $0.suiteSize, revealed: $0.revealed)
                     })
    }

    static func failuresFile(_ book: FailureBook, batches: FailuresFile.Batches?, cluster: String? = nil) -> FailuresFile {
        let clusters = cluster.map { id in book.clusters.filter { $0.id == id } } ?? book.clusters
        let records = cluster.map { id in book.records.filter { $0.cluster == id } } ?? book.records
        return FailuresFile(
            summary: .init(clusters: book.clusters.count, unresolved: book.clusters.filter(\.unresolved).count, records: book.records.count,
                           open: book.records.filter { $0.state == .open }.count, fixed: book.records.filter { $0.state == .fixed }.count,
                           resolved: book.records.filter { $0.state == .resolved }.count),
            batches: cluster == nil ? batches : nil, clusters: clusters, records: records)
    }

    /// failures.json: `{"summary": {...}, "batches": {...} (when on), "clusters": [ranked], "records": [by task]}`.
    public static func failuresJSON(_ s: ExperimentState) throws -> Data { try failuresJSON(s, FailureBook(s)) }
    static func failuresJSON(_ s: ExperimentState, _ book: FailureBook) throws -> Data { try encode(failuresFile(book, batches: batches(s))) }

    /// failures.md: what to work on, in a page.
    public static func failuresMarkdown(_ s: ExperimentState) -> String { failuresMarkdown(s, FailureBook(s)) }
    static func failuresMarkdown(_ s: ExperimentState, _ book: FailureBook) -> String {
        let f = failuresFile(book, batches: nil).summary
        var out = "# Failures on the train split\n\n"
        out += "Rendered by the supervisor from its ledger after every train run and gate (train tasks only; the held-out split never appears here). "
        out += "A cluster is one root cause: the same error class, failing check and message once numbers, ids, paths and quoted values are stripped. "
        out += "Work on the first unresolved cluster; `autoharness failures --cluster ID` shows all of its records, workspace/failures.json everything.\n\n"
        if let b = batches(s) {
            out += "Rolling batch \(b.current): \(b.revealed) train task(s) revealed so far, \(b.current_tasks.count) new in this batch; "
                + "gate attempts \(b.gate_attempts_used) of \(b.gate_attempts_allowed) before the next batch (an accepted gate ends it sooner). "
                + "At a batch's end, tasks of the clusters its accepted gate resolved join the regression suite.\n\n"
        }
        out += "\(f.unresolved) unresolved cluster(s) of \(f.clusters); \(f.records) record(s): \(f.open) open, \(f.fixed) fixed by an agent.py no gate has accepted yet, \(f.resolved) resolved by an accepted gate.\n"
        let unresolved = book.clusters.filter(\.unresolved)
        for c in unresolved.prefix(clustersShown) { out += "\n" + clusterMarkdown(c, records: nil) }
        if unresolved.count > clustersShown {
            out += "\n…and \(unresolved.count - clustersShown) more unresolved cluster(s) in workspace/failures.json.\n"
        }
        let resolved = book.clusters.filter { !$0.unresolved }
        if !resolved.isEmpty {
            out += "\n## Resolved\n\n"
            for c in resolved.prefix(clustersShown) {
                out += "- \(c.id): \(c.errorClass) in `\(c.check)`, \(c.tasks.count) task(s)\(resolvedBy(c, book))\n"
            }
            if resolved.count > clustersShown { out += "- …and \(resolved.count - clustersShown) more\n" }
        }
        return out
    }

    static func resolvedBy(_ c: FailureBook.Cluster, _ book: FailureBook) -> String {
        let gates = Set(book.records.filter { $0.cluster == c.id }.compactMap(\.resolvedBy)).sorted()
        return gates.isEmpty ? "" : ", resolved by gate attempt " + gates.map(String.init).joined(separator: ", ")
    }

    /// One cluster as text: its counts, signature, examples (or, given, every record) and the
    /// coding agent's proposals, marked as such.
    static func clusterMarkdown(_ c: FailureBook.Cluster, records: [FailureBook.Record]?) -> String {
        let rate = Int((c.resolutionRate * 100).rounded())
        var out = "## \(c.rank). \(c.id): \(c.errorClass) in `\(c.check)`\n\n"
        out += "\(c.tasks.count) task(s), \(c.totalFailures) failure(s) seen, \(c.open) open, resolved \(c.resolved)/\(c.records) (\(rate)%)\n"
        out += "signature: `\(c.signature)`\n"
        if let t = c.triage {
            var head = "triage (a model's reading of the train evidence): "
            head += [t.label.map { "label \(Self.code($0))" }, t.severity.map { "severity \($0.rawValue)" }].compactMap { $0 }.joined(separator: ", ")
            out += head + "\n"
            for h in t.hypotheses { out += "hypothesis: \(Self.code(h))\n" }
        }
        if !c.mergedWith.isEmpty {
            out += "one root cause with \(Self.idList(c.mergedWith)) (\(c.grouping ?? "merged")), ranked together\n"
        }
        if let records {
            for r in records {
                out += "- \(r.task) (\(r.state.rawValue), seen \(r.occurrences)×, first \(r.firstSeen.time), last \(r.lastSeen.time)"
                    + (r.resolvedBy.map { ", resolved by gate attempt \($0)" } ?? "") + (r.recurrences > 0 ? ", recurred \(r.recurrences)×" : "")
                    + "): \(r.excerpt)\n"
            }
        } else {
            for e in c.examples { out += "- \(e.task) (\(e.state.rawValue)): \(e.excerpt)\n" }
            if c.tasks.count > c.examples.count { out += "- …\(c.tasks.count - c.examples.count) more task(s)\n" }
        }
        for p in c.proposals {
            var what: [String] = []
            if let l = p.label { what.append("label \"\(l)\"") }
            if let m = p.mergeWith { what.append("same root cause as \(m)") }
            out += "proposed by the \(p.by) at \(p.time), not counted: \(what.joined(separator: "; "))\n"
        }
        return out
    }

    /// A model's text in Markdown as literal text (a code span: no link, image or heading of
    /// its making is rendered).
    static func code(_ text: String) -> String { "`" + text.replacingOccurrences(of: "`", with: "'") + "`" }

    /// Cluster ids, the first eight and how many more.
    static func idList(_ ids: [String]) -> String {
        ids.prefix(8).joined(separator: ", ") + (ids.count > 8 ? " and \(ids.count - 8) more" : "")
    }

    /// The `failures` request's answer: failures.md's page, or one cluster with every record.
    public static func failuresText(_ s: ExperimentState, cluster: String?, json: Bool) throws -> String {
        let book = FailureBook(s)
        if let id = cluster, book.cluster(id) == nil {
            throw ExperimentError(.usage, "no failure cluster \(printable(id)): `autoharness failures` lists them")
        }
        if json { return String(decoding: try encode(failuresFile(book, batches: batches(s), cluster: cluster)), as: UTF8.self) }
        guard let id = cluster, let c = book.cluster(id) else { return failuresMarkdown(s) }
        return clusterMarkdown(c, records: book.records.filter { $0.cluster == id })
    }
}
