import Benchmark
import Foundation
import SandboxPolicy
import SupervisorIO
import Yams

/// Every key of experiment_config.yaml: the sections and their keys as `ConfigKey`s. The
/// reader walks these (`ExperimentConfigParser`), the reference in docs/config.md is printed
/// from them (`reference()`, `autoharness config keys`), and a test fails when the two differ.
/// A benchmark's own keys are its kind's (`BenchmarkKind.Settings.keys`), written at the top
/// level as upstream writes them.
package enum ConfigSchema {
    package static var keys: [ConfigKey<ExperimentConfig>] {
        [
            .custom("benchmark", accepts: BenchmarkKinds.names.joined(separator: " | "),
                    "Which benchmark the experiment runs (required); each reads keys of its own, below.") { r, n, p, c in
                guard let s = r.string(n, p) else { return }
                if ExperimentConfig.supportedBenchmarks.contains(s) {
                    c.benchmark = s
                } else {
                    r.error(n, "benchmark: unknown benchmark '\(s)' (allowed: \(ExperimentConfig.supportedBenchmarks.joined(separator: ", ")))")
                }
            },
            .text("dataset", \.dataset, "The benchmark's data: a local benchmark's directory (with tasks/<id>/), absolute or relative to the experiment."),
            .text("agent_model", \.agentModel, "The model agent.py is told to use (AGENT_MODEL); `none` for none."),
            .choice("split", \.split, ["train"], "The split agent.py is improved on (upstream's key; only `train`)."),
            .choice("gate_split", \.gateSplit, ["test"], "The held-out split a gate scores (upstream's key; only `test`)."),
            .number("threshold", \.threshold, 0...1, "The pass rate the regression suite must reach on train for a gate to go on to the held-out split."),
            .integer("max_concurrency", \.maxConcurrency, 1...256, "Tasks run at once."),
            .number("per_task_timeout", \.perTaskTimeout, 1...LocalBenchmark.maxTimeout,
                    "Seconds for each task's agent run, replacing the task's own timeout."),
            .section("sandbox", "The sandboxes' policies, scratch space and the coding agent's network.", sandboxKeys),
            .section("coding_agent", "How `autoharness run` starts and restarts the coding agent.", at: \.codingAgent, codingAgentKeys) { r, n, _, a in
                for v in a.envPass where a.env[v] != nil {
                    r.error(n, "coding_agent: \(v) is in both env and env_pass; set it or pass it, not both")
                }
            },
            .section("gate", "How a candidate is judged on the held-out split, and what its reply discloses.", at: \.gate, gateKeys),
            .custom("parallel_gate", accepts: "anything (ignored)", "Upstream's gate concurrency; ignored here: `max_concurrency` applies.") { _, _, _, _ in },
            .text("reasoning_effort", \.reasoningEffort, "Passed to agent.py as AGENT_REASONING_EFFORT."),
            .custom("tasks", accepts: "a list of task ids", "The task ids of a `command` benchmark (or `tasks_file`).") { r, n, p, c in
                c.tasks = r.strings(n, p)
                for t in c.tasks ?? [] where !BenchmarkTask.isValidID(t) {
                    r.error(n, "tasks: '\(t)' is not a valid task id (letters, digits, '.', '_', '-')")
                }
            },
            .text("tasks_file", \.tasksFile, "A file of task ids (one per line, or a JSON list), relative to the experiment."),
            .section("runner", "How the benchmark's own tool runs agent.py's tasks, in the runner's sandbox, and how its output is scored.",
                     at: \.runner, runnerKeys) { r, n, p, t in
                ExperimentConfigParser.checkTunnelledKeys(r, n, section: p, t.tunnelledKeys, passed: t.envPass)
            },
            .section("budget", "What one `autoharness run` may spend.", [
                .number("max_cost_usd", \.maxCostUSD, 0...1_000_000,
                        "`autoharness run` stops once the coding agent's reported cost reaches this many dollars (0: no limit)."),
            ]),
            .section("loop", "How `autoharness run` reveals train tasks and ranks candidates.", at: \.loop, loopKeys),
            .choice("timeout_policy", \.timeoutPolicy,
                    "How a held-out task that timed out without a reward counts: `agent` scores it 0; `infra` also shows the operator the mean over the tasks that finished."),
            .section("executor", "Where tasks run: this host, or the nodes of a Ray cluster.", at: \.executor, executorKeys),
            triage,
        ]
    }

    /// `triage:`: present or not (nil), its keys read into a fresh `Triage`.
    static var triage: ConfigKey<ExperimentConfig> {
        let tool = ExperimentConfig.Runner.toolKeys.map { $0.within(\ExperimentConfig.Triage.tool) }
        let own: [ConfigKey<ExperimentConfig.Triage>] = [
            .choice("after", \.after, "When it runs by itself: after each revealed batch's run, or after every train run (`autoharness triage` any time)."),
            .choice("preset", \.preset, ["claude", "codex"], "A coding-agent preset's command, switches, install and model API, with a triage prompt."),
            .text("bin", \.bin, "With a preset: the CLI to run."),
            .integer("max_records", \.maxRecords, 1...ExperimentConfig.Triage.recordsCap,
                     "Records one automatic run reads at most (the newest failures first wait for the next)."),
        ]
        let env = ConfigKey<ExperimentConfig.Triage>.custom("env", accepts: "a mapping of NAME: value", "Constant variables (switches; never secrets).") {
            r, n, p, t in t.env = ExperimentConfigParser.constants(r, n, p)
        }
        let keys = Array(tool[..<3]) + [env] + tool[3...] + own
        return .section("triage", "A command that reads the train split's failure records in a sandbox of its own and writes a hypothesis, a label and a severity per record.",
                        optional: \.triage, fresh: ExperimentConfig.Triage(), keys) { r, n, p, c in
            guard let t = c.triage else { return }
            ExperimentConfigParser.checkTunnelledKeys(r, n, section: p, t.tool.tunnelledKeys, passed: t.tool.envPass)
            if t.preset == nil && (t.tool.command?.isEmpty ?? true) {
                r.error(n, "triage.command: the triage command's argv (a list) is required, or a preset (triage.preset: claude | codex)")
            }
        }
    }

    static var sandboxKeys: [ConfigKey<ExperimentConfig>] {
        [
            .text("task_policy", \.taskPolicy, "The policy of the sandbox agent.py's task runs in."),
            .text("verifier_policy", \.verifierPolicy, "The policy of the sandbox a task's verifier runs in."),
            .path("verifier_tools", \.verifierTools, "The toolbox every verifier gets read-only (scripts/install-verifier-tools)."),
            .text("coding_agent_policy", \.codingAgentPolicy, "The policy of the coding agent's sandbox."),
            .text("policy_dir", \.policyDirectory, "A directory searched for policies before the shipped ones, absolute or relative to the experiment."),
            .path("scratch", \.scratch, "Where sandboxes' scratch trees are made."),
            .section("network", "The coding agent's egress: what its proxy lets through.", at: \.agentNetwork,
                     ExperimentConfig.Runner.networkKeys, then: ExperimentConfig.Runner.checkNetwork),
        ]
    }

    static var codingAgentKeys: [ConfigKey<ExperimentConfig.CodingAgent>] {
        [
            .strings("command", \.command, "The coding agent's argv; an item `{prompt}` is replaced by `prompt` on the first start, `continue_prompt` on restarts."),
            .variables("env_pass", \.envPass, "Variables passed from the supervisor's environment (keys swapped for placeholders where the proxy can)."),
            .custom("env", accepts: "a mapping of NAME: value", "Constant variables set in the agent's sandbox (switches; secrets go in env_pass).") { r, n, p, a in
                a.env = ExperimentConfigParser.constants(r, n, p)
            },
            .text("home_seed", \.homeSeed, "A directory whose files are copied into the agent's fresh $HOME at the start of a run, absolute or relative to the experiment."),
            .paths("binds", \.binds, "Host paths bound read-only at the same path (the agent's own install, say)."),
            .text("prompt", \.prompt, "The prompt of the first start."),
            .text("continue_prompt", \.continuePrompt, "The prompt of a restart."),
            .number("restart_backoff", \.restartBackoff, 0...300, "Seconds before a restart, doubled for each further session in a row without progress."),
            .number("quick_exit_seconds", \.quickExitSeconds, 0...86_400, "An exit within this many seconds of the start counts as a crash."),
            .integer("max_crashes", \.maxCrashes, 1...1000, "Crashes in a row that stop the run."),
            .integer("max_restarts", \.maxRestarts, 0...1000, "Restarts after sessions without progress, in a row, before the run stops."),
            .custom("price_usd_per_mtok", accepts: "a mapping: input, output, cache_read, cache_write",
                    "USD per million tokens, for CLIs that report no cost (input and output required; the cache prices default to input).") { r, n, p, a in
                var prices: [String: Double] = [:]
                r.mapping(n, p, allowed: ["input", "output", "cache_read", "cache_write"]) { k, v in
                    if let x = r.number(v, "\(p).\(k)", 0...1_000_000) { prices[k] = x }
                }
                if let i = prices["input"], let o = prices["output"] {
                    a.price = TokenPrice(input: i, output: o, cacheRead: prices["cache_read"], cacheWrite: prices["cache_write"])
                } else if case .mapping = n {
                    r.error(n, "\(p): needs both input and output (USD per million tokens; cache_read and cache_write default to input)")
                }
            },
        ]
    }

    static var gateKeys: [ConfigKey<GateSettings>] {
        [
            .choice("disclosure", \.disclosure, "What a gate's reply tells of the held-out score: the decision only, val_score rounded to 2 or to 4 decimals, or on a ladder."),
            .integer("budget", \.budget, 0...1_000_000, "Gate calls allowed per `autoharness run` (0: unlimited)."),
            .choice("accept", \.accept, "What a held-out score must do against the best accepted one: beat it by `min_improvement`, reach it, or beat it in a paired test at `alpha`."),
            .custom("min_improvement", accepts: "auto, or a number, 0 to 1",
                    "With `accept: margin`: how much a new val_score must exceed the best by (auto: one task's worth).", shown: { _ in "auto" }) { r, n, p, g in
                if n.scalar?.string != "auto", let x = r.number(n, p, 0...1) { g.minImprovement = x }
            },
            .choice("on_reject", \.onReject, "A rejected agent.py is reverted to the last accepted one, or kept."),
            .integer("max_non_improving", \.maxNonImproving, 0...1_000_000, "`autoharness run` stops after this many rejected gates in a row."),
            .choice("held_out_runtime", \.heldOutRuntime, "Where the held-out phase runs: sandboxes on this kernel, a fresh VM per gate, or a VM where one boots."),
            .section("vm", "The held-out virtual machine.", at: \.vm, vmKeys),
            .custom("reply_time", accepts: "padded | worst_case",
                    "When a gate's answer is released: its duration rounded up to a power of two seconds, or always `reply_after` seconds.",
                    shown: { _ in "padded" }) { r, n, p, g in
                if let m = r.oneOf(n, p, ["padded", "worst_case"]) { g.replyTime = m == "padded" ? .padded : .worstCase(seconds: 0) }
            },
            .number("reply_after", \.replyAfter, 1...604_800, "With `reply_time: worst_case`: the seconds every gate takes (at least its longest run)."),
            .custom("held_out_env", accepts: "a mapping of NAME: SOURCE",
                    "For held-out runs, a `runner.env_pass` variable's value comes from another of the supervisor's variables (the held-out account's key).") {
                r, n, p, g in
                r.mapping(n, p, allowed: nil) { name, source in
                    guard let src = r.string(source, "\(p).\(name)") else { return }
                    for v in [name, src] where !EnvSpec.isVariableName(v) { r.error(source, "\(p): '\(v)' is not a variable name") }
                    g.heldOutEnv[name] = src
                    let at = r.yaml.location(of: source)
                    g.heldOutEnvPlace = "\(at.file):\(at.line)"
                }
            },
            .flag("shared_vendor_account", \.sharedVendorAccount,
                  "The operator accepts that held-out and train runs reach a model API with one account's keys (its caches are a channel between them)."),
            .integer("trials", \.trials, 1...GateTrials.maximum, "How many times each held-out task runs in one gate (val_score: the mean over tasks of each task's mean)."),
            .number("alpha", \.alpha, 0.0001...0.5, "With `accept: paired`: the test's one-sided error rate."),
            .number("ladder_step", \.ladderStep, 0.001...0.5, "With `disclosure: ladder`: the step a disclosed score must rise by (unset: one task's worth)."),
            .integer("infra_retries", \.infraRetries, 0...GateTrials.maximumRetries,
                     "Further runs of a held-out task whose model vendor failed its requests, inside the same held-out phase (needs runner.network.inference)."),
        ]
    }

    static var vmKeys: [ConfigKey<VMSettings>] {
        [
            .choice("accel", \.accel, "How qemu runs the guest: KVM when a probe boot succeeds (else emulation if allowed), KVM, or emulation."),
            .flag("allow_emulation", \.allowEmulation, "Whether a host without working KVM may run the VM emulated (10-50x slower)."),
            .integer("memory_mib", \.memoryMiB, 256...1_048_576, "Guest memory: every held-out sandbox's tmpfs and processes live in it."),
            .integer("cpus", \.cpus, 1...256, "Virtual CPUs (unset: max_concurrency, at most the host's online CPUs)."),
            .path("kernel_dir", \.kernelDirectory, "The directory scripts/install-vm fills."),
            .number("boot_timeout", \.bootTimeout, 5...3600, "Seconds from qemu's start to the guest's first line."),
            .flag("snapshot", \.snapshot, "Each gate's guest starts from a guest saved once, instead of booting."),
            .path("snapshot_dir", \.snapshotDirectory, "Where saved guests are kept (root's, writable by no one else)."),
        ]
    }

    static var runnerKeys: [ConfigKey<ExperimentConfig.Runner>] {
        ExperimentConfig.Runner.toolKeys + [
            .text("scorer_policy", \.scorerPolicy, "The policy of the scorer's sandbox."),
            .path("scripts", \.scripts, "Where autoharness's helper scripts for the tool are (templates/<benchmark>)."),
            .path("srt_shim", \.srtShim, "A directory holding autoharness's srt (templates/tau-bench/srt-shim): each shell command the runner runs through it runs in a sandbox of its own (tau2's banking_knowledge)."),
            .strings("scorer", \.scorer,
                     "The argv that scores the runner's outputs in a sandbox of its own, without agent.py (unset: the command's own rewards count, shown as unverified)."),
            .paths("scorer_binds", \.scorerBinds, "Host paths bound read-only in the scorer's sandbox alone (the answers it checks against)."),
            .number("scorer_timeout", \.scorerTimeout, 1...Limits.maxTimeoutSeconds, "Seconds a scorer may take."),
        ]
    }

    static var loopKeys: [ConfigKey<ExperimentConfig.Loop>] {
        [
            .integer("batch_size", \.batchSize, 0...100_000, "Train tasks revealed per rolling batch (0: every train task from the start, as upstream runs)."),
            .integer("batch_iterations", \.batchIterations, 1...100_000, "Gate attempts a batch may take before the next batch is revealed without an accepted gate."),
            .choice("review", \.review, "An accepted gate's promotions join the suite at once, or wait for `autoharness suite approve`."),
            .integer("candidates", \.candidates, 1...ExperimentConfig.maxCandidates,
                     "Candidate agent.py files one gate may rank; only the best on train and the suite is judged on the held-out split."),
        ]
    }

    static var executorKeys: [ConfigKey<ExperimentConfig.Executor>] {
        [
            .choice("kind", \.kind, "This host, or the nodes of a Ray cluster."),
            .text("address", \.address, "With `kind: ray`: the cluster's address (host:port of its head)."),
            .text("python", \.python, "The Python that has `ray` (the driver runs with it)."),
            .integer("tasks_per_request", \.tasksPerRequest, 1...10_000, "Tasks sent to a node in one signed request."),
            .choice("order", \.order, "Which tasks go out first: the longest by their own limits (task.toml's timeouts), each to the node that frees up first, or the order they are listed in (a tool benchmark's shards always are)."),
            .text("driver_user", \.driverUser, "The user (a name, or UID:GID) the Ray driver runs as, not root; start the cluster's head on this host as that user (the driver attaches to its raylet). Unset: root, confined."),
        ]
    }
}

