import CSandboxLaunch
import Foundation
import TestSupport
import Testing

/// The check the payload and the monitor make before they go on (`ahl_caps_are` in
/// launch.c): every capability set empty and no_new_privs, read from /proc/self/status. A
/// set it failed to read must never count as empty.
@Suite("The launcher's read-back of capabilities (/proc/self/status)")
struct CapabilityCheckTests {
    static let dropped = """
        Name:\tsh
        Umask:\t0022
        State:\tR (running)
        CapInh:\t0000000000000000
        CapPrm:\t0000000000000000
        CapEff:\t0000000000000000
        CapBnd:\t0000000000000000
        CapAmb:\t0000000000000000
        NoNewPrivs:\t1
        Seccomp:\t2

        """

    /// The calling thread's id (Glibc does not export gettid to Swift): /proc/thread-self is
    /// "PID/task/TID".
    static func tid() -> Int32 {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/thread-self")).flatMap { $0.split(separator: "/").last.flatMap { Int32($0) } } ?? -1
    }

    static func verdict(_ text: String, keep: UInt64 = 0) -> Int32 {
        var bytes = Array(text.utf8)
        return bytes.withUnsafeMutableBufferPointer { b in
            b.baseAddress!.withMemoryRebound(to: CChar.self, capacity: b.count) { ahl_status_caps_are($0, b.count, keep) }
        }
    }

    @Test("every set empty and no_new_privs: empty")
    func emptySets() {
        #expect(Self.verdict(Self.dropped) == 1)
    }

    @Test("any one capability left in any set is refused", arguments: ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"])
    func oneLeft(set: String) {
        for value in ["0000000000000001", "0000008000000000", "000001ffffffffff", "a000000000000000"] {
            let text = Self.dropped.replacingOccurrences(of: "\(set):\t0000000000000000", with: "\(set):\t\(value)")
            #expect(text != Self.dropped)
            #expect(Self.verdict(text) == 0, "\(set) \(value)")
        }
    }

    @Test("root on a task's image: exactly the kept set in permitted, effective and bounding, nothing inheritable or ambient; one more, one fewer or any in another set is refused")
    func keptSet() {
        let keep: UInt64 = 0xfb
        func with(_ sets: [String: String]) -> String {
            var text = Self.dropped
            for (set, value) in sets { text = text.replacingOccurrences(of: "\(set):\t0000000000000000", with: "\(set):\t\(value)") }
            return text
        }
        let kept = with(["CapPrm": "00000000000000fb", "CapEff": "00000000000000fb", "CapBnd": "00000000000000fb"])
        #expect(Self.verdict(kept, keep: keep) == 1)
        #expect(Self.verdict(kept) == 0, "the kept set is not empty")
        #expect(Self.verdict(Self.dropped, keep: keep) == 0, "an empty set is not the kept one")
        for (set, value) in [("CapPrm", "00000000000000ff"), ("CapEff", "00000000000000fa"), ("CapBnd", "00000000002000fb")] {
            #expect(Self.verdict(kept.replacingOccurrences(of: "\(set):\t00000000000000fb", with: "\(set):\t\(value)"), keep: keep) == 0, "\(set) \(value)")
        }
        for set in ["CapInh", "CapAmb"] {
            #expect(Self.verdict(kept.replacingOccurrences(of: "\(set):\t0000000000000000", with: "\(set):\t0000000000000001"), keep: keep) == 0, "\(set)")
        }
    }

    @Test("no_new_privs not set is refused")
    func noNewPrivsUnset() {
        #expect(Self.verdict(Self.dropped.replacingOccurrences(of: "NoNewPrivs:\t1", with: "NoNewPrivs:\t0")) == 0)
    }

    @Test("a missing or garbled field is not an answer: the launcher asks by system call instead")
    func unreadable() {
        for field in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs"] {
            let lines = Self.dropped.split(separator: "\n", omittingEmptySubsequences: false).filter { !$0.hasPrefix(field + ":") }
            #expect(Self.verdict(lines.joined(separator: "\n")) == -1, "without \(field)")
        }
        #expect(Self.verdict(Self.dropped.replacingOccurrences(of: "CapBnd:\t0000000000000000", with: "CapBnd:\t")) == -1)
        #expect(Self.verdict(Self.dropped.replacingOccurrences(of: "CapAmb:\t0000000000000000", with: "CapAmb:\t00000000000000zz")) == -1)
        // The kernel writes 16 digits; a short or long value is not its answer.
        #expect(Self.verdict(Self.dropped.replacingOccurrences(of: "CapBnd:\t0000000000000000", with: "CapBnd:\t0")) == -1)
        #expect(Self.verdict(Self.dropped.replacingOccurrences(of: "CapBnd:\t0000000000000000", with: "CapBnd:\t00000000000000000")) == -1)
        // A key only counts at the start of a line, followed by its tab.
        #expect(Self.verdict(Self.dropped.replacingOccurrences(of: "\nCapEff:\t", with: " CapEff:\t")) == -1)
        #expect(Self.verdict("") == -1)
    }

    @Test("this test thread (root, every capability) is not empty by its own /proc/thread-self/status")
    func realStatus() throws {
        try requireRoot()
        let text = try #require(procText("/proc/thread-self/status"))
        #expect(Self.verdict(text) == 0)
        #expect(ahl_status_file_caps_are("/proc/thread-self/status", Self.tid(), 0) == 0)
    }

    @Test("only procfs's own status file is read: an all-empty copy elsewhere is no answer")
    func onlyProcfs() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ah-capcheck-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let fake = dir.appendingPathComponent("status")
        let tid = Self.tid()
        try ("Pid:\t\(tid)\n" + Self.dropped).write(to: fake, atomically: true, encoding: .utf8)
        #expect(Self.verdict(Self.dropped) == 1)
        #expect(ahl_status_file_caps_are(fake.path, tid, 0) == -1)
        #expect(ahl_status_file_caps_are(dir.appendingPathComponent("missing").path, tid, 0) == -1)
    }

    @Test("only the calling thread's status is read: another process's, or the thread group leader's from another thread, is no answer")
    func onlyTheCaller() throws {
        try requireRoot()
        // Host pid 1 holds capabilities: read as someone else's file it must not give 0 either.
        #expect(ahl_status_file_caps_are("/proc/1/status", Self.tid(), 0) == -1)
        // Capabilities and no_new_privs are per thread; /proc/self/status is the leader's.
        final class Box: @unchecked Sendable { var value: [Int32] = [] }  // written before signal, read after wait
        let box = Box()
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            let tid = Self.tid()
            box.value = [ahl_status_file_caps_are("/proc/self/status", tid, 0), ahl_status_file_caps_are("/proc/thread-self/status", tid, 0),
                          tid == getpid() ? 1 : 0]
            done.signal()
        }
        thread.start()
        done.wait()
        #expect(box.value == [-1, 0, 0], "\(box.value)")
    }
}
