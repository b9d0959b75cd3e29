// The answer key is opened only by names that reach it through no link.
//
// Links agent.py leaves in /app are removed before the verifier starts (`PlantedLinks`), but
// the test itself can make one from what agent.py left: `tar -x` of an archive holding
// `out.txt -> /tests/expected.txt` into its /tmp, `git clone` of /app, a copy of a tree that
// recreates links. The test then compares the link's target with itself and passes. So every
// file of the verifier's /tests (a copy in the task's scratch: marks on it see only this
// verifier) is guarded by fanotify permission events while the verifier runs: the opener waits
// while the supervisor reads the name it passed (its open or exec call, from /proc) and
// resolves it again from the opener's root, working directory or directory descriptor through
// no link at all. A name that reaches the file that way is allowed; a name with a link on the
// way (or, failing closed, one that cannot be read) gets EPERM, and the open is recorded
// against agent.py, whose files led the test there. Honest tests name their files: `/tests/x`,
// `cd /tests; cat x`, a copy made with `cp -r /tests`, pytest's imports.
//
// Left open: a test that resolves such a link first (`realpath`, `Path.resolve()`) and opens
// the resolved name, or changes directory through it and opens by a relative name; the open
// is then by a name without links. A kernel without permission events guards nothing (said in
// the task's notes).

import Sandbox
import SupervisorIO

enum AnswerKeyGuard {
    /// Guards `files` (the copy's) until `stop`; nil (and a note) when none or when the kernel
    /// cannot hold an open.
    static func start(_ files: [String], run: inout TaskExecution) -> OpenWatch? {
        guard !files.isEmpty else { return nil }
        do throws(SandboxError) {
            return try OpenWatch(guarding: files) { open, event in
                let how = event.namedWithoutLinks()
                switch how.named {
                case true?: return false
                case false?: open.refused = "through a link, by the name \(how.name)"
                case nil: open.refused = "by a name that could not be read (\(how.name.isEmpty ? how.why : how.name + ": " + how.why))"
                }
                return true
            }
        } catch {
            run.note("\(error.message): the answer key's opens are not guarded")
            return nil
        }
    }

    /// Ends the guard; each refused open recorded (a `planted_link` of agent.py's) and noted.
    static func stop(_ watch: OpenWatch?, tests: String, audit: AuditLog, run: inout TaskExecution) {
        guard let watch else { return }
        let seen = watch.stop()
        let refused = seen.opens.filter { $0.refused != nil }
        // The opener's path as the kernel names it from here: the verifier's own mount
        // (/tests/...), or the copy in the scratch.
        func shown(_ path: String) -> String { path.hasPrefix(tests + "/") ? "/tests" + path.dropFirst(tests.count) : path }
        for open in refused {
            let file = shown(open.path)
            var event = AuditEvent(sandbox: "supervisor", kind: .plantedLink, name: file, action: "refused")
            event.detail = "the verifier (\(open.exe)) opened the answer key \(file) \(open.refused!): refused, a link made from what agent.py left"
            audit.record(event)
        }
        if !refused.isEmpty {
            run.note("refused \(refused.count) open(s) of the answer key through a link: "
                     + refused.prefix(3).map { "\(shown($0.path)) \($0.refused!)" }.joined(separator: "; "))
        }
        if seen.overflowed { run.note("the answer key's guard lost events: some opens were allowed unread") }
    }
}
