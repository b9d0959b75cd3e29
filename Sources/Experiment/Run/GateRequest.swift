import ExperimentModel
import Foundation
import Ledger
import Sandbox
import SupervisorIO

/// `autoharness gate` from the coding agent: its candidate taken and checked, the agent
/// frozen (or, with no freezer, stopped) for the whole gate, the supervisor's gate run, the
/// agent thawed, and the answer as `gate.disclosure` allows.
extension RunDesk {
    mutating func gate(message: String?) throws -> BrokerReply {
        if let why = budgetSpent() {
            violation("gate_budget", "gate requested after the run's budget was spent: \(why)")
            stop.requestAfterReply(why)
            return BrokerReply(stderr: "autoharness: refused: \(why); the run is stopping; this request was recorded\n", exit: 2)
        }
        // With candidates waiting (`autoharness candidate`), the gate ranks them and judges the
        // best; agent/agent.py as it is now is not one unless it was submitted.
        let candidates = try !supervisor.state().pendingCandidates.isEmpty
        var snap: ExperimentSupervisor.Snapshot?
        var notice = ""
        if !candidates {
            let taken = try candidate()
            (snap, notice) = (taken.snapshot, taken.notice)
            let sha = taken.snapshot.sha256
            if let earlier = try supervisor.state().gateAttempts.last(where: { $0.agentSHA256 == sha && $0.verdict != .interrupted }) {
                violation("repeat_gate", "gate requested for an agent.py already judged in attempt \(earlier.attempt) (sha256 \(sha.prefix(12)))")
                return BrokerReply(stderr: "autoharness: refused: this exact agent.py was already judged (gate attempt \(earlier.attempt), \(earlier.accepted ? "accepted" : "rejected")); change it before gating again; this request was recorded\n", exit: 2)
            }
            try AtomicFile.write(try supervisor.snapshotBytes(sha), to: layout.agentFile, mode: 0o644)
        }
        // The coding agent is frozen for the whole gate: held-out tasks run while none of its
        // processes can run, so nothing they do in the kernel's shared state (file locks on
        // /usr, say) can be observed as it happens. If it cannot be frozen, no gate runs. On
        // a host with no cgroup freezer at all, the agent is stopped instead: its whole
        // sandbox is killed before the gate and started again after it.
        let stopped = agentControl.canFreeze == false
        if stopped {
            let why = "this host has no cgroup freezer: the coding agent was stopped (its whole sandbox killed) for gate attempt \((try? supervisor.state().gatesStarted + 1) ?? 0) and is restarted after it with the gate's answer in its prompt"
            guard (try? append([(.note, NoteRecord(text: why))])) != nil else {
                throw ExperimentError(.io, "could not record that the coding agent is stopped for the gate; the gate was not run and not counted")
            }
            settings.log(why)
            stoppedForGate = true
            guard agentControl.stop(within: 10) else {
                throw ExperimentError(.io, "the coding agent's processes did not all end within 10 s; the gate was not run and not counted")
            }
        } else {
            do throws(SandboxError) {
                try agentControl.freeze()
            } catch {
                // Not the agent's fault, and nothing held out ran: recorded as a note, no gate
                // counted.
                let why = "gate refused: the coding agent could not be frozen (\(error.message)); no held-out task ran"
                _ = try? append([(.note, NoteRecord(text: why))])
                settings.log(why)
                throw ExperimentError(.io, "could not freeze the coding agent for the gate, so the gate was not run and not counted", cause: error)
            }
        }
        let r: GateResult
        var ranking = ""
        do {
            defer {
                // A held-out phase whose clean-up failed left the host's kernel as it was
                // (its journal says so): the agent is ended, not thawed, and the run stops;
                // the next start does the clean-up again before anything untrusted runs.
                if HeldOutSettle.owed(journal: layout.heldOutJournal) {
                    agentControl.kill()
                    let why = "the clean-up after the held-out phase failed; the coding agent was ended rather than thawed, and nothing untrusted runs until a start of autoharness finishes that clean-up"
                    _ = try? append([(.note, NoteRecord(text: why))])
                    settings.log(why)
                    stop.requestAfterReply(why)
                } else if !stopped {
                    try? agentControl.thaw()
                }
                // Counted from the ledger's start rows, so a gate that failed after it began
                // (a full disk, a crashed tool) still spent budget.
                recount()
            }
            // Checked again as the held-out phase begins: the kernel must still say frozen
            // (or, stopped, not one process of the agent may be left).
            let stillHeld: () throws -> Void = { [agentControl] in
                if stopped {
                    guard agentControl.processIDs.isEmpty else {
                        throw ExperimentError(.io, "a process of the stopped coding agent is still alive; the held-out split was not run")
                    }
                } else {
                    guard agentControl.isFrozen else {
                        throw ExperimentError(.io, "the coding agent is no longer frozen; the held-out split was not run")
                    }
                }
            }
            if let snap {
                r = try supervisor.gate(actor: "coding agent", agent: snap, message: message, beforeHeldOut: stillHeld)
            } else {
                // Every candidate runs (train) with the agent already frozen, and the one
                // gated becomes the agent's agent.py.
                // budget.max_cost_usd, counted as `costSpent` counts it, between candidates.
                let agentCost = (tally.usage + (meter?.usage ?? AgentUsage())).costUSD ?? 0
                let limit = config.maxCostUSD
                let overBudget: () -> String? = { [supervisor] in
                    guard limit > 0, let spent = try? supervisor.state().openRunBenchmarkCost.total, agentCost + spent >= limit else { return nil }
                    return "budget.max_cost_usd \(limit) was reached (\(AgentUsage.dollars(agentCost + spent)) spent)"
                }
                let g = try supervisor.gateCandidates(actor: "coding agent", message: message, overBudget: overBudget, beforeHeldOut: stillHeld)
                let chosen = try supervisor.snapshotBytes(g.result.agentSHA256)
                try AtomicFile.write(chosen, to: layout.agentFile, mode: 0o644)
                try staging.replaceAgent(with: chosen)
                (r, ranking) = (g.result, g.ranking.map(AgentText.ranking) ?? "")
            }
        }
        tally.progressThisStart = true
        var extra = ""
        if r.accepted {
            tally.accepted += 1
            tally.nonImproving = 0
            try writeHistory()
        } else {
            tally.nonImproving += 1
            if config.gate.onReject == .revert, let last = try supervisor.state().iterations.last {
                let kept = try supervisor.snapshotBytes(last.agentSHA256)
                try AtomicFile.write(kept, to: layout.agentFile, mode: 0o644)
                try staging.replaceAgent(with: kept)
                extra = "agent/agent.py was restored to the last accepted version (iteration \(last.iteration)); gate.on_reject: revert\n"
            }
        }
        let (text, code) = AgentText.gate(Disclosure.gate(r, state: try supervisor.state(), config: config))
        if let why = budgetSpent() {
            stop.requestAfterReply(why)
            extra += "this was the run's last gate: \(why)\n"
        }
        if stopped { undeliveredAnswer = ranking + text + extra + notice }
        return BrokerReply(stdout: ranking + text + extra, stderr: notice, exit: code)
    }
}
