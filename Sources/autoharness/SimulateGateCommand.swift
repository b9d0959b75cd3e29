import ArgumentParser
import Experiment
import ExperimentModel
import Foundation

struct SimulateGateCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate-gate",
        abstract: "Measure the gate's false- and true-accept rates on a simulated benchmark.",
        discussion: """
            No experiment, no sandbox: each acceptance rule (gate.accept: margin, at_least_best, \
            paired) is the gate's own code, fed pass counts of a simulated held-out split. \
            Per loop, the best accepted agent.py's pass probabilities are drawn (30 % of tasks \
            never pass, 30 % always, 40 % with a uniform probability) and its gate runs each \
            task --trials times; a candidate with the same probabilities is gated against it \
            (an acceptance is a false accept), a trade (on each task always passing or never, \
            passing with the best's probability: no better on average, also a false accept), \
            and one --improvement better, the gain put on tasks in a random order, each raised \
            to 1 before the next (a true accept). Seeded: \
            the same arguments print the same table. Use it to choose gate.trials and \
            gate.alpha for a held-out split of your size (docs/loop.md); \
            scripts/bench-gate-noise prints the table in docs/measurements.md.
            """)

    @Option(help: "Held-out tasks (the test split's size).")
    var tasks = 34

    @Option(help: "Trials per task (gate.trials), comma-separated.")
    var trials = "1,3,5"

    @Option(help: "Simulated gates per rule and trial count.")
    var loops = 200

    @Option(help: "gate.alpha of the paired rule.")
    var alpha = 0.05

    @Option(help: "The better candidate's gain in mean pass probability (0.10: ten points).")
    var improvement = 0.10

    @Option(help: "Seed of the draws.")
    var seed: UInt64 = 1

    func validate() throws {
        guard tasks >= 1 else { throw ValidationError("--tasks must be at least 1, not \(tasks)") }
        guard loops >= 1 else { throw ValidationError("--loops must be at least 1, not \(loops)") }
        guard alpha > 0 && alpha < 1 else { throw ValidationError("--alpha must lie strictly between 0 and 1, not \(alpha)") }
        guard improvement > 0 && improvement <= 1 else { throw ValidationError("--improvement must lie in (0, 1], not \(improvement)") }
        _ = try trialCounts()
    }

    func trialCounts() throws -> [Int] {
        let parts = trials.split(separator: ",", omittingEmptySubsequences: false)
        return try parts.map { part in
            guard let k = Int(part.trimmingCharacters(in: .whitespaces)), (1...GateTrials.maximum).contains(k) else {
                throw ValidationError("--trials: '\(part)' is not a trial count from 1 to \(GateTrials.maximum)")
            }
            return k
        }
    }

    func run() throws {
        var sim = GateNoiseSimulation()
        (sim.tasks, sim.trials, sim.loops, sim.alpha, sim.improvement, sim.seed) = (tasks, try trialCounts(), loops, alpha, improvement, seed)
        let points = Int((improvement * 100).rounded())
        print("simulate-gate: \(tasks) held-out tasks, \(loops) loops per row, alpha \(alpha), better candidate +\(points) points, seed \(seed)")
        print("rule           trials  false-accept  trade-accept  true-accept(+\(points))")
        let rows = sim.run()
        func cell(_ text: String, _ width: Int) -> String { text.padding(toLength: width, withPad: " ", startingAt: 0) }
        for r in rows {
            print(cell(r.rule, 15) + cell(String(r.trials), 8) + cell(String(format: "%.3f", r.falseAccept), 14)
                + cell(String(format: "%.3f", r.tradeAccept), 14) + String(format: "%.3f", r.trueAccept))
        }
        print("(conditional: the exact stratified test gate.accept: paired does not use; a trade is no better on average)")
        // The two figures the gate's noise study reads, last, for scripts to read.
        if let paired = rows.first(where: { $0.rule == "paired" && $0.trials == 3 }) {
            print("false-accept rate (paired, k=3): \(String(format: "%.3f", paired.falseAccept))")
            print("true-accept rate at +\(points) points (paired, k=3): \(String(format: "%.3f", paired.trueAccept))")
        }
    }
}