extension ExperimentConfig.Runner {
    /// A tool's keys as `runner:` and `triage:` share them.
    static var toolKeys: [ConfigKey<Self>] {
        [
            .strings("command", \.command, "The argv: the runner's tool (a `command` benchmark's, with placeholders such as {task_ids_file} and {output}), or the triage command."),
            .paths("binds", \.binds, "Host paths bound read-only at the same path (the tool's install, say)."),
            .variables("env_pass", \.envPass, "Variables passed from the supervisor's environment (model keys swapped for placeholders by the inference gate)."),
            .section("network", "The tool's egress: what its proxy lets through.", networkKeys, then: checkNetwork),
            .number("timeout", \.timeout, 1...Limits.maxTimeoutSeconds, "Seconds one run of the tool may take."),
            .text("policy", \.policy, "The policy of the tool's sandbox."),
        ]
    }

    /// `network:` of a tool and of the coding agent (`sandbox.network`).
    static var networkKeys: [ConfigKey<Self>] {
        [
            .hostPorts("allow", \.networkAllow, "Hosts reached through plain tunnels (each connection recorded); `*.` patterns of one domain."),
            .custom("inference", accepts: "a list of host:port",
                    "Model APIs, reached only through an inference gate of the run's own: keys swapped for placeholders, only stateless calls pass.") { r, n, p, t in
                t.networkInference = r.hostPorts(n, p) ?? []
                t.inferencePlace = r.place(p)
                for x in t.networkInference where x.contains("*") {
                    r.error(n, "\(p): '\(x)' is a pattern; the inference gate takes exact host:port pairs")
                }
            },
            .path("upstream_ca", \.upstreamCA, "A CA the inference gate trusts upstream besides the system's store (a TLS-inspecting proxy's)."),
            .strings("tunnelled_keys", \.tunnelledKeys, "env_pass keys for hosts of `allow` (plain tunnels cannot swap a placeholder): passed as they are."),
        ]
    }

