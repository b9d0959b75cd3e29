import Foundation
@testable import Sandbox
import SandboxPolicy
import Testing
import TestSupport

/// The payload's pid as the supervisor sees it (`RunOptions.findPayloadPID`): what a verifier's
/// reward files are judged against (only the test script's own process may write them).
@Suite("The payload's pid, as the supervisor sees it")
struct PayloadPIDTests {
    static func plan() throws -> LaunchPlan {
        try PlanCompiler.compile(policy: Policy(name: "pid", mounts: minimalMounts, limits: Limits()), command: ["/bin/true"], hostEnvironment: [:])
    }

    @Test("known from the payload's own message even when the payload ended before the supervisor read any of its reports (a short test script under load voided an honest reward)")
    func knownAfterAQuickEnd() throws {
        try requireRoot()
        var options = RunOptions()
        options.findPayloadPID = true
        // By the time the fork's report is read, /bin/true has ended and been reaped: init's
        // children no longer show it.
        options.delayAtPayloadStartForTests = 0.3
        let r = try SandboxRunner.run(try Self.plan(), options: options)
        #expect(r.termination == .exited(0))
        let pid = try #require(r.payloadPID, "the payload's pid was not learnt")
        #expect(pid > 1 && pid != getpid())
    }

    @Test("not looked up unless asked")
    func notAsked() throws {
        try requireRoot()
        let r = try SandboxRunner.run(try Self.plan(), options: RunOptions())
        #expect(r.termination == .exited(0) && r.payloadPID == nil)
    }
}
