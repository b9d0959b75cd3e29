import Foundation
import Testing

@testable import Benchmark

@Suite("The verifier's git reads no command from an agent-made repository")
struct GitConfigsTests {
    @Test("only format, remote, branch and user keys survive, each value checked; every key that names a command is dropped, whatever its spelling")
    func keptKeys() {
        let agentMade = """
            [core]
            \trepositoryformatversion = 0
            \tfilemode = true
            \tbare = false
            \tlogallrefupdates = true
            \tfsmonitor = sh -c 'echo 1 > /logs/verifier/reward.txt'
            \tsshCommand = evil
            \thooksPath = /app/hooks
            \tpager = evil
            [Core] editor = evil
            [extensions]
            \tobjectformat = sha256
            \tworktreeconfig = true
            [filter "x"]
            \tclean = sh /app/.git/x.sh
            \tsmudge = sh /app/.git/x.sh
            \tprocess = sh /app/.git/x.sh
            [filter.y]
            \tclean = evil
            [diff "z"]
            \ttextconv = evil
            \tcommand = evil
            [merge "m"]
            \tdriver = evil
            [include]
            \tpath = /app/more.config
            [includeIf "gitdir:/app/"]
            \tpath = /app/more.config
            [alias]
            \tst = !evil
            [remote "origin"]
            \turl = https://example.com/repo.git
            \tfetch = +refs/heads/*:refs/remotes/origin/*
            \tuploadpack = evil
            [remote "bad name;"]
            \turl = https://example.com/x.git
            [branch "main"]
            \tremote = origin
            \tmerge = refs/heads/main
            [user]
            \tname = "Quoted Name"
            \temail = agent@example.com
            [core]
            \tfilemode = maybe
            \tbare = true # comment
            """
        let kept = GitConfigs.kept(agentMade)
        #expect(kept == """
            [core]
            \trepositoryformatversion = 0
            \tfilemode = true
            \tbare = false
            \tlogallrefupdates = true
            [extensions]
            \tobjectformat = sha256
            [remote "origin"]
            \turl = https://example.com/repo.git
            \tfetch = +refs/heads/*:refs/remotes/origin/*
            [branch "main"]
            \tremote = origin
            \tmerge = refs/heads/main
            [user]
            \temail = agent@example.com

            """, "\(kept)")
        for word in ["evil", "x.sh", "fsmonitor", "hooks", "include", "filter", "worktreeconfig"] {
            #expect(!kept.contains(word), "\(word) survived")
        }
    }

    @Test("every git directory under /app is rewritten (nested, bare), config.worktree removed, a config that is a link replaced by an empty file (a link is never read); a real git then runs no filter the agent named")
    func sanitizedTree() throws {
        try requireRoot()
        let app = try TempDir()
        let marker = app.path + "/filter-ran"
        let driver = "sh -c 'touch \(marker); cat'"
        func git(_ args: [String], in dir: String) throws -> (status: Int32, out: String) {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/git")
            p.arguments = ["-C", dir] + args
            p.environment = ["HOME": app.path, "GIT_CONFIG_NOSYSTEM": "1", "PATH": "/usr/bin:/bin"]
            let pipe = Pipe()
            p.standardOutput = pipe
            p.standardError = pipe
            try p.run()
            let data = pipe.fileHandleForReading.readDataToEndOfFile()
            p.waitUntilExit()
            return (p.terminationStatus, String(decoding: data, as: UTF8.self))
        }
        for dir in [app.path, app.path + "/deep/nested/repo"] {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            #expect(try git(["init", "-q", "."], in: dir).status == 0)
            #expect(try git(["config", "filter.x.clean", driver], in: dir).status == 0)
            try "* filter=x\n".write(toFile: dir + "/.gitattributes", atomically: true, encoding: .utf8)
            try "data\n".write(toFile: dir + "/f", atomically: true, encoding: .utf8)
            try "[filter \"x\"]\n\tclean = \(driver)\n".write(toFile: dir + "/.git/config.worktree", atomically: true, encoding: .utf8)
        }
        try "deep/\nbare.git/\nnotes.txt\nfilter-ran\nlinked/\ncommon/\nwtgit/\n".write(toFile: app.path + "/.gitignore", atomically: true, encoding: .utf8)
        // A bare repository whose config is a link to agent-written text.
        let bare = app.path + "/bare.git"
        #expect(try git(["init", "-q", "--bare", bare], in: app.path).status == 0)
        try "[core]\n\tbare = true\n[alias]\n\tx = !touch \(marker)\n".write(toFile: app.path + "/notes.txt", atomically: true, encoding: .utf8)
        try FileManager.default.removeItem(atPath: bare + "/config")
        try FileManager.default.createSymbolicLink(atPath: bare + "/config", withDestinationPath: app.path + "/notes.txt")
        // A linked worktree whose common directory has no HEAD: git still reads its config.
        let wt = app.path + "/linked"
        try FileManager.default.createDirectory(atPath: wt, withIntermediateDirectories: true)
        let common = app.path + "/common"
        #expect(try git(["init", "-q", "--bare", common], in: app.path).status == 0)
        #expect(try git(["config", "filter.x.clean", driver], in: common).status == 0)
        #expect(try git(["config", "core.bare", "false"], in: common).status == 0)
        try FileManager.default.removeItem(atPath: common + "/HEAD")
        let gitdir = app.path + "/wtgit"
        try FileManager.default.createDirectory(atPath: gitdir, withIntermediateDirectories: true)
        try "ref: refs/heads/main\n".write(toFile: gitdir + "/HEAD", atomically: true, encoding: .utf8)
        try "\(common)\n".write(toFile: gitdir + "/commondir", atomically: true, encoding: .utf8)
        try "\(wt)/.git\n".write(toFile: gitdir + "/gitdir", atomically: true, encoding: .utf8)
        try "gitdir: \(gitdir)\n".write(toFile: wt + "/.git", atomically: true, encoding: .utf8)
        try "* filter=x\n".write(toFile: wt + "/.gitattributes", atomically: true, encoding: .utf8)
        try "data\n".write(toFile: wt + "/f", atomically: true, encoding: .utf8)
        #expect(try git(["add", "-A"], in: wt).status == 0)
        #expect(FileManager.default.fileExists(atPath: marker), "the linked worktree's filter did not run before the rewrite: the test proves nothing")
        try FileManager.default.removeItem(atPath: marker)
        // Without the rewrite the filter runs (the check is live).
        #expect(try git(["add", "-A"], in: app.path + "/deep/nested/repo").status == 0)
        #expect(FileManager.default.fileExists(atPath: marker), "the filter did not run before the rewrite: the test proves nothing")
        try FileManager.default.removeItem(atPath: marker)

        let fd = open(app.path, O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        let result = GitConfigs.sanitize(app: fd, owner: (getuid(), getgid()))
        #expect((try? result.get()) == 4, "\(result)")
        #expect(try git(["add", "-A"], in: wt).status == 0)
        #expect(!FileManager.default.fileExists(atPath: marker), "the linked worktree's common directory kept its filter")
        for dir in [app.path, app.path + "/deep/nested/repo"] {
            let add = try git(["add", "-A"], in: dir)
            #expect(add.status == 0, "\(add.out)")
            #expect(!FileManager.default.fileExists(atPath: dir + "/.git/config.worktree"))
            #expect(!(try String(contentsOfFile: dir + "/.git/config", encoding: .utf8)).contains("filter"))
        }
        #expect(!FileManager.default.fileExists(atPath: marker), "a filter the agent named ran after the rewrite")
        var st = stat()
        #expect(lstat(bare + "/config", &st) == 0 && (st.st_mode & S_IFMT) == S_IFREG)
        #expect(try String(contentsOfFile: bare + "/config", encoding: .utf8) == "")
    }

    @Test("a tree deeper than the rewrite looks through is not graded: git reaches a repository at any depth through a gitfile at /app/.git")
    func tooDeep() throws {
        let app = try TempDir()
        let deep = app.path + "/" + Array(repeating: "d", count: GitConfigs.depthLimit + 2).joined(separator: "/")
        try FileManager.default.createDirectory(atPath: deep + "/g", withIntermediateDirectories: true)
        for name in ["HEAD", "config"] { try "x\n".write(toFile: deep + "/g/" + name, atomically: true, encoding: .utf8) }
        try "gitdir: \(deep)/g\n".write(toFile: app.path + "/.git", atomically: true, encoding: .utf8)
        let fd = open(app.path, O_RDONLY | O_DIRECTORY)
        defer { close(fd) }
        switch GitConfigs.sanitize(app: fd, owner: (getuid(), getgid())) {
        case .success(let n): Issue.record("rewrote \(n) and went on: the deep repository stays unchecked")
        case .failure(let e): #expect(e.message.contains("deeper than \(GitConfigs.depthLimit) levels"), "\(e.message)")
        }
    }
}
