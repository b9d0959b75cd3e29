import Foundation
import Glibc
import Sandbox
import SandboxCLI
import Testing
import TestSupport

/// The front starts a launch service when none answers at its socket (`LaunchService.frontStart`):
/// these fail if the launch that starts it is not run by itself as before, if the service
/// holds the caller's output or stays its child, if it serves a client in another cgroup, if a
/// served sandbox has other scheduling or resource settings than the caller's own launch, if
/// the service keeps its starter's, if two services can serve one socket, if one is started
/// where it could not serve (a relative path), or if a service that only declines never idles
/// out.
@Suite("the front starts a launch service for the launches after it")
struct LaunchServiceStartTests {
    /// A socket of the test's own (its directory not made: the service makes it), a private
    /// policy cache, and timing marks that say which path ran.
    struct Setup {
        let dir: TempDir
        let socket: String
        let environment: [String: String]
        /// Another AUTOHARNESS_LAUNCH_SERVICE for `front` (`off`: the front's own launch).
        var environmentOverride: String?

        init() throws {
            try requireRoot()
            dir = try TempDir(mode: 0o700)
            socket = dir.file("svc") + "/launch.sock"
            try FileManager.default.createDirectory(atPath: dir.file("cache"), withIntermediateDirectories: false)
            var env = ProcessInfo.processInfo.environment
            env["AUTOHARNESS_CACHE_DIR"] = dir.file("cache")
            env["AUTOHARNESS_LAUNCH_SERVICE"] = socket
            env["AUTOHARNESS_TIMING"] = "1"
            environment = env
        }

        var log: String { (try? String(contentsOfFile: socket + ".log", encoding: .utf8)) ?? "" }

        /// The pid the service's log names once it listens, or nil after `seconds`.
        func servicePid(within seconds: Double = 20) -> pid_t? {
            let deadline = Date().addingTimeInterval(seconds)
            while Date() < deadline {
                if let line = log.split(separator: "\n").first(where: { $0.contains("serving sandbox exec at \(socket) (pid ") }),
                   let pid = line.split(separator: "(pid ").last?.split(separator: ")").first.flatMap({ pid_t($0) }) {
                    return pid
                }
                usleep(20_000)
            }
            return nil
        }

        /// `front sandbox exec ARGS | cat`, run by /bin/sh (optionally wrapped, e.g. into a
        /// cgroup): the pipeline ends only once every holder of the pipe has closed it. The
        /// status is the front's; stdout has its stdout and stderr.
        func front(_ args: [String], wrap: ((String, [String]) -> (exe: String, args: [String]))? = nil) throws -> (run: Run, seconds: Double) {
            let quoted = (["sandbox", "exec"] + args).map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
            let line = "{ '\(Built.front)' \(quoted); echo \"front exited $?\"; } 2>&1 | cat"
            let (exe, argv) = wrap?("/bin/sh", ["-c", line]) ?? ("/bin/sh", ["-c", line])
            let started = Date()
            var env = environment
            if let environmentOverride { env["AUTOHARNESS_LAUNCH_SERVICE"] = environmentOverride }
            var r = try runProcess(exe, argv, environment: env)
            let seconds = Date().timeIntervalSince(started)
            let exit = r.stdout.split(separator: "\n").last { $0.hasPrefix("front exited ") }
            r.status = exit.flatMap { Int32($0.dropFirst("front exited ".count)) } ?? -1
            return (r, seconds)
        }

        /// `autoharness sandbox serve --socket SOCKET ARGUMENTS` started by this test (under
        /// `prefix`, e.g. taskset), stdin and stdout /dev/null, stderr to `stderr` if given.
        func serve(_ arguments: [String], prefix: [String] = [], stderr: Pipe? = nil) throws -> Process {
            let p = Process()
            let command = prefix + [Built.autoharness, "sandbox", "serve", "--socket", socket] + arguments
            p.executableURL = URL(fileURLWithPath: command[0])
            p.arguments = Array(command.dropFirst())
            p.environment = environment
            p.standardInput = FileHandle.nullDevice
            p.standardOutput = FileHandle.nullDevice
            p.standardError = stderr ?? FileHandle.nullDevice
            try p.run()
            return p
        }

