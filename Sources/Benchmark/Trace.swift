// A train task's trace: the evidence the coding agent may read to improve agent.py.
//
// Only named, bounded files are copied out of the scratch directory — never the working
// copy wholesale (it may be huge, and it is the agent's own output, already reflected in the
// logs). Test-split runs never come here: their traces would be test data.

import FoundationEssentials
import Glibc

extension TaskExecution {
    /// The files a trace holds, besides `reward.txt` (present only if a reward file was read)
    /// and `result.json` (written last, so its presence means the trace is complete).
    static let outputFiles = ["agent.stdout", "agent.stderr", "verifier.stdout", "verifier.stderr"]

    /// Writes the trace into `directory` (created 0755 if missing; files 0644, replaced if
    /// present). `outputs` is the scratch `out/` fd, or -1 when the run never got that far.
    /// A failure is noted in the outcome's detail; it never changes the score.
    mutating func writeTrace(to directory: String, outputs: Int32) {
        if let e = FileSystem.makeDirectories(directory, mode: 0o755) {
            return note("trace \(directory): \(FileSystem.errorText(e))")
        }
        let dir = FileSystem.openDirectory(directory)
        guard dir >= 0 else { return note("trace \(directory): \(FileSystem.errorText())") }
        defer { close(dir) }
        var failures: [String] = []
        func put(_ name: String, _ bytes: [UInt8]?) {
            guard let bytes else {
                // Nothing of this kind in this run: do not leave a previous run's file behind.
                if unlinkat(dir, name, 0) != 0 && errno != ENOENT { failures.append("\(name): \(FileSystem.errorText())") }
                return
            }
            if let e = FileSystem.writeFile(at: dir, name, bytes, mode: 0o644) { failures.append("\(name): \(FileSystem.errorText(e))") }
        }
        put("instruction.md", instruction)
        for name in Self.outputFiles {
            put(name, outputs >= 0 ? FileSystem.readCapped(at: outputs, name, cap: TaskRunner.traceCap) : nil)
        }
        put("reward.txt", rewardRaw)
        if !failures.isEmpty { note("trace: \(failures.joined(separator: ", "))") }
        do {
            put("result.json", try TraceJSON.encode(outcome))
        } catch {
            note("trace: result.json: \(error)")
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
