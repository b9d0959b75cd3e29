import Foundation
import Sandbox
import Testing

@Suite("Owners of leftovers: pid, start time and pid namespace")
struct ProcessIdentityTests {
    @Test("an identity names one process: alive while it runs, gone once reaped, and a reused pid does not stand in for it")
    func aliveOnlyWhileThatProcessRuns() throws {
        let me = ProcessIdentity.current
        #expect(me.isAlive)
        #expect(ProcessIdentity.of(me.pid) == me)
        // The pid of a child that has been reaped.
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/true")
        try p.run()
        p.waitUntilExit()
        let reaped = ProcessIdentity(pid: p.processIdentifier, startTime: me.startTime, pidNamespace: me.pidNamespace)
        #expect(ProcessIdentity.of(p.processIdentifier) == nil && !reaped.isAlive)
        // A process that now has this pid but started at another time is not the owner.
        let reused = ProcessIdentity(pid: me.pid, startTime: me.startTime - 1, pidNamespace: me.pidNamespace)
        #expect(!reused.isAlive)
        // A pid of another pid namespace cannot be checked from here: left alone.
        let elsewhere = ProcessIdentity(pid: 999_999, startTime: 1, pidNamespace: me.pidNamespace + 1)
        #expect(elsewhere.isAlive)
    }

    @Test("the tag written into names reads back as the same identity; anything else is no owner")
    func tagRoundTrip() {
        let me = ProcessIdentity.current
        #expect(me.tag == "o\(me.pid)-\(me.startTime)-\(me.pidNamespace)")
        #expect(ProcessIdentity(tag: Substring(me.tag)) == me)
        for bad in ["", "o", "o1-2", "x1-2-3", "o1-2-3-4", "o-1-2-3", "o0-2-3", "oa-2-3", "o1--3"] {
            #expect(ProcessIdentity(tag: Substring(bad)) == nil, "\(bad)")
        }
    }
}
