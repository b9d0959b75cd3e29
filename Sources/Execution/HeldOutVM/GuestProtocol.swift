import Benchmark
import ExperimentModel
import Foundation
import Sandbox
import SupervisorIO

/// What the supervisor asks of the guest: which held-out tasks to run, and with what. It travels
/// inside the initramfs (host to guest only); every path in it is a host path, which the guest
/// sees at the same place (a read-only share, or a copy in the initramfs).
public struct GuestRequest: Codable, Sendable, Equatable {
    public static let version = 5
    public var version = GuestRequest.version
    /// The experiment's root and config (the config's copy is in the initramfs); a worker
    /// node's request has no config file, only `node`.
    public var experimentRoot: String
    public var configPath: String
    public var policySearchPaths: [String]
    /// The snapshot directory holding the agent.py under evaluation (copied into the initramfs).
    public var agentDirectory: String
    public var ids: [String]
    public var concurrency: Int
    /// The variables `runner.env_pass` names, with the values a held-out run uses on the host
    /// (`gate.held_out_env` applied): set in `vm-guest`'s environment before the adapter runs.
    public var environment: [String: String] = [:]
    /// Whether the guest's sandboxes have egress (the `ah.egress` port, to the host's proxy).
    public var egress = false
    /// The host gate's CA bundle, in the initramfs, when the config names model APIs.
    public var trustBundle: String?
    /// What runs beside the tasks in the guest (a benchmark's database server).
    public var services = GuestServices()
    /// Each task in an adapter run of its own, its streams tagged with its position in `ids`
    /// (`GuestEgress.tag`): the host's gate then counts the vendor's failures per task
    /// (`gate.infra_retries`).
    public var oneTaskPerRun = false
    /// A worker node's held-out request: the settings its guest runs the local tasks with, in
    /// place of an experiment config file (a node has none).
    public var node: NodeGuestSettings?

    public static let trustBundlePath = "/.ahvm/inference-ca.pem"

    public init(experimentRoot: String, configPath: String, policySearchPaths: [String], agentDirectory: String,
                ids: [String], concurrency: Int) {
        self.experimentRoot = experimentRoot
        self.configPath = configPath
        self.policySearchPaths = policySearchPaths
        self.agentDirectory = agentDirectory
        self.ids = ids
        self.concurrency = concurrency
    }
}

/// What a worker node's guest runs its request's tasks with: a local benchmark at `benchmark/`
/// under the request's root, the request's policies, the node's scratch root.
public struct NodeGuestSettings: Codable, Sendable, Equatable {
    public var taskPolicy: String
    public var verifierPolicy: String
    public var scratch: String
    /// The agent's timeout for a task whose task.toml names none.
    public var perTaskTimeout: Double?

    public init(taskPolicy: String, verifierPolicy: String, scratch: String, perTaskTimeout: Double?) {
        (self.taskPolicy, self.verifierPolicy, self.scratch, self.perTaskTimeout) = (taskPolicy, verifierPolicy, scratch, perTaskTimeout)
    }

    /// The experiment config these settings are.
    public var config: ExperimentConfig {
        var c = ExperimentConfig(benchmark: "local", dataset: "benchmark")
        c.taskPolicy = taskPolicy
        c.verifierPolicy = verifierPolicy
        c.scratch = scratch
        c.perTaskTimeout = perTaskTimeout
        return c
    }
}

/// The only thing that crosses back from the guest: one line per held-out task (its reward and
/// status class) and a count per kind of refused action, on one virtio-serial port. Nothing
/// else the guest produced (traces, stdout, details, timings) is sent or read.
///
///     ahvm1 begin
///     outcome <id> <reward> <status>        one per requested id, any order
///     violation <agent|tool> <kind> <name> <count>
///     cost <dollars>                        at most once: the tools' model spend, summed
///     ahvm1 end <outcomes>
///
/// The host's parser (`GuestAnswer.parse`) is strict: an id that was not asked for, a
/// duplicate, a reward outside [0, 1], an unknown status or kind, an overlong line or a
/// missing `end` rejects the whole answer, and the gate ends as interrupted (it was counted
/// before it ran), never as a silent score.
public struct GuestAnswer: Sendable, Equatable {
    public struct Violation: Sendable, Equatable {
        /// `agent`: a sandbox holding agent.py; `tool`: the verifier.
        public var agent: Bool
        public var kind: AuditEvent.Kind
        public var name: String
        public var count: Int
    }

