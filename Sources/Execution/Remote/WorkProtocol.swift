import Benchmark
import Crypto
import ExperimentModel
import Foundation
import Glibc
import SupervisorIO

/// Tasks the supervisor sends to a worker node (through Ray) and the node's answer.
///
/// The node runs a request only if it is signed with the key the node trusts (the
/// supervisor's, `autoharness worker --supervisor-key`), its own autoharness binary is the
/// supervisor's byte for byte, and its policies are the supervisor's: it then runs the tasks
/// with the same launcher, policies, cgroups and audit as a local run, and keeps nothing.
public struct WorkRequest: Codable, Sendable, Equatable {
    public static let version = 1
    public var version = WorkRequest.version
    /// Fresh per request: the answer names it, and a node refuses one it has run.
    public var nonce: String
    /// Unix time after which no node runs it (a request captured on the way is useless later).
    public var expires: Double = 0
    /// Held-out tasks: the answer carries rewards, statuses and violation counts only.
    public var heldOut: Bool
    /// SHA-256 (hex) of the supervisor's autoharness executable and of its policies.
    public var binarySHA256: String
    public var policiesSHA256: String
    public var taskPolicy: String
    public var verifierPolicy: String
    public var defaultAgentTimeout: Double?
    /// A held-out request's node: the public half of its sealing key (base64), the only key
    /// that opens the request, signed in so that no other node runs it.
    public var sealedTo: String?
    /// A held-out request's answer is sealed to this key (base64 X25519, the supervisor's for
    /// this batch): ids, rewards and statuses cross Ray only as ciphertext.
    public var answerTo: String?
    /// A held-out request's VM (`gate.held_out_runtime: vm`): the node runs its tasks in a
    /// fresh virtual machine of these settings (its kernel from `kernelDirectory` on the node),
    /// destroyed before the answer; nil runs them in the node's own sandboxes.
    public var vm: VMSettings?
    public var concurrency: Int
    /// A benchmark run by its own tool (`NodeTool`): the node runs the tool on the request's
    /// ids (its `tasks`, each without files) in its own sandboxes; nil for a local benchmark.
    public var tool: NodeTool?
    /// `benchmark: terminal-bench` (`env_provider: local`): how Harbor runs each task's agent
    /// phase (`HarborNode`); the tasks travel with their files, as a local benchmark's. Nil
    /// for every other benchmark.
    public var harbor: HarborNode?
    /// The digest of the tool's files a reward depends on (`NodeTool.digestedFiles`, by
    /// `WorkDigest.files`), or of Harbor's environment module (`HarborNode.digestedFiles`), as
    /// the supervisor holds them: a node whose copies differ refuses.
    public var toolSHA256: String?
    /// Each task in a tool run of its own, its own inference gate counting what the model vendor
    /// failed (`gate.infra_retries`); a held-out answer then carries each task's count.
    public var oneTaskPerRun: Bool?
    /// `sandbox.verifier_tools` (the toolbox's directory, the same on every node): the node's
    /// verifiers mount it as the supervisor's do; nil: none.
    public var verifierTools: String?
    /// Their digest (`WorkDigest.tree`) as the supervisor holds them: a node whose differ refuses.
    public var verifierToolsSHA256: String?
    /// The agent.py under evaluation.
    public var agentPy: Data
    /// The requested tasks' directories (local benchmark layout), file by file.
    public var tasks: [WorkTask]

    public init(nonce: String, heldOut: Bool, binarySHA256: String, policiesSHA256: String, taskPolicy: String,
                verifierPolicy: String, concurrency: Int, agentPy: Data, tasks: [WorkTask]) {
        self.nonce = nonce
        self.heldOut = heldOut
        self.binarySHA256 = binarySHA256
        self.policiesSHA256 = policiesSHA256
        self.taskPolicy = taskPolicy
        self.verifierPolicy = verifierPolicy
        self.concurrency = concurrency
        self.agentPy = agentPy
        self.tasks = tasks
    }
}

public struct WorkTask: Codable, Sendable, Equatable {
    public var id: String
    public var files: [WorkFile]
    /// The image the task runs on (`autoharness images`), by its archive's digest: the node
    /// must hold it (`NodeImageStore`); nil runs it on the node's userland.
    public var image: WorkImage?
    /// Why the supervisor could not have the task's image (`TaskImages.refused`): the node
    /// refuses the task with it, as the supervisor's host does, never runs it elsewhere.
    public var imageRefused: String?
    public init(id: String, files: [WorkFile]) {
        self.id = id
        self.files = files
    }
}

/// One regular file, by its path relative to its task (or trace) directory.
public struct WorkFile: Codable, Sendable, Equatable {
    public var path: String
    public var executable: Bool
    public var bytes: Data
    public init(path: String, executable: Bool, bytes: Data) {
        self.path = path
        self.executable = executable
        self.bytes = bytes
    }
}

