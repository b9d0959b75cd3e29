import Benchmark
import ExperimentModel
import Foundation
import Sandbox
import SandboxPolicy

/// A gate's held-out phase in a fresh VM of its own (`HeldOutVM`), whose answer is only
/// rewards, status classes and violation counts. A tool's sandboxes in the guest reach the
/// network only through this host's proxies, made for the phase and gone with it; what qemu
/// read through the host's page cache on the guest's behalf is evicted before anything
/// untrusted runs again.
struct HeldOutVMExecutor: TaskExecutor {
    let environment: ExecutorEnvironment
    let vm: HeldOutVM

    func run(_ run: TaskRun) throws -> [TaskOutcome] {
        let env = environment
        let (config, layout, audit, ids) = (env.config, env.layout, run.audit, run.ids)
        var request = GuestRequest(experimentRoot: layout.root, configPath: layout.config, policySearchPaths: env.policyLoader.searchPaths,
                                   agentDirectory: run.agent, ids: ids, concurrency: config.maxConcurrency)
        let benchmarkRoot = config.runsOwnTasks ? config.dataset.map { $0.hasPrefix("/") ? $0 : layout.root + "/" + $0 } : nil
        // A tool's sandboxes in the guest reach the network only through the host's proxies
        // (its allowlist, a gate of the host's for model APIs, its audit), over the egress
        // port; the keys they pass are the held-out run's.
        var egress: VMEgress?
        var trustBundle: [UInt8]?
        if !config.runsOwnTasks {
            let tool = config.toolSettings(config.runner.command ?? [])
            var gate: InferenceGate?
            do {
                if let (g, bundle) = try tool.inferenceGate(heldOut: true) {
                    gate = g
                    trustBundle = bundle
                }
            } catch {
                throw ExperimentError(.state, error.message)
            }
            // A proxy only for the sandbox classes whose policy has network (a stream the guest
            // opens for another is refused): the runner's (agent.py), the scorer's (tool).
            func proxy(_ policy: String, _ log: AuditLog) throws -> EgressProxy? {
                let p: Policy
                do { p = try env.policyLoader.load(policy, requireAllPlaceholders: false) } catch {
                    throw ExperimentError(.state, "held-out VM: policy \(policy)", cause: error)
                }
                guard p.network.mode == .proxy else { return nil }
                return EgressProxy(allow: tool.networkAllow, inference: gate, audit: log, sandbox: VMEgress.sandbox)
            }
            egress = VMEgress(agent: try proxy(tool.runnerPolicy, audit.agent), tool: try proxy(tool.scorerPolicy, audit.tool),
                              agentAudit: audit.agent, toolAudit: audit.tool)
            // The one gate serves the whole phase: the guest runs each task on its own and
            // tags its streams with the task's position, so failures are counted per task.
            if run.oneTaskPerRun && gate != nil {
                request.oneTaskPerRun = true
                egress?.perTask = SlotFailures(tasks: ids.count)
            }
            // The guest holds the host gate's placeholders, never the keys (swapped back there).
            request.environment = tool.passedValues(heldOut: true).mapValues { gate?.placeholder(for: $0) ?? $0 }
            request.egress = true
            request.trustBundle = trustBundle == nil ? nil : GuestRequest.trustBundlePath
        }
        // The agent phase of a task autoharness runs reaches its package mirrors, and only
        // them, through a proxy of the host's (its audit the agent's).
        let mirrors = env.adapter.taskNetwork(ids)
        if !mirrors.isEmpty {
            let proxy = EgressProxy(allow: mirrors, inference: nil, audit: audit.agent, sandbox: VMEgress.sandbox)
            if egress == nil { egress = VMEgress(agent: nil, tool: nil, agentAudit: audit.agent, toolAudit: audit.tool) }
            egress?.task = proxy
            request.egress = true
        }
        try FileManager.default.createDirectory(atPath: config.scratch, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        // What runs beside the tasks in the guest (bird-interact's database server), built
        // here from nothing held-out and shared read-only.
        let inputs = GuestInputs(scratch: config.scratch)
        defer { inputs.remove() }
        if let kind = BenchmarkKinds.named(config.benchmark) {
            request.services = try kind.guestServices(config, adapter: env.adapter, inputs: inputs, log: env.log)
        }
        var image = try GuestImage.plan(request: request, config: config, policyLoader: env.policyLoader,
                                        adapterPaths: env.adapter.hostPaths, scratch: config.scratch)
        for dir in inputs.made { _ = try image.addInput(dir.path, name: dir.name) }
        if !(env.adapter.taskImages?.byTask.isEmpty ?? true) {
            try image.addImageStore(TaskImageStore(experimentRoot: layout.root).directory)
        }
        image.trustBundle = trustBundle
        // A bound on the whole phase (each task's own limits hold inside the guest): the
        // boot, then every task's agent and verifier limits, run `max_concurrency` at a time.
        // After it, what qemu read on the guest's behalf leaves the host's page cache and the
        // process serial it moved is moved by noise (the inode counters the guest cannot move
        // are left: InodeCounterAttackTests).
        let result = try vm.runSettled(request, image: image, scratch: config.scratch, privateDirectory: layout.privateDirectory,
                                       deadline: config.gate.vm.bootTimeout + ExecutionBounds.phase(ids, config: config, benchmarkRoot: benchmarkRoot),
                                       egress: egress, journal: layout.heldOutJournal, withheld: "recorded")
        result.answer.record(agent: audit.agent, tool: audit.tool)
        env.log?("held-out VM: \(ids.count) task(s) answered; "
                 + (result.restoreSeconds.map { "restored in \(String(format: "%.2f", $0)) s, " } ?? "")
                 + "guest supervisor up after \(String(format: "%.2f", result.bootSeconds)) s, whole VM \(String(format: "%.1f", result.totalSeconds)) s")
        // The guest sends the tools' spend as one total (nothing per held-out task crosses
        // back): carried on the first outcome, so the phase's sum is that total.
        var outcomes = result.answer.outcomes
        if let cost = result.answer.costUSD, !outcomes.isEmpty { outcomes[0].costUSD = cost }
        if let counts = egress?.perTask?.all {
            let slot = Dictionary(ids.enumerated().map { ($0.element, $0.offset) }, uniquingKeysWith: { a, _ in a })
            for i in outcomes.indices { outcomes[i].vendorFailures = slot[outcomes[i].id].map { counts[$0] } }
        }
        return outcomes
    }
}

extension ExecutionBounds {
    /// The longest `ids` can take at `max_concurrency` (`heldOut`); a tool runs the tasks in
    /// one process, which its own timeout bounds.
    static func phase(_ ids: [String], config: ExperimentConfig, benchmarkRoot: String?) -> Double {
        let tasks = benchmarkRoot.flatMap { try? LocalBenchmark(directory: $0) }?.tasks ?? []
        let spread = heldOut(ids, tasks: tasks, fallback: config.perTaskTimeout ?? LocalBenchmark.defaultTimeout,
                             concurrency: config.maxConcurrency)
        if !config.runsOwnTasks, let t = config.runner.timeout { return max(spread, t + 120) }
        return spread
    }
}
