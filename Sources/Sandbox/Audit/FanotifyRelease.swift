import CSystemCalls
import Glibc

/// Fanotify groups let go of off the task's path. Closing a group waits for an SRCU grace
/// period in the kernel (fsnotify_destroy_group): 2-4 ms idle here, about 10 ms under load,
/// paid twice per task (the reward's change watch and the verifier's open watch) and on the
/// critical path of every task. A flush first removes the group's marks without waiting, so
/// nothing is queued on it afterwards (no opener can be held by a group nobody reads); the
/// close itself is then done by a thread of its own, at once.
enum FanotifyRelease {
    /// Flushes `group`'s file-system marks and hands it to the closing thread (`closer`:
    /// tests give one that waits); when the flush fails the group is closed here, as before.
    static func release(_ group: Int32, to closer: DeferredClose = closer) {
        guard group >= 0 else { return }
        guard ahs_fanotify_flush(group) == 0 else {
            close(group)
            return
        }
        closer.close(group)
    }

    private static let closer = DeferredClose(settleSeconds: 0)
}
