import Foundation
@testable import Sandbox
import SandboxPolicy
import Testing

@Suite("cgroup placement and autoharness doctor")
struct CgroupHostTests {
    @Test("a v2 controller that is available but not yet enabled counts only when delegation is assumed")
    func planAssumingDelegation() {
        let host = CgroupHost(v1: [:], v2: .init(ownDirectory: "/sys/fs/cgroup/svc", controllers: [], available: ["memory", "pids", "cpu"]))
        var limits = Limits()
        limits.memory = 1 << 30
        limits.pids = 64
        #expect(host.plan(for: limits).isEmpty)
        let assumed = host.plan(for: limits, assumingDelegation: true)
        #expect(assumed.map(\.controller) == ["memory", "pids"])
        #expect(assumed.allSatisfy { $0.version == 2 && $0.parent == "/sys/fs/cgroup/svc" })
        #expect(HostInspection.unenforceable(limits, host: host).isEmpty)
    }

    @Test("a missing controller is explained with the host's state and the fix")
    func unusableNamesStateAndFix() {
        let host = CgroupHost(v1: [:], v2: .init(ownDirectory: "/sys/fs/cgroup/user.slice", controllers: [], available: ["cpu"]))
        let text = host.unusable("memory")
        #expect(text.contains("cgroup v2 at /sys/fs/cgroup/user.slice: available [cpu], enabled for children []"))
        #expect(text.contains("systemd-run -p Delegate=yes --scope autoharness"))
        var limits = Limits()
        limits.memory = 1 << 30
        limits.cpus = 1
        #expect(HostInspection.unenforceable(limits, host: host) == ["limits.memory"])

        var readOnly = CgroupHost(v1: [:], v2: .init(ownDirectory: "/sys/fs/cgroup", controllers: [], available: ["memory"]))
        readOnly.delegationProblem = "enabling memory in /sys/fs/cgroup/cgroup.subtree_control failed: Read-only file system"
        #expect(readOnly.unusable("memory").contains("Read-only file system"))
        #expect(readOnly.unusable("memory").contains("writable cgroup filesystem"))
    }

    /// The move that delegation makes, on this machine's real cgroup2 mount (it has no
    /// controllers here, but the no-internal-process move is the same kernel operation).
    @Test("delegation moves every process of a cgroup into the supervisor leaf, the named one first")
    func movesProcessesIntoLeaf() throws {
        try requireRoot()
        guard let v2 = CgroupHost.detect().v2 else {
            Issue.record("no cgroup2 mount on this host; the move cannot be tested")
            return
        }
        let dir = v2.ownDirectory + "/autoharness-test-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try #require(mkdir(dir, 0o755) == 0, "mkdir \(dir): \(String(cString: strerror(errno)))")
        defer {
            rmdir(dir + "/" + CgroupHost.supervisorLeaf)
            rmdir(dir)
        }
        var sleepers: [Process] = []
        defer { for p in sleepers where p.isRunning { kill(p.processIdentifier, SIGKILL); p.waitUntilExit() } }
        for _ in 0..<3 {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/bin/sleep")
            p.arguments = ["30"]
            try p.run()
            sleepers.append(p)
            #expect(CgroupHost.writeErrno(dir + "/cgroup.procs", "\(p.processIdentifier)") == 0)
        }
        let pids = sleepers.map(\.processIdentifier)
        let r = CgroupHost.moveProcesses(of: dir, into: dir + "/" + CgroupHost.supervisorLeaf, first: pids[1])
        #expect(r.problem == nil)
        #expect(r.moved.first == pids[1])
        #expect(Set(r.moved) == Set(pids))
        #expect(SandboxCgroup.processes(in: dir).isEmpty)
        #expect(Set(SandboxCgroup.processes(in: dir + "/" + CgroupHost.supervisorLeaf)) == Set(pids))
        for p in sleepers { kill(p.processIdentifier, SIGKILL); p.waitUntilExit() }
    }

    @Test("doctor reports this host, starts a real sandbox, checks every shipped policy and exits 0")
    func doctorOnThisHost() throws {
        try requireRoot()
        let r = try autoharness(["doctor"])
        #expect(r.status == 0, "\(r.stdout)\(r.stderr)")
        #expect(r.stdout.contains("sandbox              ok       started /bin/true under the base policy"))
        #expect(r.stdout.contains("seccomp              ok"))
        for policy in ["base", "benchmark-task", "verifier", "coding-agent", "benchmark-runner", "benchmark-scorer"] {
            #expect(r.stdout.contains("policy \(policy)"), "\(policy) not checked")
        }
        #expect(r.stdout.contains("\ndoctor: ok: kernel "))
        let summary = try autoharness(["doctor", "--summary"])
        #expect(summary.stdout.hasPrefix("doctor: ok: kernel ") && summary.stdout.split(separator: "\n").count == 1)
    }

    @Test("doctor exits 1 and names the policy when a policy in use is broken")
    func doctorFailsOnBadPolicy() throws {
        let dir = try TempDir()
        _ = try dir.file("broken.yaml", "extends: base\nlimits:\n  memory: lots\n")
        let r = try autoharness(["doctor", "--summary", "--policy-dir", dir.path, "--policy", "broken", "--policy", "base"])
        #expect(r.status == 1)
        #expect(r.stdout.contains("doctor: 1 problem: policy broken:"))
        #expect(r.stdout.contains("broken.yaml:3"))
    }
}
