import Foundation
@testable import Sandbox
import SandboxPolicy
import Testing
import TestSupport

/// What a payload leaves running when it exits (`SandboxRunner.run(_:options:keepingSurvivors:)`):
/// kept in its own sandbox while the caller works, reachable only by a sandbox given its
/// network namespace, and killed when the caller is done.
@Suite("Processes a payload leaves running", .serialized)
struct SurvivorTests {
    /// `python3 script` (written into `out`) with /out read-write and `lo` up.
    static func plan(_ script: String, out: String, timeout: Double = 30) throws -> LaunchPlan {
        let name = "script-\(UUID().uuidString.prefix(8)).py"
        try script.write(toFile: out + "/" + name, atomically: false, encoding: .utf8)
        var limits = Limits()
        limits.timeoutSeconds = timeout
        var policy = Policy(name: "survivors", mounts: minimalMounts + [MountSpec(kind: .readWrite(source: out), destination: "/out")],
                            limits: limits)
        policy.network = NetworkSpec(mode: .loopback)
        return try PlanCompiler.compile(policy: policy, command: ["/usr/bin/python3", "/out/" + name], hostEnvironment: [:])
    }

    /// A payload that starts a server on 127.0.0.1:`port` in a process of its own (double fork,
    /// new session, as a daemon does), waits until it listens, and exits 3. The server answers
    /// every connection with `reply`.
    static func serverPayload(port: Int, reply: String) -> String {
        """
        import os, socket, sys, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(("127.0.0.1", \(port))); s.listen(8)
                open("/out/listening", "w").write("yes")
                while True:
                    c, _ = s.accept(); c.sendall(b"\(reply)"); c.close()
            os._exit(0)
        while not os.path.exists("/out/listening"): time.sleep(0.02)
        sys.exit(3)
        """
    }

    /// A client: connects to 127.0.0.1:`port` and writes what it read (or the error's errno) to /out/`file`.
    static func clientPayload(port: Int, file: String) -> String {
        """
        import socket
        try:
            s = socket.create_connection(("127.0.0.1", \(port)), timeout=5); r = s.recv(100).decode()
        except OSError as e:
            r = f"errno {e.errno}"
        open("/out/\(file)", "w").write(r)
        """
    }

