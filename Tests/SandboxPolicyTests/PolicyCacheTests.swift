import Foundation
import PolicyModel
import PolicyStore
import SupervisorIO
import Testing

@testable import SandboxPolicy

private let allShipped = ["base", "benchmark-task", "verifier", "coding-agent", "benchmark-runner", "benchmark-scorer", "triage"]

/// A policy directory and a cache directory of the test's own (root-owned, 0700).
private final class Scratch {
    let root = NSTemporaryDirectory() + "ah-policy-cache-" + UUID().uuidString.prefix(8).lowercased()
    var policies: String { root + "/policies" }
    var cache: String { root + "/cache/policy" }
    init() throws {
        try FileManager.default.createDirectory(atPath: policies, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: root + "/cache", withIntermediateDirectories: true)
        chmod(root + "/cache", 0o700)
    }
    deinit { try? FileManager.default.removeItem(atPath: root) }

    func write(_ name: String, _ text: String, in dir: String? = nil) throws {
        try text.write(toFile: (dir ?? policies) + "/" + name, atomically: true, encoding: .utf8)
    }
    func loader(_ paths: [String]? = nil) -> PolicyLoader {
        var l = PolicyLoader(searchPaths: paths ?? [policies])
        l.usesCache = true
        l.cacheDirectory = cache
        return l
    }
    /// Replaces the policy recorded for `name` (layers and all else kept) with `planted`,
    /// as a well-formed entry: what a hit returns is then recognisably the entry's.
    func plant(_ name: String, variables: [String: String] = [:], over stored: Policy, with planted: Policy) throws {
        let key = PolicyCache.key(searchPaths: [policies], nameOrPath: name, variables: variables, strict: true)
        var body = try #require(RootOwnedCache.load(key: key, suffix: PolicyCache.suffix, in: cache))
        let old = PolicyCoding.encode(stored)
        try #require(Array(body.suffix(old.count)) == old)
        body.removeLast(old.count)
        RootOwnedCache.store(key: key, suffix: PolicyCache.suffix, body: body + PolicyCoding.encode(planted), in: cache)
    }
    /// The cache's entries (files).
    var entries: [String] { ((try? FileManager.default.contentsOfDirectory(atPath: cache)) ?? []).sorted() }
}

@Suite("The binary form of a policy (PolicyCoding)")
struct PolicyCodingTests {
    /// Every stored property of every type PolicyCoding writes. A new field fails here until
    /// PolicyCoding writes and reads it (and this count is raised).
    @Test("PolicyCoding knows every stored property of the policy's types")
    func everyFieldIsCoded() {
        #expect(Mirror(reflecting: Policy(name: "x")).children.count == 11)
        #expect(Mirror(reflecting: MountSpec(kind: .hide, destination: "/x")).children.count == 7)
        #expect(Mirror(reflecting: SourceLocation(file: "f", line: 1)).children.count == 3)
        #expect(Mirror(reflecting: Identity()).children.count == 6)
        #expect(Mirror(reflecting: SeccompSpec()).children.count == 7)
        #expect(Mirror(reflecting: NetworkSpec()).children.count == 2)
        #expect(Mirror(reflecting: Limits()).children.count == 8)
        #expect(Mirror(reflecting: EnvSpec()).children.count == 2)
    }

