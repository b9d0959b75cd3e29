import CSandboxLaunch
import CSandboxSpawn
import Glibc
import PolicyModel
import SupervisorIO

/// Parts of a sandbox made ahead of time, each for exactly one sandbox: its /dev and its user
/// namespace. As with `NetworkNamespacePool`, a long-lived supervisor makes them on a thread of
/// its own while the current sandbox runs, and the launch takes them instead of making them on
/// its critical path.
///
/// - /dev: the tmpfs with the sandbox's own six device nodes, links and mount points that the
///   monitor makes while still host root (launch.c `own_dev`), made by the supervisor (host
///   root) instead: the same object, made earlier (about 0.07 ms of the launch).
/// - The user namespace, with its maps written as the supervisor writes them for a monitor
///   that unshared its own (`uid hostUID 1`, `gid hostGID 1`, setgroups denied), by
///   `ahl_make_userns`: the monitor enters it, and neither waits for the supervisor to write
///   the maps nor for the round trip that tells it they are written (about 0.09 ms). The
///   namespaces the monitor then unshares (mount, pid, ipc, uts, cgroup) are owned by it, as
///   they were by the one it unshared.
///
/// What stays true:
/// - Nothing is shared: `take…` hands a descriptor over and forgets it; the runner closes its
///   copy once the monitor holds one, so the part dies with that sandbox. Ready descriptors are
///   close-on-exec.
/// - Every user namespace is for one identity (its ids inside and on the host); a sandbox is
///   only ever given one made for its own plan's identity.
/// - An empty pool costs nothing but the old path: the monitor makes its own. A pool that
///   cannot make a part (no CAP_MKNOD in a container; a user-namespace limit) stops making that
///   kind and says why (`failures`); launches go on without it.
public final class SandboxPartsPool: @unchecked Sendable {
    public let capacity: Int
    private var mutex = pthread_mutex_t()
    private var wake = pthread_cond_t()
    private var closed = false
    private var devices: [Int32] = []
    private var devicesStopped: String?
    private var namespaces: [IdentityKey: [Int32]] = [:]
    private var namespacesStopped: String?
    private var handedOut = (devices: 0, namespaces: 0)
    /// Bumped by `discardReady()`: a part made under an older generation is thrown away.
    private var generation = 0

    /// A user namespace's identity: the ids inside and the host ids they map to.
    struct IdentityKey: Hashable {
        var uid, gid, hostUID, hostGID: UInt32
        init(_ i: Identity) { (uid, gid, hostUID, hostGID) = (i.uid, i.gid, i.hostUID, i.hostGID) }
    }

    /// Identities kept ready at once (a supervisor runs a handful of policies).
    static let identityLimit = 4

