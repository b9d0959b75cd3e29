import Benchmark

// Failure records and clusters, derived from the ledger alone (NeoSigma's phases A and B).
//
// A record is one failing check of one train task, followed across runs: first and last seen,
// how often, and whether it still fails. Its life:
//   open      seen in the latest run of its task;
//   fixed     not seen in the latest run of its task, but that run's agent.py has not been
//             accepted by a gate (a candidate's train run fixing it proves nothing yet);
//   resolved  not seen in a run of an agent.py a gate accepted: `resolvedBy` names the gate.
// Seen again after it was resolved, it is open again and counts a recurrence.
//
// A cluster is every record with one signature (`FailureSignature`): one root cause across
// tasks. Clusters are ranked for the coding agent: unresolved first, then by open records,
// total failures, lowest resolution rate, id. The coding agent's proposals (a label, a merge)
// are shown beside a cluster and never change what it counts.

public struct FailureBook: Sendable {
    public enum State: String, Codable, Sendable {
        case open, fixed, resolved
    }

    /// Where a record was seen: the ledger row and what ran.
    public struct Sighting: Codable, Sendable, Equatable {
        public var seq: Int64
        public var time: String
        /// `train run` or `gate`.
        public var source: String
        public var attempt: Int?
        public var batch: Int?
    }

    public struct Record: Codable, Sendable, Equatable {
        public var task: String
        public var cluster: String
        public var check: String
        public var errorClass: String
        /// The latest excerpt seen.
        public var excerpt: String
        public var firstSeen: Sighting
        public var lastSeen: Sighting
        public var occurrences: Int
        public var state: State
        /// The accepted gate that resolved it.
        public var resolvedBy: Int?
        /// Times it was seen again after being resolved.
        public var recurrences: Int

        enum CodingKeys: String, CodingKey {
            case task, cluster, check, excerpt, occurrences, state, recurrences
            case errorClass = "error_class"
            case firstSeen = "first_seen"
            case lastSeen = "last_seen"
            case resolvedBy = "resolved_by_gate"
        }
    }

    public struct Proposal: Codable, Sendable, Equatable {
        public var time: String
        public var by: String
        public var label: String?
        public var mergeWith: String?

        enum CodingKeys: String, CodingKey {
            case time, by, label
            case mergeWith = "merge_with"
        }
    }

    public struct Cluster: Codable, Sendable, Equatable {
        public var id: String
        public var rank: Int
        public var signature: String
        public var errorClass: String
        public var check: String
        /// Distinct tasks with a record in it.
        public var tasks: [String]
        public var records: Int
        public var open: Int
        public var resolved: Int
        /// Sightings summed over its records: NeoSigma's `total_failures`.
        public var totalFailures: Int
        /// Resolved records over records.
        public var resolutionRate: Double
        public var unresolved: Bool
        /// Up to three records, unresolved first: task and latest excerpt.
        public var examples: [Example]
        /// The coding agent's proposals about it, oldest first (never counted).
        public var proposals: [Proposal]
        /// What the latest triage said of its records (nil: none triaged).
        public var triage: Triage?

        /// The other clusters it is one root cause with (ranked together): by the triage's
        /// label (with `loop.review: operator`, once the operator accepted it) or the
        /// operator's decisions (`ClusterGrouping`).
        public var mergedWith: [String] = []
        /// Why it is grouped as it is: "triage label", "operator: ...", or nil.
        public var grouping: String?

        /// A triage's reading of a cluster: the label most of its records got, the highest
        /// severity, and up to three distinct hypotheses.
        public struct Triage: Codable, Sendable, Equatable {
            public var label: String?
            public var severity: TriageSeverity?
            public var hypotheses: [String]
        }

        public struct Example: Codable, Sendable, Equatable {
            public var task: String
            public var state: State
            public var excerpt: String
        }

        enum CodingKeys: String, CodingKey {
            case id, rank, signature, check, tasks, records, open, resolved, unresolved, examples, proposals, triage, grouping
            case mergedWith = "merged_with"
            case errorClass = "error_class"
            case totalFailures = "total_failures"
            case resolutionRate = "resolution_rate"
        }
    }

    /// Every record, by task then cluster.
    public private(set) var records: [Record] = []
    /// Every cluster, ranked.
    public private(set) var clusters: [Cluster] = []
    /// `loop.review: operator`: the groups the latest triage's labels would form, waiting
    /// for the operator (`ClusterGrouping.pending`).
    public private(set) var pendingMerges: [[String]] = []

    public init(_ s: ExperimentState) {
        var replay = Replay(train: Set(s.split?.train ?? []))
        for event in s.failureEvents { replay.apply(event) }
        self.init(replay: replay, proposals: s.clusterProposals, triage: s.triage,
                  grouping: ClusterGrouping(reviews: s.clusterReviews.map(\.record), triagePending: s.triageMergesPending))
    }

