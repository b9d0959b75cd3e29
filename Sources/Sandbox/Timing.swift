import Glibc

/// Phase timings for `AUTOHARNESS_TIMING=1` (stderr), used by scripts/bench-sandbox to show
/// where a launch spends its time. A no-op unless the variable is set.
public enum Timing {
    nonisolated(unsafe) private static var last: Double = 0
    public static let enabled = getenv("AUTOHARNESS_TIMING") != nil

    public static func mark(_ phase: String) {
        guard enabled else { return }
        let now = monotonicNow()
        if last == 0 {
            // the process's own start, from /proc/self/stat field 22 (clock ticks since boot)
            last = now
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
