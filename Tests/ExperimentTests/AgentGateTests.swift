@testable import Experiment
@testable import ExperimentModel
import Foundation
import Sandbox
import SandboxPolicy
import Testing
import TestSupport

/// The coding agent's gate as `autoharness run` makes it (`AgentGate`): which of its variables
/// become placeholders, and the other ways a key would reach its sandbox, refused before it
/// starts. End to end with the real CLIs: RealAgentTests.swift.
@Suite("The coding agent's gate: no key reaches its sandbox another way")
struct AgentGateTests {
    static let key = "sk-ant-api03-" + String(repeating: "Qx7", count: 12)

    func config(_ extra: String) throws -> ExperimentConfig {
        try ExperimentConfig.parse("benchmark: local\ndataset: d\n" + extra, file: "c.yaml")
    }

    func policy(set: [String: String] = [:], pass: [String] = []) throws -> Policy {
        let vars = ["program_md", "agent_staging", "workspace_view", "learnings_md", "home", "broker_dir", "autoharness_bin", "history_dir"]
        var p = try PolicyLoader(searchPaths: [Built.packageRoot + "/policies"])
            .load("coding-agent", variables: Dictionary(uniqueKeysWithValues: vars.map { ($0, "/nonexistent/\($0)") }))
        p.env.set.merge(set) { _, new in new }
        p.env.pass += pass
        return p
    }

    /// `AgentGate.make` in a fresh run directory (kept while the result is): the gate (or the
    /// refusal) and what it logged.
    func make(_ c: ExperimentConfig, policy p: Policy? = nil, command: [String] = ["agent"], root: String = "/nonexistent",
              host: [String: String]) throws -> (gate: AgentGate?, error: String?, log: [String], dir: TempDir) {
        let dir = try TempDir()
        final class Lines: @unchecked Sendable { var all: [String] = [] }
        let lines = Lines()
        do {
            let g = try AgentGate.make(c, policy: try p ?? policy(), command: command, root: root, runDirectory: dir.path,
                                       host: host) { lines.all.append($0) }
            return (g, nil, lines.all, dir)
        } catch let e as ExperimentError {
            return (nil, e.message, lines.all, dir)
        }
    }

    static let network = "sandbox:\n  network:\n    inference: [api.anthropic.com:443]\n"

