import Benchmark
import Crypto
import Foundation
import Glibc
import Synchronization
import Testing
import TestSupport
@testable import Experiment
@testable import Execution
@testable import ExperimentModel

/// The real Ray (pinned, `scripts/install-ray`) as the transport of remote work: a head started
/// here with token authentication on loopback, its node running `autoharness worker` for each
/// request. A missing install fails the test: CI installs it first. Its tests run beside each
/// other and beside the other suites: each head has ports of its own and each cluster a subnet
/// of its own (`allocate()`), each node its own PID namespace, temporary directory and state.
/// Serialized, the suite's 14 tests (1,041 s alone, mostly waiting on clusters) held one of
/// a test process's two threads from their start to their end and ran on for minutes after
/// the rest. A cluster's start-up takes both cores for seconds, which the timing tests beside
/// it must bear as they bear any busy machine. The one other suite that starts a cluster
/// (RunAloneContainerTests) runs alone, after this one.
@Suite("Ray: remote work through a real Ray cluster with token authentication")
struct RayClusterTests {
    /// Run first in a Ray node's namespace: `--mount-proc` gives it a mount namespace, a copy of
    /// this host's mounts as they are (private here, so no later unmount reaches it), and a
    /// node lives for minutes; a task disk another test had mounted then (a loop device) would
    /// stay bound until the node ends. The copy's loop-device mounts are let go of at once.
    static let dropLoopMounts = #"awk '{for(i=7;i<=NF;i++) if($i=="-"){ if($(i+2) ~ /^\/dev\/loop/) print $5; break }}' /proc/self/mountinfo | while read -r m; do umount -l "$m"; done"#

    /// Ray's fixed default ports (the client server's 10001, the dashboard agent's 52365) would
    /// meet on this host when two of these tests' heads run at once: each head is given its own,
    /// and each cluster its own subnet, from one counter of this process.
    private static let handedOut = Mutex(Int.random(in: 0..<1000))

    /// Four ports of 20000-29999 (above Ray's worker ports, 10002-19999, and below the kernel's
    /// ephemeral ones) and
    /// a /24 no other cluster of this process has: `10.a.b`.
    static func allocate() -> (ports: [Int], subnet: String) {
        let n = handedOut.withLock { n in
            defer { n += 1 }
            return n
        }
        let base = 20000 + (n % 2500) * 4
        return (Array(base..<base + 4), "10.\(100 + (n / 250) % 150).\(n % 250 + 1)")
    }

    /// The head's flags for ports `p` (from `allocate()`): the GCS on the first.
    static func headPorts(_ p: [Int]) -> [String] {
        ["--port=\(p[0])", "--ray-client-server-port=\(p[1])", "--dashboard-agent-listen-port=\(p[2])", "--dashboard-agent-grpc-port=\(p[3])"]
    }

    /// Waits (up to a minute) until something listens on `host:port`; throws naming `logs`
    /// (where the listener's own account is) when nothing does.
    static func waitForListener(_ host: String, _ port: Int, logs: String) throws {
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline {
            if try runProcess("/bin/bash", ["-c", "exec 3<>/dev/tcp/\(host)/\(port)"]).status == 0 { return }
            usleep(250_000)
        }
        throw ExperimentError(.io, "nothing listened on \(host):\(port) after a minute (see \(logs))")
    }

    static func python() throws -> String {
        let r = try runProcess("/bin/bash", [Built.packageRoot + "/scripts/install-ray", "--print"])
        let path = r.stdout.split(separator: " ").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
        return try #require(path.flatMap { $0.isEmpty ? nil : $0 }, "ray is not installed: run scripts/install-ray (\(r.stderr))")
    }

    /// A one-node cluster this test started: `ray start --head --block` as the first process of
    /// a PID namespace of its own (`unshare --kill-child`), so stopping it by its pid ends every
    /// process Ray started; its node's autoharness is the built CLI, trusting `keyFile`.
    final class Head {
        let process: Process
        let address: String
        let token: String
        let temp: TempDir

        init(python: String, token: String?, keyFile: String, temp: TempDir) throws {
            self.temp = temp
            let ports = RayClusterTests.allocate().ports
            address = "127.0.0.1:\(ports[0])"
            self.token = token ?? ""
            var env = ProcessInfo.processInfo.environment
            env["AUTOHARNESS_WORKER_BIN"] = Built.autoharness
            env["AUTOHARNESS_SUPERVISOR_KEY"] = keyFile
            env["AUTOHARNESS_WORKER_STATE"] = temp.file("state")
            env["AUTOHARNESS_POLICY_DIR"] = Built.packageRoot + "/policies"
            env["RAY_USAGE_STATS_ENABLED"] = "0"
            if let token {
                env["RAY_AUTH_MODE"] = "token"
                env["RAY_AUTH_TOKEN"] = token
            } else {
                env["RAY_AUTH_MODE"] = "disabled"
                env.removeValue(forKey: "RAY_AUTH_TOKEN")
            }
            let ray = (python as NSString).deletingLastPathComponent + "/ray"
            process = Process()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
            process.arguments = ["--pid", "--fork", "--kill-child", "--mount-proc", "/bin/sh", "-c", RayClusterTests.dropLoopMounts + "; exec \"$0\" \"$@\"", ray, "start", "--head", "--block", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                                 "--include-dashboard=false"] + RayClusterTests.headPorts(ports) + [
                                  "--disable-usage-stats", "--temp-dir=" + temp.file("ray")]
            process.environment = env
            process.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
            process.standardError = FileHandle(forWritingAtPath: "/dev/null")
            try process.run()
        }

