import ExperimentModel
import Foundation
import Glibc
import Sandbox
import SandboxPolicy
import SupervisorIO

/// Copy-back: what the supervisor takes from the coding agent's staging before it runs
/// anything (agent.py only, read without following links, capped, and compiled in a
/// sandbox of its own).
extension RunDesk {
    /// Copy-back: takes agent.py from staging (nothing else), checks that it compiles, and
    /// snapshots it. Refusals are recorded; other files are dropped, with a notice (returned
    /// for the reply) or, for what would change imports, a violation.
    mutating func candidate() throws -> (snapshot: ExperimentSupervisor.Snapshot, notice: String) {
        // One row per request at most, naming up to 20 new entries (a flood of files is
        // counted, not recorded name by name).
        let (entries, total) = try staging.extraEntries(limit: 10_000)
        let hooks = entries.filter { $0.kind == .importHook }.map(\.name)
        let fresh = hooks.filter { reportedExtras.count < 10_000 && reportedExtras.insert($0).inserted }
        if !fresh.isEmpty {
            let shown = fresh.prefix(20).map { "agent/" + printable($0) }.joined(separator: ", ")
            let more = total > entries.count ? " (\(total) entries in all; listing stopped at \(entries.count))" : fresh.count > 20 ? " and \(fresh.count - 20) more" : ""
            violation("staging_extra_file", "\(shown)\(more) created in staging: would change imports if taken; not taken (only agent.py is copied back)")
        }
        let dropped = entries.filter { $0.kind != .routine }.map { "agent/" + printable($0.name) }
        let notice = dropped.isEmpty ? "" :
            "autoharness: only agent/agent.py is kept; not taken: \(dropped.prefix(10).joined(separator: ", "))\(dropped.count > 10 ? " and \(dropped.count - 10) more" : "")\n"
        let bytes: [UInt8]
        switch try staging.takeAgent() {
        case .success(let b): bytes = b
        case .failure(let refusal):
            let why = refusal.reason
            violation("copy_back_refused", "agent/agent.py \(why)")
            throw ExperimentError(.refused, "agent/agent.py \(why); nothing was run; this request was recorded")
        }
        let snap = try supervisor.snapshot(bytes: bytes)
        if let problem = try CompileCheck(policyLoader: supervisor.policyLoader, output: paths.compileOutput).run(snap) {
            throw ExperimentError(.refused, "agent/agent.py does not compile; nothing was run:\n\(problem)")
        }
        return (snap, notice)
    }
}

/// `compile()` of a candidate agent.py in a throwaway sandbox (the `base` policy, no network):
/// the parser never runs in the supervisor, and nothing of the candidate is executed.
struct CompileCheck {
    let policyLoader: PolicyLoader
    /// Where the sandbox's output goes (the supervisor's own file, opened by it).
    let output: String

    /// The end of the compile sandbox's output read for its error lines.
    static let compileOutputTail = 64 << 10

    /// The compile's error lines, or nil when it compiles.
    func run(_ snap: ExperimentSupervisor.Snapshot) throws -> String? {
        let policy = try policyLoader.load("base")
        var ov = PlanOverrides()
        ov.mounts = [MountSpec(kind: .readOnly(source: snap.directory), destination: "/candidate")]
        ov.timeoutSeconds = 60
        let fd = open(output, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ExperimentError(.io, "\(output): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let code = "import sys\nsrc = open('/candidate/agent.py', 'rb').read()\ncompile(src, 'agent/agent.py', 'exec')\n"
        do throws(SandboxError) {
            let plan = try PlanCompiler.compile(policy: policy, command: ["python3", "-I", "-c", code], overrides: ov, hostEnvironment: [:])
            var options = RunOptions(audit: AuditLog())
            options.stdio = (-1, fd, fd)
            let r = try SandboxRunner.run(plan, options: options)
            if r.exitCode == 0 { return nil }
            // What the sandbox wrote, read through the descriptor the supervisor opened: the
            // last 64 KiB at most (the lines shown are the last eight).
            var st = stat()
            let size = fstat(fd, &st) == 0 ? Int(st.st_size) : 0
            lseek(fd, off_t(max(0, size - Self.compileOutputTail)), SEEK_SET)
            let tail = (try? InputFile.read(descriptor: fd, cap: Self.compileOutputTail).get()) ?? []
            let text = String(decoding: tail, as: UTF8.self)
            let lines = text.split(separator: "\n").suffix(8).joined(separator: "\n")
            return lines.isEmpty ? "python3 \(RunLoop.describe(r))" : lines
        } catch {
            throw ExperimentError(.io, "compile check sandbox", cause: error)
        }
    }
}
