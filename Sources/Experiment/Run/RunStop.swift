import Dispatch
import Glibc
import Sandbox
import Synchronization

/// Whether, why and how the run stops. Safe from any thread: the operator's signal, the
/// deadline and cost timers, the broker and the session loop all ask for a stop here, and
/// none of them waits for a gate in progress to do so.
///
/// A stop never sleeps on a thread: the SIGKILL that follows a SIGTERM, and the signal sent
/// after a reply, are scheduled on a dispatch queue; the session loop waits on a semaphore
/// the first stop signals.
final class RunStop: Sendable {
    struct State {
        var reason: String?
        /// The stop is a failure (crash loop, unwritable ledger), not a budget or the operator.
        var failed = false
        /// The stop is for want of anything left to do (`RunReport.nothingLeft`).
        var nothingLeft = false
        /// The first write that failed, if that is why the run stopped (`RunReport.ioFailure`).
        var ioFailure: String?
        /// The running coding agent's signal channel (nil between sessions).
        var signals: SandboxSignals?
    }

    private let state = Synchronization.Mutex(State())
    private let stopped = DispatchSemaphore(value: 0)
    let log: @Sendable (String) -> Void

    /// Seconds between the SIGTERM of a stop and the SIGKILL of the agent's whole sandbox.
    static let killGrace = 5.0
    /// Seconds between an answer that ends the run and the agent's SIGTERM, so the answer
    /// reaches it first.
    static let replyGrace = 0.5

    init(log: @escaping @Sendable (String) -> Void) { self.log = log }

    /// Records `reason` if it is the first; true when it is.
    private func mark(_ reason: String, failed: Bool, nothingLeft: Bool) -> (first: Bool, signals: SandboxSignals?) {
        let marked = state.withLock { s -> (Bool, SandboxSignals?) in
            guard s.reason == nil else { return (false, s.signals) }
            (s.reason, s.failed, s.nothingLeft) = (reason, failed, nothingLeft)
            return (true, s.signals)
        }
        if marked.0 { stopped.signal() }
        return marked
    }

    /// Asks the run to stop (first reason wins): no new requests are run, the agent gets
    /// SIGTERM, then SIGKILL for its whole sandbox `killGrace` seconds later.
    func request(_ reason: String, failed: Bool = false, nothingLeft: Bool = false) {
        guard let signals = mark(reason, failed: failed, nothingLeft: nothingLeft).signals else { return }
        signals.send(SIGTERM)
        DispatchQueue.global().asyncAfter(deadline: .now() + Self.killGrace) { [self] in
            // Only the session that got the SIGTERM: a later one has a channel of its own.
            state.withLock { if $0.signals === signals { signals.kill() } }
        }
    }

    /// Marks the run as stopping now and signals the agent a moment later, so the answer
    /// that ended the run reaches it first.
    func requestAfterReply(_ reason: String, failed: Bool = false) {
        _ = mark(reason, failed: failed, nothingLeft: false)
        DispatchQueue.global().asyncAfter(deadline: .now() + Self.replyGrace) { [self] in
            request(reason, failed: failed)
        }
    }

    /// Why the run is stopping, if it is.
    var reason: String? { state.withLock { $0.reason } }

    var current: State {
        state.withLock { s in
            var copy = State()
            (copy.reason, copy.failed, copy.nothingLeft, copy.ioFailure) = (s.reason, s.failed, s.nothingLeft, s.ioFailure)
            return copy
        }
    }

    /// The stop is a failure after all (the run's end could not be recorded).
    func markFailed(ioFailure: String) {
        state.withLock { s in
            if s.reason == nil { s.reason = "stopped" }
            s.failed = true
            if s.ioFailure == nil { s.ioFailure = ioFailure }
        }
    }

    /// Waits `seconds`, or less when the run is asked to stop meanwhile.
    func wait(seconds: Double) {
        guard reason == nil, seconds > 0 else { return }
        if stopped.wait(timeout: .now() + seconds) == .success { stopped.signal() }
    }

    /// The session now running answers stops through `signals`; false (and not attached)
    /// when the run is already stopping.
    func attach(_ signals: SandboxSignals) -> Bool {
        state.withLock { s in
            guard s.reason == nil else { return false }
            s.signals = signals
            return true
        }
    }

    func detach() { state.withLock { $0.signals = nil } }

    /// Nothing may happen that is not recorded: if the ledger cannot be written (a full
    /// disk, say), the agent is stopped at once.
    func recordingFailed(_ what: String, _ error: any Error) {
        log("could not record \(what): \(error); stopping the coding agent")
        state.withLock { if $0.ioFailure == nil { $0.ioFailure = "\(error)" } }
        request("the ledger could not be written (\(error))", failed: true)
    }

    /// Fail closed: a write of the supervisor's failed (`failure` names the path and the
    /// error), so the coding agent is stopped and the run ends, with exit status 5.
    func writeFailed(_ what: String, _ failure: String, afterReply: Bool = false) {
        log("\(what) failed: \(failure); stopping the coding agent")
        state.withLock { if $0.ioFailure == nil { $0.ioFailure = failure } }
        let reason = "\(what) failed: \(failure)"
        if afterReply { requestAfterReply(reason, failed: true) } else { request(reason, failed: true) }
    }
}