        /// The driver's environment: the cluster's token (or `token`), nothing else of ours.
        func driverEnvironment(token: String? = nil) -> [String: String] {
            ["PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": temp.path, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token ?? self.token,
             "RAY_USAGE_STATS_ENABLED": "0"]
        }

        /// The PID namespace Ray runs in (`pid:[inode]`), read from unshare's child.
        lazy var namespace: String? = {
            let fm = FileManager.default
            for entry in (try? fm.contentsOfDirectory(atPath: "/proc")) ?? [] {
                guard let pid = Int32(entry), let stat = fm.contents(atPath: "/proc/\(pid)/stat") else { continue }
                let fields = String(decoding: stat, as: UTF8.self).split(separator: ")").last?.split(separator: " ") ?? []
                if fields.count > 1, Int32(fields[1]) == process.processIdentifier {
                    return try? fm.destinationOfSymbolicLink(atPath: "/proc/\(pid)/ns/pid")
                }
            }
            return nil
        }()

        /// Processes in Ray's namespace now.
        func members() -> [Int32] {
            guard let namespace else { return [] }
            let fm = FileManager.default
            return ((try? fm.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap(Int32.init).filter {
                (try? fm.destinationOfSymbolicLink(atPath: "/proc/\($0)/ns/pid")) == namespace
            }
        }

        /// Ends the cluster: unshare's death kills its child, the namespace's first process,
        /// and with it every process in the namespace.
        func stop() {
            _ = namespace
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
            let deadline = Date().addingTimeInterval(10)
            while !members().isEmpty && Date() < deadline { usleep(100_000) }
        }

        deinit { stop() }
    }

    static func executor(_ head: Head, python: String, token: String? = nil) -> RayExecutor {
        var e = RayExecutor(python: python, driver: Built.packageRoot + "/templates/ray/autoharness_ray.py", address: head.address,
                            environment: head.driverEnvironment(token: token))
        e.timeout = 300
        return e
    }

    /// Runs `body` once the head answers (it takes a few seconds to start).
    static func whenUp<T>(_ head: Head, python: String, _ body: () throws -> T) throws -> T {
        let deadline = Date().addingTimeInterval(90)
        var last: Error?
        while Date() < deadline {
            do { return try body() } catch {
                last = error
                if "\(error)".contains("without token authentication") || "\(error)".contains("signature") { throw error }
                sleep(3)
            }
        }
        throw last ?? ExperimentError(.io, "the Ray head did not come up")
    }

    @Test("requests run on the cluster's node through autoharness worker: the same outcomes as the node run directly, train traces, and the node keeps nothing")
    func requestsRunOnTheCluster() throws {
        try requireRoot()
        let python = try Self.python()
        let node = try RemoteWorkTests.Node()
        let head = try Head(python: python, token: String(UUID().uuidString.filter(\.isHexDigit).prefix(32)), keyFile: node.keyFile, temp: node.temp)
        let train = try node.request(["add-0", "mul-0"])
        let heldOut = try node.request(["add-3", "mul-3"], heldOut: true)
        let results = try Self.whenUp(head, python: python) { try Self.executor(head, python: python).runAll([try node.sign(train), try node.sign(heldOut)]) }
        #expect(results.count == 2)
        for (request, result) in zip([train, heldOut], results) {
            guard case .ran(let nodeID, let exit, let bytes, _, let stderr) = result else {
                Issue.record("request \(request.tasks.map(\.id)) was lost: \(result)")
                continue
            }
            #expect(exit == 0 && !nodeID.isEmpty, "\(stderr)")
            let answer = try RemoteWork.check(bytes, for: request, answerKey: node.answerKey)
            #expect(answer.outcomes.map(\.reward) == [1, 0], "\(answer.outcomes)")
            #expect(answer.traces.isEmpty == request.heldOut)
        }
        let state = node.temp.file("state")
        let left = ((try? FileManager.default.contentsOfDirectory(atPath: state)) ?? []).filter { $0 != "nonces" && $0 != "node.lock" && $0 != "node-key" }
        #expect(left.isEmpty, "the node kept \(left)")
        #expect(Set((try? FileManager.default.contentsOfDirectory(atPath: state + "/nonces")) ?? []) == [train.nonce, heldOut.nonce])
        let running = head.members().count
        head.stop()
        #expect(head.namespace != nil && running > 3, "Ray's processes: \(running) in \(head.namespace ?? "no namespace")")
        #expect(head.members().isEmpty, "Ray processes outlived the cluster: \(head.members())")
    }

    @Test("prepare, a benchmark and a gate with executor: ray across two worker nodes in network namespaces give what one machine gives: the same baseline, split, train outcomes and traces, and the same gate (suite, val_score, promotions); the head and the driver run as a user of their own (executor.driver_user), not root")
    func gateAcrossTheCluster() throws {
        try requireRoot()
        let python = try Self.python()
        let local = try Experiment()
        let (remote, keyFile) = try Self.rayExperiment()
        let user = try DriverUser.resolve("60123:60123")
        let cluster = try Cluster(python: python, keyFile: keyFile, temp: remote.temp, workers: 2, headUser: user)
        defer { cluster.stop() }
        let env = try Self.useCluster(remote, cluster, python: python)
        let config = remote.root + "/experiment_config.yaml"
        try (try String(contentsOfFile: config, encoding: .utf8) + "  tasks_per_request: 3\n  driver_user: \"60123:60123\"\n").write(toFile: config, atomically: true, encoding: .utf8)
        func onCluster(_ args: String...) throws -> Run { try autoharness(args + ["-C", remote.root], environment: env) }

        let prepared = try Self.whenUpOnCluster { try onCluster("prepare") }
        #expect(prepared.status == 0, "\(prepared.stdout) \(prepared.stderr)")
        #expect(prepared.stderr.contains("executor: ray: "), "\(prepared.stderr)")
        #expect(try remote.split() == local.split())
        #expect(try remote.baselineScores() == local.baselineScores())

        let train = Array(try local.split().train.prefix(4))
        for e in [local, remote] { try e.setAgent(Agents.all) }
        let here = try local.run(["benchmark", "--task-ids"] + train)
        let there = try autoharness(["benchmark", "--task-ids"] + train + ["-C", remote.root], environment: env)
        #expect(here.status == 0 && there.status == 0, "\(there.stderr)")
        #expect(here.stdout == there.stdout, "\(here.stdout)\n---\n\(there.stdout)")
        // Each trace's result.json the same but for the wall-clock times.
        func untimed(_ text: String?) -> String? {
            text?.split(separator: "\n").filter { !$0.contains("_seconds") }.joined(separator: "\n")
        }
        for id in train {
            let there = untimed(remote.traceFile(id, "result.json")), here = untimed(local.traceFile(id, "result.json"))
            #expect(there != nil && there == here, "\(id): \(there ?? "no trace") vs \(here ?? "no trace")")
        }

        let gateHere = try local.run("gate")
        let gateThere = try onCluster("gate")
        // The same answer but for the commit's hash.
        let uncommitted = { (s: String) in s.replacing(#/committed as [0-9a-f]+/#, with: "committed as X") }
        #expect(gateHere.status == gateThere.status && uncommitted(gateHere.stdout) == uncommitted(gateThere.stdout), "\(gateHere.stdout)\n---\n\(gateThere.stdout) \(gateThere.stderr)")
        #expect(try remote.lastGateScores() == local.lastGateScores())
        #expect(try remote.lastGateScores().first == "1", "the gate was to accept the solver")
        // Every request went to a worker node and both took their share; none ran on the head.
        let ran = [1, 2].map { FileSystemProbe.names(cluster.state("w\($0)") + "/nonces").count }
        #expect(ran.allSatisfy { $0 > 0 } && ran.reduce(0, +) >= 5, "requests per worker node: \(ran)")
        #expect(FileSystemProbe.names(cluster.state("head") + "/nonces").isEmpty, "a task ran on the head")
        // The head's session was the user's, each run's driver's log there too (a driver run as
        // root would leave root's), and the driver's directory is gone.
        var st = stat()
        #expect(stat(cluster.temp.file("ray-head") + "/session_latest", &st) == 0 && st.st_uid == user.uid, "uid \(st.st_uid)")
        let logs = cluster.temp.file("ray-head") + "/session_latest/logs"
        let drivers = FileSystemProbe.names(logs).filter { $0.hasPrefix("python-core-driver-") }
        let owners = drivers.map { name -> uid_t in
            var d = stat()
            return stat(logs + "/" + name, &d) == 0 ? d.st_uid : 0
        }
        // (The others are root's: the test's own wait for the nodes to join, before any run,
        // tried again while the head comes up.)
        #expect(owners.filter { $0 == user.uid }.count >= 3 && owners.allSatisfy { $0 == user.uid || $0 == 0 }, "\(zip(drivers, owners).map { "\($0) \($1)" })")
        let left = FileSystemProbe.names("/tmp").filter { name in
            var d = stat()
            return name.hasPrefix("autoharness-ray-") && stat("/tmp/" + name, &d) == 0 && d.st_uid == user.uid
        }
        #expect(left.isEmpty, "\(left)")
    }

    @Test("with gate.held_out_runtime: vm, a gate's held-out tasks run in a fresh VM on the node (another kernel: the agent that solves only there is accepted, its train tasks on the node's kernel fail); a node that cannot boot the experiment's VM is given no request")
    func heldOutVMOnTheCluster() throws {
        try HeldOutVMTests.requireVM()
        let python = try Self.python()
        let remote = try Experiment(prepare: false, config: HeldOutVMTests.vm)
        let key = try autoharness(["worker-key", "-C", remote.root])
        try #require(key.status == 0, "\(key.stderr)")
        let keyFile = remote.temp.file("supervisor.pub")
        try key.stdout.write(toFile: keyFile, atomically: true, encoding: .utf8)
        let token = String(UUID().uuidString.filter(\.isHexDigit).prefix(32))
        let head = try Head(python: python, token: token, keyFile: keyFile, temp: remote.temp)
        let config = remote.root + "/experiment_config.yaml"
        let base = try String(contentsOfFile: config, encoding: .utf8) + "\nexecutor:\n  kind: ray\n  address: \(head.address)\n  python: \(python)\n  tasks_per_request: 100\n"
        try base.write(toFile: config, atomically: true, encoding: .utf8)
        var env = ProcessInfo.processInfo.environment
        env["RAY_AUTH_TOKEN"] = token
        func onCluster(_ args: String...) throws -> Run { try autoharness(args + ["-C", remote.root], environment: env) }
        let prepared = try Self.whenUp(head, python: python) { () throws -> Run in
            let r = try onCluster("prepare")
            if r.status != 0 && r.stderr.contains("could not connect") { throw ExperimentError(.io, r.stderr) }
            return r
        }
        #expect(prepared.status == 0, "\(prepared.stdout) \(prepared.stderr)")
        let (train, test) = try remote.split()
        try remote.setAgent(HeldOutVMTests.solver("if open('/proc/sys/kernel/random/boot_id').read().strip() == '\(HeldOutVMTests.hostBootID)':\n    return"))
        let gate = try onCluster("gate")
        #expect(gate.status == 0 && gate.stdout.contains("ACCEPTED") && gate.stdout.contains("val_score: 1.00"), "\(gate.stdout)\n\(gate.stderr)")
        #expect(gate.stderr.contains("held-out runtime: a fresh VM per held-out request"), "\(gate.stderr)")
        // The train tasks ran on the node's own kernel, where this agent fails every one.
        #expect(gate.stdout.contains("0 task(s) promoted"), "\(gate.stdout)")
        let nonces = (try? FileManager.default.contentsOfDirectory(atPath: remote.temp.file("state") + "/nonces")) ?? []
        #expect(!test.isEmpty && !train.isEmpty && nonces.count >= 3, "\(nonces.count) requests reached the node")

        // The experiment's VM names a guest kernel the node does not have: its check fails and
        // it is given nothing, train work included.
        try base.replacingOccurrences(of: "allow_emulation: true", with: "allow_emulation: true, kernel_dir: /nonexistent/kernel")
            .write(toFile: config, atomically: true, encoding: .utf8)
        let refused = try onCluster("benchmark", "--task-ids", train[0])
        #expect(refused.status != 0 && refused.stderr.contains("not used: it fails the host checks: held-out VM") && refused.stderr.contains("/nonexistent/kernel"),
                "\(refused.status) \(refused.stderr)")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: remote.temp.file("state") + "/nonces")) ?? []).count == nonces.count)