    @Test("every shipped policy, and one that sets every field, decode to what was encoded, mount locations included")
    func roundTrip() throws {
        let loader = PolicyLoader(searchPaths: [shippedPolicies])
        var policies = try allShipped.map { try loader.load($0, requireAllPlaceholders: false) }
        policies.append(Policy(
            name: "all", description: "every field", lineage: ["base", "all"],
            mounts: [
                MountSpec(kind: .readOnly(source: "/usr"), destination: "/usr", location: SourceLocation(file: "a.yaml", line: 3, column: 7)),
                MountSpec(kind: .readWrite(source: "/w"), destination: "/w", optional: true, keepSymlink: true, noSymlinks: true),
                MountSpec(kind: .tmpfs(size: 1 << 20, mode: 0o1777), destination: "/tmp"),
                MountSpec(kind: .tmpfs(size: nil, mode: 0o755), destination: "/t2"),
                MountSpec(kind: .hide, destination: "/usr/secret"),
                MountSpec(kind: .symlink(target: "usr/bin"), destination: "/bin"),
            ],
            identity: Identity(uid: 1, gid: 2, hostUID: 3, hostGID: 4, span: 5, hostname: "h\u{e9}"),
            seccomp: SeccompSpec(profile: "p", defaultAction: .kill, allow: ["read"], deny: ["ptrace"], quiet: ["bpf"], watchLinks: ["/tests"]),
            network: NetworkSpec(mode: .proxy, allow: ["example.com:443"]),
            limits: Limits(nofile: 1, nproc: 2, fsize: 3, cpuSeconds: 4, memory: 5, pids: 6, cpus: 1.5, timeoutSeconds: 0.25),
            env: EnvSpec(set: ["A": "1", "B": "two words"], pass: ["TERM"]), chdir: "/w", landlock: .required))
        policies.append(Policy(name: "errno", seccomp: SeccompSpec(defaultAction: .errno(-1))))
        for p in policies {
            let decoded = try #require(PolicyCoding.decode(PolicyCoding.encode(p)), "\(p.name)")
            #expect(decoded == p, "\(p.name)")
            #expect(decoded.mounts.map(\.location) == p.mounts.map(\.location), "\(p.name)")  // == ignores locations
        }
    }

    @Test("truncated, extended or corrupted bytes decode to nothing, never to another policy")
    func malformed() throws {
        let p = try PolicyLoader(searchPaths: [shippedPolicies]).load("benchmark-task", requireAllPlaceholders: false)
        let bytes = PolicyCoding.encode(p)
        for n in stride(from: 0, to: bytes.count, by: max(1, bytes.count / 200)) {
            #expect(PolicyCoding.decode(Array(bytes[..<n])) == nil, "truncated to \(n)")
        }
        #expect(PolicyCoding.decode(bytes + [0]) == nil)
        // A mount kind, a bool and a network mode out of range.
        var bad = bytes
        let firstMount = 4 + p.name.utf8.count + 1 + (p.description.map { 4 + $0.utf8.count } ?? 0)
            + 4 + p.lineage.reduce(0) { $0 + 4 + $1.utf8.count } + 4
        bad[firstMount] = 9
        #expect(PolicyCoding.decode(bad) == nil)
    }
}

@Suite("The loaded-policy cache (PolicyLoader.usesCache)")
struct PolicyCacheTests {
    @Test("a second load comes from the cache, equal to a fresh load, and no file is parsed for it")
    func hit() throws {
        try #require(geteuid() == 0, "the cache is root's")
        let s = try Scratch()
        try s.write("base.yaml", "filesystem:\n  mounts:\n    - ro: /usr\n")
        try s.write("child.yaml", "extends: base\nlimits:\n  pids: 7\n")
        let first = try s.loader().load("child", variables: ["x": "1"])
        #expect(s.entries.count == 1)
        // Replace the recorded policy with another: a hit returns that, which shows the hit
        // path is the one taken (no parse happened).
        try s.plant("child", variables: ["x": "1"], over: first,
                    with: Policy(name: "from-the-cache", lineage: first.lineage, mounts: first.mounts, limits: first.limits))
        #expect(try s.loader().load("child", variables: ["x": "1"]).name == "from-the-cache")
        // Without the cache, or with other variables, it is loaded afresh.
        var plain = s.loader()
        plain.usesCache = false
        #expect(try plain.load("child", variables: ["x": "1"]) == first)
        #expect(try s.loader().load("child", variables: ["x": "2"]).name == "child")
    }

