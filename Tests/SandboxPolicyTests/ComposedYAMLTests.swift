import Foundation
import Testing

@testable import SandboxPolicy

@Suite("policy files parsed once per process")
struct ComposedYAMLTests {
    static let policy = """
        # composed-cache test
        filesystem:
          mounts:
            - rw: "{workdir}:/app"
        limits:
          pids: 64
        """

    @Test("loading one file again with other placeholder values reuses its tree and still fills in each load's values")
    func reusedTreeKeepsPlaceholdersPerLoad() throws {
        let dir = try PolicyDirectory(["p.yaml": Self.policy])
        let first = try dir.load("p", variables: ["workdir": "/scratch/aaaa/app"])
        // The cache is process-wide and emptied whole when full: suites running beside this one
        // can fill it between a load and the look. A cache that keeps nothing fails every try.
        var kept = ComposedYAML.contains(Self.policy)
        for _ in 0..<5 where !kept {
            _ = try dir.load("p", variables: ["workdir": "/scratch/aaaa/app"])
            kept = ComposedYAML.contains(Self.policy)
        }
        #expect(kept)
        let second = try dir.load("p", variables: ["workdir": "/scratch/bbbb/app"])
        #expect(first.mounts == [MountSpec(kind: .readWrite(source: "/scratch/aaaa/app"), destination: "/app")])
        #expect(second.mounts == [MountSpec(kind: .readWrite(source: "/scratch/bbbb/app"), destination: "/app")])
    }

    @Test("a file changed in any byte is parsed afresh: the cache is keyed by the whole text")
    func changedFileIsReparsed() throws {
        let dir = try PolicyDirectory(["p.yaml": Self.policy])
        #expect(try dir.load("p", variables: ["workdir": "/w"]).limits.pids == 64)
        try dir.write("p.yaml", Self.policy.replacingOccurrences(of: "pids: 64", with: "pids: 65"))
        #expect(try dir.load("p", variables: ["workdir": "/w"]).limits.pids == 65)
        try dir.write("p.yaml", Self.policy.replacingOccurrences(of: "pids: 64", with: "pids: [64"))
        let errors = dir.errors("p", variables: ["workdir": "/w"])
        #expect(errors.count == 1 && errors[0].where_.hasPrefix("p.yaml:"))
    }
}

@Suite("policy layers without placeholders kept whole")
struct ConstantLayerTests {
    @Test("a file without placeholders is walked once; its errors come back on every load, and an edit is seen")
    func constantLayerKeptWithItsErrors() throws {
        let base = "limits:\n  pids: 7\n"
        let dir = try PolicyDirectory(["child.yaml": "extends: base\nfilesystem:\n  mounts:\n    - rw: \"{workdir}:/app\"\n", "base.yaml": base])
        #expect(try dir.load("child", variables: ["workdir": "/w1"]).limits.pids == 7)
        let kept = try #require(ComposedYAML.constantLayer(text: base, file: dir.path + "/base.yaml", name: "base"))
        #expect(kept.1.isEmpty && kept.0.limits.pids == 7)
        // The child (with a placeholder) is never kept whole: each load has its own value.
        #expect(try dir.load("child", variables: ["workdir": "/w2"]).mounts == [MountSpec(kind: .readWrite(source: "/w2"), destination: "/app")])
        // An unknown key is an error every time, not only on the first load.
        try dir.write("base.yaml", "limits:\n  pids: 7\n  pidz: 8\n")
        #expect(dir.errors("child", variables: ["workdir": "/w"]).count == 1)
        #expect(dir.errors("child", variables: ["workdir": "/w"]).count == 1)
        try dir.write("base.yaml", "limits:\n  pids: 9\n")
        #expect(try dir.load("child", variables: ["workdir": "/w"]).limits.pids == 9)
    }
}
