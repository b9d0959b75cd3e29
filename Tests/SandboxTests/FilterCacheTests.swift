import Foundation
@testable import Sandbox
import Testing

/// The seccomp program cache is trusted input to every sandbox: these tests fail if any of
/// its checks (exact key, root ownership, no group/other write) is removed.
@Suite("Seccomp filter cache")
struct FilterCacheTests {
    let bpf: [UInt8] = Array(repeating: 0x06, count: 16)  // two RET instructions

    @Test("a stored program is found again under the same key, and only that key")
    func roundTrip() throws {
        try requireRoot()
        let dir = try TempDir(mode: 0o700)
        FilterCache.store(key: "key-a", bpf: bpf, in: dir.path)
        #expect(FilterCache.load(key: "key-a", in: dir.path) == bpf)
        #expect(FilterCache.load(key: "key-b", in: dir.path) == nil)
    }

    @Test("a file whose header is not exactly the key is ignored")
    func tamperedKeyIgnored() throws {
        try requireRoot()
        let dir = try TempDir(mode: 0o700)
        let path = dir.path + "/" + FilterCache.fileName("key-a")
        try Data(Array("key-x".utf8) + [0] + bpf).write(to: URL(fileURLWithPath: path))
        chmod(path, 0o600)
        #expect(FilterCache.load(key: "key-a", in: dir.path) == nil)
    }

    @Test("a group/world-writable cache file is ignored")
    func writableFileIgnored() throws {
        try requireRoot()
        let dir = try TempDir(mode: 0o700)
        FilterCache.store(key: "k", bpf: bpf, in: dir.path)
        chmod(dir.path + "/" + FilterCache.fileName("k"), 0o666)
        #expect(FilterCache.load(key: "k", in: dir.path) == nil)
    }

    @Test("a cache file not owned by root is ignored")
    func foreignOwnerIgnored() throws {
        try requireRoot()
        let dir = try TempDir(mode: 0o700)
        FilterCache.store(key: "k", bpf: bpf, in: dir.path)
        #expect(FilterCache.load(key: "k", in: dir.path) == bpf)
        chown(dir.path + "/" + FilterCache.fileName("k"), 65534, 65534)
        #expect(FilterCache.load(key: "k", in: dir.path) == nil)
    }

    @Test("a writable cache directory is not trusted")
    func writableDirectoryIgnored() throws {
        try requireRoot()
        let dir = try TempDir(mode: 0o700)
        FilterCache.store(key: "k", bpf: bpf, in: dir.path)
        chmod(dir.path, 0o777)
        #expect(FilterCache.load(key: "k", in: dir.path) == nil)
    }
}
