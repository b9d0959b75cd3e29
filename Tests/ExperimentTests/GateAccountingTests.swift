import Foundation
import Testing
import TestSupport

@testable import Experiment
@testable import ExperimentModel

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

extension GateAccountingTests {
    @Test("a gate whose pre-held-out check refuses runs no held-out task, and still counts as started")
    func heldOutGuardStopsTheGate() throws {
        try requireRoot()
        let exp = try Experiment()
        try exp.setAgent(Agents.all)
        let supervisor = try ExperimentSupervisor(layout: ExperimentLayout(root: exp.root),
                                                  policySearchPaths: [Built.packageRoot + "/policies"], purpose: "test")
        final class Seen: @unchecked Sendable { var heldOut = 0 }
        let seen = Seen()
        supervisor.progress = { _, _, outcome in if outcome == nil { seen.heldOut += 1 } }
        struct NotFrozen: Error {}
        #expect(throws: NotFrozen.self) { try supervisor.gate { throw NotFrozen() } }
        #expect(seen.heldOut == 0, "held-out tasks ran after the check refused")
        #expect(try supervisor.state().gatesStarted == 1)
    }
}

@Suite("What the operator sees is what happened")
struct OperatorViewTests {
    @Test("a refused task id with a newline cannot forge a line in status --operator, and a huge request is recorded capped")
    func refusedIDsEscapedAndCapped() throws {
        try requireRoot()
        let exp = try Experiment()
        let forged = "add-0\nFORGED: coding agent: nothing happened"
        let r = try exp.run("benchmark", "--task-ids", forged)
        #expect(r.status == 2, "\(r.stdout) \(r.stderr)")
        #expect(!r.stderr.split(separator: "\n").contains { $0.hasPrefix("FORGED") }, "\(r.stderr)")
        let many = (0..<5000).map { "x\($0)-" + String(repeating: "y", count: 40) }
        let big = try exp.run(["benchmark", "--task-ids"] + many)
        #expect(big.status == 2)
        let status = try exp.run("status", "--operator")
        #expect(!status.stdout.split(separator: "\n").contains { $0.hasPrefix("FORGED") }, "\(status.stdout)")
        #expect(status.stdout.contains("add-0\\x0aFORGED"), "\(status.stdout)")
        let details = try exp.violations().compactMap { $0["detail"] as? String }
        #expect(details.allSatisfy { $0.count <= 4096 + 1 }, "\(details.map(\.count))")
        #expect(details.contains { $0.contains("requested 5000 ids") })
    }
}

extension GateAccountingTests {
    @Test("a supervisor stopped between recording an accepted gate and publishing its commit: verify reports the commit as not yet published (ok), the next start publishes it; an older accepted commit off the branch is missing")
    func commitRecordedNotPublished() throws {
        try requireRoot()
        let exp = try Experiment(config: ["min_improvement": "0"])
        try exp.setAgent(Agents.addOnly)
        let a: String, b: String
        do {
            let first = try ExperimentSupervisor(layout: ExperimentLayout(root: exp.root),
                                                 policySearchPaths: [Built.packageRoot + "/policies"], purpose: "test")
            let ga = try first.gate()
            a = try #require(ga.commit, "\(ga.reason)")
            try exp.setAgent(Agents.all)
            let gb = try first.gate()
            b = try #require(gb.commit, "\(gb.reason)")
            // What a SIGKILL after the ledger append and before `git update-ref` leaves.
            _ = try first.git.run(["update-ref", "HEAD", a, b])
            let cut = try first.verify()
            #expect(cut.ok, "\(cut.missingCommits)")
            #expect(cut.unpublishedCommits == [b])
            #expect(cut.missingCommits.isEmpty)
        }
        let next = try ExperimentSupervisor(layout: ExperimentLayout(root: exp.root),
                                            policySearchPaths: [Built.packageRoot + "/policies"], purpose: "test")
        let after = try next.verify()
        #expect(after.ok && after.unpublishedCommits.isEmpty && after.missingCommits.isEmpty)
        #expect(next.git.isPublished(b))
        // Only the latest iteration's commit is rolled forward: one further back is missing.
        _ = try next.git.run(["update-ref", "HEAD", "\(a)^", b])
        let lost = try next.verify()
        #expect(!lost.ok)
        #expect(lost.missingCommits == [a])
        #expect(lost.unpublishedCommits == [b])
    }
}