    public var outcomes: [TaskOutcome]
    public var violations: [Violation]
    /// The benchmark tools' model spend over the run, summed in the guest (nil: none
    /// reported). The operator's account, like the host runtime's per-task costs.
    public var costUSD: Double?

    /// The most the host reads from the port (a real answer for 10 000 tasks is ~600 KiB).
    public static let maxBytes = 2 << 20
    static let maxLine = 512
    /// The largest count one violation line may carry: summed with others on the host, a
    /// count near Int.max would trap (no sandbox refuses a billion calls in a gate).
    static let maxViolationCount = 1_000_000_000
    package static let maxViolations = 400
    /// The most a flag line counts (the host keeps `AgentCodeRuns.limit` lines and a total).
    static let maxFlagLines = 1000

    /// What the guest writes as soon as it runs (the host measures its boot by it).
    public static let header = "ahvm1 begin\n"

    /// The rest of the answer, after the guest's run.
    public static func encodeBody(_ outcomes: [TaskOutcome], agent: AuditLog, tool: AuditLog) -> String {
        var lines: [String] = []
        for o in outcomes {
            lines.append("outcome \(o.id) \(String(format: "%.6f", o.reward)) \(o.status.rawValue)")
            // That the verifier ran agent code, and how many lines the flag had: never the paths
            // or programs (strings a held-out agent.py chose).
            if let flag = o.verifierRanAgentCode, !flag.isEmpty { lines.append("flag \(o.id) \(min(flag.count, maxFlagLines))") }
        }
        var rows = 0
        for (actor, log) in [("agent", agent), ("tool", tool)] {
            var counts: [String: (AuditEvent.Kind, Int)] = [:]
            var order: [String] = []
            for e in log.events where e.isViolation {
                let kind = e.countedKind
                // A name is a syscall, a limit or a host:port; anything else is folded.
                let name = Self.isName(e.name) ? e.name : "other"
                let key = "\(kind.rawValue) \(name)"
                if counts[key] == nil { order.append(key) }
                counts[key, default: (kind, 0)].1 += e.count ?? 1
            }
            for key in order where rows < maxViolations {
                rows += 1
                lines.append("violation \(actor) \(key) \(counts[key]!.1)")
            }
        }
        if let c = TaskOutcome.cost(outcomes), c.isFinite, c >= 0, c < maxCost { lines.append("cost \(String(format: "%.6f", c))") }
        lines.append("ahvm1 end \(outcomes.count)")
        return lines.joined(separator: "\n") + "\n"
    }

    /// The largest spend a cost line may carry.
    static let maxCost = 1e7

    package static func isName(_ s: String) -> Bool {
        !s.isEmpty && s.utf8.count <= 128 && s.utf8.allSatisfy { c in
            (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) || c == 0x5f || c == 0x2d
                || c == 0x2e || c == 0x3a || c == 0x5b || c == 0x5d
        }
    }

