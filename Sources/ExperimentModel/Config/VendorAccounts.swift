import Benchmark
import Foundation
import Sandbox
import SandboxPolicy

/// The model-vendor accounts of an experiment's runs: a vendor keeps state per account
/// (prompt caches, stored objects), so held-out runs either get an account of their own
/// (`gate.held_out_env`) or the operator accepts the shared one (`gate.shared_vendor_account`).
public struct VendorAccounts: Sendable {
    let config: ExperimentConfig

    /// A held-out run's credentials (`gate.held_out_env`) must differ, by value, from every
    /// credential train runs, the coding agent and the triage hold: a vendor keeps state per
    /// account (prompt caches, stored objects), and a held-out run that shares a key with
    /// anything that learns is a channel to it (a red team read whole held-out texts back
    /// through a prompt cache, with `held_out_env` naming a variable that held the train key).
    func check() throws {
        func value(_ name: String) -> String? { getenv(name).map { String(cString: $0) }.flatMap { $0.isEmpty ? nil : $0 } }
        // A runner that reaches a model API: held-out runs get keys of their own, or the
        // operator says the shared account is accepted. OpenAI caches long prompt prefixes per
        // organisation whatever a request says, so the gate alone cannot close the channel.
        if !config.runner.networkInference.isEmpty && !config.gate.sharedVendorAccount {
            let at = config.runner.inferencePlace.map { $0 + ": " } ?? ""
            for name in modelCredentials {
                guard let source = config.gate.heldOutEnv[name] else {
                    throw ExperimentError(.usage, """
                        \(at)runner.network.inference: held-out runs would reach \(config.runner.networkInference.joined(separator: ", ")) with \
                        the train runs' $\(name): the vendor's per-account state (OpenAI's automatic prompt cache, stored objects) \
                        would carry held-out prompts to train runs and the coding agent. Give held-out runs another account's key: \
                        gate.held_out_env: {\(name): \(name)_HELD_OUT}, and export \(name)_HELD_OUT=... (another organisation or \
                        project: docs/held-out.md); or accept the channel with gate.shared_vendor_account: true
                        """)
                }
                guard value(source) != nil else {
                    throw ExperimentError(.usage, """
                        \(config.gate.heldOutEnvPlace.map { $0 + ": " } ?? "")gate.held_out_env: \(name) comes from $\(source) for held-out runs, \
                        and \(source) is not set; export \(source)=... (another account's key)
                        """)
                }
            }
        }
        var holders: [(who: String, variable: String)] = []
        // A key by its name, or by its value's shape under any name (BEDROCK_KEY_2).
        func holds(_ v: String) -> Bool { InferenceGate.isCredentialVariable(v) || value(v).map(InferenceGate.looksLikeKey) == true }
        for v in config.runner.envPass where holds(v) { holders.append(("train runs", v)) }
        for v in config.codingAgent.envPass where holds(v) { holders.append(("the coding agent", v)) }
        for v in config.triage?.tool.envPass ?? [] where holds(v) { holders.append(("the triage", v)) }
        for (name, source) in config.gate.heldOutEnv.sorted(by: { $0.key < $1.key }) {
            guard let held = value(source) else { continue }
            for h in holders where value(h.variable) == held {
                throw ExperimentError(.usage, """
                    \(config.gate.heldOutEnvPlace.map { $0 + ": " } ?? "")gate.held_out_env: \(name) comes from $\(source) for held-out runs, and \
                    $\(source) holds the same value as $\(h.variable), which \(h.who) hold: the vendor's state (its prompt cache, \
                    stored objects) would be shared between held-out runs and \(h.who). Give held-out runs another account's key \
                    (another organisation or project at the vendor: docs/held-out.md)
                    """)
            }
        }
    }

    /// The runner's keys that reach its model APIs: its credential variables (`_KEY`,
    /// `_TOKEN`), but an environment provider's (Harbor's remote providers: checked on their
    /// own, `checkHeldOutAccount`).
    package var modelCredentials: [String] {
        config.runner.envPass.filter { InferenceGate.isCredentialVariable($0) && !tunnelledKeys.contains($0) }
    }

    /// The runner's keys for hosts it reaches as plain tunnels, passed as they are: a remote
    /// environment provider's and `runner.network.tunnelled_keys`.
    var tunnelledKeys: Set<String> { Set(TerminalBenchKind.providerKeys.values.joined()).union(config.runner.tunnelledKeys) }

    /// Whether held-out and train runs reach a model API with one account's key, as the
    /// operator accepted (`gate.shared_vendor_account: true`): shown in status, the report
    /// and the evidence.
    public var shared: Bool {
        !config.runner.networkInference.isEmpty && config.gate.sharedVendorAccount && modelCredentials.contains { config.gate.heldOutEnv[$0] == nil }
    }

    /// What status and the report say of a shared vendor account, or nil.
    public var sharedNote: String? {
        guard shared else { return nil }
        return "held-out and train runs reach \(config.runner.networkInference.joined(separator: ", ")) with one account's keys "
            + "(gate.shared_vendor_account: true): the vendor's prompt cache and stored objects can carry held-out prompts to train runs"
    }
}

extension ExperimentConfig {
    /// The vendor accounts this config gives its runs.
    public var vendorAccounts: VendorAccounts { VendorAccounts(config: self) }
}