    @Test("an edited parent layer, a new file that now shadows the recorded parent, a parent removed: each is a miss, and the fresh load is stored")
    func invalidation() throws {
        try #require(geteuid() == 0, "the cache is root's")
        let s = try Scratch()
        try s.write("base.yaml", "limits:\n  pids: 10\n")
        try s.write("child.yaml", "extends: base\n")
        #expect(try s.loader().load("child").limits.pids == 10)
        #expect(try s.loader().load("child").limits.pids == 10)

        // The parent, not the file asked for, changes: the cache must notice.
        try s.write("base.yaml", "limits:\n  pids: 11\n")
        #expect(try s.loader().load("child").limits.pids == 11)
        #expect(try s.loader().load("child").limits.pids == 11)

        // A child elsewhere that extends the search path's base; then a base.yaml appears
        // beside it, which now wins: the recorded parent is still there, unchanged, but it is
        // no longer the file a load would read.
        let sub = s.root + "/sub"
        try FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true)
        try s.write("child.yaml", "extends: base\n", in: sub)
        #expect(try s.loader([sub, s.policies]).load("child").limits.pids == 11)
        #expect(try s.loader([sub, s.policies]).load("child").limits.pids == 11)
        try s.write("base.yaml", "limits:\n  pids: 12\n", in: sub)
        #expect(try s.loader([sub, s.policies]).load("child").limits.pids == 12)
        try FileManager.default.removeItem(atPath: sub + "/base.yaml")
        #expect(try s.loader([sub, s.policies]).load("child").limits.pids == 11)

        // A parent removed: the load fails as it would without a cache.
        try FileManager.default.removeItem(atPath: s.policies + "/base.yaml")
        #expect(throws: PolicyDiagnostics.self) { try s.loader().load("child") }
    }

    @Test("a layer edited from K to U+212A KELVIN SIGN (equal as Swift strings, not as bytes) is a miss")
    func canonicallyEquivalentEditIsAMiss() throws {
        try #require(geteuid() == 0, "the cache is root's")
        let s = try Scratch()
        try s.write("p.yaml", "env:\n  set:\n    A: \"\u{212A}\"\n")
        #expect(try s.loader().load("p").env.set["A"].map { Array($0.utf8) } == Array("\u{212A}".utf8))
        try s.write("p.yaml", "env:\n  set:\n    A: \"K\"\n")
        #expect(try s.loader().load("p").env.set["A"].map { Array($0.utf8) } == Array("K".utf8))
    }

    @Test("an entry or directory that is not root's alone is never used", arguments: ["file group-writable", "directory group-writable", "file not root's"])
    func untrusted(how: String) throws {
        try #require(geteuid() == 0, "the cache is root's")
        let s = try Scratch()
        try s.write("p.yaml", "limits:\n  pids: 5\n")
        let fresh = try s.loader().load("p")
        try s.plant("p", over: fresh, with: Policy(name: "planted", lineage: ["p"]))
        let entry = s.cache + "/" + s.entries[0]
        #expect(try s.loader().load("p").name == "planted")  // the planted entry is well-formed
        switch how {
        case "file group-writable": chmod(entry, 0o620)
        case "directory group-writable": chmod(s.cache, 0o770)
        default: chown(entry, 65534, 65534)
        }
        #expect(try s.loader().load("p").name == "p")
    }

    @Test("a failed load stores nothing; a corrupt entry is a miss that the next load replaces")
    func failuresAndCorruption() throws {
        try #require(geteuid() == 0, "the cache is root's")
        let s = try Scratch()
        try s.write("bad.yaml", "limits:\n  pids: lots\n")
        #expect(throws: PolicyDiagnostics.self) { try s.loader().load("bad") }
        #expect(s.entries.isEmpty)
        try s.write("p.yaml", "limits:\n  pids: 5\n")
        _ = try s.loader().load("p")
        let entry = s.cache + "/" + s.entries[0]
        let good = try Data(contentsOf: URL(fileURLWithPath: entry))
        try Data(good.dropLast(3)).write(to: URL(fileURLWithPath: entry))
        chmod(entry, 0o600)
        #expect(try s.loader().load("p").limits.pids == 5)
        #expect(try Data(contentsOf: URL(fileURLWithPath: entry)) == good)
    }
}
