import Foundation
@testable import Sandbox
import SandboxPolicy
@_exported import TestSupport
import TestSupport
import Testing

/// `autoharness sandbox exec [extra] --ro PROBE:/probe -- /probe ACTION ARGS...`
func probe(_ action: String, _ args: String..., options: [String] = [], policy: String = "base") throws -> Run {
    try autoharness(["sandbox", "exec", "--policy", policy, "--timeout", "30", "--ro", "\(Built.probe):/probe"] + options
        + ["--", "/probe", action] + args)
}


/// A sandbox (`minimalMounts`, `/usr/bin/sleep SECONDS`) running on its own thread, with a
/// `SandboxControl` attached so a test can see and act on its processes meanwhile.
final class SleepingSandbox {
    let control = SandboxControl()
    private let result = Locked<SandboxResult??>(nil)

    /// `configure` adjusts the options (cgroup host, clone3) before the launch.
    init(seconds: Int, timeout: Double? = nil, configure: (inout RunOptions) -> Void = { _ in }) throws {
        var limits = Limits()
        limits.timeoutSeconds = timeout
        let policy = Policy(name: "sleeping", mounts: minimalMounts, limits: limits)
        let plan = try PlanCompiler.compile(policy: policy, command: ["/usr/bin/sleep", String(seconds)], hostEnvironment: [:])
        var options = RunOptions()
        options.control = control
        configure(&options)
        let runOptions = options
        Thread.detachNewThread { [result] in
            let r = try? SandboxRunner.run(plan, options: runOptions)
            result.withLock { result.value = .some(r) }
        }
    }

    /// Host pids of the sandbox's processes once the payload has exec'd `sleep` (monitor,
    /// init, payload), or whatever is there after 3 s.
    func waitForPayload() -> [pid_t] {
        var pids: [pid_t] = []
        for _ in 0..<300 {
            pids = control.processIDs
            if payload(in: pids) != nil { break }
            usleep(10_000)
        }
        return pids
    }

    func payload(in pids: [pid_t]) -> pid_t? {
        pids.first { procText("/proc/\($0)/comm") == "sleep\n" }
    }

    /// Waits for the run to return; nil if it threw.
    func finish() -> SandboxResult? {
        while result.withLock({ result.value == nil }) { usleep(10_000) }
        return result.withLock { result.value! }
    }

    /// Kills the sandbox and waits for the run to return.
    func stop() {
        control.kill()
        _ = finish()
    }
}
