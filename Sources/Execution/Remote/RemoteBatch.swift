import Crypto
import ExperimentModel
import Foundation
import Sandbox
import SupervisorIO

/// The supervisor's decisions for one batch of remote requests, apart from Ray: which nodes
/// may work, which node each held-out request is sealed to, and what each result means
/// (used, sent again, its node excluded, or the end of the run). `RayNodeExecutor` hands these to
/// `RayExecutor.run` as its `choose`, `prepare` and `settle`; the tests drive them directly.
///
/// The rules:
/// - A node gets nothing, train or held-out, unless its own check names this binary and
///   these policies (and a tool's files) with no host problem and a valid sealing key, it never answered this
///   experiment badly (at its address), and no other node reports its sealing key.
/// - A held-out request is sealed to a node only when one is free for it: an accepted node in
///   the batch holding no other held-out request of it, with fewer than `concurrency` held
///   at once. So held-out requests are dealt to nodes as they finish, in the order given
///   (longest first, by the executor), as train requests are by the driver; with no accepted
///   node left in the batch, the run ends.
/// - A train request lost with its node, or refused by it, is sent once more to another
///   node. A held-out request whose node died (Ray has the node dead: `nodeDied`) is sealed to
///   another accepted node and run there once more, and the loss is noted in the ledger
///   (`note`, naming no task); agent.py cannot end its node, so the rerun is no second look it
///   could ask for. A held-out request lost otherwise (its worker killed for memory, crashed),
///   refused, failed (the worker ran and exited non-zero) or lost a second time ends the run:
///   a gate is interrupted, and it was counted.
/// - A bad answer (not decodable, oversized, not an answer to the request) records the node
///   (`record`, before anything else) and excludes every node at its address; a held-out
///   request's record names no task. One request costs at most one node: a second bad answer
///   to it ends the run instead, so a request agent.py shapes cannot empty the cluster.
/// - What a node excluded meanwhile answers is not used.
/// Errors thrown here reach the coding agent through the gate's answer: they carry no node
/// text but the address. The node's own words go to `log`, the operator's.
struct RemoteBatch {
    let requests: [WorkRequest]
    let heldOut: Bool
    let binarySHA256: String
    let policiesSHA256: String
    /// A tool benchmark's files as the supervisor holds them (`WorkRequest.toolSHA256`): a
    /// node must report the same digest.
    var toolSHA256: String?
    /// The archive digests of the task images the requests name: a node must hold each.
    var images: [String] = []
    /// The verifier tools' digest (`WorkRequest.verifierToolsSHA256`): a node must report it.
    var verifierToolsSHA256: String?
    /// bird-interact's template databases' fingerprints on the supervisor's server: a node
    /// must report the same (`--check-databases`).
    var databases: [String: String]?
    /// Nodes excluded by earlier batches of this experiment, by address.
    let excluded: [String: NodeExcludedRecord]
    /// Where held-out answers are sealed to (`WorkRequest.answerTo`).
    let answerKey: Curve25519.KeyAgreement.PrivateKey?
    let address: String
    var log: (String) -> Void = { _ in }
    /// Appends a `node_excluded` row; called before the exclusion takes effect.
    var record: (NodeExcludedRecord) throws -> Void = { _ in }
    /// Appends a `note` row (a held-out request run again after its node was lost).
    var note: (String) throws -> Void = { _ in }

    private(set) var accepted: [String] = []
    private(set) var sealKeys: [String: String] = [:]
    private(set) var addresses: [String: String] = [:]
    /// Nodes that get nothing more of this batch (lost, refused, or excluded).
    private(set) var outOfBatch = Set<String>()
    /// How many held-out requests may be sealed to nodes at once (`max_concurrency`).
    var concurrency = Int.max
    /// The node each held-out request in flight is sealed to, until its result is settled.
    private(set) var holding: [Int: String] = [:]
    private var given: [String: Int] = [:]
    private var losses: [Int]
    private var excludedFor: [Bool]

    static let ending = "nothing of this run is recorded, and a gate it belongs to ends as interrupted (it was counted)"

