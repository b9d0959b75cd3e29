import Benchmark
import Foundation

/// `tau-bench`: tau2-bench's simulations (retail, airline, telecom, banking_knowledge, or any
/// domain of the installed tau2's data whose runner files the operator lists), run by its own
/// runner with agent.py as the agent; the data directory, which holds every task's expected
/// actions, is never bound into a run.
struct TauBenchKind: BenchmarkKind {
    static let hint = "install tau2-bench: `git clone https://github.com/sierra-research/tau2-bench && cd tau2-bench && pip install -e .`"
    let name = "tau-bench"
    /// The domains autoharness knows the runner's files of (`Tau2Domain.known`).
    static var domains: [String] { Tau2Domain.known.keys.sorted() }
    let defaultTool: String? = "tau2"
    let shardsOnNodes = true
    var installHint: String { Self.hint }
    func notInVM(_ config: ExperimentConfig) -> String? { nil }

    struct Settings: BenchmarkSettings {
        /// A directory of tau2's data (`tau2/domains/<domain>`); required.
        var domain: String?
        /// For a domain autoharness has no list for: the files (and `name/` directories) of its
        /// data directory the runner may see.
        var runnerData: [String]?
        /// tau2's data directory (never bound into a run).
        var tau2DataDir: String?
        /// The user simulator's model.
        var userModel: String?
        /// The simulations' seed.
        var seed: Int?
        /// tau2's `--retrieval-config` (banking_knowledge: how the agent searches the knowledge
        /// base; tau2's default there is `alltools`, which needs an embeddings API).
        var retrievalConfig: String?
        static var keys: [ConfigKey<Self>] {
            [.text("domain", \.domain, "tau2's domain: a directory of tau2_data_dir/tau2/domains (required)."),
             .strings("runner_data", \.runnerData, "For a domain autoharness has no list for: the files (and `name/` directories) of its data directory the runner may see."),
             .text("tau2_data_dir", \.tau2DataDir, "tau2's data directory (read by the supervisor, never bound into a run)."),
             .text("user_model", \.userModel, "The user simulator's model."),
             .integer("seed", \.seed, 0...4_294_967_295, "The simulations' seed."),
             .text("retrieval_config", \.retrievalConfig, "tau2's --retrieval-config (banking_knowledge: terminal_use, bm25, alltools, ...; tau2's default there is alltools, which needs an embeddings API). Given to the runner and the scorer alike.")]
        }
    }

    func initialize(_ o: InitOptions, tool: String, layout: ExperimentLayout) throws -> InitValues {
        let fm = FileManager.default
        guard let d = o.dataset ?? ProcessInfo.processInfo.environment["TAU2_DATA_DIR"] else {
            throw ExperimentError(.usage, "tau-bench needs tau2's data directory: --dataset /path/to/tau2-bench/data (or export TAU2_DATA_DIR)")
        }
        let tau2Data = d.hasPrefix("/") ? d : fm.currentDirectoryPath + "/" + d
        guard fm.fileExists(atPath: tau2Data + "/tau2/domains") else {
            throw ExperimentError(.usage, "\(tau2Data) has no tau2/domains/: give tau2-bench's data directory (\(Self.hint))")
        }
        return InitValues(dataset: "", placeholders: ["tau2_data": tau2Data])
    }

    /// What the runner sees of `domain`'s data: the operator's `runner_data` list, else
    /// autoharness's own (`Tau2Domain.known`); a domain with neither is refused.
    static func layout(_ domain: String, listed: [String]?, srtShim: Bool) throws -> Tau2Domain {
        guard let listed else {
            guard let known = Tau2Domain.known[domain] else {
                throw ExperimentError(.usage, "domain: autoharness knows which files of \(TauBenchKind.domains.joined(separator: ", ")) the agent may see, not of \(domain): list them in runner_data (files, and `name/` for directories), never the tasks")
            }
            return known
        }
        if let bad = listed.first(where: { $0.isEmpty || $0.hasPrefix("/") || $0.hasPrefix(".") || $0.dropLast($0.hasSuffix("/") ? 1 : 0).contains("/") }) {
            throw ExperimentError(.usage, "runner_data: \(bad) is not a file or `name/` directory of the domain's data directory")
        }
        if let task = listed.first(where: { ["tasks.json", "tasks/", "split_tasks.json"].contains($0) }) {
            throw ExperimentError(.usage, "runner_data: \(task) holds the tasks' answers; the runner gets the run's tasks, reduced, from autoharness")
        }
        return Tau2Domain(files: listed.filter { !$0.hasSuffix("/") }, directories: listed.filter { $0.hasSuffix("/") }.map { String($0.dropLast()) },
                          shell: srtShim)
    }

