import Foundation
@testable import Sandbox
import SandboxPolicy
import Testing

@Suite("cgroup placement and autoharness doctor")
struct CgroupHostTests {
    @Test("mountinfo paths are read as the paths they are (\\040 a space, \\011 a tab, \\012 a newline, \\134 a backslash)")
    func mountinfoPathsUnescaped() {
        #expect(CgroupHost.unescaped("/sys/fs/cgroup/my\\040dir\\011x\\012y\\134z") == "/sys/fs/cgroup/my dir\tx\ny\\z")
        #expect(CgroupHost.unescaped("/plain") == "/plain")
        #expect(CgroupHost.unescaped("/end\\04") == "/end\\04")
    }

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
        func row(_ topic: String) -> String? {
            r.stdout.split(separator: "\n").first { $0.hasPrefix(topic + " ") }.map { $0.split(separator: " ", omittingEmptySubsequences: true).dropFirst().joined(separator: " ") }
        }
        #expect(row("sandbox")?.hasPrefix("ok started /bin/true under the base policy") == true, "\(r.stdout)")
        #expect(row("seccomp")?.hasPrefix("ok ") == true)
        #expect(row("freeze")?.hasPrefix("ok a test sandbox") == true, "\(r.stdout)")
        for policy in ["base", "benchmark-task", "verifier", "coding-agent", "benchmark-runner", "benchmark-scorer", "triage"] {
            #expect(r.stdout.contains("policy \(policy)"), "\(policy) not checked")
        }
        // Tasks on their own image: podman (CI installs it for its images) and overlayfs.
        #expect(row("images")?.hasPrefix("info podman version ") == true && row("images")?.contains("overlayfs available") == true
                && row("images")?.contains("image sandboxes map ids 0-65535 onto host uids 2147418112-2147483647") == true, "\(r.stdout)")
        // The held-out VM runtime: qemu and the guest kernel from scripts/install-vm, KVM by a
        // probe boot (on this machine kind /dev/kvm opens and qemu aborts), what a gate uses.
        let lines = r.stdout.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ") }
        #expect(lines.contains { $0.hasPrefix("vm qemu ok /usr/bin/qemu-system-x86_64: QEMU emulator version") }, "\(r.stdout)")
        #expect(lines.contains { $0.hasPrefix("vm kernel ok ") && $0.contains("-amd64 in /var/cache/autoharness/vm/kernel") }, "\(r.stdout)")
        #expect(lines.contains { $0.hasPrefix("vm kvm ") && ($0.contains("a probe guest booted") || $0.contains("before a probe guest booted") || $0.contains("did not boot")) }, "\(r.stdout)")
        #expect(lines.contains { $0.hasPrefix("vm gate info gate.held_out_runtime: vm runs ") }, "\(r.stdout)")
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

@Suite("The cgroup freezer")
struct FreezerTests {
    /// A payload that evades SIGSTOP: its leader thread exits (a zombie) while a second
    /// thread ticks into /out/ticks, and a POSIX timer sends it SIGCONT every 5 ms.
    static let evader = """
        import ctypes, os, signal, threading, time
        fd = os.open('/out/ticks', os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        def tick():
            while True:
                os.write(fd, b'.')
                time.sleep(0.005)
        class ev(ctypes.Structure):
            _fields_ = [('v', ctypes.c_void_p), ('signo', ctypes.c_int), ('notify', ctypes.c_int), ('pad', ctypes.c_int * 12)]
        class ts(ctypes.Structure):
            _fields_ = [('s', ctypes.c_long), ('ns', ctypes.c_long)]
        class its(ctypes.Structure):
            _fields_ = [('i', ts), ('v', ts)]
        libc = ctypes.CDLL(None)
        signal.signal(signal.SIGCONT, lambda *_: None)
        threading.Thread(target=tick, daemon=True).start()
        t = ctypes.c_void_p()
        assert libc.timer_create(1, ctypes.byref(ev(signo=signal.SIGCONT)), ctypes.byref(t)) == 0
        assert libc.timer_settime(t, 0, ctypes.byref(its(ts(0, 5000000), ts(0, 5000000))), None) == 0
        libc.syscall(60, 0)
        """

