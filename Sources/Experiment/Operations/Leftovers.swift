import Benchmark
import BrokerWire
import Execution
import ExperimentModel
import Foundation
import Glibc
import Ledger
import Sandbox
import SupervisorIO

/// What a supervisor killed with SIGKILL leaves on the host, and its removal by the next one.
///
/// Everything it can leave is attributed to it by `ProcessIdentity` (pid, start time, pid
/// namespace), never by name pattern alone: sandbox cgroups by their names (`SandboxCgroup`,
/// swept before the first launch and at the CLI's start), per-task scratch directories and
/// their tmpfs mounts by a marker beside each (`TaskScratch`), the broker's socket by a marker
/// beside its directory (here). Whatever belongs to a supervisor that still runs, another
/// experiment's included, is left alone. The sandboxes' processes end with their supervisor
/// (their control sockets close); those it left frozen end with their cgroups.
enum Leftovers {
    /// Removes the leftovers of supervisors that are gone from the experiment's scratch root
    /// and run directory. Run at start by every command that holds the experiment lock.
    /// Returns lines for the operator.
    static func sweep(_ layout: ExperimentLayout, scratchRoot: String) -> [String] {
        TaskRunner.sweepScratch(root: scratchRoot) + sweepBroker(layout) + sweepTemporaries(layout) + HeldOutVM.sweepWork(scratchRoot)
    }

    /// Temporary files of `AtomicFile.write` left by a supervisor killed between creating and
    /// renaming one: in the views the coding agent reads, the history it reads, agent/, the
    /// private directory and the snapshots (a directory bound into task sandboxes that must
    /// hold exactly agent.py). Every writer of these holds the experiment lock, as the caller
    /// does.
    static func sweepTemporaries(_ layout: ExperimentLayout) -> [String] {
        let snapshots = FileSystem.names(in: layout.snapshots).map { layout.snapshots + "/" + $0 }
        var removed: [String] = []
        for dir in [layout.workspace, layout.agentDirectory, layout.privateDirectory, layout.historyDirectory] + snapshots {
            removed += AtomicFile.removeTemporaries(in: dir).map { dir + "/" + $0 }
        }
        guard !removed.isEmpty else { return [] }
        let shown = removed.prefix(5).joined(separator: ", ") + (removed.count > 5 ? " and \(removed.count - 5) more" : "")
        return ["removed \(removed.count) temporary file\(removed.count == 1 ? "" : "s") of writes cut off by a supervisor that is gone: \(shown)"]
    }

    static let brokerMarkerPrefix = BrokerWire.socketName + "."

    /// Creates `run/broker.sock.oPID-START-PIDNS` for this process, before the socket is
    /// bound. Returns its path, for `release`.
    static func claimBroker(_ layout: ExperimentLayout) throws -> String {
        let path = layout.runDirectory + "/" + brokerMarkerPrefix + ProcessIdentity.current.tag
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ExperimentError(.io, "\(path): \(String(cString: strerror(errno))); the broker was not started") }
        close(fd)
        return path
    }

    /// Removes a marker once what it marks is gone.
    static func release(_ marker: String) { unlink(marker) }

    /// The broker socket of a supervisor that is gone, and its marker. A socket without a
    /// marker (made before markers existed) is stale too: the caller holds the experiment
    /// lock, which a live run of this experiment would hold.
    static func sweepBroker(_ layout: ExperimentLayout) -> [String] {
        let names = FileSystem.names(in: layout.runDirectory)
        var live = false
        var gone: [pid_t] = []
        for name in names where name.hasPrefix(brokerMarkerPrefix) {
            guard let owner = ProcessIdentity(tag: name.dropFirst(brokerMarkerPrefix.count)) else { continue }
            if owner.isAlive {
                live = true
            } else {
                release(layout.runDirectory + "/" + name)
                gone.append(owner.pid)
            }
        }
        var st = stat()
        guard !live, lstat(layout.brokerSocket, &st) == 0, (st.st_mode & S_IFMT) == S_IFSOCK else { return [] }
        guard unlink(layout.brokerSocket) == 0 else {
            return ["could not remove the stale broker socket \(layout.brokerSocket): \(String(cString: strerror(errno)))"]
        }
        let who = gone.isEmpty ? "a supervisor that is gone" : "supervisor pid \(gone.map(String.init).joined(separator: ", ")), which is gone"
        return ["removed the broker socket \(layout.brokerSocket) left by \(who)"]
    }
}
