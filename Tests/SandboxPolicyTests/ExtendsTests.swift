import Testing

@testable import SandboxPolicy

@Suite("extends: merging a child onto its parent")
struct ExtendsTests {
    static let parent = """
        description: parent
        filesystem:
          chdir: /data
          mounts:
            - ro: /usr
            - ro: /srv/data:/data
            - hide: /data/secret
            - tmpfs: /tmp
        identity: { uid: 1234, hostname: parent }
        seccomp:
          allow: [ptrace_me, shared]
          deny: [memfd_create, mbind]
        network:
          mode: proxy
          allow: ["api.example.com:443"]
        limits: { nofile: 64, memory: 1G, timeout: 10m }
        env:
          set: { HOME: /tmp, LANG: C, EDITOR: vi }
          pass: [TERM, COLUMNS]
        """

    @Test("a child entry with an inherited destination replaces it in place; new entries follow")
    func mountsReplaceByDestination() throws {
        let dir = try PolicyDirectory([
            "parent.yaml": Self.parent,
            "child.yaml": """
                extends: parent
                filesystem:
                  mounts:
                    - rw: /srv/other:/data
                    - tmpfs: /scratch
                    - tmpfs: /tmp
                      size: 1M
                """,
        ])
        let policy = try dir.load("child")
        #expect(policy.mounts.map(\.destination) == ["/usr", "/data", "/data/secret", "/tmp", "/scratch"])
        #expect(policy.mounts[1].kind == .readWrite(source: "/srv/other"))
        #expect(policy.mounts[3].kind == .tmpfs(size: 1 << 20, mode: 0o755))
        #expect(policy.mounts[1].location?.file.hasSuffix("child.yaml") == true)
        #expect(policy.chdir == "/data")
        #expect(policy.lineage == ["parent", "child"])
        #expect(policy.description == "parent")
    }

    @Test("a child re-grants a hidden path by mounting at the hide's destination")
    func childReplacesHide() throws {
        let dir = try PolicyDirectory([
            "parent.yaml": Self.parent,
            "child.yaml": "extends: parent\nfilesystem: { mounts: [ { ro: /srv/public:/data/secret } ] }\n",
        ])
        let policy = try dir.load("child")
        #expect(policy.mounts[2] == MountSpec(kind: .readOnly(source: "/srv/public"), destination: "/data/secret"))
    }

    @Test("seccomp lists are unions, and the child's allow lifts an inherited deny and vice versa")
    func seccompUnionAndRemoval() throws {
        let dir = try PolicyDirectory([
            "parent.yaml": Self.parent,
            "child.yaml": """
                extends: parent
                seccomp:
                  default_action: kill
                  allow: [mbind, extra]
                  deny: [shared, more]
                """,
        ])
        let seccomp = try dir.load("child").seccomp
        #expect(seccomp.allow == ["ptrace_me", "mbind", "extra"])
        #expect(seccomp.deny == ["memfd_create", "shared", "more"])
        #expect(seccomp.defaultAction == .kill)
        #expect(seccomp.profile == "default")
    }

    @Test("seccomp.quiet is a union; a child's allow or deny of a quiet name takes it out of quiet, and its quiet takes a name out of allow and deny")
    func seccompQuiet() throws {
        let dir = try PolicyDirectory([
            "parent.yaml": "seccomp:\n  allow: [a1, a2]\n  deny: [d1]\n  quiet: [q1, q2]\n",
            "child.yaml": "extends: parent\nseccomp:\n  allow: [q1]\n  deny: [q2]\n  quiet: [a2, d1, q3]\n",
        ])
        let seccomp = try dir.load("child").seccomp
        #expect(seccomp.allow == ["a1", "q1"])
        #expect(seccomp.deny == ["q2"])
        #expect(seccomp.quiet == ["a2", "d1", "q3"])
    }