        /// Fills the policy cache (a front's miss), then runs `body` with a service serving any
        /// cgroup's callers (no --same-cgroup, as systemd's), started under `prefix`; the
        /// service is stopped after.
        func withService(prefix: [String] = [], _ body: (pid_t) throws -> Void) throws {
            _ = try front(["--", "/bin/true"])
            let p = try serve(["--log"], prefix: prefix)
            defer { if p.isRunning { kill(p.processIdentifier, SIGKILL) } }
            let pid = try #require(servicePid(), "no service listened: \(log)")
            defer { stop(pid) }
            try body(pid)
        }

        /// Ends the service `pid` (the front started it for this test) and waits for its log's
        /// last line.
        func stop(_ pid: pid_t) {
            kill(pid, SIGTERM)
            let deadline = Date().addingTimeInterval(30)
            while kill(pid, 0) == 0, Date() < deadline { usleep(20_000) }
            if kill(pid, 0) == 0 {
                Issue.record("the service \(pid) did not stop within 30 s of SIGTERM: \(log)")
                kill(pid, SIGKILL)
            }
        }
    }

    static func served(_ r: Run) -> Bool { r.stdout.contains("timing: served by the launch service") }

    @Test("the first launch with no service starts one and runs by itself, without holding the caller's output; the next is served; a client in another cgroup is declined and launches itself")
    func frontStartsService() throws {
        let s = try Setup()
        // A miss in the policy cache: the full CLI runs it (and fills the cache); no service.
        let miss = try s.front(["--", "/bin/echo", "one"])
        #expect(miss.run.status == 0 && miss.run.stdout.contains("one"), "\(miss.run.stdout)")
        #expect(!FileManager.default.fileExists(atPath: s.socket))

        let first = try s.front(["--", "/bin/echo", "two"])
        #expect(first.run.status == 0 && first.run.stdout.contains("two"), "\(first.run.stdout)")
        #expect(first.run.stdout.contains("timing: launch service started for the next launches"), "\(first.run.stdout)")
        #expect(!Self.served(first.run))
        // The pipe's reader saw its end with the launch: the service holds none of it.
        #expect(first.seconds < 10, "the caller's pipe stayed open \(first.seconds) s after the launch")
        let pid = try #require(s.servicePid(), "no service listened: \(s.log)")
        defer { s.stop(pid) }

        // A process of its own session, no child of the front, with /dev/null and its log as stdio.
        let stat = try #require(procText("/proc/\(pid)/stat"))
        let fields = stat.split(separator: ")").last!.split(separator: " ")
        #expect(Int32(fields[3]) == pid, "its session: \(stat)")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/0") == "/dev/null")
        #expect(try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/fd/2") == s.socket + ".log")
        let args = (try #require(procText("/proc/\(pid)/cmdline"))).split(separator: "\0").map(String.init)
        #expect(Array(args.dropFirst()) == ["sandbox", "serve", "--socket", s.socket, "--idle-exit", LaunchService.frontIdleExit,
                                            "--same-cgroup", "--log"], "\(args)")

        let second = try s.front(["--", "/bin/echo", "three"])
        #expect(second.run.status == 0 && second.run.stdout.contains("three"), "\(second.run.stdout)")
        #expect(Self.served(second.run), "\(second.run.stdout)\n\(s.log)")
        #expect(!second.run.stdout.contains("launch service started"))

        // From a cgroup of its own: declined, launched by the front itself, with its status.
        let elsewhere = try CgroupEnclosure()
        let declined = try s.front(["--", "/bin/sh", "-c", "echo four; exit 3"], wrap: elsewhere.wrap)
        #expect(declined.run.status == 3 && declined.run.stdout.contains("four"), "\(declined.run.stdout)")
        #expect(!Self.served(declined.run), "\(declined.run.stdout)")

