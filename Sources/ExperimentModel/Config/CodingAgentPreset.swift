import Foundation

/// What `autoharness init --coding-agent claude|codex|command` writes into the config: the
/// command, the switches that keep a CLI from phoning home or sandboxing itself (ours is the
/// boundary), its API key passed by *name* (the sandbox gets a placeholder), its install bound
/// read-only, the vendor API behind the run's inference gate, and the files its `$HOME` must
/// hold to start non-interactively.
public struct CodingAgentPreset: Sendable {
    public var name: String
    /// The CLI's real path (symbolic links resolved), nil for `command`.
    public var binary: String?
    /// What `--version` printed (first line).
    public var version: String?
    public var command: [String] = []
    public var envPass: [String] = []
    public var env: [(String, String, String)] = []  // name, value, why
    public var binds: [String] = []
    /// The vendor API it reaches through the inference gate.
    public var inference: [String] = []
    /// Files for the agent's `$HOME` (relative path -> contents), written under `agent-home/`
    /// of the experiment and named by `coding_agent.home_seed`.
    public var homeFiles: [(String, String)] = []

    public static let names = ["claude", "codex", "command"]

    static let installHint = [
        "claude": "install Claude Code as a single executable: the claude-agent-sdk wheel bundles it (`pip download --no-deps claude-agent-sdk`, file claude_agent_sdk/_bundled/claude; `scripts/install-agents` does this), or Anthropic's native installer; then pass --coding-agent-bin PATH if it is not on PATH as `claude`",
        "codex": "install Codex CLI: the openai-codex-cli-bin wheel bundles it (`pip download --no-deps openai-codex-cli-bin`, file codex_cli_bin/bin/codex; `scripts/install-agents` does this), or the release binary from github.com/openai/codex; then pass --coding-agent-bin PATH if it is not on PATH as `codex`",
    ]

