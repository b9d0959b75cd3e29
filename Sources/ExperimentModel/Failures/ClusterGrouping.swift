// Which failure clusters are one root cause (ranked together, each naming the others): the
// triage's labels and the operator's decisions (`autoharness failures --cluster ID --label |
// --merge | --split`, each a `cluster_review` row). An operator's latest decision about a
// cluster overrides the triage for it. With `loop.review: operator` the triage's labels merge
// nothing until the operator accepts them (`failures --accept-triage`, one decision per
// cluster); until then they are listed as pending (`status --operator`).

public struct ClusterGrouping: Sendable {
    enum Decision: Equatable {
        case label(String)
        case merge(with: String)
        case split
    }

    /// The latest decision per cluster, and the merges in the order they were recorded.
    private var decisions: [String: Decision] = [:]
    private var mergeOrder: [String] = []
    /// The latest triage's labels wait for the operator (`loop.review: operator`).
    let triagePending: Bool

    public init(reviews: [ClusterReviewRecord] = [], triagePending: Bool = false) {
        self.triagePending = triagePending
        for r in reviews {
            let d: Decision
            switch r.action {
            case .label: d = .label(r.label ?? "")
            case .merge: d = .merge(with: r.with ?? "")
            case .split: d = .split
            }
            decisions[r.cluster] = d
            mergeOrder.removeAll { $0 == r.cluster }
            if case .merge = d { mergeOrder.append(r.cluster) }
        }
    }

    /// Each grouped cluster's group key (clusters with the same key are one root cause).
    func keys(_ clusters: [FailureBook.Cluster]) -> [String: String] {
        var key: [String: String] = [:]
        let ids = Set(clusters.map(\.id))
        for c in clusters {
            switch decisions[c.id] {
            case .label(let l)?: key[c.id] = "label:" + TriageSchema.mergeKey(l)
            case .split?, .merge?: break
            case nil: if !triagePending, let l = c.triage?.label { key[c.id] = "label:" + TriageSchema.mergeKey(l) }
            }
        }
        for c in mergeOrder {
            guard case .merge(let d)? = decisions[c], ids.contains(c), ids.contains(d), d != c else { continue }
            let k = key[d] ?? "cluster:" + d
            key[d] = k
            key[c] = k
        }
        return key
    }

    /// Why cluster `id` is grouped: the operator's decision, or the triage's label.
    func reason(_ id: String) -> String {
        switch decisions[id] {
        case .label(let l)?: return "the operator's label \"\(l)\""
        case .merge(let d)?: return "the operator merged it with \(d)"
        case .split?: return "split off by the operator, then merged into by another decision"
        case nil: return "the triage's label"
        }
    }

    /// Groups the triage's labels would form among clusters the operator has not decided,
    /// while they wait for the operator (each sorted; empty otherwise).
    func pending(_ clusters: [FailureBook.Cluster]) -> [[String]] {
        guard triagePending else { return [] }
        var byLabel: [String: [String]] = [:]
        for c in clusters where decisions[c.id] == nil {
            if let l = c.triage?.label { byLabel[TriageSchema.mergeKey(l), default: []].append(c.id) }
        }
        return byLabel.values.filter { $0.count > 1 }.map { $0.sorted() }.sorted { $0[0] < $1[0] }
    }
}
