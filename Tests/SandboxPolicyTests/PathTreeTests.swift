import Foundation
import Testing

@testable import SandboxPolicy

/// The mount rules over a whole table in one sorted pass (`PathTree`), not pair by pair: the
/// same answers, at the size a 1 MiB policy allows.
@Suite("Mount tables at scale")
struct PathTreeTests {
    @Test("ancestors from one sorted pass equal the pairwise definition, on random trees with look-alike names")
    func pathTreeMatchesPairwise() {
        var rng = SystemRandomNumberGenerator()
        // Names whose byte order interleaves siblings with children: "/a" < "/a-b" < "/a.b" <
        // "/a/b" < "/ab", and "/a" is a string prefix of "/ab" without being its parent.
        let parts = ["a", "ab", "a-b", "a.b", "b", "é"]
        for _ in 0..<50 {
            var paths: Set<String> = []
            while paths.count < 60 {
                let depth = Int.random(in: 1...4, using: &rng)
                paths.insert("/" + (0..<depth).map { _ in parts.randomElement(using: &rng)! }.joined(separator: "/"))
            }
            let list = Array(paths).shuffled(using: &rng)
            let above = PathTree.ancestors(list)
            for (i, p) in list.enumerated() {
                let expected = list.indices.filter { p.utf8.starts(with: Array((list[$0] + "/").utf8)) }
                    .sorted { list[$0].utf8.count > list[$1].utf8.count }
                #expect(above[i] == expected, "\(p): \(above[i].map { list[$0] }) vs \(expected.map { list[$0] })")
            }
            let below = PathTree.descendants(ancestors: above)
            for (i, p) in list.enumerated() {
                let expected = list.indices.filter { list[$0].utf8.starts(with: Array((p + "/").utf8)) }
                #expect(below[i] == expected, "\(p)")
            }
        }
    }

    @Test("20 000 mounts (a 1 MiB policy) are checked with every rule still applied to the right entries")
    func manyMounts() throws {
        // An ro bind of /srv with 19 996 hides under it, then three mistakes at known lines: a
        // hide under nothing, a tmpfs mounted over an earlier bind, a tmpfs under a symlink.
        var lines = ["filesystem:", "  mounts:", "    - symlink: /lnk", "      target: usr", "    - ro: /srv"]
        for i in 0..<19_996 { lines.append("    - hide: /srv/d\(String(format: "%05d", i))") }
        lines += [
            "    - hide: /nowhere/x",     // line 20002
            "    - ro: /var/lib/x",       // line 20003
            "    - tmpfs: /var",          // line 20004, over /var/lib/x
            "    - tmpfs: /lnk/inner",    // line 20005
        ]
        let text = lines.joined(separator: "\n") + "\n"
        #expect(text.utf8.count < 1 << 20)
        let dir = try PolicyDirectory(["big.yaml": text])
        let found = dir.errors("big").map { "\($0.where_) \($0.message)" }
        #expect(found.count == 3, "\(found.prefix(10))")
        #expect(found.contains { $0.hasPrefix("big.yaml:20002 hide /nowhere/x must lie strictly under an earlier ro or rw mount") }, "\(found.prefix(10))")
        #expect(found.contains { $0.hasPrefix("big.yaml:20004 tmpfs /var would be mounted over the earlier ro /var/lib/x") }, "\(found.prefix(10))")
        #expect(found.contains { $0.hasPrefix("big.yaml:20005 tmpfs /lnk/inner lies under /lnk, which is a symlink") }, "\(found.prefix(10))")
    }
}
