import Foundation
import PolicyModel
@testable import Sandbox
import SupervisorIO
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
        // A well-formed entry for key-x, under key-a's file name.
        FilterCache.store(key: "key-x", bpf: bpf, in: dir.path)
        #expect(rename(dir.path + "/" + FilterCache.fileName("key-x"), dir.path + "/" + FilterCache.fileName("key-a")) == 0)
        #expect(FilterCache.load(key: "key-a", in: dir.path) == nil)
        #expect(FilterCache.load(key: "key-x", in: dir.path) == nil)
    }

    @Test("an entry cut short at an instruction boundary, or with one byte changed, is not a shorter program")
    func truncatedOrDamagedIgnored() throws {
        try requireRoot()
        let dir = try TempDir(mode: 0o700)
        let program: [UInt8] = (0..<64).map { UInt8($0) }  // eight instructions
        FilterCache.store(key: "k", bpf: program, in: dir.path)
        let path = dir.path + "/" + FilterCache.fileName("k")
        let whole = Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        #expect(FilterCache.load(key: "k", in: dir.path) == program)
        // Cut after the fourth instruction (and its recorded length and hash fixed up would
        // need the hash: without them the length check fails; with the length patched, the hash).
        let bodyStart = whole.count - 8 - program.count
        var cut = Array(whole[..<(bodyStart + 32)])
        try Data(cut).write(to: URL(fileURLWithPath: path))
        #expect(FilterCache.load(key: "k", in: dir.path) == nil)
        cut.replaceSubrange((bodyStart - 8)..<bodyStart, with: [32, 0, 0, 0, 0, 0, 0, 0])
        try Data(cut + whole.suffix(8)).write(to: URL(fileURLWithPath: path))
        #expect(FilterCache.load(key: "k", in: dir.path) == nil)
        var damaged = whole
        damaged[bodyStart + 9] ^= 1
        try Data(damaged).write(to: URL(fileURLWithPath: path))
        #expect(FilterCache.load(key: "k", in: dir.path) == nil)
        try Data(whole).write(to: URL(fileURLWithPath: path))
        #expect(FilterCache.load(key: "k", in: dir.path) == program)
    }

    @Test("a directory past its entry limit keeps the newest half")
    func pruned() throws {
        try requireRoot()
        let dir = try TempDir(mode: 0o700)
        for i in 0...RootOwnedCache.maxEntries {
            FilterCache.store(key: "k\(i)", bpf: bpf, in: dir.path)
            var times = [timespec(tv_sec: 1_000_000 + i, tv_nsec: 0), timespec(tv_sec: 1_000_000 + i, tv_nsec: 0)]
            _ = utimensat(AT_FDCWD, dir.path + "/" + FilterCache.fileName("k\(i)"), &times, 0)
        }
        // The store of the last one (entry limit + 1) pruned the oldest.
        let left = try FileManager.default.contentsOfDirectory(atPath: dir.path).count
        #expect(left == RootOwnedCache.maxEntries / 2)
        #expect(FilterCache.load(key: "k\(RootOwnedCache.maxEntries)", in: dir.path) == bpf)
        #expect(FilterCache.load(key: "k0", in: dir.path) == nil)
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

    @Test("a whole compiled section is read back as compiled, under its own key only")
    func sectionRoundTrip() throws {
        try requireRoot()
        let dir = try TempDir(mode: 0o700)
        let spec = SeccompSpec(allow: ["mincore"], deny: ["socket"], quiet: ["inotify_init1"])
        let fresh = try SeccompCompiler.compileUncached(spec)
        let key = FilterCache.sectionKey(spec)
        FilterCache.storeSection(key: key, filter: fresh, in: dir.path)
        let back = try #require(FilterCache.loadSection(key: key, in: dir.path))
        #expect(back.bpf == fresh.bpf)
        #expect(back.allowedNames == fresh.allowedNames)
        #expect(back.denied == fresh.denied)
        #expect(back.unresolved == fresh.unresolved)
        #expect(back.eperm == fresh.eperm)
        #expect(back.enosys == fresh.enosys)
        #expect(back.emulated == fresh.emulated)
        #expect(back.quiet == fresh.quiet)
        #expect(back.quietNumbers == fresh.quietNumbers)
        #expect(back.defaultAction == fresh.defaultAction)
        // Every part of the section is in the key: the same names moved to another list, or
        // another default action, is another entry.
        let others = [SeccompSpec(allow: ["mincore"], deny: [], quiet: ["socket", "inotify_init1"]),
                      SeccompSpec(allow: ["mincore", "socket"], deny: [], quiet: ["inotify_init1"]),
                      SeccompSpec(defaultAction: .kill, allow: ["mincore"], deny: ["socket"], quiet: ["inotify_init1"])]
        for other in others {
            #expect(FilterCache.sectionKey(other) != key)
            #expect(FilterCache.loadSection(key: FilterCache.sectionKey(other), in: dir.path) == nil)
        }
        // A damaged body is not a filter.
        let file = dir.path + "/" + RootOwnedCache.fileName(key, suffix: ".section")
        var bytes = try #require(FileManager.default.contents(atPath: file))
        bytes[bytes.count - 3] ^= 0xff
        try bytes.write(to: URL(fileURLWithPath: file))
        #expect(FilterCache.loadSection(key: key, in: dir.path) == nil)
    }
}
