import Benchmark
import ExperimentModel
import Foundation
import Ledger
import SupervisorIO

/// The files the coding agent may read about the experiment, rendered from the ledger: the three
/// of upstream's format and the failure views.
public enum Views {
    /// results.tsv: `iteration val_score commit evals_passed evals_total timestamp`, upstream's
    /// columns, then `description` (the accepted gate's `-m` message). val_score as disclosed:
    /// `score` %.4f (upstream); `rounded` the 2-decimal value, still printed with 4 decimals so
    /// the column parses the same; `decision` empty, which upstream's reader (gating.py,
    /// `best_val_score`: `float(r["val_score"]) for r in rows if r.get("val_score")`) skips.
    /// `ladder`: the ladder's value after each iteration's gate (`ScoreLadder`).
    public static func resultsTSV(_ s: ExperimentState, config: ExperimentConfig) -> String {
        let ladder = config.gate.disclosure == .ladder ? ScoreLadder.replay(s, config: config) : nil
        var out = "iteration\tval_score\tcommit\tevals_passed\tevals_total\ttimestamp\tdescription\n"
        for it in s.iterations {
            let shown = ladder.map { DisclosedScore(ladder: $0.iterations[it.iteration]) } ?? DisclosedScore(it.valScore, config.gate.disclosure)
            let score = shown?.fixed4 ?? ""
            out += "\(it.iteration)\t\(score)\t\(it.commit)\t\(it.evalsPassed)\t\(it.evalsTotal)\t\(it.timestamp)\t\(it.description ?? "")\n"
        }
        return out
    }

    public static func disclosed(_ v: Double, _ d: ExperimentConfig.DisclosureLevel) -> String {
        DisclosedScore(v, d)?.fixed4 ?? "-"
    }

    /// An accepted gate's commit subject's two scores as disclosed: its val_score and the best
    /// before it (`ladder`: the ladder's values after it and before it).
    static func commitScores(_ s: ExperimentState, config: ExperimentConfig, attempt: Int, val: Double) -> (val: String, bestBefore: String) {
        guard config.gate.disclosure == .ladder else { return (disclosed(val, config.gate.disclosure), disclosed(s.best ?? 0, config.gate.disclosure)) }
        let before = ScoreLadder.replay(s, config: config)
        let after = ScoreLadder.replay(s, config: config, adding: (attempt, val))
        return (DisclosedScore(ladder: after.current)?.fixed4 ?? "-", DisclosedScore(ladder: before.current)?.fixed4 ?? "-")
    }

    /// suite.json: `{"tasks":[ids],"threshold":t,"last_results":{id:reward}}`.
    public static func suiteJSON(_ s: ExperimentState, threshold: Double) throws -> Data {
        struct Suite: Encodable {
            var tasks: [String]
            var threshold: Double
            var last_results: [String: Double]
        }
        return try encode(Suite(tasks: s.suite, threshold: threshold, last_results: s.suiteLastResults))
    }

    /// train_results.json: `{"split":"train","timestamp":..,"results":{id:reward|null}}`.
    public static func trainResultsJSON(_ s: ExperimentState) throws -> Data {
        struct TrainResults: Encodable {
            var split = "train"
            var timestamp: String?
            var results: [String: Double?]
        }
        // Every train task the coding agent may see (with rolling batches, those revealed so
        // far) appears; those not in the latest run are null (not run).
        let run = s.latestTrainRun
        var results: [String: Double?] = [:]
        let visible = Set(s.visibleTrain)
        for id in visible { results[id] = .some(nil) }
        for (k, v) in run?.results ?? [:] where visible.contains(k) { results[k] = v }
        return try encode(TrainResults(timestamp: run?.timestamp, results: results))
    }

    static func encode<T: Encodable>(_ v: T) throws -> Data {
        let e = JSONEncoder()
        e.outputFormatting = [.prettyPrinted, .sortedKeys]
        var d = try e.encode(v)
        d.append(0x0A)
        return d
    }

    /// The largest view the supervisor reads back to compare (failures.json grows with records).
    static let maxViewBytes = 256 << 20

    /// The views as the ledger state `s` renders them, in the order they are published.
    static func rendered(_ layout: ExperimentLayout, _ s: ExperimentState, config: ExperimentConfig) throws -> [(path: String, bytes: Data)] {
        // One derivation of the failure records for both of their views (this runs once per
        // ledger head when a view is checked against the heads since its last publish).
        let book = FailureBook(s)
        return [(layout.resultsTSV, Data(resultsTSV(s, config: config).utf8)),
         (layout.suiteJSON, try suiteJSON(s, threshold: config.threshold)),
         (layout.trainResultsJSON, try trainResultsJSON(s)),
         (layout.failuresJSON, try failuresJSON(s, book)),
         (layout.failuresMarkdown, Data(failuresMarkdown(s, book).utf8))]
    }

