import Benchmark
import Crypto
import Foundation
import Glibc
import Testing
import TestSupport
@testable import Experiment

/// The real Ray (pinned, `scripts/install-ray`) as the transport of remote work: a head started
/// here with token authentication on loopback, its node running `autoharness worker` for each
/// request. A missing install fails the test: CI installs it first.
@Suite("Ray: remote work through a real Ray cluster with token authentication", .serialized)
struct RayTests {
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
            let port = Int.random(in: 20000...29999)
            address = "127.0.0.1:\(port)"
            self.token = token ?? ""
            var env = ProcessInfo.processInfo.environment
            env["AUTOHARNESS_WORKER_BIN"] = Built.autoharness
            env["AUTOHARNESS_SUPERVISOR_KEY"] = keyFile
            env["AUTOHARNESS_WORKER_STATE"] = temp.file("node-state")
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
            process.arguments = ["--pid", "--fork", "--kill-child", "--mount-proc", ray, "start", "--head", "--block", "--port=\(port)", "--node-ip-address=127.0.0.1", "--num-cpus=2",
                                 "--include-dashboard=false", "--disable-usage-stats", "--temp-dir=" + temp.file("ray")]
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
        let results = try Self.whenUp(head, python: python) { try Self.executor(head, python: python).run([try node.sign(train), try node.sign(heldOut)]) }
        #expect(results.count == 2)
        for (request, result) in zip([train, heldOut], results) {
            guard case .ran(let nodeID, let exit, let bytes, let stderr) = result else {
                Issue.record("request \(request.tasks.map(\.id)) was lost: \(result)")
                continue
            }
            #expect(exit == 0 && !nodeID.isEmpty, "\(stderr)")
            let answer = try RemoteWork.check(bytes, for: request)
            #expect(answer.outcomes.map(\.reward) == [1, 0], "\(answer.outcomes)")
            #expect(answer.traces.isEmpty == request.heldOut)
        }
        let state = node.temp.file("node-state")
        let left = ((try? FileManager.default.contentsOfDirectory(atPath: state)) ?? []).filter { $0 != "nonces" && $0 != "node.lock" }
        #expect(left.isEmpty, "the node kept \(left)")
        #expect(Set((try? FileManager.default.contentsOfDirectory(atPath: state + "/nonces")) ?? []) == [train.nonce, heldOut.nonce])
        let running = head.members().count
        head.stop()
        #expect(head.namespace != nil && running > 3, "Ray's processes: \(running) in \(head.namespace ?? "no namespace")")
        #expect(head.members().isEmpty, "Ray processes outlived the cluster: \(head.members())")
    }

    @Test("prepare, a benchmark and a gate with executor: ray give what one machine gives: the same baseline, split, train outcomes and traces, and the same gate (suite, val_score, promotions)")
    func gateAcrossTheCluster() throws {
        try requireRoot()
        let python = try Self.python()
        let local = try Experiment()
        let remote = try Experiment(prepare: false)
        let key = try autoharness(["worker-key", "-C", remote.root])
        try #require(key.status == 0, "\(key.stderr)")
        let keyFile = remote.temp.file("supervisor.pub")
        try key.stdout.write(toFile: keyFile, atomically: true, encoding: .utf8)
        let token = String(UUID().uuidString.filter(\.isHexDigit).prefix(32))
        let head = try Head(python: python, token: token, keyFile: keyFile, temp: remote.temp)
        let config = remote.root + "/experiment_config.yaml"
        try (try String(contentsOfFile: config, encoding: .utf8) + "\nexecutor:\n  kind: ray\n  address: \(head.address)\n  python: \(python)\n  tasks_per_request: 3\n")
            .write(toFile: config, atomically: true, encoding: .utf8)
        var env = ProcessInfo.processInfo.environment
        env["RAY_AUTH_TOKEN"] = token
        func onCluster(_ args: String...) throws -> Run { try autoharness(args + ["-C", remote.root], environment: env) }

        let prepared = try Self.whenUp(head, python: python) { () throws -> Run in
            let r = try onCluster("prepare")
            if r.status != 0 && r.stderr.contains("could not connect") { throw ExperimentError(.io, r.stderr) }
            return r
        }
        #expect(prepared.status == 0, "\(prepared.stdout) \(prepared.stderr)")
        #expect(prepared.stderr.contains("executor: ray: "), "\(prepared.stderr)")
        #expect(try remote.split() == local.split())
        let baseline = { (e: Experiment) throws -> [String] in
            let b = try #require(try e.rows("baseline").first)
            return ["valScore", "tasksPassed", "tasksTotal", "testTasks"].map { "\(b[$0] ?? "nil")" }
        }
        #expect(try baseline(remote) == baseline(local))

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
        let attempt = { (e: Experiment) throws -> [String] in
            let a = try #require(try e.rows("gate_attempt").last)
            return ["accepted", "suitePassed", "suiteTotal", "valScore", "promoted"].map { "\(a[$0] ?? "nil")" }
        }
        #expect(try attempt(remote) == attempt(local))
        #expect(try attempt(remote).first == "1", "the gate was to accept the solver")
        // Every request went to the node and was answered there.
        let nonces = (try? FileManager.default.contentsOfDirectory(atPath: remote.temp.file("node-state") + "/nonces")) ?? []
        #expect(nonces.count >= 5, "\(nonces.count) requests reached the node")
    }

    @Test("a driver with a wrong token is refused by the cluster, and a cluster without token authentication is refused by the driver")
    func tokensRequired() throws {
        try requireRoot()
        let python = try Self.python()
        let node = try RemoteWorkTests.Node()
        let head = try Head(python: python, token: String(UUID().uuidString.filter(\.isHexDigit).prefix(32)), keyFile: node.keyFile, temp: node.temp)
        // Up first, with the right token (no request), so the refusal below is the token's.
        _ = try Self.whenUp(head, python: python) { try Self.executor(head, python: python).run([]) }
        var wrong = Self.executor(head, python: python, token: String(repeating: "0", count: 32))
        wrong.timeout = 60
        #expect { try wrong.run([]) } throws: { "\($0)".contains("could not connect to the Ray cluster") }

        let open = try RemoteWorkTests.Node()
        let unauthenticated = try Head(python: python, token: nil, keyFile: open.keyFile, temp: open.temp)
        let refused = Date()
        #expect { try Self.whenUp(unauthenticated, python: python) { try Self.executor(unauthenticated, python: python, token: "0123456789abcdef0123456789abcdef").run([try open.sign(try open.request(["add-0"]))]) } } throws: {
            "\($0)".contains("accepted a client with a wrong token: it runs without token authentication")
        }
        #expect(Date().timeIntervalSince(refused) < 120)
        #expect(((try? FileManager.default.contentsOfDirectory(atPath: open.temp.file("node-state"))) ?? []).isEmpty, "a request reached the node")
    }
}
