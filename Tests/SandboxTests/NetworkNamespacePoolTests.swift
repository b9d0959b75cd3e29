import Foundation
@testable import Sandbox
import SandboxPolicy
import Testing
import TestSupport

/// Network namespaces made ahead of time (`NetworkNamespacePool`): each goes to one sandbox,
/// belongs to the initial user namespace, and keeps the policy's network mode.
@Suite("Network namespaces made ahead of time", .serialized)
struct NetworkNamespacePoolTests {
    /// Runs `script` (python3) in-process with the pool; /out is `out`, read-write.
    static func run(_ script: String, out: String, network: NetworkSpec = NetworkSpec(mode: .loopback),
                    pool: NetworkNamespacePool?) throws -> SandboxResult {
        let name = "script-\(UUID().uuidString).py"
        try script.write(toFile: out + "/" + name, atomically: false, encoding: .utf8)
        var limits = Limits()
        limits.timeoutSeconds = 30
        var policy = Policy(name: "netns", mounts: minimalMounts + [MountSpec(kind: .readWrite(source: out), destination: "/out")],
                            limits: limits)
        policy.network = network
        let plan = try PlanCompiler.compile(policy: policy, command: ["/usr/bin/python3", "/out/" + name],
                                            hostEnvironment: [:])
        var options = RunOptions()
        options.networkNamespaces = pool
        // The script's output, for the failure messages.
        let log = open(out + "/" + name + ".log", O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        defer { close(log) }
        options.stdio = (-1, log, log)
        return try SandboxRunner.run(plan, options: options)
    }

    /// What the scripts run in `out` printed.
    static func logs(_ out: String) -> String {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: out)) ?? []
        return names.filter { $0.hasSuffix(".log") }.map { (try? String(contentsOfFile: out + "/" + $0, encoding: .utf8)) ?? "" }
            .joined(separator: "\n")
    }

    static func warmPool() throws -> NetworkNamespacePool {
        let pool = NetworkNamespacePool(capacity: 2)
        try #require(pool.waitUntilReady(2), "the pool made no namespaces: \(pool.failure ?? "timeout")")
        return pool
    }

    @Test("concurrent sandboxes get distinct namespaces: one cannot reach the other's loopback, and no namespace descriptor leaks in")
    func isolatedFromEachOther() throws {
        try requireRoot()
        let pool = try Self.warmPool()
        defer { pool.close() }
        let out = try TempDir(mode: 0o777)
        // A listens on its own loopback, proves it can reach itself, then waits for B.
        let listener = """
            import os, socket, time
            s = socket.socket(); s.bind(("127.0.0.1", 5111)); s.listen(4)
            socket.create_connection(("127.0.0.1", 5111), timeout=3).close()
            links = []
            for f in os.listdir("/proc/self/fd"):
                try: links.append(os.readlink("/proc/self/fd/" + f))
                except OSError: pass  # listdir's own descriptor, closed by now
            open("/out/a.tmp", "w").write(os.readlink("/proc/self/ns/net") + "\\n" + repr(links) + "\\n")
            os.rename("/out/a.tmp", "/out/a")
            for _ in range(300):
                if os.path.exists("/out/b"): break
                time.sleep(0.02)
            """
        let a = Locked<Result<SandboxResult, any Error>?>(nil)
        let outPath = out.path
        Thread.detachNewThread {
            let r = Result { try Self.run(listener, out: outPath, pool: pool) }
            a.withLock { a.value = r }
        }
        for _ in 0..<500 where !FileManager.default.fileExists(atPath: out.path + "/a") { usleep(10_000) }
        try #require(FileManager.default.fileExists(atPath: out.path + "/a"), "\(Self.logs(out.path))")
        let seenByA = try String(contentsOfFile: out.path + "/a", encoding: .utf8).split(separator: "\n").map(String.init)
        let dialer = """
            import errno, os, socket
            try:
                socket.create_connection(("127.0.0.1", 5111), timeout=3)
                r = "connected"
            except OSError as e:
                r = errno.errorcode[e.errno]
            open("/out/b", "w").write(os.readlink("/proc/self/ns/net") + "\\n" + r + "\\n")
            """
        let b = try Self.run(dialer, out: out.path, pool: pool)
        #expect(b.exitCode == 0)
        while a.withLock({ a.value == nil }) { usleep(10_000) }
        let resultA = try #require(try a.withLock { try a.value!.get() })
        #expect(resultA.exitCode == 0)
        let seenByB = try String(contentsOfFile: out.path + "/b", encoding: .utf8).split(separator: "\n").map(String.init)
        // Both came from the pool (neither launcher unshared its own), and they differ.
        #expect(pool.counts.handedOut == 2)
        #expect(seenByA[0].hasPrefix("net:[") && seenByB[0].hasPrefix("net:["))
        #expect(seenByA[0] != seenByB[0])
        #expect(seenByB[1] == "ECONNREFUSED", "B reached A's listener: \(seenByB)")
        // The pool's other ready descriptor is close-on-exec: nothing of the kind inside.
        #expect(!seenByA[1].contains("net:["), "\(seenByA[1])")
    }

    @Test("the namespace belongs to the initial user namespace, not the sandbox's, from the pool or made by the monitor")
    func ownedByTheInitialUserNamespace() throws {
        try requireRoot()
        let pool = try Self.warmPool()
        defer { pool.close() }
        func owner(ofNetworkNamespaceOf pid: pid_t) -> UInt64? {
            let ns = open("/proc/\(pid)/ns/net", O_RDONLY | O_CLOEXEC)
            guard ns >= 0 else { return nil }
            defer { close(ns) }
            let user = ioctl(ns, 0xB701)  // NS_GET_USERNS
            guard user >= 0 else { return nil }
            defer { close(user) }
            var st = stat()
            return fstat(user, &st) == 0 ? UInt64(st.st_ino) : nil
        }
        var initial = stat()
        try #require(stat("/proc/self/ns/user", &initial) == 0)
        for usePool in [true, false] {
            let sandbox = try SleepingSandbox(seconds: 20) { $0.networkNamespaces = usePool ? pool : nil }
            let pids = sandbox.waitForPayload()
            let payload = try #require(sandbox.payload(in: pids))
            let ownerIno = owner(ofNetworkNamespaceOf: payload)
            var own = stat()
            _ = stat("/proc/\(payload)/ns/user", &own)
            sandbox.stop()
            // The sandbox holds no capability over it in any user namespace it can reach (made
            // by the monitor as host root when no pooled one is ready: the host counters of its
            // /proc/net belong to host root, out of the sandbox's reach).
            #expect(ownerIno == UInt64(initial.st_ino), "pool: \(usePool)")
            #expect(UInt64(own.st_ino) != UInt64(initial.st_ino), "the sandbox has a user namespace of its own")
        }
        #expect(pool.counts.handedOut == 1)
    }

    @Test("mode none keeps lo down in a namespace from the pool (its own loopback unreachable); loopback brings it up")
    func policyModeKept() throws {
        try requireRoot()
        let pool = try Self.warmPool()
        defer { pool.close() }
        let out = try TempDir(mode: 0o777)
        let script = """
            import errno, socket, sys
            s = socket.socket(); s.bind(("127.0.0.1", 5112)); s.listen(1)
            try:
                socket.create_connection(("127.0.0.1", 5112), timeout=3); r = "connected"
            except OSError as e:
                r = errno.errorcode[e.errno]
            open("/out/" + sys.argv[0].split("/")[-1] + ".txt", "w").write(r)
            """
        _ = try Self.run(script, out: out.path, network: NetworkSpec(mode: .none), pool: pool)
        _ = try Self.run(script, out: out.path, network: NetworkSpec(mode: .loopback), pool: pool)
        let results = try FileManager.default.contentsOfDirectory(atPath: out.path).filter { $0.hasSuffix(".txt") }
            .map { try String(contentsOfFile: out.path + "/" + $0, encoding: .utf8) }
        #expect(pool.counts.handedOut == 2)
        #expect(results.sorted() == ["ENETUNREACH", "connected"], "\(results)")
    }

    @Test("/proc/net entries that print host-wide counters (softnet_stat, rt_cache, sockstat, ...) cannot be read in a sandbox, from the pool or not; its own tcp table can; the host's are untouched")
    func hostNetCountersHidden() throws {
        try requireRoot()
        let pool = try Self.warmPool()
        defer { pool.close() }
        let out = try TempDir(mode: 0o777)
        let script = """
            import errno, os, sys
            r = []
            for name in ["softnet_stat", "stat/rt_cache", "sockstat", "protocols", "tcp", "dev"]:
                for where in ["/proc/net/", "/proc/self/net/", "/proc/1/net/"]:
                    try:
                        open(where + name).read(); r.append(where + name + " read")
                    except OSError as e:
                        r.append(where + name + " " + errno.errorcode[e.errno])
            # A child's own copy (another /proc/PID/net) too, and no way to make it readable.
            if os.fork() == 0:
                try:
                    open("/proc/self/net/softnet_stat").read(); print("child read", flush=True)
                except OSError as e:
                    print("child", errno.errorcode[e.errno], flush=True)
                os._exit(0)
            os.wait()
            try:
                os.chmod("/proc/self/net/softnet_stat", 0o444); r.append("chmod done")
            except OSError as e:
                r.append("chmod " + errno.errorcode[e.errno])
            open("/out/" + sys.argv[0].split("/")[-1] + ".txt", "w").write("\\n".join(r))
            """
        for usePool in [true, false] {
            let r = try Self.run(script, out: out.path, network: NetworkSpec(mode: .loopback), pool: usePool ? pool : nil)
            try #require(r.exitCode == 0, "\(Self.logs(out.path))")
        }
        #expect(pool.counts.handedOut == 1)
        let results = try FileManager.default.contentsOfDirectory(atPath: out.path).filter { $0.hasSuffix(".txt") }
            .map { try String(contentsOfFile: out.path + "/" + $0, encoding: .utf8) }
        try #require(results.count == 2)
        for text in results {
            let lines = text.split(separator: "\n").map(String.init)
            // (stat/arp_cache and ndisc_cache are hidden too where a kernel has them; not this one.)
            for name in ["softnet_stat", "stat/rt_cache", "sockstat", "protocols"] {
                for place in ["/proc/net/", "/proc/self/net/", "/proc/1/net/"] {
                    #expect(lines.contains(place + name + " EACCES"), "\(place + name): \(text)")
                }
            }
            for place in ["/proc/net/", "/proc/self/net/"] {
                #expect(lines.contains(place + "tcp read") && lines.contains(place + "dev read"), "\(text)")
            }
            #expect(lines.contains("chmod EPERM"), "\(text)")
        }
        #expect(Self.logs(out.path).components(separatedBy: "child EACCES").count == 3, "\(Self.logs(out.path))")
        // The host's own entries keep their mode: the change is per namespace.
        var st = stat()
        #expect(stat("/proc/self/net/softnet_stat", &st) == 0 && st.st_mode & 0o777 == 0o444)
    }

    @Test("proxy mode: the monitor opens the proxy's listener in a namespace from the pool")
    func proxyListener() throws {
        try requireRoot()
        let pool = try Self.warmPool()
        defer { pool.close() }
        let denied = try HostEchoServer()
        let out = try TempDir(mode: 0o777)
        let script = proxyClientPrelude + """
            open("/out/proxy.txt", "w").write(via_proxy("127.0.0.1:\(denied.port)") + "\\n" + direct(\(denied.port)))
            """
        let r = try Self.run(script, out: out.path, network: NetworkSpec(mode: .proxy, allow: ["127.0.0.1:1"]), pool: pool)
        try #require(r.exitCode == 0, "\(Self.logs(out.path))")
        let text = try String(contentsOfFile: out.path + "/proxy.txt", encoding: .utf8)
        #expect(pool.counts.handedOut == 1)
        #expect(text.hasPrefix("HTTP/1.1 403"), "\(text)")
        #expect(text.hasSuffix("Connection refused"), "\(text)")
    }

    @Test("a namespace taken is made again only after refill(), up to the capacity")
    func refillAfterTake() throws {
        try requireRoot()
        let pool = try Self.warmPool()
        defer { pool.close() }
        let fd = try #require(pool.take())
        close(fd)
        usleep(50_000)
        #expect(pool.counts.ready == 1)  // made again once the sandbox runs, not while it launches
        pool.refill()
        #expect(pool.waitUntilReady(2))
        #expect(pool.counts == (handedOut: 1, ready: 2))
    }

    @Test("a closed (empty) pool: the launcher unshares a namespace of its own")
    func emptyPoolFallsBack() throws {
        try requireRoot()
        let pool = try Self.warmPool()
        pool.close()
        #expect(pool.take() == nil)
        let out = try TempDir(mode: 0o777)
        let r = try Self.run("import socket\nsocket.socket().bind(('127.0.0.1', 5113))\n", out: out.path, pool: pool)
        #expect(r.exitCode == 0)
        #expect(pool.counts.handedOut == 0)
    }
}