    /// `retrieval_config`: a name of tau2's registry (src/tau2/domains/banking_knowledge/
    /// retrieval.py, RETRIEVAL_VARIANTS), given as one argument; tau2 refuses a name it does not know.
    static func retrievalConfig(_ given: String?) throws -> String? {
        guard let given else { return nil }
        guard !given.isEmpty, given.count <= 64, !given.hasPrefix("-"),
              given.unicodeScalars.allSatisfy({ $0.isASCII && CharacterSet.alphanumerics.contains($0) || "_-.".unicodeScalars.contains($0) }) else {
            throw ExperimentError(.usage, "retrieval_config: '\(given)' is not a name of tau2's retrieval configs (letters, digits, _ - .; e.g. terminal_use)")
        }
        return given
    }

    func adapter(_ config: ExperimentConfig, root: String, checkTools: Bool) throws -> any BenchmarkAdapter {
        try config.tau2Adapter(root: root, checkTools: checkTools)
    }
}

extension ExperimentConfig {
    func tau2Adapter(root: String, checkTools: Bool) throws -> Tau2Adapter {
        let argv = runner.command ?? ["python3"]
        if checkTools {
            _ = try ToolCheck.tool(argv, default: "python3", hint: TauBenchKind.hint)
            try ToolCheck.environment(runner.envPass, for: "tau2 (the agent's and the user simulator's model API)")
        }
        let upstream = TauBenchKind().settings(self)
        guard let domain = upstream.domain else {
            throw ExperimentError(.usage, "domain: missing; tau-bench needs one of tau2's domains (autoharness knows \(TauBenchKind.domains.joined(separator: ", ")))")
        }
        guard !domain.isEmpty, !domain.contains("/"), domain != ".", domain != ".." else {
            throw ExperimentError(.usage, "domain: \(domain) is not a directory name of tau2_data_dir/tau2/domains")
        }
        let layout = try TauBenchKind.layout(domain, listed: upstream.runnerData, srtShim: runner.srtShim != nil)
        guard let data = upstream.tau2DataDir ?? ProcessInfo.processInfo.environment["TAU2_DATA_DIR"] else {
            throw ExperimentError(.usage, "tau2_data_dir: missing; set it to tau2-bench's data directory (the one holding tau2/domains/), or export TAU2_DATA_DIR")
        }
        let dataDir = data.hasPrefix("/") ? data : root + "/" + data
        guard let scripts = runner.scripts else {
            throw ExperimentError(.usage, "runner.scripts: missing; it names the directory of autoharness_tau2_run.py and autoharness_tau2_score.py (templates/tau-bench)")
        }
        // The runner must never see the real data: it holds every task's expected actions.
        let real = URL(fileURLWithPath: dataDir).resolvingSymlinksInPath().path
        // The scripts and the srt shim are mounted into the runner too: checked like its binds.
        let mounted = [("runner.scripts", scripts)] + (runner.srtShim.map { [("runner.srt_shim", $0)] } ?? [])
        try RunnerBinds.refuse(toolBinds + mounted, exposing: RunnerBinds.Protected.tau2Data(real, domain: domain))
        var adapter: Tau2Adapter
        do {
            adapter = try Tau2Adapter(domain: domain, dataDirectory: real, scriptsDirectory: scripts, tool: toolSettings(argv), layout: layout)
        } catch {
            throw ExperimentError(.usage, error.message)
        }
        adapter.agentModel = agentModel == "none" ? nil : agentModel
        adapter.userModel = upstream.userModel
        if let seed = upstream.seed { adapter.seed = UInt64(seed) }
        adapter.retrievalConfig = try TauBenchKind.retrievalConfig(upstream.retrievalConfig)
        adapter.concurrency = maxConcurrency
        adapter.environment = agentEnvironment()
        // On Ray's nodes, what a node's copy must match is listed now: a missing part is a
        // configuration error, not a run's.
        if checkTools && executor.kind == .ray {
            do { _ = try adapter.nodeTool } catch { throw ExperimentError(.usage, error.message) }
        }
        return adapter
    }
}

extension RunnerBinds.Protected {
    /// tau2's data as no runner bind may reach it: the data directory (`tau2_data_dir`), and
    /// the domain's directory and the user simulator's, each resolved where a link inside the
    /// data takes it elsewhere.
    package static func tau2Data(_ dataDirectory: String, domain: String) -> [Self] {
        [.init(path: dataDirectory, what: "contains tau2_data_dir (\(dataDirectory)), whose tasks.json holds the expected actions of every test task; bind only the tau2 install (its src/ for an editable install), never the data"),
         .init(path: dataDirectory + "/tau2/domains/" + domain, what: "contains tau2's \(domain) domain (\(dataDirectory)/tau2/domains/\(domain), a link to elsewhere), whose tasks.json holds the expected actions of every test task"),
         .init(path: dataDirectory + "/tau2/user_simulator", what: "contains tau2's user simulator's files (\(dataDirectory)/tau2/user_simulator, a link to elsewhere)")]
    }
}