/// A request as it travels: its JSON bytes and their Ed25519 signature; a held-out request's
/// bytes sealed to its node (`sealed`, `body` then empty), so that neither Ray's object store
/// nor a disk it spills to holds held-out task files in the clear.
public struct SignedWork: Codable, Sendable {
    public var body: Data
    public var signature: Data
    public var sealed: SealedBody?
}

/// A body only one node can open: X25519 with a fresh ephemeral key, HKDF-SHA256, ChaCha20-Poly1305.
public struct SealedBody: Codable, Sendable {
    public var ephemeral: Data
    public var box: Data
}

/// An answer only the supervisor that asked can open (to a request with `answerTo`).
public struct SealedAnswer: Codable, Sendable {
    public var sealed: SealedBody
}

/// A worker node's sealing key (X25519), made on first use in its state directory (0600);
/// `autoharness worker --check` reports the public half.
public enum NodeSealKey {
    static let info = Array("autoharness sealed work request v1".utf8)
    static let answerInfo = Array("autoharness sealed work answer v1".utf8)

    public static func load(orCreateAt path: String) throws -> Curve25519.KeyAgreement.PrivateKey {
        try KeyFile.load(path, what: "the node's sealing key", parse: { try? Curve25519.KeyAgreement.PrivateKey(rawRepresentation: $0) },
                         make: { Curve25519.KeyAgreement.PrivateKey() }, raw: { $0.rawRepresentation })
    }

    public static func publicText(_ key: Curve25519.KeyAgreement.PrivateKey) -> String {
        key.publicKey.rawRepresentation.base64EncodedString()
    }

    static func symmetric(_ secret: SharedSecret, ephemeral: Data, recipient: Data, info: [UInt8]) -> SymmetricKey {
        secret.hkdfDerivedSymmetricKey(using: SHA256.self, salt: ephemeral + recipient, sharedInfo: info, outputByteCount: 32)
    }

    /// `body` sealed to the holder of the X25519 key whose public half is `recipient` (base64).
    static func seal(_ body: Data, to recipient: String, info: [UInt8] = NodeSealKey.info) throws -> SealedBody {
        guard let raw = Data(base64Encoded: recipient), let key = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: raw) else {
            throw ExperimentError(.refused, "the node's sealing key is not a base64 X25519 public key")
        }
        let ephemeral = Curve25519.KeyAgreement.PrivateKey()
        let secret = try ephemeral.sharedSecretFromKeyAgreement(with: key)
        let box = try ChaChaPoly.seal(body, using: symmetric(secret, ephemeral: ephemeral.publicKey.rawRepresentation, recipient: raw, info: info))
        return SealedBody(ephemeral: ephemeral.publicKey.rawRepresentation, box: box.combined)
    }

    /// The body, if `sealed` was sealed to `key`; nil otherwise.
    static func open(_ sealed: SealedBody, with key: Curve25519.KeyAgreement.PrivateKey, info: [UInt8] = NodeSealKey.info) -> Data? {
        guard let peer = try? Curve25519.KeyAgreement.PublicKey(rawRepresentation: sealed.ephemeral),
              let secret = try? key.sharedSecretFromKeyAgreement(with: peer),
              let box = try? ChaChaPoly.SealedBox(combined: sealed.box) else { return nil }
        return try? ChaChaPoly.open(box, using: symmetric(secret, ephemeral: sealed.ephemeral, recipient: key.publicKey.rawRepresentation, info: info))
    }
}

/// A private key kept in a file of its own (0600): read, or made when (and only when) the
/// file does not exist, never silently replaced.
package enum KeyFile {
    /// An Ed25519 signing key as 32 raw bytes (the work-request key, the evidence key).
    package static func ed25519(orCreateAt path: String) throws -> Curve25519.Signing.PrivateKey {
        try load(path, what: "an Ed25519 private key", parse: { try? Curve25519.Signing.PrivateKey(rawRepresentation: $0) },
                 make: { Curve25519.Signing.PrivateKey() }, raw: { $0.rawRepresentation })
    }

    static func load<Key>(_ path: String, what: String, parse: (Data) -> Key?, make: () -> Key, raw: (Key) -> Data) throws -> Key {
        switch InputFile.read(path, cap: 4096) {
        case .success(let bytes):
            guard let key = parse(Data(bytes)) else { throw ExperimentError(.state, "\(path) is not \(what) (32 bytes)") }
            return key
        case .failure(let p):
            guard access(path, F_OK) != 0 && errno == ENOENT else {
                throw ExperimentError(.io, "\(path): \(p.explanation(what))")
            }
            let key = make()
            try AtomicFile.write(Array(raw(key)), to: path, mode: 0o600)
            return key
        }
    }
}

/// What a node answers.
public struct WorkAnswer: Codable, Sendable, Equatable {
    public var nonce: String
    /// One per requested task, in the request's order.
    public var outcomes: [TaskOutcome]
    /// Train requests only: each task's trace, file by file.
    public var traces: [String: [WorkFile]] = [:]
    /// The node's sandboxes' refusals and limits (agent.py's and the verifier's), counted.
    public var violations: [WorkViolation] = []
}