    @Test("a frozen sandbox stays frozen against a zombie leader and self-sent SIGCONT, thaws, and is killed while frozen on timeout",
          arguments: [1, 2])
    func freezerHoldsAndKills(version: Int) throws {
        try requireRoot()
        let detected = CgroupHost.detect()
        let host: CgroupHost
        if version == 1 {
            guard detected.v1["freezer"] != nil else {
                Issue.record("no v1 freezer hierarchy mounted on this host")
                return
            }
            host = CgroupHost(v1: detected.v1, v2: nil)
        } else {
            guard detected.v2 != nil else {
                Issue.record("no cgroup2 mount on this host")
                return
            }
            host = CgroupHost(v1: detected.v1, v2: detected.v2)
        }
        let dir = try TempDir(mode: 0o777)
        let ticks = dir.path + "/ticks"
        var limits = Limits()
        limits.timeoutSeconds = 5
        let policy = Policy(name: "freeze", mounts: minimalMounts + [MountSpec(kind: .readWrite(source: dir.path), destination: "/out")], limits: limits)
        let plan = try PlanCompiler.compile(policy: policy, command: ["/usr/bin/python3", "-c", Self.evader], hostEnvironment: [:])
        var options = RunOptions()
        options.cgroupHost = host
        let control = SandboxControl()
        options.control = control
        let result = Locked<Result<SandboxResult, SandboxError>?>(nil)
        let started = Date()
        let runOptions = options
        let worker = Thread {
            let r = Result { () throws(SandboxError) in try SandboxRunner.run(plan, options: runOptions) }
            result.withLock { result.value = r }
        }
        worker.start()
        func count() -> Int { (try? FileManager.default.attributesOfItem(atPath: ticks)[.size] as? Int) ?? 0 }
        while count() < 20 && Date().timeIntervalSince(started) < 4 { usleep(10_000) }
        try #require(count() >= 20, "the payload never ticked")

        try control.freeze()
        #expect(control.isFrozen)
        let frozenAt = count()
        usleep(1_000_000)
        #expect(count() == frozenAt, "ticked \(count() - frozenAt) times while frozen (cgroup v\(version))")

        try control.thaw()
        usleep(300_000)
        #expect(count() > frozenAt + 10, "did not run again after the thaw")

        // Frozen when the timeout strikes: the sandbox must still die, promptly.
        try control.freeze()
        while result.withLock({ result.value == nil }) && Date().timeIntervalSince(started) < 12 { usleep(20_000) }
        let r = try #require(result.withLock { result.value }, "a frozen sandbox outlived its timeout").get()
        #expect(r.termination == .timedOut)
        #expect(r.leftovers.isEmpty)
        #expect(Date().timeIntervalSince(started) < 8)
    }
}


@Suite("clone3(CLONE_INTO_CGROUP)")
struct CloneIntoCgroupTests {
    @Test("the monitor is created inside its v2 cgroup by clone3 where the kernel has it; without it, it joins by itself: either way the whole sandbox is inside",
          arguments: [true, false])
    func monitorBornInside(clone: Bool) throws {
        try requireRoot()
        let detected = CgroupHost.detect()
        guard detected.v2 != nil else {
            Issue.record("no cgroup2 mount on this host: the v2 directory clone3 needs does not exist")
            return
        }
        let sandbox = try SleepingSandbox(seconds: 1) {
            $0.cgroupHost = CgroupHost(v1: detected.v1, v2: detected.v2)
            $0.cloneIntoCgroup = clone  // the control makes it freezable: its v2 directory here
        }
        let pids = sandbox.waitForPayload()
        #expect(pids.count == 3, "monitor, init and payload expected in the sandbox's cgroup: \(pids)")
        let r = try #require(sandbox.finish())
        #expect(r.termination == .exited(0))
        #expect(r.bornInCgroup == clone, "clone3(CLONE_INTO_CGROUP) \(clone ? "not used" : "used although turned off")")
        #expect(r.leftovers.isEmpty)
    }
}