    /// Rewrites the three views atomically (write, fsync, rename), then records the ledger
    /// head they were rendered from (`layout.viewsHead`). That record is written last, so it
    /// never names a head newer than a view on disk: a supervisor stopped anywhere in here
    /// leaves each view at the recorded head or at a later one, never an earlier one.
    /// `beforeEach` is called with each path just before it is written (tests stop there).
    public static func regenerate(_ layout: ExperimentLayout, _ s: ExperimentState, config: ExperimentConfig,
                                  beforeEach: (String) -> Void = { _ in }) throws {
        for (path, bytes) in try rendered(layout, s, config: config) {
            beforeEach(path)
            try AtomicFile.write([UInt8](bytes), to: path)
        }
        try recordHead(layout, s.head, beforeEach: beforeEach)
    }

    private static func recordHead(_ layout: ExperimentLayout, _ head: LedgerHead, beforeEach: (String) -> Void) throws {
        beforeEach(layout.viewsHead)
        try AtomicFile.write([UInt8](try encode(head)), to: layout.viewsHead, mode: 0o600)
    }

    /// The head the views were last completely published from; nil if they never were (or
    /// the record is unreadable, which only narrows what counts as behind).
    static func publishedHead(_ layout: ExperimentLayout) -> LedgerHead? {
        (try? InputFile.read(layout.viewsHead, cap: 4096).get()).flatMap { try? JSONDecoder().decode(LedgerHead.self, from: Data($0)) }
    }

    /// How the views on disk stand against the ledger.
    public struct Check: Sendable {
        /// Views that are exactly what the ledger rendered at a head between their last
        /// complete publish and now: a supervisor stopped between appending and publishing.
        /// Derived data, regenerated by the next command that takes the experiment lock.
        public var behind: [String] = []
        /// Views that are nothing the ledger rendered since their last complete publish:
        /// edited, deleted, replaced by an older copy, or rendered under another config.
        public var tampered: [String] = []
    }

    /// Compares each view with what the ledger renders now; one that differs is behind only
    /// if it equals the rendering at some head from the last recorded publish on, and
    /// tampered otherwise. The view's own content is never taken as a claim of where it
    /// stands: an older copy put back by hand is tampered unless no complete publish has
    /// happened since it was current, which only a crash leaves.
    public static func check(_ layout: ExperimentLayout, records: [LedgerRecord], config: ExperimentConfig) throws -> Check {
        try classify(layout, records: records, config: config).check
    }

    private static func classify(_ layout: ExperimentLayout, records: [LedgerRecord], config: ExperimentConfig)
        throws -> (check: Check, current: ExperimentState, rendered: [(path: String, bytes: Data)]) {
        let current = try ExperimentState(records: records)
        let expected = try rendered(layout, current, config: config)
        var differing: [(path: String, onDisk: Data?)] = []
        for (path, bytes) in expected {
            // A view is in the coding agent's workspace: read as a file a sandbox could have
            // touched (no link followed, no FIFO, capped); one that cannot be read differs.
            let onDisk = (try? InputFile.read(at: AT_FDCWD, path, cap: Self.maxViewBytes).get()).map { Data($0) }
            if onDisk != bytes { differing.append((path, onDisk)) }
        }
        var behind: Set<String> = []
        if !differing.isEmpty {
            if let published = publishedHead(layout) {
                // A head the ledger does not hold (rows cut or rewritten) vouches for nothing.
                if records.contains(where: { $0.seq == published.seq && $0.hash == published.hash }) {
                    _ = try ExperimentState(records: records) { s in
                        guard s.head.seq >= published.seq else { return }
                        for (path, bytes) in try rendered(layout, s, config: config)
                        where differing.contains(where: { $0.path == path && $0.onDisk == bytes }) {
                            behind.insert(path)
                        }
                    }
                }
            } else {
                // Never published: a view not written yet is behind (prepare stopped after
                // recording iteration 0); one that exists is not the ledger's.
                for d in differing where d.onDisk == nil { behind.insert(d.path) }
            }
        }
        let paths = differing.map(\.path)
        return (Check(behind: paths.filter { behind.contains($0) }, tampered: paths.filter { !behind.contains($0) }), current, expected)
    }

    /// Regenerates the views that are behind the ledger and records the head, for a command
    /// that holds the experiment lock. Tampered views are left as they are, for `status
    /// --verify` to show, until the next recorded change rewrites every view.
    public static func repair(_ layout: ExperimentLayout, records: [LedgerRecord], config: ExperimentConfig,
                              beforeEach: (String) -> Void = { _ in }) throws -> Check {
        let (check, current, expected) = try classify(layout, records: records, config: config)
        for (path, bytes) in expected where check.behind.contains(path) {
            beforeEach(path)
            try AtomicFile.write([UInt8](bytes), to: path)
        }
        // Every view not tampered is now current: the recorded head may move up to now, which
        // narrows what a later check accepts as behind.
        if publishedHead(layout) != current.head { try recordHead(layout, current.head, beforeEach: beforeEach) }
        return check
    }
}
