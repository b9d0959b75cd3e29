import Benchmark
import Crypto
import ExperimentModel
import Foundation
import Glibc
import Sandbox
import SupervisorIO

/// The supervisor's side of remote work: requests built and signed here, sent through the Ray
/// driver (templates/ray/autoharness_ray.py, a Python process of the supervisor's: Ray has no
/// Swift API), and every answer checked before anything of it is used.
public struct RemoteWork {
    public var key: Curve25519.Signing.PrivateKey
    /// What every node's binary and policies must hash to: this process's, taken once.
    public var binarySHA256: String
    public var policiesSHA256: String
    public var taskPolicy = "benchmark-task"
    public var verifierPolicy = "verifier"
    public var defaultAgentTimeout: Double?

    public init(key: Curve25519.Signing.PrivateKey, policySearchPaths: [String]) throws {
        self.key = key
        binarySHA256 = try WorkDigest.executable()
        policiesSHA256 = try WorkDigest.policies(policySearchPaths)
    }

    /// A request for `tasks` of a local benchmark with `agentPy`: the tasks' files (but
    /// `solution/`, which only oracle runs read), this binary's and these policies' digests,
    /// a fresh nonce.
    public func request(_ tasks: [BenchmarkTask], agentPy: [UInt8], heldOut: Bool, concurrency: Int, answerTo: String? = nil,
                        validFor seconds: Double = 86_400) throws -> WorkRequest {
        var work: [WorkTask] = []
        for t in tasks {
            let files = try RemoteWorker.collect(t.directory, strict: true).filter { !$0.path.hasPrefix("solution/") }
            work.append(WorkTask(id: t.id, files: files))
        }
        try Self.checkSize(work.reduce(0) { $0 + $1.files.reduce(0) { $0 + $1.bytes.count + $1.path.utf8.count } }, of: "files", tasks: tasks.count, agentPy: agentPy)
        var nonce = [UInt8](repeating: 0, count: 16)
        for i in nonce.indices { nonce[i] = UInt8.random(in: 0...255) }
        var r = WorkRequest(nonce: WorkDigest.hex(nonce), heldOut: heldOut, binarySHA256: binarySHA256,
                            policiesSHA256: policiesSHA256, taskPolicy: taskPolicy,
                            verifierPolicy: verifierPolicy, concurrency: concurrency, agentPy: Data(agentPy), tasks: work)
        r.defaultAgentTimeout = defaultAgentTimeout
        r.answerTo = answerTo
        r.expires = Date().timeIntervalSince1970 + seconds
        return r
    }

    /// A request for a shard `ids` of a tool benchmark's run (`NodeTool`): the ids, each with
    /// only what `nodeData` gives for it (`RunsInShards.nodeData`: what the node cannot have
    /// otherwise), the tool's settings, its runner's and scorer's policies in place of a task's
    /// and a verifier's. `toolSHA256`: `WorkDigest.files(tool.digestedFiles)`, taken once a run.
    public func request(tool: NodeTool, toolSHA256: String?, ids: [String], agentPy: [UInt8], heldOut: Bool, answerTo: String? = nil,
                        nodeData: (String) -> [UInt8]? = { _ in nil }) throws -> WorkRequest {
        var work = self
        work.taskPolicy = tool.settings.runnerPolicy
        work.verifierPolicy = tool.settings.scorerPolicy
        var r = try work.request([], agentPy: agentPy, heldOut: heldOut, concurrency: 1, answerTo: answerTo)
        r.tasks = ids.map { id in WorkTask(id: id, files: nodeData(id).map { [WorkFile(path: NodeToolWork.dataFile, executable: false, bytes: Data($0))] } ?? []) }
        // Each task's data within what a node takes, and the whole within a request.
        let sizes = r.tasks.map { $0.files.reduce(0) { $0 + $1.bytes.count } }
        if let big = sizes.firstIndex(where: { $0 > WorkLimits.maxFile }) {
            throw ExperimentError(.usage, "task \(printable(r.tasks[big].id)): its data for the node is \(sizes[big]) bytes, over the \(WorkLimits.maxFile) a request's task may carry")
        }
        try Self.checkSize(sizes.reduce(0, +), of: "data", tasks: ids.count, agentPy: agentPy)
        r.tool = tool
        r.toolSHA256 = toolSHA256
        return r
    }