@Suite("Capabilities after setup")
struct MonitorCapabilityTests {
    @Test("once the payload runs, no process of the sandbox holds a capability: not the payload, not init, not the monitor")
    func noProcessKeepsCapabilities() throws {
        try requireRoot()
        let sandbox = try SleepingSandbox(seconds: 3, timeout: 10)
        defer { sandbox.stop() }
        // Wait for the payload (sleep) to be exec'd: three processes in the cgroup.
        let pids = sandbox.waitForPayload()
        try #require(pids.count == 3, "monitor, init and payload expected: \(pids)")
        for pid in pids {
            let status = try #require(procText("/proc/\(pid)/status"))
            for field in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
                let line = status.split(separator: "\n").first { $0.hasPrefix(field + ":") }.map(String.init) ?? "?"
                #expect(line.hasSuffix("0000000000000000"), "pid \(pid) (\(status.split(separator: "\n").first ?? "")): \(line)")
            }
        }
        // Nor does the monitor keep the bind trees it cloned for init (e.g. /usr) open.
        func parent(_ p: pid_t) -> pid_t? {
            let stat = procText("/proc/\(p)/stat") ?? ""
            return stat.lastIndex(of: ")").flatMap { pid_t(stat[stat.index(after: $0)...].split(separator: " ")[1]) }
        }
        let monitor = try #require(pids.first { parent($0).map { !pids.contains($0) } ?? false }, "no monitor among \(pids)")
        let fds = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(monitor)/fd")) ?? []
        let targets = fds.compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(monitor)/fd/\($0)") }
        #expect(!fds.isEmpty && !targets.contains { $0.hasPrefix("/usr") || $0.hasPrefix("/lib") || $0.hasPrefix("/bin") }, "\(targets)")
    }
}

@Suite("Landlock under the mounts")
struct LandlockTests {
    @Test("a write the mounts allow but no read-write mount covers (/proc/self/comm) is refused by Landlock, and allowed with landlock: off")
    func landlockRefusesWhatMountsAllow() throws {
        try requireRoot()
        let dir = try TempDir()
        let off = try dir.file("off.yaml", "extends: base\nfilesystem:\n  landlock: off\n")
        let walled = try probe("write", "/proc/self/comm", "renamed\n")
        #expect(walled.errnoName == "EACCES", "\(walled.stdout) \(walled.stderr)")
        let open = try probe("write", "/proc/self/comm", "renamed\n", policy: off)
        #expect(open.result.first == "ok", "\(open.stdout) \(open.stderr)")
        // What the policy mounts writable stays writable: a tmpfs, a read-write bind, /dev/null.
        let rw = try TempDir(mode: 0o777)
        let r = try autoharness(["sandbox", "exec", "--rw", "\(rw.path):/out", "--", "/bin/sh", "-c",
                                 "echo a > /tmp/a && echo b > /out/b && mkdir /out/d && mv /out/b /out/d/b && rm -r /out/d && echo c > /dev/null && echo done"])
        #expect(r.status == 0 && r.stdout == "done\n", "\(r.stdout) \(r.stderr)")
    }

    @Test("landlock: required starts where the kernel has it; an unknown mode is an error with its line")
    func landlockModes() throws {
        try requireRoot()
        let dir = try TempDir()
        let required = try dir.file("req.yaml", "extends: base\nfilesystem:\n  landlock: required\n")
        #expect(try autoharness(["sandbox", "exec", "--policy", required, "--", "/bin/true"]).status == 0)
        let bad = try dir.file("bad.yaml", "extends: base\nfilesystem:\n  landlock: sometimes\n")
        let r = try autoharness(["policy", "check", bad])
        #expect(r.status == 1)
        #expect(r.stderr.contains("bad.yaml:3") && r.stderr.contains("unknown landlock mode 'sometimes' (allowed: auto, required, off)"), "\(r.stderr)")
    }
}