    public init(capacity: Int = 2) {
        self.capacity = max(1, capacity)
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&wake, nil)
        detachedThread { [self] in fill() }
    }

    /// The process-wide pool `RunOptions` uses by default (none unless installed), installed
    /// with `NetworkNamespacePool` by the commands that launch sandboxes by the hundred.
    public static var installed: SandboxPartsPool? { slot.withLock { slot.value } }
    private static let slot = Locked<SandboxPartsPool?>(nil)

    @discardableResult
    public static func install(capacity: Int = 2) -> SandboxPartsPool {
        slot.withLock {
            if let p = slot.value { return p }
            let p = SandboxPartsPool(capacity: capacity)
            slot.value = p
            return p
        }
    }

    /// A ready /dev (a detached mount), now the caller's to close; nil when none is ready.
    public func takeDevice() -> Int32? {
        locked {
            guard !devices.isEmpty else { return nil }
            handedOut.devices += 1
            return devices.removeFirst()
        }
    }

    /// A ready user namespace made for `identity`, now the caller's to close; nil when none is
    /// ready. An identity not asked for before is kept ready from the next `refill()` on.
    public func takeUserNamespace(for identity: Identity) -> Int32? {
        let key = IdentityKey(identity)
        return locked {
            guard var list = namespaces[key] else {
                remember(key)
                return nil
            }
            guard !list.isEmpty else { return nil }
            handedOut.namespaces += 1
            let fd = list.removeFirst()
            namespaces[key] = list
            return fd
        }
    }

    /// Keeps user namespaces for `identity` ready from now on, and starts making them.
    public func prepare(for identity: Identity) {
        locked {
            if namespaces[IdentityKey(identity)] == nil { remember(IdentityKey(identity)) }
            pthread_cond_signal(&wake)
        }
    }

    private func remember(_ key: IdentityKey) {
        if namespaces.count >= Self.identityLimit, let (old, fds) = namespaces.first {
            for fd in fds { Glibc.close(fd) }
            namespaces[old] = nil
        }
        namespaces[key] = []
    }

    /// Lets the thread make parts up to `capacity` again: called when the current payload has
    /// run for a moment, as `NetworkNamespacePool.refill`, so the work does not compete with
    /// the launch it shortens.
    public func refill() {
        locked { pthread_cond_signal(&wake) }
    }

    /// Throws away every ready part, and any being made now, keeping the identities asked for.
    /// A part's inodes carry the time it was made (a /dev's nodes: ctime, mtime and birth time,
    /// to the nanosecond), and it is made when an earlier sandbox went quiet or ended: made
    /// while held-out sandboxes ran, it would show a later sandbox when one of them did. The
    /// supervisor calls this once the held-out sandboxes are gone (`HeldOutSettle.settle`).
    /// Returns how many were ready.
    @discardableResult
    public func discardReady() -> Int {
        locked {
            generation += 1
            let ready = devices + namespaces.values.flatMap({ $0 })
            for fd in ready { Glibc.close(fd) }
            devices.removeAll()
            for key in namespaces.keys { namespaces[key] = [] }
            return ready.count
        }
    }

    /// What the supervisor calls once held-out sandboxes are gone: the installed pool's ready
    /// parts and the installed template roots, which carry the times they were made at (decided
    /// by those sandboxes' ends), are thrown away. Says what it did, for the log.
    public static func discardTimedParts() -> String {
        let parts = installed?.discardReady() ?? 0
        let roots = SharedTrees.installed?.dropTemplates() ?? 0
        return "\(parts) part\(parts == 1 ? "" : "s") made ahead and \(roots) template root\(roots == 1 ? "" : "s") discarded (they carry when they were made)"
    }

    /// Why a kind of part is no longer made, if it is not.
    public var failures: [String] { locked { [devicesStopped, namespacesStopped].compactMap { $0 } } }

    /// Parts handed out so far.
    public var counts: (devices: Int, namespaces: Int) { locked { handedOut } }

    /// Stops the thread and closes what nobody took.
    public func close() {
        locked {
            closed = true
            for fd in devices + namespaces.values.flatMap({ $0 }) { Glibc.close(fd) }
            devices.removeAll()
            namespaces.removeAll()
            pthread_cond_signal(&wake)
        }
    }

    /// Blocks until every kind still made is full (for `identity`'s namespaces too, when
    /// given), or `timeoutSeconds` pass. Benchmarks and tests that want a warm pool.
    public func waitUntilReady(for identity: Identity? = nil, timeoutSeconds: Double = 5) -> Bool {
        let end = monotonicNow() + timeoutSeconds
        while monotonicNow() < end {
            let done = locked { () -> Bool in
                let dev = devicesStopped != nil || devices.count >= capacity
                let ns = identity.map { namespacesStopped != nil || (namespaces[IdentityKey($0)]?.count ?? 0) >= capacity } ?? true
                return closed || (dev && ns)
            }
            if done { return true }
            usleep(1000)
        }
        return false
    }

    private enum Job { case device, namespace(IdentityKey) }

    private func fill() {
        while true {
            let picked = locked { () -> (Job, Int)? in
                while true {
                    if closed { return nil }
                    if devicesStopped == nil && devices.count < capacity { return (.device, generation) }
                    if namespacesStopped == nil, let key = namespaces.first(where: { $0.value.count < capacity })?.key {
                        return (.namespace(key), generation)
                    }
                    pthread_cond_wait(&wake, &mutex)
                }
            }
            guard let (job, made) = picked else { return }
            var fd: Int32 = -1
            switch job {
            case .device:
                let rc = LaunchCodeLock.shared.withLock { ahl_build_dev(&fd) }
                locked {
                    if rc != 0 { devicesStopped = "/dev ahead of time: \(String(cString: strerror(rc))); each monitor makes its own" }
                    else if closed || made != generation { Glibc.close(fd) } else { devices.append(fd) }
                }
            case .namespace(let key):
                let rc = ahl_make_userns(key.uid, key.gid, key.hostUID, key.hostGID, &fd)
                locked {
                    if rc != 0 { namespacesStopped = "user namespaces ahead of time: \(String(cString: strerror(rc))); each monitor unshares its own" }
                    else if closed || made != generation || namespaces[key] == nil { Glibc.close(fd) } else { namespaces[key]!.append(fd) }
                }
            }
        }
    }

    private func locked<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return body()
    }
}

/// CSandboxLaunch's code run in the supervisor (ahl_build_shared, ahl_build_template,
/// ahl_build_dev) reports errors through one process-wide variable: one caller at a time.
enum LaunchCodeLock {
    static let shared = Mutex()
}
