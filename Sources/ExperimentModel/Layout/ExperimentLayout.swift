import BrokerWire
import Foundation
import Glibc

/// Every path of an experiment, in one place.
///
/// ```
/// DIR/
///   experiment_config.yaml   upstream keys + sandbox:/coding_agent:/gate: (operator-owned)
///   PROGRAM.md               instructions for the coding agent
///   agent/agent.py           the only file the coding agent may change
///   workspace/
///     learnings.md           the coding agent's notes (its own)
///     results.tsv            view of the ledger: accepted iterations (upstream format)
///     suite.json             view: regression suite (upstream format)
///     train_results.json     view: latest train run (upstream format)
///     failures.json          view: failure records and ranked clusters (train tasks only)
///     failures.md            view: the top unresolved clusters, for the coding agent to target
///     traces/latest/<task>/  train-split traces of the latest run
///     traces/baseline/<task>/ train-split traces of the first run
///   .autoharness/            supervisor-private (0700); no sandbox ever mounts it
///     ledger.sqlite          hash-chained record: the single source of truth
///     split.json             train/test ids (upstream shape)
///     lock                   one supervisor per experiment
///     views-head             the ledger head the workspace views were last published from
///     snapshots/<sha256>/agent.py   the exact agent.py each gate judged
///     run/                   `autoharness run`'s staging copy, the agent's $HOME, history,
///       broker/broker.sock   the broker's socket (its directory is what the agent sees)
///       broker.sock.oPID-…   which supervisor serves it (`Leftovers`)
///       history/git-log.txt  accepted commits of agent.py, for the coding agent
/// ```
/// Views are regenerated from the ledger after every write; editing one changes nothing the
/// gate uses.
public struct ExperimentLayout: Sendable {
    public let root: String

    public init(root: String) {
        var r = root
        while r.count > 1 && r.hasSuffix("/") { r.removeLast() }
        self.root = r
    }

    public var config: String { root + "/experiment_config.yaml" }
    public var program: String { root + "/PROGRAM.md" }
    public var agentDirectory: String { root + "/agent" }
    public var agentFile: String { agentDirectory + "/agent.py" }
    public var workspace: String { root + "/workspace" }
    public var learnings: String { workspace + "/learnings.md" }
    public var resultsTSV: String { workspace + "/results.tsv" }
    public var suiteJSON: String { workspace + "/suite.json" }
    public var trainResultsJSON: String { workspace + "/train_results.json" }
    public var failuresJSON: String { workspace + "/failures.json" }
    public var failuresMarkdown: String { workspace + "/failures.md" }
    public var traces: String { workspace + "/traces" }
    public var latestTraces: String { traces + "/latest" }
    public var baselineTraces: String { traces + "/baseline" }
    public var gitignore: String { root + "/.gitignore" }

    public var privateDirectory: String { root + "/.autoharness" }
    public var ledger: String { privateDirectory + "/ledger.sqlite" }
    public var split: String { privateDirectory + "/split.json" }
    /// `benchmark: inspect`: the task's samples as init read them (targets included).
    public var inspectSamples: String { privateDirectory + "/inspect-samples.jsonl" }
    public var lock: String { privateDirectory + "/lock" }
    /// Which ledger head the views were last completely published from (`Views.regenerate`).
    public var viewsHead: String { privateDirectory + "/views-head" }
    /// Read-only sources of held-out sandboxes while they run (`PageCacheEviction`).
    public var heldOutJournal: String { privateDirectory + "/held-out-sources" }
    public var snapshots: String { privateDirectory + "/snapshots" }
    /// `autoharness run`'s own directories, kept across restarts and resumes.
    public var runDirectory: String { privateDirectory + "/run" }
    public var brokerDirectory: String { runDirectory + "/broker" }
    public var brokerSocket: String { brokerDirectory + "/" + BrokerWire.socketName }
    /// `history/git-log.txt`, the accepted history the coding agent reads.
    public var historyDirectory: String { runDirectory + "/history" }
    public func snapshotDirectory(sha256: String) -> String { snapshots + "/" + sha256 }

    /// Finds the experiment containing `directory` (it or an ancestor holds
    /// experiment_config.yaml).
    public static func find(from directory: String) -> ExperimentLayout? {
        var dir = directory
        while true {
            if access(dir + "/experiment_config.yaml", F_OK) == 0 { return ExperimentLayout(root: dir) }
            guard let slash = dir.lastIndex(of: "/"), dir != "/" else { return nil }
            dir = slash == dir.startIndex ? "/" : String(dir[..<slash])
        }
    }
}

extension ExperimentLayout {
    /// Makes the private directory (and its snapshots) if missing, root's alone.
    package func ensurePrivateDirectory() throws {
        try FileManager.default.createDirectory(atPath: snapshots, withIntermediateDirectories: true)
        chmod(privateDirectory, 0o700)
    }

    /// The toolbox scripts/install-verifier-tools makes, where it makes it.
    package static var defaultVerifierTools: String {
        (getenv("AUTOHARNESS_CACHE").map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } ?? "/var/cache/autoharness") + "/verifier-tools"
    }
}
