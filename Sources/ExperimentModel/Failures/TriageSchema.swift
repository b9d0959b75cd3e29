import Benchmark
import Foundation

// What a triage command is given and what the supervisor takes from it (`triage:`).
//
// In: /work/in/records.json, the train split's failure records that are not resolved (as
// failures.md has them, with their ids), and the train traces at /work/run. Out:
// /work/out/triage.json, one entry per record it read:
//
//   {"triage": [{"record": "c1a2b3c4/add-3", "hypothesis": "...", "label": "...", "severity": "high"}]}
//
// Every entry is checked before anything of it is recorded: a known record id of this run's
// input (once), a hypothesis (one printable line, at most 500 characters kept), a label (at
// most 80, optional), a severity of low|medium|high|critical (optional), and no other key.
// An entry that fails is refused whole and counted, with its reason; the others are kept.

public enum TriageSchema {
    public static let maxOutputBytes = 4 << 20
    public static let maxLabel = 80
    public static let maxRecords = ExperimentConfig.Triage.recordsCap
    static let keys: Set<String> = ["record", "hypothesis", "label", "severity"]

    /// The input document: the records not resolved (open first, then by cluster rank) and
    /// not in `skip`, at most `limit`, with what the command must write.
    package static func input(_ book: FailureBook, skip: Set<String> = [], limit: Int = maxRecords) -> (bytes: [UInt8], known: [String: (task: String, cluster: String)]) {
        let rank = Dictionary(uniqueKeysWithValues: book.clusters.map { ($0.id, $0.rank) })
        let signature = Dictionary(uniqueKeysWithValues: book.clusters.map { ($0.id, $0.signature) })
        let chosen = book.records.filter { $0.state != .resolved && !skip.contains(TriageEntry.key(cluster: $0.cluster, task: $0.task)) }
            .sorted { ($0.state == .open ? 0 : 1, rank[$0.cluster] ?? 0, $0.task) < ($1.state == .open ? 0 : 1, rank[$1.cluster] ?? 0, $1.task) }
            .prefix(min(limit, maxRecords))
        var known: [String: (task: String, cluster: String)] = [:]
        let records: [[String: Any]] = chosen.map { r in
            let id = TriageEntry.key(cluster: r.cluster, task: r.task)
            known[id] = (r.task, r.cluster)
            return ["id": id, "task": r.task, "cluster": r.cluster, "check": r.check, "error_class": r.errorClass, "excerpt": r.excerpt,
                    "state": r.state.rawValue, "occurrences": r.occurrences, "signature": signature[r.cluster] ?? "",
                    "trace": "/work/run/" + TraceName.encode(r.task)]
        }
        let doc: [String: Any] = [
            "records": records,
            "write": "/work/out/triage.json",
            "format": "{\"triage\": [{\"record\": ID, \"hypothesis\": TEXT, \"label\": TEXT, \"severity\": \"low|medium|high|critical\"}]}",
            "note": "one entry per record id above; a hypothesis is the root cause in one line (at most 500 characters kept); records with the same root cause get the same label (at most \(maxLabel) characters), which merges their clusters",
        ]
        let data = (try? JSONSerialization.data(withJSONObject: doc, options: [.sortedKeys])) ?? Data("{}".utf8)
        return (Array(data), known)
    }

    /// The entries that pass, how many were refused, and the first refusals' reasons.
    package static func check(_ bytes: [UInt8], known: [String: (task: String, cluster: String)]) -> (entries: [TriageEntry], refused: Int, problems: [String]) {
        var problems: [String] = []
        func fail(_ why: String) -> (entries: [TriageEntry], refused: Int, problems: [String]) { ([], 1, [why]) }
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) else { return fail("triage.json is not JSON") }
        let list: [Any]
        if let o = object as? [String: Any], let l = o["triage"] as? [Any], o.count == 1 {
            list = l
        } else if let l = object as? [Any] {
            list = l
        } else {
            return fail("triage.json is neither {\"triage\": [...]} nor a list of entries")
        }
        var entries: [TriageEntry] = []
        var seen: Set<String> = []
        var refused = 0
        for (i, item) in list.enumerated() {
            func refuse(_ why: String) {
                refused += 1
                if problems.count < 10 { problems.append("entry \(i + 1): \(why)") }
            }
            guard let e = item as? [String: Any] else { refuse("not an object"); continue }
            if let extra = e.keys.sorted().first(where: { !keys.contains($0) }) { refuse("unknown key \(printable(extra, limit: 40))"); continue }
            guard let id = e["record"] as? String, let record = known[id] else {
                refuse("record \(printable((e["record"] as? String) ?? "(not a string)", limit: 80)) is not a record of this triage's input"); continue
            }
            guard seen.insert(id).inserted else { refuse("record \(printable(id, limit: 80)) a second time"); continue }
            guard let h = e["hypothesis"] as? String, let hypothesis = text(h, limit: maxNoteLength) else {
                refuse("no hypothesis (a non-empty string)"); continue
            }
            var label: String?
            if let l = e["label"], !(l is NSNull) {
                guard let s = l as? String, let kept = text(s, limit: maxLabel) else { refuse("label is not a non-empty string"); continue }
                guard s.count <= maxLabel else { refuse("label is longer than \(maxLabel) characters"); continue }
                label = kept
            }
            var severity: TriageSeverity?
            if let v = e["severity"], !(v is NSNull) {
                guard let s = v as? String, let x = TriageSeverity(rawValue: s) else {
                    refuse("severity must be one of \(TriageSeverity.allCases.map(\.rawValue).joined(separator: ", "))"); continue
                }
                severity = x
            }
            entries.append(TriageEntry(task: record.task, cluster: record.cluster, hypothesis: hypothesis, label: label, severity: severity))
        }
        return (entries, refused, problems)
    }

    /// One printable line (`noteLine`: control characters become spaces, format characters
    /// are dropped, runs of spaces collapse), at most `limit` characters; nil when empty.
    package static func text(_ s: String, limit: Int) -> String? {
        noteLine(s).map { String($0.prefix(limit)) }
    }

    /// Labels merge clusters when they match this way (case and spacing aside).
    static func mergeKey(_ label: String) -> String { label.lowercased() }
}
