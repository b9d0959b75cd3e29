import CSandboxLaunch
import CSandboxSpawn
import Glibc

/// The read-only tree every sandbox of this process clones instead of building it: the files
/// that cover /proc's host-wide counters (22 of them). Built once, on kernels that clone from
/// detached mounts (6.x); a sandbox then takes one clone per cover, where it made a tmpfs and
/// the masks' files itself.
///
/// What stays true:
/// - Everything shared is read-only in every sandbox (and locked so by the payload's own user
///   namespace): content, modes and times never change, and reading a file on a read-only
///   mount does not touch its atime.
/// - The values in the covers (boot time, total memory, cpu count) do not move with activity;
///   they are read once, from the supervisor's /proc.
/// - Without it (an older kernel, or `RunOptions.sharedTrees` nil) each sandbox builds its
///   own, as it always did.
/// - /dev is not shared: each sandbox's monitor makes its own (one tmpfs with its own device
///   nodes, launch.c `own_dev`), so no lock, watch or tty time on a /dev inode reaches another
///   sandbox. (Shared, the /dev inodes were such a channel, as the host's nodes were before.)
public final class SharedTrees: @unchecked Sendable {
    /// Detached mounts, close-on-exec, open for the life of the process.
    public let masks: Int32
    /// The mount namespace monitors copy instead of the host's (`ahl_build_seed`), or -1 when
    /// it could not be made (each monitor then copies the host's, as before).
    public let seed: Int32
    /// Why there is no seed, if there is none.
    public let seedProblem: String?
    /// Template roots by `TemplateLayout.key` (TemplateRoots.swift).
    let templates = Locked<[[UInt8]: TemplateRoot]>([:])
    /// Template roots built, and builds that failed (the sandbox then built its own root).
    let templateBuilds = Locked(0)
    let templateFailures = Locked(0)
    public var templatesBuilt: Int { templateBuilds.withLock { templateBuilds.value } }
    public var templatesFailed: Int { templateFailures.withLock { templateFailures.value } }

    private init(masks: Int32) {
        self.masks = masks
        var fd: Int32 = -1
        let rc = ahl_build_seed(&fd)
        seed = rc == 0 ? fd : -1
        seedProblem = rc == 0 ? nil : "seed mount namespace: \(String(cString: strerror(rc))); each monitor copies the host's"
    }

    /// The process's trees, which `RunOptions` uses by default once installed: by the commands
    /// that launch many sandboxes (`run`, `benchmark`, `gate`, ...), not by one-shot `sandbox
    /// exec`, which would build them and then clone them once.
    public static var installed: SharedTrees? { slot.withLock { slot.value } }
    private static let slot = Locked<SharedTrees?>(nil)

    /// Builds and installs them (once); nil when this kernel cannot (`unavailableReason`).
    @discardableResult
    public static func install() -> SharedTrees? {
        slot.withLock {
            if slot.value == nil, case .success(let t) = built { slot.value = t }
            return slot.value
        }
    }

    /// Why there are none, for `-v` and bench output; nil when they could be built.
    public static var unavailableReason: String? {
        if case .failure(let why) = built { return why.message }
        return nil
    }

    struct Problem: Error { var message: String }

    /// Built at most once per process (ahl_build_shared is not for concurrent callers).
    private static let built: Result<SharedTrees, Problem> = {
        guard geteuid() == 0 else { return .failure(Problem(message: "needs root")) }
        var masks: Int32 = -1
        let rc = LaunchCodeLock.shared.withLock { ahl_build_shared(&masks) }
        guard rc == 0 else {
            let why = rc == EINVAL ? "this kernel does not clone from detached mounts" : String(cString: strerror(rc))
            return .failure(Problem(message: "shared /proc covers: \(why); each sandbox builds its own"))
        }
        return .success(SharedTrees(masks: masks))
    }()
}