    /// Host processes whose command line holds `marker`.
    static func processes(holding marker: String) -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
        return names.filter { Int($0) != nil }.filter { pid in
            (procText("/proc/\(pid)/cmdline") ?? "").contains(marker)
        }
    }

    @Test("a server the payload left running is kept: a sandbox given its network namespace reaches it, one without is refused; it dies when the caller is done; the result is the payload's")
    func keptAndReachable() throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        // The script's file name is unique: every process of it names it on its command line.
        let plan = try Self.plan(Self.serverPayload(port: 8765, reply: "hello-from-survivor"), out: out.path)
        var called = 0
        var programs: [String] = []
        var aliveDuring: [String] = []
        let result = try SandboxRunner.run(plan, options: RunOptions()) { survivors in
            called += 1
            programs = survivors.programs
            aliveDuring = Self.processes(holding: plan.command.last!)
            var options = RunOptions()
            options.networkNamespace = survivors.networkNamespace
            let joined = try? SandboxRunner.run(try! Self.plan(Self.clientPayload(port: 8765, file: "joined"), out: out.path), options: options)
            #expect(joined?.termination == .exited(0))
            // Its own namespace: the survivor's loopback is not there.
            let apart = try? SandboxRunner.run(try! Self.plan(Self.clientPayload(port: 8765, file: "apart"), out: out.path), options: RunOptions())
            #expect(apart?.termination == .exited(0))
        }
        #expect(result.termination == .exited(3), "\(result.termination)")
        #expect(called == 1)
        #expect(programs.contains("python3"), "\(programs)")
        #expect(!aliveDuring.isEmpty, "the server was not running while the caller worked")
        #expect(out.read("joined") == "hello-from-survivor")
        #expect(out.read("apart") == "errno \(ECONNREFUSED)")
        // Gone once run returned: nothing on the host holds the script's name any more.
        #expect(Self.processes(holding: plan.command.last!).isEmpty)
    }

    @Test("a payload that leaves nothing running ends as with run(): the caller's closure is not called")
    func nothingLeft() throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        let plan = try Self.plan("import subprocess, sys; subprocess.run(['true']); sys.exit(5)", out: out.path)
        var called = false
        let result = try SandboxRunner.run(plan, options: RunOptions()) { _ in called = true }
        #expect(result.termination == .exited(5))
        #expect(!called)
    }

    @Test("the timeout is the payload's: a survivor outlives it while the caller works; a payload that overruns still times out and nothing is kept")
    func timeoutIsThePayloads() throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        let plan = try Self.plan(Self.serverPayload(port: 8766, reply: "still-here"), out: out.path, timeout: 1)
        let result = try SandboxRunner.run(plan, options: RunOptions()) { survivors in
            usleep(1_800_000)  // past the sandbox's timeout
            var options = RunOptions()
            options.networkNamespace = survivors.networkNamespace
            _ = try? SandboxRunner.run(try! Self.plan(Self.clientPayload(port: 8766, file: "late"), out: out.path), options: options)
        }
        #expect(result.termination == .exited(3))
        #expect(out.read("late") == "still-here")

        var called = false
        let slow = try SandboxRunner.run(try Self.plan("import time; time.sleep(20)", out: out.path, timeout: 1),
                                         options: RunOptions()) { _ in called = true }
        #expect(slow.termination == .timedOut)
        #expect(!called)
    }
    @Test("the port relay: a sandbox in a namespace of its own reaches the survivors' listening ports (loopback, wildcard, IPv6, and one that starts listening later) and nothing else of theirs (an abstract socket)")
    func relay() throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        let server = """
            import os, socket, sys, time, threading
            def serve(s, reply):
                while True:
                    c, _ = s.accept(); c.sendall(reply); c.close()
            def tcp(family, addr, port, reply):
                s = socket.socket(family); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind((addr, port)); s.listen(8); threading.Thread(target=serve, args=(s, reply)).start()
            if os.fork() == 0:
                os.setsid()
                tcp(socket.AF_INET, "127.0.0.1", 8771, b"loopback")
                tcp(socket.AF_INET6, "::", 8772, b"wildcard")
                tcp(socket.AF_INET, "0.0.0.0", 8774, b"v4-wildcard")
                u = socket.socket(socket.AF_UNIX); u.bind("\\0survivor"); u.listen(8)
                threading.Thread(target=serve, args=(u, b"abstract")).start()
                open("/out/listening", "w").write("yes")
                time.sleep(0.5)
                tcp(socket.AF_INET, "127.0.0.1", 8773, b"late")
                while True: time.sleep(10)
            while not os.path.exists("/out/listening"): time.sleep(0.02)
            """
        let client = """
            import socket, time
            def ask(family, address, tries=1):
                for _ in range(tries):
                    try:
                        s = socket.socket(family); s.settimeout(5); s.connect(address); return s.recv(100).decode()
                    except OSError as e:
                        err = f"errno {e.errno}"; time.sleep(0.1)
                return err
            r = [ask(socket.AF_INET, ("127.0.0.1", 8771)), ask(socket.AF_INET6, ("::1", 8772)), ask(socket.AF_INET, ("127.0.0.1", 8772)),
                 ask(socket.AF_UNIX, "\\0survivor"), ask(socket.AF_INET, ("127.0.0.1", 8773), tries=30),
                 ask(socket.AF_INET, ("127.0.0.1", 8774)), ask(socket.AF_INET6, ("::1", 8774))]
            open("/out/relayed", "w").write(" ".join(r))
            """
        var reached: [(String, Int)] = []
        let result = try SandboxRunner.run(try Self.plan(server, out: out.path), options: RunOptions()) { survivors in
            guard let namespace = try? NetworkNamespaces.make() else { return }
            defer { close(namespace) }
            guard let relay = try? PortRelay(from: survivors.networkNamespace, into: namespace) else { return }
            var options = RunOptions()
            options.networkNamespace = namespace
            _ = try? SandboxRunner.run(try! Self.plan(client, out: out.path), options: options)
            reached = relay.stop()
        }
        #expect(result.termination == .exited(0))
        // An IPv4-only wildcard is refused on ::1 (a client then tries 127.0.0.1), never reset.
        #expect(out.read("relayed") == "loopback wildcard wildcard errno \(ECONNREFUSED) late v4-wildcard errno \(ECONNREFUSED)",
                "\(out.read("relayed") ?? "nothing")")
        #expect(reached.map(\.0) == ["127.0.0.1:8771", "127.0.0.1:8772", "[::1]:8772", "127.0.0.1:8773", "127.0.0.1:8774"], "\(reached)")
        #expect(reached.allSatisfy { $0.1 == 1 }, "\(reached)")
    }

    @Test("the relay listens on at most PortRelay.maxListeners ports, however many the survivors open (each costs the supervisor a descriptor); the first ones are still relayed")
    func relayBounded() throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        let server = """
            import os, socket, time
            if os.fork() == 0:
                os.setsid()
                held = []
                for port in range(20000, 20300):
                    s = socket.socket(socket.AF_INET); s.bind(("127.0.0.1", port)); s.listen(1); held.append(s)
                open("/out/listening", "w").write("yes")
                while True: time.sleep(10)
            while not os.path.exists("/out/listening"): time.sleep(0.02)
            """
        let client = """
            import socket
            s = socket.socket(socket.AF_INET); s.settimeout(5); s.connect(("127.0.0.1", 20000))
            open("/out/relayed", "w").write("connected")
            """
        var counts: (descriptors: Int, notRelayed: Int) = (0, 0)
        let before = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count
        let result = try SandboxRunner.run(try Self.plan(server, out: out.path), options: RunOptions()) { survivors in
            guard let namespace = try? NetworkNamespaces.make() else { return }
            defer { close(namespace) }
            guard let relay = try? PortRelay(from: survivors.networkNamespace, into: namespace) else { return }
            var options = RunOptions()
            options.networkNamespace = namespace
            _ = try? SandboxRunner.run(try! Self.plan(client, out: out.path), options: options)
            counts = ((try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").count) ?? 0, relay.notRelayed)
            _ = relay.stop()
        }
        #expect(result.termination == .exited(0))
        #expect(out.read("relayed") == "connected")
        #expect(counts.notRelayed == 300 - PortRelay.maxListeners, "\(counts)")
        // Other tests run beside this one: the bound is loose, far below one per port.
        #expect(counts.descriptors - before < 200, "\(counts.descriptors) descriptors, \(before) before")
    }
}

extension TempDir {
    /// The text of `name` in this directory, or nil.
    func read(_ name: String) -> String? { try? String(contentsOfFile: file(name), encoding: .utf8) }
}