    /// What a `network:` section's keys say together: one host is a gate or a tunnel, never
    /// both; tunnelled keys need tunnels; a model API goes through the inference gate.
    static func checkNetwork(_ r: ConfigReader, _ v: Node, _ name: String, _ tool: inout Self) {
        // One host, however spelled (case, a trailing dot, another port, an address as
        // written, a pattern above it), is a gate or a tunnel, never both.
        for t in tool.networkInference {
            guard let a = tool.networkAllow.first(where: { LocalKind.sameHost(t, $0) }) else { continue }
            r.error(v, "\(name): \(t) in inference and \(a) in allow reach one host; list it once (inference: only stateless model calls pass)")
        }
        if !tool.tunnelledKeys.isEmpty && tool.networkAllow.isEmpty {
            r.error(v, "\(name).tunnelled_keys: keys passed as they are, for hosts of \(name).allow, which is empty (a key for an inference host gets a placeholder)")
        }
        let why = name == "sandbox.network"
            ? "a plain tunnel would hand the coding agent the real key and the vendor's stored objects"
            : "a plain tunnel would let a held-out run leave stored completions, files or responses that a train run lists"
        for t in tool.networkAllow where ExperimentConfig.isModelAPI(t) {
            r.error(v, "\(name).allow: \(t) is a model API: list it under \(name).inference instead, where only stateless inference calls pass (\(why))")
        }
    }
}