        // Settings every process passes to those it starts, of the caller's own (SCHED_IDLE,
        // policy 5, among them): its served sandbox has them, as its own launch has.
        let wrap: (String, [String]) -> (exe: String, args: [String]) = { exe, args in
            ("/usr/bin/nice", ["-n", "5", "/usr/bin/prlimit", "--stack=4194304:16777216", "--cpu=100000", "--nofile=256:512", "--",
                               "/usr/bin/taskset", "-c", "0", "/usr/bin/chrt", "-i", "0",
                               "/bin/sh", "-c", "echo 300 > /proc/self/oom_score_adj && exec \"$0\" \"$@\"", exe] + args)
        }
        let probe = ["--", "/bin/sh", "-c",
                     "awk '{ print \"nice\", $19; print \"policy\", $41 }' /proc/self/stat; grep -E '^Cpus_allowed_list' /proc/self/status; "
                     + "echo oom $(cat /proc/self/oom_score_adj); echo stack $(ulimit -Ss) $(ulimit -Hs); echo cpu $(ulimit -t); "
                     + "echo nofile $(ulimit -Sn) $(ulimit -Hn)"]
        let served = try s.front(probe, wrap: wrap)
        var oneShotSetup = s
        oneShotSetup.environmentOverride = "off"
        let own = try oneShotSetup.front(probe, wrap: wrap)
        #expect(Self.served(served.run) && !Self.served(own.run), "\(served.run.stdout)\n\(own.run.stdout)")
        let settings = { (r: Run) in r.stdout.split(separator: "\n").filter { !$0.hasPrefix("timing:") && !$0.hasPrefix("front exited") } }
        #expect(settings(served.run) == settings(own.run), "served: \(settings(served.run)); its own: \(settings(own.run))")
        // The policy's nofile (1024) bounded by the caller's hard limit, in both.
        #expect(settings(own.run) == ["nice 5", "policy 5", "Cpus_allowed_list:\t0", "oom 300", "stack 4096 16384", "cpu 100000", "nofile 512 512"],
                "\(settings(own.run))")

        s.stop(pid)
        #expect(s.log.contains("2 launches served, 1 declined"), "\(s.log)")
    }

    /// Whether this process may raise its resource limits (CAP_SYS_RESOURCE; this development
    /// VM, like a default container, runs without it).
    static var mayRaiseLimits: Bool {
        let status = procText("/proc/self/status") ?? ""
        let eff = status.split(separator: "\n").first { $0.hasPrefix("CapEff:") }.flatMap { UInt64($0.split(separator: "\t").last ?? "", radix: 16) } ?? 0
        return eff & (1 << 24) != 0
    }

    @Test("a service started by a caller under nice, a CPU mask and low limits has none of them where the kernel allows; under a CPU time limit that stays, none is started")
    func startedNeutral() throws {
        let s = try Setup()
        _ = try s.front(["--", "/bin/true"])  // the cache, filled by a miss
        let started = try s.front(["--", "/bin/true"], wrap: { exe, args in
            ("/usr/bin/nice", ["-n", "7", "/usr/bin/prlimit", "--nofile=512:4096", "--", "/usr/bin/taskset", "-c", "0",
                               "/bin/sh", "-c", "echo 200 > /proc/self/oom_score_adj && exec \"$0\" \"$@\"", exe] + args)
        })
        #expect(started.run.status == 0 && started.run.stdout.contains("launch service started"), "\(started.run.stdout)")
        let pid = try #require(s.servicePid(), "no service listened: \(s.log)")
        let stat = try #require(procText("/proc/\(pid)/stat")).split(separator: ")").last!.split(separator: " ")
        #expect(stat[16] == "0", "nice \(stat[16])")
        #expect(try #require(procText("/proc/\(pid)/oom_score_adj")) == "0\n")
        let cpus = { (pid: String) in
            procText("/proc/\(pid)/status")?.split(separator: "\n").first { $0.hasPrefix("Cpus_allowed_list") }
        }
        #expect(cpus(String(pid)) == cpus("self"), "\(String(describing: cpus(String(pid))))")
        let files = { (pid: String) in
            procText("/proc/\(pid)/limits")?.split(separator: "\n").first { $0.hasPrefix("Max open files") }
        }
        // PID 1's where it may raise them, else the caller's (only lowering is allowed then).
        let expected = Self.mayRaiseLimits ? files("1") : Substring("Max open files            512                  4096                 files     ")
        #expect(files(String(pid)) == expected, "\(String(describing: files(String(pid))))")
        s.stop(pid)

        let other = try Setup()
        _ = try other.front(["--", "/bin/true"])
        let limited = try other.front(["--", "/bin/true"], wrap: { exe, args in ("/usr/bin/prlimit", ["--cpu=100000", "--", exe] + args) })
        #expect(limited.run.status == 0 && limited.run.stdout.contains("launch service started"), "\(limited.run.stdout)")
        if Self.mayRaiseLimits {
            let cpuPid = try #require(other.servicePid(), "no service listened: \(other.log)")
            let limits = try #require(procText("/proc/\(cpuPid)/limits"))
            #expect(limits.contains("Max cpu time              unlimited"), "\(limits)")
            other.stop(cpuPid)
        } else {
            #expect(other.servicePid(within: 2) == nil, "a service started with a CPU time limit: \(other.log)")
            #expect(!FileManager.default.fileExists(atPath: other.socket))
        }
    }

    @Test("--log never follows a symbolic link at SOCKET.log: the service says which file it could not open, exits, and leaves no socket")
    func logThroughSymlinkRefused() throws {
        let s = try Setup()
        try FileManager.default.createDirectory(atPath: s.dir.file("svc"), withIntermediateDirectories: false)
        chmod(s.dir.file("svc"), 0o755)
        let target = s.dir.file("elsewhere.log")
        #expect(symlink(target, s.socket + ".log") == 0)
        let err = Pipe()
        let p = try s.serve(["--log"], stderr: err)
        let deadline = Date().addingTimeInterval(20)
        while p.isRunning, Date() < deadline { usleep(20_000) }
        if p.isRunning {
            Issue.record("the service went on serving with its log through a link")
            kill(p.processIdentifier, SIGKILL)
        }
        p.waitUntilExit()
        let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(p.terminationStatus != 0 && text.contains("--log: \(s.socket).log: Too many levels of symbolic links"), "\(text)")
        #expect(!FileManager.default.fileExists(atPath: target), "the log was written through the link")
        #expect(access(s.socket, F_OK) != 0, "the socket of a service that did not serve was left")
    }

    @Test("no service is started for a relative socket path")
    func notStarted() throws {
        let s = try Setup()
        _ = try s.front(["--", "/bin/true"])  // the cache, filled by a miss
        var relative = s.environment
        relative["AUTOHARNESS_LAUNCH_SERVICE"] = "svc/launch.sock"
        let r = try runProcess("/bin/sh", ["-c", "cd '\(s.dir.path)' && exec '\(Built.front)' sandbox exec -- /bin/true"], environment: relative)
        #expect(r.status == 0 && !r.stderr.contains("launch service started"), "\(r.stderr)")
        usleep(500_000)
        #expect(!FileManager.default.fileExists(atPath: s.socket) && !FileManager.default.fileExists(atPath: s.socket + ".lock"))
        #expect(!LaunchService.frontStarts(at: "svc/launch.sock") && LaunchService.frontStarts(at: s.socket))
    }

    @Test("services started at once at one socket: one serves, the others say another holds it")
    func oneServicePerSocket() throws {
        let s = try Setup()
        let services = try (0..<4).map { _ in
            let err = Pipe()
            return (try s.serve(["--same-cgroup", "--idle-exit", "60s"], stderr: err), err)
        }
        defer { for (p, _) in services where p.isRunning { kill(p.processIdentifier, SIGKILL) } }
        // The three that lose end at once; the winner's first line says it serves.
        var ended: [String] = []
        let deadline = Date().addingTimeInterval(30)
        while services.filter({ !$0.0.isRunning }).count < 3, Date() < deadline { usleep(20_000) }
        for (p, err) in services where !p.isRunning {
            #expect(p.terminationStatus != 0)
            ended.append(String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self))
        }
        #expect(ended.count == 3 && ended.allSatisfy { $0.contains("another launch service is starting or serving there") }, "\(ended)")
        let winner = try #require(services.first { $0.0.isRunning })
        let served = try s.front(["--", "/bin/echo", "served"])
        #expect(served.run.status == 0 && Self.served(served.run) && served.run.stdout.contains("served"), "\(served.run.stdout)")
        kill(winner.0.processIdentifier, SIGTERM)
        winner.0.waitUntilExit()
        let log = String(decoding: winner.1.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(log.contains("1 launches served, 0 declined"), "\(log)")
    }

    @Test("a caller that may use a CPU the service may not is declined (its sandbox would run on the service's CPUs); one within them is served on its own")
    func cpusOutsideTheServiceDeclined() throws {
        let s = try Setup()
        try #require(ProcessInfo.processInfo.activeProcessorCount >= 2, "needs two CPUs to give the service fewer than its callers")
        try s.withService(prefix: ["/usr/bin/taskset", "-c", "0"]) { _ in
            let probe = ["--", "/bin/grep", "Cpus_allowed_list", "/proc/self/status"]
            let wide = try s.front(probe)
            #expect(wide.run.status == 0 && !Self.served(wide.run), "\(wide.run.stdout)")
            let narrow = try s.front(probe, wrap: { exe, args in ("/usr/bin/taskset", ["-c", "0", exe] + args) })
            #expect(narrow.run.status == 0 && Self.served(narrow.run) && narrow.run.stdout.contains("Cpus_allowed_list:\t0\n"), "\(narrow.run.stdout)")
        }
    }

    @Test("a caller limited in a cgroup it does not share with a service (its own, or an ancestor below where they part) is declined and launches itself, inside the limit; one without a limit is served")
    func limitedCallerDeclined() throws {
        let s = try Setup()
        try s.withService { _ in
            let enclosure = try CgroupEnclosure()
            // Every hierarchy's enclosure has a child the caller runs in: the limit is set on the
            // enclosure, its ancestor.
            let children = enclosure.directories.map { $0 + "/caller" }
            for c in children { #expect(mkdir(c, 0o755) == 0, "mkdir \(c)") }
            defer { for c in children { rmdir(c) } }
            let inChild: (String, [String]) -> (exe: String, args: [String]) = { exe, args in
                let moves = children.map { "echo $$ > '\($0)/cgroup.procs' || exit 125" }.joined(separator: "; ")
                return ("/bin/sh", ["-c", moves + "; exec \"$@\"", "sh", exe] + args)
            }
            let free = try s.front(["--", "/bin/echo", "free"], wrap: inChild)
            #expect(free.run.status == 0 && Self.served(free.run), "no limit, so served: \(free.run.stdout) \(s.log)")

            let pids = try #require(enclosure.directories.first { FileManager.default.fileExists(atPath: $0 + "/pids.max") }, "no pids cgroup")
            try "64".write(toFile: pids + "/pids.max", atomically: false, encoding: .utf8)
            let limited = try s.front(["--", "/bin/sh", "-c", "echo limited; exit 4"], wrap: inChild)
            #expect(limited.run.status == 4 && limited.run.stdout.contains("limited") && !Self.served(limited.run), "\(limited.run.stdout)")
            #expect(s.log.contains("declined a launch from pid") && s.log.contains(pids + "/pids.max is 64 (the service's: none)"), "\(s.log)")
        }
    }

    /// A client that connects from a process that then exits, and has that pid taken by a
    /// thread of the service before the service reads /proc/PID (a relay between a real front
    /// and the service: ns_last_pid, and idle connections that start service threads).
    static let pidReuse = #"""
    import os, socket, sys, time, select
    svc, spid, front, relay, command = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); listener.bind(relay); listener.listen(1)
    child = os.fork()
    if child == 0:
        env = dict(os.environ, AUTOHARNESS_LAUNCH_SERVICE=relay, AUTOHARNESS_TIMING='1')
        os.execve(front, ['autoharness', 'sandbox', 'exec', '--', '/bin/sh', '-c', command], env)
    f, _ = listener.accept()
    head, fds, _, _ = socket.recv_fds(f, 12, 5)
    while len(head) < 12: head += f.recv(12 - len(head))
    length = int.from_bytes(head[8:12], 'little')
    body = b''
    while len(body) < length: body += f.recv(length - len(body))
    request = head + body
    os.close(fds[4]); fds[4] = os.open(f'/proc/{spid}/cwd', os.O_RDONLY | os.O_DIRECTORY)
    def tgid(pid):
        try:
            return next(int(l.split()[1]) for l in open(f'/proc/{pid}/status') if l.startswith('Tgid:'))
        except (OSError, StopIteration):
            return None
    # Another process on a busy host may take the freed pid first: up to three peers.
    for attempt in range(3):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        peer = os.fork()
        if peer == 0:
            s.connect(svc)
            socket.send_fds(s, [request[:1]], fds)
            os._exit(0)
        os.waitpid(peer, 0)
        sent, idle = 1, []
        for _ in range(60):
            if tgid(peer) == spid: break
            if sent < 11: s.send(request[sent:sent + 1]); sent += 1
            open('/proc/sys/kernel/ns_last_pid', 'w').write(str(peer - 1))
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c.connect(svc); idle.append(c)
            time.sleep(0.05)
        if tgid(peer) == spid: break
        s.close()
        for c in idle: c.close()
    print('reused:', 'yes' if tgid(peer) == spid else 'no', flush=True)
    s.sendall(request[sent:])
    for c in idle: c.close()
    while True:
        r, _, _ = select.select([f, s], [], [])
        d = (f if f in r else s).recv(65536)
        if not d: break
        (s if f in r else f).sendall(d)
    f.close(); s.close()
    print('front exited', os.waitpid(child, 0)[1] >> 8, flush=True)
    """#

    @Test("a limited caller whose pid is taken by another process (a service thread) before the service reads it is not served: the process that connected must still be alive after the reads")
    func reusedPeerPidNotServed() throws {
        let s = try Setup()
        try s.withService { pid in
            let enclosure = try CgroupEnclosure()
            let pids = try #require(enclosure.directories.first { FileManager.default.fileExists(atPath: $0 + "/pids.max") }, "no pids cgroup")
            try "64".write(toFile: pids + "/pids.max", atomically: false, encoding: .utf8)
            let script = s.dir.path + "/reuse.py"
            try Self.pidReuse.write(toFile: script, atomically: false, encoding: .utf8)
            let (exe, args) = enclosure.wrap("/usr/bin/python3", [script, s.socket, String(pid), Built.front, s.dir.path + "/relay.sock", "echo ran"])
            let r = try runProcess(exe, args, environment: s.environment)
            let out = r.stdout + r.stderr
            #expect(out.contains("reused: yes"), "the peer's pid was not taken by a service thread, so nothing was tried: \(out)")
            #expect(out.contains("ran") && out.contains("front exited 0"), "\(out)")
            #expect(!out.contains("timing: served by the launch service"), "served through a reused pid: \(out)")
        }
    }

    @Test("a client that sends its request a byte at a time is cut off 10 s after it began, not 10 s after each byte")
    func dribblingClientCut() throws {
        let s = try Setup()
        try s.withService { pid in
            // The header's first byte with five descriptors, then a byte every 2 s: each read waits
            // less than 10 s, so only a deadline for the whole request ends it (the header is
            // complete after 22 s).
            let script = """
            import socket, sys, time, os
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c.connect(sys.argv[1])
            start = time.monotonic()
            socket.send_fds(c, [b'A'], [0, 1, 2, os.open('/', os.O_RDONLY), os.open('/', os.O_RDONLY)])
            c.settimeout(2)
            for i in range(15):
                try:
                    if c.recv(16) == b'' or True:
                        break
                except socket.timeout:
                    pass
                try:
                    c.send(b'B')
                except OSError:
                    break
            print('cut after %.1f s' % (time.monotonic() - start))
            """
            let r = try runProcess("/usr/bin/python3", ["-c", script, s.socket])
            let seconds = r.stdout.split(separator: " ").dropFirst(2).first.flatMap { Double($0) }
            #expect(seconds.map { $0 >= 9 && $0 < 14 } == true, "\(r.stdout) \(r.stderr)")
        }
    }

    @Test("the limits between a caller and a service: a caller is declined only for a limit tighter than the service's path has, or one it cannot show")
    func limitsBetween() throws {
        let root = try TempDir()
        func dir(_ rel: String, _ files: [String: String]) throws {
            try FileManager.default.createDirectory(atPath: root.path + rel, withIntermediateDirectories: true)
            for (name, value) in files { try value.write(toFile: root.path + rel + "/" + name, atomically: false, encoding: .utf8) }
        }
        try dir("/pids/a", ["pids.max": "max\n"])
        try dir("/pids/a/b", ["pids.max": "max\n"])
        try dir("/pids/a/c", ["pids.max": "30\n"])
        try dir("/pids/lim", ["pids.max": "40\n"])
        try dir("/pids/lim/x", ["pids.max": "max\n"])
        try dir("/pids/svc", ["pids.max": "300\n"])
        try dir("/pids/loose", ["pids.max": "1000\n"])
        try dir("/memory/m", ["memory.limit_in_bytes": "9223372036854771712\n", "memory.kmem.tcp.limit_in_bytes": "4096\n"])
        try dir("/cpu/q", ["cpu.cfs_quota_us": "50000\n", "cpu.cfs_period_us": "100000\n"])
        try dir("/cpu/r", ["cpu.cfs_quota_us": "-1\n", "cpu.cfs_period_us": "100000\n"])
        try dir("/unified/s", ["memory.max": "max\n", "cpu.max": "max 100000\n", "io.max": "", "hugetlb.2MB.max": "max\n"])
        try dir("/unified/t", ["memory.max": "max\n", "cpu.max": "50000 100000\n", "io.max": ""])
        try dir("/unified/u", ["io.max": "253:0 rbps=1048576 wbps=max riops=max wiops=max\n"])
        try dir("/unified/h", ["hugetlb.2MB.max": "4194304\n"])
        let mounts = [CgroupHost.Mount(type: "cgroup", options: ["rw", "pids"], root: "/", mountPoint: root.path + "/pids"),
                      CgroupHost.Mount(type: "cgroup", options: ["rw", "memory"], root: "/", mountPoint: root.path + "/memory"),
                      CgroupHost.Mount(type: "cgroup", options: ["rw", "cpu", "cpuacct"], root: "/", mountPoint: root.path + "/cpu"),
                      CgroupHost.Mount(type: "cgroup2", options: ["rw"], root: "/", mountPoint: root.path + "/unified")]
        func between(_ client: [String: String], _ service: [String: String]) -> String? {
            CgroupLimits.between(client: client, service: service, mounts: mounts)
        }
        let at = { (rel: String) in root.path + rel }
        // The same cgroup, or one above the service's: its limits hold the service's sandboxes.
        #expect(between(["pids": "/a/c"], ["pids": "/a/c"]) == nil)
        #expect(between(["pids": "/a"], ["pids": "/a/c"]) == nil)
        // Elsewhere: unlimited, then limited where the service is not.
        #expect(between(["pids": "/a/b"], ["pids": "/a/c"]) == nil)
        #expect(between(["pids": "/a/c"], ["pids": "/a/b"]) == at("/pids/a/c/pids.max") + " is 30 (the service's: none)")
        // An ancestor's limit counts; one the service shares does not make the client tighter.
        #expect(between(["pids": "/lim/x"], ["pids": "/a/b"]) == at("/pids/lim/pids.max") + " is 40 (the service's: none)")
        #expect(between(["pids": "/lim/x"], ["pids": "/lim"]) == nil)
        // By value: looser than the service's is served, tighter is not.
        #expect(between(["pids": "/loose"], ["pids": "/svc"]) == nil)
        #expect(between(["pids": "/lim"], ["pids": "/svc"]) == at("/pids/lim/pids.max") + " is 40 (the service's: " + at("/pids/svc/pids.max") + " is 300)")
        // v1 memory: the unlimited value is none; the TCP buffer limit counts.
        #expect(between(["memory": "/m"], ["memory": "/"]) == at("/memory/m/memory.kmem.tcp.limit_in_bytes") + " is 4096 (the service's: none)")
        // v1 cpu (co-mounted with cpuacct): a quota is a share of a CPU.
        #expect(between(["cpu": "/q", "cpuacct": "/q"], ["cpu": "/r"])?.hasPrefix(at("/cpu/q/cpu.cfs_quota_us") + " is 50000 of 100000 us") == true)
        #expect(between(["cpu": "/r"], ["cpu": "/q"]) == nil)
        // v2: an unlimited cpu.max and an empty io.max are none; a quota, a per-device I/O
        // limit and a huge page limit count.
        #expect(between(["": "/s"], ["": "/"]) == nil)
        #expect(between(["": "/t"], ["": "/s"]) == at("/unified/t/cpu.max") + " is 50000 100000 (the service's: none)")
        #expect(between(["": "/u"], ["": "/s"]) == at("/unified/u/io.max") + " is 253:0 rbps=1048576 wbps=max riops=max wiops=max")
        #expect(between(["": "/h"], ["": "/s"]) == at("/unified/h/hugetlb.2MB.max") + " is 4194304 (the service's: none)")
        // A cgroup no mount shows, or that is not there, cannot be checked: declined.
        #expect(between(["pids": "/gone"], ["pids": "/"])?.contains("not visible") == true)
        #expect(between(["blkio": "/b"], ["blkio": "/"])?.contains("not visible") == true)
    }

    @Test("a service that only declines goes idle: clients it declines do not keep it running")
    func declinesAreIdle() throws {
        let s = try Setup()
        _ = try s.front(["--", "/bin/true"])  // the cache, filled by a miss
        let p = try s.serve(["--same-cgroup", "--idle-exit", "3", "--log"])
        defer { if p.isRunning { kill(p.processIdentifier, SIGKILL) } }
        _ = try #require(s.servicePid(), "no service listened: \(s.log)")
        let started = Date()
        // Declined launches one after another, for longer than the idle time.
        let elsewhere = try CgroupEnclosure()
        var declined = 0
        while p.isRunning, Date().timeIntervalSince(started) < 8 {
            let r = try s.front(["--", "/bin/true"], wrap: elsewhere.wrap)
            #expect(r.run.status == 0 && !Self.served(r.run), "\(r.run.stdout)")
            if r.run.status == 0 { declined += 1 }
            usleep(300_000)
        }
        p.waitUntilExit()
        // Counted as activity, the declines (the last one at 8 s at the latest) would keep it
        // to 11 s.
        let lasted = Date().timeIntervalSince(started)
        #expect(declined >= 1 && lasted < 7, "the service lasted \(lasted) s through \(declined) declined launches: \(s.log)")
        #expect(s.log.contains("(idle for 3s)"), "\(s.log)")
    }

    @Test("doctor's line on the launch service, found without connecting: none, a front's service with its pid, a socket left by a service killed, off")
    func stateForDoctor() throws {
        let s = try Setup()
        #expect(LaunchService.state(at: s.socket).hasPrefix("none at \(s.socket): the next sandbox exec starts one"))
        #expect(LaunchService.state(at: "rel.sock").contains("none is started at a relative path"))
        #expect(LaunchService.state(at: nil).hasPrefix("off"))
        _ = try s.front(["--", "/bin/true"])  // the cache, filled by a miss
        _ = try s.front(["--", "/bin/true"])  // starts the service
        let pid = try #require(s.servicePid(), "no service listened: \(s.log)")
        let running = LaunchService.state(at: s.socket)
        #expect(running.contains("listening at \(s.socket), held by pid \(pid) (") && running.contains("started by a front, serving its cgroup alone"), "\(running) (pid \(pid))")
        kill(pid, SIGKILL)
        // Its listening socket goes with its descriptors at its death (reaped or not).
        let deadline = Date().addingTimeInterval(10)
        while !LaunchService.state(at: s.socket).contains("left from a service that ended"), Date() < deadline { usleep(10_000) }
        #expect(LaunchService.state(at: s.socket).contains("left from a service that ended"), "\(LaunchService.state(at: s.socket))")
    }

    @Test("the socket the front uses: the variable, else the default; none when off or empty")
    func frontSocket() {
        #expect(LaunchService.frontSocket([:]) == LaunchService.defaultSocket)
        #expect(LaunchService.frontSocket(["AUTOHARNESS_LAUNCH_SERVICE": "/srv/l.sock"]) == "/srv/l.sock")
        #expect(LaunchService.frontSocket(["AUTOHARNESS_LAUNCH_SERVICE": "off"]) == nil)
        #expect(LaunchService.frontSocket(["AUTOHARNESS_LAUNCH_SERVICE": ""]) == nil)
        let start = LaunchService.frontStart(socket: "/s", fullCLI: "/x", environment: ["AUTOHARNESS_CACHE_DIR": "/c", "AUTOHARNESS_TIMING": "1", "HOME": "/root", "PATH": "/bin"])
        #expect(start.environment == ["AUTOHARNESS_CACHE_DIR=/c", "PATH=/bin"])
        #expect(start.arguments == ["/x", "sandbox", "serve", "--socket", "/s", "--idle-exit", "60s", "--same-cgroup", "--log"])
    }
}
