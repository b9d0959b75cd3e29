import ArgumentParser
import Benchmark
import Execution
import Experiment
import ExperimentModel
import Foundation
import SandboxCLI
import SupervisorIO

/// `autoharness worker`: on a node of a Ray cluster, run one signed work request from the
/// supervisor (stdin) and write the answer (stdout, JSON). Started by the node's Ray task
/// (templates/ray/autoharness_ray.py), or by hand to test a node.
struct WorkerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker",
        abstract: "On a worker node: run one signed work request (stdin) and answer (stdout).",
        discussion: """
            The request runs only if its signature is the supervisor's (--supervisor-key, the \
            base64 public key `autoharness worker-key` prints on the supervisor's host), it was \
            never run on this node, and this node's autoharness binary and policies are the \
            supervisor's, byte for byte. Its tasks run with this node's sandboxes, exactly as \
            on the supervisor's host; nothing of them is kept. A held-out request runs only if \
            this host passes the checks `--check` reports (the driver sends held-out requests \
            only to nodes whose report passed); one that names VM settings runs in a fresh \
            virtual machine on this node (the guest kernel in the settings' kernel directory, \
            qemu from scripts/install-vm), destroyed before the answer. Exit status: 0 answered, 2 \
            refused (signature, replay, digests, a malformed request), 5 I/O.
            """)

    @Option(help: "File holding the supervisor's public key (base64, from `autoharness worker-key`); required but with --check.")
    var supervisorKey: String?

    @Option(help: "Directory for the node's state (nonces seen, each request's private directory while it runs).")
    var state = "/var/lib/autoharness/worker"

    @Option(help: "Per-task tmpfs scratch root.")
    var scratch = "/dev/shm/autoharness"

    @Option(name: .customLong("policy-dir"), help: "Directory of sandbox policies, searched before the built-in ones.")
    var policyDirs: [String] = []

    @Flag(help: "Print this node's report (its binary's and policies' digests, what the host checks find missing for --check-policy, its sealing key's public half, made in --state on first use) as JSON and exit; no request is read.")
    var check = false

    @Option(name: .customLong("check-policy"), help: "With --check: a policy requests will run under (repeatable; default benchmark-task and verifier).")
    var checkPolicies: [String] = []

    @Option(name: .customLong("check-path"), help: "With --check: a path the requests' tool needs on this node (repeatable); the report names each one missing.")
    var checkPaths: [String] = []

    @Option(name: .customLong("check-digest"), help: "With --check: a file of the requests' tool that decides rewards (repeatable, in the supervisor's order); the report gives the digest of them all (toolSHA256), which must be the supervisor's.")
    var checkDigest: [String] = []

    @Option(name: .customLong("check-image"), help: "With --check: a task image's archive digest (repeatable); the report lists those this node holds unpacked.")
    var checkImages: [String] = []

    @Option(name: .customLong("check-verifier-tools"), help: "With --check: the verifier tools' directory requests name; the report gives their digest, or the problem with them.")
    var checkVerifierTools: String?

    @Flag(name: .customLong("check-databases"), help: "With --check: read from stdin the template databases to fingerprint on this node's PostgreSQL (bird-interact: JSON naming the socket directory, the run's environment, env_pass and the databases; the login may hold a password, so never in argv); the report gives each one's fingerprint.")
    var checkDatabases = false

    @Option(name: .customLong("receive-image"), help: "Take one task image: the supervisor's signed offer (base64, from the Ray driver) here, its encrypted archive on stdin; unpacked into --state only if the offer is signed with --supervisor-key, sealed to this node, and the archive is the one it names.")
    var receiveImage: String?

    @Option(name: .customLong("check-vm"), help: "With --check: the held-out VM settings (JSON, as the supervisor sends them for gate.held_out_runtime: vm); the report then says whether such a VM can run here (qemu, the guest kernel, KVM or consent to emulate).")
    var checkVM: String?

    func run() throws {
        let searchPaths = PolicyLocator.searchPaths(explicit: policyDirs)
        if check {
            var vm: VMSettings?
            if let checkVM {
                do { vm = try JSONDecoder().decode(VMSettings.self, from: Data(checkVM.utf8)) } catch {
                    throw ExperimentError(.usage, "--check-vm: not the VM settings' JSON", cause: error)
                }
            }
            var databases: BirdDatabases.Check?
            if checkDatabases {
                switch InputFile.read(descriptor: 0, cap: 1 << 20) {
                case .success(let bytes):
                    do { databases = try JSONDecoder().decode(BirdDatabases.Check.self, from: Data(bytes)) } catch {
                        throw ExperimentError(.usage, "--check-databases: stdin is not the databases' check (JSON)", cause: error)
                    }
                case .failure(let p): throw ExperimentError(.usage, "--check-databases: stdin: \(p.explanation("the databases' check"))")
                }
            }
            let report = try NodeCheck.report(policies: checkPolicies.isEmpty ? ["benchmark-task", "verifier"] : checkPolicies, searchPaths: searchPaths,
                                              stateDirectory: state, vm: vm, scratchRoot: scratch, paths: checkPaths, digest: checkDigest,
                                              images: checkImages, verifierTools: checkVerifierTools, databases: databases)
            FileHandle.standardOutput.write(try JSONEncoder().encode(report))
            return
        }
        guard let supervisorKey else { throw ExperimentError(.usage, "--supervisor-key: missing (the file with the supervisor's public key)") }
        let key: String
        switch InputFile.read(supervisorKey, cap: 4096) {
        case .success(let bytes): key = String(decoding: bytes, as: UTF8.self)
        case .failure(let p): throw ExperimentError(.usage, "--supervisor-key \(supervisorKey): \(p.explanation("the key"))")
        }
        if let receiveImage {
            guard let offer = Data(base64Encoded: receiveImage) else { throw ExperimentError(.refused, "--receive-image: not base64") }
            let path = try NodeImageStore.receive(Array(offer), input: 0, trusted: key, state: state, scratchRoot: scratch)
            print(path)
            return
        }
        var input: [UInt8] = []
        switch InputFile.read(descriptor: 0, cap: WorkLimits.maxRequest) {
        case .success(let bytes): input = bytes
        case .failure(let p): throw ExperimentError(.refused, "the request on stdin: \(p.explanation("a work request"))")
        }
        var settings = RemoteWorker.Settings(trustedKey: key, policySearchPaths: searchPaths,
                                             stateDirectory: state, scratchRoot: scratch)
        settings.log = { printErr("autoharness worker: \($0)") }
        FileHandle.standardOutput.write(Data(try RemoteWorker.answer(input, settings)))
    }
}

/// `autoharness worker-key`: the experiment's work-signing key's public half, for the nodes'
/// operators (created on first use, in the experiment's private directory).
struct WorkerKeyCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "worker-key",
        abstract: "Print the public key worker nodes trust for this experiment's work requests.")

    @OptionGroup var experiment: ExperimentOptions

    func run() throws {
        let layout = try experiment.layout()
        print(WorkKey.publicText(try WorkKey.load(orCreateAt: layout.privateDirectory + "/work-key")))
    }
}