@Suite("The orphan sweep")
struct OrphanSweepTests {
    @Test("a supervisor in another pid namespace leaves a live supervisor's sandbox alone")
    func sweepSparesOtherPidNamespaces() throws {
        try requireRoot()
        let live = Process()
        live.executableURL = URL(fileURLWithPath: Built.autoharness)
        live.arguments = ["sandbox", "exec", "--", "/bin/sh", "-c", "sleep 2; echo survived"]
        let out = Pipe()
        live.standardOutput = out
        try live.run()
        usleep(500_000)
        // A second supervisor whose pid namespace cannot see the first: its start-up sweep
        // must not take the first one's sandbox for an orphan.
        let other = try runProcess("/usr/bin/unshare", ["-pf", "--mount-proc", Built.autoharness, "sandbox", "exec", "--", "/bin/true"])
        #expect(other.status == 0, "\(other.stderr)")
        #expect(!other.stderr.contains("left by a supervisor that is gone"), "\(other.stderr)")
        live.waitUntilExit()
        let text = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(live.terminationStatus == 0 && text == "survived\n", "status \(live.terminationStatus): \(text)")
    }
}

@Suite("cgroup counter files")
struct CgroupFieldTests {
    @Test("a counter line is found by its whole key, at a line's start, with digits only")
    func fieldParsing() {
        let oom = "oom_kill_disable 0\nunder_oom 1\noom_kill 2\n"
        #expect(SandboxCgroup.field(oom, "oom_kill") == 2)
        #expect(SandboxCgroup.field(oom, "under_oom") == 1)
        #expect(SandboxCgroup.field(oom, "oom_kill_disable") == 0)
        #expect(SandboxCgroup.field(oom, "oom") == nil)
        #expect(SandboxCgroup.field("max 0", "max") == 0)
        #expect(SandboxCgroup.field("cache 4096\nrss 8192\nshmem 12\n", "shmem") == 12)
        #expect(SandboxCgroup.field("", "max") == nil)
        #expect(SandboxCgroup.field("max \n", "max") == nil)
        #expect(SandboxCgroup.field("max 12x\n", "max") == nil)
        #expect(SandboxCgroup.field("max 99999999999999999999999\n", "max") == nil)
        #expect(SandboxCgroup.field("xmax 5\nmax 7", "max") == 7)
    }
}

