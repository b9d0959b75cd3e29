// A train task's trace: the evidence the coding agent may read to improve agent.py.
//
// Only named, bounded files are copied out of the scratch directory — never the working
// copy wholesale (it may be huge, and it is the agent's own output, already reflected in the
// logs). Test-split runs never come here: their traces would be test data.

import FoundationEssentials
import Glibc
import SandboxPolicy
import SupervisorIO

extension TaskExecution {
    /// The files a trace holds, besides `reward.txt` (present only if a reward file was read)
    /// and `result.json` (written last, so its presence means the trace is complete).
    static let outputFiles = ["agent.stdout", "agent.stderr", "verifier.stdout", "verifier.stderr"]

    /// Writes the trace into `directory` (created 0755 if missing; files 0644, replaced if
    /// present). `outputs` is the scratch `out/` fd, or -1 when the run never got that far.
    /// The directory is the supervisor's: a write that fails (a full disk) is its failure,
    /// not the task's (`supervisorFailure`), and the operation fails with it. It stops at
    /// the first, so `result.json` is never written for an incomplete trace.
    mutating func writeTrace(to directory: String, outputs: Int32) {
        if let e = FileSystem.makeDirectories(directory, mode: 0o755) {
            return supervisorFailure = "trace \(directory): \(ErrnoName.describe(e))"
        }
        let dir = FileSystem.openDirectory(directory)
        guard dir >= 0 else { return supervisorFailure = "trace \(directory): \(ErrnoName.describe(errno))" }
        defer { close(dir) }
        func put(_ name: String, _ bytes: [UInt8]?) -> Bool {
            guard let bytes else {
                // Nothing of this kind in this run: do not leave a previous run's file behind.
                if let e = FileSystem.removeEntry(at: dir, name) {
                    supervisorFailure = "trace \(directory)/\(name): \(ErrnoName.describe(e))"
                    return false
                }
                return true
            }
            if let e = FileSystem.writeFile(at: dir, name, bytes, mode: 0o644) {
                supervisorFailure = "trace \(directory)/\(name): \(ErrnoName.describe(e))"
                return false
            }
            return true
        }
        guard put("instruction.md", instruction) else { return }
        for name in Self.outputFiles {
            guard put(name, outputs >= 0 ? FileSystem.readCapped(at: outputs, name, cap: TaskRunner.traceCap) : nil) else { return }
        }
        guard put("reward.txt", rewardRaw) else { return }
        for (name, bytes) in extraTrace {
            guard put(name, bytes) else { return }
        }
        do {
            _ = put("result.json", try TraceJSON.encode(outcome))
        } catch {
            supervisorFailure = "trace \(directory)/result.json: \(error)"
        }
    }
}

/// How a trace's `result.json` is written: pretty, sorted keys, trailing newline.
enum TraceJSON {
    static func encode(_ outcome: TaskOutcome) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        return Array(try encoder.encode(outcome)) + [0x0A]
    }
}

/// Train traces as the supervisor keeps them in the workspace: every failure is an error
/// naming the path and errno (the directory is the supervisor's, so a failure is its own).
public enum TraceFiles {
    /// `mkdir -p` (new directories get exactly `mode`), with the path and errno in the error.
    /// Also what holds snapshots: the same directories-of-the-supervisor rule.
    public static func makeDirectories(_ path: String, mode: mode_t = 0o755) throws(BenchmarkError) {
        if let e = FileSystem.makeDirectories(path, mode: mode) { throw BenchmarkError(.io, "\(path): \(ErrnoName.describe(e))") }
    }

    /// Removes a task's trace directory; nothing to do if it is not there.
    public static func remove(_ directory: String) throws(BenchmarkError) {
        if let problem = FileSystem.removeTree(directory).first {
            throw BenchmarkError(.io, "trace \(directory): \(problem)")
        }
    }

    /// Copies a task's trace directory to `destination` (which must not exist): the first
    /// run's traces, kept as the baseline. Nothing to do if `source` is not there.
    public static func copy(_ source: String, to destination: String) throws(BenchmarkError) {
        let s = FileSystem.openDirectory(source)
        guard s >= 0 else {
            if errno == ENOENT { return }
            throw BenchmarkError(.io, "trace \(source): \(ErrnoName.describe(errno))")
        }
        defer { close(s) }
        guard mkdir(destination, 0o755) == 0 else { throw BenchmarkError(.io, "trace \(destination): \(ErrnoName.describe(errno))") }
        let d = FileSystem.openDirectory(destination)
        guard d >= 0 else { throw BenchmarkError(.io, "trace \(destination): \(ErrnoName.describe(errno))") }
        defer { close(d) }
        do throws(IOFailure) {
            try FileSystem.copyTree(from: s, to: d, owner: (getuid(), getgid()), skip: [], label: source)
        } catch {
            throw BenchmarkError(.io, "trace \(destination)", cause: error)
        }
    }
}
