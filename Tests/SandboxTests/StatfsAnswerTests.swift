import Foundation
import Testing
import TestSupport

/// statfs/fstatfs are answered by the supervisor (StatfsAnswer): the filesystem's own type,
/// block size and flags, constant sizes instead of the host disk's free blocks and inodes.
@Suite("statfs answered by the supervisor")
struct StatfsAnswerTests {
    static let script = """
        import errno, os, sys
        for p in sys.argv[1:]:
            s = os.statvfs(p)
            fd = os.open(p, os.O_RDONLY)
            f = os.fstatvfs(fd)
            print(p, s.f_bsize, s.f_blocks, s.f_bfree, s.f_bavail, s.f_files, s.f_ffree, s.f_flag & os.ST_RDONLY, f.f_bfree, f.f_ffree)
        try:
            os.statvfs("/no/such/path")
        except OSError as e:
            print("missing", errno.errorcode[e.errno])
        """

    @Test("the host disk's free blocks and inodes do not reach a sandbox (a host write between two reads moves nothing); the filesystem's block size and read-only flag do; a missing path is ENOENT; no violation")
    func sizesConstant() throws {
        try requireRoot()
        let dir = try TempDir()
        let audit = dir.path + "/audit.jsonl"
        func read() throws -> [String] {
            let r = try autoharness(["sandbox", "exec", "--policy", "base", "--audit", audit, "--", "/usr/bin/python3", "-c", Self.script, "/usr", "/tmp", "."])
            #expect(r.status == 0, "\(r.stderr)")
            return r.stdout.split(separator: "\n").map(String.init)
        }
        let before = try read()
        // 4 MiB written and synced on the host's /usr filesystem (its free blocks move).
        let big = try dir.file("big", String(repeating: "x", count: 4 << 20))
        sync()
        let after = try read()
        #expect(before == after, "\(before) \(after)")
        let usr = try #require(after.first { $0.hasPrefix("/usr ") }).split(separator: " ").map(String.init)
        #expect(usr.count == 10 && usr[2] == usr[3] && usr[3] == usr[4] && usr[6] == usr[5] && usr[8] == usr[3] && usr[9] == usr[6], "\(usr)")
        #expect(usr[7] == "1", "/usr is read-only in the sandbox: \(usr)")
        var host = statvfs()
        #expect(statvfs("/usr", &host) == 0 && String(host.f_bfree) != usr[3], "the host's own count reached the sandbox: \(usr)")
        #expect(after.contains("missing ENOENT"), "\(after)")
        let events = (try? String(contentsOfFile: audit, encoding: .utf8)) ?? ""
        #expect(events.isEmpty, "\(events)")
        withExtendedLifetime(big) {}
    }
}