@Suite("Host-wide counters in /proc")
struct HostCountersTests {
    @Test("every file and directory covering a host-wide counter is its own read-only, nosuid, nodev, noexec mount")
    func coversAreReadOnlyMounts() throws {
        try requireRoot()
        let script = """
            for line in open('/proc/self/mountinfo'):
                f = line.split()
                if f[4] in ('/proc/stat', '/proc/meminfo', '/proc/loadavg', '/proc/uptime', '/proc/vmstat',
                            '/proc/locks', '/proc/sys/fs/file-nr', '/proc/sys/kernel/random/entropy_avail', '/proc/pressure',
                            '/proc/cgroups', '/proc/irq', '/proc/fs', '/proc/sys/fs/quota'):
                    print(f[4], f[5])
            """
        let r = try autoharness(["sandbox", "exec", "--", "python3", "-c", script])
        #expect(r.status == 0, "\(r.stderr)")
        var seen: [String: Set<Substring>] = [:]
        for line in r.stdout.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 2 { seen[String(parts[0])] = Set(parts[1].split(separator: ",")) }
        }
        #expect(seen.count == 13, "\(r.stdout)")
        for (path, options) in seen {
            #expect(options.isSuperset(of: ["ro", "nosuid", "nodev", "noexec"]), "\(path): \(options.sorted())")
        }
    }

    @Test("sync(2) in one sandbox, which moves the host's quota sync counter, shows in no other; /proc/irq, /proc/fs and the quota counters are empty, /proc/cgroups counts one cgroup per controller")
    func syncCounterAndDirectoriesCovered() throws {
        try requireRoot()
        let syncs = "/proc/sys/fs/quota/syncs"
        let hostBefore = try String(contentsOfFile: syncs, encoding: .utf8)
        // The sender: 20 syncs (each moves the host's count by 2).
        let sender = try autoharness(["sandbox", "exec", "--", "python3", "-c", "import os\nfor _ in range(20): os.sync()"])
        #expect(sender.status == 0, "\(sender.stderr)")
        let hostAfter = try String(contentsOfFile: syncs, encoding: .utf8)
        let moved = (Int(hostAfter.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0) - (Int(hostBefore.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0)
        #expect(moved >= 40, "the syncs ran: the host's counter moved by \(moved)")
        // The receiver sees no counter to read, and the other covered directories empty.
        let script = """
            import os
            for d in ('/proc/sys/fs/quota', '/proc/irq', '/proc/fs'):
                print(d, len(os.listdir(d)))
            try:
                open('/proc/sys/fs/quota/syncs').read(); print('syncs readable')
            except OSError as e:
                print('syncs', e.errno)
            rows = [l.split('\\t') for l in open('/proc/cgroups') if not l.startswith('#')]
            print('cgroups', len(rows) > 0 and all(r[2] == '1' for r in rows))
            """
        let r = try autoharness(["sandbox", "exec", "--", "python3", "-c", script])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "/proc/sys/fs/quota 0\n/proc/irq 0\n/proc/fs 0\nsyncs 2\ncgroups True\n", "\(r.stdout)")
    }

    @Test("/proc/stat, loadavg, meminfo, sysinfo(2) and friends do not move inside a sandbox while the host forks hundreds of processes; ps and free still work")
    func hostCountersFrozen() throws {
        try requireRoot()
        let script = """
            import ctypes, errno, time, sys
            libc = ctypes.CDLL(None, use_errno=True)
            def sysinfo():
                buf = ctypes.create_string_buffer(112)
                assert libc.sysinfo(buf) == 0, ctypes.get_errno()
                return bytes(buf)
            def snap():
                return [open(p).read() for p in ('/proc/stat', '/proc/loadavg', '/proc/meminfo', '/proc/uptime', '/proc/vmstat', '/proc/locks', '/proc/sys/fs/file-nr')] + [sysinfo()]
            # sysinfo is answered by the supervisor: uptime and procs are its constants, and a
            # bad pointer is still EFAULT.
            si = sysinfo()
            print('SYSINFO', int.from_bytes(si[0:8], 'little'), int.from_bytes(si[80:82], 'little'), flush=True)
            print('SYSINFO-BAD', libc.sysinfo(ctypes.c_void_p(8)), errno.errorcode[ctypes.get_errno()], flush=True)
            # A read-only page: the kernel's copy-out would fail, so must the supervisor's write.
            libc.mmap.restype = ctypes.c_void_p
            libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
            ro = libc.mmap(None, 4096, 1, 0x22, -1, 0)
            rc = libc.sysinfo(ctypes.c_void_p(ro))
            print('SYSINFO-RO', rc, errno.errorcode.get(ctypes.get_errno(), '?'), ctypes.string_at(ro, 8) == bytes(8), flush=True)
            a = snap()
            print('READY', flush=True)
            sys.stdin.readline()
            b = snap()
            print('SAME' if a == b else 'MOVED', [i for i in range(len(a)) if a[i] != b[i]], flush=True)
            print('PROCESSES', [l for l in b[0].splitlines() if l.startswith('processes')][0], flush=True)
            """
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Built.autoharness)
        p.arguments = ["sandbox", "exec", "--", "python3", "-c", script]
        let input = Pipe(), output = Pipe()
        p.standardInput = input
        p.standardOutput = output
        try p.run()
        var seen = Data()
        while !String(decoding: seen, as: UTF8.self).contains("READY") {
            let d = output.fileHandleForReading.availableData
            if d.isEmpty { break }
            seen.append(d)
        }
        func hostForks() -> Int {
            let text = procText("/proc/stat") ?? ""
            return Int(text.split(separator: "\n").first { $0.hasPrefix("processes") }?.split(separator: " ").last ?? "") ?? 0
        }
        let before = hostForks()
        let hostUptime = { procText("/proc/uptime") ?? "" }
        let upBefore = hostUptime()
        for _ in 0..<200 { _ = try runProcess("/bin/true", []) }
        usleep(1_100_000)  // the host's uptime (which sysinfo reports) moves by a second at least
        #expect(hostForks() - before >= 200, "the host's own count must have moved")
        #expect(hostUptime() != upBefore)
        input.fileHandleForWriting.write(Data("go\n".utf8))
        p.waitUntilExit()
        seen.append(output.fileHandleForReading.readDataToEndOfFile())
        let text = String(decoding: seen, as: UTF8.self)
        #expect(text.contains("SAME []"), "\(text)")
        #expect(text.contains("PROCESSES processes 0"), "\(text)")
        #expect(text.contains("SYSINFO 1000 1\n"), "\(text)")
        #expect(text.contains("SYSINFO-BAD -1 EFAULT"), "\(text)")
        #expect(text.contains("SYSINFO-RO -1 EFAULT True"), "\(text)")
        let tools = try autoharness(["sandbox", "exec", "--", "/bin/sh", "-c", "ps -e >/dev/null && free -m >/dev/null && python3 -c 'import os; assert os.cpu_count() >= 1' && echo tools-ok"])
        #expect(tools.stdout == "tools-ok\n", "\(tools.stdout) \(tools.stderr)")
    }
}

