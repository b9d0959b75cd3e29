import Foundation
import Testing
import TestSupport

@testable import Experiment

/// Every gate looks at the held-out split, so every gate is counted from the moment it
/// starts, whatever happens to its outcome.
@Suite("Gates are counted before they run")
struct GateAccountingTests {
    @Test("a gate whose outcome was never written keeps its attempt number: the next gate gets a new one, and recovery records it as interrupted")
    func attemptNumbersNeverReused() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.setAgent(Agents.addOnly)
        do {
            let supervisor = try ExperimentSupervisor(layout: ExperimentLayout(root: exp.root),
                                                      policySearchPaths: [Built.packageRoot + "/policies"], purpose: "test")
            // What a gate leaves when its start row was written and its outcome was not (a
            // full disk after the held-out tasks ran): the same process gates again.
            _ = try supervisor.ledger.append(.gateStarted, GateStartedRecord(attempt: 1, agentSHA256: String(repeating: "0", count: 64)))
            let r = try supervisor.gate()
            #expect(r.attempt == 2)
            let s = try supervisor.state()
            #expect(s.gatesStarted == 2)
            #expect(s.openGates.map(\.attempt) == [1])
        }
        // A new supervisor records the cut-off gate as interrupted; numbering goes on.
        let supervisor = try ExperimentSupervisor(layout: ExperimentLayout(root: exp.root),
                                                  policySearchPaths: [Built.packageRoot + "/policies"], purpose: "test")
        let s = try supervisor.state()
        #expect(s.openGates.isEmpty)
        #expect(s.gateAttempts.first { $0.attempt == 1 }?.reason == "interrupted")
        try exp.setAgent(Agents.all)
        #expect(try supervisor.gate().attempt == 3)
        let attempts = try supervisor.state().gateAttempts.map(\.attempt)
        #expect(Set(attempts).count == attempts.count, "attempt numbers reused: \(attempts)")
    }
}
