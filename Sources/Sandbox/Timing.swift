import Glibc
import SupervisorIO

/// Phase timings for `AUTOHARNESS_TIMING=1` (stderr), used by scripts/bench-sandbox to show
/// where a launch spends its time. A no-op unless the variable is set.
///
/// `AUTOHARNESS_TIMING=NS`, a CLOCK_MONOTONIC time in nanoseconds taken by the caller just
/// before it exec'd us, makes the first mark count from there: process start-up (loading,
/// relocations, static initialisers) then shows as its own phase.
public enum Timing {
    nonisolated(unsafe) private static var last: Double = 0
    public static let enabled = getenv("AUTOHARNESS_TIMING") != nil

    public static func mark(_ phase: String) {
        guard enabled else { return }
        lock.withLock { markLocked(phase) }
    }

    /// Marks come from more than one thread (a held sandbox's handshake runs on its own).
    private static let lock = Mutex()

    private static func markLocked(_ phase: String) {
        let now = monotonicNow()
        if last == 0 {
            let given = getenv("AUTOHARNESS_TIMING").flatMap { UInt64(String(cString: $0)) }
            last = given.map { Double($0) / 1e9 }.flatMap { $0 > 1 && $0 <= now ? $0 : nil } ?? now
        }
        let line = "timing: \(phase) +\(String(format3((now - last) * 1000))) ms\n"
        last = now
        _ = line.withCString { write(2, $0, strlen($0)) }
    }

    private static func format3(_ v: Double) -> String {
        let x = (v * 1000).rounded() / 1000
        return "\(x)"
    }
}