    /// The records' life, event by event (`FailureEvent`): a book is one replay of every
    /// event; the report's explorer looks at the replay between events.
    package struct Replay {
        /// Only train tasks ever become records, whatever a row holds.
        let train: Set<String>
        package var byKey: [String: Record] = [:]
        var order: [String] = []
        var keysOfTask: [String: [String]] = [:]
        /// cluster id -> signature
        var signatures: [String: String] = [:]
        /// Per record: the agent.py whose run last did not show it (while not resolved).
        var fixedBy: [String: String] = [:]
        /// agent.py sha256 -> the first gate attempt that accepted it.
        var accepted: [String: Int] = [:]
        /// The normaliser's result per distinct evidence (it is the costly part).
        var memo: [FailureEvidence: (signature: String, cluster: String)] = [:]

        package init(train: Set<String>) { self.train = train }

        static func key(_ task: String, _ cluster: String) -> String { task + "\u{0}" + cluster }

        package mutating func apply(_ event: FailureEvent) {
            switch event {
            case .accepted(let attempt, let sha):
                if accepted[sha] == nil { accepted[sha] = attempt }
                for (k, by) in fixedBy where by == sha {
                    byKey[k]?.state = .resolved
                    byKey[k]?.resolvedBy = attempt
                    fixedBy[k] = nil
                }
            case .evidence(let seq, let time, let row):
                for (task, evidence) in row.tasks.sorted(by: { $0.key < $1.key }) where train.contains(task) {
                    let sighting = Sighting(seq: seq, time: time, source: row.source, attempt: row.attempt, batch: row.batch)
                    var seen: Set<String> = []
                    for e in evidence {
                        let (signature, cluster): (String, String)
                        if let m = memo[e] {
                            (signature, cluster) = m
                        } else {
                            signature = FailureSignature.of(e)
                            cluster = FailureSignature.clusterID(signature)
                            memo[e] = (signature, cluster)
                        }
                        signatures[cluster] = signature
                        let k = Self.key(task, cluster)
                        guard seen.insert(k).inserted else { continue }
                        if var r = byKey[k] {
                            r.occurrences += 1
                            r.lastSeen = sighting
                            r.excerpt = e.excerpt
                            if r.state == .resolved { r.recurrences += 1 }
                            r.state = .open
                            r.resolvedBy = nil
                            byKey[k] = r
                        } else {
                            byKey[k] = Record(task: task, cluster: cluster, check: e.check, errorClass: e.errorClass, excerpt: e.excerpt,
                                              firstSeen: sighting, lastSeen: sighting, occurrences: 1, state: .open, resolvedBy: nil, recurrences: 0)
                            order.append(k)
                            keysOfTask[task, default: []].append(k)
                        }
                        fixedBy[k] = nil
                    }
                    // This task's other records did not fail in this run.
                    for k in keysOfTask[task] ?? [] where !seen.contains(k) && byKey[k]!.state != .resolved {
                        if let attempt = accepted[row.agentSHA256] {
                            byKey[k]!.state = .resolved
                            byKey[k]!.resolvedBy = attempt
                            fixedBy[k] = nil
                        } else {
                            byKey[k]!.state = .fixed
                            fixedBy[k] = row.agentSHA256
                        }
                    }
                }
            }
        }

        /// Records open now (task and cluster keys), and clusters with a record not resolved.
        package var openKeys: Set<String> { Set(byKey.filter { $0.value.state == .open }.keys) }
        package var unresolvedClusters: Set<String> { Set(byKey.values.filter { $0.state != .resolved }.map(\.cluster)) }
    }

    init(replay: Replay, proposals given: [(time: String, record: ClusterProposalRecord)], triage: [String: TriageEntry] = [:],
         grouping: ClusterGrouping = ClusterGrouping()) {
        records = replay.order.map { replay.byKey[$0]! }.sorted { ($0.task, $0.cluster) < ($1.task, $1.cluster) }
        let signatures = replay.signatures
        var proposals: [String: [Proposal]] = [:]
        for (time, p) in given {
            proposals[p.cluster, default: []].append(Proposal(time: time, by: p.actor, label: p.label, mergeWith: p.mergeWith))
        }
        var built: [Cluster] = []
        for (id, members) in Dictionary(grouping: records, by: \.cluster) {
            let resolved = members.filter { $0.state == .resolved }.count
            let open = members.filter { $0.state != .resolved }.count
            let examples = members.sorted { (Self.stateOrder($0.state), $0.task) < (Self.stateOrder($1.state), $1.task) }.prefix(3)
                .map { Cluster.Example(task: $0.task, state: $0.state, excerpt: $0.excerpt) }
            built.append(Cluster(id: id, rank: 0, signature: signatures[id] ?? "", errorClass: members[0].errorClass, check: members[0].check,
                                 tasks: Set(members.map(\.task)).sorted(), records: members.count, open: open, resolved: resolved,
                                 totalFailures: members.reduce(0) { $0 + $1.occurrences },
                                 resolutionRate: Double(resolved) / Double(members.count), unresolved: open > 0,
                                 examples: Array(examples), proposals: proposals[id] ?? [],
                                 triage: Self.triage(of: members, triage)))
        }
        let keys = grouping.keys(built)
        var members: [String: [String]] = [:]
        for c in built { if let k = keys[c.id] { members[k, default: []].append(c.id) } }
        for i in built.indices {
            let id = built[i].id
            guard let k = keys[id], let group = members[k], group.count > 1 else { continue }
            built[i].mergedWith = group.filter { $0 != id }.sorted()
            built[i].grouping = grouping.reason(id)
        }
        clusters = Self.ranked(built, keys: keys)
        pendingMerges = grouping.pending(built)
    }

