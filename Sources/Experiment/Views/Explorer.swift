import ExperimentModel

/// The report's explorer (NeoSigma's "every candidate harness change, accepted and reverted,
/// with its diff"): every gate attempt, how it ended, its agent.py against the last accepted
/// one (from the supervisor's content-addressed snapshots), and which failure clusters its
/// train phases resolved or broke. The operator's view: exact scores, no held-out task.
public struct Explorer: Sendable {
    public struct Entry: Sendable {
        public var attempt: Int
        public var outcome: GateOutcome
        public var reason: String
        public var valScore: Double?
        public var bestBefore: Double?
        public var suitePassed: Int
        public var suiteTotal: Int
        public var promoted: [String]
        public var batch: Int?
        /// `timeout_policy: infra`: the mean over the held-out tasks that finished, and how
        /// many timed out.
        public var valScoreFinished: Double?
        public var heldOutTimedOut: Int?
        public var agentSHA256: String
        /// The accepted iteration it is compared with (0: the baseline).
        public var baseIteration: Int
        /// Against the base's agent.py; nil when either snapshot could not be read.
        public var diff: LineDiff?
        /// Clusters unresolved before its train phases and resolved after (accepted gates).
        public var resolved: [String]
        /// Clusters with a record its train phases opened: a new failure, or one seen again.
        public var broken: [String]
        /// Its requester's `gate -m` message: the attempt's title.
        public var message: String?
        /// `loop.candidates`: the ranking it was chosen by, and each explored candidate's
        /// agent.py against the same base (nil: a snapshot could not be read).
        public var ranking: CandidatesRankedRecord?
        public var exploredDiffs: [String: LineDiff] = [:]
        /// `gate.trials` above 1, `gate.accept: paired`'s test, and what the model vendor
        /// failed in the held-out phase (`gate.infra_retries`): the operator's numbers.
        public var trials: Int? = nil
        public var pairedTest: PairedDecision? = nil
        public var infraRetries: InfraRetries? = nil
    }

    public var entries: [Entry]
    /// What the latest triage said of each cluster an entry names (its label and first
    /// hypothesis), shown beside the cluster's id.
    public var triage: [String: (label: String?, hypothesis: String?)] = [:]

    /// `source` gives a snapshot's agent.py by its sha256 (nil if it cannot be read).
    public init(_ s: ExperimentState, source: (String) -> String?) {
        let changes = Self.clusterChanges(s)
        var base = (iteration: 0, sha: s.iterations.first?.agentSHA256 ?? s.baseline?.agentSHA256 ?? "")
        var texts: [String: String?] = [:]
        func text(_ sha: String) -> String? {
            if let t = texts[sha] { return t }
            let t = source(sha)
            texts[sha] = t
            return t
        }
        var out: [Entry] = []
        let rankings = Dictionary(s.rankings.map { ($0.attempt, $0) }) { $1 }
        for a in s.gateAttempts {
            func against(_ sha: String) -> LineDiff? { text(base.sha).flatMap { old in text(sha).map { LineDiff(old: old, new: $0) } } }
            let diff = against(a.agentSHA256)
            let ranking = rankings[a.attempt].flatMap { $0.chosen == a.agentSHA256 ? $0 : nil }
            var explored: [String: LineDiff] = [:]
            for c in ranking?.explored ?? [] { explored[c.agentSHA256] = against(c.agentSHA256) }
            out.append(Entry(attempt: a.attempt, outcome: a.verdict, reason: a.reason, valScore: a.valScore, bestBefore: a.bestBefore,
                             suitePassed: a.suitePassed, suiteTotal: a.suiteTotal, promoted: a.promoted, batch: a.batch, valScoreFinished: a.valScoreFinished, heldOutTimedOut: a.heldOutTimedOut,
                             agentSHA256: a.agentSHA256, baseIteration: base.iteration, diff: diff,
                             resolved: changes[a.attempt]?.resolved ?? [], broken: changes[a.attempt]?.broken ?? [], message: a.message,
                             ranking: ranking, exploredDiffs: explored,
                             trials: a.heldOutTrials.flatMap { $0.trials > 1 ? $0.trials : nil }, pairedTest: a.pairedTest, infraRetries: a.infraRetries))
            if a.accepted, let it = a.iteration { base = (it, a.agentSHA256) }
        }
        entries = out
        for c in FailureBook(s).clusters { if let t = c.triage { triage[c.id] = (t.label, t.hypotheses.first) } }
    }

    /// Per gate attempt with train evidence: the clusters it resolved and broke, from one
    /// replay of the failure events, looked at just before its rows (its acceptance precedes
    /// its evidence) and just after.
    static func clusterChanges(_ s: ExperimentState) -> [Int: (resolved: [String], broken: [String])] {
        var out: [Int: (resolved: [String], broken: [String])] = [:]
        let events = s.failureEvents
        var replay = FailureBook.Replay(train: Set(s.split?.train ?? []))
        var before: (open: Set<String>, unresolved: Set<String>)?
        for (i, e) in events.enumerated() {
            // The gate whose rows start here: an accepted one's acceptance, else its evidence.
            var starting: Int?
            if case .accepted(let a, _) = e { starting = a }
            if case .evidence(_, _, let row) = e, row.source == "gate", let a = row.attempt {
                let afterAcceptance: Bool
                if i > 0, case .accepted(let b, _) = events[i - 1], b == a { afterAcceptance = true } else { afterAcceptance = false }
                if !afterAcceptance { starting = a }
            }
            if starting != nil { before = (replay.openKeys, replay.unresolvedClusters) }
            replay.apply(e)
            guard case .evidence(_, _, let row) = e, row.source == "gate", let attempt = row.attempt, let b = before else { continue }
            let open = replay.openKeys, unresolved = replay.unresolvedClusters
            let broken = Set(open.subtracting(b.open).compactMap { replay.byKey[$0]?.cluster })
            out[attempt] = (b.unresolved.subtracting(unresolved).sorted(), broken.sorted())
            before = nil
        }
        return out
    }
}
