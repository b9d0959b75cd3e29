import Foundation
import Sandbox
import SandboxPolicy
import Testing

@testable import Benchmark

@Suite("A task's declared memory and cores (task.toml [environment])")
struct TaskResourcesTests {
    static func parsed(_ environment: String) throws(BenchmarkError) -> TaskResources {
        try TaskResources.read(TaskToml.parse("[environment]\n" + environment + "\n", file: "task.toml"), path: "task.toml")
    }

    static func refusal(_ environment: String) -> String? {
        do {
            _ = try parsed(environment)
            return nil
        } catch {
            return error.message
        }
    }

    @Test("memory_mb, the older memory, cpus and storage are read as Harbor reads them; a disagreement, a unit Harbor rejects, zero or a typo's size is the task's problem at file:line")
    func parsedAsHarborReadsThem() throws {
        #expect(try Self.parsed("memory_mb = 3072").memory == 3 << 30)
        #expect(try Self.parsed("memory = \"4G\"").memory == 4 << 30)
        #expect(try Self.parsed("memory = \"1.5g\"").memory == 1536 << 20)
        #expect(try Self.parsed("memory = \" 512M \"").memory == 512 << 20)
        #expect(try Self.parsed("memory = \"2097152K\"").memory == 2 << 30)
        #expect(try Self.parsed("memory = \"4G\"\nmemory_mb = 4096").memory == 4 << 30)
        #expect(try Self.parsed("cpus = 2").cpus == 2 && Self.parsed("cpus = 0.5").cpus == 0.5)
        #expect(try Self.parsed("docker_image = \"x:1\"") == TaskResources())
        #expect(try Self.parsed("storage = \"10G\"").storage == 10 << 30)
        #expect(try Self.parsed("storage_mb = 10240\nstorage = \"10G\"").storage == 10 << 30)
        #expect(Self.refusal("storage = \"10G\"\nstorage_mb = 2048")?.contains("task.toml:2: [environment] storage (10G, 10240 MB) and storage_mb (2048) disagree") == true)
        #expect(Self.refusal("memory = \"4G\"\nmemory_mb = 2048")?.contains("task.toml:2: [environment] memory (4G, 4096 MB) and memory_mb (2048) disagree") == true)
        for bad in ["memory = \"4GB\"", "memory = \"4\"", "memory = \"G\"", "memory = \"1K\"", "memory = \"1e300G\"", "memory = 4",
                    "memory_mb = 0", "memory_mb = 16", "memory = \"16M\"", "memory_mb = 1.5", "memory_mb = \"4096\"", "cpus = 0", "cpus = -1", "cpus = 5000", "cpus = \"2\"",
                    "storage = \"10GB\"", "storage = \"32M\"", "storage_mb = 16", "storage_mb = 1.5", "storage_mb = \"10240\""] {
            #expect(Self.refusal(bad)?.hasPrefix("task.toml:2: [environment] ") == true, "\(bad): \(Self.refusal(bad) ?? "accepted")")
        }
    }

    /// A benchmark of one task whose solution and test each write `allocate` MB before their
    /// work, its task.toml declaring `environment`.
    static func benchmark(_ dir: TempDir, _ id: String, environment: String, agentMB: Int, verifierMB: Int) throws -> BenchmarkTask {
        let touch = { (mb: Int) in "python3 -c 'b = bytearray(\(mb) << 20); b[::4096] = b\"\\x01\" * len(b[::4096]); print(len(b))'" }
        try dir.file("tasks/\(id)/task.toml", "[environment]\n\(environment)\n")
        try dir.file("tasks/\(id)/instruction.md", "write 42\n")
        try dir.file("tasks/\(id)/solution/solve.sh", "#!/bin/bash\nset -e\n\(touch(agentMB))\necho 42 > /app/answer.txt\n", mode: 0o755)
        try dir.file("tasks/\(id)/tests/test.sh", """
            #!/bin/bash
            \(touch(verifierMB)) || exit 1
            if [ "$(cat /app/answer.txt)" = 42 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
            """, mode: 0o755)
        return try #require(try LocalBenchmark(directory: dir.path).task(id))
    }

    @Test("the task's memory replaces the policies' 2G both ways, in the agent's sandbox and the verifier's: 2.3 GB fits a task declaring 3 GB, 200 MB does not fit one declaring 128 MB")
    func appliedToBothSandboxes() throws {
        try requireRoot()
        let h = try Harness(agent: nil, oracle: true)
        let dir = try TempDir()
        // Above the policies' 2G: passes only with the task's 3 GB applied to both sandboxes.
        let large = try Self.benchmark(dir, "large", environment: "memory_mb = 3072", agentMB: 2300, verifierMB: 2300)
        let a = h.run(large)
        #expect(a.status == .passed && a.reward == 1, "\(a)")
        // Below the policies' 2G: the agent's 200 MB is killed by the task's 128 MB.
        let small = try Self.benchmark(dir, "small", environment: "memory = \"128M\"", agentMB: 200, verifierMB: 8)
        let b = h.run(small)
        #expect(b.status == .agentCrashed && b.reward == 0 && b.detail?.contains("agent exited 137") == true, "\(b)")
        // And the verifier's: its 200 MB is killed, so it writes no reward.
        let verifier = try Self.benchmark(dir, "small-verifier", environment: "memory = \"128M\"", agentMB: 8, verifierMB: 200)
        let c = h.run(verifier)
        #expect(c.status != .passed && c.reward == 0, "\(c)")
    }
}