    /// A cluster's triage from its records' entries (nil when none was triaged).
    static func triage(of members: [Record], _ entries: [String: TriageEntry]) -> Cluster.Triage? {
        let mine = members.compactMap { entries[TriageEntry.key(cluster: $0.cluster, task: $0.task)] }
        guard !mine.isEmpty else { return nil }
        var votes: [String: (count: Int, shown: String)] = [:]
        for l in mine.compactMap(\.label) { votes[TriageSchema.mergeKey(l), default: (0, l)].count += 1 }
        let label = votes.max { ($0.value.count, $1.key) < ($1.value.count, $0.key) }?.value.shown
        var hypotheses: [String] = []
        for h in mine.map(\.hypothesis) where !hypotheses.contains(h) && hypotheses.count < 3 { hypotheses.append(h) }
        return Cluster.Triage(label: label, severity: mine.compactMap(\.severity).max(), hypotheses: hypotheses)
    }

    /// The ranking: clusters merged (`keys`: one group per key) rank as one (their counts
    /// summed, the highest severity), each group in the order below, its members together:
    /// unresolved first, then higher severity (a triaged one before one without), more open
    /// records, more failures seen, lower resolution rate, id.
    static func ranked(_ clusters: [Cluster], keys: [String: String]) -> [Cluster] {
        func before(_ a: Cluster, _ b: Cluster) -> Bool {
            if a.unresolved != b.unresolved { return a.unresolved }
            let (sa, sb) = (a.triage?.severity, b.triage?.severity)
            if sa != sb {
                guard let sa else { return false }
                guard let sb else { return true }
                return sa > sb
            }
            if a.open != b.open { return a.open > b.open }
            if a.totalFailures != b.totalFailures { return a.totalFailures > b.totalFailures }
            if a.resolutionRate != b.resolutionRate { return a.resolutionRate < b.resolutionRate }
            return a.id < b.id
        }
        // A group's standing: its members' counts as one cluster.
        var groups: [String: [Cluster]] = [:]
        // (A resolved cluster never ranks above an unresolved one for sharing its root cause.)
        for c in clusters { groups[(c.mergedWith.isEmpty ? "\u{0}" + c.id : keys[c.id]!) + (c.unresolved ? "\u{1}u" : "\u{1}r"), default: []].append(c) }
        let standing = groups.mapValues { members -> Cluster in
            var g = members.sorted(by: before)[0]
            g.unresolved = members.contains(where: \.unresolved)
            g.open = members.reduce(0) { $0 + $1.open }
            g.totalFailures = members.reduce(0) { $0 + $1.totalFailures }
            g.records = members.reduce(0) { $0 + $1.records }
            g.resolutionRate = Double(members.reduce(0) { $0 + $1.resolved }) / Double(max(1, g.records))
            g.triage?.severity = members.compactMap { $0.triage?.severity }.max()
            return g
        }
        var out = groups.sorted { before(standing[$0.key]!, standing[$1.key]!) }.flatMap { $0.value.sorted(by: before) }
        for i in out.indices { out[i].rank = i + 1 }
        return out
    }

    private static func stateOrder(_ s: State) -> Int { s == .open ? 0 : s == .fixed ? 1 : 2 }

    public func cluster(_ id: String) -> Cluster? { clusters.first { $0.id == id } }

    /// Clusters unresolved in `before` and resolved in `after` (a later book of the same
    /// ledger), sorted.
    static func resolved(from before: FailureBook, to after: FailureBook) -> [String] {
        let stillOpen = Set(after.clusters.filter(\.unresolved).map(\.id))
        return before.clusters.filter { $0.unresolved && !stillOpen.contains($0.id) }.map(\.id).sorted()
    }
}

extension FailureEvidenceRecord {
    /// The row for one run's outcomes: every train task among them, with its failing checks
    /// (the adapter's evidence, else its status class) or none if it passed; nil if no train
    /// task ran. Any other id is left out here, whatever the caller passed.
    package static func observed(_ outcomes: [TaskOutcome], train: Set<String>, source: String, attempt: Int? = nil,
                         agentSHA256: String, batch: Int? = nil) -> FailureEvidenceRecord? {
        var tasks: [String: [FailureEvidence]] = [:]
        for o in outcomes where train.contains(o.id) {
            if o.passed {
                tasks[o.id] = []
            } else if let given = o.failures, !given.isEmpty {
                tasks[o.id] = FailureEvidence.bounded(given)
            } else {
                tasks[o.id] = [FailureEvidence.fromStatus(o)]
            }
        }
        guard !tasks.isEmpty else { return nil }
        return FailureEvidenceRecord(source: source, attempt: attempt, agentSHA256: agentSHA256, batch: batch, tasks: tasks)
    }
}
