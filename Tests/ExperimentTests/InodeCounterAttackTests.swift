import Foundation
import Testing
import TestSupport

/// Tests that read kernel-wide counters, so no other test may run beside them: scripts/test
/// runs every suite whose name starts with `RunAlone` after the rest, one at a time
/// (`swift test --no-parallel --filter RunAlone`), and skips them in the parallel run. Sandboxes of other
/// tests move the same counters (every held-out phase on the host now scrambles them).
///
/// The memfd inode-number counter as a channel out of the held-out split, mounted for real on
/// the host runtime: an agent.py that, in chosen tasks, leaves every CPU's memfd batch at a
/// position it picks (no pinning: sched_setaffinity is refused; it checks which CPU it ran on),
/// and a reader task that prints the position the next memfd gets. Train to train (the
/// control, never scrambled) the reader finds the position; held-out to train it does not.
@Suite("The inode-number counter channel (run alone)", .serialized)
struct RunAloneInodeCounterTests {
    /// `setters`: ids whose run leaves every CPU's memfd position at `value`; `reader`: the id
    /// whose run prints `LOW cpu position` of its first memfd.
    static func agent(value: Int, setters: [String], reader: String) -> String {
        let marks = setters.map { "'MARKER-\($0)-a91f'" }.joined(separator: ", ")
        return """
            import ctypes, os, time
            libc = ctypes.CDLL(None)
            def set_position(value):
                cpus = sorted(os.sched_getaffinity(0))
                kids = []
                for _ in cpus:
                    pid = os.fork()
                    if pid == 0:
                        end = time.monotonic() + 8
                        while time.monotonic() < end and not all(os.path.exists('/tmp/done-%d' % c) for c in cpus):
                            c = libc.sched_getcpu()
                            if os.path.exists('/tmp/done-%d' % c):
                                continue
                            fd = os.memfd_create('x'); ino = os.fstat(fd).st_ino; os.close(fd)
                            if ino % 1024 == value and libc.sched_getcpu() == c:
                                open('/tmp/done-%d' % c, 'w').close()
                        os._exit(0)
                    kids.append(pid)
                for k in kids:
                    os.waitpid(k, 0)
                print('SET', [c for c in cpus if os.path.exists('/tmp/done-%d' % c)])
            class HarnessAgent:
                def run(self, instruction, workdir):
                    if 'MARKER-\(reader)-a91f' in instruction:
                        c = libc.sched_getcpu()
                        fd = os.memfd_create('probe'); ino = os.fstat(fd).st_ino
                        print('LOW', c, libc.sched_getcpu(), ino % 1024)
                    elif any(m in instruction for m in [\(marks)]):
                        set_position(\(value))
            """
    }