    /// Refuses a request whose tasks' `bytes` (their `what`) and agent.py are over what a node
    /// takes once encoded (base64 twice, in the body and in the signed envelope: about 1.8
    /// times the bytes); said without naming a task, which may be held out.
    static func checkSize(_ bytes: Int, of what: String, tasks: Int, agentPy: [UInt8]) throws {
        if bytes * 9 / 5 + agentPy.count * 2 > WorkLimits.maxRequest {
            throw ExperimentError(.usage, "a request of \(tasks) task(s) would carry \(bytes) bytes of their \(what), over what a node takes (\(WorkLimits.maxRequest) bytes encoded): lower executor.tasks_per_request")
        }
    }

    public func sign(_ r: WorkRequest, sealTo node: String? = nil) throws -> [UInt8] { try WorkKey.sign(r, with: key, sealTo: node) }

    /// The node's answer to `request`, if it is one: its nonce, exactly the requested ids in
    /// order, finite rewards in [0, 1] consistent with their statuses, no traces for held-out
    /// tasks, and no trace file outside its task. Anything else is an error naming what.
    public static func check(_ bytes: [UInt8], for request: WorkRequest, answerKey: Curve25519.KeyAgreement.PrivateKey? = nil) throws -> WorkAnswer {
        guard bytes.count <= WorkLimits.maxAnswer else { throw ExperimentError(.refused, "the answer is over \(WorkLimits.maxAnswer) bytes") }
        var bytes = bytes
        if let to = request.answerTo {
            guard let key = answerKey, NodeSealKey.publicText(key) == to,
                  let envelope = try? JSONDecoder().decode(SealedAnswer.self, from: Data(bytes)),
                  let opened = NodeSealKey.open(envelope.sealed, with: key, info: NodeSealKey.answerInfo) else {
                throw ExperimentError(.refused, "the answer is not sealed to this supervisor's key")
            }
            bytes = Array(opened)
        }
        let answer: WorkAnswer
        do { answer = try JSONDecoder().decode(WorkAnswer.self, from: Data(bytes)) } catch {
            throw ExperimentError(.refused, "the answer does not decode", cause: error)
        }
        guard answer.nonce == request.nonce else { throw ExperimentError(.refused, "the answer is to another request (nonce \(printable(String(answer.nonce.prefix(32)))))") }
        guard answer.outcomes.map(\.id) == request.tasks.map(\.id) else { throw ExperimentError(.refused, "the answer's tasks are not the request's") }
        for o in answer.outcomes {
            guard o.reward.isFinite, (0...1).contains(o.reward), o.passed == (o.reward >= TaskOutcome.passThreshold),
                  [.passed, .failed].contains(o.status) || o.reward == 0 else {
                throw ExperimentError(.refused, "task \(o.id): reward \(o.reward) with status \(o.status.rawValue) is not a valid outcome")
            }
        }
        guard answer.violations.count <= WorkLimits.maxViolations,
              answer.violations.allSatisfy({ AuditEvent.Kind(rawValue: $0.kind) != nil
                                             && (request.heldOut ? GuestAnswer.isName($0.name) && $0.name.utf8.count <= WorkLimits.maxName : WorkViolation.isTrainName($0.name))
                                             && (0...WorkLimits.maxViolationCount).contains($0.count) }) else {
            throw ExperimentError(.refused, "the answer's violations are not valid counts")
        }
        for o in answer.outcomes where !((0...86_400 * 7).contains(o.agentSeconds) && (0...86_400 * 7).contains(o.verifierSeconds))
            || (o.detail?.utf8.count ?? 0) > 4096 || (o.failures?.count ?? 0) > 1000 || !(0...WorkLimits.maxViolationCount).contains(o.vendorFailures ?? 0) {
            throw ExperimentError(.refused, "task \(o.id): its times, detail or failures are out of bounds")
        }
        if request.heldOut {
            // Rewards and status classes only, as from a held-out VM.
            guard answer.traces.isEmpty, answer.outcomes.allSatisfy({ $0.failures == nil && $0.detail == nil && $0.agentSeconds == 0 && $0.verifierSeconds == 0
                    && $0.verifierRanAgentCode.map { TaskOutcome.flagCount($0, where: "on the node") != nil } ?? true
                    && ($0.vendorFailures == nil || request.oneTaskPerRun == true) }) else {
                throw ExperimentError(.refused, "the answer to a held-out request carries more than rewards, statuses and flag counts (traces, details, timings, failure evidence, what a verifier ran, or vendor failures it was not asked for)")
            }
        } else {
            for (id, files) in answer.traces {
                guard request.tasks.contains(where: { $0.id == id }), files.count <= WorkLimits.maxFilesPerTask,
                      Set(files.map(\.path)).count == files.count, files.allSatisfy({ RemoteWorker.isPlainRelative($0.path) }) else {
                    throw ExperimentError(.refused, "the answer's trace for '\(printable(id))' names a task or path outside the request")
                }
            }
        }
        return answer
    }
}

