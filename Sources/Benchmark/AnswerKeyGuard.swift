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
// way gets EPERM and the open is recorded against agent.py, whose files led the test there;
// one whose name cannot be read is refused too (fail closed) and noted, blaming nobody. A
// directory opened through a link is refused like a file (its descriptor would open the names
// below it relatively). Honest tests name their files: `/tests/x`, `cd /tests; cat x`, a copy
// made with `cp -r /tests`, pytest's imports, `cat /dev/stdin < /tests/x` (a reopen of a
// descriptor the opener holds of the file). A verifier whose /tests cannot be guarded does not
// start (setup failed).
//
// Not seen at all (a review's): a comparison that opens neither file (GNU `diff`, Python's
// `filecmp.cmp`: the same device and inode by `stat` are "identical"), and a descriptor opened
// with O_PATH through the link (no fanotify event), then reopened. The flag below sees such a
// link only if it is still there and its target names the key as written.
//
// Left open: a test that resolves such a link first (`realpath`, `Path.resolve()`) and opens
// the resolved name, or changes directory through it (`cd`, which opens nothing) and opens by a
// relative name; a link agent.py's files lead to a copy of the key the test made itself
// (`cp -r /tests /tmp/t`): only the original's files are guarded. Seen, not refused: a link
// into /tests or /solution left in the verifier's /tmp, /app or logs when it ends (its target read
// as written, `..` taken lexically) is recorded as a `planted_link` flagged, the reward
// standing; one the test removed, or reaching the key through another link, is not.

import Glibc
import Sandbox
import SupervisorIO

enum AnswerKeyGuard {
    /// Guards the file system of the verifier's /tests (`TaskScratch.testsPath`, a tmpfs of its
    /// own) until `stop`; nil with why when it cannot, and the verifier must not start then.
    static func start(_ tests: String) -> Result<OpenWatch, SandboxError> {
        do throws(SandboxError) {
            return .success(try OpenWatch(guarding: tests) { open, event in
                let how = event.namedWithoutLinks()
                switch how.named {
                case true?: return false
                case false?: open.refused = "through a link, by the name \(how.name)"
                case nil: open.refused = Self.unread + " (\(how.name.isEmpty ? how.why : how.name + ": " + how.why))"
                }
                return true
            })
        } catch {
            return .failure(error)
        }
    }

    /// Links into the answer key the verifier left in the trees it wrote (`trees`: each as
    /// the verifier names it, and its path here), recorded against agent.py as flagged: the
    /// test made them from what agent.py left, and a test that resolved one first opened the
    /// key by a name the guard allows.
    static func flagLinksLeft(_ trees: [(label: String, path: String)], audit: AuditLog, as sandbox: String, run: inout TaskExecution) {
        var left: [String] = []
        for tree in trees {
            let dir = FileSystem.openDirectory(tree.path)
            guard dir >= 0 else { continue }
            defer { close(dir) }
            let base = tree.label.split(separator: "/").map { Array($0.utf8) }
            do throws(IOFailure) {
                for link in try LinkWalk.links(under: dir, entryLimit: PlantedLinks.entryLimit, depthLimit: PlantedLinks.depthLimit, label: tree.label) {
                    let start = link.target.first == UInt8(ascii: "/") ? [] : base + link.path.dropLast()
                    var parts: LinkWalk.Components = []
                    for c in start + link.target.split(separator: UInt8(ascii: "/")).map(Array.init) {
                        if c == Array("..".utf8) { _ = parts.popLast() } else if c != Array(".".utf8) { parts.append(c) }
                    }
                    guard let top = parts.first, Self.keyDirectories.contains(top) else { continue }
                    left.append(tree.label + "/" + link.path.map(PlantedLinks.shown).joined(separator: "/") + " -> " + PlantedLinks.shown(link.target))
                }
            } catch {
                run.note("links left in \(tree.label) not checked: \(error)")
            }
        }
        for link in left {
            var event = AuditEvent(sandbox: sandbox, kind: .plantedLink, name: link, action: "flagged")
            event.detail = "the verifier ended with \(link) in its files, a link into the answer key (made from what agent.py left, or by the test itself): flagged, the reward stands (a test that resolves such a link first opens the key by a name without links)"
            audit.record(event)
        }
        if !left.isEmpty { run.note("links into the answer key left by the verifier: " + left.prefix(3).joined(separator: "; ")) }
    }

    static let keyDirectories: Set<[UInt8]> = [Array("tests".utf8), Array("solution".utf8)]

    /// What a refusal whose name could not be read says: the supervisor's failing, not agent.py's.
    static let unread = "by a name that could not be read"

    /// Ends the guard. Each open refused through a link is recorded (a `planted_link` of
    /// agent.py's: its files led the test there); one refused unread is only noted.
    static func stop(_ watch: OpenWatch, tests: String, audit: AuditLog, as sandbox: String, run: inout TaskExecution) {
        let seen = watch.stop()
        // The opener's path as the kernel names it from here: the verifier's own mount
        // (/tests/...), or the copy in the scratch.
        func shown(_ path: String) -> String { path.hasPrefix(tests + "/") ? "/tests" + path.dropFirst(tests.count) : path }
        let refused = seen.opens.filter { $0.refused != nil }
        for open in refused where !open.refused!.hasPrefix(Self.unread) {
            let file = shown(open.path)
            var event = AuditEvent(sandbox: sandbox, kind: .plantedLink, name: file, action: "refused")
            event.detail = "the verifier (\(open.exe)) opened the answer key \(file) \(open.refused!): refused, a link made from what agent.py left"
            audit.record(event)
        }
        if !refused.isEmpty {
            run.note("refused \(refused.count) open(s) of the answer key: "
                     + refused.prefix(3).map { "\(shown($0.path)) \($0.refused!)" }.joined(separator: "; "))
        }
        if seen.overflowed { run.note("the answer key's guard lost events: some opens were allowed unread") }
    }
}