    /// How far past `value` the reader's first memfd landed (its CPU's position moved by the
    /// sandboxes started in between), read from its trace.
    static func distance(_ exp: Experiment, reader: String, value: Int) throws -> Int {
        let b = try exp.run("benchmark", "--task-ids", reader)
        #expect(b.status == 0 || b.status == 1, "\(b.stdout) \(b.stderr)")
        let trace = files(under: exp.root + "/workspace/traces/latest/\(reader)", containing: "LOW ").first
        let text = try String(contentsOfFile: try #require(trace, "no trace with the position"), encoding: .utf8)
        let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("LOW ") })
        let f = line.split(separator: " ").compactMap { Int($0) }
        try #require(f.count == 3)
        return ((f[2] - value - 1) % 1024 + 1024) % 1024
    }

    @Test("train to train the reader finds the position the setter left; after a gate whose held-out tasks set it, the position is scrambled")
    func heldOutPositionScrambled() throws {
        try requireRoot()
        let exp = try Experiment()
        let (train, test) = try exp.split()
        let setter = train[0], reader = train[1]
        // Control: a train run sets the position, the next train run reads it back (within
        // what its own sandbox's start took).
        // Up to three tries: sandboxes of other tests running beside this one move the
        // counter too (the control only has to show the channel exists).
        try exp.setAgent(Self.agent(value: 300, setters: [setter], reader: reader))
        var control: [Int] = []
        for _ in 0..<3 where !control.contains(where: { $0 < 16 }) {
            let s = try exp.run("benchmark", "--task-ids", setter)
            #expect(s.status == 0 || s.status == 1, "\(s.stderr)")
            control.append(try Self.distance(exp, reader: reader, value: 300))
        }
        #expect(control.contains { $0 < 16 }, "control: the reader landed \(control) past the position the setter left")
        // The attack: held-out tasks set the position, the next train run reads it. Twice,
        // with two values: a scrambled position lands within 16 by chance 1.6% of the time.
        var distances: [Int] = []
        for value in [700, 900] {
            try exp.setAgent(Self.agent(value: value, setters: test, reader: reader))
            let g = try exp.run("gate")
            #expect(g.stderr.contains("moved the inode-number counters by"), "\(g.stderr)")
            distances.append(try Self.distance(exp, reader: reader, value: value))
        }
        #expect(distances.contains { $0 >= 16 }, "held-out positions read back: \(distances) (control \(control))")
    }

    /// An agent.py whose `setters` make `sessions` sessions each (a child per `setsid`, as
    /// Python's `start_new_session` does) and whose `reader` prints its own autogroup's id
    /// (`/proc/self/autogroup`: the launcher made the session it runs in).
    static func sessionAgent(sessions: Int, setters: [String], reader: String) -> String {
        let marks = setters.map { "'MARKER-\($0)-a91f'" }.joined(separator: ", ")
        return """
            import os
            class HarnessAgent:
                def run(self, instruction, workdir):
                    if 'MARKER-\(reader)-a91f' in instruction:
                        print('AG', open('/proc/self/autogroup').read().split()[0].split('-')[1])
                    elif any(m in instruction for m in [\(marks)]):
                        for _ in range(\(sessions)):
                            pid = os.fork()
                            if pid == 0:
                                os.setsid(); os._exit(0)
                            os.waitpid(pid, 0)
            """
    }

    /// The autogroup id the reader's sandbox got.
    static func sessionID(_ exp: Experiment, reader: String) throws -> Int {
        let b = try exp.run("benchmark", "--task-ids", reader)
        #expect(b.status == 0 || b.status == 1, "\(b.stdout) \(b.stderr)")
        let trace = files(under: exp.root + "/workspace/traces/latest/\(reader)", containing: "AG ").first
        let text = try String(contentsOfFile: try #require(trace, "no trace with the autogroup id"), encoding: .utf8)
        let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("AG ") })
        return try #require(Int(line.dropFirst(3)), "\(line)")
    }

    @Test("the session serial: train to train a reader reads a setter's count of setsid calls exactly; across a gate whose held-out tasks made them, the count is buried in noise")
    func heldOutSessionsScrambled() throws {
        try requireRoot()
        let exp = try Experiment()
        let (train, test) = try exp.split()
        let setter = train[0], reader = train[1]
        // Control: the reader's id moves by what the setter's run made, plus the sessions the
        // launches in between made (the same each time): a difference of two runs decodes it.
        func trainDelta(_ sessions: Int) throws -> Int {
            try exp.setAgent(Self.sessionAgent(sessions: sessions, setters: [setter], reader: reader))
            let before = try Self.sessionID(exp, reader: reader)
            let s = try exp.run("benchmark", "--task-ids", setter)
            #expect(s.status == 0 || s.status == 1, "\(s.stderr)")
            return try Self.sessionID(exp, reader: reader) - before
        }
        var control: [Int] = []
        for _ in 0..<3 where !control.contains(where: { abs($0 - 300) < 8 }) {
            control.append(try trainDelta(300) - trainDelta(0))
        }
        #expect(control.contains { abs($0 - 300) < 8 }, "control: a train setter's 300 sessions read back as \(control)")
        // The attack: held-out tasks make 0, then 300 sessions each; the reader's ids around
        // each gate. The gates do the same work but for the sessions (neither is accepted).
        func gateDelta(_ sessions: Int) throws -> Int {
            try exp.setAgent(Self.sessionAgent(sessions: sessions, setters: test, reader: reader))
            let before = try Self.sessionID(exp, reader: reader)
            let g = try exp.run("gate")
            #expect(g.stderr.contains("and the session serial by"), "\(g.stderr)")
            return try Self.sessionID(exp, reader: reader) - before
        }
        let sent = 300 * test.count
        var decoded: [Int] = []
        for _ in 0..<2 { decoded.append(try gateDelta(300) - gateDelta(0)) }
        print("session serial: train control \(control) for 300; held-out \(decoded) for \(sent)")
        // Noise of two uniform draws below 16,384 per CPU: within 8 of the truth by chance
        // about once in 2,000 per try, twice in a row never.
        #expect(decoded.contains { abs($0 - sent) >= 8 }, "held-out sessions read back: \(decoded) for \(sent) (control \(control))")
    }

    @Test("a held-out agent.py that advances the kernel's memfd inode counter moves the host's counter under the host runtime (control) and not under the VM")
    func inodeCounterChannelClosedByVM() throws {
        try HeldOutVMTests.requireVM()
        let host = try Experiment()
        let (hostTrain, hostTest) = try host.split()
        try host.setAgent(HeldOutVMTests.counterAgent(consumeIn: hostTest))
        let hostDelta = try HeldOutVMTests.inodeDelta(host, train: hostTrain[0])
        // Every held-out task's burst: the control proves the attack reads the counter.
        let burst = HeldOutVMTests.counterBurst
        #expect(hostDelta >= burst * hostTest.count - 1024, "host runtime: the counter moved by \(hostDelta)")

        let vm = try Experiment(config: HeldOutVMTests.vm)
        let (vmTrain, vmTest) = try vm.split()
        try vm.setAgent(HeldOutVMTests.counterAgent(consumeIn: vmTest))
        let vmDelta = try HeldOutVMTests.inodeDelta(vm, train: vmTrain[0])
        // What the gate's own host sandboxes (promotion) used: each CPU may take one more batch
        // of 1024, and the probe reads within a batch of the shared counter. A quarter of one
        // held-out task's burst, so one held-out task's burst would fail this.
        print("memfd counter moved by \(hostDelta) (host runtime) and \(vmDelta) (vm runtime)")
        let cpus = ProcessInfo.processInfo.activeProcessorCount
        #expect(1024 * (cpus + 1) < burst / 4)
        #expect(vmDelta < 1024 * (cpus + 1), "vm runtime: the counter moved by \(vmDelta) (host runtime: \(hostDelta))")
    }
}
