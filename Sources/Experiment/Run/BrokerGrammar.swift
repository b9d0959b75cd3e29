import ArgumentParser


/// The commands the coding agent's `autoharness` may send. Parsed by ArgumentParser like
/// the CLI; anything else (other verbs, -C, --operator, --oracle) is refused.
struct BrokerRoot: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "autoharness",
        abstract: "Requests to the supervisor of this run (you are inside the coding agent's sandbox).",
        discussion: "Benchmarks, gates and status are run by the supervisor outside this sandbox; it records and commits. Only agent/agent.py is taken from agent/.",
        subcommands: [BrokerBenchmark.self, BrokerGate.self, BrokerStatus.self])
}

struct BrokerBenchmark: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "benchmark", abstract: "Run train tasks with the current agent/agent.py; traces land in workspace/traces/latest/.")
    @Option(name: .customLong("task-ids"), parsing: .upToNextOption, help: "Train task ids (default: all train tasks).")
    var taskIDs: [String] = []
}

struct BrokerGate: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "gate", abstract: "Ask the supervisor to judge agent/agent.py (suite, held-out score, promotion).")
}

struct BrokerStatus: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Iterations, best score (as disclosed), suite, recent gates, violations.")
    @Flag(help: "Machine-readable output.") var json = false
}

/// The broker's grammar: what the coding agent's `autoharness` may ask.
enum BrokerGrammar {
    static let verbs = ["benchmark", "gate", "status"]

    static func parse(_ argv: [String]) -> BrokerParse {
        if let verb = argv.first, !verb.hasPrefix("-"), !Self.verbs.contains(verb), verb != "help" {
            return .invalid("unknown request '\(verb)': inside the sandbox autoharness accepts \(Self.verbs.joined(separator: ", ")) (nothing records, commits, changes the suite or reads the test split)")
        }
        do {
            let c = try BrokerRoot.parseAsRoot(argv)
            switch c {
            case let b as BrokerBenchmark: return .verb(.benchmark(taskIDs: b.taskIDs.isEmpty ? nil : b.taskIDs))
            case is BrokerGate: return .verb(.gate)
            case let s as BrokerStatus: return .verb(.status(json: s.json))
            default: return .help(BrokerRoot.helpMessage() + "\n")
            }
        } catch {
            if BrokerRoot.exitCode(for: error) == .success { return .help(BrokerRoot.fullMessage(for: error) + "\n") }
            return .invalid(BrokerRoot.fullMessage(for: error))
        }
    }

}
