import Foundation
import Testing

@testable import SandboxPolicy

@Suite("The policies shipped in policies/")
struct ShippedPolicyTests {
    static let names = ["base", "benchmark-task", "verifier", "coding-agent"]
    let loader = PolicyLoader(searchPaths: [shippedPolicies])

    @Test("every shipped policy's pids cgroup trips long before the shared RLIMIT_NPROC, so a fork bomb is reported as a pids limit",
          arguments: ["base", "benchmark-task", "verifier", "coding-agent", "benchmark-runner", "benchmark-scorer", "benchmark-tool-call", "triage"])
    func pidsBeforeNproc(name: String) throws {
        let l = try loader.load(name, requireAllPlaceholders: false).limits
        let pids = try #require(l.pids, "\(name) has no pids limit")
        // Several sandboxes share the host uid: the coding agent, max_concurrency tasks, their
        // verifiers. Eight full sandboxes must fit under RLIMIT_NPROC.
        #expect((l.nproc ?? .max) >= 8 * pids, "\(name): nproc \(l.nproc ?? 0) vs pids \(pids)")
    }

    @Test("each shipped policy loads for `policy check`, placeholders left as written", arguments: names)
    func loadsUnresolved(name: String) throws {
        let policy = try loader.load(name, requireAllPlaceholders: false)
        #expect(policy.name == name)
        #expect(policy.lineage.last == name)
        #expect(policy.lineage.first == "base")
    }

    @Test("each shipped policy loads for launching once every placeholder has a directory", arguments: names)
    func loadsResolved(name: String) throws {
        let unresolved = try loader.load(name, requireAllPlaceholders: false)
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("shipped-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: root) }
        var variables: [String: String] = [:]
        for placeholder in PolicyLoader.placeholders(in: unresolved) {
            let dir = root + "/" + placeholder
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            variables[placeholder] = dir
        }
        let policy = try loader.load(name, variables: variables)
        #expect(PolicyLoader.placeholders(in: policy).isEmpty)
        for mount in policy.mounts {
            #expect(mount.destination.hasPrefix("/"))
            if let source = mount.source { #expect(source.hasPrefix("/"), "\(mount)") }
        }
        // A launch with a placeholder missing must fail, naming it.
        if let (missing, _) = variables.first {
            var partial = variables
            partial[missing] = nil
            #expect(throws: PolicyDiagnostics.self) { try loader.load(name, variables: partial) }
        }
    }

    @Test("base grants /usr read-only and none of /etc wholesale, passwd, shadow or hosts")
    func baseIsMinimal() throws {
        let policy = try loader.load("base")
        let destinations = policy.mounts.map(\.destination)
        #expect(policy.mounts.first?.kind == .readOnly(source: "/usr"))
        for secret in ["/etc", "/etc/passwd", "/etc/shadow", "/etc/hosts", "/root", "/home"] {
            #expect(!destinations.contains(secret), "\(secret) must not be mounted")
        }
        #expect(policy.mounts.allSatisfy { if case .readWrite = $0.kind { false } else { true } })
        let tmp = try #require(policy.mounts.first { $0.destination == "/tmp" })
        #expect(tmp.kind == .tmpfs(size: 256 << 20, mode: 0o1777))
        let lib = try #require(policy.mounts.first { $0.destination == "/lib" })
        #expect(lib.keepSymlink && lib.optional)
        #expect(policy.network == NetworkSpec(mode: .none))
        #expect(policy.seccomp.defaultAction == .errno(38))
        #expect(policy.limits.memory == 2 << 30 && policy.limits.fsize == 1 << 30 && policy.limits.pids == 512)
        #expect(policy.env.set == ["PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"])
        #expect(policy.env.pass.isEmpty)
        #expect(policy.chdir == "/")
    }

    @Test("benchmark-task gives the agent /app and /agent but never the task's tests")
    func benchmarkTaskHasNoTests() throws {
        let policy = try loader.load(
            "benchmark-task", variables: ["workdir": "/srv/task/1", "agent_dir": "/srv/agent@abc"])
        #expect(policy.mounts.contains(MountSpec(kind: .readWrite(source: "/srv/task/1"), destination: "/app")))
        #expect(policy.mounts.contains(MountSpec(kind: .readOnly(source: "/srv/agent@abc"), destination: "/agent")))
        #expect(!policy.mounts.contains { $0.destination.hasPrefix("/tests") })
        #expect(policy.chdir == "/app")
        #expect(policy.network.mode == .none)
        #expect(policy.limits.timeoutSeconds == 600 && policy.limits.pids == 256)
        #expect(policy.env.set["PYTHONDONTWRITEBYTECODE"] == "1")
        // Restating /tmp replaced base's entry instead of adding a second one.
        #expect(policy.mounts.filter { $0.destination == "/tmp" }.count == 1)
    }

    @Test("verifier sees the tests read-only and writes only /app and its log directory")
    func verifierMounts() throws {
        let policy = try loader.load(
            "verifier", variables: ["workdir": "/w", "tests_dir": "/t", "logs_dir": "/l"])
        #expect(policy.mounts.contains(MountSpec(kind: .readOnly(source: "/t"), destination: "/tests")))
        let writable = policy.mounts.compactMap { if case .readWrite = $0.kind { $0.destination } else { nil } }
        #expect(writable == ["/app", "/logs/verifier"])
        #expect(policy.network.mode == .none)
        #expect(policy.limits.timeoutSeconds == 600)
    }

    @Test("coding-agent reaches the network only through the proxy and has no timeout")
    func codingAgent() throws {
        let policy = try loader.load("coding-agent", requireAllPlaceholders: false)
        #expect(policy.network == NetworkSpec(mode: .proxy, allow: []))
        #expect(policy.limits.timeoutSeconds == nil)
        #expect(policy.limits.memory == 4 << 30 && policy.limits.pids == 1024)
        #expect(policy.chdir == "/work")
        #expect(policy.env.set["HOME"] == "/home/agent")
        #expect(policy.env.pass == ["TERM"])
        #expect(policy.mounts.contains(MountSpec(kind: .readWrite(source: "{agent_staging}"), destination: "/work/agent")))
        #expect(PolicyLoader.placeholders(in: policy).contains("workspace_view"))
    }
}
