import Foundation
import Glibc
@testable import Sandbox
import Testing
import TestSupport

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
    }

    @Test("an owner numbered in another pid namespace is alive while a process of that namespace has its pid, and gone once it ends (seen from the initial pid namespace)")
    func ownerInAnotherPidNamespace() throws {
        try requireRoot()
        try #require(ProcessIdentity.current.pidNamespace == ProcessIdentity.initialPidNamespace, "these tests run in the initial pid namespace")
        // A process that is pid 1 of a pid namespace of its own.
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        p.arguments = ["--pid", "--fork", "--kill-child", "/bin/sleep", "30"]
        try p.run()
        defer { if p.isRunning { kill(p.processIdentifier, SIGKILL) }; p.waitUntilExit() }
        var inner: (ns: UInt64, start: UInt64)?
        for _ in 0..<100 where inner == nil {
            usleep(20_000)
            for entry in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] {
                guard let pid = Int32(entry), let text = procText("/proc/\(pid)/stat") else { continue }
                let fields = text.split(separator: ")").last?.split(separator: " ") ?? []
                guard fields.count > 19, Int32(fields[1]) == p.processIdentifier, let start = UInt64(fields[19]) else { continue }
                // "pid:[INODE]"
                if let link = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/ns/pid"),
                   let ino = UInt64(link.filter(\.isNumber)) { inner = (ino, start) }
            }
        }
        let (ns, start) = try #require(inner, "unshare's child did not start")
        #expect(ns != ProcessIdentity.current.pidNamespace)
        let owner = ProcessIdentity(pid: 1, startTime: start, pidNamespace: ns)
        #expect(owner.isAlive)
        #expect(!ProcessIdentity(pid: 2, startTime: start, pidNamespace: ns).isAlive, "no pid 2 there")
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        for _ in 0..<100 where owner.isAlive { usleep(20_000) }
        #expect(!owner.isAlive, "the namespace's only process ended")
        // A namespace no process is in.
        #expect(!ProcessIdentity(pid: 999_999, startTime: 1, pidNamespace: ProcessIdentity.current.pidNamespace + 1).isAlive)
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
