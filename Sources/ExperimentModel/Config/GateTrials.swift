/// `gate.trials`: how many times each held-out task runs in one gate.
public enum GateTrials {
    /// At most this many: a gate's held-out phase takes as many times as long.
    public static let maximum = 20
    /// `gate.infra_retries` at most: each is another run of the tasks the vendor failed.
    public static let maximumRetries = 5
}
