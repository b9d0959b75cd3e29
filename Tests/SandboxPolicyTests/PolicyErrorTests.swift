import Testing

@testable import SandboxPolicy

/// Every rejection names the file and the line of the offending node.
@Suite("Policy errors carry file:line")
struct PolicyErrorTests {
    /// Loads `yaml` as `p.yaml` and returns its single error.
    func error(_ yaml: String, variables: [String: String] = [:], requireAll: Bool = true,
               sourceLocation: Testing.SourceLocation = #_sourceLocation) throws -> PolicyError? {
        let dir = try PolicyDirectory(["p.yaml": yaml])
        return dir.error("p", variables: variables, requireAllPlaceholders: requireAll, sourceLocation: sourceLocation)
    }

    @Test("the description is file:line: message")
    func descriptionFormat() throws {
        let e = try #require(try error("limits:\n  nofile: -1\n"))
        #expect(e.description == "\(e.location?.file ?? "?"):2: \(e.message)")
        #expect(e.location?.file.hasSuffix("/p.yaml") == true)
        #expect(PolicyError("no line").description == "no line")
    }

    @Test("an unknown key at any level is an error listing the allowed keys")
    func unknownKeys() throws {
        let top = try #require(try error("description: x\nmounts: []\n"))
        #expect(top.where_ == "p.yaml:2")
        #expect(top.message.contains("unknown key 'mounts'"))
        #expect(top.message.contains("allowed: extends, description, filesystem, identity, seccomp, network, limits, env"))

        let nested = try #require(try error("limits:\n  nofile: 10\n  memroy: 1G\n"))
        #expect(nested.where_ == "p.yaml:3")
        #expect(nested.message.contains("unknown key 'memroy' in limits (allowed: nofile, nproc, fsize, cpu_seconds, memory, pids, cpus, timeout)"))

        let entry = try #require(try error("filesystem:\n  mounts:\n    - ro: /usr\n      readonly: true\n"))
        #expect(entry.where_ == "p.yaml:4")
        #expect(entry.message.contains("'readonly'") && entry.message.contains("keep_symlink"))
    }

    @Test("a YAML syntax error has the line where the parser stopped")
    func syntaxError() throws {
        let e = try #require(try error("description: ok\nlimits:\n  nofile: [1, 2\n  nproc: 3\n"))
        #expect(e.message.hasPrefix("YAML syntax error"))
        #expect(e.location?.line == 4)

        let tab = try #require(try error("a: 1\n\tb: 2\n"))
        #expect(tab.location?.line == 2)
    }