@Suite("autoharness doctor: how the binary is linked, and its name lookups")
struct BinaryFindingTests {
    @Test("the hosts: line's modules, comments and [actions] left out")
    func hostsModules() {
        let text = "# hosts: wrong\npasswd: files\nhosts:\tfiles mdns4_minimal [NOTFOUND=return] dns # trailing\n"
        #expect(HostInspection.hostsModules(text) == ["files", "mdns4_minimal", "dns"])
        #expect(HostInspection.hostsModules("passwd: files\n").isEmpty)
    }

    @Test("a glibc's stated version is read from the library file; this host's is the one this process runs with")
    func glibcVersion() throws {
        let dir = try TempDir()
        let fake = try dir.file("libc.so.6", "\u{7f}ELF...GNU C Library (Debian GLIBC 9.99-1) stable release version 9.99.\n...")
        #expect(HostInspection.glibcVersion(ofLibrary: fake) == "9.99")
        #expect(HostInspection.glibcVersion(ofLibrary: dir.file("missing")) == nil)
        let real = ["/lib/x86_64-linux-gnu/libc.so.6", "/lib/aarch64-linux-gnu/libc.so.6"].first { FileManager.default.fileExists(atPath: $0) }
        let version = try #require(real.flatMap(HostInspection.glibcVersion(ofLibrary:)))
        #expect(HostInspection.binary().detail.contains("glibc \(version)"))
    }

    @Test("a static binary on a host whose glibc differs is warned about only when host lookups go through modules beyond files and dns")
    func staticOnAnotherGlibc() throws {
        let dir = try TempDir()
        let lib = try dir.file("libc.so.6", "GNU C Library stable release version 9.99.")
        let plain = try dir.file("plain.conf", "hosts: files dns\n")
        let resolved = try dir.file("resolved.conf", "hosts: files resolve [!UNAVAIL=return] dns\n")
        let ok = HostInspection.binary(nsswitch: plain, hostLibraries: [lib], linkedStatically: true, version: "2.36")
        #expect(ok.detail == "static, glibc 2.36 inside; the host's glibc 9.99; host lookups: files dns")
        let warned = HostInspection.binary(nsswitch: resolved, hostLibraries: [lib], linkedStatically: true, version: "2.36")
        #expect(warned.detail.contains("load resolve from the host's glibc, which differs: rebuild autoharness on this host"), "\(warned.detail)")
        let same = HostInspection.binary(nsswitch: resolved, hostLibraries: [lib], linkedStatically: true, version: "9.99")
        #expect(!same.detail.contains("rebuild"), "\(same.detail)")
    }
}
