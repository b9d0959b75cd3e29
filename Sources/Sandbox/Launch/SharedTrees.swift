import CSandboxLaunch
import Glibc

/// Read-only trees every sandbox of this process clones instead of building: /dev (device
/// nodes, links, the mount points of shm and pts) and the files that cover /proc's host-wide
/// counters (22 of them). Built once, on kernels that clone from detached mounts (6.x); a
/// sandbox then takes one clone for /dev and one clone per cover, where it made a tmpfs, six
/// device binds, five links and the masks' files itself (about 0.1 ms).
///
/// What stays true:
/// - Everything shared is read-only in every sandbox (and locked so by the payload's own user
///   namespace): content, modes and times never change, reading a file on a read-only mount
///   does not touch its atime. What a sandbox writes under /dev goes to its own /dev/shm
///   tmpfs; its ptys to its own devpts instance.
/// - The shared /dev is a single mount: its six device nodes (null, zero, full, random,
///   urandom, tty, by their fixed numbers) were made in it by host root, so it is the one
///   mount of a sandbox that is not nodev (read-only, nosuid, noexec); the sandbox can make no
///   node of its own there (no CAP_MKNOD on the host, and the mount is read-only). Six binds
///   of the host's nodes were six more mounts to clone, copy when the payload locks them, and
///   unmount at the end. A supervisor without CAP_MKNOD (a container's) shares those binds
///   instead, in a nodev tmpfs, as before.
/// - The values in the covers (boot time, total memory, cpu count) do not move with activity;
///   they are read once, from the supervisor's /proc.
/// - Without them (an older kernel, or `RunOptions.sharedTrees` nil) each sandbox builds its
///   own, as it always did.
public final class SharedTrees: @unchecked Sendable {
    /// Detached mounts, close-on-exec, open for the life of the process.
    public let masks: Int32
    public let dev: Int32

    private init(masks: Int32, dev: Int32) {
        self.masks = masks
        self.dev = dev
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
        var dev: Int32 = -1
        let rc = ahl_build_shared(&masks, &dev)
        guard rc == 0 else {
            let why = rc == EINVAL ? "this kernel does not clone from detached mounts" : String(cString: strerror(rc))
            return .failure(Problem(message: "shared /dev and /proc covers: \(why); each sandbox builds its own"))
        }
        return .success(SharedTrees(masks: masks, dev: dev))
    }()
}
