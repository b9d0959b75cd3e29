import Foundation
import Testing
import TestSupport

@testable import Experiment
@testable import ExperimentModel

/// `RunnerBinds.refuse`: the one check every adapter makes on runner.binds.
@Suite("runner.binds never expose held-out data", .serialized)
struct RunnerBindsTests {
    @Test("the data itself, an ancestor, a symlink to either, a path through `..`, another bind mount of an ancestor, and a directory inside the data are refused; a sibling is not")
    func aliasesRefused() throws {
        try requireRoot()
        let t = try TempDir()
        let data = t.path + "/bench/data"
        for d in [data + "/tasks", t.path + "/bench/tools", t.path + "/alias"] {
            try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true)
        }
        try FileManager.default.createSymbolicLink(atPath: t.path + "/link-bench", withDestinationPath: t.path + "/bench")
        try FileManager.default.createSymbolicLink(atPath: t.path + "/link-data", withDestinationPath: data)
        // Another name for the same directory that no string comparison connects: a bind mount.
        let m = try runProcess("/bin/mount", ["--bind", t.path + "/bench", t.path + "/alias"])
        try #require(m.status == 0, "\(m.stderr)")
        defer { _ = try? runProcess("/bin/umount", [t.path + "/alias"]) }
        let protected = [RunnerBinds.Protected(path: data, what: "contains the data")]
        func refused(_ bind: String) -> Bool {
            do {
                try RunnerBinds.refuse([t.path + "/bench/tools", bind], exposing: protected)
                return false
            } catch {
                #expect("\(error)".contains("runner.binds: \(bind) contains the data") || "\(error)".contains("runner.binds: \(bind) lies inside \(data)"), "\(error)")
                return true
            }
        }
        for bind in [data, t.path + "/bench", t.path, "/", t.path + "/link-bench", t.path + "/link-data",
                     t.path + "/bench/tools/../data", t.path + "/alias", data + "/tasks", t.path + "/alias/data/tasks"] {
            #expect(refused(bind), "\(bind) was allowed")
        }
        for bind in [t.path + "/bench/tools", t.path + "/bench/data-other"] {
            #expect(!refused(bind), "\(bind) was refused")
        }
        // A checkout whose own virtualenv may be bound (BIRD's ADK): only binds over it count.
        try RunnerBinds.refuse([data + "/tasks"], exposing: [.init(path: data, what: "contains the data", inside: false)])
    }
}
