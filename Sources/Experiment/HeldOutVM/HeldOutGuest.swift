import Benchmark
import Foundation
import Sandbox
import SandboxPolicy
import SupervisorIO

/// The guest's side of a held-out VM (`autoharness vm-guest`, run by the guest's init): the
/// same adapter, policies and launcher as a host run, on the guest's own kernel. Its answer
/// carries only rewards, status classes and violation counts (`GuestAnswer`).
public enum HeldOutGuest {
    /// Runs the request at `requestPath` and writes the answer to `answerPath` (the results
    /// port). Throws when there is nothing to answer; the host then reads a missing `end`.
    public static func serve(requestPath: String, answerPath: String, egressPath: String?, log: @escaping @Sendable (String) -> Void) throws {
        // A guest restored from a saved state has the saved generator: reseed it from the pool,
        // into which stage 2 mixed the host's fresh bytes, before anything draws from it.
        reseedRandom()
        let port = open(answerPath, O_WRONLY | O_NOCTTY | O_CLOEXEC)
        guard port >= 0 else { throw ExperimentError(.io, "\(answerPath): \(ErrnoName.describe(errno))") }
        defer { close(port) }
        try write(port, GuestAnswer.header)
        let bytes: [UInt8]
        switch InputFile.read(requestPath, cap: 4 << 20) {
        case .success(let b): bytes = b
        case .failure(let p): throw ExperimentError(.io, "\(requestPath): \(p.explanation("the request"))")
        }
        let request = try JSONDecoder().decode(GuestRequest.self, from: Data(bytes))
        guard request.version == GuestRequest.version else {
            throw ExperimentError(.state, "request version \(request.version), this binary speaks \(GuestRequest.version)")
        }
        for (name, value) in request.environment { setenv(name, value, 1) }
        // The sandboxes' egress: one link over the egress port to the host's proxy, which
        // judges every connection (the guest only forwards).
        var egress: EgressLink?
        if request.egress {
            guard let egressPath else { throw ExperimentError(.state, "the request needs egress and the guest has no egress port") }
            let fd = open(egressPath, O_RDWR | O_NOCTTY | O_CLOEXEC)
            guard fd >= 0 else { throw ExperimentError(.io, "\(egressPath): \(ErrnoName.describe(errno))") }
            let link = EgressLink(port: fd, role: .opener)
            link.start()
            egress = link
        }
        defer { egress?.stop() }
        try request.services.start(log: log)
        let config = try ExperimentConfig.load(request.configPath)
        let adapter = try config.makeAdapter(root: request.experimentRoot, checkTools: false)
        let agent = AuditLog(), tool = AuditLog()
        var context = AdapterRunContext(policyLoader: PolicyLoader(searchPaths: request.policySearchPaths),
                                        agentDirectory: request.agentDirectory, scratchRoot: config.scratch, audit: agent,
                                        heldOut: true, concurrency: request.concurrency, traceDirectory: { _ in nil })
        context.toolAudit = tool
        context.log = log
        context.guestEgress = egress.map { GuestEgress(link: $0, trustBundle: request.trustBundle) }
        let outcomes = try adapter.run(request.ids, context)
        if let failure = context.writeFailures.failure { throw ExperimentError(.io, "\(failure)") }
        // One outcome per requested id, as on the host: a task the adapter left out scores 0.
        let byID = Dictionary(outcomes.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        let all = request.ids.map { byID[$0] ?? TaskOutcome(id: $0, reward: 0, status: .missingResult) }
        try write(port, GuestAnswer.encodeBody(all, agent: agent, tool: tool))
    }

    /// RNDRESEEDCRNG on /dev/urandom (Linux 4.17+; root in the guest).
    static func reseedRandom() {
        let fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = ioctl(fd, UInt(0x5207))
        close(fd)
    }

    static func write(_ fd: Int32, _ text: String) throws {
        var bytes = Array(text.utf8)[...]
        while !bytes.isEmpty {
            let n = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw ExperimentError(.io, "results port: \(ErrnoName.describe(errno))")
            }
            bytes = bytes.dropFirst(n)
        }
    }
}