/// What the driver reported for one request.
public enum RemoteResult: Sendable {
    /// The node's `autoharness worker` ran and exited with `exit`; `answer` is its stdout
    /// (empty and `oversized` when it was over `WorkLimits.maxAnswer`).
    case ran(node: String, exit: Int32, answer: [UInt8], oversized: Bool, stderr: String)
    /// Ray lost the task (its node died, its worker was killed, the task was cancelled), or no
    /// accepted node was left. `nodeDied`: Ray has the node dead (NodeDiedError, and the node
    /// no longer alive), the one loss a held-out request is run again after.
    case lost(node: String, why: String, nodeDied: Bool = false)

    public var node: String {
        switch self {
        case .ran(let node, _, _, _, _), .lost(let node, _, _): return node
        }
    }

    /// Ray lost it (no answer came).
    public var isLoss: Bool {
        if case .lost = self { return true }
        return false
    }
}

/// A node of the cluster as the driver found it: its own `autoharness worker --check` report,
/// or why there is none.
public struct NodeSeen: Sendable {
    public var node: String
    public var address: String
    public var report: NodeReport?
    public var error: String?
    /// Why a task image offered to it did not arrive (`worker --receive-image`).
    public var pushError: String?
}

/// Task images to push before a batch: an encrypted archive and each node's signed offer.
public struct ImageOffers: Sendable {
    public var path: String
    public var offers: [(node: String, offer: [UInt8])]
    /// How long a node may take to receive and unpack it.
    public var timeout: Double
    /// A held-out batch's: a node's reason for not taking it stays on the node (tar's words
    /// could name the image's files).
    public var quiet: Bool
}

/// What the supervisor makes of one result.
public struct Settlement: Sendable {
    /// No request goes to these nodes again in this batch.
    public var exclude: [String] = []
    /// Send the request again, to a node it has not run on.
    public var resend = false

    public static let done = Settlement()
    public init(exclude: [String] = [], resend: Bool = false) {
        self.exclude = exclude
        self.resend = resend
    }
}

/// One Ray driver process for a batch of requests.
public struct RayExecutor: Sendable {
    /// The Python that has `ray` (pinned), and the driver script.
    public var python: String
    public var driver: String
    public var address: String
    /// RAY_AUTH_MODE, RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH) and PATH for the driver.
    public var environment: [String: String]
    public var timeout: Double = 3600
    /// Requests running at once, cluster-wide.
    public var maxInFlight = 1
    /// The policies nodes check they can enforce (`worker --check --check-policy`).
    public var checkPolicies = ["benchmark-task", "verifier"]
    /// The held-out VM's settings nodes check they can run (`worker --check --check-vm`), when
    /// held-out requests run in one.
    public var checkVM: VMSettings?
    /// Paths every node must have (a tool's install and binds): a node without one is given no request.
    public var checkPaths: [String] = []
    /// Files whose digest every node reports (`NodeTool.digestedFiles`), compared with the
    /// supervisor's own: a node with other copies is given no request.
    public var checkDigest: [String] = []
    /// Task images' archive digests every node reports holding or not (`--check-image`).
    public var checkImages: [String] = []
    /// The most the task images' pushes may take, on top of the requests' own time.
    public var pushAllowance: Double = 0
    /// Directories the driver must not read (the experiment's private directory: its work
    /// key, split, ledger and image archives): each covered by an empty read-only tmpfs in a
    /// mount namespace of the driver's own, with no capability left to undo it (nor to reach
    /// them through another process's /proc/PID/root: the kernel refuses a process that
    /// lacks capabilities its target has). Empty: the driver runs unconfined.
    public var hidden: [String] = []
    /// The user the driver runs as (`executor.driver_user`); nil: this process's.
    public var user: DriverUser?
    /// The verifier tools every node reports the digest of (`--check-verifier-tools`).
    public var checkVerifierTools: String?
    /// bird-interact's template databases every node fingerprints on its own server
    /// (`--check-databases`, on the check's stdin: the login may carry a password).
    public var checkDatabases: BirdDatabases.Check?
    /// Each request only on an idle node: the runs take the node's lock exclusively (a tool
    /// whose runs share a server, `runsBesideItself`), so one sent to a busy node would only
    /// wait there while its time ran.
    public var alone = false

