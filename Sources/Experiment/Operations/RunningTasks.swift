import Benchmark
import Execution
import ExperimentModel
import Foundation
import Ledger
import Sandbox

// Running a split's tasks for an operation, and what their sandboxes did.

extension ExperimentContext {
    /// Runs `ids` where the configuration says (`Executors`): one outcome per id, in order (a
    /// task the executor did not score is 0, never missing).
    func run(_ ids: [String], agent: String, audit: RunAudit, split: SplitClass, oracle: Bool = false,
             operatorDiagnostics: Bool = false, oneTaskPerRun: Bool = false) throws -> [TaskOutcome] {
        guard !ids.isEmpty else { return [] }
        let request = TaskRun(ids: ids, split: split, agent: agent, audit: audit, oracle: oracle, operatorDiagnostics: operatorDiagnostics,
                              oneTaskPerRun: oneTaskPerRun)
        let environment = executorEnvironment
        let outcomes = try executors.executor(for: request, environment) {
            var ray = RayNodeExecutor(environment: environment, templatesDirectory: templatesDirectory,
                                      excludedNodes: { [unowned self] in try state().excludedNodes },
                                      recordExclusion: { [ledger] in _ = try ledger.append(.nodeExcluded, $0) })
            ray.recordNote = { [ledger] in _ = try ledger.append(.note, NoteRecord(text: $0)) }
            return ray
        }.run(request)
        // Whatever the executor did, the mean is over every requested id.
        return LocalExecution.complete(ids, outcomes, split: split, adapter: adapter.name)
    }

    /// What the executors need of this experiment, with the operator's current callbacks.
    var executorEnvironment: ExecutorEnvironment {
        ExecutorEnvironment(config: config, layout: layout, adapter: adapter, policyLoader: policyLoader, log: log, progress: progress)
    }

    /// A run's violations and limit hits, each against the sandbox that made it: agent.py for
    /// the sandboxes that hold it (a tool sharing its process included: tau2's runner,
    /// Harbor's orchestrator), "verifier" (local benchmarks) or "benchmark tool" for those
    /// without it.
    func violations(_ audit: RunAudit, during: String, heldOut: Bool = false) -> [(RecordKind, any Encodable)] {
        violations(audit.agent, actor: "agent.py (\(during))", heldOut: heldOut)
            + violations(audit.tool, actor: "\(adapter.toolActor) (\(during))", heldOut: heldOut)
    }

    func violations(_ audit: AuditLog, actor: String, heldOut: Bool = false) -> [(RecordKind, any Encodable)] {
        var counts: [String: Int] = [:]
        var order: [String] = []
        var destinations = 0
        // Connections the allowlist let through (a runner's model API) are not violations.
        for e in audit.events where e.isViolation {
            // A refused syscall and a voided reward name what (the call, the reward file's path).
            // A held-out one names only what the VM's answer may (a syscall, a limit, a
            // host:port), in at most as many rows: its names are agent.py's to choose, and the
            // rows' number and size would move how long the gate's record takes after its
            // reply instant.
            let name = heldOut && !GuestAnswer.isName(e.name) ? "other" : e.name
            let named: Set<AuditEvent.Kind> = [.syscall, .rewardTampering, .sharedStateChanged, .plantedLink, .irregularFile]
            var key = named.contains(e.countedKind) ? "\(e.countedKind.rawValue) \(name)" : e.countedKind.rawValue
            // A refused connection names where it went (the first 20 destinations; a flood
            // of distinct ones is folded into one row).
            if e.countedKind == .egress {
                let named = "egress \(name)"
                if counts[named] == nil && destinations >= 20 {
                    key = "egress (other destinations)"
                } else {
                    if counts[named] == nil { destinations += 1 }
                    key = named
                }
            }
            if counts[key] == nil {
                if heldOut && order.count >= GuestAnswer.maxViolations { continue }
                order.append(key)
            }
            counts[key, default: 0] += e.count ?? 1
        }
        let named = ["syscall", "egress", AuditEvent.Kind.rewardTampering.rawValue, AuditEvent.Kind.sharedStateChanged.rawValue, AuditEvent.Kind.plantedLink.rawValue, AuditEvent.Kind.irregularFile.rawValue]
        return order.map { key in
            (.violation, ViolationRecord(actor: actor, kind: named.first { key.hasPrefix($0) } ?? key,
                                         detail: "\(key) ×\(counts[key]!)", heldOut: heldOut ? true : nil, count: counts[key]!))
        }
    }
}
