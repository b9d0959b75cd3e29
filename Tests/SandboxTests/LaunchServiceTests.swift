import CSystemCalls
import Foundation
import LaunchCode
import Sandbox
import Testing
import TestSupport

/// `autoharness sandbox serve` runs the front's launches: these fail if a served launch differs
/// from a one-shot one in what the caller sees (output, status, signals, working directory,
/// umask, relative paths), if a sandbox outlives its caller or the service, or if anyone but
/// the service's own user gets a launch out of it, or the front's launch out of an impostor.
@Suite("sandbox exec through the launch service")
struct LaunchServiceTests {
    /// A service of the test's own, on a socket in `dir`, with a private policy cache.
    final class Service {
        let socket: String
        let log: String
        let process = Process()
        let environment: [String: String]

        init(in dir: TempDir, name: String = "svc") throws {
            socket = try LaunchServiceTests.directory(dir.file(name), mode: 0o755) + "/launch.sock"
            log = dir.file(name + ".log")
            var env = ProcessInfo.processInfo.environment
            env["AUTOHARNESS_CACHE_DIR"] = try LaunchServiceTests.privateCache(in: dir)
            env["AUTOHARNESS_LAUNCH_SERVICE"] = nil
            env["AUTOHARNESS_TIMING"] = nil
            environment = env
            FileManager.default.createFile(atPath: log, contents: nil)
            process.executableURL = URL(fileURLWithPath: Built.autoharness)
            process.arguments = ["sandbox", "serve", "--socket", socket]
            process.environment = env
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = FileHandle(forWritingAtPath: log)
            process.standardError = FileHandle(forWritingAtPath: log)
            try process.run()
            let deadline = Date().addingTimeInterval(20)
            while !output.contains("serving sandbox exec at"), process.isRunning, Date() < deadline { usleep(20_000) }
            try #require(output.contains("serving sandbox exec at \(socket)"), "the service did not start: \(output)")
        }

        var output: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

        /// The front's environment: this service, and timing marks that say which path ran.
        var clientEnvironment: [String: String] {
            var env = environment
            env["AUTOHARNESS_LAUNCH_SERVICE"] = socket
            env["AUTOHARNESS_TIMING"] = "1"
            return env
        }

        /// Stops the service as an operator would, and returns its log. A service that has
        /// not ended 30 s later is a failure, and is killed.
        @discardableResult
        func stop() -> String {
            if process.isRunning {
                kill(process.processIdentifier, SIGTERM)
                let deadline = Date().addingTimeInterval(30)
                while process.isRunning, Date() < deadline { usleep(20_000) }
                if process.isRunning {
                    Issue.record("the service did not stop within 30 s of SIGTERM: \(output)")
                    kill(process.processIdentifier, SIGKILL)
                }
                process.waitUntilExit()
            }
            return output
        }

        deinit { stop() }
    }

    /// `path` made, with exactly `mode`.
    @discardableResult
    static func directory(_ path: String, mode: mode_t) throws -> String {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        try #require(chmod(path, mode) == 0)
        return path
    }