    public init(python: String, driver: String, address: String, environment: [String: String]) {
        self.python = python
        self.driver = driver
        self.address = address
        self.environment = environment
    }

    /// Runs a batch of `count` requests: the cluster's nodes check themselves, `choose` picks
    /// the ones requests may go to (throwing when none will do), each request is sent as
    /// `prepare` makes it (its bytes, and the node it must run on if it is bound to one; nil:
    /// not yet, asked again, in order, after each result), and `settle` decides on each result as it arrives: done, or sent again (never to a
    /// node it ran on), and whether its node is excluded. Throws when the driver refuses the
    /// cluster (no token authentication), cannot reach it, or a closure throws.
    /// `offers`: what to push to which node, given the first reports (nodes lacking task
    /// images); the nodes pushed to are checked again before `choose`.
    public func run(_ count: Int, offers: ([NodeSeen]) throws -> [ImageOffers] = { _ in [] }, choose: ([NodeSeen]) throws -> [String], prepare: (Int) throws -> (bytes: [UInt8], node: String?)?,
                    settle: (Int, RemoteResult) throws -> Settlement) throws {
        let p = Process()
        let argv = Self.confined([python, driver], hiding: hidden, user: user)
        p.executableURL = URL(fileURLWithPath: argv[0])
        p.arguments = Array(argv.dropFirst())
        p.environment = environment
        let input = Pipe(), output = Pipe(), errors = Pipe()
        p.standardInput = input
        p.standardOutput = output
        p.standardError = errors
        do { try p.run() } catch { throw ExperimentError(.io, "the Ray driver (\(python) \(driver))", cause: error) }
        defer {
            try? input.fileHandleForWriting.close()
            if p.isRunning { kill(p.processIdentifier, SIGKILL) }
            p.waitUntilExit()
        }
        // A bound on the whole batch: tasks Ray never schedules do not hold the supervisor.
        // Requests run `maxInFlight` at a time, each within `timeout`, and some once more.
        let pid = p.processIdentifier
        let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
        // Each request may run twice (a lost one is sent again).
        // A batch that runs alone may have fewer at once than `maxInFlight` (one a node).
        let width = alone ? 1 : max(1, maxInFlight)
        let rounds = Double(2 * ((count + width - 1) / width) + 2)
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout * rounds + 300 + pushAllowance, execute: watchdog)
        defer { watchdog.cancel() }
        // The driver's stderr is drained meanwhile (Ray is talkative); its tail explains a failure.
        let stderrTail = DriverLog()
        let drain = Thread { stderrTail.consume(errors.fileHandleForReading) }
        drain.start()
        let lines = LineReader(output.fileHandleForReading.fileDescriptor, maxLine: WorkLimits.maxAnswer * 4 / 3 + 65536)
        func send(_ object: [String: Any]) throws {
            let data = try JSONSerialization.data(withJSONObject: object) + Data("\n".utf8)
            do { try input.fileHandleForWriting.write(contentsOf: data) } catch {
                throw ExperimentError(.io, "the Ray driver stopped reading its requests (its last output: \(stderrTail.tail))", cause: error)
            }
        }
        func receive(_ what: String) throws -> [String: Any] {
            guard let line = lines.next(), let o = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any] else {
                throw ExperimentError(.io, "the Ray driver ended before \(what): \(stderrTail.tail)")
            }
            if let fatal = o["fatal"] as? String { throw ExperimentError(.refused, "Ray: \(fatal)") }
            return o
        }
        var first: [String: Any] = ["address": address, "num_cpus": 1, "timeout": timeout, "max_in_flight": maxInFlight, "check_policies": checkPolicies]
        if let checkVM { first["check_vm"] = String(decoding: try JSONEncoder().encode(checkVM), as: UTF8.self) }
        if !checkPaths.isEmpty { first["check_paths"] = checkPaths }
        if !checkDigest.isEmpty { first["check_digest"] = checkDigest }
        if !checkImages.isEmpty { first["check_images"] = checkImages }
        if let checkVerifierTools { first["check_verifier_tools"] = checkVerifierTools }
        if alone { first["alone"] = true }
        if let checkDatabases { first["check_databases"] = String(decoding: try JSONEncoder().encode(checkDatabases), as: UTF8.self) }
        try send(first)
        func nodes(_ what: String) throws -> [NodeSeen] {
            (try receive(what)["nodes"] as? [[String: Any]] ?? []).map { n in
                var seen = NodeSeen(node: n["node"] as? String ?? "?", address: n["address"] as? String ?? "?",
                                    report: (n["report"] as? String).flatMap { try? JSONDecoder().decode(NodeReport.self, from: Data($0.utf8)) },
                                    error: n["error"] as? String ?? ((n["report"] as? String) == nil ? nil : "its report does not decode"))
                if seen.report == nil && seen.error == nil { seen.error = "no report" }
                seen.pushError = n["push_error"] as? String
                return seen
            }
        }
        var seen = try nodes("it listed the cluster's nodes")
        let pushes = try offers(seen)
        if !pushes.isEmpty {
            try send(["push": pushes.map { p in
                ["path": p.path, "timeout": p.timeout, "quiet": p.quiet,
                 "to": p.offers.map { ["node": $0.node, "offer": Data($0.offer).base64EncodedString()] }] as [String: Any]
            }])
            seen = try nodes("it pushed the task images")
            // The ciphertext is in Ray's object store now (or was taken): not kept twice here.
            for p in pushes { unlink(p.path) }
        }
        try send(["use": try choose(seen)])
        _ = try receive("it was ready")
        var ranOn = [[String]](repeating: [], count: count)
        var open = Set(0..<count)
        // Requests not yet sent, in order: each goes when `prepare` has a place for it.
        var unsent = Array(0..<count)
        func submit() throws {
            while let i = unsent.first, let (bytes, node) = try prepare(i) {
                unsent.removeFirst()
                var message: [String: Any] = ["id": i, "request": Data(bytes).base64EncodedString(), "avoid": ranOn[i]]
                if let node { message["node"] = node }
                try send(message)
            }
            // Nothing in flight and nothing placeable: no result would ever come to free a place.
            if !unsent.isEmpty && unsent.count == open.count {
                throw ExperimentError(.io, "executor: ray: \(unsent.count) request(s) have no node to go to and none is running")
            }
        }
        try submit()
        while !open.isEmpty {
            guard let line = lines.next() else {
                throw ExperimentError(.io, "the Ray driver ended with \(open.count) request(s) unanswered: \(stderrTail.tail)")
            }
            guard let o = try? JSONSerialization.jsonObject(with: Data(line)) as? [String: Any], let i = o["id"] as? Int, open.contains(i) else { continue }
            let node = o["node"] as? String ?? ""
            let result: RemoteResult
            if let why = o["error"] as? String {
                result = .lost(node: node, why: why, nodeDied: o["node_died"] as? Bool ?? false)
            } else {
                let answer = (o["answer"] as? String).flatMap { Data(base64Encoded: $0) }.map(Array.init) ?? []
                result = .ran(node: node, exit: (o["exit"] as? Int).flatMap { Int32(exactly: $0) } ?? -1, answer: answer,
                              oversized: o["oversized"] as? Bool ?? false, stderr: o["stderr"] as? String ?? "")
            }
            if !node.isEmpty { ranOn[i].append(node) }
            let s = try settle(i, result)
            for bad in Set(s.exclude) { try send(["exclude": bad]) }
            try send(["settled": i])
            if s.resend {
                unsent.insert(i, at: 0)
            } else {
                open.remove(i)
            }
            try submit()
        }
        try send(["end": true])
    }
}
