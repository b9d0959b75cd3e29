import Foundation
@testable import SupervisorIO
import Testing
import TestSupport

/// The cache's trust rules: these fail if a check on where the cache lives is removed.
@Suite("Root-owned cache directories")
struct RootOwnedCacheTests {
    @Test("a cache under a directory other users can write (not sticky) is neither read nor written")
    func writableAncestorRefused() throws {
        try requireRoot()
        let top = try TempDir(mode: 0o755)
        let dir = top.path + "/cache/kind"
        RootOwnedCache.store(key: "k", suffix: ".x", body: [1, 2, 3], in: dir)
        #expect(RootOwnedCache.load(key: "k", suffix: ".x", in: dir) == [1, 2, 3])
        chmod(top.path, 0o777)  // anyone may now rename cache/ away and put their own in
        #expect(RootOwnedCache.load(key: "k", suffix: ".x", in: dir) == nil)
        RootOwnedCache.store(key: "k2", suffix: ".x", body: [4], in: dir)
        chmod(top.path, 0o755)
        #expect(RootOwnedCache.load(key: "k2", suffix: ".x", in: dir) == nil, "stored through an untrusted path")
        chmod(top.path, 0o1777)  // sticky, like /tmp: others cannot move root's entries
        #expect(RootOwnedCache.load(key: "k", suffix: ".x", in: dir) == [1, 2, 3])
    }

    @Test("a symlink on the way to the cache directory, or as it, is not followed")
    func symlinkRefused() throws {
        try requireRoot()
        let top = try TempDir(mode: 0o755)
        let dir = top.path + "/real/kind"
        RootOwnedCache.store(key: "k", suffix: ".x", body: [7], in: dir)
        #expect(RootOwnedCache.load(key: "k", suffix: ".x", in: dir) == [7])
        #expect(symlink(top.path + "/real", top.path + "/link") == 0)
        #expect(RootOwnedCache.load(key: "k", suffix: ".x", in: top.path + "/link/kind") == nil)
        #expect(symlink(dir, top.path + "/real/kind-link") == 0)
        #expect(RootOwnedCache.load(key: "k", suffix: ".x", in: top.path + "/real/kind-link") == nil)
    }

    @Test("a writer's temporary file left by a kill goes at the next store once a minute old; a fresh one stays")
    func staleTemporariesRemoved() throws {
        try requireRoot()
        let top = try TempDir(mode: 0o755)
        let dir = top.path + "/cache/kind"
        RootOwnedCache.store(key: "k", suffix: ".x", body: [1], in: dir)
        let old = dir + "/" + RootOwnedCache.fileName("old", suffix: ".x") + ".tmp.99999"
        let fresh = dir + "/" + RootOwnedCache.fileName("fresh", suffix: ".x") + ".tmp.99998"
        FileManager.default.createFile(atPath: old, contents: Data([0]))
        FileManager.default.createFile(atPath: fresh, contents: Data([0]))
        var times = [timespec(tv_sec: time(nil) - 120, tv_nsec: 0), timespec(tv_sec: time(nil) - 120, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, old, &times, 0) == 0)
        RootOwnedCache.store(key: "k2", suffix: ".x", body: [2], in: dir)
        #expect(!FileManager.default.fileExists(atPath: old))
        #expect(FileManager.default.fileExists(atPath: fresh))
    }

    @Test("a key longer than the cap is not stored")
    func longKeyNotStored() throws {
        try requireRoot()
        let top = try TempDir(mode: 0o755)
        let dir = top.path + "/cache/kind"
        let key = String(repeating: "v", count: RootOwnedCache.maxKeyBytes + 1)
        RootOwnedCache.store(key: key, suffix: ".x", body: [1], in: dir)
        #expect(RootOwnedCache.load(key: key, suffix: ".x", in: dir) == nil)
        #expect((try? FileManager.default.contentsOfDirectory(atPath: dir))?.isEmpty ?? true)
    }
}