        // Prepare's baseline runs where train runs do, in the node's sandboxes on its kernel (as
        // on one machine): an agent.py that solves only there passes every task.
        let other = try Experiment(prepare: false, config: HeldOutVMTests.vm)
        let keyPath = ExperimentLayout(root: remote.root).privateDirectory + "/work-key"
        let otherKey = ExperimentLayout(root: other.root).privateDirectory + "/work-key"
        try FileManager.default.createDirectory(atPath: (otherKey as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try? FileManager.default.removeItem(atPath: otherKey)
        try FileManager.default.copyItem(atPath: keyPath, toPath: otherKey)
        try base.write(toFile: other.root + "/experiment_config.yaml", atomically: true, encoding: .utf8)
        try other.setAgent(HeldOutVMTests.solver("if open('/proc/sys/kernel/random/boot_id').read().strip() != '\(HeldOutVMTests.hostBootID)':\n    return"))
        let baseline = try autoharness(["prepare", "-C", other.root], environment: env)
        #expect(baseline.status == 0 && baseline.stdout.contains("baseline: \(train.count + test.count)/\(train.count + test.count) tasks pass"),
                "\(baseline.stdout)\n\(baseline.stderr)")
    }

    @Test("a driver with a wrong token is refused by the cluster, and a cluster without token authentication is refused by the driver")
    func tokensRequired() throws {
        try requireRoot()
        let python = try Self.python()
        let node = try RemoteWorkTests.Node()
        let head = try Head(python: python, token: String(UUID().uuidString.filter(\.isHexDigit).prefix(32)), keyFile: node.keyFile, temp: node.temp)
        // Up first, with the right token (no request), so the refusal below is the token's.
        _ = try Self.whenUp(head, python: python) { try Self.executor(head, python: python).runAll([]) }
        var wrong = Self.executor(head, python: python, token: String(repeating: "0", count: 32))
        wrong.timeout = 60
        #expect { try wrong.runAll([]) } throws: { "\($0)".contains("could not connect to the Ray cluster") }

        let open = try RemoteWorkTests.Node()
        let unauthenticated = try Head(python: python, token: nil, keyFile: open.keyFile, temp: open.temp)
        let refused = Date()
        #expect { try Self.whenUp(unauthenticated, python: python) { try Self.executor(unauthenticated, python: python, token: "0123456789abcdef0123456789abcdef").runAll([try open.sign(try open.request(["add-0"]))]) } } throws: {
            "\($0)".contains("accepted a client with a wrong token: it runs without token authentication")
        }
        #expect(Date().timeIntervalSince(refused) < 120)
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: open.temp.file("state"))) ?? []).isEmpty, "a request reached the node")
    }

    /// A cluster of this test's own across network namespaces: the head on a bridge of the
    /// host's (the supervisor's host, no CPUs: no task runs there), and each worker node in a
    /// network namespace joined to the bridge by a veth pair, in a PID namespace of its own.
    /// Every process, namespace and link is removed by `stop()`.
    final class Cluster {
        let temp: TempDir
        let tag = String(UUID().uuidString.filter(\.isHexDigit).prefix(6)).lowercased()
        let (ports, subnet) = RayClusterTests.allocate()
        var port: Int { ports[0] }
        let token = String(UUID().uuidString.filter(\.isHexDigit).prefix(32))
        var address: String { "\(subnet).1:\(port)" }
        var bridge: String { "ahbr" + tag }
        var namespaces: [String] = []
        var head: Process?
        var workers: [Process] = []

        /// Variables every node's Ray (and so its worker) runs with besides this process's own
        /// (the keys `env_pass` names).
        let environment: [String: String]

        /// `binaries[n]`: worker node n's AUTOHARNESS_WORKER_BIN (default the built CLI);
        /// `before[n]`: a shell command run in its mount namespace before Ray starts;
        /// `headUser`: the user the head runs as (as `executor.driver_user` asks), else root.
        init(python: String, keyFile: String, temp: TempDir, workers count: Int, binaries: [Int: String] = [:], before: [Int: String] = [:],
             environment: [String: String] = [:], headUser: DriverUser? = nil) throws {
            self.temp = temp
            self.environment = environment
            let ray = (python as NSString).deletingLastPathComponent + "/ray"
            try Self.ip("link", "add", bridge, "type", "bridge")
            try Self.ip("addr", "add", "\(subnet).1/24", "dev", bridge)
            try Self.ip("link", "set", bridge, "up")
            var become: String?
            if let u = headUser {
                // Its session directory (under --temp-dir) is the user's, and so is its HOME.
                try FileManager.default.createDirectory(atPath: temp.file("ray-head"), withIntermediateDirectories: true)
                chown(temp.file("ray-head"), u.uid, u.gid)
                become = "/usr/bin/setpriv --reuid=\(u.uid) --regid=\(u.gid) --clear-groups env HOME=\(temp.file("ray-head")) USER=\(u.name)"
            }
            head = try launch(ray, ["start", "--head", "--node-ip-address=\(subnet).1", "--num-cpus=0", "--include-dashboard=false"] + RayClusterTests.headPorts(ports),
                              name: "head", namespace: nil, keyFile: keyFile, become: become)
            for _ in 0..<count { try addNamespace() }
            // The workers join once the head's GCS listens.
            try RayClusterTests.waitForListener("\(subnet).1", port, logs: temp.file("ray-head"))
            for n in stride(from: 1, through: count, by: 1) {
                workers.append(try launch(ray, ["start", "--address=\(address)", "--node-ip-address=\(subnet).\(n + 1)", "--num-cpus=1"],
                                          name: "w\(n)", namespace: namespaces[n - 1], keyFile: keyFile, binary: binaries[n], before: before[n]))
            }
            try #require(workers.allSatisfy(\.isRunning) && head?.isRunning == true, "a Ray node did not start (see \(temp.path)/ray-*)")
            if count > 0 { try waitForNodes(count, python: python) }
        }

        /// Waits (up to two minutes) until `count` worker nodes are alive in the cluster: a
        /// test that names each node's part must not start while one is still joining.
        /// One driver polls (importing Ray and joining as a driver cost seconds of CPU each);
        /// started again only if it fails, e.g. before the head answers.
        func waitForNodes(_ count: Int, python: String) throws {
            let probe = """
                import time, ray
                ray.init(address='\(address)', log_to_driver=False, logging_level='ERROR')
                end = time.monotonic() + 110
                while True:
                    alive = sum(1 for n in ray.nodes() if n['Alive'] and n['Resources'].get('CPU', 0) > 0)
                    if alive >= \(count) or time.monotonic() > end:
                        break
                    time.sleep(0.5)
                print('ALIVE', alive)
                """
            var env = ProcessInfo.processInfo.environment
            env["RAY_AUTH_MODE"] = "token"
            env["RAY_AUTH_TOKEN"] = token
            env["RAY_USAGE_STATS_ENABLED"] = "0"
            let deadline = Date().addingTimeInterval(120)
            var last = ""
            while Date() < deadline {
                let r = try runProcess(python, ["-c", probe], environment: env)
                last = r.stdout + r.stderr.suffix(300)
                if let line = r.stdout.split(separator: "\n").first(where: { $0.hasPrefix("ALIVE ") }), Int(line.dropFirst(6)) ?? 0 >= count { return }
                sleep(2)
            }
            Issue.record("the cluster did not reach \(count) worker node(s) in two minutes: \(last)")
        }

        /// One more network namespace on the bridge (its address `subnet.N+1` for the Nth);
        /// returns its name.
        @discardableResult
        func addNamespace() throws -> String {
            let n = namespaces.count + 1
            let ns = "ahray\(tag)\(n)", veth = "ahv\(tag)\(n)"
            try Self.ip("netns", "add", ns)
            namespaces.append(ns)
            try Self.ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            try Self.ip("link", "set", veth, "master", bridge)
            try Self.ip("link", "set", veth, "up")
            try Self.ip("-n", ns, "addr", "add", "\(subnet).\(n + 1)/24", "dev", "eth0")
            try Self.ip("-n", ns, "link", "set", "eth0", "up")
            try Self.ip("-n", ns, "link", "set", "lo", "up")
            return ns
        }

        static func ip(_ args: String...) throws {
            let r = try runProcess("/usr/sbin/ip", args)
            try #require(r.status == 0, "ip \(args.joined(separator: " ")): \(r.stderr)")
        }

        /// Where node `name` keeps its worker state.
        func state(_ name: String) -> String { temp.file("state-" + name) }

        func launch(_ ray: String, _ args: [String], name: String, namespace: String?, keyFile: String, binary: String? = nil, before: String? = nil,
                    become: String? = nil) throws -> Process {
            var env = ProcessInfo.processInfo.environment.merging(environment) { _, given in given }
            env["AUTOHARNESS_WORKER_BIN"] = binary ?? Built.autoharness
            env["AUTOHARNESS_SUPERVISOR_KEY"] = keyFile
            env["AUTOHARNESS_WORKER_STATE"] = state(name)
            // The shipped policies, or a directory of the test's (the checkout's are found after it).
            env["AUTOHARNESS_POLICY_DIR"] = environment["AUTOHARNESS_POLICY_DIR"] ?? Built.packageRoot + "/policies"
            env["RAY_USAGE_STATS_ENABLED"] = "0"
            env["RAY_AUTH_MODE"] = "token"
            env["RAY_AUTH_TOKEN"] = token
            let p = Process()
            // With `become`, the shell stays the PID namespace's first process (root, so still
            // ended when unshare is: a process that changes its user loses its parent-death
            // signal) and Ray runs as its child, ended with the namespace.
            let run = become.map { $0 + " \"$0\" \"$@\"" } ?? "exec \"$0\" \"$@\""
            let prefix = ["/bin/sh", "-c", RayClusterTests.dropLoopMounts + "; " + (before.map { $0 + " && " } ?? "") + run]
            let start = ["/usr/bin/unshare", "--pid", "--fork", "--kill-child", "--mount-proc"] + prefix + [ray] + args
                + ["--block", "--disable-usage-stats", "--object-store-memory=200000000", "--temp-dir=" + temp.file("ray-" + name)]
            // nsenter, not `ip netns exec`: that remounts /sys for the namespace, and the node's
            // sandboxes need the host's cgroup mounts under it.
            let argv = namespace.map { ["--net=/run/netns/" + $0] + start } ?? Array(start.dropFirst())
            p.executableURL = URL(fileURLWithPath: namespace == nil ? "/usr/bin/unshare" : "/usr/bin/nsenter")
            p.arguments = argv
            p.environment = env
            p.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
            p.standardError = FileHandle(forWritingAtPath: "/dev/null")
            try p.run()
            return p
        }

        /// Kills worker `n` (1-based) and every process of its node.
        func killWorker(_ n: Int) {
            let p = workers[n - 1]
            if p.isRunning { kill(p.processIdentifier, SIGKILL) }
            p.waitUntilExit()
        }

        func stop() {
            for p in workers + [head].compactMap({ $0 }) where p.isRunning { kill(p.processIdentifier, SIGKILL) }
            for p in workers + [head].compactMap({ $0 }) { p.waitUntilExit() }
            // The host ends of the veth pairs too: a namespace still held for a moment after
            // its processes died would keep its pair.
            for n in namespaces.indices { _ = try? runProcess("/usr/sbin/ip", ["link", "del", "ahv\(tag)\(n + 1)"]) }
            for ns in namespaces { _ = try? runProcess("/usr/sbin/ip", ["netns", "del", ns]) }
            _ = try? runProcess("/usr/sbin/ip", ["link", "del", bridge])
            namespaces = []
        }

        deinit { stop() }
    }

    /// An unprepared experiment and the file holding its work key's public half (what a
    /// node's operator installs).
    static func rayExperiment() throws -> (Experiment, String) {
        let remote = try Experiment(prepare: false)
        let key = try autoharness(["worker-key", "-C", remote.root])
        try #require(key.status == 0, "\(key.stderr)")
        let keyFile = remote.temp.file("supervisor.pub")
        try key.stdout.write(toFile: keyFile, atomically: true, encoding: .utf8)
        return (remote, keyFile)
    }

    @Test("across worker nodes in network namespaces of their own: prepare gives one machine's baseline and split and the nodes share its requests; a train request whose node is killed runs again on another; a node killed holding a gate's held-out request changes no decision (the request runs once more on another node, the loss noted)")
    func nodesAndFaults() throws {
        try requireRoot()
        let python = try Self.python()
        let local = try Experiment()
        let (remote, keyFile) = try Self.rayExperiment()
        let cluster = try Cluster(python: python, keyFile: keyFile, temp: remote.temp, workers: 3)
        defer { cluster.stop() }
        let env = try Self.useCluster(remote, cluster, python: python)
        func onCluster(_ args: String...) throws -> Run { try autoharness(args + ["-C", remote.root], environment: env) }

        let prepared = try Self.whenUpOnCluster { try onCluster("prepare") }
        #expect(prepared.status == 0, "\(prepared.stdout) \(prepared.stderr)")
        #expect(try remote.split() == local.split())
        #expect(try remote.baselineScores() == local.baselineScores())
        func nonces(_ node: Int) -> Set<String> { Set(FileSystemProbe.names(cluster.state("w\(node)") + "/nonces")) }
        let ran = (1...3).map { nonces($0).count }
        #expect(ran.filter { $0 > 0 }.count >= 2, "requests per worker node: \(ran)")
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: cluster.state("head") + "/nonces")) ?? []).isEmpty, "a task ran on the head")

        // A slow agent.py and a train run in the background; the first node that holds one of
        // its requests is killed, and the request runs again on another (its nonce is on both).
        // (6 s a task: the request is held for seconds before its node is killed, and again on
        // the node that runs it after.)
        try remote.setAgent(Agents.slow.replacingOccurrences(of: "time.sleep(15)", with: "time.sleep(6)"))
        func start(_ args: [String]) throws -> (Process, Pipe) {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: Built.autoharness)
            p.arguments = args + ["-C", remote.root]
            p.environment = env
            let err = Pipe()
            p.standardError = err
            p.standardOutput = FileHandle(forWritingAtPath: "/dev/null")
            try p.run()
            return (p, err)
        }
        /// The first live worker node that holds a request (waits up to a minute).
        func busyNode(among nodes: [Int]) -> Int? {
            for _ in 0..<600 {
                if let n = nodes.first(where: { FileSystemProbe.names(cluster.state("w\($0)")).contains { $0.hasPrefix("work-") } }) { return n }
                usleep(100_000)
            }
            return nil
        }
        let before = (1...3).map(nonces)
        let (bench, benchErr) = try start(["benchmark", "--task-ids"] + Array(try remote.split().train.prefix(2)))
        let victim = try #require(busyNode(among: [1, 2, 3]), "no node held a train request")
        cluster.killWorker(victim)
        let benchText = String(decoding: benchErr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        bench.waitUntilExit()
        #expect(bench.terminationStatus == 0, "\(benchText)")
        let fresh = (1...3).map { nonces($0).subtracting(before[$0 - 1]) }
        let rerun = fresh[victim - 1].filter { n in (1...3).contains { $0 != victim && fresh[$0 - 1].contains(n) } }
        #expect(!rerun.isEmpty, "the killed node's request did not run again elsewhere: \(fresh)")

        // A gate in the background (no suite yet: its held-out requests come first), with an
        // agent.py slow enough to be caught at work, and a surviving node killed once it holds
        // one of them: the request is sealed to the last node and runs there once more, and
        // the gate decides as one machine does (the loss noted, naming no task).
        // One machine's gate needs no sleep: the same answers give the same output.
        let slowAdder = Agents.addOnly.replacingOccurrences(of: "        line = instruction", with: "        import time\n        time.sleep(3)\n        line = instruction")
        try local.setAgent(Agents.addOnly)
        try remote.setAgent(slowAdder)
        let g1 = try local.run(["gate"], environment: [:])
        let survivors = [1, 2, 3].filter { $0 != victim }
        let gate = Process()
        gate.executableURL = URL(fileURLWithPath: Built.autoharness)
        gate.arguments = ["gate", "-C", remote.root]
        gate.environment = env
        let err = Pipe(), out = Pipe()
        gate.standardError = err
        gate.standardOutput = out
        try gate.run()
        let second = try #require(busyNode(among: survivors), "no surviving node held a request of the gate")
        cluster.killWorker(second)
        let stderr = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        let stdout = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        gate.waitUntilExit()
        let uncommitted = { (s: String) in s.replacing(#/committed as [0-9a-f]+/#, with: "committed as X") }
        #expect(gate.terminationStatus == g1.status && uncommitted(stdout) == uncommitted(g1.stdout), "\(g1.stdout)\n---\n\(stdout)\(stderr)")
        #expect(stderr.contains("lost on node") && stderr.contains("NodeDiedError"), "\(stderr)")
        #expect(try remote.lastGateScores() == local.lastGateScores())
        let notes = try remote.rows("note").compactMap { $0["text"] as? String }
        #expect(notes.contains { $0.contains("a held-out request was lost with node") } && !notes.joined().contains("add-") && !notes.joined().contains("mul-"), "\(notes)")
        let st = try #require(JSONSerialization.jsonObject(with: Data(try remote.run("status", "--json").stdout.utf8)) as? [String: Any])
        let attempts = st["gate_attempts"] as? [[String: Any]] ?? []
        #expect(attempts.count == 1 && attempts.last?["reason"] as? String != "interrupted", "\(attempts)")
    }

    @Test("a node that answers a request badly is recorded and excluded, its train request answered by another node, with one machine's results; a node that fails the host checks is given no request")
    func badAndUnfitNodes() throws {
        try requireRoot()
        let python = try Self.python()
        let local = try Experiment()
        let (remote, keyFile) = try Self.rayExperiment()
        // Node 2 runs held-out requests faithfully and answers every train request with an
        // answer to another request; node 3 cannot enforce the policies' pids limits.
        let lies = remote.temp.file("node-2-lies")
        let liar = remote.temp.file("lying-autoharness")
        try """
            #!/bin/sh
            case " $* " in *" --check "*) exec \(Built.autoharness) "$@";; esac
            request=$(mktemp)
            cat > "$request"
            if /usr/bin/python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("sealed") else 1)' "$request"; then
                exec \(Built.autoharness) "$@" < "$request"
            fi
            echo train >> \(lies)
            printf '{"nonce":"%032d","outcomes":[],"traces":{},"violations":[]}' 0
            """.write(toFile: liar, atomically: true, encoding: .utf8)
        chmod(liar, 0o755)
        // Node 4 is honest until `flag` exists; then it runs each held-out request (sealed:
        // only it can open one; its nonce is then among its own) and answers it badly.
        let flag = remote.temp.file("node-4-lies"), liedTo = remote.temp.file("node-4-nonces")
        let heldOutLiar = remote.temp.file("held-out-liar")
        try """
            #!/bin/sh
            case " $* " in *" --check "*) exec \(Built.autoharness) "$@";; esac
            request=$(mktemp)
            cat > "$request"
            if [ -e \(flag) ] && /usr/bin/python3 -c 'import json, sys; sys.exit(0 if json.load(open(sys.argv[1])).get("sealed") else 1)' "$request"; then
                ls "$AUTOHARNESS_WORKER_STATE/nonces" | sort > "$request.before"
                \(Built.autoharness) "$@" < "$request" > /dev/null
                ls "$AUTOHARNESS_WORKER_STATE/nonces" | sort | comm -13 "$request.before" - >> \(liedTo)
                printf '{"nonce":"%032d","outcomes":[],"traces":{},"violations":[]}' 0
                exit 0
            fi
            exec \(Built.autoharness) "$@" < "$request"
            """.write(toFile: heldOutLiar, atomically: true, encoding: .utf8)
        chmod(heldOutLiar, 0o755)
        let cluster = try Cluster(python: python, keyFile: keyFile, temp: remote.temp, workers: 4, binaries: [2: liar, 4: heldOutLiar],
                                  before: [3: "umount -l /sys/fs/cgroup/pids"])
        defer { cluster.stop() }
        let env = try Self.useCluster(remote, cluster, python: python)
        func onCluster(_ args: String...) throws -> Run { try autoharness(args + ["-C", remote.root], environment: env) }
        func lied() -> Int { ((try? String(contentsOfFile: lies, encoding: .utf8)) ?? "").split(separator: "\n").count }

        let prepared = try Self.whenUpOnCluster { try onCluster("prepare") }
        #expect(prepared.status == 0, "\(prepared.stdout) \(prepared.stderr)")
        #expect(prepared.stderr.contains("node \(cluster.subnet).4 (") && prepared.stderr.contains("not used: it fails the host checks: policy benchmark-task: limits.pids cannot be enforced"), "\(prepared.stderr)")
        #expect(try remote.split() == local.split())
        let train = try remote.split().train
        for e in [local, remote] { try e.setAgent(Agents.all) }
        let here = try local.run(["benchmark"])
        let there = try onCluster("benchmark")
        #expect(here.status == 0 && there.status == 0, "\(there.stderr)")
        #expect(here.stdout == there.stdout, "\(here.stdout)\n---\n\(there.stdout)")
        #expect(train.count > 2)
        // The liar was given one train request at most once, then nothing: one record.
        #expect(lied() == 1, "train requests node 2 answered badly: \(lied())")
        let rows = try remote.rows("node_excluded")
        #expect(rows.count == 1 && rows.first?["address"] as? String == "\(cluster.subnet).3", "\(rows)")
        #expect((rows.first?["reason"] as? String)?.contains("the answer is to another request") == true, "\(rows)")
        #expect(there.stderr.contains("answered badly") && there.stderr.contains("excluded from this experiment"), "\(there.stderr)")
        // Recorded, so a later run leaves it out from the start.
        let again = try onCluster("benchmark")
        #expect(again.status == 0 && again.stdout == here.stdout, "\(again.stderr)")
        #expect(again.stderr.contains("node \(cluster.subnet).3 (") && again.stderr.contains("not used: excluded: it answered a request badly before"), "\(again.stderr)")
        #expect(lied() == 1)
        #expect(FileSystemProbe.names(cluster.state("w3") + "/nonces").isEmpty, "the node that fails the host checks ran a request")
        #expect(try remote.rows("node_excluded").count == 1)

        // Node 4 now answers held-out requests badly: the gate ends interrupted and counted,
        // node 4 is recorded without a task named, and the request it held never runs again
        // (on node 1, the only other node left).
        FileManager.default.createFile(atPath: flag, contents: Data())
        let gate = try onCluster("gate")
        #expect(gate.status == 5 && gate.stderr.contains("answered a held-out request badly and is excluded"), "\(gate.status) \(gate.stderr)")
        let both = try remote.rows("node_excluded")
        let heldOutRow = try #require(both.last, "no node_excluded row for node 4")
        #expect(both.count == 2 && heldOutRow["address"] as? String == "\(cluster.subnet).5" && heldOutRow["heldOut"] as? Bool == true, "\(both)")
        let reason = heldOutRow["reason"] as? String ?? ""
        let testIDs = try remote.split().test
        #expect(reason == "a held-out answer that is not valid" && !testIDs.contains { reason.contains($0) || gate.stdout.contains($0) }, "\(reason)")
        let lied = Set(((try? String(contentsOfFile: liedTo, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init))
        #expect(!lied.isEmpty && lied.isDisjoint(with: FileSystemProbe.names(cluster.state("w1") + "/nonces")), "a held-out request node 4 answered badly ran again on node 1: \(lied)")
        let attempts = try remote.rows("gate_attempt")
        #expect(attempts.count == 1 && attempts.last?["reason"] as? String == "interrupted", "\(attempts)")
    }

    /// Points `remote`'s config at `cluster` (`executor: ray`); the environment a command
    /// then needs (the cluster's token).
    static func useCluster(_ remote: Experiment, _ cluster: Cluster, python: String) throws -> [String: String] {
        let config = remote.root + "/experiment_config.yaml"
        try (try String(contentsOfFile: config, encoding: .utf8) + "\nexecutor:\n  kind: ray\n  address: \(cluster.address)\n  python: \(python)\n")
            .write(toFile: config, atomically: true, encoding: .utf8)
        var env = ProcessInfo.processInfo.environment
        env["RAY_AUTH_TOKEN"] = cluster.token
        return env
    }

    /// Retries `body` while the cluster is still coming up.
    static func whenUpOnCluster(_ body: () throws -> Run) throws -> Run {
        let deadline = Date().addingTimeInterval(120)
        var r = try body()
        while r.status != 0 && (r.stderr.contains("could not connect") || r.stderr.contains("no node can run")) && Date() < deadline {
            sleep(3)
            r = try body()
        }
        return r
    }
}

extension RayExecutor {
    /// Every request once, on any node whose check reported, each result as it came.
    func runAll(_ signed: [[UInt8]]) throws -> [RemoteResult] {
        var out = [RemoteResult?](repeating: nil, count: signed.count)
        try run(signed.count, choose: { $0.filter { $0.report != nil }.map(\.node) }, prepare: { (signed[$0], nil) }, settle: { i, r in
            out[i] = r
            return .done
        })
        return out.map { $0! }
    }
}

extension Experiment {
    /// The baseline's scores, to compare two experiments' `prepare`.
    func baselineScores() throws -> [String] {
        let b = try #require(try rows("baseline").first)
        return ["valScore", "tasksPassed", "tasksTotal", "testTasks"].map { "\(b[$0] ?? "nil")" }
    }

    /// The last gate's decision and scores, to compare two experiments' gates.
    func lastGateScores() throws -> [String] {
        let a = try #require(try rows("gate_attempt").last)
        return ["accepted", "suitePassed", "suiteTotal", "valScore", "promoted"].map { "\(a[$0] ?? "nil")" }
    }
}

/// Directory entries, for polling a node's state from the test.
enum FileSystemProbe {
    static func names(_ path: String) -> [String] { (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? [] }
}