extension ExperimentConfig {
    /// The coding agent's network settings (`sandbox.network`) in a tool's shape, so the tools'
    /// network keys read them.
    var agentNetwork: Runner {
        get {
            var t = Runner()
            (t.networkAllow, t.networkInference, t.upstreamCA, t.tunnelledKeys) = (networkAllow, agentInference, agentUpstreamCA, agentTunnelledKeys)
            return t
        }
        set { (networkAllow, agentInference, agentUpstreamCA, agentTunnelledKeys) = (newValue.networkAllow, newValue.networkInference, newValue.upstreamCA, newValue.tunnelledKeys) }
    }
}

extension ConfigKey {
    /// A mapping of `keys` filling the optional value at `field`: present (from `fresh`) when
    /// the file has the section, however empty; `then` checks the whole root afterwards.
    static func section<Sub>(_ name: String, _ summary: String, optional field: WritableKeyPath<Root, Sub?>, fresh: Sub, _ keys: [ConfigKey<Sub>],
                             then check: @escaping (ConfigReader, Node, String, inout Root) -> Void) -> Self {
        let lifted = keys.map { $0.within(optional: field, fresh: fresh) }
        return section(name, summary, lifted) { r, n, p, root in
            if root[keyPath: field] == nil { root[keyPath: field] = fresh }
            check(r, n, p, &root)
        }
    }

