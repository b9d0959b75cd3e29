import Testing

@testable import SandboxPolicy

@Suite("{name} placeholders")
struct PlaceholderTests {
    static let policy = """
        filesystem:
          chdir: "{workdir}"
          mounts:
            - rw: "{workdir}"
            - ro: "{data}/v1/:/data/{version}"
        env:
          set:
            WORK: "{workdir}"
            GREETING: "hello {who}"
        """

    @Test("placeholders are substituted in sources, destinations, chdir and env values")
    func substituted() throws {
        let dir = try PolicyDirectory(["p.yaml": Self.policy])
        let policy = try dir.load("p", variables: [
            "workdir": "/tmp/job//7/", "data": "/srv", "version": "v1", "who": "{world}", "unused": "x",
        ])
        #expect(policy.mounts == [
            MountSpec(kind: .readWrite(source: "/tmp/job/7"), destination: "/tmp/job/7"),
            MountSpec(kind: .readOnly(source: "/srv/v1"), destination: "/data/v1"),
        ])
        #expect(policy.chdir == "/tmp/job/7")
        // Values are inserted verbatim, never rescanned for placeholders.
        #expect(policy.env.set == ["WORK": "/tmp/job//7/", "GREETING": "hello {world}"])
    }

    @Test("launching with a placeholder missing names it and its line")
    func missing() throws {
        let dir = try PolicyDirectory(["p.yaml": Self.policy])
        let errors = dir.errors("p", variables: ["workdir": "/w", "data": "/d"])
        #expect(errors.map(\.where_) == ["p.yaml:5", "p.yaml:9"])
        #expect(errors[0].message == "placeholder {version} has no value (pass --var version=PATH)")
        #expect(errors[1].message == "placeholder {who} has no value (pass --var who=VALUE)")
    }

    @Test("policy check leaves unresolved placeholders as written and lists them")
    func leftLiteral() throws {
        let dir = try PolicyDirectory(["p.yaml": Self.policy])
        let policy = try dir.load("p", variables: ["data": "/srv"], requireAllPlaceholders: false)
        #expect(policy.mounts[0] == MountSpec(kind: .readWrite(source: "{workdir}"), destination: "{workdir}"))
        #expect(policy.mounts[1].destination == "/data/{version}")
        #expect(policy.chdir == "{workdir}")
        #expect(PolicyLoader.placeholders(in: policy) == ["workdir", "version", "who"])
    }

    @Test("unresolved placeholders are still syntax-checked and must start an absolute path")
    func syntaxCheckedWhenUnresolved() throws {
        let dir = try PolicyDirectory([
            "brace.yaml": "filesystem:\n  mounts:\n    - ro: \"/srv/{Work}\"\n",
            "open.yaml": "env:\n  set:\n    A: \"x{y\"\n",
            "relative.yaml": "filesystem:\n  mounts:\n    - ro: \"srv/{work}\"\n",
            "dotdot.yaml": "filesystem:\n  mounts:\n    - ro: \"{work}/../x\"\n",
        ])
        for name in ["brace", "open", "relative", "dotdot"] {
            let e = try #require(dir.error(name, requireAllPlaceholders: false), "\(name)")
            #expect(e.location?.line == 3, "\(name)")
        }
        #expect(dir.error("brace", requireAllPlaceholders: false)?.message.contains("not a placeholder") == true)
    }

    @Test("a ':' in a placeholder's value cannot move the SRC:DST split")
    func colonInValue() throws {
        let dir = try PolicyDirectory(["p.yaml": "filesystem:\n  mounts:\n    - ro: \"{src}:/in\"\n"])
        let policy = try dir.load("p", variables: ["src": "/a:/etc"])
        #expect(policy.mounts == [MountSpec(kind: .readOnly(source: "/a:/etc"), destination: "/in")])
    }

    @Test("placeholders(in:) lists well-formed names once, in order")
    func listing() {
        #expect(PolicyLoader.placeholders(in: "{a}/{b_2}/{a}/{Bad}/{}/{c") == ["a", "b_2"])
        #expect(PolicyLoader.placeholders(in: "plain").isEmpty)
    }
}

@Suite("Sizes and durations")
struct SizeTests {
    @Test("ByteSize parses binary units with optional i/B suffixes and fractions")
    func parse() {
        let cases: [(String, UInt64?)] = [
            ("1024", 1024), ("512k", 512 << 10), ("64M", 64 << 20), ("64MiB", 64 << 20), ("64MB", 64 << 20),
            ("64Mi", 64 << 20), ("1G", 1 << 30), ("1.5G", 3 << 29), ("2T", 2 << 40), ("100B", 100),
            ("0.5K", 512), ("1.0001K", 1024),
            ("", nil), ("M", nil), ("1.", nil), (".5M", nil), ("-1", nil), ("1X", nil), ("1 M", nil),
            ("64MiBB", nil), ("1e3", nil), ("16777216T", nil), ("18446744073709551616", nil),
        ]
        for (text, expected) in cases {
            #expect(ByteSize.parse(text) == expected, "\(text)")
        }
    }

    @Test("ByteSize.format picks the largest exact unit and round-trips")
    func format() {
        #expect(ByteSize.format(64 << 20) == "64M")
        #expect(ByteSize.format(3 << 29) == "1536M")
        #expect(ByteSize.format(1000) == "1000")
        #expect(ByteSize.format(0) == "0")
        #expect(ByteSize.format(2 << 40) == "2T")
        for value: UInt64 in [1, 1023, 1024, 4096, 123_456_789, 5 << 30, UInt64.max] {
            #expect(ByteSize.parse(ByteSize.format(value)) == value)
        }
    }

    @Test("durations are seconds or a number with s, m or h")
    func durations() {
        #expect(DurationString.parse("600") == 600)
        #expect(DurationString.parse("90s") == 90)
        #expect(DurationString.parse("10m") == 600)
        #expect(DurationString.parse("1.5h") == 5400)
        #expect(DurationString.parse("2.5") == 2.5)
        for bad in ["", "m", "10d", "nan", "inf", "1e3", "-5", "5 m"] {
            #expect(DurationString.parse(bad) == nil, "\(bad)")
        }
        #expect(DurationString.format(600) == "10m")
        #expect(DurationString.format(7200) == "2h")
        #expect(DurationString.format(90) == "90s")
        #expect(DurationString.format(2.5) == "2.5s")
    }

    @Test("a timeout can be written as a duration string in a policy")
    func timeoutInPolicy() throws {
        let dir = try PolicyDirectory(["p.yaml": "limits: { timeout: 90s, fsize: 1.5G, cpus: 0.5 }\n"])
        let limits = try dir.load("p").limits
        #expect(limits.timeoutSeconds == 90)
        #expect(limits.fsize == 3 << 29)
        #expect(limits.cpus == 0.5)
    }

    @Test("tmpfs modes are octal whether quoted or not")
    func modes() throws {
        let dir = try PolicyDirectory(["p.yaml": """
            filesystem:
              mounts:
                - tmpfs: /a
                  mode: 1777
                - tmpfs: /b
                  mode: "0700"
                - tmpfs: /c
                  mode: 0o750
            """])
        let modes = try dir.load("p").mounts.compactMap { if case .tmpfs(_, let mode) = $0.kind { mode } else { nil } }
        #expect(modes == [0o1777, 0o700, 0o750])
        let bad = try PolicyDirectory(["p.yaml": "filesystem:\n  mounts:\n    - tmpfs: /a\n      mode: 0789\n"])
        #expect(bad.error("p")?.where_ == "p.yaml:4")
    }
}
