/// What `init` needs besides the directory.
public struct InitOptions: Sendable {
    public var benchmark: String
    /// `local`: the benchmark directory. Others: the upstream `dataset` value if any.
    public var dataset: String?
    /// The tool's executable (harbor, tau2, ...), when not the default name on PATH.
    public var tool: String?
    /// bird-interact: the BIRD-Interact checkout (default: $BIRD_REPO).
    public var repo: String?
    public var templates: String
    /// `claude`, `codex` or `command` (default): the `coding_agent:` preset.
    public var codingAgent: String
    /// The coding agent's CLI, when not on PATH under its usual name.
    public var codingAgentBinary: String?
    /// terminal-bench: a local registry.json the registry dataset is resolved from.
    public var registryPath: String?
    /// terminal-bench: the legacy registry.json URL `harbor download` resolves the dataset
    /// from (default: Harbor's own registry).
    public var registryURL: String?
    /// local and terminal-bench: whether init makes each task's image (`ImagesAtInit`).
    public var images: ImagesAtInit = .auto
    public init(benchmark: String, dataset: String?, tool: String? = nil, repo: String? = nil, templates: String,
                codingAgent: String = "command", codingAgentBinary: String? = nil, registryPath: String? = nil,
                registryURL: String? = nil) {
        self.registryPath = registryPath
        self.registryURL = registryURL
        self.codingAgent = codingAgent
        self.codingAgentBinary = codingAgentBinary
        self.benchmark = benchmark
        self.dataset = dataset
        self.tool = tool
        self.repo = repo
        self.templates = templates
    }
}
