import Foundation
import Testing
import TestSupport

/// `autoharness policy diff`: what one policy allows that another does not.
@Suite("policy diff")
struct PolicyDiffTests {
    @Test("a policy and itself allow the same (exit 0); one that extends it and widens it shows each widening as +, reversed as -, and what only differs as ~ (exit 1)")
    func widenings() throws {
        let dir = try TempDir()
        try FileManager.default.createDirectory(atPath: dir.path + "/shared", withIntermediateDirectories: true)
        let same = try autoharness(["policy", "diff", "benchmark-task", "benchmark-task"])
        #expect(same.status == 0 && same.stdout.contains("benchmark-task and benchmark-task allow the same"), "\(same.stdout)\(same.stderr)")
        let wide = try dir.file("wide.yaml", """
            extends: benchmark-task
            filesystem:
              landlock: off
              chdir: /data
              mounts:
                - rw: \(dir.path)/shared:/data
            seccomp:
              allow: [mincore]
            network:
              mode: proxy
              allow: [example.com:443]
            limits:
              memory: none
            env:
              pass: [LANG]

            """)
        let r = try autoharness(["policy", "diff", "benchmark-task", wide])
        #expect(r.status == 1, "\(r.stdout)\(r.stderr)")
        for line in ["+ syscall mincore", "+ mount /data: A absent, B rw from \(dir.path)/shared", "+ network proxy (the other: none)",
                     "+ network host example.com:443", "+ landlock: A auto, B off", "+ env pass LANG", "~ chdir: A /app, B /data"] {
            #expect(r.stdout.contains(line), "\(line)\n\(r.stdout)")
        }
        #expect(r.stdout.split(separator: "\n").contains { $0.hasPrefix("+ memory: A ") && $0.hasSuffix(", B none") }, "\(r.stdout)")
        #expect(!r.stdout.split(separator: "\n").contains { $0.hasPrefix("- ") }, "\(r.stdout)")
        let back = try autoharness(["policy", "diff", wide, "benchmark-task"])
        #expect(back.status == 1 && back.stdout.contains("- syscall mincore") && back.stdout.contains("- network host example.com:443")
                && !back.stdout.split(separator: "\n").contains { $0.hasPrefix("+ ") }, "\(back.stdout)")
        // A policy that does not load is named with why, as policy check names it.
        let broken = try dir.file("broken.yaml", "extends: benchmark-task\nseccomp:\n  allow: [no_such_call]\n")
        let b = try autoharness(["policy", "diff", "benchmark-task", broken])
        #expect(b.status == 1 && b.stderr.contains("\(broken): seccomp: unknown syscall 'no_such_call'"), "\(b.stdout)\(b.stderr)")
    }
}
