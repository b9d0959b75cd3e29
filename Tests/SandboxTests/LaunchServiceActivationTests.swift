import CSystemCalls
import Foundation
import Testing
import TestSupport

/// `autoharness sandbox serve` started by systemd with its socket passed down (socket
/// activation, templates/systemd), and the front's side of a service that ends early. These
/// fail if a passed socket is served without the checks a socket the service makes gets, if
/// clients of an activated service are not served (SO_PEERCRED names systemd, not the service,
/// unless the service listens again), if a stopping service shuts systemd's socket down, or if
/// the front reads an early end of the connection the wrong way (nothing ran, or the sandbox
/// ended with the service).
@Suite("the launch service under socket activation")
struct LaunchServiceActivationTests {
    /// A service started as systemd starts one: `fd` (a listening socket this process made)
    /// as descriptor 3, LISTEN_PID its pid and LISTEN_FDS=1.
    final class Activated {
        let pid: pid_t
        let log: String
        var status: Int32?

        init(socket fd: Int32, arguments: [String], environment: [String: String], log: String) throws {
            self.log = log
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            posix_spawn_file_actions_addopen(&actions, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0o600)
            posix_spawn_file_actions_adddup2(&actions, 1, 2)
            posix_spawn_file_actions_adddup2(&actions, fd, 3)
            // The shell's pid is the service's after exec: LISTEN_PID names it, as systemd's does.
            let script = "LISTEN_PID=$$ LISTEN_FDS=1 exec \"$0\" \"$@\""
            let argv = (["/bin/sh", "-c", script, Built.autoharness] + arguments).map { strdup($0) } + [nil]
            let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
            defer { for a in argv + envp { free(a) } }
            var pid: pid_t = 0
            let e = posix_spawn(&pid, "/bin/sh", &actions, nil, argv, envp)
            try #require(e == 0, "posix_spawn: \(String(cString: strerror(e)))")
            self.pid = pid
            let deadline = Date().addingTimeInterval(20)
            while !output.contains("serving sandbox exec at"), exited(waiting: false) == nil, Date() < deadline { usleep(20_000) }
        }

        var output: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

        /// The exit status once the service has ended (reaped here), else nil.
        @discardableResult
        func exited(waiting: Bool) -> Int32? {
            if status == nil {
                var st: Int32 = 0
                if waitpid(pid, &st, waiting ? 0 : WNOHANG) == pid { status = (st & 0x7f) == 0 ? (st >> 8) & 0xff : 128 + (st & 0x7f) }
            }
            return status
        }

        /// Waits up to `seconds` for the service to end by itself.
        func ended(within seconds: Double) -> Int32? {
            let deadline = Date().addingTimeInterval(seconds)
            while exited(waiting: false) == nil, Date() < deadline { usleep(20_000) }
            return exited(waiting: false)
        }

        func stop() {
            if exited(waiting: false) == nil {
                kill(pid, SIGTERM)
                if ended(within: 30) == nil {
                    Issue.record("the service did not stop within 30 s of SIGTERM: \(output)")
                    kill(pid, SIGKILL)
                    exited(waiting: true)
                }
            }
        }

        deinit { stop() }
    }

    /// The environment of a service of the test's own: a private policy cache, no service
    /// address, no timing marks.
    static func serviceEnvironment(_ dir: TempDir) throws -> [String: String] {
        var env = ProcessInfo.processInfo.environment
        env["AUTOHARNESS_CACHE_DIR"] = try LaunchServiceTests.privateCache(in: dir)
        env["AUTOHARNESS_LAUNCH_SERVICE"] = nil
        env["AUTOHARNESS_TIMING"] = nil
        return env
    }

    /// `front sandbox exec -- /bin/sh -c SCRIPT` against the service at `socket`.
    static func front(_ script: String, socket: String, environment: [String: String]) throws -> Run {
        var env = environment
        env["AUTOHARNESS_LAUNCH_SERVICE"] = socket
        env["AUTOHARNESS_TIMING"] = "1"
        return try runProcess(Built.front, ["sandbox", "exec", "--", "/bin/sh", "-c", script], environment: env)
    }

