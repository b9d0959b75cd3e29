@testable import Benchmark
import Foundation
import Sandbox
import Testing

/// Which host ids task images get (`ImageIDs`): the admin's `autoharness` line in
/// /etc/subuid and /etc/subgid, else a default range no account's subordinate ids may overlap.
struct ImageIDsTests {
    static func files(_ subuid: String?, _ subgid: String?) throws -> (String, String, () -> Void) {
        let dir = NSTemporaryDirectory() + "ah-subid-" + UUID().uuidString.prefix(8)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        if let subuid { try subuid.write(toFile: dir + "/subuid", atomically: true, encoding: .utf8) }
        if let subgid { try subgid.write(toFile: dir + "/subgid", atomically: true, encoding: .utf8) }
        return (dir + "/subuid", dir + "/subgid", { try? FileManager.default.removeItem(atPath: dir) })
    }

    @Test("without files or an autoharness line: 65536 ids from 2^31 - 65536, ending at 2^31 - 1")
    func defaultRange() throws {
        let (u, g, done) = try Self.files(nil, "alice:100000:65536\n")
        defer { done() }
        let r = try ImageIDs.range(subuid: u, subgid: g)
        #expect(r == HostIDRange(uid: 2_147_418_112, gid: 2_147_418_112, count: 65536))
        #expect(r.holds(uid: 2_147_483_647) && !r.holds(uid: 2_147_483_648) && !r.holds(uid: 65534))
    }

    @Test("the admin's autoharness lines name the range, uids and gids apart")
    func adminRange() throws {
        let (u, g, done) = try Self.files("# podman\nalice:100000:65536\nautoharness:300000:65536\n", "autoharness:400000:100000\n")
        defer { done() }
        #expect(try ImageIDs.range(subuid: u, subgid: g) == HostIDRange(uid: 300_000, gid: 400_000, count: 65536))
    }

    @Test("refused, naming the file and line: an account's range over the default, a range too short or starting among accounts, a line in one file only, a malformed line",
          arguments: [
            ("bob:2147400000:100000\n", "", "subuid:1: bob's subordinate ids overlap"),
            ("", "x:1:1\nbob:2147483000:10\n", "subgid:2: bob's subordinate ids overlap"),
            ("autoharness:300000:1000\n", "autoharness:300000:65536\n", "subuid:1: autoharness:300000:1000: task images need 65536 ids"),
            ("autoharness:1000:65536\n", "autoharness:300000:65536\n", "subuid:1: autoharness:1000:65536: task images need 65536 ids starting above 65535"),
            ("autoharness:300000:65536\n", "", "has no line for autoharness"),
            ("alice:100000\n", "", "subuid:1: alice:100000: not NAME:START:COUNT"),
          ])
    func refused(subuid: String, subgid: String, message: String) throws {
        let (u, g, done) = try Self.files(subuid, subgid)
        defer { done() }
        #expect {
            try ImageIDs.range(subuid: u, subgid: g)
        } throws: { error in
            (error as? BenchmarkError).map { $0.message.contains(message) } == true
        }
    }
}