    /// Parses what the guest wrote, against the ids the host asked for. Throws a description
    /// of the first problem (for the operator; it names no task).
    public static func parse(_ bytes: [UInt8], requested: [String]) throws(AnswerError) -> GuestAnswer {
        guard bytes.count <= maxBytes else { throw AnswerError("the answer is larger than \(maxBytes) bytes") }
        guard let text = String(validating: bytes, as: UTF8.self) else { throw AnswerError("the answer is not UTF-8") }
        let wanted = Set(requested)
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)
        if lines.last == "" { lines.removeLast() }
        guard lines.first == "ahvm1 begin" else { throw AnswerError("the answer does not start with its header") }
        var outcomes: [TaskOutcome] = []
        var seen: Set<String> = []
        var violations: [Violation] = []
        var cost: Double?
        var ended = false
        for (i, line) in lines.enumerated().dropFirst() {
            guard !ended else { throw AnswerError("line \(i + 1): text after the end line") }
            guard line.utf8.count <= maxLine else { throw AnswerError("line \(i + 1): longer than \(maxLine) bytes") }
            let f = line.split(separator: " ", omittingEmptySubsequences: false).map(String.init)
            switch f.first {
            case "outcome":
                guard f.count == 4 else { throw AnswerError("line \(i + 1): an outcome has 3 fields") }
                guard wanted.contains(f[1]) else { throw AnswerError("line \(i + 1): a task that was not requested") }
                guard seen.insert(f[1]).inserted else { throw AnswerError("line \(i + 1): a task answered twice") }
                guard let reward = Double(f[2]), reward.isFinite, (0...1).contains(reward) else {
                    throw AnswerError("line \(i + 1): the reward is not a number in [0, 1]")
                }
                guard let status = TaskStatus(rawValue: f[3]) else { throw AnswerError("line \(i + 1): unknown status") }
                // The statuses that score 0 do so here too, whatever the guest wrote.
                let scored: Double
                switch status {
                case .passed, .failed:
                    guard (status == .passed) == (reward >= TaskOutcome.passThreshold) else {
                        throw AnswerError("line \(i + 1): the status contradicts the reward")
                    }
                    scored = reward
                default: scored = 0
                }
                outcomes.append(TaskOutcome(id: f[1], reward: scored, status: status, detail: "in the held-out VM"))
            case "flag":
                guard f.count == 3, let at = outcomes.lastIndex(where: { $0.id == f[1] }), outcomes[at].verifierRanAgentCode == nil,
                      let n = Int(f[2]), n > 0, n <= maxFlagLines else {
                    throw AnswerError("line \(i + 1): a malformed flag (after its task's outcome, once, a count)")
                }
                outcomes[at].verifierRanAgentCode = TaskOutcome.countedFlag(n, where: "in the held-out VM")
            case "violation":
                guard f.count == 5, f[1] == "agent" || f[1] == "tool", let kind = AuditEvent.Kind(rawValue: f[2]),
                      isName(f[3]), let n = Int(f[4]), n > 0, n <= maxViolationCount else {
                    throw AnswerError("line \(i + 1): a malformed violation")
                }
                guard violations.count < maxViolations else { throw AnswerError("more than \(maxViolations) violation lines") }
                violations.append(Violation(agent: f[1] == "agent", kind: kind, name: f[3], count: n))
            case "cost":
                guard f.count == 2, cost == nil, let c = Double(f[1]), c.isFinite, c >= 0, c < maxCost else {
                    throw AnswerError("line \(i + 1): a malformed or repeated cost line")
                }
                cost = c
            case "ahvm1":
                guard f.count == 3, f[1] == "end", Int(f[2]) == outcomes.count else { throw AnswerError("line \(i + 1): a bad end line") }
                ended = true
            default:
                throw AnswerError("line \(i + 1): not an answer line")
            }
        }
        guard ended else { throw AnswerError("the answer has no end line (the guest stopped before it finished)") }
        guard seen == wanted else { throw AnswerError("\(wanted.count - seen.count) requested task(s) have no outcome") }
        return GuestAnswer(outcomes: outcomes, violations: violations, costUSD: cost)
    }

    /// Puts the answer's violations into `agent` and `tool`, as the host's sandboxes would have.
    public func record(agent: AuditLog, tool: AuditLog) {
        for v in violations {
            (v.agent ? agent : tool).record(AuditEvent(sandbox: "held-out-vm", kind: v.kind, name: v.name,
                                                       action: "refused in the held-out VM", count: v.count))
        }
    }
}

public struct AnswerError: Error, CustomStringConvertible, Sendable {
    public var description: String
    init(_ d: String) { description = d }
}

extension AnswerError: AutoharnessError {
    /// A guest's answer that does not parse: the gate ends as interrupted, the system's fault.
    public var category: ErrorCategory { .io }
}
