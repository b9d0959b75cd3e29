import Foundation
@testable import Experiment
@testable import ExperimentModel
import Testing
import TestSupport
import SupervisorIO

@Suite("Experiment lock")
struct ExperimentLockTests {
    @Test("a second lock is refused with the holder's pid, purpose and start time")
    func contentionNamesHolder() throws {
        let dir = try TempDir()
        let path = dir.file("experiment.lock")
        let first = try ExperimentLock(path: path, purpose: "run")
        let error = #expect(throws: ExperimentError.self) { _ = try ExperimentLock(path: path, purpose: "gate") }
        #expect(error?.kind == .locked)
        let text = error?.description ?? ""
        #expect(text.contains("another autoharness (pid \(getpid()), purpose \"run\", since \(first.holder.since))"), "\(text)")
        #expect(text.contains(path))
        #expect(try permissions(path) == 0o600)

        first.release()
        let second = try ExperimentLock(path: path, purpose: "gate")
        #expect(second.holder.purpose == "gate")
    }

    static let childKey = "AUTOHARNESS_LEDGER_LOCK_CHILD"

    @Test("child lock holder for the cross-process test (runs only when that test spawns it)",
          .enabled(if: ProcessInfo.processInfo.environment[ExperimentLockTests.childKey] != nil))
    func lockHolderChild() throws {
        let path = try #require(ProcessInfo.processInfo.environment[Self.childKey])
        let lock = try ExperimentLock(path: path, purpose: "child holder")
        withExtendedLifetime(lock) {
            while true { sleep(60) } // until killed
        }
    }

    @Test("a lock held by another autoharness process names that process, and dies with it")
    func heldByOtherProcess() throws {
        let dir = try TempDir()
        let path = dir.file("experiment.lock")
        let child = try spawnTestChild("lockHolderChild", Self.childKey, path)
        defer { if child.isRunning { kill(child.processIdentifier, SIGKILL); child.waitUntilExit() } }

        let deadline = Date().addingTimeInterval(60)
        var refusal: ExperimentError?
        while refusal == nil {
            try #require(child.isRunning, "the child holder exited (status \(child.terminationStatus))")
            try #require(Date() < deadline, "the child never took the lock")
            do {
                try ExperimentLock(path: path, purpose: "probe").release() // not taken yet
                usleep(10_000)
            } catch {
                refusal = error
            }
        }
        let error = try #require(refusal)
        #expect(error.kind == .locked)
        #expect(error.description.contains("another autoharness (pid \(child.processIdentifier), purpose \"child holder\", since "), "\(error)")

        // kill -9 leaves no stale lock: the kernel drops a flock with its last descriptor.
        kill(child.processIdentifier, SIGKILL)
        child.waitUntilExit()
        let mine = try ExperimentLock(path: path, purpose: "after")
        #expect(mine.holder.pid == getpid())
    }

    /// One process that takes the lock at `path` without writing who it is and keeps it for
    /// `seconds` (exec keeps fd 9, so killing it drops it); returned once it holds it.
    static func namelessHolder(_ path: String, seconds: String) throws -> Process {
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/bin/sh")
        holder.arguments = ["-c", #"exec 9>>"$1" && flock -n 9 && echo locked && exec sleep "$2""#, "sh", path, seconds]
        let out = Pipe()
        holder.standardOutput = out
        try holder.run()
        #expect(String(decoding: out.fileHandleForReading.availableData, as: UTF8.self) == "locked\n")
        return holder
    }

    @Test("a lock whose holder wrote nothing and lets go within a second (a child's copy of a released lock's descriptor, until its exec) is taken after it, not refused")
    func briefNamelessHolderWaitedFor() throws {
        let dir = try TempDir()
        let path = dir.file("experiment.lock")
        let holder = try Self.namelessHolder(path, seconds: "0.3")
        defer { if holder.isRunning { kill(holder.processIdentifier, SIGKILL) }; holder.waitUntilExit() }
        let started = Date()
        let lock = try ExperimentLock(path: path, purpose: "after a brief holder")
        let waited = Date().timeIntervalSince(started)
        #expect(lock.holder.pid == getpid())
        #expect(waited > 0.1 && waited < 1, "waited \(waited) s")
    }

    @Test("a lock held by some other program is refused even though it wrote no details",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/flock")))
    func heldByOtherProgram() throws {
        let dir = try TempDir()
        let path = dir.file("experiment.lock")
        let holder = try Self.namelessHolder(path, seconds: "60")
        defer { kill(holder.processIdentifier, SIGKILL); holder.waitUntilExit() }

        let error = #expect(throws: ExperimentError.self) { _ = try ExperimentLock(path: path, purpose: "run") }
        #expect(error?.kind == .locked)
        #expect(error?.description.contains("another process holds the experiment lock \(path)") == true, "\(String(describing: error))")
    }

    @Test("details left by a dead holder are not a lock")
    func staleContentsIgnored() throws {
        let dir = try TempDir()
        let path = dir.file("experiment.lock")
        try AtomicFile.write(#"{"pid":999999,"purpose":"run","since":"2020-01-01T00:00:00.000Z"}"#, to: path, mode: 0o600)
        let lock = try ExperimentLock(path: path, purpose: "gate")
        let contents = try String(contentsOfFile: path, encoding: .utf8)
        #expect(contents.contains("\"pid\":\(getpid())") && contents.contains("\"purpose\":\"gate\""))
        lock.release()
        lock.release() // idempotent
        #expect(try String(contentsOfFile: path, encoding: .utf8).isEmpty, "release erases the holder details")
    }

    @Test("dropping the lock object releases the lock")
    func deinitReleases() throws {
        let dir = try TempDir()
        let path = dir.file("experiment.lock")
        do { _ = try ExperimentLock(path: path, purpose: "run") }
        _ = try ExperimentLock(path: path, purpose: "run")
    }
}
