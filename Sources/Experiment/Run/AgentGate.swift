import Benchmark
import ExperimentModel
import Foundation
import Sandbox
import SandboxPolicy
import SupervisorIO

/// The coding agent's model API through an inference gate of the run's own
/// (`sandbox.network.inference`), as the runner's and the triage's already are: the gate holds
/// the real keys the agent is passed and the sandbox a placeholder of each, swapped back only
/// on requests to the gate's targets that its rules passed (stateless calls, `store` off, no
/// vendor-run tools, no stored objects). The agent's own prompt cache stays allowed: its key
/// is never a held-out run's unless the operator set `gate.shared_vendor_account: true`
/// (`checkHeldOutAccount`). One gate for the whole run, so a placeholder and the CA stay the
/// same across the agent's restarts.
struct AgentGate: Sendable {
    let gate: InferenceGate
    /// The bundle the sandbox trusts (the system's store, the operator's own, the gate's CA),
    /// in the run's directory.
    let bundleFile: String
    /// The variables whose values the gate holds, as the sandbox sees them by name.
    let placeholderNames: [String]

    /// Where the sandbox sees the bundle: where the runner's and the triage's see theirs.
    static let sandboxPath = EvidenceTool.trustBundlePath

    /// The run's gate, or nil when the coding agent reaches no model API through one. Refuses
    /// a run whose key would reach the sandbox some other way than a passed variable (a
    /// constant, the policy's own `env.set`, the command line, a file of `home_seed`).
    static func make(_ config: ExperimentConfig, policy: Policy, command: [String], root: String, runDirectory: String,
                     host: [String: String], log: (String) -> Void) throws -> AgentGate? {
        let names = credentialNames(config, policy: policy, host: host)
        let unset = names.filter { (host[$0] ?? "").isEmpty }
        let held = names.filter { !(host[$0] ?? "").isEmpty }
        let keys = Set(held.compactMap { host[$0] })
        try refuseCopies(of: keys, config: config, policy: policy, command: command, root: root)
        guard !config.agentInference.isEmpty else {
            if !held.isEmpty {
                log("warning: the coding agent is passed \(held.joined(separator: ", ")) and sandbox.network.inference is empty: its sandbox holds the real value (list its model API under sandbox.network.inference for a placeholder)")
            }
            return nil
        }
        if !unset.isEmpty {
            log("warning: \(unset.joined(separator: ", ")) not set: the coding agent's requests carry whatever credential it has itself, which the gate does not check")
        }
        let gate: InferenceGate
        do throws(SandboxError) {
            gate = try InferenceGate(targets: config.agentInference, upstreamCAFile: config.agentUpstreamCA, credentials: keys,
                                     masksBodyPlaceholders: true)
        } catch {
            let key = config.agentUpstreamCA != nil && error.message.contains(config.agentUpstreamCA!) ? "upstream_ca" : "inference"
            throw ExperimentError(.usage, "\(config.agentNetworkPlace.map { $0 + ": " } ?? "")sandbox.network.\(key)", cause: error)
        }
        let file = runDirectory + "/inference-ca.pem"
        let bundle = try trustBundle(gate, config: config, host: host)
        do throws(IOFailure) {
            try AtomicFile.write(bundle, to: file, mode: 0o644)
        } catch {
            throw ExperimentError(.io, file, cause: error)
        }
        log("coding agent's model API through the run's inference gate: \(config.agentInference.joined(separator: ", "))"
            + (held.isEmpty ? "" : "; in its sandbox \(held.joined(separator: ", ")) hold placeholders"))
        return AgentGate(gate: gate, bundleFile: file, placeholderNames: held)
    }

    /// The variables the agent is passed (`coding_agent.env_pass`, the policy's `env.pass`)
    /// that hold a key: a key's name (`_KEY`, `_TOKEN`, ...) or a value of a vendor's key shape
    /// (`sk-ant-…`, whatever the name), but those named in `sandbox.network.tunnelled_keys`.
    static func credentialNames(_ config: ExperimentConfig, policy: Policy? = nil, host: [String: String] = [:]) -> [String] {
        var seen = Set<String>()
        return (config.codingAgent.envPass + (policy?.env.pass ?? [])).filter { name in
            guard seen.insert(name).inserted, !config.agentTunnelledKeys.contains(name), !InferenceGate.trustVariables.contains(name) else { return false }
            return InferenceGate.isCredentialVariable(name) || host[name].map(InferenceGate.looksLikeKey) == true
        }
    }

