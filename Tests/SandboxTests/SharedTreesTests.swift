import Foundation
@testable import Sandbox
import SandboxPolicy
import Testing
import TestSupport

/// The covers of /proc's host-wide counters cloned from a tree the supervisor built once
/// (`SharedTrees`): shared read-only. /dev is each sandbox's own: one tmpfs whose device nodes
/// its monitor made, so no inode of it is shared with another sandbox.
@Suite("/proc's covers every sandbox clones, and the /dev each makes", .serialized)
struct SharedTreesTests {
    /// Runs `script` (python3) with `trees`; /out is `out`, read-write. Returns what it printed.
    static func run(_ script: String, out: String, trees: SharedTrees?, parts: SandboxPartsPool? = nil, useLauncher: Bool = true) throws -> String {
        let name = "script-\(UUID().uuidString).py"
        try script.write(toFile: out + "/" + name, atomically: false, encoding: .utf8)
        var limits = Limits()
        limits.timeoutSeconds = 30
        let policy = Policy(name: "shared", mounts: minimalMounts + [MountSpec(kind: .readWrite(source: out), destination: "/out")],
                            limits: limits)
        let plan = try PlanCompiler.compile(policy: policy, command: ["/usr/bin/python3", "/out/" + name], hostEnvironment: [:])
        var options = RunOptions()
        options.sharedTrees = trees
        options.parts = parts
        options.useLauncher = useLauncher
        let log = out + "/" + name + ".log"
        let fd = open(log, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        defer { close(fd) }
        options.stdio = (-1, fd, fd)
        let r = try SandboxRunner.run(plan, options: options)
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        #expect(r.termination == .exited(0), "\(text)")
        return text
    }

    /// "dev:ino" of `name` under the detached mount `fd`, as the sandbox's os.stat prints it.
    static func identity(_ fd: Int32, _ name: String) -> String {
        var st = stat()
        #expect(fstatat(fd, name, &st, name.isEmpty ? 0x1000 : 0) == 0)  // AT_EMPTY_PATH
        return "\(st.st_dev):\(st.st_ino)"
    }

    static let probe = """
        import errno, os
        def st(p): s = os.stat(p); return f"{s.st_dev}:{s.st_ino}"
        print("DEV", st("/dev"), "STAT", st("/proc/stat"), "SHM", st("/dev/shm"))
        for line in open("/proc/self/mountinfo"):
            f = line.split()
            if f[4] in ("/dev", "/dev/null", "/proc/stat", "/proc/vmstat", "/proc/pressure", "/proc/sys/fs/file-nr"):
                print("MOUNT", f[4], f[5])
        def attempt(name, fn):
            try:
                fn(); print("ATTEMPT", name, "ok")
            except OSError as e:
                print("ATTEMPT", name, errno.errorcode[e.errno])
        attempt("create-in-dev", lambda: os.close(os.open("/dev/planted", os.O_CREAT | os.O_WRONLY, 0o644)))
        attempt("write-proc-stat", lambda: open("/proc/stat", "w").write("x"))
        attempt("utime-dev", lambda: os.utime("/dev"))
        attempt("mknod-in-dev", lambda: os.mknod("/dev/mem2", 0o666 | 0o020000, os.makedev(1, 1)))
        def node(n): s = os.stat("/dev/" + n); return f"{n}={os.major(s.st_rdev)}:{os.minor(s.st_rdev)}:{s.st_mode & 0o7777:o}"
        print("NODES", " ".join(node(n) for n in ("null", "zero", "full", "random", "urandom", "tty")))
        print("SHM-BEFORE", sorted(os.listdir("/dev/shm")))
        open("/dev/shm/mine", "w").write("x")
        open("/dev/null", "w").write("discarded")
        print("ZERO", open("/dev/zero", "rb").read(4) == bytes(4))
        print("STATIC", open("/proc/stat").read().splitlines()[-4])
        print("FDS", sorted(int(f) for f in os.listdir("/proc/self/fd")))
        import pty; m, s = pty.openpty(); print("PTY", os.ttyname(s))
        """

    @Test("two sandboxes clone the same read-only /proc covers and neither can write into them; each has a /dev of its own, one read-only mount with its own six nodes")
    func sharedReadOnly() throws {
        try requireRoot()
        let trees = try #require(SharedTrees.install(), "\(SharedTrees.unavailableReason ?? "")")
        let out = try TempDir(mode: 0o777)
        let a = try Self.run(Self.probe, out: out.path, trees: trees)
        let b = try Self.run(Self.probe, out: out.path, trees: trees)
        // A monitor forked from the supervisor (no launcher) is handed the same descriptors.
        let forked = try Self.run(Self.probe, out: out.path, trees: trees, useLauncher: false)
        func value(_ text: String, _ key: String) -> [String] {
            text.split(separator: "\n").first { $0.hasPrefix(key + " ") }.map { $0.split(separator: " ").dropFirst().map(String.init) } ?? []
        }
        // Shared: the covers are the very mount the supervisor holds open (so its device
        // number cannot have been reused by anything else meanwhile).
        let masks = Self.identity(trees.masks, "stat")
        for text in [a, b, forked] {
            let seen = value(text, "DEV")  // /dev STAT /proc/stat SHM /dev/shm
            #expect(seen.count == 5 && seen[2] == masks, "\(text)")
            // /dev and /dev/shm are two filesystems (of this sandbox's own: see devNotShared).
            #expect(seen.first?.split(separator: ":").first != seen.last?.split(separator: ":").first, "\(text)")
        }
        // B does not see what A wrote there.
        #expect(a.contains("SHM-BEFORE []") && b.contains("SHM-BEFORE []"), "\(a)\n\(b)")
        for text in [a, b, forked] {
            // /dev is one mount holding its own device nodes (not a bind of the host's per
            // node): it alone is not nodev, and is read-only, nosuid and noexec like the rest.
            let mounts = text.split(separator: "\n").filter { $0.hasPrefix("MOUNT ") }
            #expect(mounts.count == 5 && !mounts.contains { $0.contains("/dev/null") }, "\(text)")
            for m in mounts {
                let opts = Set(m.split(separator: " ")[2].split(separator: ","))
                #expect(opts.isSuperset(of: ["ro", "nosuid", "noexec"]), "\(m)")
                #expect(opts.contains("nodev") == !m.hasPrefix("MOUNT /dev "), "\(m)")
            }
            #expect(text.contains("NODES null=1:3:666 zero=1:5:666 full=1:7:666 random=1:8:666 urandom=1:9:666 tty=5:0:666"), "\(text)")
            // Refused, not absent: each call ran and the kernel said no.
            for attempt in ["create-in-dev", "mknod-in-dev", "write-proc-stat", "utime-dev"] {
                let answer = value(text, "ATTEMPT " + attempt).last ?? "?"
                #expect(["EROFS", "EACCES", "EPERM"].contains(answer), "\(attempt): \(answer)\n\(text)")
            }
            #expect(text.contains("ZERO True") && text.contains("STATIC processes 0") && text.contains("PTY /dev/pts/0"), "\(text)")
            // The trees' descriptors stop at init: stdio and listdir's own are all the payload has.
            #expect(text.contains("FDS [0, 1, 2, 3]"), "\(text)")
        }
    }

    @Test("the seed mount namespace monitors copy holds two mounts, a read-only empty root and a procfs, nothing of the host's; sandboxes built from it, by the launcher or by a fork, are whole")
    func seedNamespace() throws {
        try requireRoot()
        let trees = try #require(SharedTrees.install(), "\(SharedTrees.unavailableReason ?? "")")
        try #require(trees.seed >= 0, "\(trees.seedProblem ?? "")")
        // Joined from the host: what a monitor copies.
        let script = """
            import ctypes, os, sys
            fd = os.open(sys.argv[1], os.O_RDONLY)
            if ctypes.CDLL(None, use_errno=True).setns(fd, 0x20000) != 0:
                sys.exit('setns: errno %d' % ctypes.get_errno())
            for line in open('/proc/self/mountinfo'):
                f = line.split()
                print(f[4], f[5].split(',')[0], f[f.index('-') + 1])
            print('ROOT', sorted(os.listdir('/')))
            try:
                open('/x', 'w'); print('root writable')
            except OSError as e:
                print('root', e.errno)
            """
        let r = try runProcess("/usr/bin/python3", ["-c", script, "/proc/\(getpid())/fd/\(trees.seed)"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout == "/ ro tmpfs\n/proc rw proc\nROOT ['dev', 'proc', 'tmp']\nroot 30\n", "\(r.stdout)")
        // Sandboxes copied from it have their whole tree, launched either way.
        let out = try TempDir(mode: 0o777)
        let check = "import os\nprint(sorted(os.listdir('/'))[:3], os.path.exists('/proc/self/status'), open('/proc/stat').readline().split()[1])"
        for useLauncher in [true, false] {
            let text = try Self.run(check, out: out.path, trees: trees, useLauncher: useLauncher)
            #expect(text == "['bin', 'dev', 'lib'] True 0\n", "launcher \(useLauncher): \(text)")
        }
    }

    @Test("without the shared tree each sandbox builds its own covers, and they read the same")
    func builtPerSandbox() throws {
        try requireRoot()
        let trees = try #require(SharedTrees.install(), "\(SharedTrees.unavailableReason ?? "")")
        let out = try TempDir(mode: 0o777)
        let shared = try Self.run(Self.probe, out: out.path, trees: trees)
        let own1 = try Self.run(Self.probe, out: out.path, trees: nil)
        let own2 = try Self.run(Self.probe, out: out.path, trees: nil)
        func dev(_ text: String) -> Substring { text.split(separator: "\n").first { $0.hasPrefix("DEV ") }?.split(separator: " ")[1] ?? "" }
        #expect(!dev(shared).isEmpty && !dev(own1).isEmpty, "\(shared)\n\(own1)")
        // What a program reads is the same either way.
        func readable(_ text: String) -> [Substring] {
            text.split(separator: "\n").filter { $0.hasPrefix("ZERO") || $0.hasPrefix("STATIC") || $0.hasPrefix("PTY") || $0.hasPrefix("SHM-BEFORE") || $0.hasPrefix("NODES") }
        }
        #expect(readable(shared) == readable(own1), "\(shared)\n\(own1)")
        #expect(own1.split(separator: "\n").filter { $0.hasPrefix("MOUNT ") }.count == 5, "\(own1)")
    }

    @Test("a supervisor without CAP_MKNOD (a container's) gives each sandbox binds of the host's nodes in a nodev /dev, and still shares the covers")
    func sharedWithoutMknod() throws {
        try requireRoot()
        // `sandbox exec --bench-repeat` runs in-process launches with shared trees installed.
        let script = "grep ' /dev' /proc/self/mountinfo | cut -d' ' -f5,6; cat /dev/null; echo x > /dev/null && echo WRITE-OK"
        let r = try runProcess("/usr/bin/setpriv", ["--bounding-set", "-mknod", "--", Built.autoharness, "sandbox", "exec", "--bench-repeat", "2",
                                                    "--policy", "base", "--", "/bin/sh", "-c", script])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("/proc covers cloned from a shared tree"), "\(r.stderr)")
        let mounts = r.stdout.split(separator: "\n").filter { $0.hasPrefix("/dev") }
        let dev = mounts.first { $0.hasPrefix("/dev ") }
        #expect(dev.map { $0.contains("nodev") && $0.contains("ro,") } == true, "\(r.stdout)")
        #expect(mounts.contains { $0.hasPrefix("/dev/null ") }, "\(r.stdout)")
        #expect(r.stdout.contains("WRITE-OK"), "\(r.stdout)")
    }

    @Test("two sandboxes running at once share no /dev inode: one's lock on /dev/null is not seen by the other (/dev made by the monitor, or ahead of time by the supervisor)",
          arguments: [(true, false), (false, false), (true, true)])
    func devNotShared(sharedTrees: Bool, devicesAhead: Bool) throws {
        try requireRoot()
        let trees = sharedTrees ? try #require(SharedTrees.install(), "\(SharedTrees.unavailableReason ?? "")") : nil
        let parts = devicesAhead ? SandboxPartsPool(capacity: 2) : nil
        defer { parts?.close() }
        if let parts { #expect(parts.waitUntilReady() && parts.failures.isEmpty, "\(parts.failures)") }
        let out = try TempDir(mode: 0o777)
        // A locks /dev/null and waits for B; B tries the same lock without waiting. Through
        // shared inodes (the host's nodes bound in, or one shared /dev) B got EAGAIN.
        let holder = """
            import fcntl, os, time
            fds = [os.open("/dev/null", os.O_RDONLY)]
            for fd in fds: fcntl.flock(fd, fcntl.LOCK_EX)
            open("/out/a-locked", "w").close()
            end = time.time() + 20
            while not os.path.exists("/out/b-done") and time.time() < end: time.sleep(0.01)
            print("HOLDER", len(fds))
            """
        let tester = """
            import errno, fcntl, os, time
            end = time.time() + 20
            while not os.path.exists("/out/a-locked") and time.time() < end: time.sleep(0.01)
            fd = os.open("/dev/null", os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print("LOCK null ok")
            except OSError as e: print("LOCK null", errno.errorcode[e.errno])
            open("/out/b-done", "w").close()
            """
        final class Outputs: @unchecked Sendable { var text = ["", ""]; let lock = NSLock() }
        let outputs = Outputs()
        let dir = out.path
        DispatchQueue.concurrentPerform(iterations: 2) { i in
            let text = (try? Self.run(i == 0 ? holder : tester, out: dir, trees: trees, parts: parts)) ?? "run failed"
            outputs.lock.lock()
            outputs.text[i] = text
            outputs.lock.unlock()
        }
        #expect(outputs.text[0].contains("HOLDER"), "\(outputs.text[0])")
        #expect(outputs.text[1].contains("LOCK null ok"), "\(outputs.text[1])")
        if let parts { #expect(parts.counts.devices == 2, "both sandboxes took a /dev made ahead") }
    }

    @Test("the shared covers are readable in the sandbox whatever the supervisor's umask (077 made them root's 0400)")
    func coversIgnoreUmask() throws {
        try requireRoot()
        let r = try runProcess("/bin/sh", ["-c", "umask 077; exec \"$0\" sandbox exec --bench-repeat 2 --policy base -- /bin/sh -c 'head -1 /proc/stat; cat /proc/loadavg; ls /proc/pressure | wc -l'",
                                           Built.autoharness])
        #expect(r.status == 0, "\(r.stdout)\n\(r.stderr)")
        #expect(r.stderr.contains("/proc covers cloned from a shared tree; mount namespaces copied from a seed"), "\(r.stderr)")
        #expect(r.stdout.contains("cpu  0 0 0") && r.stdout.contains("0.00 0.00 0.00"), "\(r.stdout)\n\(r.stderr)")
        #expect(!r.stdout.contains("Permission denied") && !r.stderr.contains("Permission denied"), "\(r.stdout)\n\(r.stderr)")
    }
}
