import Foundation
import SupervisorIO
import Testing
import TestSupport

@Suite("Atomic file writes")
struct AtomicFileTests {
    @Test("writes the content with the requested mode and leaves no temporary file")
    func writesAndCleansUp() throws {
        let dir = try TempDir()
        let path = dir.file("results.tsv")
        try AtomicFile.write(Array("one\n".utf8), to: path)
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "one\n")
        #expect(try permissions(path) == 0o644)
        try AtomicFile.write(Array("two\n".utf8), to: path, mode: 0o600)
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "two\n")
        #expect(try permissions(path) == 0o600)
        try AtomicFile.write("", to: path)
        #expect(try String(contentsOfFile: path, encoding: .utf8) == "")
        #expect(try dir.entries() == ["results.tsv"])
    }

    @Test("replacement is atomic: readers see the old or the new content, never a mix")
    func replacementIsAtomic() throws {
        let dir = try TempDir()
        let path = dir.file("suite.json")
        let a = [UInt8](repeating: UInt8(ascii: "a"), count: 256 * 1024)
        let b = [UInt8](repeating: UInt8(ascii: "b"), count: 256 * 1024)
        try AtomicFile.write(a, to: path)

        // A descriptor opened before a replacement keeps the old file: it was renamed over,
        // not rewritten in place.
        let old = try #require(FileHandle(forReadingAtPath: path))
        try AtomicFile.write(b, to: path)
        #expect(try old.readToEnd().map([UInt8].init) == a)
        try old.close()

        let stop = SharedValue(false)
        let torn = SharedValue(0)
        let reads = SharedValue(0)
        let reader = Thread {
            while !stop.withLock({ $0 }) {
                guard let data = FileManager.default.contents(atPath: path) else {
                    torn.withLock { $0 += 1 } // the name must never be missing
                    continue
                }
                let bytes = [UInt8](data)
                if bytes != a && bytes != b { torn.withLock { $0 += 1 } }
                reads.withLock { $0 += 1 }
            }
        }
        reader.start()
        for i in 0..<200 { try AtomicFile.write(i % 2 == 0 ? a : b, to: path) }
        stop.withLock { $0 = true }
        while !reader.isFinished { usleep(1_000) }
        #expect(torn.withLock { $0 } == 0)
        #expect(reads.withLock { $0 } > 0)
        #expect(try dir.entries() == ["suite.json"])
    }

    @Test("a failed write leaves the target and the directory as they were")
    func failureLeavesNoTrace() throws {
        let dir = try TempDir()
        let target = dir.file("view")
        try FileManager.default.createDirectory(atPath: target, withIntermediateDirectories: false)
        let error = #expect(throws: IOFailure.self) { try AtomicFile.write("x", to: target) }
        #expect(error?.errno == EISDIR && error?.path == target, "\(String(describing: error))")
        #expect(try dir.entries() == ["view"])

        let missing = #expect(throws: IOFailure.self) { try AtomicFile.write("x", to: dir.file("no/such/dir/file")) }
        #expect(missing?.errno == ENOENT)
    }

    @Test("a symbolic link at the target is replaced, never followed")
    func symlinkReplacedNotFollowed() throws {
        let dir = try TempDir()
        let victim = dir.file("victim")
        try AtomicFile.write("secret", to: victim)
        try FileManager.default.createSymbolicLink(atPath: dir.file("view"), withDestinationPath: victim)
        try AtomicFile.write("view", to: dir.file("view"))
        #expect(try String(contentsOfFile: victim, encoding: .utf8) == "secret")
        #expect(try String(contentsOfFile: dir.file("view"), encoding: .utf8) == "view")
        #expect((try? FileManager.default.destinationOfSymbolicLink(atPath: dir.file("view"))) == nil)
    }
}