    @Test("a key repeated in one mapping is an error at the repeat, naming the first")
    func duplicateKey() throws {
        let e = try #require(try error("""
            limits:
              nofile: 10
              # a comment
              pids: 5
              nofile: 20
            """))
        #expect(e.where_ == "p.yaml:5")
        #expect(e.message.contains("duplicate key 'nofile'"))
        #expect(e.message.contains("(first at line 2, column 3)"), "\(e.message)")
    }

    @Test("the same mount destination twice in one file names both lines")
    func duplicateDestination() throws {
        let e = try #require(try error("""
            filesystem:
              mounts:
                - ro: /usr
                - tmpfs: /tmp
                - ro: /srv/usr:/usr/
            """))
        #expect(e.where_ == "p.yaml:5")
        #expect(e.message.contains("duplicate mount destination /usr (first at"))
        #expect(e.message.contains("p.yaml:3)"))
    }

    @Test("a hide must lie strictly under an earlier ro or rw bind")
    func hidePlacement() throws {
        let notUnder = try #require(try error("filesystem:\n  mounts:\n    - ro: /usr\n    - hide: /etc/shadow\n"))
        #expect(notUnder.where_ == "p.yaml:4")
        #expect(notUnder.message.contains("strictly under an earlier ro or rw"))

        let exactly = try #require(try error("filesystem:\n  mounts:\n    - ro: /etc/shadow\n    - hide: /etc/shadow\n"))
        #expect(exactly.where_ == "p.yaml:4")
        #expect(exactly.message.contains("exactly the destination of the ro mount at"))
        #expect(exactly.message.contains("p.yaml:3"))

        let hideFirst = try #require(try error("filesystem:\n  mounts:\n    - hide: /etc/shadow\n    - ro: /etc/shadow\n"))
        #expect(hideFirst.where_ == "p.yaml:4")
        #expect(hideFirst.message.contains("ro /etc/shadow is at exactly the destination of the hide at"))
        #expect(hideFirst.message.contains("p.yaml:3"))

        let underTmpfs = try #require(try error("""
            filesystem:
              mounts:
                - ro: /usr
                - tmpfs: /usr/share
                - hide: /usr/share/doc
            """))
        #expect(underTmpfs.where_ == "p.yaml:5")
        #expect(underTmpfs.message.contains("lies under the tmpfs at /usr/share"))

        let before = try #require(try error("filesystem:\n  mounts:\n    - hide: /usr/x\n    - ro: /usr\n"))
        #expect(before.where_ == "p.yaml:4")
        #expect(before.message.contains("mounted over the earlier hide /usr/x"))
    }

    @Test("a hide that would replace an inherited bind is an error naming the bind")
    func inheritedHideAtBind() throws {
        let dir = try PolicyDirectory([
            "parent.yaml": "filesystem:\n  mounts:\n    - ro: /etc/hosts\n",
            "child.yaml": "extends: parent\nfilesystem:\n  mounts:\n    - hide: /etc/hosts\n",
        ])
        let e = try #require(dir.error("child"))
        #expect(e.where_ == "child.yaml:4")
        #expect(e.message.contains("parent.yaml:3"))
    }

    @Test("nothing may be mounted under a symlink entry or a keep_symlink bind")
    func underSymlink() throws {
        let link = try #require(try error("""
            filesystem:
              mounts:
                - symlink: /bin
                  target: usr/bin
                - ro: /opt/tool:/bin/tool
            """))
        #expect(link.where_ == "p.yaml:5")
        #expect(link.message.contains("lies under /bin, which is a symlink (at"))

        let kept = try #require(try error("""
            filesystem:
              mounts:
                - ro: /lib
                  keep_symlink: true
                - tmpfs: /lib/firmware
            """))
        #expect(kept.where_ == "p.yaml:5")
        #expect(kept.message.contains("may be a symlink (keep_symlink at"))
    }

    @Test("a later mount over an earlier entry's ancestor is an error (it would bury the entry)")
    func shadowing() throws {
        let e = try #require(try error("""
            filesystem:
              mounts:
                - ro: /usr
                - hide: /usr/secret
                - tmpfs: /usr
                  size: 1M
            """))
        // Same destination as line 3 within a file: reported as a duplicate.
        #expect(e.where_ == "p.yaml:5")
        let buried = try #require(try error("""
            filesystem:
              mounts:
                - ro: /srv/a:/opt/a
                - ro: /opt
            """))
        #expect(buried.where_ == "p.yaml:4")
        #expect(buried.message.contains("mounted over the earlier ro /opt/a"))
    }

    @Test("keep_symlink belongs to ro binds and optional to binds only")
    func misplacedModifiers() throws {
        let keep = try #require(try error("filesystem:\n  mounts:\n    - rw: /srv\n      keep_symlink: true\n"))
        #expect(keep.where_ == "p.yaml:4")
        #expect(keep.message.contains("'keep_symlink' applies only to ro binds"))

        let optional = try #require(try error("filesystem:\n  mounts:\n    - tmpfs: /t\n      optional: true\n"))
        #expect(optional.where_ == "p.yaml:4")
        #expect(optional.message.contains("'optional' applies only to ro and rw binds"))

        let target = try #require(try error("filesystem:\n  mounts:\n    - symlink: /bin\n"))
        #expect(target.where_ == "p.yaml:3")
        #expect(target.message.contains("needs a 'target'"))

        let two = try #require(try error("filesystem:\n  mounts:\n    - ro: /a\n      rw: /b\n"))
        #expect(two.message.contains("exactly one of ro, rw, tmpfs, hide, symlink (found ro and rw)"))
    }

    @Test("a '..' component is rejected, in the file and in a placeholder's value")
    func dotDot() throws {
        let literal = try #require(try error("filesystem:\n  mounts:\n    - ro: /usr/../etc\n"))
        #expect(literal.where_ == "p.yaml:3")
        #expect(literal.message.contains("'..'"))

        let viaValue = try #require(try error(
            "filesystem:\n  mounts:\n    - rw: \"{workdir}:/app\"\n", variables: ["workdir": "/srv/x/../../etc"]))
        #expect(viaValue.where_ == "p.yaml:3")
        #expect(viaValue.message.contains("from '{workdir}'"))
    }

    @Test("relative sources, destinations and chdir are rejected")
    func relativePaths() throws {
        let source = try #require(try error("filesystem:\n  mounts:\n    - ro: usr\n"))
        #expect(source.where_ == "p.yaml:3" && source.message.contains("must be an absolute path"))
        let destination = try #require(try error("\nfilesystem:\n  mounts:\n    - ro: /usr:usr\n"))
        #expect(destination.where_ == "p.yaml:4" && destination.message.contains("ro destination 'usr'"))
        let chdir = try #require(try error("filesystem:\n  chdir: app\n"))
        #expect(chdir.where_ == "p.yaml:2")
        let afterSubstitution = try #require(try error(
            "filesystem:\n  mounts:\n    - rw: \"{workdir}:/app\"\n", variables: ["workdir": "relative/dir"]))
        #expect(afterSubstitution.message.contains("'relative/dir' (from '{workdir}') must be an absolute path"))
    }

    @Test("/, /proc and /dev (and below) are reserved destinations; / and /proc are not sources")
    func reservedPaths() throws {
        for (entry, fragment) in [
            ("ro: /srv:/", "destination / is reserved"),
            ("tmpfs: /proc", "fresh /proc"),
            ("ro: /srv/dev:/dev/shm", "fresh /dev"),
            ("symlink: /proc/self/x\n      target: y", "fresh /proc"),
            ("ro: /", "host root"),
            ("ro: /proc/1/root:/host", "host /proc"),
        ] {
            let e = try #require(try error("filesystem:\n  mounts:\n    - \(entry)\n"), "\(entry)")
            #expect(e.where_ == "p.yaml:3", "\(entry)")
            #expect(e.message.contains(fragment), "\(entry): \(e.message)")
        }
    }

    @Test("chdir must be / or inside a mount destination")
    func chdirInsideMount() throws {
        let e = try #require(try error("filesystem:\n  mounts:\n    - ro: /usr\n  chdir: /work\n"))
        #expect(e.where_ == "p.yaml:4")
        #expect(e.message.contains("chdir /work is not inside any mount destination"))
        let dir = try PolicyDirectory(["ok.yaml": "filesystem:\n  mounts: [ { ro: /usr } ]\n  chdir: /usr/lib/\n"])
        #expect(try dir.load("ok").chdir == "/usr/lib")
    }

    @Test("identity ids must be non-zero 32-bit ids and the hostname well-formed")
    func identity() throws {
        let dir = try PolicyDirectory(["p.yaml": """
            identity:
              uid: 0
              gid: 4294967295
              host_uid: 0
              host_gid: x
              hostname: "bad host"
            """])
        let errors = dir.errors("p")
        #expect(errors.map(\.where_) == ["p.yaml:2", "p.yaml:3", "p.yaml:4", "p.yaml:5", "p.yaml:6"])
        #expect(errors[0].message.contains("must not be 0"))
        #expect(errors[4].message.contains("hostname"))
    }

    @Test("default_action is errno(NAME) with a known name, or kill")
    func defaultAction() throws {
        let dir = try PolicyDirectory([
            "eperm.yaml": "seccomp: { default_action: errno(EPERM) }\n",
            "kill.yaml": "seccomp: { default_action: kill }\n",
        ])
        #expect(try dir.load("eperm").seccomp.defaultAction == .errno(1))
        #expect(try dir.load("kill").seccomp.defaultAction == .kill)

        let unknown = try #require(try error("seccomp:\n  profile: default\n  default_action: errno(EFOO)\n"))
        #expect(unknown.where_ == "p.yaml:3" && unknown.message.contains("unknown errno name 'EFOO'"))
        let malformed = try #require(try error("seccomp:\n  default_action: trap\n"))
        #expect(malformed.where_ == "p.yaml:2" && malformed.message.contains("errno(NAME)"))
        let profile = try #require(try error("seccomp:\n  profile: strict\n"))
        #expect(profile.message.contains("unknown seccomp profile 'strict' (allowed: default)"))
    }

    @Test("a syscall in both allow and deny of one file is an error naming both lines")
    func allowAndDeny() throws {
        let e = try #require(try error("seccomp:\n  deny:\n    - ptrace\n  allow:\n    - read\n    - ptrace\n"))
        #expect(e.where_ == "p.yaml:6")
        #expect(e.message.contains("'ptrace' is in both") && e.message.contains("p.yaml:3"))
        let quiet = try #require(try error("seccomp:\n  allow: [pidfd_open]\n  quiet: [pidfd_open]\n"))
        #expect(quiet.where_ == "p.yaml:3" && quiet.message.contains("'pidfd_open' is in seccomp.quiet and also in seccomp.allow"), "\(quiet)")
        let name = try #require(try error("seccomp:\n  allow: [Open]\n"))
        #expect(name.where_ == "p.yaml:2" && name.message.contains("not a syscall name"))
    }

    @Test("seccomp.watch_links takes directories of the sandbox's root only, naming the line of one that is not")
    func watchLinks() throws {
        let deep = try #require(try error("seccomp:\n  watch_links:\n    - /tests\n    - /tests/sub\n"))
        #expect(deep.where_ == "p.yaml:4" && deep.message.contains("'/tests/sub' is not a directory of the sandbox's root"), "\(deep)")
        let relative = try #require(try error("seccomp:\n  watch_links: [tests]\n"))
        #expect(relative.where_ == "p.yaml:2" && relative.message.contains("'tests'"), "\(relative)")
    }

    @Test("network.allow needs mode proxy and well-formed host:port entries")
    func networkAllow() throws {
        let mode = try #require(try error("network:\n  mode: loopback\n  allow: [\"a.example:443\"]\n"))
        #expect(mode.where_ == "p.yaml:3" && mode.message.contains("needs network mode proxy"))
        let byDefault = try #require(try error("network:\n  allow: [\"a.example:443\"]\n"))
        #expect(byDefault.where_ == "p.yaml:2")
        let dir = try PolicyDirectory(["p.yaml": """
            network:
              mode: proxy
              allow:
                - "a.example:0"
                - "a.example"
                - "-bad.example:443"
                - "[::1]:8080"
            """])
        #expect(dir.errors("p").map(\.where_) == ["p.yaml:4", "p.yaml:5", "p.yaml:6"])
        let badMode = try #require(try error("network: { mode: host }\n"))
        #expect(badMode.message.contains("allowed: none, loopback, proxy"))
    }

    @Test("limits are positive, sizes parse, memory is at least 1M")
    func limits() throws {
        let dir = try PolicyDirectory(["p.yaml": """
            limits:
              nofile: 0
              nproc: 1.5
              fsize: 12Q
              memory: 512K
              cpus: 0
              timeout: 10d
              pids: 100
            """])
        let errors = dir.errors("p")
        #expect(errors.map(\.where_) == ["p.yaml:2", "p.yaml:3", "p.yaml:4", "p.yaml:5", "p.yaml:6", "p.yaml:7"])
        #expect(errors[3].message.contains("at least 1M (got 512K)"))
    }

    @Test("env names are checked, and a name both set and passed in one file is an error")
    func env() throws {
        let dir = try PolicyDirectory(["p.yaml": """
            env:
              set:
                1BAD: x
                GOOD: y
                EMPTY:
              pass: [GOOD, "A-B"]
            """])
        let errors = dir.errors("p")
        #expect(errors.map(\.where_) == ["p.yaml:3", "p.yaml:5", "p.yaml:6", "p.yaml:6"])
        #expect(errors[1].message.contains("needs a value"))
    }

    @Test("all errors of a file are reported in one load, by line")
    func collectsAllErrors() throws {
        let dir = try PolicyDirectory(["p.yaml": """
            bogus: 1
            filesystem:
              mounts:
                - ro: relative
                - tmpfs: /tmp
                  size: lots
            identity: { uid: 0 }
            network: { mode: wifi }
            """])
        #expect(dir.errors("p").map(\.where_) == ["p.yaml:1", "p.yaml:4", "p.yaml:6", "p.yaml:7", "p.yaml:8"])
    }

    @Test("the wrong shape of value is an error, with a hint for an unquoted {placeholder}")
    func shapes() throws {
        let e = try #require(try error("filesystem:\n  mounts:\n    - ro: {workdir}\n"))
        #expect(e.where_ == "p.yaml:3")
        #expect(e.message.contains("quote values that start with '{'"))
        let list = try #require(try error("filesystem:\n  mounts:\n    ro: /usr\n"))
        #expect(list.message.contains("filesystem.mounts must be a list"))
    }

    @Test("an unknown policy name or missing file is an error without a line")
    func missingPolicy() throws {
        let dir = try PolicyDirectory(["base.yaml": ""])
        let e = try #require(dir.error("nope"))
        #expect(e.location == nil)
        #expect(e.message.contains("no policy named 'nope'"))
        #expect(throws: PolicyError.self) { try dir.loader.resolvePath("../etc/passwd.yaml") }
        #expect(try dir.loader.resolvePath("base") == dir.path + "/base.yaml")
    }
}
