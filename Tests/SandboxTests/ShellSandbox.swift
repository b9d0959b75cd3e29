import Foundation
@testable import Sandbox
import SandboxPolicy

/// A `/bin/sh -c script` plan: `mounts`, then `out` read-write at /out, a 30 s timeout.
func shellPlan(_ script: String, mounts: [MountSpec], out: String, identity: Identity = Identity()) throws -> LaunchPlan {
    var limits = Limits()
    limits.timeoutSeconds = 30
    let policy = Policy(name: "shell", mounts: mounts + [MountSpec(kind: .readWrite(source: out), destination: "/out")],
                        identity: identity, limits: limits)
    return try PlanCompiler.compile(policy: policy, command: ["/bin/sh", "-c", script], hostEnvironment: [:])
}

/// Runs `plan` with `options`, its stdout and stderr into a file under `out`; returns the result
/// and what it printed.
func runCapturing(_ plan: LaunchPlan, out: String, options: RunOptions = RunOptions()) throws -> (SandboxResult, String) {
    var options = options
    let log = out + "/log-\(UUID().uuidString)"
    let fd = open(log, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
    defer { close(fd) }
    options.stdio = (-1, fd, fd)
    let r = try SandboxRunner.run(plan, options: options)
    return (r, (try? String(contentsOfFile: log, encoding: .utf8)) ?? "")
}
