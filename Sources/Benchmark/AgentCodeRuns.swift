// Which verifiers ran agent code.
//
// A test that imports what agent.py wrote in /app, or runs a program it built there, runs
// agent code with the verifier's rights, before the verdict: an `__eq__` that is always
// true, an `os._exit(0)`, a file that reads the test's own expected values. Nothing outside
// the test script can tell that from solving; it is the task's design (docs/benchmarks.md,
// the "code under test" row). What can be told is that it happened: while each verifier
// runs, fanotify on /app's file system (the task's own tmpfs, nothing else on it moves)
// reports every file executed and every code file opened there, with the opener's program
// (`OpenWatch`). A task whose verifier executed a file from /app, or opened one whose name
// is code (.py, .so, .sh, ...) from any program but git (whose `git add` reads every file as
// data), is flagged: in the task's outcome, the run's and the gate's records, and the report.
// A flag is a reason to look, not a verdict: the rewards stand.

import Sandbox

enum AgentCodeRuns {
    /// Names that are code to their usual reader (an interpreter, the loader, a shell).
    static let codeSuffixes = [".py", ".pyc", ".pth", ".so", ".sh", ".bash", ".js", ".mjs", ".cjs", ".ts", ".rb", ".pl", ".pm",
                               ".php", ".lua", ".jar", ".class", ".wasm", ".r", ".jl"]
    /// Programs that read every file of a tree as data.
    static let dataReaders: Set<String> = ["git"]
    /// Lines kept per task.
    static let limit = 20

    /// The file as the verifier saw it (`/app/...`), or nil when it is not in the working
    /// copy. fanotify's descriptor names a file opened through the verifier's bind by its
    /// path in the verifier's mount namespace (`/app/...`); one opened on the host, by its
    /// host path under `app`.
    static func inApp(_ path: String, app: String) -> String? {
        if path.hasPrefix("/app/") { return path }
        if path.hasPrefix(app + "/") { return "/app" + path.dropFirst(app.count) }
        return nil
    }

    /// Whether an open of the working copy (`app`: its host path) is agent code run.
    static func counts(_ open: OpenWatch.Open, app: String) -> Bool {
        guard let path = inApp(open.path, app: app) else { return false }
        if open.executed { return true }
        if dataReaders.contains(open.exe) { return false }
        let name = path[path.index(after: path.lastIndex(of: "/")!)...].lowercased()
        return codeSuffixes.contains { name.hasSuffix($0) } || name.contains(".so.")
    }

    /// One line per file (`/app/...` as the verifier saw it), nil when nothing ran.
    static func lines(_ seen: OpenWatch.Seen, app: String) -> [String]? {
        var out = seen.opens.prefix(limit).map { o in
            "\(o.executed ? "executed" : "opened") \(inApp(o.path, app: app) ?? o.path)\(o.exe.isEmpty ? "" : " (\(o.exe))")"
        }
        let more = seen.more + max(0, seen.opens.count - limit)
        if more > 0 { out.append("and \(more) more") }
        if seen.overflowed { out.append("more opens than could be read: the list is incomplete") }
        return out.isEmpty ? nil : out
    }
}
