import Benchmark
import Foundation
import Sandbox
import SandboxPolicy
import SupervisorIO

/// The coding agent's model API through an inference gate of the run's own
/// (`sandbox.network.inference`), as the runner's and the triage's already are: the gate holds
/// the real keys of `coding_agent.env_pass` and the sandbox a placeholder of each, swapped back
/// only on requests to the gate's targets that its rules passed (stateless calls, `store` off,
/// no vendor-run tools, no stored objects). The agent's own prompt cache stays allowed: its
/// key is never a held-out run's (`checkHeldOutAccount`). One gate for the whole run, so a
/// placeholder and the CA stay the same across the agent's restarts.
struct AgentGate: @unchecked Sendable {
    let gate: InferenceGate
    /// The bundle the sandbox trusts (the base, then the gate's CA), in the run's directory.
    let bundleFile: String

    /// Where the sandbox sees the bundle: where the runner's and the triage's see theirs.
    static let sandboxPath = EvidenceTool.trustBundlePath

    /// The run's gate, or nil when the coding agent reaches no model API through one.
    static func make(_ config: ExperimentConfig, runDirectory: String, host: [String: String]) throws -> AgentGate? {
        guard !config.agentInference.isEmpty else { return nil }
        let keys = Set(credentialNames(config).compactMap { host[$0] }.filter { !$0.isEmpty })
        let gate: InferenceGate
        do throws(SandboxError) {
            gate = try InferenceGate(targets: config.agentInference, upstreamCAFile: config.agentUpstreamCA, credentials: keys)
        } catch {
            throw ExperimentError(.usage, "sandbox.network.inference: \(error.message)")
        }
        // An operator who points the agent's TLS at a bundle of their own (a variable of
        // `trustVariables`, passed or set) keeps it for the plain tunnels; the gate's CA is added.
        let own = config.codingAgent.envPass.first { InferenceGate.trustVariables.contains($0) }.flatMap { host[$0] }
            ?? InferenceGate.trustVariables.lazy.compactMap { config.codingAgent.env[$0] }.first
        let bundle: [UInt8]
        switch gate.trustBundle(base: own ?? InferenceGate.systemBundle) {
        case .success(let b): bundle = b
        case .failure(let e): throw ExperimentError(.usage, "coding_agent: the CA bundle the agent trusts: \(e.message)")
        }
        let file = runDirectory + "/inference-ca.pem"
        do throws(IOFailure) {
            try AtomicFile.write(bundle, to: file, mode: 0o644)
        } catch {
            throw ExperimentError(.io, "\(file): \(error)")
        }
        return AgentGate(gate: gate, bundleFile: file)
    }

    /// `coding_agent.env_pass` variables whose values the gate holds: every key variable
    /// (`_KEY`, `_TOKEN`, ...) but those named in `sandbox.network.tunnelled_keys`.
    static func credentialNames(_ config: ExperimentConfig) -> [String] {
        config.codingAgent.envPass.filter { InferenceGate.isCredentialVariable($0) && !config.agentTunnelledKeys.contains($0) }
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
