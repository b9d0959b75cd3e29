// The one shape of every error autoharness's targets throw to a caller: what kind of failure
// it is (the exit status follows from the kind alone, in Experiment's `Exit` table), the text
// for the operator (`description`: what failed, with the path, line or errno that locates it),
// and what caused it, if another error did. Each target keeps its own codes (a sandbox's
// launch stage, a ledger's corruption) and maps them to a category here.

/// What went wrong, as far as the caller's next step is concerned.
public enum ErrorCategory: String, Sendable, CaseIterable {
    /// A bad flag, file or value the operator can fix (a config line, a policy).
    case usage
    /// The experiment is not in a state for it (not prepared, already prepared).
    case state
    /// Refused on purpose (held-out ids, a spent budget, a symlinked agent.py).
    case refused
    /// Another supervisor holds the experiment.
    case locked
    /// The system failed an operation (disk full, EIO, a ledger that does not verify).
    case io
    /// A sandbox could not be set up (a launch stage, cgroups, seccomp).
    case sandboxSetup
}

public protocol AutoharnessError: Error, CustomStringConvertible, Sendable {
    var category: ErrorCategory { get }
    /// The error this one wraps, if any.
    var cause: (any Error)? { get }
}

extension AutoharnessError {
    public var cause: (any Error)? { nil }
}

extension IOFailure: AutoharnessError {
    public var category: ErrorCategory { .io }
}
