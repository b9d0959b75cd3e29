import Foundation
import Testing

@testable import Benchmark

@Suite("Loading a local benchmark")
struct LoadingTests {
    @Test("the fixture benchmark loads with every task, sorted, with task.toml settings")
    func fixtureLoads() throws {
        let bench = try fixtureBenchmark("basic")
        #expect(bench.tasks.map(\.id) == ["answer-42", "json-reward", "seeded-sum", "timeouts"])
        #expect(bench.tasks.allSatisfy { $0.hasSolution })
        let timeouts = try #require(bench.task("timeouts"))
        #expect(timeouts.agentTimeout == 5 && timeouts.agentTimeoutDeclared)
        #expect(timeouts.verifierTimeout == 30 && timeouts.verifierTimeoutDeclared)
        #expect(timeouts.metadata == ["difficulty": "easy", "category": "fixture", "expert_time_estimate_min": "1"])
        let plain = try #require(bench.task("answer-42"))
        #expect(plain.agentTimeout == 600 && !plain.agentTimeoutDeclared && plain.metadata.isEmpty)
        #expect(plain.directory == bench.directory + "/tasks/answer-42")
        #expect(bench.task("nope") == nil)
        #expect(try fixtureBenchmark("verdicts").tasks.allSatisfy { !$0.hasSolution })
    }

