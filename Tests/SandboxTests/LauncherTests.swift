import CSandboxLaunch
import Foundation
@testable import Sandbox
import SandboxPolicy
import Testing

@Suite("The launcher executable (autoharness-launch)")
struct LauncherTests {
    /// Host pids of the sandbox's processes other than the payload, and their executables.
    static func monitorExecutables(useLauncher: Bool) throws -> [String] {
        let sandbox = try SleepingSandbox(seconds: 1) { $0.useLauncher = useLauncher }
        let pids = sandbox.waitForPayload()
        let payload = sandbox.payload(in: pids)
        let exes = pids.filter { $0 != payload }.map { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\($0)/exe")) ?? "?" }
        let r = try #require(sandbox.finish())
        #expect(r.termination == .exited(0))
        #expect(r.leftovers.isEmpty)
        return exes
    }

    @Test("the sandbox's monitor and init are the launcher, not copies of the supervisor; turned off, they are forks of it")
    func monitorIsTheLauncher() throws {
        try requireRoot()
        let launcher = try #require(Launcher.shared, "no usable launcher next to the test binary: \(Launcher.unavailableReason ?? "")")
        let real = URL(fileURLWithPath: launcher.path).resolvingSymlinksInPath().path
        let viaLauncher = try Self.monitorExecutables(useLauncher: true)
        #expect(viaLauncher.count == 2 && viaLauncher.allSatisfy { $0 == real }, "\(viaLauncher) vs \(real)")
        let self_ = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        let forked = try Self.monitorExecutables(useLauncher: false)
        #expect(forked.count == 2 && forked.allSatisfy { $0 == self_ }, "\(forked) vs \(self_)")
    }

    @Test("a launcher that is not a root-owned regular file writable only by root, in a directory only root can change, is not used")
    func untrustedLauncherRefused() throws {
        try requireRoot()
        let dir = try TempDir()
        let good = dir.path + "/good", groupWritable = dir.path + "/gw", foreign = dir.path + "/foreign", link = dir.path + "/link"
        for f in [good, groupWritable, foreign] {
            #expect(FileManager.default.createFile(atPath: f, contents: Data("#!/bin/true\n".utf8)))
            chmod(f, 0o755)
        }
        chmod(groupWritable, 0o775)
        chown(foreign, 65534, 65534)
        symlink(good, link)
        let sub = dir.path + "/sub"
        mkdir(sub, 0o755)
        if case .success(let l) = Launcher.open(path: good) { close(l.fd) } else { Issue.record("a root-owned 0755 file was refused") }
        // A symlink is opened as itself (O_PATH | O_NOFOLLOW), never followed.
        for (path, why) in [(groupWritable, "writable by group or others"), (foreign, "owned by uid 65534"),
                            (link, "not a regular file"), (sub, "not a regular file")] {
            switch Launcher.open(path: path) {
            case .success(let l):
                close(l.fd)
                Issue.record("\(path) was accepted as a launcher")
            case .failure(let p):
                #expect(p.message.contains(why), "\(p.message)")
            }
        }
        // A good file in a directory others may write: its name could be any root-owned program.
        let openDir = try TempDir(mode: 0o777)
        let inOpenDir = openDir.path + "/autoharness-launch"
        #expect(FileManager.default.createFile(atPath: inOpenDir, contents: Data("#!/bin/true\n".utf8)))
        chmod(inOpenDir, 0o755)
        switch Launcher.open(path: inOpenDir) {
        case .success(let l):
            close(l.fd)
            Issue.record("a launcher in a world-writable directory was accepted")
        case .failure(let p):
            #expect(p.message.contains("is not root-owned and writable only by root"), "\(p.message)")
        }
    }

    @Test("the plan crosses to the launcher as bytes intact, and bytes that do not hold together are refused")
    func planWire() throws {
        var policy = Policy(name: "wire", mounts: minimalMounts + [MountSpec(kind: .tmpfs(size: 1 << 20, mode: 0o1777), destination: "/scratch")])
        policy.env.set = ["GREETING": "hello world"]
        let plan = try PlanCompiler.compile(policy: policy, command: ["/usr/bin/printf", "%s\\n", "a b"], hostEnvironment: [:])
        let c = CPlan(plan, stdio: (-1, 7, 9), cgroupJoin: ["/sys/fs/cgroup/pids/x/tasks"])
        #expect(c.plan.netns_fd == -1)  // never fd 0 by default: no namespace made ahead of time
        c.plan.netns_fd = 42
        var bytes: UnsafeMutablePointer<UInt8>?
        var length = 0
        #expect(withUnsafePointer(to: &c.plan) { ahl_plan_pack($0, 6, &bytes, &length) } == 0)
        defer { free(bytes) }
        let packed = Array(UnsafeBufferPointer(start: bytes, count: length))

        func unpack(_ b: [UInt8]) -> (Int32, ahl_plan) {
            var p = ahl_plan()
            let rc = b.withUnsafeBufferPointer { ahl_plan_unpack($0.baseAddress, $0.count, &p) }
            return (rc, p)
        }
        try packed.withUnsafeBufferPointer { buffer in
            var p = ahl_plan()
            #expect(ahl_plan_unpack(buffer.baseAddress, buffer.count, &p) == 0)
            func strings(_ v: UnsafePointer<UnsafePointer<CChar>?>?) -> [String] {
                var out: [String] = []
                var i = 0
                while let s = v?[i] { out.append(String(cString: s)); i += 1 }
                return out
            }
            #expect(strings(p.argv) == plan.command)
            #expect(strings(p.envp) == plan.environment)
            #expect(strings(p.cgroup_join) == ["/sys/fs/cgroup/pids/x/tasks"])
            #expect(String(cString: p.cwd) == plan.workingDirectory)
            #expect(p.n_mounts == UInt32(plan.mounts.count) && p.n_rlimits == UInt32(plan.rlimits.count))
            for (i, m) in plan.mounts.enumerated() {
                #expect(String(cString: p.mounts[i].dest) == m.destination)
                if case .bind(let source, _, let dev, let ino, _, _) = m.kind {
                    #expect(String(cString: p.mounts[i].source) == source && p.mounts[i].dev == dev && p.mounts[i].ino == ino)
                }
            }
            #expect(p.bpf_len == UInt32(plan.filter.instructionCount))
            #expect(Array(UnsafeRawBufferPointer(start: p.bpf, count: plan.filter.bpf.count)) == plan.filter.bpf)
            // The payload's stdio is renumbered to where the launcher finds it.
            #expect(p.stdio.0 == -1 && p.stdio.1 == 7 && p.stdio.2 == 8)
            // The network namespace made ahead of time, likewise (after stdio).
            #expect(p.netns_fd == 9)
            #expect(p.uid == plan.identity.uid && p.cgroup_into_fd == -1)
        }

        #expect(unpack(Array(packed.dropLast(8))).0 == EINVAL)  // shorter than it says
        var magic = packed
        magic[0] ^= 0xff
        #expect(unpack(magic).0 == EINVAL)
        var argv = packed
        // `argv`'s offset (after magic, version, total and six counts) pointing past the end.
        withUnsafeBytes(of: UInt64(packed.count + 64)) { for (i, b) in $0.enumerated() { argv[40 + i] = b } }
        #expect(unpack(argv).0 == EINVAL)
    }

    @Test("the launcher has no C library: no interpreter, none of glibc's or the Swift runtime's start-up, and it runs a sandbox")
    func launcherHasNoCLibrary() throws {
        try requireRoot()
        let launcher = try #require(Launcher.shared, "no usable launcher next to the test binary: \(Launcher.unavailableReason ?? "")")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: launcher.path))
        // ELF64: e_phoff at 32, e_phentsize at 54, e_phnum at 56; PT_INTERP (3) names a loader.
        func int<T: FixedWidthInteger>(_ at: Int, _: T.Type) -> Int {
            Int(bytes.subdata(in: at..<(at + MemoryLayout<T>.size)).withUnsafeBytes { $0.loadUnaligned(as: T.self) })
        }
        let phoff = int(32, UInt64.self), phentsize = int(54, UInt16.self), phnum = int(56, UInt16.self)
        let types = (0..<phnum).map { int(phoff + $0 * phentsize, UInt32.self) }
        #expect(!types.contains(3), "the launcher asks for a dynamic loader: \(types)")
        // glibc's start-up probes the CPU (a hypervisor trap per query); the Swift runtime's
        // registers metadata. Neither belongs on every sandbox's critical path.
        for symbol in ["__libc_start_main", "swift_addNewDSOImage", "__libc_setup_tls"] {
            #expect(bytes.range(of: Data(symbol.utf8)) == nil, "the launcher contains \(symbol)")
        }
        let run = try autoharness(["sandbox", "exec", "--policy", "base", "--", "/bin/sh", "-c", "echo started"])
        #expect(run.status == 0 && run.stdout == "started\n", "\(run.stderr)")
    }

    @Test("the launcher built for use has no switch to leave a security layer out (only scripts/bench-layers' build does)")
    func noLayerSwitch() throws {
        // Written backwards so that this test's own binary does not hold the names it looks for.
        let needles = ["sreyal-hcneb-ssenrahotua", "stnuom-kcol"].map { Data(String($0.reversed()).utf8) }
        // The launcher next to the binaries (not $AUTOHARNESS_LAUNCHER), the CLI, and this
        // process, which links the same C code for the forked monitor.
        let selfExe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        for path in [Built.directory + "/autoharness-launch", Built.autoharness, selfExe] {
            let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
            #expect(bytes.count > 10_000, "\(path)")
            for needle in needles { #expect(bytes.range(of: needle) == nil, "\(path) holds \(String(decoding: needle, as: UTF8.self))") }
        }
    }
}