    static func privateCache(in dir: TempDir) throws -> String {
        let path = dir.path + "/cache"
        if mkdir(path, 0o700) != 0 { try #require(errno == EEXIST) }
        return path
    }

    static func served(_ r: Run) -> Bool { r.stderr.contains("timing: served by the launch service") }

    /// `front sandbox exec ARGS` run by /bin/sh from `directory` with `umask`.
    static func front(in directory: String, umask: String, _ args: [String], environment: [String: String]) throws -> Run {
        let quoted = args.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        return try runProcess("/bin/sh", ["-c", "cd '\(directory)' && umask \(umask) && exec '\(Built.front)' sandbox exec \(quoted)"], environment: environment)
    }

    @Test("a served launch is the one-shot launch as its caller sees it: output, status, audit, working directory, umask and relative paths")
    func servedLaunchIsTheOneShotLaunch() throws {
        try requireRoot()
        let dir = try TempDir()
        let service = try Service(in: dir)
        let work = dir.file("work")
        try Self.directory(work + "/pol", mode: 0o755)
        try Self.directory(work + "/out", mode: 0o777)
        try "extends: base\n".write(toFile: work + "/pol/p.yaml", atomically: false, encoding: .utf8)
        let input = try dir.file("input", "from stdin\n")
        // Relative --policy-dir and --audit are the caller's; the umask is the caller's; the
        // probe's refused mount is reported on the caller's stderr.
        let args = ["-v", "--policy-dir", "pol", "--policy", "p", "--audit", "audit.jsonl", "--env", "GREETING=hi",
                    "--rw", work + "/out:/out", "--ro", Built.probe + ":/probe", "--",
                    "/bin/sh", "-c", "echo $GREETING; umask; stat -c %a /etc; cat; echo x > /out/f; /probe mount; exit 7"]
        let quoted = args.map { "'" + $0.replacingOccurrences(of: "'", with: "'\\''") + "'" }.joined(separator: " ")
        func launch(_ env: [String: String]) throws -> Run {
            try runProcess("/bin/sh", ["-c", "cd '\(work)' && umask 077 && exec '\(Built.front)' sandbox exec \(quoted) < '\(input)'"], environment: env)
        }
        var oneShotEnv = service.clientEnvironment
        oneShotEnv["AUTOHARNESS_LAUNCH_SERVICE"] = "off"
        let oneShot = try launch(oneShotEnv)
        let oneShotMode = try permissions(work + "/out/f")
        try FileManager.default.removeItem(atPath: work + "/out/f")
        let audited = try auditEvents(work + "/audit.jsonl").count
        let viaService = try launch(service.clientEnvironment)
        #expect(!Self.served(oneShot) && Self.served(viaService), "\(oneShot.stderr)\n---\n\(viaService.stderr)")
        #expect(viaService.stderr.contains("sandbox exec by the launch service at \(service.socket)"), "\(viaService.stderr)")
        for r in [oneShot, viaService] {
            #expect(r.status == 7, "\(r.status) \(r.stderr)")
            // The sandbox's own directories (/etc: a mount point's parent, made by init or in the
            // template root a service shares) are 0755 whatever the caller's umask.
            #expect(r.stdout.hasPrefix("hi\n0077\n755\nfrom stdin\nRESULT mount errno EPERM"), "\(r.stdout)")
            #expect(r.stderr.contains("1 audit event: mount") && r.stderr.contains("(audit: audit.jsonl)"), "\(r.stderr)")
        }
        let servedMode = try permissions(work + "/out/f")
        #expect(oneShotMode == 0o600 && servedMode == 0o600)
        #expect(try auditEvents(work + "/audit.jsonl").count == audited + 1, "the served launch appends to the caller's relative audit file")
        let log = service.stop()
        #expect(log.contains("1 launches served, 0 declined, 0 connections refused"), "\(log)")
    }

    @Test("lines the service would not run as the front would, and callers confined otherwise, are declined and run by the front")
    func declinedLinesRunAsBefore() throws {
        try requireRoot()
        let dir = try TempDir()
        let service = try Service(in: dir)
        // A relative bind source, refused by the plan: the same error either way.
        let relative = try Self.front(in: dir.path, umask: "022", ["--ro", ".:/x", "--", "/bin/true"], environment: service.clientEnvironment)
        #expect(relative.status == 125 && relative.stderr.contains("must be an absolute path") && !Self.served(relative), "\(relative.status) \(relative.stderr)")
        // Help, asked before the command.
        let help = try Self.front(in: dir.path, umask: "022", ["--help", "--", "/bin/true"], environment: service.clientEnvironment)
        #expect(help.status == 0 && help.stdout.contains("USAGE") && !Self.served(help), "\(help.stdout) \(help.stderr)")
        // Settings that steer this program differ from the service's: the front's own launch.
        var steered = service.clientEnvironment
        steered["AUTOHARNESS_POLICY_DIR"] = dir.path
        let own = try Self.front(in: dir.path, umask: "022", ["--", "/bin/sh", "-c", "exit 3"], environment: steered)
        #expect(own.status == 3 && !Self.served(own), "\(own.stderr)")
        // Callers confined otherwise: a network namespace of their own (`ip netns exec`, a
        // unit's private network: the sandbox would egress from the service's), a mount
        // namespace of their own (`PrivateTmp=`), a capability less (a unit's bounding set),
        // no_new_privs. Each launch is the caller's own, under its confinement.
        let confinements = [["/usr/bin/unshare", "--net"], ["/usr/bin/unshare", "--mount"],
                            ["/usr/bin/setpriv", "--bounding-set", "-net_raw"], ["/usr/bin/setpriv", "--no-new-privs"]]
        for wrapper in confinements {
            let elsewhere = try runProcess(wrapper[0], Array(wrapper.dropFirst()) + [Built.front, "sandbox", "exec", "--", "/bin/sh", "-c", "exit 5"],
                                           environment: service.clientEnvironment)
            #expect(elsewhere.status == 5 && !Self.served(elsewhere), "\(wrapper): \(elsewhere.stderr)")
        }
        let served = try Self.front(in: dir.path, umask: "022", ["--", "/bin/sh", "-c", "exit 3"], environment: service.clientEnvironment)
        #expect(served.status == 3 && Self.served(served), "\(served.stderr)")
        let log = service.stop()
        #expect(log.contains("1 launches served, 7 declined"), "\(log)")
    }

    /// The front running `script` in a sandbox through `service`, its stdout in `out`.
    static func startFront(_ service: Service, script: String, out: String) throws -> Process {
        FileManager.default.createFile(atPath: out, contents: nil)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Built.front)
        p.arguments = ["sandbox", "exec", "--policy", "base", "--", "/bin/sh", "-c", script]
        p.environment = service.clientEnvironment
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = FileHandle(forWritingAtPath: out)
        p.standardError = FileHandle(forWritingAtPath: out + ".err")
        FileManager.default.createFile(atPath: out + ".err", contents: nil)
        try p.run()
        let deadline = Date().addingTimeInterval(20)
        while !((try? String(contentsOfFile: out, encoding: .utf8)) ?? "").contains("ready"), p.isRunning, Date() < deadline { usleep(20_000) }
        return p
    }

