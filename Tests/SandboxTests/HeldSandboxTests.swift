import Foundation
@testable import Sandbox
import SandboxPolicy
import Testing
import TestSupport

/// Sandboxes built ahead of their run (`SandboxRunner.build`, `HeldSandbox`): the payload waits
/// before seccomp and exec until `run()`, the timeout counts from there, and a discarded or
/// failed build leaves nothing behind.
@Suite("Sandboxes built ahead of their run", .serialized)
struct HeldSandboxTests {
    /// `python3 -c script` with `out` read-write at /out.
    static func plan(_ script: String, out: String, timeout: Double? = 30, mounts: [MountSpec] = []) throws -> LaunchPlan {
        var limits = Limits()
        limits.timeoutSeconds = timeout
        let policy = Policy(name: "held", mounts: minimalMounts + [MountSpec(kind: .readWrite(source: out), destination: "/out")] + mounts,
                            limits: limits)
        return try PlanCompiler.compile(policy: policy, command: ["/usr/bin/python3", "-c", script], hostEnvironment: [:])
    }

    @Test("a held payload does not run until run(); released, it runs once")
    func waitsUntilRun() throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        let plan = try Self.plan("open('/out/ran', 'a').write('x')", out: out.path)
        let held = try SandboxRunner.build(plan, options: RunOptions())
        #expect(held.isReady)
        usleep(300_000)
        #expect(!FileManager.default.fileExists(atPath: out.file("ran")), "the payload ran while held")
        let r = held.run()
        #expect(r.termination == .exited(0))
        #expect((try? String(contentsOfFile: out.file("ran"), encoding: .utf8)) == "x")
    }

    @Test("the timeout counts from run(), not from the build; it still ends a payload that overruns")
    func timeoutFromRun() throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        let quick = try SandboxRunner.build(try Self.plan("import time; time.sleep(0.3)", out: out.path, timeout: 1), options: RunOptions())
        #expect(quick.isReady)
        usleep(1_500_000)  // longer than the timeout, spent held
        #expect(quick.run().termination == .exited(0))

        let slow = try SandboxRunner.build(try Self.plan("import time; time.sleep(5)", out: out.path, timeout: 1), options: RunOptions())
        #expect(slow.isReady)
        let start = Date()
        #expect(slow.run().termination == .timedOut)
        #expect(Date().timeIntervalSince(start) < 4)
    }

    @Test("seccomp is in force after the release: ptrace is refused with EPERM and reported")
    func seccompAfterRelease() throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        let script = """
            import ctypes, os
            libc = ctypes.CDLL(None, use_errno=True)
            r = libc.ptrace(16, os.getppid(), 0, 0)  # PTRACE_ATTACH: allowed to a parent's uid without a filter
            open('/out/ptrace', 'w').write(f"{r} {ctypes.get_errno()}")
            """
        let held = try SandboxRunner.build(try Self.plan(script, out: out.path), options: RunOptions())
        #expect(held.isReady)
        let r = held.run()
        #expect(r.termination == .exited(0))
        #expect((try? String(contentsOfFile: out.file("ptrace"), encoding: .utf8)) == "-1 \(EPERM)")
        #expect(r.violations.contains { $0.name == "ptrace" }, "\(r.violations)")
    }

    @Test("held after seccomp where the filter allows the wait (the filter is loaded while it waits); before it where the policy denies recvfrom, and it still runs",
          arguments: [true, false])
    func holdAfterSeccomp(allowRecv: Bool) throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        var limits = Limits()
        limits.timeoutSeconds = 30
        var policy = Policy(name: "held", mounts: minimalMounts + [MountSpec(kind: .readWrite(source: out.path), destination: "/out")],
                            limits: limits)
        if !allowRecv { policy.seccomp.deny.append("recvfrom") }
        let plan = try PlanCompiler.compile(policy: policy, command: ["/usr/bin/true"], hostEnvironment: [:])
        #expect(plan.filter.allowsWaitingAfterLoad == allowRecv)
        let control = SandboxControl()
        var options = RunOptions()
        options.control = control
        let held = try SandboxRunner.build(plan, options: options)
        #expect(held.isReady)
        // Seccomp mode 2 (filter) in the held payload exactly when it waits after the load.
        let filtered = control.processIDs.filter { pid in
            SmallFile.contents(of: "/proc/\(pid)/status").split(separator: "\n").contains("Seccomp:\t2")
        }
        #expect(filtered.count == (allowRecv ? 1 : 0), "\(control.processIDs): \(filtered)")
        #expect(held.run().termination == .exited(0))
    }

    @Test("discard() ends a held sandbox: its processes are gone and its payload never ran")
    func discardLeavesNothing() throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        let control = SandboxControl()
        var options = RunOptions()
        options.control = control
        let held = try SandboxRunner.build(try Self.plan("open('/out/ran', 'w').write('x')", out: out.path), options: options)
        #expect(held.isReady)
        let pids = control.processIDs
        #expect(pids.count == 3, "monitor, init and the held payload: \(pids)")
        let id = held.sandboxID
        held.discard()
        #expect(control.processIDs.isEmpty)
        for pid in pids {
            let status = procText("/proc/\(pid)/status") ?? "gone"
            #expect(kill(pid, 0) != 0 && errno == ESRCH, "process \(pid) outlived discard(): \(status.prefix(300))")
        }
        #expect(!FileManager.default.fileExists(atPath: out.file("ran")))
        let cgroups = try runProcess("/usr/bin/find", ["/sys/fs/cgroup", "-maxdepth", "8", "-name", "*\(id)*"])
        #expect(cgroups.stdout.isEmpty, "cgroups left: \(cgroups.stdout)")
    }

    @Test("a build that fails is not ready, and run() reports its setup failure")
    func failedBuild() throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        let src = try TempDir(mode: 0o755)
        let plan = try Self.plan("pass", out: out.path, mounts: [MountSpec(kind: .readOnly(source: src.path), destination: "/src")])
        // The source is swapped after the plan was made: the launch refuses it (device/inode).
        try FileManager.default.moveItem(atPath: src.path, toPath: src.path + ".old")
        try FileManager.default.createDirectory(atPath: src.path, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: src.path + ".old") }
        let held = try SandboxRunner.build(plan, options: RunOptions())
        #expect(!held.isReady)
        guard case .setupFailed(let message, _) = held.run().termination else {
            Issue.record("a swapped bind source did not fail the build")
            return
        }
        #expect(message.contains("/src"), "\(message)")
    }

    @Test("buildTouchesNoSource is false exactly when a mount lies inside a directory bind; canBeBuiltWhile also when a bind source lies inside what another sandbox writes")
    func touchesNoSource() throws {
        let out = try TempDir(mode: 0o777)
        try FileManager.default.createDirectory(atPath: out.file("inner"), withIntermediateDirectories: false)
        let top = try Self.plan("pass", out: out.path, mounts: [MountSpec(kind: .tmpfs(size: nil, mode: 0o755), destination: "/scratch")])
        #expect(top.buildTouchesNoSource)
        // The tmpfs's mount point would be made in `out` itself, through the /out bind.
        let nested = try Self.plan("pass", out: out.path, mounts: [MountSpec(kind: .tmpfs(size: nil, mode: 0o755), destination: "/out/inner")])
        #expect(!nested.buildTouchesNoSource)
        // Inside a tmpfs: made in the sandbox's own memory.
        let inTmpfs = try Self.plan("pass", out: out.path, mounts: [
            MountSpec(kind: .tmpfs(size: nil, mode: 0o755), destination: "/scratch"),
            MountSpec(kind: .symlink(target: "/out"), destination: "/scratch/link"),
        ])
        #expect(inTmpfs.buildTouchesNoSource)

        // Built while a sandbox that writes `out` runs: `out` itself may be bound (it stays
        // live), something inside it may not (it could be replaced after the build).
        #expect(top.canBeBuiltWhile(writable: [out.path]))
        #expect(!nested.canBeBuiltWhile(writable: []))
        let inside = try Self.plan("pass", out: out.path, mounts: [MountSpec(kind: .readOnly(source: out.file("inner")), destination: "/inner")])
        #expect(inside.buildTouchesNoSource)
        #expect(!inside.canBeBuiltWhile(writable: [out.path]))
        #expect(inside.canBeBuiltWhile(writable: [out.path + "-other"]))
        #expect(!inside.canBeBuiltWhile(writable: ["/"]))
    }

    @Test("mount namespaces held for a later release are released, both of them")
    func namespacesReleased() throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        var options = RunOptions()
        options.releaseNamespacesLater = true
        let before = NamespaceRelease.releasedCount
        let script = "import os; open('/out/ns', 'w').write(os.readlink('/proc/self/ns/mnt'))"
        let r = try SandboxRunner.run(try Self.plan(script, out: out.path), options: options)
        #expect(r.termination == .exited(0))
        let payloadNamespace = try String(contentsOfFile: out.file("ns"), encoding: .utf8)
        #expect(payloadNamespace.hasPrefix("mnt:["))
        // The payload's namespace is let go of (other tests' sandboxes, running beside this
        // one, may hold their own for a moment, and release theirs too).
        func held() -> Bool {
            let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")) ?? []
            return fds.contains { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/" + $0)) == payloadNamespace }
        }
        let deadline = Date().addingTimeInterval(3)
        while (held() || NamespaceRelease.releasedCount < before + 2) && Date() < deadline { usleep(5_000) }
        #expect(NamespaceRelease.releasedCount >= before + 2, "init's and the payload's mount namespaces")
        #expect(!held(), "the payload's \(payloadNamespace) is still held")
    }
}