    init(requests: [WorkRequest], heldOut: Bool, binarySHA256: String, policiesSHA256: String, excluded: [NodeExcludedRecord],
         answerKey: Curve25519.KeyAgreement.PrivateKey?, address: String) {
        self.requests = requests
        self.heldOut = heldOut
        self.binarySHA256 = binarySHA256
        self.policiesSHA256 = policiesSHA256
        self.excluded = Dictionary(excluded.map { ($0.address, $0) }, uniquingKeysWith: { a, _ in a })
        self.answerKey = answerKey
        self.address = address
        losses = [Int](repeating: 0, count: requests.count)
        excludedFor = [Bool](repeating: false, count: requests.count)
    }

    /// What a node says, as the operator's log shows it.
    static func shown(_ text: String) -> String { printable(String(text.suffix(600)), limit: 600) }

    /// Why `n` may take no request but for the task images it lacks, or nil.
    func unusable(_ n: NodeSeen) -> String? {
        if let e = excluded[n.address] { return "excluded: it answered a request badly before (\(e.reason))" }
        guard let r = n.report else { return "it did not report (\(n.error ?? "no report"))" }
        return NodeCheck.unusable(r, binarySHA256: binarySHA256, policiesSHA256: policiesSHA256, toolSHA256: toolSHA256,
                                  verifierToolsSHA256: verifierToolsSHA256, databases: databases)
    }

    /// The task images each node that could otherwise work lacks: image digest -> nodes.
    func lacking(_ seen: [NodeSeen]) -> [String: [String]] {
        var out: [String: [String]] = [:]
        for n in seen where unusable(n) == nil && !twin(n, seen) {
            let held = Set(n.report?.images ?? [])
            for image in images where !held.contains(image) { out[image, default: []].append(n.node) }
        }
        return out
    }

    /// Whether another node reports `n`'s sealing key (a shared or cloned state directory).
    func twin(_ n: NodeSeen, _ seen: [NodeSeen]) -> Bool {
        n.report.map { r in seen.contains { $0.node != n.node && $0.report?.sealKey == r.sealKey } } ?? false
    }

    /// The nodes requests may go to, of those the driver found; throws when none will do.
    mutating func choose(_ seen: [NodeSeen]) throws -> [String] {
        var use: [String] = []
        for n in seen {
            addresses[n.node] = n.address
            var why = unusable(n)
            if why == nil, let missing = images.first(where: { !(n.report?.images ?? []).contains($0) }) {
                why = "it does not hold the task image of archive sha256 \(missing.prefix(16))" + (n.pushError.map { " (taking it failed: \($0))" } ?? "")
            }
            // Two nodes with one sealing key (a cloned state volume) would open each other's
            // held-out requests: neither is used.
            if let why = why ?? (twin(n, seen) ? "its sealing key is another node's too (a shared or cloned state directory)" : nil) {
                log("executor: ray: node \(Self.shown(n.address)) (\(n.node.prefix(12))) not used: \(Self.shown(why))")
            } else {
                use.append(n.node)
                sealKeys[n.node] = n.report?.sealKey
            }
        }
        guard !use.isEmpty else {
            throw ExperimentError(.io, "executor: ray: no node of the cluster at \(address) can take a request (of \(seen.count) node(s); why each was not used: the supervisor's log); \(Self.ending)")
        }
        accepted = use
        return use
    }

    /// Where request `i` may go now: any node (a train request, placed by the driver),
    /// sealed to a free node (`sealed`, the one given fewest so far first), or `later`,
    /// when every node in the batch holds a held-out request.
    enum Placement: Equatable {
        case anyNode
        case sealed(node: String, sealKey: String)
        case later
    }

    mutating func place(_ i: Int) throws -> Placement {
        guard heldOut else { return .anyNode }
        let open = accepted.filter { !outOfBatch.contains($0) }
        guard !open.isEmpty else { throw ExperimentError(.io, "executor: ray: no accepted node is left for a held-out request; \(Self.ending)") }
        let busy = Set(holding.values)
        guard holding.count < concurrency, let node = open.filter({ !busy.contains($0) }).min(by: { given[$0, default: 0] < given[$1, default: 0] }) else {
            return .later
        }
        guard let key = sealKeys[node] else { throw ExperimentError(.io, "executor: ray: node \(node.prefix(12)) has no sealing key; \(Self.ending)") }
        holding[i] = node
        given[node, default: 0] += 1
        return .sealed(node: node, sealKey: key)
    }

