// Only the test script writes the reward.
//
// A verifier runs code it did not write: what agent.py left in /app (a module a test
// imports, a git filter driver `git add` runs, a daemon a build starts). That code runs as
// the test script's user, so permissions cannot keep it from `/logs/verifier`. What can be
// known is who wrote: the verifier's logs directory is a tmpfs of its own, watched with
// fanotify from before the verifier starts (`ChangeWatch`), and once the verifier's sandbox
// is gone every change to `reward.txt` or `reward.json` — by name in that directory, or to
// the files themselves through any other name — must have been made by the test script's
// own process (the sandbox's payload, `bash /tests/test.sh`). Test scripts write their reward
// themselves (`echo 1 > /logs/verifier/reward.txt`); a reward created, opened, written,
// truncated, renamed, made read-only or removed by any other process is void, whatever the
// test script did after, and the change is recorded against agent.py. Opens count because a
// write through a shared mapping raises no modify event and the close that would name the
// writer can be delayed past the verifier's end (a review did both: the descriptor in flight
// at the bottom of a chain of Unix sockets a garbage cycle holds, closed by a kernel worker a
// second later; the gate accepted at 1.00). A queue that overflowed voids it too (it cannot
// be vouched for).
//
// What this does not close: code that runs inside the test script's own process (a test
// script that sources a file from /app), and a test that trusts what agent code returns or
// how it exits (an `__eq__` that is always true, `os._exit(0)` in a module pytest imports):
// the test script itself then writes the reward it was fooled into. docs/benchmarks.md.

import Sandbox
import SupervisorIO

enum RewardWriters {
    /// The files `Reward.read` takes a reward from.
    static let names: Set<String> = ["reward.txt", "reward.json"]
    /// The logs file system: a reward and the verifier's reports and logs, few files. A cap,
    /// not an allocation (tmpfs takes memory as it is written).
    static let logsOptions = "size=1g,nr_inodes=4096,mode=0755"

    /// Why the reward in `logs` cannot be trusted, or nil when every change to a reward file
    /// was the test script's (`payload`: its pid, nil when unknown).
    static func problem(_ changes: [ChangeWatch.Change], payload: Int32?, logs: Int32) -> (path: String, detail: String)? {
        if changes.contains(where: \.isOverflow) {
            return ("/logs/verifier", "more changes in /logs/verifier than the kernel could report: the reward's writer is unknown")
        }
        // The reward files as they are now, by handle: a change made through another name (a
        // hard link, the name a file had before it was renamed into place) is theirs too.
        let files = names.sorted().compactMap { name in ChangeWatch.handle(at: logs, name).map { (name, $0) } }
        for c in changes where c.mask & ChangeWatch.changeOrOpen != 0 && c.pid != payload {
            let target: String
            var through = ""
            if c.inTop && names.contains(c.name) {
                target = c.name
            } else if !c.object.isEmpty, let file = files.first(where: { $0.1 == c.object }) {
                target = file.0
                through = ", through the name \(c.name.isEmpty ? "of another entry" : c.name)"
            } else {
                continue
            }
            let path = "/logs/verifier/" + target
            let who = payload == nil ? "the test script's pid is unknown" : "not the test script"
            return (path, "\(path) \(describe(c.mask)) by pid \(c.pid)\(through) (\(who)): only the test script's own process may write the reward")
        }
        return nil
    }

    static func describe(_ mask: UInt64) -> String {
        if mask & ChangeWatch.create != 0 { return "created" }
        if mask & (ChangeWatch.movedTo | ChangeWatch.movedFrom | ChangeWatch.moveSelf) != 0 { return "renamed" }
        if mask & (ChangeWatch.delete | ChangeWatch.deleteSelf) != 0 { return "removed" }
        if mask & ChangeWatch.attrib != 0 { return "changed (metadata)" }
        if mask & (ChangeWatch.modify | ChangeWatch.closeWrite) == 0 && mask & ChangeWatch.open != 0 { return "opened" }
        return "written"
    }
}
