import ArgumentParser


/// The commands the coding agent's `autoharness` may send. Parsed by ArgumentParser like
/// the CLI; anything else (other verbs, -C, --operator, --oracle) is refused.
struct BrokerRoot: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "autoharness",
        abstract: "Requests to the supervisor of this run (you are inside the coding agent's sandbox).",
        discussion: "Benchmarks, gates and status are run by the supervisor outside this sandbox; it records and commits. Only agent/agent.py is taken from agent/.",
        subcommands: [BrokerBenchmark.self, BrokerGate.self, BrokerCandidate.self, BrokerStatus.self, BrokerFailures.self, BrokerNeedsHuman.self])
}

struct BrokerBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "benchmark", abstract: "Run train tasks with the current agent/agent.py; traces land in workspace/traces/latest/.")
    @Option(name: .customLong("task-ids"), parsing: .upToNextOption, help: "Train task ids (default: all train tasks).")
    var taskIDs: [String] = []
}

struct BrokerGate: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "gate", abstract: "Ask the supervisor to judge agent/agent.py (suite, held-out score, promotion).")
    @Option(name: [.customShort("m"), .customLong("message")],
            help: "What the change is and why (one line, at most 500 characters kept): the commit's body, results.tsv's description, the report's title for this attempt.")
    var message: String?
}

struct BrokerCandidate: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "candidate",
        abstract: "Submit agent/agent.py as one of several candidates for the next gate (loop.candidates).",
        discussion: "The next `autoharness gate` runs every waiting candidate on the train split, ranks them there and judges only the best on the held-out split; the gated one becomes agent/agent.py. Refused when loop.candidates is 1, when that many are waiting, and for an agent.py a gate already judged.")
    @Option(name: [.customShort("m"), .customLong("message")],
            help: "What this candidate tries (one line, at most 500 characters kept): the gate's message if it is the one gated.")
    var message: String?
}

struct BrokerNeedsHuman: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "needs-human",
        abstract: "Leave the operator a note: something only a human can give (a key, a decision, a broken task).",
        discussion: "Shown to the operator (status --operator, the report); the run goes on, and nothing acts on the note.")
    @Argument(help: "What you need (one line, at most 500 characters kept).") var text: String
}

struct BrokerStatus: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Iterations, best score (as disclosed), suite, recent gates, violations.")
    @Flag(help: "Machine-readable output.") var json = false
}

struct BrokerFailures: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "failures",
        abstract: "Failure clusters of the train split, ranked (workspace/failures.md); one cluster's records with --cluster.",
        discussion: "With --cluster ID and --label or --merge-with, records your proposal about that cluster (a name for its root cause, or that it shares one with another cluster). Proposals are shown as yours beside the cluster; they change nothing the supervisor counts.")
    @Option(help: "A cluster id (c…) from `autoharness failures`.") var cluster: String?
    @Flag(help: "Machine-readable output.") var json = false
    @Option(help: "Propose a label for --cluster (at most 200 characters).") var label: String?
    @Option(name: .customLong("merge-with"), help: "Propose that --cluster has the same root cause as this cluster.") var mergeWith: String?

    func validate() throws {
        if (label != nil || mergeWith != nil) && cluster == nil { throw ValidationError("--label and --merge-with need --cluster") }
        if let label, label.isEmpty || label.count > 200 { throw ValidationError("--label: 1 to 200 characters") }
    }
}

/// The broker's grammar: what the coding agent's `autoharness` may ask.
enum BrokerGrammar {
    static let verbs = ["benchmark", "gate", "candidate", "status", "failures", "needs-human"]

    static func parse(_ argv: [String]) -> BrokerParse {
        if let verb = argv.first, !verb.hasPrefix("-"), !Self.verbs.contains(verb), verb != "help" {
            return .invalid("unknown request '\(verb)': inside the sandbox autoharness accepts \(Self.verbs.joined(separator: ", ")) (nothing records, commits, changes the suite or reads the test split)")
        }
        do {
            let c = try BrokerRoot.parseAsRoot(argv)
            switch c {
            case let b as BrokerBenchmark: return .verb(.benchmark(taskIDs: b.taskIDs.isEmpty ? nil : b.taskIDs))
            case let g as BrokerGate: return .verb(.gate(message: g.message))
            case let c as BrokerCandidate: return .verb(.candidate(message: c.message))
            case let n as BrokerNeedsHuman: return .verb(.needsHuman(text: n.text))
            case let s as BrokerStatus: return .verb(.status(json: s.json))
            case let f as BrokerFailures:
                if f.label != nil || f.mergeWith != nil, let c = f.cluster {
                    return .verb(.proposeCluster(cluster: c, label: f.label, mergeWith: f.mergeWith))
                }
                return .verb(.failures(cluster: f.cluster, json: f.json))
            default: return .help(BrokerRoot.helpMessage() + "\n")
            }
        } catch {
            if BrokerRoot.exitCode(for: error) == .success { return .help(BrokerRoot.fullMessage(for: error) + "\n") }
            return .invalid(BrokerRoot.fullMessage(for: error))
        }
    }

}
