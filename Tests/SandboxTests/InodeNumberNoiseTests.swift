import Foundation
import Testing
import TestSupport

import CSystemCalls
@testable import Sandbox

/// The inode-number counters a held-out task can move and a later task can read (pipes,
/// sockets: `get_next_ino`; memfds: the internal shmem mount's), scrambled by the supervisor
/// after every held-out phase on the host.
/// Run alone by scripts/test (see RunAloneInodeCounterTests): it reads kernel-wide counters.
@Suite("Inode-number counters after held-out sandboxes (run alone)", .serialized)
struct RunAloneInodeNumberNoiseTests {
    /// A process pinned to `cpu` that prints the number of a fresh memfd and pipe, waits for a
    /// line on stdin, and prints them again: the reader's view of the counters on that CPU.
    static let reader = """
        import os, sys
        os.sched_setaffinity(0, {int(sys.argv[1])})
        def numbers():
            fd = os.memfd_create('probe'); m = os.fstat(fd).st_ino; os.close(fd)
            r, w = os.pipe(); p = os.fstat(r).st_ino; os.close(r); os.close(w)
            return m, p
        print(*numbers(), flush=True)
        sys.stdin.readline()
        print(*numbers(), flush=True)
        """

    /// (memfd, pipe) advance on `cpu` across `between`, less the reader's own numbers.
    static func advance(cpu: Int, between: () -> Void) throws -> (memfd: Int, pipe: Int) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        p.arguments = ["-c", reader, String(cpu)]
        let input = Pipe(), output = Pipe()
        p.standardInput = input
        p.standardOutput = output
        try p.run()
        let lines = output.fileHandleForReading
        func read() throws -> [Int] {
            var line = Data()
            while let b = try lines.read(upToCount: 1), !b.isEmpty, b != Data("\n".utf8) { line += b }
            return String(decoding: line, as: UTF8.self).split(separator: " ").compactMap { Int($0) }
        }
        let before = try read()
        between()
        input.fileHandleForWriting.write(Data("go\n".utf8))
        let after = try read()
        p.waitUntilExit()
        try #require(before.count == 2 && after.count == 2, "reader printed \(before) \(after)")
        return (after[0] - before[0] - 1, after[1] - before[1] - 1)
    }

    @Test("after perturb() the position of each CPU's memfd and pipe batches is random (without it, the next numbers follow on), and whole batches are added")
    func perturbScramblesEveryCPU() throws {
        try requireRoot()
        let cpus = Array(0..<ProcessInfo.processInfo.activeProcessorCount)
        for cpu in cpus {
            // Control: with nothing in between the counters advance by (almost) nothing, so
            // the reader sees what a held-out task left. One look can land on a CPU batch's
            // last number (its next number then comes from a fresh batch, whole batches later:
            // CI once saw exactly 4096), and other processes on the CPU add; both only add, so
            // the least of three looks is the control.
            var looks: [(memfd: Int, pipe: Int)] = []
            for _ in 0..<3 { looks.append(try Self.advance(cpu: cpu) {}) }
            let still = looks.min { max(abs($0.memfd), abs($0.pipe)) < max(abs($1.memfd), abs($1.pipe)) }!
            #expect(abs(still.memfd) < 64 && abs(still.pipe) < 64, "CPU \(cpu): \(looks)")
            var low: (memfd: Set<Int>, pipe: Set<Int>) = ([], [])
            var total = 0
            for _ in 0..<10 {
                var report = InodeNumberNoise.Report()
                let a = try Self.advance(cpu: cpu) { report = InodeNumberNoise.perturb() }
                #expect(report.failure == nil, "\(report)")
                #expect(report.cpus == cpus.count)
                low.memfd.insert(a.memfd % 1024)
                low.pipe.insert(a.pipe % 1024)
                total += a.memfd + a.pipe
            }
            // Ten uniform draws out of 1024 collide rarely: fewer than 8 distinct is ~1e-6.
            #expect(low.memfd.count >= 8 && low.pipe.count >= 8, "CPU \(cpu): \(low)")
            // On average 512 + 7.5 batches per counter and round.
            #expect(total > 10 * 2 * 2048, "CPU \(cpu): \(total)")
        }
    }

    @Test("after perturb() the host's process serial (a pidfd's inode number, Linux 6.5+) has moved by a random count of threads, at least what the report says")
    func perturbMovesThePidSerial() throws {
        try requireRoot()
        var moved: Set<Int> = []
        for _ in 0..<3 {
            let before = ahs_pid_serial()
            try #require(before > 0, "no pidfd inode numbers on this kernel (\(before)): pidfs is Linux 6.5+")
            let report = InodeNumberNoise.perturb()
            let after = ahs_pid_serial()
            #expect(report.failure == nil, "\(report)")
            #expect(Int(after - before) >= report.threads, "serial moved \(after - before), report \(report)")
            moved.insert(report.threads)
        }
        // Uniform draws below 16,384 per CPU: three equal in a row would be a fixed amount.
        #expect(moved.count >= 2, "\(moved)")
    }

    @Test("after perturb() the host's session serial (/proc/PID/autogroup's id, moved by every setsid) has moved by a random count, exactly what the report says; after a VM's phase it is left")
    func perturbMovesTheSessionSerial() throws {
        try requireRoot()
        // Control: with nothing in between, the next session's id is the one after (the
        // serial is what a sandbox reads, and nothing else on the host moved it).
        var still: [Int64] = []
        for _ in 0..<3 {
            let a = ahs_autogroup_serial()
            try #require(a > 0, "no autogroup ids on this kernel (\(a)): CONFIG_SCHED_AUTOGROUP")
            still.append(ahs_autogroup_serial() - a)
        }
        #expect(still.contains(1), "\(still)")
        var moved: Set<Int> = []
        for _ in 0..<3 {
            let before = ahs_autogroup_serial()
            let report = InodeNumberNoise.perturb()
            let after = ahs_autogroup_serial()
            #expect(report.failure == nil, "\(report)")
            // Every process the noise made made its session (not fewer: a setsid that failed
            // would leave the serial where a held-out phase put it).
            #expect(Int(after - before) - 1 >= report.sessions, "serial moved \(after - before), report \(report)")
            #expect(report.description.contains("the session serial by \(report.sessions) on"), "\(report)")
            moved.insert(report.sessions)
        }
        #expect(moved.count >= 2, "\(moved)")
        // After a VM's phase the sessions its guest made were the guest kernel's.
        let vm = InodeNumberNoise.perturb(onHost: false)
        #expect(vm.sessions == 0 && vm.failure == nil, "\(vm)")
    }
}