    @Test("a key passed by name, by the policy's env.pass, or under a name no suffix catches but of a vendor's shape: each a placeholder in the sandbox; a tunnelled key and a URL are not; what is unset is said")
    func placeholders() throws {
        let c = try config(Self.network + "coding_agent:\n  env_pass: [ANTHROPIC_API_KEY, BEDROCK_KEY_2, ANTHROPIC_BASE_URL, MISSING_TOKEN]\n")
        let other = "sk-ant-api03-" + String(repeating: "Zz9", count: 12)
        let host = ["ANTHROPIC_API_KEY": Self.key, "BEDROCK_KEY_2": other, "ANTHROPIC_BASE_URL": "https://api.anthropic.com",
                    "POLICY_PASSED": "sk-proj-" + String(repeating: "p1", count: 12), "PATH": "/usr/bin"]
        let made = try make(c, policy: try policy(pass: ["POLICY_PASSED"]), host: host)
        let g = try #require(made.gate, "\(made.error ?? "")")
        #expect(Set(g.placeholderNames) == ["ANTHROPIC_API_KEY", "BEDROCK_KEY_2", "POLICY_PASSED"], "\(g.placeholderNames)")
        var ov = PlanOverrides(), env = host
        g.apply(&ov, host: &env)
        for name in g.placeholderNames {
            #expect(env[name] != host[name] && g.gate.placeholders[env[name] ?? ""] == host[name], "\(name): \(env[name] ?? "unset")")
        }
        #expect(env["ANTHROPIC_BASE_URL"] == "https://api.anthropic.com" && env["PATH"] == "/usr/bin")
        #expect(ov.environment.contains("NODE_EXTRA_CA_CERTS=/etc/autoharness/inference-ca.pem")
                && ov.environment.contains("CODEX_CA_CERTIFICATE=/etc/autoharness/inference-ca.pem"), "\(ov.environment)")
        #expect(made.log.contains { $0.contains("MISSING_TOKEN not set") }, "\(made.log)")
        #expect(made.log.contains { $0.contains("ANTHROPIC_API_KEY, BEDROCK_KEY_2, POLICY_PASSED hold placeholders") }, "\(made.log)")
    }

    @Test("refused before the agent starts: a key as a constant of coding_agent.env or of the policy's env.set, in the command line, in a home_seed file; without inference, a passed key is a warning")
    func copiesRefused() throws {
        let host = ["ANTHROPIC_API_KEY": "sk-short-test-key"]
        let passed = Self.network + "coding_agent:\n  env_pass: [ANTHROPIC_API_KEY]\n"
        let constant = try make(try config(Self.network + "coding_agent:\n  env:\n    CLAUDE_KEY_COPY: \"\(Self.key)\"\n"), host: [:])
        #expect(constant.error?.contains("coding_agent.env.CLAUDE_KEY_COPY: holds an API key") == true, "\(constant)")
        let same = try make(try config(passed + "  env:\n    HEADERS: \"x-api-key: sk-short-test-key\"\n"), host: host)
        #expect(same.error?.contains("coding_agent.env.HEADERS: holds an API key") == true, "\(same)")
        let set = try make(try config(passed), policy: try policy(set: ["ANTHROPIC_AUTH_TOKEN": Self.key]), host: host)
        #expect(set.error?.contains("env.set ANTHROPIC_AUTH_TOKEN holds an API key") == true, "\(set)")
        let argv = try make(try config(passed), command: ["claude", "--api-key", "sk-short-test-key"], host: host)
        #expect(argv.error?.contains("the coding agent's command (argument 3) holds the value of an API key") == true, "\(argv)")

        let exp = try TempDir()
        try FileManager.default.createDirectory(atPath: exp.path + "/seed/.claude", withIntermediateDirectories: true)
        _ = try exp.file("seed/.claude/.credentials.json", "{\"apiKey\": \"sk-short-test-key\"}")
        let seeded = try make(try config(passed + "  home_seed: seed\n"), root: exp.path, host: host)
        #expect(seeded.error?.contains("coding_agent.home_seed: .claude/.credentials.json holds the value of an API key") == true, "\(seeded)")
        _ = try exp.file("seed/.claude/.credentials.json", "{}")
        #expect(try make(try config(passed + "  home_seed: seed\n"), root: exp.path, host: host).gate != nil)

        let tunnel = try make(try config("coding_agent:\n  env_pass: [ANTHROPIC_API_KEY]\n"), host: host)
        #expect(tunnel.gate == nil && tunnel.error == nil && tunnel.log.contains { $0.contains("its sandbox holds the real value") }, "\(tunnel)")
    }

    @Test("the agent trusts the system's store, the operator's own bundle and the gate's CA, in that order")
    func trustBundle() throws {
        let dir = try TempDir()
        let own = try dir.file("corp.pem", "-----BEGIN CERTIFICATE-----\nCORP\n-----END CERTIFICATE-----")
        let c = try config(Self.network + "coding_agent:\n  env:\n    NODE_EXTRA_CA_CERTS: \(own)\n")
        let made = try make(c, host: [:])
        let g = try #require(made.gate)
        let text = try String(contentsOfFile: g.bundleFile, encoding: .utf8)
        let gateCA = String(decoding: g.gate.certificatePEM, as: UTF8.self)
        let system = (try? String(contentsOfFile: InferenceGate.systemBundle, encoding: .utf8)) ?? ""
        #expect(text.hasPrefix("-----BEGIN CERTIFICATE-----\nCORP\n-----END CERTIFICATE-----\n") && text.hasSuffix(gateCA), "\(text.prefix(200))")
        #expect(system.isEmpty || text.contains(system.prefix(400)), "the system's store was dropped")
    }
}