    /// This key, filling the optional part of `Outer` at `field` (made from `fresh` first).
    func within<Outer>(optional field: WritableKeyPath<Outer, Root?>, fresh: Root) -> ConfigKey<Outer> {
        let (shown, store) = (shownDefault, self.store)
        return ConfigKey<Outer>(name: name, accepts: accepts, summary: summary, keys: keys?.map { $0.within(optional: field, fresh: fresh) },
                                shownDefault: { _ in shown(fresh) }) { r, node, path, outer in
            var sub = outer[keyPath: field] ?? fresh
            store(r, node, path, &sub)
            outer[keyPath: field] = sub
        }
    }
}

extension ConfigSchema {
    /// One line of the reference.
    struct Row {
        var key: String, accepts: String, shownDefault: String?, summary: String
    }

    /// The keys under `keys` (sections first, then what they hold), dotted from `prefix`, with
    /// the defaults `fresh` holds.
    static func rows<Root>(_ keys: [ConfigKey<Root>], _ fresh: Root, prefix: String = "") -> [Row] {
        keys.flatMap { key in
            [Row(key: prefix + key.name, accepts: key.accepts, shownDefault: key.shownDefault(fresh), summary: key.summary)]
                + rows(key.keys ?? [], fresh, prefix: prefix + key.name + ".")
        }
    }