    @Test("task.toml parses as TOML: comments, escapes, literal strings, numbers, booleans")
    func tomlSubset() throws {
        let toml = try TaskToml.parse(#"""
            # leading comment
            version = "1.0"   # trailing comment
            [metadata]
            name = "tab\there \"quoted\" \u00e9"
            path = 'C:\no\escapes'
            big = 1_000
            small = -2.5e-3
            flag = true
            off = false
            empty = ""
              [agent]
            timeout_sec = 90
            """#, file: "t.toml")
        #expect(toml.entry("", "version")?.value == .string("1.0"))
        #expect(toml.entry("metadata", "name")?.value == .string("tab\there \"quoted\" é"))
        #expect(toml.entry("metadata", "path")?.value == .string(#"C:\no\escapes"#))
        #expect(toml.entry("metadata", "big")?.value == .number(1000, text: "1_000"))
        #expect(toml.entry("metadata", "small")?.value == .number(-0.0025, text: "-2.5e-3"))
        #expect(toml.entry("metadata", "flag")?.value == .bool(true))
        #expect(toml.entry("metadata", "empty")?.value == .string(""))
        #expect(toml.entry("agent", "timeout_sec")?.line == 12)
    }

    @Test("Terminal-Bench 2.0's task.toml loads: one-line arrays (tags), [environment] with docker_image, cpus, memory")
    func terminalBenchToml() throws {
        let bench = try TempDir()
        try bench.file("tasks/t/instruction.md", "x\n")
        try bench.file("tasks/t/tests/test.sh", "#!/bin/bash\n")
        try bench.file("tasks/t/task.toml", """
            version = "1.0"

            [metadata]
            author_name = "someone"
            difficulty = "medium"
            tags = ["compression", "rust", ]
            expert_time_estimate_min = 30.0

            [verifier]
            timeout_sec = 900.0

            [agent]
            timeout_sec = 900.0

            [environment]
            build_timeout_sec = 600.0
            docker_image = "alexgshaw/write-compressor:20251031"
            cpus = 1
            memory = "2G"
            storage = "10G"

            """)
        let loaded = try LocalBenchmark(directory: bench.path)
        #expect(loaded.problems.isEmpty, "\(loaded.problems)")
        let task = try #require(loaded.task("t"))
        #expect(task.metadata["tags"] == "compression, rust" && task.dockerImage == "alexgshaw/write-compressor:20251031")
        #expect(task.agentTimeout == 900 && task.verifierTimeout == 900)
    }

    /// What Harbor's own files use beyond one-line values (harbor 0.25's TaskConfig: a
    /// verifier's `env` table, MCP servers as an array of tables, a healthcheck, lists over
    /// several lines), and the rest of TOML 1.0 a registry's file may hold.
    @Test("Harbor's fuller task.toml parses: tables of tables, arrays of tables, inline tables, dotted and quoted keys, arrays over several lines, multi-line strings, other integer bases, inf and nan, dates")
    func tomlAsHarborWritesIt() throws {
        let toml = try TaskToml.parse(#"""
            schema_version = "1.4"
            [task]
            name = "org/count-lines"
            [verifier]
            timeout_sec = 120.0
            env = { OPENAI_BASE_URL = "http://x", "quoted key" = 'v', nested = { a = [1, 2] } }
            [verifier.env2]
            LEVEL = "3"
            [environment]
            allowed_hosts = [
                "pypi.org",   # the index
                "files.pythonhosted.org",
            ]
            healthcheck.interval_sec = 5
            "odd key" = 0x1F
            mask = 0o755
            bits = 0b1010
            big = inf
            none = nan
            built = 2025-10-31T12:00:00Z
            day = 2025-10-31
            spaced = 1979-05-27 07:32:00
            at = 07:32:00
            [[environment.mcp_servers]]
            name = "a"
            [[environment.mcp_servers]]
            name = "b"
            [environment.mcp_servers.args]
            verbose = true
            [solution]
            notes = """
            one \
                two
            three"""
            raw = '''
            C:\dir
            '''
            """#, file: "t.toml")
        #expect(toml.entry("task", "name")?.value == .string("org/count-lines"))
        guard case .table(let env)? = toml.entry("verifier", "env")?.value else { Issue.record("env is not a table"); return }
        #expect(env["OPENAI_BASE_URL"] == .string("http://x") && env["quoted key"] == .string("v"))
        #expect(env["nested"] == .table(["a": .array([.number(1, text: "1"), .number(2, text: "2")])]))
        // An inline table says what its table would: the readers look it up by table name.
        #expect(toml.entry("verifier.env", "OPENAI_BASE_URL")?.value == .string("http://x"))
        #expect(toml.entry("verifier.env.nested", "a")?.value == .array([.number(1, text: "1"), .number(2, text: "2")]))
        #expect(toml.entry("verifier.env2", "LEVEL")?.value == .string("3"))
        #expect(toml.entry("environment", "allowed_hosts")?.value == .array([.string("pypi.org"), .string("files.pythonhosted.org")]))
        #expect(toml.entry("environment", "allowed_hosts")?.line == 10)
        #expect(toml.entry("environment.healthcheck", "interval_sec")?.value == .number(5, text: "5"))
        #expect(toml.entry("environment", "odd key")?.value == .number(31, text: "0x1F"))
        #expect(toml.entry("environment", "mask")?.value == .number(493, text: "0o755") && toml.entry("environment", "bits")?.value == .number(10, text: "0b1010"))
        #expect(toml.entry("environment", "big")?.value == .number(.infinity, text: "inf"))
        if case .number(let n, _)? = toml.entry("environment", "none")?.value { #expect(n.isNaN) } else { Issue.record("nan") }
        #expect(toml.entry("environment", "built")?.value == .date("2025-10-31T12:00:00Z") && toml.entry("environment", "day")?.value == .date("2025-10-31"))
        #expect(toml.entry("environment", "spaced")?.value == .date("1979-05-27 07:32:00") && toml.entry("environment", "at")?.value == .date("07:32:00"))
        #expect(toml.entry("environment.mcp_servers.0", "name")?.value == .string("a") && toml.entry("environment.mcp_servers.1", "name")?.value == .string("b"))
        // A table under an array of tables belongs to its last element.
        #expect(toml.entry("environment.mcp_servers.1.args", "verbose")?.value == .bool(true))
        #expect(toml.entry("solution", "notes")?.value == .string("one two\nthree"))
        #expect(toml.entry("solution", "raw")?.value == .string("C:\\dir\n"))
    }

    @Test("a task's settings written as an inline table are the task's settings: no-network and memory are applied, not passed over")
    func inlineTableSettings() throws {
        let bench = try TempDir()
        try bench.file("tasks/t/instruction.md", "x\n")
        try bench.file("tasks/t/tests/test.sh", "#!/bin/bash\n")
        try bench.file("tasks/t/task.toml", "agent = { timeout_sec = 300 }\nenvironment = { memory_mb = 4096, network_mode = \"no-network\" }\n")
        let task = try #require(try LocalBenchmark(directory: bench.path).task("t"))
        #expect(task.problem == nil && task.agentTimeout == 300 && task.memory == 4 << 30 && task.network == .noNetwork, "\(task)")
    }

    @Test("task.toml that is not TOML, or whose values are not what a task may say, is rejected with file:line", arguments: [
        ("[agent]\ntimeout_sec = [1, 2]\n", 2, "positive number"),
        ("[metadata]\ntags = [\"a\",\n\"b\"\n", 2, "an array opened here never closes"),
        ("x = [1 2]\n", 1, "expected ',' or ']'"),
        ("x = " + String(repeating: "[", count: 100_000) + "\n", 1, "nested more than 32 deep"),
        ("[\"\"]\nagent.timeout_sec = 5\n", 1, "quoted key that is empty"),
        ("[a.\"b.c\"]\n", 1, "holds a '.'"),
        ("e.m = 1\n[e]\nk = 2\n", 2, "already defined by dotted keys"),
        ("[environment]\nhealthcheck = 1\n[environment.healthcheck]\n", 3, "already holds a value"),
        ("x = { a = 1 }\nx.b = 2\n", 2, "cannot be extended"),
        ("[a.b]\n[a]\nb.c = 1\n", 3, "defined by a header"),
        ("x = { a.b = 1 }\n", 1, "dotted keys inside an inline table"),
        ("a = 1 # bell \u{07}\n", 1, "control character in a comment"),
        ("x = 1979-05-27 07:zz\n", 1, "not a date and time"),
        ("s = \"\"\"a\rb\"\"\"\n", 1, "carriage return"),
        ("x = \u{1b}[31m\n", 1, "\\u{1b}[31m' is not a supported value"),
        ("x = " + String(repeating: "{ a = ", count: 40) + "1" + String(repeating: " }", count: 40) + "\n", 1, "nested more than 32 deep"),
        ("x = { a = 1,\n b = 2 }\n", 1, "must close on its own line"),
        ("x = { a = 1, a = 2 }\n", 1, "defined twice in the inline table"),
        ("[environment]\ndocker_image = 5\n", 2, "must be an image name"),
        ("[environment]\ndocker_image = \"--privileged\"\n", 2, "must be an image name"),
        ("[[a]]\n[a]\n", 2, "defined twice"),
        ("[a]\n[[a]]\n", 2, "already defined as [a]"),
        ("a.b = 1\na.b = 2\n", 2, "defined twice in [a]"),
        ("[agent]\ntimeout_sec 5\n", 2, "expected '='"),
        ("name = \"unterminated\n", 1, "unterminated"),
        ("s = \"\"\"\nnever closes\n", 1, "a string opened here never closes"),
        ("x = 2024-1-01\n", 1, "not a supported value"),
        ("x = 0x\n", 1, "not a supported value"),
        ("x = 01\n", 1, "not a supported value"),
        ("x = 1 2\n", 1, "unexpected '2'"),
        ("x = \n", 1, "expected a value"),
        ("= 1\n", 1, "expected a key"),
        ("[agent]\na = 1\na = 2\n", 3, "defined twice"),
        ("[agent]\n[verifier]\n[agent]\n", 3, "defined twice"),
        ("[agent\n", 1, "expected ']'"),
        ("x = \"bad \\q escape\"\n", 1, "unsupported escape"),
        ("[agent]\ntimeout_sec = -5\n", 2, "positive number"),
        ("[agent]\n\n# c\ntimeout_sec = \"10\"\n", 4, "positive number"),
        ("[verifier]\ntimeout_sec = 0\n", 2, "positive number"),
        ("[agent]\ntimeout_sec = inf\n", 2, "at most 86400 (got inf)"),
        ("[agent]\ntimeout_sec = nan\n", 2, "positive number"),
        ("[agent]\ntimeout_sec = 1e300\n", 2, "at most 86400 (got 1e300)"),
        ("[verifier]\ntimeout_sec = 86_401\n", 2, "at most 86400 (got 86_401)"),
    ])
    func tomlErrors(text: String, line: Int, fragment: String) throws {
        let bench = try TempDir()
        let task = bench.path + "/tasks/t1"
        try bench.file("tasks/t1/instruction.md", "x")
        try bench.file("tasks/t1/tests/test.sh", "exit 0")
        try bench.file("tasks/t1/task.toml", text)
        try bench.file("tasks/t2/instruction.md", "x")
        try bench.file("tasks/t2/tests/test.sh", "exit 0")
        // The broken task is kept, with its problem; the other loads as usual.
        let loaded = try LocalBenchmark(directory: bench.path)
        let problem = try #require(loaded.task("t1")?.problem)
        #expect(problem.contains("\(task)/task.toml:\(line): "), "\(problem)")
        #expect(problem.contains(fragment), "\(problem)")
        #expect(loaded.problems == [problem])
        #expect(loaded.task("t2")?.problem == nil)
    }

    @Test("the largest task timeout allowed still loads")
    func timeoutBoundInclusive() throws {
        let bench = try TempDir()
        try bench.file("tasks/t1/instruction.md", "x")
        try bench.file("tasks/t1/tests/test.sh", "exit 0")
        try bench.file("tasks/t1/task.toml", "[agent]\ntimeout_sec = 86400\n")
        #expect(try LocalBenchmark(directory: bench.path).task("t1")?.agentTimeout == 86_400)
    }

    @Test("a task.toml over the 1 MiB cap is refused by its size, naming the file, the size and the cap")
    func oversizedTaskToml() throws {
        let bench = try TempDir()
        try bench.file("tasks/t1/instruction.md", "x")
        try bench.file("tasks/t1/tests/test.sh", "exit 0")
        let toml = try bench.file("tasks/t1/task.toml", "")
        #expect(truncate(toml, 3 << 20) == 0)
        let problem = try #require(try LocalBenchmark(directory: bench.path).task("t1")?.problem)
        #expect(problem == "\(toml): 3145728 bytes (3 MiB), over the 1 MiB cap for a task.toml", "\(problem)")
    }

    @Test("layout problems name the task and file, all of them at once")
    func layoutErrors() throws {
        let bench = try TempDir()
        try bench.file("tasks/no-tests/instruction.md", "x")
        try FileManager.default.createDirectory(atPath: bench.path + "/tasks/no-tests/tests", withIntermediateDirectories: true)
        try bench.file("tasks/no-instruction/tests/test.sh", "exit 0")
        try bench.file("tasks/bad solution/instruction.md", "x")
        try bench.file("tasks/half-solution/instruction.md", "x")
        try bench.file("tasks/half-solution/tests/test.sh", "exit 0")
        try FileManager.default.createDirectory(atPath: bench.path + "/tasks/half-solution/solution", withIntermediateDirectories: true)
        try bench.file("tasks/.hidden/whatever", "ignored")
        try bench.file("tasks/README.md", "not a task")
        // Every problem at once; broken tasks are kept (each scores 0 when run), a name that
        // cannot be a task id is left out.
        let loaded = try LocalBenchmark(directory: bench.path)
        let message = loaded.problems.joined(separator: "\n")
        #expect(loaded.problems.count == 4, "\(message)")
        #expect(message.contains("task 'no-tests': \(bench.path)/tasks/no-tests/tests/test.sh is missing"))
        #expect(message.contains("task 'no-instruction': \(bench.path)/tasks/no-instruction/instruction.md is missing"))
        #expect(message.contains("'bad solution' is not a valid task id"))
        #expect(message.contains("task 'half-solution': \(bench.path)/tasks/half-solution/solution/solve.sh is missing"))
        #expect(!message.contains(".hidden") && !message.contains("README"))
        #expect(loaded.tasks.map(\.id) == ["half-solution", "no-instruction", "no-tests"])
        #expect(loaded.tasks.allSatisfy { $0.problem != nil })
    }

    @Test("a directory without tasks/ or with no tasks is refused")
    func emptyBenchmarks() throws {
        let bench = try TempDir()
        let missing = try #require(throws: BenchmarkError.self) { try LocalBenchmark(directory: bench.path) }
        #expect(missing.message.contains("no tasks/ directory"))
        try FileManager.default.createDirectory(atPath: bench.path + "/tasks", withIntermediateDirectories: true)
        let empty = try #require(throws: BenchmarkError.self) { try LocalBenchmark(directory: bench.path) }
        #expect(empty.message.contains("holds no tasks"))
    }

    @Test("task ids are limited to [A-Za-z0-9._-] and may not start with a dot")
    func taskIDs() {
        #expect(BenchmarkTask.isValidID("fix-git_2.v1"))
        for bad in ["", ".", "..", ".x", "a/b", "a b", "é", "a\n"] { #expect(!BenchmarkTask.isValidID(bad), "\(bad)") }
    }

    @Test("reward text is a plain decimal number in [0, 1]")
    func rewardGrammar() {
        func parse(_ s: String) -> Double? { try? Reward.parseText(Array(s.utf8)).get() }
        #expect(parse("1") == 1)
        #expect(parse(" 0.5\n") == 0.5)
        #expect(parse("1.0") == 1)
        #expect(parse(".25") == 0.25)
        #expect(parse("5e-1") == 0.5)
        #expect(parse("-0")?.sign == .plus)
        for bad in ["", "yes", "nan", "NaN", "inf", "-inf", "1.5", "-0.1", "0x1p-1", "1,0", "0.5 0.5", "1e999", "١"] {
            #expect(parse(bad) == nil, "\(bad)")
        }
        func json(_ s: String) -> Double? { try? Reward.parseJSON(Array(s.utf8)).get() }
        #expect(json("1") == 1)
        #expect(json("{\"reward\": 0.75, \"other\": [1]}") == 0.75)
        for bad in ["{\"reward\": NaN}", "{\"reward\": true}", "{\"reward\": \"1\"}", "{\"score\": 1}", "{\"reward\": 2}", "[1]"] {
            #expect(json(bad) == nil, "\(bad)")
        }
    }
}