    /// Finds and checks the CLI (it must run `--version`), or explains what to install.
    public static func make(_ name: String, binary: String?) throws -> CodingAgentPreset {
        guard names.contains(name) else {
            throw ExperimentError(.usage, "--coding-agent \(name): unknown (one of: \(names.joined(separator: ", ")))")
        }
        var p = CodingAgentPreset(name: name)
        if name == "command" {
            if binary != nil { throw ExperimentError(.usage, "--coding-agent-bin goes with --coding-agent claude or codex") }
            return p
        }
        let wanted = binary ?? (name == "claude" ? "claude" : "codex")
        guard let found = ToolCheck.locate(wanted) else {
            throw ExperimentError(.usage, "\(wanted) not found\(binary == nil ? " on PATH" : ""): \(installHint[name]!)")
        }
        let real = URL(fileURLWithPath: found.hasPrefix("/") ? found : FileManager.default.currentDirectoryPath + "/" + found)
            .resolvingSymlinksInPath().path
        guard let version = ToolCheck.version(of: real) else {
            throw ExperimentError(.usage, "\(real) does not run `--version`: \(installHint[name]!)")
        }
        p.binary = real
        p.version = version
        let dir = (real as NSString).deletingLastPathComponent
        switch name {
        case "claude":
            p.command = [real, "-p", "{prompt}", "--output-format", "stream-json", "--verbose", "--permission-mode", "bypassPermissions"]
            p.envPass = ["ANTHROPIC_API_KEY"]
            p.env = [
                ("DISABLE_AUTOUPDATER", "1", "the install is read-only and pinned"),
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1", "no telemetry, error reporting or surveys: only the model API is reachable"),
                ("DISABLE_TELEMETRY", "1", "the same, for versions that read this name"),
                ("DISABLE_ERROR_REPORTING", "1", "the same, for versions that read this name"),
            ]
            p.binds = [dir]
            p.inference = ["api.anthropic.com:443"]
        default:
            p.command = [real, "exec", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check", "--json", "{prompt}"]
            p.envPass = ["OPENAI_API_KEY"]
            // The wheel's layout: bin/codex beside codex-path/rg (its file search): bind both.
            let parent = (dir as NSString).deletingLastPathComponent
            p.binds = (dir as NSString).lastPathComponent == "bin" && FileManager.default.fileExists(atPath: parent + "/codex-path")
                ? [parent] : [dir]
            p.inference = ["api.openai.com:443"]
            p.homeFiles = [(".codex/config.toml", codexConfig)]
        }
        return p
    }

    /// Codex's own sandbox cannot nest inside ours (ours is the boundary: the command line
    /// turns it off) and nothing but the model API is reachable, so everything else that
    /// would dial out is off.
    package static let codexConfig = """
        # Written by `autoharness init --coding-agent codex`: the coding agent's ~/.codex/config.toml,
        # copied into its home at the start of each run (coding_agent.home_seed). Only the model
        # API is reachable from the sandbox, so everything else Codex would dial is off
        # (measured with codex-cli 0.163.0; each key is accepted by --strict-config):
        #   analytics / otel metrics   Statsig metrics to ab.chatgpt.com
        #   features.plugins           the curated plugin sync (github.com, api.github.com,
        #                              chatgpt.com) and the featured-plugins cache (chatgpt.com)
        #   unbounded_connection_retries  an unreachable endpoint fails the turn instead of
        #                              retrying forever (the run restarts the agent)
        #   web_search                 the vendor's search tool runs at the vendor, with its own
        #                              reach: off (the inference gate refuses it anyway)

        web_search = "disabled"

        [analytics]
        enabled = false

        [otel]
        metrics_exporter = "none"

        [features]
        plugins = false
        unbounded_connection_retries = false

        """

    static func quoted(_ s: String) -> String {
        "\"" + s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }

    /// The `coding_agent:` keys this preset sets (indented for the template).
    package var configLines: String {
        guard let binary, let version else {
            return """
                  # The command `autoharness run` starts in the coding agent's sandbox (working directory
                  # /work, the experiment's view); an argument "{prompt}" becomes `prompt` on the first
                  # start and `continue_prompt` on restarts. Presets: `autoharness init --coding-agent claude|codex`.
                  command: []
                  env_pass: []                    # environment variables passed through by name (e.g. ANTHROPIC_API_KEY)
                  env: {}                         # constant variables (switches; never secrets)
                  binds: []                       # host paths bound read-only at the same path (the agent's install)

                """
        }
        var s = "  # \(name == "claude" ? "Claude Code" : "Codex CLI"): \(version) at \(binary) (checked with --version by init)\n"
        s += "  command: [\(command.map(Self.quoted).joined(separator: ", "))]\n"
        s += "  env_pass: [\(envPass.joined(separator: ", "))]   # the API key, by name: its value is never written anywhere\n"
        if env.isEmpty {
            s += "  env: {}\n"
        } else {
            s += "  env:\n"
            for (k, v, why) in env { s += "    \(k): \(Self.quoted(v))   # \(why)\n" }
        }
        s += "  binds: [\(binds.map(Self.quoted).joined(separator: ", "))]   # its install, read-only\n"
        if !homeFiles.isEmpty { s += "  home_seed: agent-home            # copied into the agent's $HOME at each run's start\n" }
        return s
    }
}

extension CodingAgentPreset {
    /// What `autoharness run` says it starts: "Claude Code 2.1.330 (/path), model X (from Y)".
    /// The version is asked of the CLI (`--version`, as `init` did) only when the command is
    /// a Claude Code or Codex executable; any other command is shown as it is.
    public static func identity(command: [String], config: ExperimentConfig.CodingAgent, root: String) -> String {
        guard let exe = command.first else { return "no command" }
        let base = (exe as NSString).lastPathComponent
        let kind = base == "claude" ? "Claude Code" : base == "codex" ? "Codex CLI" : nil
        guard let kind else { return "`\(command.prefix(3).joined(separator: " "))\(command.count > 3 ? " …" : "")` (not a preset: version and model unknown)" }
        // "2.1.330 (Claude Code)", "codex-cli 0.163.0": the first word that starts with a digit.
        let line = ToolCheck.version(of: exe)
        let number = line?.split(separator: " ").first { $0.first?.isNumber == true }.map(String.init) ?? line
        let version = number ?? "(version unknown: `\(exe) --version` failed)"
        return "\(kind) \(version) at \(exe), model: \(model(command: command, config: config, root: root, codex: base == "codex"))"
    }

    /// Where the model comes from: the command line, then the environment (Claude Code) or
    /// the seeded config.toml (Codex), else the CLI's default.
    static func model(command: [String], config: ExperimentConfig.CodingAgent, root: String, codex: Bool) -> String {
        for (i, a) in command.enumerated() {
            if (a == "--model" || (codex && a == "-m")), i + 1 < command.count { return "\(command[i + 1]) (command line)" }
            if a.hasPrefix("--model=") { return "\(a.dropFirst(8)) (command line)" }
        }
        if !codex, let m = config.env["ANTHROPIC_MODEL"] { return "\(m) (coding_agent.env ANTHROPIC_MODEL)" }
        if codex, let seed = config.homeSeed {
            let path = (seed.hasPrefix("/") ? seed : root + "/" + seed) + "/.codex/config.toml"
            let text = ToolCheck.smallText(path) ?? ""
            // The top-level `model = "…"` (before any [table]).
            for line in text.split(separator: "\n") {
                let t = line.trimmingCharacters(in: .whitespaces)
                if t.hasPrefix("[") { break }
                if t.hasPrefix("model"), let eq = t.firstIndex(of: "="), t[..<eq].trimmingCharacters(in: .whitespaces) == "model" {
                    let v = t[t.index(after: eq)...].trimmingCharacters(in: .whitespaces).trimmingCharacters(in: CharacterSet(charactersIn: "\"'"))
                    return "\(v) (\(seed)/.codex/config.toml)"
                }
            }
        }
        return "the CLI's default (each session's model is in the agent log and the ledger)"
    }
}
