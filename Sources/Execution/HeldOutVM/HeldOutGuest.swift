import Benchmark
import ExperimentModel
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
        // A guest restored from a saved state has the saved generator: the host's fresh bytes
        // (stage 2 left them in /.ahvm/seed) are credited to the pool and the generator is
        // reseeded from it, before the gate's code draws from it.
        try reseedRandom(seedFile: "/.ahvm/seed")
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
        let config = try request.node?.config ?? ExperimentConfig.load(request.configPath)
        let adapter = try config.makeAdapter(root: request.experimentRoot, checkTools: false)
        let agent = AuditLog(), tool = AuditLog()
        // The guest's kernel is discarded after the phase: nothing to evict here (the host
        // evicts what qemu read).
        let here = LocalExecution(adapter: adapter, policyLoader: PolicyLoader(searchPaths: request.policySearchPaths),
                                  scratchRoot: config.scratch, concurrency: request.concurrency, log: log, evictionJournal: nil, withheld: "sent")
        let slots = Dictionary(request.ids.enumerated().map { ($0.element, $0.offset) }, uniquingKeysWith: { a, _ in a })
        let all = try here.run(request.ids, agentDirectory: request.agentDirectory, split: .heldOut, audit: (agent, tool),
                               oneTaskPerRun: request.oneTaskPerRun) { context in
            context.guestEgress = egress.map { GuestEgress(link: $0, trustBundle: request.trustBundle, slots: request.oneTaskPerRun ? slots : [:]) }
        }
        try write(port, GuestAnswer.encodeBody(all, agent: agent, tool: tool))
    }

    /// The hex seed in `seedFile` credited to the kernel's pool (RNDADDENTROPY, 8 bits a
    /// byte) and the generator reseeded from the pool (RNDRESEEDCRNG, Linux 4.17+); root in
    /// the guest. The file is removed. A failure fails the phase.
    static func reseedRandom(seedFile: String) throws {
        guard case .success(let text) = InputFile.read(seedFile, cap: 4096) else {
            throw ExperimentError(.state, "\(seedFile): no seed from the host")
        }
        unlink(seedFile)
        let hex = String(decoding: text, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        var seed: [UInt8] = []
        var i = hex.startIndex
        while i < hex.endIndex, let j = hex.index(i, offsetBy: 2, limitedBy: hex.endIndex), let b = UInt8(hex[i..<j], radix: 16) {
            seed.append(b)
            i = j
        }
        guard seed.count >= 32 else { throw ExperimentError(.state, "\(seedFile): the host's seed is \(seed.count) bytes, not 32") }
        let fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { throw ExperimentError(.io, "/dev/urandom: \(ErrnoName.describe(errno))") }
        defer { close(fd) }
        // struct rand_pool_info: entropy_count (bits), buf_size (bytes), then the bytes.
        var info = [UInt8](repeating: 0, count: 8 + seed.count)
        withUnsafeBytes(of: Int32(seed.count * 8).littleEndian) { info.replaceSubrange(0..<4, with: $0) }
        withUnsafeBytes(of: Int32(seed.count).littleEndian) { info.replaceSubrange(4..<8, with: $0) }
        info.replaceSubrange(8..., with: seed)
        let added = info.withUnsafeMutableBytes { ioctl(fd, UInt(0x4008_5203), $0.baseAddress!) }
        guard added == 0 else { throw ExperimentError(.io, "RNDADDENTROPY: \(ErrnoName.describe(errno))") }
        guard ioctl(fd, UInt(0x5207)) == 0 else { throw ExperimentError(.io, "RNDRESEEDCRNG: \(ErrnoName.describe(errno))") }
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
