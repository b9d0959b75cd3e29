import CSystemCalls
import Foundation
@testable import Sandbox
import Testing
import TestSupport

/// `DeferredClose`, which holds finished sandboxes' mount namespaces (`NamespaceRelease`) until
/// a payload starts: a descriptor handed over stays open until `closeHeld()` or until the
/// oldest held one has waited `settleSeconds`. Each test watches a pipe's read end for the
/// hang-up that the write end's close makes.
@Suite("Descriptors closed later, by a thread of their own")
struct DeferredCloseTests {
    /// A pipe whose write end is handed over: `closed` says whether it was closed yet.
    final class Watched {
        let readEnd: Int32
        let writeEnd: Int32
        init() throws {
            var p: [Int32] = [-1, -1]
            guard pipe(&p) == 0 else { throw POSIXError(.EMFILE) }
            (readEnd, writeEnd) = (p[0], p[1])
        }
        deinit { close(readEnd) }
        var closed: Bool {
            var p = pollfd(fd: readEnd, events: 0, revents: 0)
            return poll(&p, 1, 0) == 1 && p.revents & Int16(POLLHUP) != 0
        }
        /// Seconds until `closed`, at most `limit` (nil: still open then).
        func secondsUntilClosed(limit: Double) -> Double? {
            let start = Date()
            while Date().timeIntervalSince(start) < limit {
                if closed { return Date().timeIntervalSince(start) }
                usleep(2_000)
            }
            return closed ? Date().timeIntervalSince(start) : nil
        }
    }

    /// Two pipes whose write ends are handed to `releaser`.
    static func twoHandedOver(to releaser: DeferredClose) throws -> (Watched, Watched) {
        let a = try Watched(), b = try Watched()
        releaser.close(a.writeEnd)
        releaser.close(b.writeEnd)
        return (a, b)
    }

    @Test("held until closeHeld(), then closed at once")
    func heldUntilAsked() throws {
        let releaser = DeferredClose(settleSeconds: 30)
        let (a, b) = try Self.twoHandedOver(to: releaser)
        usleep(200_000)
        #expect(!a.closed && !b.closed, "closed before it was asked to (the old release closed at once)")
        #expect(releaser.closedCount == 0)
        releaser.closeHeld()
        #expect(a.secondsUntilClosed(limit: 5) != nil)
        #expect(b.secondsUntilClosed(limit: 5) != nil)
        #expect(releaser.closedCount == 2)
    }

    @Test("without closeHeld(), closed once the oldest has waited settleSeconds")
    func closedAfterSettling() throws {
        let releaser = DeferredClose(settleSeconds: 0.5)
        let a = try Watched(), b = try Watched()
        let start = Date()
        releaser.close(a.writeEnd)
        usleep(300_000)
        // A later arrival does not push the first one's deadline back.
        releaser.close(b.writeEnd)
        #expect(!a.closed)
        #expect(a.secondsUntilClosed(limit: 10) != nil)
        let waited = Date().timeIntervalSince(start)
        #expect(waited >= 0.45, "closed after \(waited) s")
        #expect(waited < 5, "closed after \(waited) s: the deadline was pushed back")
        #expect(b.secondsUntilClosed(limit: 5) != nil)
    }

    @Test("closeNow() closes what is held before it returns (the held-out eviction needs the sandboxes' tmpfs pages freed)")
    func closedNow() throws {
        let releaser = DeferredClose(settleSeconds: 30)
        let (a, b) = try Self.twoHandedOver(to: releaser)
        #expect(!a.closed && !b.closed)
        releaser.closeNow()
        #expect(a.closed && b.closed, "still open when closeNow() returned")
        #expect(releaser.closedCount == 2)
        // Nothing is closed twice afterwards (the thread's turn finds nothing).
        releaser.closeHeld()
        usleep(100_000)
        #expect(releaser.closedCount == 2)
    }

    @Test("closeHeld() with nothing held is harmless; the thread keeps working")
    func emptyCloseHeld() throws {
        let releaser = DeferredClose(settleSeconds: 30)
        releaser.closeHeld()
        let a = try Watched()
        releaser.close(a.writeEnd)
        usleep(100_000)
        #expect(!a.closed)
        releaser.closeHeld()
        #expect(a.secondsUntilClosed(limit: 5) != nil)
    }

    @Test("a fanotify group waiting to be closed holds no open: FanotifyRelease flushes its marks first (unflushed and unread, the same group held an open)")
    func fanotifyGroupsFlushedBeforeTheyWait() throws {
        try requireRoot()
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("ah-fanotify-\(getpid())").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        #expect(mount("tmpfs", dir, "tmpfs", 0, "size=1m") == 0)
        defer { umount2(dir, Int32(MNT_DETACH)); rmdir(dir) }
        try "x\n".write(toFile: dir + "/f", atomically: false, encoding: .utf8)
        var blocking: Int32 = 0
        let group = ahs_open_watch(dir, &blocking)
        try #require(group >= 0 && blocking == 1, "no fanotify permission events here (errno \(errno))")
        // Whatever happens below, closing the group lets every held open go (an opener held by
        // a permission event cannot be killed: it waits uninterruptibly).
        let closer = DeferredClose(settleSeconds: 30)
        var handedOver = false
        defer { if handedOver { closer.closeNow() } else { close(group) } }
        func cat() throws -> Process {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/cat")
            p.arguments = [dir + "/f"]
            p.standardOutput = FileHandle.nullDevice
            try p.run()
            return p
        }
        func exits(_ p: Process, within seconds: Double) -> Bool {
            let end = Date().addingTimeInterval(seconds)
            while p.isRunning && Date() < end { usleep(10_000) }
            return !p.isRunning
        }
        // The control: the group, unread, holds an open.
        let first = try cat()
        #expect(!exits(first, within: 1), "an unread permission group did not hold the open")
        // Handed to a closer that waits 30 s: a new open goes through at once.
        FanotifyRelease.release(group, to: closer)
        handedOver = true
        let second = try cat()
        #expect(exits(second, within: 5) && second.terminationStatus == 0, "held by a group waiting to be closed")
        closer.closeNow()
        #expect(exits(first, within: 5) && first.terminationStatus == 0, "the held open was not let go when the group closed")
        #expect(closer.closedCount == 1)
    }
}