/// Refusals and limit events of one kind and name on a node.
public struct WorkViolation: Codable, Sendable, Equatable {
    /// In a sandbox holding agent.py (else the verifier's).
    public var agent: Bool
    public var kind: String
    public var name: String
    public var count: Int

    /// A train answer's name: printable text (no control character) of at most
    /// `WorkLimits.maxTrainName` bytes.
    static func isTrainName(_ s: String) -> Bool {
        !s.isEmpty && s.utf8.count <= WorkLimits.maxTrainName && s.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value != 0x7f && !(0x80...0x9f).contains($0.value) }
    }
}

/// The limits a node and the supervisor hold each other to.
public enum WorkLimits {
    /// A signed request (tasks and agent.py, base64 in JSON).
    public static let maxRequest = 64 << 20
    /// An answer (train traces included).
    public static let maxAnswer = 64 << 20
    /// One file of a task or a trace.
    public static let maxFile = 16 << 20
    public static let maxFilesPerTask = 10_000
    /// Violation lines in one answer, and the length of a violation's name.
    public static let maxViolations = 1000
    public static let maxName = 128
    /// A train answer's violation name (a path, a link and its target).
    public static let maxTrainName = 512
    public static let maxViolationCount = 1_000_000_000
}

/// The experiment's signing key for work requests: Ed25519, created on first use in the
/// experiment's private directory (0600); nodes trust its public half.
public enum WorkKey {
    public static func load(orCreateAt path: String) throws -> Curve25519.Signing.PrivateKey { try KeyFile.ed25519(orCreateAt: path) }

    /// The public half as operators write it into a node's key file (base64, one line).
    public static func publicText(_ key: Curve25519.Signing.PrivateKey) -> String {
        key.publicKey.rawRepresentation.base64EncodedString()
    }

    /// What the signature covers besides the body: its purpose, so a signature made with the
    /// key for anything else is never a work request's.
    static let domain = Array("autoharness work request v1\0".utf8)

    /// The request signed; sealed to the node whose sealing key is `sealTo` (base64), which
    /// is signed in as `sealedTo`.
    public static func sign(_ request: WorkRequest, with key: Curve25519.Signing.PrivateKey, sealTo: String? = nil) throws -> [UInt8] {
        var request = request
        request.sealedTo = sealTo
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        let body = try encoder.encode(request)
        let signature = try key.signature(for: domain + Array(body))
        guard let sealTo else { return Array(try JSONEncoder().encode(SignedWork(body: body, signature: signature))) }
        return Array(try JSONEncoder().encode(SignedWork(body: Data(), signature: signature, sealed: try NodeSealKey.seal(body, to: sealTo))))
    }

    /// The request, if `bytes` is one signed by `trusted` (base64 public key) and, if sealed,
    /// sealed to `node`; otherwise an error saying what is wrong (and nothing of the request
    /// is used). A held-out request must be sealed to this node.
    public static func open(_ bytes: [UInt8], trusted: String, node: Curve25519.KeyAgreement.PrivateKey? = nil) throws -> WorkRequest {
        guard let raw = Data(base64Encoded: trusted.trimmingCharacters(in: .whitespacesAndNewlines)),
              let key = try? Curve25519.Signing.PublicKey(rawRepresentation: raw) else {
            throw ExperimentError(.usage, "the supervisor key is not a base64 Ed25519 public key")
        }
        guard let signed = try? JSONDecoder().decode(SignedWork.self, from: Data(bytes)) else {
            throw ExperimentError(.refused, "the request is not a signed work request")
        }
        var body = signed.body
        if let sealed = signed.sealed {
            guard let node, let opened = NodeSealKey.open(sealed, with: node) else {
                throw ExperimentError(.refused, "the request is sealed to another node: refused, nothing ran")
            }
            body = opened
        }
        guard key.isValidSignature(signed.signature, for: domain + Array(body)) else {
            throw ExperimentError(.refused, "the request's signature is not the supervisor's: refused, nothing ran")
        }
        let request: WorkRequest
        do {
            request = try JSONDecoder().decode(WorkRequest.self, from: body)
        } catch {
            throw ExperimentError(.refused, "the signed request does not decode", cause: error)
        }
        guard request.version == WorkRequest.version else {
            throw ExperimentError(.refused, "request version \(request.version); this node speaks \(WorkRequest.version)")
        }
        // Signed for one node: no other runs it, sealed or not.
        if let to = request.sealedTo, to != node.map(NodeSealKey.publicText) {
            throw ExperimentError(.refused, "the request is for another node: refused, nothing ran")
        }
        guard !request.heldOut || (signed.sealed != nil && request.sealedTo != nil) else {
            throw ExperimentError(.refused, "a held-out request must be sealed to this node: refused, nothing ran")
        }
        return request
    }
}
