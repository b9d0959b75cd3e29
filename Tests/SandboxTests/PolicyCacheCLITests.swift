import Foundation
import Testing
import TestSupport

/// `sandbox exec` loads its policy through the cache (PolicyCache): a launch after an edit
/// must get the edited policy, not the cached one.
@Suite("sandbox exec's policy cache, end to end")
struct PolicyCacheCLITests {
    @Test("a policy made stricter between launches binds the next one: the file it now hides is refused")
    func editBindsTheNextLaunch() throws {
        try requireRoot()
        let dir = try TempDir()
        let data = dir.path + "/data"
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        try "SECRET".write(toFile: data + "/secret", atomically: false, encoding: .utf8)
        let cache = dir.path + "/cache"
        #expect(mkdir(cache, 0o700) == 0)
        let policy = try dir.file("p.yaml", "extends: base\nfilesystem:\n  mounts:\n    - ro: \(data)\n")
        var env = ProcessInfo.processInfo.environment
        env["AUTOHARNESS_CACHE_DIR"] = cache
        let command = ["sandbox", "exec", "--policy", policy, "--", "/usr/bin/cat", data + "/secret"]

        for _ in 0..<2 {
            let r = try autoharness(command, environment: env)
            #expect(r.status == 0 && r.stdout == "SECRET", "\(r.status) \(r.stdout) \(r.stderr)")
        }
        let entries = try FileManager.default.contentsOfDirectory(atPath: cache + "/policy").filter { $0.hasSuffix(".policy") }
        #expect(entries.count == 1, "the launches did not go through the cache: \(entries)")

        _ = try dir.file("p.yaml", "extends: base\nfilesystem:\n  mounts:\n    - ro: \(data)\n    - hide: \(data)/secret\n")
        let r = try autoharness(command, environment: env)
        #expect(r.status != 0 && !r.stdout.contains("SECRET"), "\(r.status) \(r.stdout) \(r.stderr)")
    }

    @Test("another binary, or the same one rebuilt in place, never reuses the policy and seccomp caches' entries")
    func binaryIdentityKeysBothCaches() throws {
        try requireRoot()
        let dir = try TempDir()
        let cache = dir.path + "/cache"
        #expect(mkdir(cache, 0o700) == 0)
        // A copy of the binary and its launcher: another inode, so another identity.
        let bin = dir.path + "/bin"
        try FileManager.default.createDirectory(atPath: bin, withIntermediateDirectories: false)
        chmod(bin, 0o755)
        let copy = bin + "/autoharness"
        try copyExecutable(Built.autoharness, to: copy)
        try copyExecutable(Built.directory + "/autoharness-launch", to: bin + "/autoharness-launch")
        var env = ProcessInfo.processInfo.environment
        env["AUTOHARNESS_CACHE_DIR"] = cache
        env.removeValue(forKey: "AUTOHARNESS_LAUNCHER")
        // The copy finds no policies next to itself: both are given the same directory.
        let command = ["sandbox", "exec", "--policy-dir", Built.packageRoot + "/policies", "--policy", "base", "--", "/bin/true"]
        func entries() throws -> (policy: Int, seccomp: Int) {
            let policy = try FileManager.default.contentsOfDirectory(atPath: cache + "/policy").filter { $0.hasSuffix(".policy") }.count
            let seccomp = try FileManager.default.contentsOfDirectory(atPath: cache + "/seccomp").filter { $0.hasSuffix(".bpf") }.count
            return (policy, seccomp)
        }
        func launch(_ exe: String) throws {
            let r = try runProcess(exe, command, environment: env)
            #expect(r.status == 0, "\(exe): \(r.stderr)")
        }
        try launch(Built.autoharness)
        try launch(Built.autoharness)
        #expect(try entries() == (1, 1))
        try launch(copy)
        #expect(try entries() == (2, 2), "the copy reused the original binary's entries")
        try launch(copy)
        #expect(try entries() == (2, 2))
        // Rewritten in place (same inode, same size): the modification time alone moves.
        var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000_000, tv_nsec: 0)]
        #expect(utimensat(AT_FDCWD, copy, &times, 0) == 0)
        try launch(copy)
        #expect(try entries() == (3, 3), "the rewritten binary reused its earlier entries")
    }
}
