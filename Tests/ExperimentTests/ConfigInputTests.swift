import Testing
import Experiment

@Suite("Config inputs")
struct ConfigInputTests {
    @Test("a duplicate key is refused at the repeat's file:line:column, naming the first, without quoting the file",
          arguments: [
            // top level
            ("benchmark: local\ndataset: d\nthreshold: 0.5\n# a comment\nthreshold: 0.9\n", 5, 1, 3),
            // nested, under runner:, after a blank line
            ("benchmark: local\ndataset: d\nrunner:\n  timeout: 10\n\n  timeout: 20\nthreshold: 0.5\n", 6, 3, 4),
          ])
    func duplicateKey(text: String, line: Int, column: Int, firstLine: Int) throws {
        do {
            _ = try ExperimentConfig.parse(text, file: "exp/experiment_config.yaml")
            Issue.record("a config with a duplicate key was accepted")
        } catch let e as ConfigErrors {
            let message = "\(e)"
            #expect(message.contains("exp/experiment_config.yaml:\(line):\(column): duplicate key"), "\(message)")
            #expect(message.contains("(first at line \(firstLine), column \(column))"), "\(message)")
            #expect(!message.contains("benchmark: local"), "the file is quoted: \(message)")
        }
    }
}