    static func gone(_ marker: String, within seconds: Double = 10) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while !hostProcesses(containing: marker).isEmpty, Date() < deadline { usleep(20_000) }
        return hostProcesses(containing: marker).isEmpty
    }

    @Test("the caller's signals reach the payload, and the caller's end, or the service's, ends the sandbox")
    func signalsAndEnds() throws {
        try requireRoot()
        let dir = try TempDir()
        let service = try Service(in: dir)
        // SIGTERM to the front is the payload's.
        let trapped = try Self.startFront(service, script: "trap 'echo term; exit 3' TERM; echo ready; while :; do sleep 0.05; done", out: dir.file("o1"))
        try #require(trapped.isRunning, "the served sandbox did not start: \((try? String(contentsOfFile: dir.file("o1.err"), encoding: .utf8)) ?? "")")
        kill(trapped.processIdentifier, SIGTERM)
        trapped.waitUntilExit()
        let said = try String(contentsOfFile: dir.file("o1"), encoding: .utf8)
        #expect(trapped.terminationStatus == 3 && said.contains("term"), "\(trapped.terminationStatus) \(said)")
        // The front killed outright: its sandbox goes with it.
        let marker = "4711.\(getpid())"
        let orphaned = try Self.startFront(service, script: "echo ready; exec sleep \(marker)", out: dir.file("o2"))
        try #require(orphaned.isRunning && !hostProcesses(containing: marker).isEmpty)
        kill(orphaned.processIdentifier, SIGKILL)
        orphaned.waitUntilExit()
        #expect(Self.gone(marker), "the sandbox outlived its caller")
        // The service stopped: launches under way are killed, the caller told, the socket gone.
        let marker2 = "4712.\(getpid())"
        let running = try Self.startFront(service, script: "echo ready; exec sleep \(marker2)", out: dir.file("o3"))
        try #require(running.isRunning && !hostProcesses(containing: marker2).isEmpty)
        let log = service.stop()
        running.waitUntilExit()
        #expect(running.terminationStatus != 0 && Self.gone(marker2))
        #expect(access(service.socket, F_OK) != 0 && errno == ENOENT, "the socket outlived the service")
        #expect(service.process.terminationStatus == 0 && log.contains("3 launches served"), "\(log)")
    }

    @Test("a sandboxed process that reaches the service's socket is refused: only the service's own user is served")
    func sandboxedClientRefused() throws {
        try requireRoot()
        let dir = try TempDir()
        let service = try Service(in: dir)
        // An operator opened the socket up; the peer check still stands.
        #expect(chmod(service.socket, 0o666) == 0)
        let host = try Self.directory(dir.file("host"), mode: 0o777)
        // A well-formed request from inside a sandbox: this build's launch code, the service's
        // settings, a launch that binds a host directory read-write and writes a marker there.
        let script = """
            import array, os, socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect("/svc/launch.sock")
            print("connected", flush=True)
            code, host, env = sys.argv[1], sys.argv[2], sys.argv[3:]
            args = ["--rw", host + ":/host", "--", "/bin/sh", "-c", "echo owned > /host/marker"]
            strings = [code, "22", str(len(args))] + args + env
            body = b"".join(x.encode() + b"\\0" for x in strings)
            msg = b"AHLS" + (\(AHS_LAUNCH_WIRE_VERSION)).to_bytes(4, "little") + len(body).to_bytes(4, "little") + body
            cwd = os.open("/", os.O_PATH)
            try:
                s.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, 1, 2, cwd]))])
                print("answer", s.recv(5), flush=True)
            except OSError as e:  # the service may hang up before the request is sent or read
                print("answer", type(e).__name__, flush=True)
            """
        let steering = service.environment.filter { $0.key.hasPrefix("AUTOHARNESS_") }.map { "\($0.key)=\($0.value)" }
        var env = service.environment
        env["AUTOHARNESS_LAUNCH_SERVICE"] = "off"
        let r = try runProcess(Built.front, ["sandbox", "exec", "--policy", "base", "--ro", dir.file("svc") + ":/svc", "--",
                                             "/usr/bin/python3", "-c", script, LaunchCode.digest, host] + steering, environment: env)
        // Connected, then the end of the connection: no answer ('D' or 'X'), whatever the timing.
        let answered = ["b''", "ConnectionResetError", "BrokenPipeError"].contains { r.stdout.contains("connected\nanswer \($0)\n") }
        #expect(answered, "the attack did not get as far as the service: \(r.stdout) \(r.stderr)")
        #expect(access(host + "/marker", F_OK) != 0, "a sandboxed process got a launch out of the service")
        let log = service.stop()
        #expect(log.contains("refused a launch from pid") && log.contains("0 launches served, 0 declined, 1 connections refused"), "\(log)")
    }

    @Test("a root caller confined by Landlock is not served: neither the front nor a request made by hand")
    func landlockedCallerNotServed() throws {
        try requireRoot()
        let dir = try TempDir()
        let service = try Service(in: dir)
        let open = try Self.directory(dir.file("open"), mode: 0o777)
        // Root restricts itself (no writes anywhere: no rule); root needs no no_new_privs for it,
        // so /proc/PID/status shows nothing of the domain. Then either the front runs, or the
        // process asks the service itself, with a mount namespace of its own as the fifth
        // descriptor (it cannot open the service's).
        let script = """
            import array, ctypes, os, socket, sys
            libc = ctypes.CDLL(None, use_errno=True)
            handled = ctypes.c_uint64((1 << 1) | (1 << 8))  # WRITE_FILE, MAKE_REG
            fd = libc.syscall(444, ctypes.byref(handled), 8, 0)
            if fd < 0 or libc.syscall(446, fd, 0) != 0:
                sys.exit("landlock: errno %d" % ctypes.get_errno())
            try:
                open(sys.argv[2] + "/direct", "w")
                sys.exit("landlock did not hold")
            except PermissionError:
                pass
            if sys.argv[1] == "front":
                os.execv(sys.argv[3], sys.argv[3:])
            sock, code, host = sys.argv[3], sys.argv[4], sys.argv[2]
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(sock)
            args = ["--rw", host + ":/p", "--", "/bin/sh", "-c", "echo x > /p/escaped"]
            env = ["%s=%s" % kv for kv in os.environ.items()]
            strings = [code, "22", str(len(args))] + args + env
            body = b"".join(x.encode() + b"\\0" for x in strings)
            msg = b"AHLS" + (\(AHS_LAUNCH_WIRE_VERSION)).to_bytes(4, "little") + len(body).to_bytes(4, "little") + body
            fds = [0, 1, 2, os.open(".", os.O_PATH), os.open("/proc/self/ns/mnt", os.O_RDONLY)]
            s.sendmsg([msg], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
            print("answer", s.recv(5), flush=True)
            """
        let front = try runProcess("/usr/bin/python3", ["-c", script, "front", open, Built.front, "sandbox", "exec", "--policy", "base",
                                                        "--rw", open + ":/p", "--", "/bin/sh", "-c", "echo x > /p/escaped"],
                                   environment: service.clientEnvironment)
        #expect(!front.stderr.contains("landlock"), "the confinement was not set up: \(front.stderr)")
        #expect(!Self.served(front), "\(front.stderr)")
        let byHand = try runProcess("/usr/bin/python3", ["-c", script, "hand", open, service.socket, LaunchCode.digest],
                                    environment: service.environment)
        #expect(byHand.stdout == "answer b'D\\x00\\x00\\x00\\x00'\n", "\(byHand.stdout) \(byHand.stderr)")
        #expect(access(open + "/escaped", F_OK) != 0, "a Landlock-confined caller wrote through the service")
        let log = service.stop()
        // Both declined: the front could not open the service's directory and sent no request.
        #expect(log.contains("0 launches served, 2 declined"), "\(log)")
    }

    @Test("a caller whose cgroups filter it (a BPF program, a device list) is not served; one in other cgroups that filter nothing more is")
    func cgroupFilteredCallerNotServed() throws {
        try requireRoot()
        let dir = try TempDir()
        let service = try Service(in: dir)
        // Cgroups of the test's own, under its own, one per case: a v2 one, a v1 devices one.
        let own = CgroupHost.memberships()
        let mounts = CgroupHost.mounts()
        let v2 = try #require(own[""].flatMap { CgroupHost.directory(of: $0, in: mounts) }, "no cgroup v2 mount shows this process's cgroup")
        let v1 = try #require(own["devices"].flatMap { CgroupHost.directory(of: $0, controller: "devices", in: mounts) },
                              "no v1 devices hierarchy shows this process's cgroup")
        // The caller moves itself into the case's cgroups, sets up its filter there, and
        // runs the front: a sandbox that makes an inet socket and reads /dev/urandom.
        //   bpf:     a program that refuses every inet socket (BPF_PROG_TYPE_CGROUP_SOCK at
        //            BPF_CGROUP_INET_SOCK_CREATE, "r0 = 0; exit"), what systemd's
        //            RestrictAddressFamilies-like unit filters are made of;
        //   devices: /dev/urandom (c 1:9) denied (any v1 devices cgroup but the service's or
        //            the root is declined: what one denies is not shown while it allows the
        //            rest by default, so it cannot be compared);
        //   plain:   another v2 cgroup with the same programs in effect as the service's.
        // Only the devices case leaves the service's (root) devices cgroup.
        let script = """
            import ctypes, os, struct, sys
            libc = ctypes.CDLL(None, use_errno=True)
            case, v2, v1 = sys.argv[1:4]
            if case == "bpf":
                insns = ctypes.create_string_buffer(struct.pack("<BBhiBBhi", 0xb7, 0, 0, 0, 0x95, 0, 0, 0), 16)
                lic = ctypes.create_string_buffer(b"GPL")
                attr = ctypes.create_string_buffer(struct.pack("<IIQQIIQII16sII", 9, 2, ctypes.addressof(insns), ctypes.addressof(lic),
                                                               0, 0, 0, 0, 0, b"", 0, 2), 144)
                prog = libc.syscall(321, 5, attr, 144)
                if prog < 0:
                    sys.exit("BPF_PROG_LOAD: errno %d" % ctypes.get_errno())
                cg = os.open(v2, os.O_RDONLY | os.O_DIRECTORY)
                attach = ctypes.create_string_buffer(struct.pack("<IIII", cg, prog, 2, 2), 144)
                if libc.syscall(321, 8, attach, 144) != 0:
                    sys.exit("BPF_PROG_ATTACH: errno %d" % ctypes.get_errno())
            elif case == "devices":
                open(v1 + "/devices.deny", "w").write("c 1:9 rwm")
            open(v2 + "/cgroup.procs", "w").write(str(os.getpid()))
            if case == "devices":
                open(v1 + "/cgroup.procs", "w").write(str(os.getpid()))
            os.execv(sys.argv[4], sys.argv[4:])
            """
        let payload = """
            import socket
            try:
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM); print("socket made")
            except OSError as e:
                print("socket errno", e.errno)
            try:
                open("/dev/urandom", "rb").read(1); print("urandom read")
            except OSError as e:
                print("urandom errno", e.errno)
            """
        var made: [String] = []
        defer {
            // Emptied when the front has ended; a program attached goes with its cgroup.
            for path in made.reversed() {
                var tries = 0
                while rmdir(path) != 0, errno == EBUSY, tries < 200 { usleep(10_000); tries += 1 }
            }
        }
        var outputs: [String: Run] = [:]
        for name in ["bpf", "devices", "plain"] {
            let cg = (v2 + "/ah-test-filters-\(getpid())-" + name, v1 + "/ah-test-filters-\(getpid())-" + name)
            for path in [cg.0, cg.1] {
                try #require(mkdir(path, 0o755) == 0, "mkdir \(path): \(String(cString: strerror(errno)))")
                made.append(path)
            }
            outputs[name] = try runProcess("/usr/bin/python3", ["-c", script, name, cg.0, cg.1, Built.front, "sandbox", "exec", "--policy", "base",
                                                                "--", "/usr/bin/python3", "-c", payload], environment: service.clientEnvironment)
        }
        // Each filter holds in the caller's own launch (EPERM), which is what the caller got.
        let bpf = try #require(outputs["bpf"]), devices = try #require(outputs["devices"]), plain = try #require(outputs["plain"])
        #expect(bpf.stdout == "socket errno 1\nurandom read\n" && !Self.served(bpf), "\(bpf.stdout) \(bpf.stderr)")
        #expect(devices.stdout == "socket made\nurandom errno 1\n" && !Self.served(devices), "\(devices.stdout) \(devices.stderr)")
        #expect(plain.stdout == "socket made\nurandom read\n" && Self.served(plain), "\(plain.stdout) \(plain.stderr)")
        let log = service.stop()
        #expect(log.contains("1 launches served, 2 declined"), "\(log)")
    }

    @Test("the front gives nothing to a service run by another user, and launches itself")
    func impostorServiceGetsNothing() throws {
        try requireRoot()
        let dir = try TempDir()
        let fake = try Self.directory(dir.file("fake"), mode: 0o777)
        let record = dir.file("record")
        // nobody listens where the front looks, and writes down whatever reaches it.
        let script = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(sys.argv[1]); s.listen(1)
            open(sys.argv[3], "w").close()
            c, _ = s.accept()
            data, anc, _, _ = c.recvmsg(1 << 16, socket.CMSG_SPACE(64))
            open(sys.argv[2], "w").write(f"bytes={len(data)} descriptors={len(anc)}\\n")
            """
        chmod(dir.path, 0o777)
        let listener = Process()
        listener.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
        // Listening, not only bound: a connect between bind and listen is refused, and the
        // front would take the socket for a service that is not there (seen once under load).
        let listening = fake + "/listening"
        listener.arguments = ["--reuid", "65534", "--regid", "65534", "--clear-groups", "/usr/bin/python3", "-c", script, fake + "/launch.sock", dir.file("record"),
                              listening]
        try listener.run()
        defer { if listener.isRunning { kill(listener.processIdentifier, SIGKILL) } }
        let deadline = Date().addingTimeInterval(10)
        while access(listening, F_OK) != 0, Date() < deadline { usleep(20_000) }
        var env = ProcessInfo.processInfo.environment
        env["AUTOHARNESS_CACHE_DIR"] = try Self.privateCache(in: dir)
        env["AUTOHARNESS_LAUNCH_SERVICE"] = fake + "/launch.sock"
        let r = try runProcess(Built.front, ["sandbox", "exec", "--policy", "base", "--", "/bin/sh", "-c", "echo local; exit 4"], environment: env)
        #expect(r.status == 4 && r.stdout == "local\n", "\(r.status) \(r.stdout) \(r.stderr)")
        #expect(r.stderr.contains("not using the launch service at \(fake)/launch.sock: it runs as uid 65534"), "\(r.stderr)")
        // The impostor ends once the front's connection closes; never wait on it for ever (its
        // signals are blocked by Foundation's launch, so only SIGKILL ends it).
        let end = Date().addingTimeInterval(20)
        while listener.isRunning && Date() < end { usleep(50_000) }
        if listener.isRunning {
            Issue.record("the impostor still holds a connection from the front 20 s after it exited")
            kill(listener.processIdentifier, SIGKILL)
        }
        listener.waitUntilExit()
        #expect((try? String(contentsOfFile: record, encoding: .utf8)) == "bytes=0 descriptors=0\n", "the impostor received something")
    }

    @Test("the service refuses a socket directory others may write, or one under such a directory, and a socket another service holds or answers at")
    func unsafeOrTakenSocketRefused() throws {
        try requireRoot()
        let dir = try TempDir()
        let open = try Self.directory(dir.file("open"), mode: 0o1777)
        let refused = try autoharness(["sandbox", "serve", "--socket", open + "/launch.sock"])
        #expect(refused.status != 0 && refused.stderr.contains("another user could replace the socket"), "\(refused.status) \(refused.stderr)")
        // A safe directory under one anyone may write (not sticky): renamed away under the socket.
        let under = try Self.directory(try Self.directory(dir.file("writable"), mode: 0o777) + "/svc", mode: 0o755)
        let above = try autoharness(["sandbox", "serve", "--socket", under + "/launch.sock"])
        #expect(above.status != 0 && above.stderr.contains("\(dir.file("writable")): owned by uid 0, mode 777"), "\(above.status) \(above.stderr)")
        let service = try Service(in: dir)
        let second = try autoharness(["sandbox", "serve", "--socket", service.socket], environment: service.environment)
        #expect(second.status != 0 && second.stderr.contains("another launch service is starting or serving there (it holds \(service.socket).lock)"),
                "\(second.status) \(second.stderr)")
        #expect(service.process.isRunning)
        // One that holds no lock (a service of systemd's, at its socket) is asked: it answers.
        let activated = try LaunchServiceTests.directory(dir.file("activated"), mode: 0o755) + "/launch.sock"
        let fd = try LaunchServiceActivationTests.listen(at: activated)
        defer { close(fd) }
        let third = try autoharness(["sandbox", "serve", "--socket", activated], environment: service.environment)
        #expect(third.status != 0 && third.stderr.contains("\(activated): a launch service (pid \(getpid())) already answers there"), "\(third.status) \(third.stderr)")
        #expect(LaunchServiceActivationTests.listening(fd), "the probe changed the socket")
    }
}