    @Test("env.set merges per key with the child winning; pass is a union; each removes the other")
    func envMerge() throws {
        let dir = try PolicyDirectory([
            "parent.yaml": Self.parent,
            "child.yaml": """
                extends: parent
                env:
                  set: { HOME: /home/x, COLUMNS: "80" }
                  pass: [EDITOR, TERM, LINES]
                """,
        ])
        let env = try dir.load("child").env
        #expect(env.set == ["HOME": "/home/x", "LANG": "C", "COLUMNS": "80"])
        #expect(env.pass == ["TERM", "EDITOR", "LINES"])
    }

    @Test("identity and limits fields override one by one; `none` lifts an inherited limit")
    func fieldOverrides() throws {
        let dir = try PolicyDirectory([
            "parent.yaml": Self.parent,
            "child.yaml": """
                extends: parent
                identity: { gid: 4321 }
                limits: { memory: 512M, timeout: none, pids: 7 }
                """,
        ])
        let policy = try dir.load("child")
        #expect(policy.identity == Identity(uid: 1234, gid: 4321, hostname: "parent"))
        #expect(policy.limits == Limits(nofile: 64, memory: 512 << 20, pids: 7, timeoutSeconds: nil))
    }

    @Test("a child turning the proxy off drops the inherited allowlist; a new allowlist replaces")
    func networkOverride() throws {
        let dir = try PolicyDirectory([
            "parent.yaml": Self.parent,
            "off.yaml": "extends: parent\nnetwork: { mode: loopback }\n",
            "other.yaml": "extends: parent\nnetwork: { allow: ['Other.Example.com:8443'] }\n",
        ])
        #expect(try dir.load("off").network == NetworkSpec(mode: .loopback, allow: []))
        #expect(try dir.load("other").network == NetworkSpec(mode: .proxy, allow: ["other.example.com:8443"]))
    }

    @Test("extends finds names beside the extending file before the search path, and relative paths from it")
    func extendsLookup() throws {
        let dir = try PolicyDirectory([
            "parent.yaml": "description: search path\n",
            "sub/parent.yaml": "description: beside\n",
            "sub/child.yaml": "extends: parent\n",
            "sub/bypath.yaml": "extends: ../parent.yaml\n",
        ])
        #expect(try dir.load(dir.path + "/sub/child.yaml").description == "beside")
        #expect(try dir.load(dir.path + "/sub/bypath.yaml").description == "search path")
        let policy = try dir.load(dir.path + "/sub/bypath.yaml")
        #expect(policy.lineage == ["../parent.yaml", dir.path + "/sub/bypath.yaml"])
        #expect(policy.name == dir.path + "/sub/bypath.yaml")
    }

    @Test("a cycle in extends is an error at the extends line that closes it")
    func cycle() throws {
        let dir = try PolicyDirectory([
            "a.yaml": "description: a\nextends: b\n",
            "b.yaml": "\n\nextends: a\n",
            "self.yaml": "extends: self\n",
        ])
        let error = try #require(dir.error("a"))
        #expect(error.where_ == "b.yaml:3")
        #expect(error.message.contains("extends cycle"))
        #expect(error.message.contains("a.yaml -> ") && error.message.hasSuffix("a.yaml"))
        #expect(dir.error("self")?.message.contains("extends cycle") == true)
    }

    @Test("extending a policy that does not exist names the line and lists what exists")
    func missingParent() throws {
        let dir = try PolicyDirectory(["child.yaml": "# c\nextends: nonesuch\n", "base.yaml": ""])
        let error = try #require(dir.error("child"))
        #expect(error.where_ == "child.yaml:2")
        #expect(error.message.contains("no policy named 'nonesuch'"))
        #expect(error.message.contains("available: base, child"))
    }

    @Test("errors in parent files are reported with the parent's file and line")
    func parentErrorsAreReported() throws {
        let dir = try PolicyDirectory([
            "parent.yaml": "limits:\n  nofile: 0\n",
            "child.yaml": "extends: parent\nlimits: { bogus: 1 }\n",
        ])
        let errors = dir.errors("child")
        #expect(errors.map(\.where_) == ["child.yaml:2", "parent.yaml:2"])
    }
}
