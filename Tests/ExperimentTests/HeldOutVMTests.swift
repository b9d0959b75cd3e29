import Benchmark
import Foundation
import Testing
import TestSupport
import Sandbox
import SupervisorIO
@testable import Experiment
@testable import Execution
@testable import ExperimentModel

/// The held-out split in a kernel of its own (`gate.held_out_runtime: vm`), booted for real:
/// qemu with Debian's kernel from scripts/install-vm, emulated here (this machine kind's KVM
/// runs no guest). These tests fail, never skip, without the kernel or qemu.
@Suite("Held-out VM", .serialized)
struct HeldOutVMTests {
    /// The config lines that put the held-out phase in an emulated VM.
    static let vm = ["held_out_runtime": "vm\n  vm: {accel: tcg, allow_emulation: true, memory_mib: 1536}"]

    static func requireVM() throws {
        try requireRoot()
        try #require(access(VMSettings.defaultKernelDirectory + "/vmlinuz", R_OK) == 0,
                     "no guest kernel in \(VMSettings.defaultKernelDirectory): run scripts/install-vm (scripts/test does)")
        try #require(access(HeldOutVM.qemuBinary, X_OK) == 0, "no \(HeldOutVM.qemuBinary): run scripts/install-vm")
    }

    /// An agent.py that solves every task, with `extra` (unindented Python) first in `run`.
    static func solver(_ extra: String = "") -> String {
        let body = (extra.split(separator: "\n").map(String.init) + [
            "_, op, a, b = instruction.splitlines()[0].split()",
            "open(os.path.join(workdir, 'answer.txt'), 'w').write(str(int(a) + int(b) if op == 'add' else int(a) * int(b)))",
        ]).map { "        " + $0 }.joined(separator: "\n")
        return "import os\nclass HarnessAgent:\n    def run(self, instruction, workdir):\n" + body + "\n"
    }

    static var hostBootID: String {
        procText("/proc/sys/kernel/random/boot_id")?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
    }

    @Test("held-out tasks run on another kernel and train tasks on the host's; the VM gate accepts, a tie is then rejected, and nothing a held-out task wrote is on the host")
    func gateRunsHeldOutInItsOwnKernel() throws {
        try Self.requireVM()
        let exp = try Experiment(config: Self.vm)
        let (_, test) = try exp.split()
        // The agent solves a task only where the kernel is not the host's (its boot id
        // differs), and leaves a mark with the task's instruction in /app and /tmp.
        try exp.setAgent(Self.solver("""
            open(os.path.join(workdir, 'vm-mark.txt'), 'w').write('LEFT-BEHIND ' + instruction)
            open('/tmp/vm-mark.txt', 'w').write('LEFT-BEHIND ' + instruction)
            if open('/proc/sys/kernel/random/boot_id').read().strip() == '\(Self.hostBootID)':
                return
            """))
        let g = try exp.run("gate")
        #expect(g.status == 0, "\(g.stdout)\n\(g.stderr)")
        #expect(g.stdout.contains("ACCEPTED") && g.stdout.contains("val_score: 1.00"), "\(g.stdout)\n\(g.stderr)")
        #expect(g.stderr.contains("held-out VM: \(test.count) task(s) answered"), "\(g.stderr)")
        // Promotion re-ran the failing train tasks on the host: there they all still fail.
        #expect(g.stdout.contains("0 task(s) promoted"), "\(g.stdout)")
        // The same agent again: its score ties the best, which never passes.
        let again = try exp.run("gate")
        #expect(again.status != 0 && again.stdout.contains("REJECTED") && again.stdout.contains("did not beat"), "\(again.stdout)\n\(again.stderr)")
        #expect(again.stderr.contains("held-out VM: \(test.count) task(s) answered"), "\(again.stderr)")
        // The evidence signs the guest that ran it: Debian's kernel image by digest, its initramfs.
        let bundle = try exp.run("evidence", "export", "1", "-o", "-")
        let payload = try #require((try JSONSerialization.jsonObject(with: Data(bundle.stdout.utf8)) as? [String: Any])
            .flatMap { ($0["dsseEnvelope"] as? [String: Any])?["payload"] as? String }.flatMap { Data(base64Encoded: $0) })
        let runtime = try #require(((try JSONSerialization.jsonObject(with: payload) as? [String: Any])?["predicate"] as? [String: Any])?["heldOutRuntime"] as? [String: Any])
        let vmlinuz = try runProcess("/usr/bin/sha256sum", [VMSettings.defaultKernelDirectory + "/vmlinuz"]).stdout.prefix(64)
        #expect(runtime["kind"] as? String == "vm" && runtime["kernelSHA256"] as? String == String(vmlinuz), "\(runtime)")
        #expect((runtime["initramfsSHA256"] as? String)?.count == 64 && runtime["acceleration"] != nil, "\(runtime)")
        // Every held-out instruction carries a marker; none of them was written anywhere the
        // host keeps (the experiment, its scratch root, /tmp).
        for id in test {
            let marker = "MARKER-\(id)-a91f"
            #expect(exp.filesContaining(marker).isEmpty, "\(marker) under the experiment")
            #expect(files(under: "/dev/shm/autoharness", containing: marker).isEmpty, "\(marker) in the scratch root")
            #expect(!((try? String(contentsOfFile: "/tmp/vm-mark.txt", encoding: .utf8)) ?? "").contains(marker))
        }
    }

    /// A held-out agent.py that finds, and then leaves, what a guest kernel keeps after a
    /// task: its inode counter (the first memfd's number; a fresh guest here starts between
    /// 1024 and 2048) moved past 4096 by 4096 memfds, and files in /tmp and /dev/shm. It
    /// solves its task only when it finds none of that. Run one task at a time, so in one
    /// guest the first task solves and every later one finds the first's counter.
    static let markerAgent = solver("""
        fd = os.memfd_create('probe')
        first = os.fstat(fd).st_ino
        os.close(fd)
        found = first >= 4096 or any(os.path.exists(p) for p in ('/tmp/ahvm-left', '/dev/shm/ahvm-left'))
        for p in ('/tmp/ahvm-left', '/dev/shm/ahvm-left'):
            open(p, 'w').write('LEFT')
        for _ in range(4096):
            os.close(os.memfd_create('burn'))
        if found:
            return
        """)

    @Test("every gate's guest is restored from one saved before any gate: what a held-out task left in its guest (the inode counter moved, files in /tmp and /dev/shm) is not in the next gate's guest; a saved guest changed since it was saved is refused, the bundle names its digest")
    func snapshotGuestsStartFresh() throws {
        try Self.requireVM()
        let snapshots = try TempDir(mode: 0o700)
        let config = ["held_out_runtime": "vm\n  vm: {accel: tcg, allow_emulation: true, memory_mib: 1536, snapshot_dir: \(snapshots.path)/saved}",
                      "max_concurrency": "1", "disclosure": "score"]
        let exp = try Experiment(config: config)
        let (_, test) = try exp.split()
        let one = String(format: "%.4f", 1 / Double(test.count))
        try exp.setAgent(Self.markerAgent)
        // In one guest, the first task finds nothing and every later one finds the first's
        // counter (the control: what one kernel keeps is found): one task of the split solved.
        let g = try exp.run("gate")
        #expect(g.stdout.contains("val_score: \(one)"), "\(g.stdout)\n\(g.stderr)")
        #expect(g.stderr.contains("held-out VM: saving a booted guest") && g.stderr.contains("held-out VM: restoring its saved guest"), "\(g.stderr)")
        // After the phase the host's process serial is moved by noise (qemu's threads moved it
        // with the guest's load); the inode counters, which the guest cannot move, are not.
        // Nor is the session serial: the guest's sessions are its own kernel's.
        #expect(g.stderr.contains("held-out VM done; moved the inode-number counters by 0, the process serial by "), "\(g.stderr)")
        #expect(g.stderr.contains("and the session serial by 0 on "), "\(g.stderr)")
        let saved = ((try? FileManager.default.contentsOfDirectory(atPath: snapshots.path + "/saved")) ?? []).sorted()
        // The state, and its SHA-256 recorded as it was saved (root's alone).
        #expect(saved.count == 2 && saved[0].hasSuffix(".state") && saved[1] == saved[0] + ".sha256", "\(saved)")
        // The next gate's guest, restored from the same saved state (not saved again), finds
        // nothing of the first gate's: its first task solves again.
        let again = try exp.run("gate")
        #expect(again.stdout.contains("val_score: \(one)"), "\(again.stdout)\n\(again.stderr)")
        #expect(!again.stderr.contains("saving a booted guest") && again.stderr.contains("held-out VM: \(test.count) task(s) answered; restored in "), "\(again.stderr)")
        let state = snapshots.path + "/saved/" + saved[0]
        let recorded = try String(contentsOfFile: state + ".sha256", encoding: .utf8)
        #expect(recorded.hasPrefix(String(try runProcess("/usr/bin/sha256sum", [state]).stdout.prefix(64))), "\(recorded)")
        let evidence = try exp.run("evidence", "export", "2", "-o", "-")
        let payload = try #require((try JSONSerialization.jsonObject(with: Data(evidence.stdout.utf8)) as? [String: Any])
            .flatMap { ($0["dsseEnvelope"] as? [String: Any])?["payload"] as? String }.flatMap { Data(base64Encoded: $0) })
        let runtime = try #require(((try JSONSerialization.jsonObject(with: payload) as? [String: Any])?["predicate"] as? [String: Any])?["heldOutRuntime"] as? [String: Any])
        #expect(runtime["savedStateSHA256"] as? String == String(recorded.prefix(64)), "\(runtime)")
        // 68 bytes of the saved guest changed (it restored silently and the gate
        // answered): refused before the guest runs, the state moved aside; the gate ends
        // interrupted, its held-out phase not scored.
        let fd = open(state, O_WRONLY)
        #expect(fd >= 0 && pwrite(fd, [UInt8](repeating: 0x41, count: 68), 68, 1 << 20) == 68)
        close(fd)
        let tampered = try exp.run("gate")
        #expect(tampered.status != 0 && tampered.stderr.contains("the saved guest was changed after it was saved"), "\(tampered.stdout)\n\(tampered.stderr)")
        #expect(!tampered.stdout.contains("val_score"), "\(tampered.stdout)")
        #expect(FileManager.default.fileExists(atPath: state + ".failed") && !FileManager.default.fileExists(atPath: state))
        // The next gate saves a new one. A state whose bytes are those recorded but that does
        // not restore (here cut short, its digest recorded again; in the field, a firmware
        // package qemu's version does not show) is moved aside and the gate's guest boots.
        let fourth = try exp.run("gate")
        #expect(fourth.stdout.contains("val_score: \(one)") && fourth.stderr.contains("held-out VM: saving a booted guest"), "\(fourth.stdout)\n\(fourth.stderr)")
        #expect(truncate(state, 4096) == 0)
        let cut = String(try runProcess("/usr/bin/sha256sum", [state]).stdout.prefix(64))
        try (cut + "\n").write(toFile: state + ".sha256", atomically: true, encoding: .utf8)
        chmod(state + ".sha256", 0o600)
        let third = try exp.run("gate")
        #expect(third.stdout.contains("val_score: \(one)"), "\(third.stdout)\n\(third.stderr)")
        #expect(third.stderr.contains("held-out VM: the saved guest did not restore") && third.stderr.contains("booting this gate's guest instead"), "\(third.stderr)")
        #expect(FileManager.default.fileExists(atPath: state + ".failed") && !FileManager.default.fileExists(atPath: state))
    }

    /// The names a held-out task looked up stay cached in the host's dentry cache when qemu
    /// looked them up on the guest's behalf, absent ones too, and a later lookup of a cached
    /// name is faster: an adversarial review read which of 1500 names the guest tried, 99.97%
    /// right, from a train run's timing. The held-out agent here tries 300 absent names in the
    /// guest (and nothing on the host); the reader, a later train agent, times one lookup of
    /// each of those, of 300 fresh names, and of 300 fresh names it has just tried itself (the
    /// control: the timing does tell cached names apart).
    static func dentryLooker(token: String) -> String {
        solver("""
            if open('/proc/sys/kernel/random/boot_id').read().strip() != '\(hostBootID)':
                for k in range(300):
                    os.path.exists('/usr/share/.ahneg-\(token)-h%d' % k)
            """)
    }

    static func dentryReader(token: String) -> String {
        solver("""
            import time
            fresh = '%d-%d' % (os.getpid(), time.time_ns())
            names = {'h': ['/usr/share/.ahneg-\(token)-h%d' % k for k in range(300)],
                     'c': ['/usr/share/.ahneg-%s-c%d' % (fresh, k) for k in range(300)],
                     'w': ['/usr/share/.ahneg-%s-w%d' % (fresh, k) for k in range(300)]}
            for n in names['w']:
                os.path.exists(n)
            # Interleaved, name by name: a burst of load on a busy machine (CI runs tests side
            # by side) then slows all three sets alike, not whichever was being measured.
            t = {'h': [], 'c': [], 'w': []}
            for k in range(300):
                for g in 'hcw':
                    a = time.perf_counter_ns()
                    os.path.exists(names[g][k])
                    t[g].append(time.perf_counter_ns() - a)
            def median(g):
                return sorted(t[g])[len(t[g]) // 2]
            print('DENTRY held=%d cold=%d warm=%d' % (median('h'), median('c'), median('w')), flush=True)
            """)
    }

    @Test("the names held-out tasks looked up in the guest (absent ones too, cached as the host's dentries by qemu's lookups) are not told apart from others by a later train run's timing")
    func heldOutLookupsNotReadable() throws {
        try Self.requireVM()
        let exp = try Experiment(config: Self.vm)
        let (train, _) = try exp.split()
        let token = String(UInt64.random(in: 0...UInt64.max), radix: 36)
        try exp.setAgent(Self.dentryLooker(token: token))
        let g = try exp.run("gate")
        #expect(g.stderr.contains("and the host's dentry and inode caches"), "\(g.stderr)")
        try exp.setAgent(Self.dentryReader(token: token))
        let b = try exp.run("benchmark", "--task-ids", train[0])
        #expect(b.status == 0 || b.status == 1, "\(b.stdout) \(b.stderr)")
        let trace = try #require(files(under: exp.root + "/workspace/traces/latest/\(train[0])", containing: "DENTRY ").first, "no timing in the train trace")
        let line = try #require(try String(contentsOfFile: trace, encoding: .utf8).split(separator: "\n").first { $0.hasPrefix("DENTRY ") })
        var t: [String: Double] = [:]
        for field in line.split(separator: " ").dropFirst() {
            let kv = field.split(separator: "=")
            t[String(kv[0])] = Double(kv[1])
        }
        let (held, cold, warm) = (try #require(t["held"]), try #require(t["cold"]), try #require(t["warm"]))
        // The measurement tells cached names apart (the control) ...
        #expect(warm < 0.75 * cold, "\(line): a name just looked up is not faster here, so this test cannot see the channel")
        // ... and the held-out ones are not among them.
        #expect(held > 0.75 * cold, "\(line): the names the held-out tasks looked up are still cached")
    }

    /// A held-out agent.py that advances the kernel's shared-memory inode counter (memfd
    /// inodes are numbered from one counter per kernel, handed out in per-CPU batches), and a
    /// train agent.py that prints the next number into its trace: the channel the issue
    /// measured at ~5 bits per register. Mounted on the host runtime as the control (the
    /// numbers jump by what the held-out tasks consumed) and on the VM (they do not).
    static func inodeDelta(_ exp: Experiment, train: String) throws -> Int {
        func probe() throws -> Int {
            let b = try exp.run("benchmark", "--task-ids", train)
            #expect(b.status == 0 || b.status == 1, "\(b.stdout) \(b.stderr)")
            let trace = files(under: exp.root + "/workspace/traces/latest/\(train)", containing: "INO ").first
            let text = try String(contentsOfFile: try #require(trace, "no trace with the inode number"), encoding: .utf8)
            let line = try #require(text.split(separator: "\n").first { $0.hasPrefix("INO ") })
            return try #require(Int(line.split(separator: " ")[1]), "\(line)")
        }
        let before = try probe()
        let g = try exp.run("gate")
        #expect(g.stdout.contains("ACCEPTED"), "\(g.stdout)\n\(g.stderr)")
        return try probe() - before
    }

    /// memfds one held-out task of `counterAgent` makes.
    static let counterBurst = 16384

    /// An agent whose held-out tasks make `counterBurst` memfds each, and whose every task
    /// prints `INO n`: the highest memfd inode number it saw on any of its CPUs. Memfd numbers
    /// come from per-CPU batches of 1024 taken from one shared counter, so one memfd's number
    /// says where its CPU's batch is, which can trail another CPU's by thousands after a burst;
    /// the highest over every CPU is within a batch of the shared counter.
    static func counterAgent(consumeIn test: [String]) -> String {
        let markers = test.map { "'MARKER-\($0)-a91f'" }.joined(separator: ", ")
        return solver("""
            if any(m in instruction for m in [\(markers)]):
                for _ in range(\(counterBurst)):
                    os.close(os.memfd_create('x'))
            import ctypes, time
            getcpu = ctypes.CDLL(None).sched_getcpu
            cpus = os.sched_getaffinity(0)
            seen = {}
            for _ in range(40):
                # As many busy processes as CPUs, so that each runs on its own; each reads its
                # CPU's position with one memfd (a few in all, not thousands in one place).
                r, w = os.pipe()
                kids = []
                for _ in cpus:
                    pid = os.fork()
                    if pid == 0:
                        os.close(r)
                        end = time.monotonic() + 0.01
                        while time.monotonic() < end:
                            pass
                        c = getcpu(); fd = os.memfd_create('probe'); n = os.fstat(fd).st_ino
                        if getcpu() == c:
                            os.write(w, b'%d %d\\n' % (c, n))
                        os._exit(0)
                    kids.append(pid)
                os.close(w)
                for k in kids:
                    os.waitpid(k, 0)
                for line in os.fdopen(r).read().splitlines():
                    c, n = map(int, line.split())
                    seen[c] = max(seen.get(c, 0), n)
                if set(seen) >= cpus:
                    break
            print('INO', max(seen.values()), 'CPUS', sorted(seen))
            """)
    }

    @Test("pages a held-out task in the VM read of a shared file are not resident on the host after the gate (qemu reads the shares through the host's page cache; they are evicted)")
    func heldOutVMPagesEvicted() throws {
        try Self.requireVM()
        let s = try PageCacheTests.setUp(extraConfig: Self.vm)
        try s.exp.setAgent(PageCacheTests.toucher)
        let g = try s.exp.run("gate")
        #expect(g.stderr.contains("held-out VM done; dropped "), "\(g.stderr)")
        #expect(g.stderr.contains("task(s) answered"), "\(g.stderr)")
        let left = try PageCacheTests.resident(s.blob)
        #expect(left.intersection(s.heldOutPages).isEmpty, "held-out pages still resident: \(left.intersection(s.heldOutPages).sorted())")
    }

    /// This gate's qemu as /proc shows it (pid, status, mountinfo), once it has exec'd qemu
    /// (vm-exec's child before that is still root) and installed its own seccomp filter on
    /// top of ours; nil if none is seen in 120 s.
    static func confinedQemu(of gate: Process) -> (pid: String, status: String, mounts: String)? {
        let end = Date().addingTimeInterval(120)
        while gate.isRunning && Date() < end {
            for pid in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int(pid) != nil {
                guard let cmd = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline"),
                      case let text = String(decoding: cmd, as: UTF8.self),
                      text.hasPrefix(HeldOutVM.qemuBinary), text.contains("held-out-vm-o\(gate.processIdentifier)-"),
                      let status = procText("/proc/\(pid)/status"),
                      let filters = status.split(separator: "\n").first(where: { $0.hasPrefix("Seccomp_filters:") }),
                      (Int(filters.dropFirst("Seccomp_filters:".count).trimmingCharacters(in: .whitespaces)) ?? 0) >= 2,
                      let mounts = procText("/proc/\(pid)/mountinfo") else { continue }
                return (pid, status, mounts)
            }
            usleep(100_000)
        }
        return nil
    }

    /// One gate for both properties: its qemu is inspected while the held-out tasks sleep in
    /// the guest, then its supervisor is killed.
    @Test("qemu runs with least privilege, seen in /proc while the gate runs: an unprivileged uid and gid, CAP_DAC_READ_SEARCH alone (bounding set too), no_new_privs, seccomp filters (its own and ours), namespaces of its own (mount, pid, network), a read-only root of tmpfs holding /usr, its kernel, its work directory and the read-only export, and nothing else of the host's; a supervisor killed with SIGKILL during the VM phase takes its qemu with it (no guest runs on beside the next supervisor)")
    func qemuConfinedAndDiesWithSupervisor() throws {
        try Self.requireVM()
        // A scratch root of its own: any supervisor's start sweeps a dead one's VM directory
        // from its scratch root, and other tests' supervisors start meanwhile.
        let scratch = "/dev/shm/ah-test-vmkill-\(getpid())"
        defer { try? FileManager.default.removeItem(atPath: scratch) }
        let exp = try Experiment(config: Self.vm.merging(["scratch": scratch]) { a, _ in a })
        try exp.setAgent(Self.solver("import time\ntime.sleep(30)"))
        let gate = try exp.start("gate")
        defer { if gate.isRunning { kill(gate.processIdentifier, SIGKILL); gate.waitUntilExit() } }
        let q = try #require(Self.confinedQemu(of: gate), "no qemu of this gate under two seccomp filters was seen")
        func field(_ name: String) -> String {
            q.status.split(separator: "\n").first { $0.hasPrefix(name + ":") }.map { $0.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces) } ?? ""
        }
        let id = "\(HeldOutVM.qemuID)"
        #expect(field("Uid").split(separator: "\t").allSatisfy { $0 == id } && field("Gid").split(separator: "\t").allSatisfy { $0 == id }, "\(q.status)")
        // Bit 2: CAP_DAC_READ_SEARCH (its 9p server reads the shares whatever their modes).
        for set in ["CapEff", "CapPrm", "CapBnd", "CapAmb"] { #expect(field(set) == "0000000000000004", "\(set): \(q.status)") }
        #expect(field("CapInh") == "0000000000000004" && field("NoNewPrivs") == "1", "\(q.status)")
        #expect(field("Seccomp") == "2", "\(q.status)")
        for ns in ["mnt", "pid", "net", "ipc", "uts"] {
            let theirs = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(q.pid)/ns/\(ns)")
            let ours = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/ns/\(ns)")
            #expect(theirs != ours, "\(ns): \(theirs)")
        }
        // Its root: a read-only tmpfs; every mount point one of what it needs.
        let lines = q.mounts.split(separator: "\n").map { $0.split(separator: " ").map(String.init) }
        let root = try #require(lines.first { $0.count > 5 && $0[4] == "/" })
        #expect(root[5].split(separator: ",").contains("ro") && root.contains("tmpfs"), "\(root)")
        let allowed = ["/usr", "/etc/ld.so.cache", "/dev", "/proc", "/tmp", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin"]
        for l in lines where l.count > 5 && l[4] != "/" {
            let at = l[4]
            let ok = allowed.contains { at == $0 || at.hasPrefix($0 + "/") } || at.contains("/held-out-vm-o\(gate.processIdentifier)-")
                || at.hasSuffix("/vmlinuz")
            #expect(ok, "a mount qemu does not need: \(at)")
            // The export and the shares read-only; only the work directory itself writable.
            if at.contains("/export") || at.hasPrefix("/usr") || at.hasSuffix("/vmlinuz") { #expect(l[5].split(separator: ",").contains("ro"), "\(l)") }
        }

        // The supervisor killed: its qemu (whose uid changed, which clears the parent-death
        // signal, and which has no parent in its pid namespace) dies with it.
        let pid = try #require(Int32(q.pid))
        kill(gate.processIdentifier, SIGKILL)
        gate.waitUntilExit()
        #expect(endsWithin(pid, seconds: 5), "qemu \(pid) outlived its supervisor by 5 s")
        // The next start (prepare takes the lock, then refuses: already prepared) removes the
        // VM's work directory, whose initramfs names the held-out ids.
        let left = { FileSystem.names(in: scratch).filter { $0.hasPrefix("held-out-vm-o\(gate.processIdentifier)-") } }
        #expect(left().count == 1, "the killed gate's work directory: \(left())")
        let next = try exp.run("prepare")
        #expect(next.stderr.contains("held-out VM work directory of supervisor pid \(gate.processIdentifier)"), "\(next.stderr)")
        #expect(left().isEmpty, "\(left())")
    }

    /// Configured as `auto` with `allow_emulation` (where KVM does not work, as here, auto
    /// emulates; where it does, auto takes KVM): one gate for both.
    @Test("a held-out task in the VM that reads a shared file leaves its access time on the host unchanged (qemu reads the shares through read-only, noatime binds of its own); auto with allow_emulation runs the held-out phase in a VM where KVM does not work")
    func sharesKeepAccessTimes() throws {
        try Self.requireVM()
        // A file under /usr (a share of every held-out policy) unread for years, that only the
        // held-out agent.py reads: it solves a task only if it could read it.
        let file = "/usr/local/share/autoharness-atime-\(UUID().uuidString)"
        try "SECRET-7\n".write(toFile: file, atomically: false, encoding: .utf8)
        defer { unlink(file) }
        var times = [timeval(tv_sec: 1_577_836_800, tv_usec: 0), timeval(tv_sec: 1_577_836_800, tv_usec: 0)]
        try #require(utimes(file, &times) == 0)
        let exp = try Experiment(config: ["held_out_runtime": "auto\n  vm: {allow_emulation: true, memory_mib: 1536}"])
        try exp.setAgent(Self.solver("""
            if open('/proc/sys/kernel/random/boot_id').read().strip() == '\(Self.hostBootID)':
                return
            if open('\(file)').read() != 'SECRET-7\\n':
                return
            """))
        let (_, test) = try exp.split()
        let g = try exp.run("gate")
        #expect(g.status == 0 && g.stdout.contains("ACCEPTED") && g.stdout.contains("val_score: 1.00"), "the held-out tasks did not read the file: \(g.stdout)\n\(g.stderr)")
        #expect(g.stderr.contains("held-out runtime: vm (auto: "), "\(g.stderr)")
        #expect(g.stderr.contains("held-out VM: \(test.count) task(s) answered"), "\(g.stderr)")
        var st = stat()
        try #require(stat(file, &st) == 0)
        #expect(st.st_atim.tv_sec == 1_577_836_800, "the host's atime moved to \(st.st_atim.tv_sec)")
    }

    /// What `auto` must pick on this host, from a probe of its own.
    static func kvmWorks() throws -> Bool {
        let kernel = try GuestKernel.load(VMSettings.defaultKernelDirectory)
        return VMHostCheck.kvmBoot(kernel: kernel, qemu: HeldOutVM.qemuBinary).works
    }

    @Test("auto (the default) uses a VM only where a KVM guest boots; otherwise the host, with a line naming the capacity left")
    func autoFollowsKVM() throws {
        try Self.requireVM()
        let exp = try Experiment(config: ["held_out_runtime": "auto"])
        try exp.setAgent(Self.solver())
        let g = try exp.run("gate")
        #expect(g.status == 0, "\(g.stdout)\n\(g.stderr)")
        if try Self.kvmWorks() {
            #expect(g.stderr.contains("held-out runtime: vm (auto: a KVM guest boots here)") && g.stderr.contains("task(s) answered"), "\(g.stderr)")
        } else {
            #expect(g.stderr.contains("held-out runtime: host (auto: no working KVM here: "), "\(g.stderr)")
            #expect(g.stderr.contains("bits per gate for a 10 s phase"), "\(g.stderr)")
            #expect(!g.stderr.contains("held-out VM: booting"), "\(g.stderr)")
        }
    }

    @Test("auto keeps a configuration that needs something of the host's on the host, and says why; vm refuses it at load")
    func autoUnsupportedBenchmark() throws {
        let docker = try ExperimentConfig.parse("benchmark: terminal-bench\ndataset: d\nenv_provider: docker\n", file: "f")
        let r = HeldOutVM.resolveAuto(settings: VMSettings(), config: docker, log: nil)
        #expect(r.vm == nil && r.why.contains("env_provider: docker drives this host's Docker daemon"), "\(r.why)")
        #expect(BenchmarkKinds.notInVM(try ExperimentConfig.parse("benchmark: terminal-bench\ndataset: d\nenv_provider: local\n", file: "f")) == nil)
        #expect(throws: ConfigErrors.self) {
            _ = try ExperimentConfig.parse("benchmark: terminal-bench\ndataset: d\nenv_provider: docker\ngate:\n  held_out_runtime: vm\n", file: "f")
        }
        #expect(HeldOutVM.hostRuntimeLine(why: r.why, networked: false).contains("bits per gate"))
        #expect(!HeldOutVM.hostRuntimeLine(why: r.why, networked: false).contains("rt_cache"))
        #expect(HeldOutVM.hostRuntimeLine(why: r.why, networked: true).contains("route-lookup statistics (/proc/net/stat/rt_cache), about 22 bits for a 10 s phase"))
    }

    @Test("the KVM probe is remembered until the next boot, and a record another user could have written is probed again")
    func probeCache() throws {
        try Self.requireVM()
        let kernel = try GuestKernel.load(VMSettings.defaultKernelDirectory)
        let path = "/run/autoharness/kvm-probe"
        unlink(path)
        let first = VMHostCheck.kvmCached(kernel: kernel, qemu: HeldOutVM.qemuBinary)
        #expect(!first.why.hasSuffix("(probed earlier this boot)"), "\(first.why)")
        let second = VMHostCheck.kvmCached(kernel: kernel, qemu: HeldOutVM.qemuBinary)
        #expect(second.works == first.works && second.why.hasSuffix("(probed earlier this boot)"), "\(second.why)")
        // A record writable by others decides nothing: probed again, and rewritten as root's.
        #expect(chmod(path, 0o666) == 0)
        let third = VMHostCheck.kvmCached(kernel: kernel, qemu: HeldOutVM.qemuBinary)
        #expect(!third.why.hasSuffix("(probed earlier this boot)"), "\(third.why)")
        var st = stat()
        #expect(stat(path, &st) == 0 && st.st_mode & 0o077 == 0 && st.st_uid == 0)
        // A record for another qemu or kernel (its key differs) is not used either.
        let text = try String(contentsOfFile: path, encoding: .utf8)
        try ("stale-key" + text.drop { $0 != "\n" }).write(toFile: path, atomically: true, encoding: .utf8)
        #expect(chmod(path, 0o600) == 0)
        let fourth = VMHostCheck.kvmCached(kernel: kernel, qemu: HeldOutVM.qemuBinary)
        #expect(!fourth.why.hasSuffix("(probed earlier this boot)"), "\(fourth.why)")
    }

    @Test("a VM runtime that cannot run here is refused before the gate counts: tcg without allow_emulation")
    func emulationNeedsConsent() throws {
        try requireRoot()
        let exp = try Experiment(config: ["held_out_runtime": "vm\n  vm: {accel: tcg}"])
        let g = try exp.run("gate")
        #expect(g.status != 0 && g.stderr.contains("allow_emulation: true"), "\(g.stdout)\n\(g.stderr)")
        let s = try exp.run("status")
        #expect(!s.stdout.contains("attempt 1"), "a refused VM must not count a gate: \(s.stdout)")
    }
}

@Suite("Held-out VM answer")
struct GuestAnswerTests {
    static let ids = ["a", "b"]

    static func parse(_ text: String) -> Result<GuestAnswer, AnswerError> {
        Result { () throws(AnswerError) in try GuestAnswer.parse(Array(text.utf8), requested: ids) }
    }

    @Test("a whole answer gives one outcome per id, statuses that score 0 scored 0, and its violations")
    func wellFormed() throws {
        let a = try Self.parse("ahvm1 begin\noutcome b 0.250000 failed\noutcome a 1.000000 passed\nviolation agent syscall ptrace 3\nahvm1 end 2\n").get()
        #expect(a.outcomes.map(\.id) == ["b", "a"] && a.outcomes.map(\.reward) == [0.25, 1])
        #expect(a.violations == [.init(agent: true, kind: .syscall, name: "ptrace", count: 3)])
        let t = try Self.parse("ahvm1 begin\noutcome a 0.900000 agent_timeout\noutcome b 0 failed\nahvm1 end 2\n").get()
        #expect(t.outcomes[0].reward == 0 && !t.outcomes[0].passed)
    }

    @Test("the parser refuses every malformed answer", arguments: [
        ("ahvm1 begin\noutcome a 1 passed\noutcome b 0 failed\n", "no end line"),
        ("outcome a 1 passed\noutcome b 0 failed\nahvm1 end 2\n", "header"),
        ("ahvm1 begin\noutcome a 1 passed\noutcome c 0 failed\nahvm1 end 2\n", "not requested"),
        ("ahvm1 begin\noutcome a 1 passed\noutcome a 1 passed\nahvm1 end 2\n", "twice"),
        ("ahvm1 begin\noutcome a 1.5 passed\noutcome b 0 failed\nahvm1 end 2\n", "[0, 1]"),
        ("ahvm1 begin\noutcome a nan passed\noutcome b 0 failed\nahvm1 end 2\n", "[0, 1]"),
        ("ahvm1 begin\noutcome a 0.2 passed\noutcome b 0 failed\nahvm1 end 2\n", "contradicts"),
        ("ahvm1 begin\noutcome a 0.9 failed\noutcome b 0 failed\nahvm1 end 2\n", "contradicts"),
        ("ahvm1 begin\noutcome a 1 won\noutcome b 0 failed\nahvm1 end 2\n", "unknown status"),
        ("ahvm1 begin\noutcome a 1 passed\nahvm1 end 1\n", "no outcome"),
        ("ahvm1 begin\noutcome a 1 passed\noutcome b 0 failed\nahvm1 end 3\n", "bad end"),
        ("ahvm1 begin\noutcome a 1 passed\noutcome b 0 failed\nahvm1 end 2\noutcome a 1 passed\n", "after the end"),
        ("ahvm1 begin\noutcome a 1 passed\ntrace secret\noutcome b 0 failed\nahvm1 end 2\n", "not an answer line"),
        ("ahvm1 begin\nviolation agent syscall pt/race 1\noutcome a 1 passed\noutcome b 0 failed\nahvm1 end 2\n", "malformed violation"),
        ("ahvm1 begin\nviolation agent syscall ptrace 9223372036854775807\noutcome a 1 passed\noutcome b 0 failed\nahvm1 end 2\n", "malformed violation"),
        ("ahvm1 begin\noutcome a 1 passed " + String(repeating: "x", count: 600) + "\nahvm1 end 2\n", "longer than"),
        ("ahvm1 begin\noutcome a 1 passed\noutcome b 0 failed\ncost 0.5\ncost 0.5\nahvm1 end 2\n", "repeated cost"),
        ("ahvm1 begin\noutcome a 1 passed\noutcome b 0 failed\ncost -1\nahvm1 end 2\n", "malformed or repeated cost"),
        ("ahvm1 begin\noutcome a 1 passed\noutcome b 0 failed\ncost inf\nahvm1 end 2\n", "malformed or repeated cost"),
        ("ahvm1 begin\noutcome a 1 passed\noutcome b 0 failed\ncost a 0.5\nahvm1 end 2\n", "malformed or repeated cost"),
    ])
    func malformed(text: String, why: String) {
        switch Self.parse(text) {
        case .success: Issue.record("accepted: \(text)")
        case .failure(let e): #expect(e.description.contains(why), "\(e)")
        }
    }

    @Test("a held-out task whose verifier ran agent code is flagged on the host too, by a count: no path or program crosses back")
    func flagCrosses() throws {
        var a = TaskOutcome(id: "a", reward: 0, status: .failed)
        a.verifierRanAgentCode = ["opened /app/secret-answer-42.py (python3)", "executed /app/prog (bash)"]
        let body = GuestAnswer.encodeBody([a, .init(id: "b", reward: 0, status: .failed)], agent: .init(), tool: .init())
        #expect(body.contains("flag a 2\n") && !body.contains("secret-answer") && !body.contains("flag b"), "\(body)")
        let parsed = try Self.parse(GuestAnswer.header + body).get()
        #expect(parsed.outcomes.first { $0.id == "a" }?.verifierRanAgentCode.flatMap { TaskOutcome.flagCount($0, where: "in the held-out VM") } == 2)
        #expect(TaskOutcome.flagCount(["2 line(s) of agent code: opened /app/x.py"], where: "in the held-out VM") == nil)
        #expect(parsed.outcomes.first { $0.id == "b" }?.verifierRanAgentCode == nil)
        for bad in ["flag a 2\noutcome a 0 failed", "outcome a 0 failed\nflag a 2\nflag a 3", "outcome a 0 failed\nflag a /app/x.py",
                    "outcome a 0 failed\nflag a 0", "outcome a 0 failed\nflag a 2 x"] {
            let text = "ahvm1 begin\n\(bad)\noutcome b 0 failed\nahvm1 end 2\n"
            if case .success = Self.parse(text) { Issue.record("accepted: \(bad)") }
        }
    }

    @Test("an answer over the cap is refused before it is read as text")
    func tooLarge() {
        let big = [UInt8](repeating: 0x61, count: GuestAnswer.maxBytes + 1)
        #expect(throws: AnswerError.self) { try GuestAnswer.parse(big, requested: Self.ids) }
    }

    @Test("the tools' spend crosses back as one total, never per task")
    func cost() throws {
        var a = TaskOutcome(id: "a", reward: 1, status: .passed), b = TaskOutcome(id: "b", reward: 0, status: .failed)
        a.costUSD = 0.25
        b.costUSD = 0.5
        let body = GuestAnswer.encodeBody([a, b], agent: .init(), tool: .init())
        #expect(body.components(separatedBy: "\n").filter { $0.hasPrefix("cost ") } == ["cost 0.750000"], "\(body)")
        let parsed = try Self.parse(GuestAnswer.header + body).get()
        #expect(parsed.costUSD == 0.75 && parsed.outcomes.allSatisfy { $0.costUSD == nil })
        let none = GuestAnswer.encodeBody([.init(id: "a", reward: 1, status: .passed), .init(id: "b", reward: 0, status: .failed)], agent: .init(), tool: .init())
        let parsedNone = try Self.parse(GuestAnswer.header + none).get()
        #expect(!none.contains("cost") && parsedNone.costUSD == nil)
    }

    @Test("the guest's encoding parses back to its outcomes")
    func roundTrip() throws {
        let body = GuestAnswer.encodeBody([.init(id: "a", reward: 1, status: .passed), .init(id: "b", reward: 0, status: .verifierTimeout)],
                                          agent: .init(), tool: .init())
        let a = try Self.parse(GuestAnswer.header + body).get()
        #expect(a.outcomes.map(\.status) == [.passed, .verifierTimeout])
    }

    @Test("the VM phase's deadline follows each task's own limits (task.toml), not per_task_timeout alone")
    func deadlineFromTaskLimits() throws {
        try requireRoot()
        let bench = try EditableBenchmark()
        try bench.write("tasks/add-0/task.toml", "[agent]\ntimeout_sec = 4000\n[verifier]\ntimeout_sec = 20\n")
        let exp = try bench.experiment()
        let s = try ExperimentSupervisor(layout: ExperimentLayout(root: exp.root), policySearchPaths: [Built.packageRoot + "/policies"], purpose: "test")
        let long = 4000.0 + 20 + 60, short = 20.0 + 20 + 60
        // Two workers: the sum spread over them, plus the longest task.
        #expect(ExecutionBounds.phase(["add-0", "add-1"], config: s.config, benchmarkRoot: bench.directory) == (long + short) / 2 + long)
    }

    @Test("a scratch root too long for the VM's sockets is named before anything boots (a node's check reports it); the default leaves room")
    func socketRoom() {
        #expect(HeldOutVM.socketRoom(scratch: "/dev/shm/autoharness") == nil)
        let long = "/dev/shm/" + String(repeating: "s", count: 60)
        #expect(HeldOutVM.socketRoom(scratch: long)?.contains(long) == true)
        #expect(HeldOutVM.workDirectory(in: long, random: .max).hasPrefix(long + "/" + HeldOutVM.workPrefix + ProcessIdentity.current.tag + "-"))
    }

    @Test("busybox must be static: an ELF with a PT_INTERP header is refused")
    func staticELF() throws {
        let bb = try #require(FileManager.default.contents(atPath: "/bin/busybox"))
        #expect(GuestKernel.isStaticELF(Array(bb)))
        let dynamic = try #require(FileManager.default.contents(atPath: "/usr/bin/python3"))
        #expect(!GuestKernel.isStaticELF(Array(dynamic)))
    }
}


@Suite("Held-out VM: what the host hands the guest, and where it keeps a saved guest")
struct GuestHandOverTests {
    @Test("a path with a line break is refused before the guest could read it as two lines (stage 2 reads one path a line)")
    func lineBreaksRefused() throws {
        let dir = try TempDir()
        for bad in ["/usr\n/etc", "/opt/a\rb"] {
            var image = GuestImage(binary: "/usr/bin/autoharness", scratch: "/dev/shm/ah")
            image.shares = [("ah0", "/usr", bad)]
            #expect(throws: ExperimentError.self) { try image.writeGate(dir.path + "/gate-\(bad.utf8.count)", request: []) }
            image.shares = []
            image.scratch = bad
            #expect(throws: ExperimentError.self) { try image.writeGate(dir.path + "/gate-s\(bad.utf8.count)", request: []) }
        }
        // The same image with plain paths, spaces kept, is written.
        var good = GuestImage(binary: "/usr/bin/autoharness", scratch: "/dev/shm/ah")
        good.shares = [("ah0", "/opt/with space", "/opt/with space")]
        try good.writeGate(dir.path + "/gate-ok", request: Array("{}".utf8))
        #expect(try String(contentsOfFile: dir.path + "/gate-ok/shares", encoding: .utf8) == "s0 /opt/with space\n")
    }

    @Test("a saved guest is trusted as its kernel is: a directory others can write, or a state or digest not root's alone, or a state without its digest, is not used")
    func savedGuestOwnership() throws {
        try requireRoot()
        let dir = try TempDir(mode: 0o700)
        let saved = dir.path + "/saved"
        try VMSnapshot.checkDirectory(saved)
        #expect(chmod(saved, 0o770) == 0)
        #expect(throws: ExperimentError.self) { try VMSnapshot.checkDirectory(saved) }
        #expect(chmod(saved, 0o700) == 0)
        let state = VMSnapshot(path: saved + "/x.state")
        #expect(FileManager.default.createFile(atPath: state.path, contents: Data([1]), attributes: [.posixPermissions: 0o600]))
        // Without the digest recorded as it was saved, it is saved again.
        #expect(!state.exists, "a state without its digest is used")
        let digest = String(repeating: "ab", count: 32) + "\n"
        #expect(FileManager.default.createFile(atPath: state.digestPath, contents: Data(digest.utf8), attributes: [.posixPermissions: 0o644]))
        #expect(!state.exists, "a digest others can read (or write) is used")
        #expect(chmod(state.digestPath, 0o600) == 0)
        #expect(state.exists)
        #expect(chmod(state.path, 0o644) == 0)
        #expect(!state.exists, "a state others can read (or write) is not used")
        #expect(chmod(state.path, 0o600) == 0 && chown(state.path, 65534, 65534) == 0)
        #expect(!state.exists, "a state not root's is not used")
    }
}