    /// Refuses a key that would reach the sandbox as it is: a constant of `coding_agent.env` or
    /// of the policy's `env.set` that is one of `keys` or looks like a key, the command line
    /// holding one, a `home_seed` file holding one (`.codex/auth.json` with the key in it).
    static func refuseCopies(of keys: Set<String>, config: ExperimentConfig, policy: Policy, command: [String], root experiment: String) throws {
        func isKey(_ value: String) -> Bool { InferenceGate.looksLikeKey(value) || keys.contains { !$0.isEmpty && value.contains($0) } }
        let fix = "pass a key by name in coding_agent.env_pass, where the sandbox gets a placeholder"
        for (name, value) in config.codingAgent.env.sorted(by: { $0.key < $1.key }) where isKey(value) {
            throw ExperimentError(.usage, "coding_agent.env.\(name): holds an API key, which would enter the coding agent's sandbox as it is: \(fix)")
        }
        for (name, value) in policy.env.set.sorted(by: { $0.key < $1.key }) where isKey(value) {
            throw ExperimentError(.usage, "the coding agent's policy \(policy.name): env.set \(name) holds an API key, which would enter its sandbox as it is: \(fix)")
        }
        if let i = command.firstIndex(where: { arg in keys.contains { !$0.isEmpty && arg.contains($0) } }) {
            throw ExperimentError(.usage, "the coding agent's command (argument \(i + 1)) holds the value of an API key it is passed; its command line is readable in its sandbox and is recorded: \(fix)")
        }
        guard let seed = config.codingAgent.homeSeed, !keys.isEmpty else { return }
        let root = seed.hasPrefix("/") ? seed : experiment + "/" + seed
        if let file = SeedScan.firstFile(under: root, containingAnyOf: keys) {
            throw ExperimentError(.usage, "coding_agent.home_seed: \(file) holds the value of an API key the coding agent is passed, and is copied into its sandbox as it is: \(fix)")
        }
    }

    /// What the sandbox trusts: the system's store, the operator's own bundle (the first set
    /// trust variable passed or set for the agent: Node's variable adds to the store, so the
    /// store stays), then the gate's CA.
    static func trustBundle(_ gate: InferenceGate, config: ExperimentConfig, host: [String: String]) throws -> [UInt8] {
        let passed = config.codingAgent.envPass.lazy.filter { InferenceGate.trustVariables.contains($0) }.compactMap { host[$0] }.first { !$0.isEmpty }
        let own = passed ?? InferenceGate.trustVariables.lazy.compactMap { config.codingAgent.env[$0] }.first { !$0.isEmpty }
        var bundle: [UInt8] = []
        if let own, own != InferenceGate.systemBundle {
            switch InputFile.read(own, cap: 4 << 20) {
            case .success(let b): bundle = b + (b.last == 0x0A || b.isEmpty ? [] : [0x0A])
            case .failure(let p): throw ExperimentError(.usage, "coding_agent: the CA bundle the agent is pointed at, \(own): \(p.explanation("a CA bundle"))")
            }
        }
        switch gate.trustBundle(base: InferenceGate.systemBundle) {
        case .success(let b): return bundle + b
        case .failure(let e): throw ExperimentError(.io, "the system's CA store: \(e.message)")
        }
    }

    /// The sandbox's side: the bundle bound read-only and named by every trust variable (set
    /// last, so they win over the operator's), and every variable of the supervisor's
    /// environment that holds one of the gate's keys replaced by that key's placeholder,
    /// whichever name passes it in (`env_pass`, or a custom policy's `env.pass`).
    func apply(_ overrides: inout PlanOverrides, host: inout [String: String]) {
        overrides.mounts.append(MountSpec(kind: .readOnly(source: bundleFile), destination: Self.sandboxPath))
        overrides.environment += InferenceGate.trustVariables.map { "\($0)=\(Self.sandboxPath)" }
        for (name, value) in host {
            if let p = gate.placeholder(for: value) { host[name] = p }
        }
    }
}

/// A bounded look through `home_seed` for a key's value (files an operator put there by hand:
/// a CLI's auth file).
enum SeedScan {
    static let maxFiles = 2000
    static let maxBytes = 1 << 20

    /// The first regular file under `root` (links not followed) whose first `maxBytes` hold one
    /// of `needles`, relative to `root`; nil if none (or `root` is missing).
    static func firstFile(under root: String, containingAnyOf needles: Set<String>) -> String? {
        guard let walk = FileManager.default.enumerator(atPath: root) else { return nil }
        var files = 0
        while let rel = walk.nextObject() as? String, files < maxFiles {
            let path = root + "/" + rel
            var st = stat()
            guard lstat(path, &st) == 0, (st.st_mode & S_IFMT) == S_IFREG else { continue }
            files += 1
            guard case .success(let bytes) = InputFile.read(path, cap: maxBytes) else { continue }
            let text = String(decoding: bytes, as: UTF8.self)
            if needles.contains(where: { !$0.isEmpty && text.contains($0) }) { return rel }
        }
        return nil
    }
}