    /// A Unix stream socket bound at `path` itself (as systemd binds one), mode 0600, listening.
    static func listen(at path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        try #require(fd >= 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        try #require(bytes.count < MemoryLayout.size(ofValue: address.sun_path))
        withUnsafeMutableBytes(of: &address.sun_path) { for (i, b) in bytes.enumerated() { $0[i] = b } }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        try #require(bound == 0 && chmod(path, 0o600) == 0 && Glibc.listen(fd, 16) == 0, "\(path): \(String(cString: strerror(errno)))")
        return fd
    }

    static func listening(_ fd: Int32) -> Bool {
        var value: Int32 = 0
        var len = socklen_t(MemoryLayout<Int32>.size)
        return getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &value, &len) == 0 && value == 1
    }

    @Test("a socket passed down is served, is left listening when the service stops, and serves the next instance; --idle-exit ends a service")
    func passedSocketServed() throws {
        try requireRoot()
        let dir = try TempDir()
        let env = try Self.serviceEnvironment(dir)
        let run = try LaunchServiceTests.directory(dir.file("run"), mode: 0o755)
        let path = run + "/launch.sock"
        // Made and listened on by this process, as systemd does: until the service listens
        // again, a client's SO_PEERCRED names this process.
        let fd = try Self.listen(at: path)
        defer { close(fd) }

        let first = try Activated(socket: fd, arguments: ["sandbox", "serve", "--idle-exit", "10m"], environment: env, log: dir.file("first.log"))
        try #require(first.output.contains("serving sandbox exec at \(path) (a socket passed down by systemd)"), "\(first.output)")
        let served = try Self.front("echo served; exit 7", socket: path, environment: env)
        #expect(served.status == 7 && served.stdout == "served\n", "\(served.status) \(served.stdout) \(served.stderr)")
        #expect(LaunchServiceTests.served(served), "the launch was not served: \(served.stderr)\n\(first.output)")
        first.stop()
        #expect(first.status == 0 && first.output.contains("1 launches served, 0 declined"), "\(first.output)")
        // systemd's socket outlives the service: still there, still listening.
        var st = stat()
        #expect(lstat(path, &st) == 0 && st.st_mode & S_IFMT == S_IFSOCK, "the service removed systemd's socket")
        #expect(Self.listening(fd), "the service shut systemd's socket down")
        // With no service answering, the front launches itself (the listener named by the
        // connection is gone), and does not wait for one.
        let alone = try Self.front("echo alone", socket: path, environment: env)
        #expect(alone.status == 0 && alone.stdout == "alone\n" && !LaunchServiceTests.served(alone), "\(alone.status) \(alone.stdout) \(alone.stderr)")

        // The next instance, on the same socket, serves; then ends after a second without a launch.
        let second = try Activated(socket: fd, arguments: ["sandbox", "serve", "--idle-exit", "1", "--socket", path],
                                   environment: env, log: dir.file("second.log"))
        try #require(second.output.contains("(a socket passed down by systemd)"), "\(second.output)")
        let again = try Self.front("echo again", socket: path, environment: env)
        #expect(again.status == 0 && again.stdout == "again\n" && LaunchServiceTests.served(again), "\(again.status) \(again.stdout) \(again.stderr)")
        #expect(second.ended(within: 15) == 0, "the idle service did not end by itself: \(second.output)")
        #expect(second.output.contains("(idle for 1s): 1 launches served"), "\(second.output)")
        #expect(Self.listening(fd))
    }

    /// `autoharness sandbox serve ARGS` exec'd by python in place after it made a socket of
    /// `kind` at `path` and put it at descriptor 3 (LISTEN_PID is python's pid, kept by exec).
    static func serveOnPassed(_ kind: String, path: String, mode: Int = 0o600, arguments: [String] = [], listenPID: String? = nil,
                              environment: [String: String]) throws -> Run {
        let script = """
            import os, socket, sys
            kind, path, mode, pid = sys.argv[1], sys.argv[2], int(sys.argv[3], 8), sys.argv[4]
            count = "1"
            if kind == "tcp":
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.bind(("127.0.0.1", 0))
                s.listen()
            elif kind == "abstract":
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.bind("\\0autoharness-test-%d" % os.getpid())
                s.listen()
            else:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM if kind == "datagram" else socket.SOCK_STREAM)
                if kind == "long":
                    # 108 bytes and no NUL: python's bind refuses that, the kernel does not.
                    import ctypes
                    addr = socket.AF_UNIX.to_bytes(2, "little") + path.encode()
                    if ctypes.CDLL(None, use_errno=True).bind(s.fileno(), addr, len(addr)) != 0:
                        sys.exit("bind: errno %d" % ctypes.get_errno())
                else:
                    s.bind(path)
                os.chmod(path, mode)
                if kind in ("stream", "two", "renamed", "replaced", "long"):
                    s.listen()
                if kind in ("renamed", "replaced"):
                    # The socket's file moved away (or removed), and a decoy, root's and 0600,
                    # made at its old path.
                    if kind == "renamed":
                        os.rename(path, path + ".moved")
                    else:
                        os.unlink(path)
                    decoy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    decoy.bind(path)
                    os.chmod(path, 0o600)
            # dup2 onto itself (the socket may be descriptor 3 already) keeps close-on-exec.
            if s.fileno() != 3:
                os.dup2(s.fileno(), 3)
            os.set_inheritable(3, True)
            if kind == "two":
                t = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                t.bind(path + "2")
                t.listen()
                if t.fileno() != 4:
                    os.dup2(t.fileno(), 4)
                os.set_inheritable(4, True)
                count = "2"
            os.environ["LISTEN_PID"] = str(os.getpid()) if pid == "self" else pid
            os.environ["LISTEN_FDS"] = count
            os.execv(sys.argv[5], sys.argv[5:])
            """
        return try runProcess("/usr/bin/python3", ["-c", script, kind, path, String(mode, radix: 8), listenPID ?? "self",
                                                   Built.autoharness, "sandbox", "serve"] + arguments, environment: environment)
    }

    @Test("a socket passed down must be a listening Unix stream socket bound to a path, writable by root alone, in a safe directory, and the one --socket names")
    func passedSocketChecked() throws {
        try requireRoot()
        let dir = try TempDir()
        let env = try Self.serviceEnvironment(dir)
        let run = try LaunchServiceTests.directory(dir.file("run"), mode: 0o755)
        var n = 0
        func next() -> String {
            n += 1
            return run + "/s\(n).sock"
        }
        let cases: [(kind: String, mode: Int, expected: String)] = [
            ("stream", 0o666, "writable by root alone"),
            ("stream", 0o620, "writable by root alone"),
            ("tcp", 0o600, "not a Unix socket"),
            ("abstract", 0o600, "not bound to a path"),
            ("datagram", 0o600, "not a stream socket"),
            ("bound", 0o600, "not listening"),
            ("two", 0o600, "LISTEN_FDS=2"),
            ("renamed", 0o600, "not the file the socket passed down is bound to"),
            ("replaced", 0o600, "not the file the socket passed down is bound to"),
        ]
        for c in cases {
            let r = try Self.serveOnPassed(c.kind, path: next(), mode: c.mode, environment: env)
            #expect(r.status != 0 && r.stderr.contains(c.expected), "\(c.kind) \(String(c.mode, radix: 8)): \(r.status) \(r.stderr)")
            #expect(!r.stderr.contains("serving sandbox exec"), "\(c.kind): served on \(r.stderr)")
        }
        // A refused socket is left as systemd made it (the file description is shared): still
        // blocking, its listener's credentials still this process's.
        let refusedPath = next()
        let held = try Self.listen(at: refusedPath)
        defer { close(held) }
        #expect(chmod(refusedPath, 0o666) == 0)
        let refused = try Activated(socket: held, arguments: ["sandbox", "serve"], environment: env, log: dir.file("refused.log"))
        #expect(refused.ended(within: 20) != 0 && refused.output.contains("writable by root alone"), "\(refused.output)")
        #expect(fcntl(held, F_GETFL) & O_NONBLOCK == 0, "a refused socket was changed")
        // A path that fills sun_path (108 bytes, no NUL): refused, not read past its end.
        let long = run + "/" + String(repeating: "l", count: 108 - run.utf8.count - 1)
        let filled = try Self.serveOnPassed("long", path: long, environment: env)
        #expect(filled.status != 0 && filled.stderr.contains("File name too long"), "\(filled.status) \(filled.stderr)")
        // A socket in a directory others may write: it could be replaced under the service.
        let open = try LaunchServiceTests.directory(dir.file("open"), mode: 0o777)
        let unsafe = try Self.serveOnPassed("stream", path: open + "/launch.sock", environment: env)
        #expect(unsafe.status != 0 && unsafe.stderr.contains("another user could replace the socket"), "\(unsafe.stderr)")
        // Bound elsewhere than --socket says.
        let other = try Self.serveOnPassed("stream", path: next(), arguments: ["--socket", run + "/elsewhere.sock"], environment: env)
        #expect(other.status != 0 && other.stderr.contains("not to --socket \(run)/elsewhere.sock"), "\(other.stderr)")
        // LISTEN_PID naming another process: nothing was passed to this one; the service makes
        // its own socket (and is stopped by its idle limit).
        let own = run + "/own.sock"
        let notOurs = try Self.serveOnPassed("stream", path: next(), arguments: ["--socket", own, "--idle-exit", "0.5"],
                                             listenPID: "1", environment: env)
        #expect(notOurs.status == 0 && notOurs.stderr.contains("serving sandbox exec at \(own) (pid")
                && notOurs.stderr.contains("(idle for 0.5s)"), "\(notOurs.status) \(notOurs.stderr)")
        #expect(access(own, F_OK) != 0, "the service left its own socket behind")
    }

    /// A root listener at `path` that takes one request and then does `then`: "close" (ends
    /// the connection before any answer) or "start" (says the launch started, then ends it).
    static func fakeService(at path: String, then: String) throws -> Process {
        let script = """
            import os, socket, sys
            path, then = sys.argv[1], sys.argv[2]
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind(path)
            os.chmod(path, 0o600)
            s.listen()
            s.settimeout(30)
            print("listening", flush=True)
            c, _ = s.accept()
            c.settimeout(30)
            header, fds, _, _ = socket.recv_fds(c, 12, 8)
            body = int.from_bytes(header[8:12], "little")
            while body > 0:
                body -= len(c.recv(body))
            if then == "start":
                c.sendall(b"S")
            c.close()
            """
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        p.arguments = ["-c", script, path, then]
        let out = Pipe()
        p.standardOutput = out
        // Not the test runner's: a listener left waiting must not hold its output open.
        p.standardError = FileHandle.nullDevice
        try p.run()
        var said = Data()
        while !said.contains(UInt8(ascii: "\n")) {
            let more = out.fileHandleForReading.availableData
            if more.isEmpty { break }
            said += more
        }
        if String(decoding: said, as: UTF8.self) != "listening\n" { p.terminate() }
        try #require(String(decoding: said, as: UTF8.self) == "listening\n", "the fake service did not start")
        return p
    }

    @Test("a connection the service ends before the launch starts runs the launch in the front; one it ends after, ends the front with 125")
    func earlyEndsReadRightly() throws {
        try requireRoot()
        let dir = try TempDir()
        let env = try Self.serviceEnvironment(dir)
        let run = try LaunchServiceTests.directory(dir.file("run"), mode: 0o755)
        let closing = try Self.fakeService(at: run + "/closes.sock", then: "close")
        defer { if closing.isRunning { closing.terminate() } }
        let here = try Self.front("echo here; exit 5", socket: run + "/closes.sock", environment: env)
        closing.waitUntilExit()
        #expect(here.status == 5 && here.stdout == "here\n", "\(here.status) \(here.stdout) \(here.stderr)")
        #expect(here.stderr.contains("closed the connection before launching; launching here"), "\(here.stderr)")
        let starting = try Self.fakeService(at: run + "/starts.sock", then: "start")
        defer { if starting.isRunning { starting.terminate() } }
        let lost = try Self.front("echo never", socket: run + "/starts.sock", environment: env)
        starting.waitUntilExit()
        #expect(lost.status == 125 && lost.stdout.isEmpty, "\(lost.status) \(lost.stdout) \(lost.stderr)")
        #expect(lost.stderr.contains("ended before the sandbox did"), "\(lost.stderr)")
    }

    @Test("the systemd units scripts/install writes pass systemd-analyze verify, listen where the front looks, and run the service as tested here")
    func unitsVerified() throws {
        let dir = try TempDir()
        try #require(FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze"),
                     "systemd-analyze is missing: scripts/bootstrap installs systemd")
        let prefix = dir.file("prefix")
        try FileManager.default.createDirectory(atPath: prefix + "/libexec/autoharness", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: prefix + "/libexec/autoharness/autoharness", withDestinationPath: Built.autoharness)
        let units = dir.file("units")
        let r = try runProcess("/bin/bash", [Built.packageRoot + "/scripts/install", "--units", units, prefix])
        #expect(r.status == 0, "\(r.stdout) \(r.stderr)")
        let socket = try String(contentsOfFile: units + "/autoharness-launch.socket", encoding: .utf8)
        let service = try String(contentsOfFile: units + "/autoharness-launch.service", encoding: .utf8)
        let lines = { (text: String) in Set(text.split(separator: "\n").map(String.init).filter { !$0.hasPrefix("#") }) }
        #expect(lines(socket).isSuperset(of: ["ListenStream=\(AHS_LAUNCH_SERVICE_SOCKET)", "SocketMode=0600", "SocketUser=root", "DirectoryMode=0755"]), "\(socket)")
        // The arguments passedSocketServed runs the service with.
        #expect(lines(service).contains("ExecStart=\(prefix)/libexec/autoharness/autoharness sandbox serve --idle-exit 10m"), "\(service)")
        #expect(lines(service).contains("Delegate=yes") && lines(service).contains("KillMode=mixed"), "\(service)")
        // A unit that systemd would read with a setting lost (a warning to systemd, exit
        // status 0) fails the install: the script and templates copied, one key misspelt.
        let tree = dir.file("tree")
        for sub in ["scripts", "templates/systemd"] {
            try FileManager.default.createDirectory(atPath: tree + "/" + sub, withIntermediateDirectories: true)
        }
        try copyExecutable(Built.packageRoot + "/scripts/install", to: tree + "/scripts/install")
        let template = Built.packageRoot + "/templates/systemd/"
        try FileManager.default.copyItem(atPath: template + "autoharness-launch.service", toPath: tree + "/templates/systemd/autoharness-launch.service")
        try String(contentsOfFile: template + "autoharness-launch.socket", encoding: .utf8).replacingOccurrences(of: "SocketMode=", with: "SocketMod=")
            .write(toFile: tree + "/templates/systemd/autoharness-launch.socket", atomically: true, encoding: .utf8)
        let broken = try runProcess("/bin/bash", [tree + "/scripts/install", "--units", dir.file("broken"), prefix])
        #expect(broken.status != 0 && broken.stderr.contains("Unknown key 'SocketMod'"), "\(broken.status) \(broken.stdout) \(broken.stderr)")
    }
}
