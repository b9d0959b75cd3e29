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
}