    /// What result `i` means: its answer when it is one (`settlement` `.done`), or what
    /// happens instead (sent again, nodes excluded); throws when the run must end.
    mutating func settle(_ i: Int, _ result: RemoteResult) throws -> (settlement: Settlement, answer: WorkAnswer?) {
        let request = requests[i]
        // Whatever it was, its node holds it no more.
        holding[i] = nil
        // A held-out request is named by its kind only: these errors reach the coding agent.
        let what = heldOut ? "held-out" : request.tasks.map(\.id).joined(separator: ", ")
        let node = result.node, at = Self.shown(addresses[node] ?? "?")
        // What a node answers after it left the batch is not used, and a train request lost
        // there is sent again without counting: the node's loss was counted already. A
        // held-out request's loss there (one sealed to it that never started) is its own.
        if outOfBatch.contains(node), !heldOut || !result.isLoss {
            if !heldOut { return (Settlement(resend: true), nil) }
            throw ExperimentError(.io, "executor: ray: node \(at) answered a held-out request after it was excluded; \(Self.ending)")
        }
        switch result {
        case .lost(_, let why, let died):
            // A train request lost is sent once more, to another node; a held-out one only when
            // its node died (sealed afresh by `target`): a worker killed for its memory or
            // crashed could be agent.py's doing, and a rerun then a second look it asked for.
            // The node gets nothing more of this batch.
            losses[i] += 1
            log("executor: ray: request (\(what)) lost on node \(at)\(died ? " (the node died)" : ""): \(Self.shown(why))")
            if !node.isEmpty { outOfBatch.insert(node) }
            if losses[i] <= 1 && !node.isEmpty && (!heldOut || died) {
                if heldOut {
                    try note("executor: ray: a held-out request was lost with node \(at) (no answer came); it runs once more on another node")
                }
                return (Settlement(exclude: [node], resend: true), nil)
            }
            throw ExperimentError(.io, "executor: ray: a request (\(what)) was lost on node \(at); \(Self.ending)")
        case .ran(_, let exit, let bytes, let oversized, let stderr):
            guard exit == 0 else {
                // A held-out run's node output stays on the node: it could name test tasks.
                losses[i] += 1
                outOfBatch.insert(node)
                log("executor: ray: node \(at) (\(node.prefix(12))) did not run a request (exit \(exit))\(heldOut ? "" : ": " + Self.shown(stderr))")
                if !heldOut && losses[i] <= 1 { return (Settlement(exclude: [node], resend: true), nil) }
                throw ExperimentError(.io, "executor: ray: node \(at) did not run a request (exit \(exit)); \(Self.ending)")
            }
            do {
                if oversized { throw ExperimentError(.refused, "the answer is over \(WorkLimits.maxAnswer) bytes") }
                return (.done, try RemoteWork.check(bytes, for: request, answerKey: answerKey))
            } catch {
                let reason = heldOut ? "a held-out answer that is not valid\(oversized ? " (oversized)" : "")" : "\(error)"
                guard !excludedFor[i] else {
                    throw ExperimentError(.io, "executor: ray: a request (\(what)) was answered badly by a second node (\(at)); no node is excluded for it; \(Self.ending)")
                }
                excludedFor[i] = true
                let address = addresses[node] ?? "?"
                try record(NodeExcludedRecord(address: address, node: node, reason: String(reason.prefix(600)), heldOut: heldOut))
                log("executor: ray: node \(at) (\(node.prefix(12))) answered badly (\(Self.shown(reason))); excluded from this experiment")
                let sameAddress = addresses.filter { $0.value == address }.map(\.key).sorted()
                outOfBatch.formUnion(sameAddress + [node])
                // A train request goes to another node; a held-out one ends the gate (its tasks
                // ran: running them again would be a second look).
                if !heldOut { return (Settlement(exclude: Array(Set(sameAddress + [node])).sorted(), resend: true), nil) }
                throw ExperimentError(.io, "executor: ray: node \(at) answered a held-out request badly and is excluded; \(Self.ending)")
            }
        }
    }
}