    /// The reference of every key, as docs/config.md holds it between its markers: the
    /// common keys, then each benchmark's own.
    package static func reference() -> String {
        func table(_ rows: [Row]) -> String {
            func cell(_ s: String) -> String { s.replacingOccurrences(of: "|", with: "\\|") }
            // A value holding a backquote is fenced by two.
            func code(_ s: String) -> String { s.contains("`") ? "`` \(cell(s)) ``" : "`\(cell(s))`" }
            return (["| key | accepts | default | what it does |", "|---|---|---|---|"] + rows.map {
                "| `\($0.key)` | \(cell($0.accepts)) | \($0.shownDefault.map(code) ?? "") | \(cell($0.summary)) |"
            }).joined(separator: "\n")
        }
        var out = "### The keys every experiment reads\n\n" + table(rows(keys, ExperimentConfig(benchmark: ""))) + "\n"
        for kind in BenchmarkKinds.all where !kind.referenceRows.isEmpty {
            out += "\n### `benchmark: \(kind.name)`: its own keys, at the top level\n\n" + table(kind.referenceRows) + "\n"
        }
        return out
    }
}

extension BenchmarkKind {
    /// This benchmark's own keys, for the reference.
    var referenceRows: [ConfigSchema.Row] { ConfigSchema.rows(Settings.keys, Settings()) }
}
