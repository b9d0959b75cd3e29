import ArgumentParser
import ExperimentModel
import Foundation
import SandboxCLI
import SupervisorIO

struct ConfigCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "config",
        abstract: "Check an experiment config, or print every key it may hold.",
        subcommands: [ConfigCheck.self, ConfigKeys.self]
    )
}

struct ConfigCheck: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Validate experiment configs; print every problem as file:line: key: message. Exit 0 if all are valid, 1 otherwise.",
        discussion: "Paths the config names (datasets, policies, binds) are checked when an experiment uses it, not here."
    )

    @Argument(help: "experiment_config.yaml files (default: the one in the current directory).")
    var files: [String] = []

    func run() throws {
        var bad = 0
        for file in files.isEmpty ? ["experiment_config.yaml"] : files {
            do {
                let c = try ExperimentConfig.load(file)
                print("\(file): ok (benchmark: \(c.benchmark))")
            } catch let e as ConfigErrors {
                bad += 1
                for error in e.errors { printErr(error.description) }
            }
        }
        if bad > 0 { throw ExitCode(Exit.failure) }
    }
}

struct ConfigKeys: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keys",
        abstract: "Print every key of experiment_config.yaml: what it accepts, its default and what it does (Markdown).",
        discussion: "The same text is docs/config.md's reference; a test fails when the two differ."
    )

    func run() throws { print(ConfigSchema.reference(), terminator: "") }
}
