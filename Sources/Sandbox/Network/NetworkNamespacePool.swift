import CSystemCalls
import Glibc
import SupervisorIO

/// Network namespaces made ahead of time, each handed to exactly one sandbox.
///
/// A new network namespace costs about 0.5 ms of kernel work (every protocol's per-namespace
/// state), a tenth of a sandbox launch, and a supervisor launches two sandboxes per task. A
/// long-lived supervisor therefore keeps a few ready, made by a thread of its own while the
/// current sandbox runs; the launcher enters one (setns) instead of unsharing a new one.
///
/// What stays true:
/// - Each namespace is fresh (lo down, nothing bound) and goes to one sandbox: `take()` hands
///   its descriptor over and forgets it; the runner closes it once the monitor holds it, so the
///   namespace dies with that sandbox. Ready descriptors are close-on-exec: no sandbox (nor
///   the launcher) inherits another's.
/// - The initial user namespace owns it (the supervisor made it), not the sandbox's: the
///   monitor, still host root, brings lo up and opens the proxy's listener there; nothing in
///   the sandbox, whatever capabilities it holds in its own user namespace, can add
///   interfaces, change addresses or routes, or take lo down.
/// - An empty pool costs nothing but the old path: the launcher's monitor unshares a namespace
///   itself, as host root too (net.c), so it belongs to the initial user namespace as well.
///   A pool that cannot make namespaces (a kernel limit, a restricted container) stops and
///   says why (`failure`); launches go on without it.
public final class NetworkNamespacePool: @unchecked Sendable {
    public let capacity: Int
    private var mutex = pthread_mutex_t()
    private var wake = pthread_cond_t()
    private var ready: [Int32] = []
    private var closed = false
    private var stoppedBecause: String?
    private var handedOut = 0

    /// Starts the thread that keeps `capacity` namespaces ready.
    public init(capacity: Int = 2) {
        self.capacity = max(1, capacity)
        pthread_mutex_init(&mutex, nil)
        pthread_cond_init(&wake, nil)
        detachedThread { [self] in fill() }
    }

    /// The process-wide pool that `RunOptions` uses by default (none unless installed):
    /// installed by the commands that launch many sandboxes (`run`, `benchmark`, `gate`, ...),
    /// not by `sandbox exec`, which launches one.
    public static var installed: NetworkNamespacePool? { slot.withLock { slot.value } }
    private static let slot = Locked<NetworkNamespacePool?>(nil)

    @discardableResult
    public static func install(capacity: Int = 2) -> NetworkNamespacePool {
        slot.withLock {
            if let p = slot.value { return p }
            let p = NetworkNamespacePool(capacity: capacity)
            slot.value = p
            return p
        }
    }

    /// A ready namespace's descriptor, now the caller's to close; nil when none is ready yet
    /// (the launcher then makes its own). The pool is not refilled until `refill()`.
    public func take() -> Int32? {
        locked {
            guard !ready.isEmpty else { return nil }
            handedOut += 1
            return ready.removeFirst()
        }
    }

    /// Lets the thread make namespaces up to `capacity` again. The runner calls it once its
    /// payload runs: making a namespace is 0.5 ms of kernel work, which would otherwise compete
    /// with the launch it is meant to shorten (measured: the launcher's exec slowed from 0.15
    /// to 0.5 ms on 2 cores when the refill started at `take()`).
    public func refill() {
        locked { pthread_cond_signal(&wake) }
    }

    /// Why the pool stopped making namespaces, if it did.
    public var failure: String? { locked { stoppedBecause } }

    /// Namespaces handed out so far, and how many are ready now.
    public var counts: (handedOut: Int, ready: Int) { locked { (handedOut, ready.count) } }

    /// Stops the thread and closes the namespaces nobody took.
    public func close() {
        locked {
            closed = true
            for fd in ready { Glibc.close(fd) }
            ready.removeAll()
            pthread_cond_signal(&wake)
        }
    }

    /// Blocks until `n` namespaces are ready or the pool stopped (tests and benchmarks that
    /// want a warm pool). False on timeout.
    public func waitUntilReady(_ n: Int, timeoutSeconds: Double = 5) -> Bool {
        let end = monotonicNow() + timeoutSeconds
        while monotonicNow() < end {
            let (count, stopped) = locked { (ready.count, stoppedBecause != nil || closed) }
            if count >= min(n, capacity) { return true }
            if stopped { return false }
            usleep(1000)
        }
        return false
    }

    private func fill() {
        // Where this thread came from, to go back to after each namespace.
        let home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)
        guard home >= 0 else {
            locked { stoppedBecause = "cannot open this thread's network namespace: \(String(cString: strerror(errno)))" }
            return
        }
        defer { Glibc.close(home) }
        while true {
            let stop = locked { () -> Bool in
                // Full: sleep until a refill. Not full: go on (the first fill, and after a
                // refill until full).
                while !closed && ready.count >= capacity { pthread_cond_wait(&wake, &mutex) }
                return closed
            }
            if stop { return }
            var stranded: Int32 = 0
            let fd = ahs_make_netns(home, &stranded)
            if stranded != 0 {
                // This thread is in a namespace it cannot leave: it must do nothing more.
                locked { stoppedBecause = "could not return to the supervisor's network namespace: \(String(cString: strerror(-fd)))" }
                return
            }
            guard fd >= 0 else {
                locked { stoppedBecause = "unshare(CLONE_NEWNET): \(String(cString: strerror(-fd)))" }
                return
            }
            locked {
                if closed { Glibc.close(fd) } else { ready.append(fd) }
            }
        }
    }

    private func locked<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(&mutex)
        defer { pthread_mutex_unlock(&mutex) }
        return body()
    }
}
