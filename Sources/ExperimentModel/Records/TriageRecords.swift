import Foundation

// Ledger payloads of the triage and of the operator's review of clusters.

/// How bad a triage judged a failure: what the ranking adds after "unresolved".
public enum TriageSeverity: String, Codable, Sendable, CaseIterable, Comparable {
    case low, medium, high, critical
    public static func < (a: Self, b: Self) -> Bool { allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)! }
}

/// A triage's reading of one failure record (task and cluster): checked by `TriageSchema`.
public struct TriageEntry: Codable, Sendable, Equatable {
    public var task: String
    public var cluster: String
    /// Its root cause as the triage sees it (one printable line).
    public var hypothesis: String
    /// A name for the root cause: clusters whose records carry the same label merge.
    public var label: String?
    public var severity: TriageSeverity?

    /// A failure record's id in a triage's input and output (`TriageSchema`).
    public static func key(cluster: String, task: String) -> String { cluster + "/" + task }
}

/// One run of the `triage:` command (`autoharness triage`, or after a batch or train run):
/// what it was given, what passed the schema, what was refused and why.
public struct TriageRecord: Codable, Sendable {
    public var actor: String
    /// What started it: `operator`, `batch N`, `train run`.
    public var trigger: String
    /// Records it was given.
    public var records: Int
    public var entries: [TriageEntry]
    public var refused: Int
    /// The first refusals' reasons.
    public var problems: [String]
    /// How its sandbox ended.
    public var exit: String
    /// `loop.review: operator`: its labels merge no cluster until the operator accepts them.
    public var mergesPending: Bool?

    package init(actor: String, trigger: String, records: Int, entries: [TriageEntry], refused: Int, problems: [String], exit: String, mergesPending: Bool? = nil) {
        self.actor = actor
        self.trigger = trigger
        self.records = records
        self.entries = entries
        self.refused = refused
        self.problems = problems
        self.exit = exit
        self.mergesPending = mergesPending
    }
}

/// The operator's decision about a failure cluster's grouping (`autoharness failures
/// --cluster ID --label TEXT | --merge ID2 | --split`, `--accept-triage`).
public struct ClusterReviewRecord: Codable, Sendable {
    public enum Action: String, Codable, Sendable { case label, merge, split }
    public var actor: String
    public var cluster: String
    public var action: Action
    public var label: String?
    /// `merge`: the cluster it joins.
    public var with: String?
    public var reason: String

    package init(actor: String, cluster: String, action: Action, label: String? = nil, with: String? = nil, reason: String) {
        self.actor = actor
        self.cluster = cluster
        self.action = action
        self.label = label
        self.with = with
        self.reason = reason
    }
}
