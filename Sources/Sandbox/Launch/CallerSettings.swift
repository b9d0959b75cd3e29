import CSandboxLaunch
import CSystemCalls
import Glibc

/// A process's scheduling and resource settings, which every process it starts inherits and a
/// sandbox's policy does not set (or sets only below them): its nice value, I/O priority,
/// allowed CPUs, oom_score_adj and resource limits (`ahs_process_attributes`).
///
/// A one-shot `sandbox exec` passes its caller's to the sandbox through the launcher. A launch
/// the launch service runs for a front is that front's launch, so the service reads the
/// front's and the sandbox's monitor takes them before anything else (`ahl_settings`; the
/// monitor is root in the initial namespaces then, so the caller's are taken whether they are
/// above or below the service's own).
public struct CallerSettings: Sendable {
    var raw: ahs_process_attributes

    /// The settings of process `pid` (0: this one), or nil if they cannot be read.
    public static func of(_ pid: pid_t) -> CallerSettings? {
        var raw = ahs_process_attributes()
        return ahs_process_attributes(pid, &raw) == 0 ? CallerSettings(raw: raw) : nil
    }

    /// Whether every CPU these settings allow is one the calling process may use: a launcher
    /// it starts can then take this mask (the kernel refuses a mask with none of its CPUs, and
    /// the launcher would keep its own). False if its own mask cannot be read.
    public func cpusWithinThisProcess() -> Bool {
        var own = raw.affinity
        let read = withUnsafeMutablePointer(to: &own) { $0.withMemoryRebound(to: UInt.self, capacity: 16) { ahs_own_affinity($0) } }
        guard read == 0 else { return false }
        return withUnsafeBytes(of: raw.affinity) { mine in
            withUnsafeBytes(of: own) { theirs in
                let a = mine.bindMemory(to: UInt.self), b = theirs.bindMemory(to: UInt.self)
                return a.indices.allSatisfy { a[$0] & ~b[$0] == 0 }
            }
        }
    }

    /// The hard limit of `resource` (RLIMIT_*), unlimited for one it does not know.
    public func hardLimit(_ resource: Int32) -> UInt64 {
        guard resource >= 0, resource < 16 else { return .max }
        return withUnsafeBytes(of: raw.hard) { $0.bindMemory(to: UInt64.self)[Int(resource)] }
    }

    /// For the launcher's plan.
    var plan: ahl_settings {
        var s = ahl_settings()
        s.given = 1
        s.sched_policy = raw.sched_policy
        s.sched_priority = raw.sched_priority
        s.sched_reset_on_fork = raw.sched_reset_on_fork
        s.nice = raw.nice
        s.ioprio = raw.ioprio
        s.oom_score_adj = raw.oom_score_adj
        withUnsafeMutableBytes(of: &s.affinity) { to in withUnsafeBytes(of: raw.affinity) { to.copyMemory(from: $0) } }
        withUnsafeMutableBytes(of: &s.soft) { to in withUnsafeBytes(of: raw.soft) { to.copyMemory(from: $0) } }
        withUnsafeMutableBytes(of: &s.hard) { to in withUnsafeBytes(of: raw.hard) { to.copyMemory(from: $0) } }
        return s
    }
}
