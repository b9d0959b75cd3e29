import CSystemCalls
import Glibc

/// Noise in the kernel's inode-number counters after held-out sandboxes ran on the host.
///
/// Pipes, sockets and POSIX message queues are numbered from one kernel-wide counter
/// (`get_next_ino`), memfds and SysV shared memory from the internal shmem mount's; each CPU
/// takes numbers from its own batch of 1024 and fetches the next batch from the shared counter.
/// No filter can refuse creating a pipe, so a held-out agent.py can move these counters (create
/// pipes until the low bits of the next number spell its instruction's hash) and a later train
/// agent.py can read where they stand (the number of its own next pipe). Measured:
/// 6 of 6 values of 4.8 bits decoded through the memfd counter.
///
/// After the last held-out sandbox is gone, and before anything untrusted runs again, the
/// supervisor takes a random count of numbers from both counters on every CPU it may run on
/// (sandboxes inherit its CPUs): a uniform amount below 1024 on each, plus whole batches, a
/// uniform number below `extraBatches` × CPUs spread across them. The position within each
/// CPU's batch, the precise channel, is then uniformly random whatever the held-out tasks did
/// (a one-time pad per CPU); what the counters' coarse advance still carries is stated in
/// docs/held-out.md ("Host-wide counters").
/// Two host-wide serials get noise of the same kind: the process serial (threads) and the
/// session serial (sessions), each one uniform count spread across the CPUs (C side:
/// counter_noise.c).
public enum InodeNumberNoise {
    /// Whole batches of 1024 numbers added to each counter, below this many per CPU (one
    /// uniform draw per counter, spread across the CPUs).
    public static let extraBatches = 16
    static let batch = 1024
    /// Threads started, below this many per CPU (one uniform draw for all): each moves the
    /// host's process serial (a pidfd's inode number, Linux 6.5+) by one. No sandbox can get a
    /// pidfd (pidfd_open, CLONE_PIDFD, SO_PEERPIDFD and SO_PASSPIDFD are refused), so this is
    /// the second wall: were a route found, a held-out phase's own count would be read against
    /// up to 16,384 × CPUs of noise (about half a second per gate here).
    public static let threadNoise = 16_384
    /// Sessions made, below this many per CPU (one uniform draw for all), each by a process
    /// made for it: every `setsid()` on the host moves the autogroup serial by one, and any
    /// sandbox reads it exactly (`/proc/self/autogroup` of a process that made a session, or
    /// of its own, which the launcher makes). Neither side can be refused without breaking real programs (Python's
    /// `start_new_session`, node's `detached`, daemons), so a held-out phase's own count of
    /// sessions is read against this noise (about 50 us a session here: ~0.4 s per gate on
    /// average, the CPUs side by side).
    public static let sessionNoise = 16_384

    public struct Report: Sendable, CustomStringConvertible {
        public var cpus = 0
        public var consumed = 0
        public var threads = 0
        public var sessions = 0
        public var seconds = 0.0
        public var failure: String?
        public init() {}
        public var description: String {
            if let failure { return "moving the inode-number counters FAILED: \(failure)" }
            return "moved the inode-number counters by \(consumed), the process serial by \(threads + sessions) and the session serial by \(sessions) on \(cpus) CPU(s) in \(Int(seconds * 1000)) ms"
        }
    }

    /// After a held-out phase on this host: perturbs both inode counters, the process serial
    /// and the session serial on every CPU this process may run on. After a phase in a VM
    /// (`onHost: false`), the process serial alone: the guest's load moved no inode counter or
    /// session serial of the host's, but the threads qemu starts and retires with it move the
    /// process serial.
    public static func perturb(onHost: Bool = true) -> Report {
        let start = monotonic()
        var report = Report()
        #if DEBUG
        // Tests of the fail-closed paths (HeldOutSettle, RunDesk.gate): a debug build only;
        // the release build (scripts/build-release) has no such switch.
        if getenv("AUTOHARNESS_TEST_NOISE_FAILS") != nil {
            report.failure = "failed on purpose (AUTOHARNESS_TEST_NOISE_FAILS, a debug build's test switch)"
            return report
        }
        #endif
        var cpus = [Int32](repeating: 0, count: 4096)
        let n = ahs_allowed_cpus(&cpus, Int32(cpus.count))
        guard n > 0 else {
            report.failure = "sched_getaffinity: \(String(cString: strerror(-n)))"
            return report
        }
        cpus = Array(cpus.prefix(Int(n)))
        let d = draw(cpus: Int(n), onHost: onHost)
        let (pipes, memfds, threads, sessions) = (d.pipes, d.memfds, d.threads, d.sessions)
        var failedCPU: Int32 = -1
        let rc = ahs_perturb_inode_numbers(cpus, pipes, memfds, threads, sessions, n, &failedCPU)
        if rc < 0 { report.failure = "CPU \(failedCPU): \(String(cString: strerror(-rc)))" }
        report.cpus = Int(n)
        report.consumed = pipes.reduce(0, +) + memfds.reduce(0, +)
        report.threads = threads.reduce(0, +)
        report.sessions = sessions.reduce(0, +)
        report.seconds = monotonic() - start
        return report
    }

    /// The amounts for `cpus` CPUs, each CPU's share.
    static func draw(cpus count: Int, onHost: Bool) -> (pipes: [Int], memfds: [Int], threads: [Int], sessions: [Int]) {
        // Drawn from the system's generator (getrandom). A shared counter's reader sees only
        // the sum over CPUs, and a sum of per-CPU draws clusters in the middle (triangular on 2
        // CPUs, nearly normal on many: a review decoded 12 of 12 bits where the
        // uniform width promised a third of one): so each shared amount is one uniform draw
        // over the whole width, spread across the CPUs. Only the position within each CPU's
        // own batch is drawn per CPU.
        let none = Array(repeating: 0, count: count)
        func inodes() -> [Int] {
            guard onHost else { return none }
            return spread(Int.random(in: 0..<extraBatches * count), over: count).map { Int.random(in: 0..<batch) + batch * $0 }
        }
        let pipes = inodes(), memfds = inodes()
        let threads = spread(Int.random(in: 0..<threadNoise * count), over: count)
        let sessions = onHost ? spread(Int.random(in: 0..<sessionNoise * count), over: count) : none
        return (pipes, memfds, threads, sessions)
    }

    /// `total` in `parts` shares differing by at most one.
    static func spread(_ total: Int, over parts: Int) -> [Int] {
        (0..<parts).map { total / parts + ($0 < total % parts ? 1 : 0) }
    }

    private static func monotonic() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
