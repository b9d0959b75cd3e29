import CSystemCalls
import Glibc
import Sandbox
import SupervisorIO
import WireCoding

/// The service's side (`autoharness sandbox serve`): accepts launches on a Unix socket, each
/// on a thread of its own, with the process's pools and shared trees.
public final class LaunchServer: @unchecked Sendable {
    /// The launch a request asks for, loaded and compiled as `sandbox exec` would in the
    /// client's working directory and with its environment; nil declines it (the client then
    /// launches itself and reports any error as it always has). Runs on the request's thread.
    public typealias Prepare = @Sendable (_ request: ExecRequest, _ environment: [String: String]) -> SandboxExecution.Prepared?

    public struct Failure: Error, CustomStringConvertible {
        public let description: String
    }

    public let path: String
    private let listener: Int32
    private let socketIdentity: (dev: UInt64, ino: UInt64)
    /// The socket was passed down by systemd (socket activation), which keeps it: the service
    /// neither removes it nor shuts it down when it stops, and what is queued on it when the
    /// service ends is the next instance's to serve. Its workers wait in poll(2) on it and on
    /// `wake` (readable once the service stops), and accept without blocking.
    public let activated: Bool
    private var wake: (read: Int32, write: Int32) = (-1, -1)
    /// When the last connection was accepted or ended (monotonic seconds): `--idle-exit`.
    private var lastActivity = monotonicNow()
    private let prepare: Prepare
    /// Held (flock) for the service's life beside a socket it made, `PATH.lock`: one service
    /// per socket, however many fronts start one at once.
    private let lockFD: Int32
    /// Set before `serve`: only clients in these cgroups are served (`cgroupMemberships`; the
    /// service a front starts, whose sandboxes then go where the client's own would).
    public var onlyCgroups: [String: String]?
    private let ownEnvironment: [String: String]
    /// The service's own namespaces, root, capabilities and filters: a client's must match.
    private let own: PeerConfinement?
    /// The service's working directory and umask, given back to a thread after each client.
    private let home: Int32
    private let homeMask: mode_t
    private var lock = pthread_mutex_t()
    private var idle = pthread_cond_t()
    /// The connections of launches under way, by descriptor.
    private var active: [Int32: SandboxSignals] = [:]
    /// Connections accepted and not yet closed (read, declined, launched or answered).
    private var busy = 0
    private var stopping = false
    private var counts = (served: 0, declined: 0, refused: 0)
    /// At most this many launches at once; more are declined (their clients launch themselves).
    public static let concurrentLaunches = 32
    /// POLLRDHUP (<poll.h> under _GNU_SOURCE, which the Glibc module does not export): the peer
    /// closed its end.
    static let pollReadHangUp: Int32 = 0x2000

    /// Listens at `path`: its directory made if missing (0755) and refused if anyone but root
    /// could write it or any directory above it (a sticky one aside), and a socket left by a
    /// service that ended replaced; a service answering there already is an error.
    public convenience init(path requested: String, prepare: @escaping Prepare) throws(Failure) {
        guard geteuid() == 0 else { throw Failure(description: "sandbox serve needs root, as every sandbox launch does") }
        let asked = POSIX.split(requested)
        // Nothing is made under a directory that fails the check below.
        if access(asked.directory, F_OK) != 0, let parent = PolicySearch.canonical(POSIX.split(asked.directory).directory),
           let unsafe = Self.writableByOthers(parent, stickyAllowed: true) {
            throw Failure(description: unsafe + Self.replaceable)
        }
        if mkdir(asked.directory, 0o755) != 0 && errno != EEXIST {
            throw Failure(description: "\(asked.directory): cannot make the socket's directory: \(String(cString: strerror(errno)))")
        }
        guard let dir = PolicySearch.canonical(asked.directory) else {
            throw Failure(description: "\(asked.directory): \(String(cString: strerror(errno)))")
        }
        if let unsafe = Self.writableByOthers(dir) { throw Failure(description: unsafe + Self.replaceable) }
        let path = dir + "/" + asked.name
        // Before the socket is looked at: two services starting at once would otherwise both
        // find no one answering, and the second would remove the first one's socket.
        let lock = open(path + ".lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard lock >= 0 else { throw Failure(description: "\(path).lock: cannot open the service's lock: \(String(cString: strerror(errno)))") }
        guard flock(lock, LOCK_EX | LOCK_NB) == 0 else {
            let e = errno
            close(lock)
            throw Failure(description: e == EWOULDBLOCK ? "\(path): another launch service is starting or serving there (it holds \(path).lock)"
                                                        : "\(path).lock: \(String(cString: strerror(e)))")
        }
        var st = stat()
        if lstat(path, &st) == 0 {
            guard st.st_mode & S_IFMT == S_IFSOCK else {
                close(lock)
                throw Failure(description: "\(path): exists and is not a socket")
            }
            let probe = ahs_unix_connect(path)
            if probe >= 0 {
                let pid = UnixSocket.peer(probe)?.pid ?? 0
                close(probe)
                close(lock)
                throw Failure(description: "\(path): a launch service (pid \(pid)) already answers there")
            }
            unlink(path)
        }
        let fd = ahs_unix_listen(dir, asked.name, 0o600, Self.backlog)
        guard fd >= 0, lstat(path, &st) == 0 else {
            let e = errno
            close(lock)
            throw Failure(description: "\(path): cannot listen: \(String(cString: strerror(e)))")
        }
        try self.init(listener: fd, path: path, identity: (UInt64(st.st_dev), UInt64(st.st_ino)), activated: false, fileLock: lock, prepare: prepare)
    }

    static let backlog: Int32 = 64
    init(listener fd: Int32, path: String, identity: (dev: UInt64, ino: UInt64), activated: Bool, fileLock: Int32,
                 prepare: @escaping Prepare) throws(Failure) {
        self.path = path
        listener = fd
        lockFD = fileLock
        socketIdentity = identity
        self.activated = activated
        if activated {
            var p: [Int32] = [0, 0]
            guard pipe(&p) == 0 else { throw Failure(description: "pipe: \(String(cString: strerror(errno)))") }
            // The service starts no process of its own but the launcher, which closes what it
            // was not given; close-on-exec all the same.
            for fd in p { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            wake = (p[0], p[1])
        }
        self.prepare = prepare
        ownEnvironment = hostEnvironment().filter { LaunchService.steering($0.key) }
        own = PeerConfinement.of("self")
        // The service's working directory, and each worker's between clients: an empty tmpfs
        // attached nowhere, reachable only through /proc/SERVICE/cwd (see the wire above).
        home = ahs_detached_directory()
        guard home >= 0, fchdir(home) == 0 else {
            throw Failure(description: "cannot make the service's working directory (a detached tmpfs): \(String(cString: strerror(errno)))")
        }
        homeMask = umask(0o022)
        umask(homeMask)
        pthread_mutex_init(&lock, nil)
        pthread_cond_init(&idle, nil)
    }

    /// Appends this process's stdout and stderr to `SOCKET.log`, beside the socket (its path
    /// after the checks, the file made 0600, never through a symbolic link). On failure the
    /// socket is removed: a service that does not serve leaves none behind.
    public func logBesideSocket() throws(Failure) {
        let log = path + ".log"
        let fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0, dup2(fd, 1) >= 0, dup2(fd, 2) >= 0 else {
            let e = errno
            if fd >= 0 { close(fd) }
            if !activated {
                var st = stat()
                if lstat(path, &st) == 0, UInt64(st.st_dev) == socketIdentity.dev, UInt64(st.st_ino) == socketIdentity.ino { unlink(path) }
            }
            throw Failure(description: "\(log): \(String(cString: strerror(e)))")
        }
        close(fd)
    }

    static let replaceable = "; another user could replace the socket (the directory must be root's and writable by no one else, and so must every directory above it unless sticky)"

    /// The first of `dir` and the directories above it that someone other than root could
    /// change under the socket, described; nil when there is none. A sticky directory (/tmp)
    /// lets no one else rename what is ours in it; the socket's own directory must not be
    /// writable by others at all.
    static func writableByOthers(_ dir: String, stickyAllowed: Bool = false) -> String? {
        var path = dir
        var own = !stickyAllowed
        while true {
            var st = stat()
            guard lstat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else { return "\(path): not a directory" }
            let writable = st.st_mode & 0o022 != 0
            if st.st_uid != 0 || (writable && (own || st.st_mode & S_ISVTX == 0)) {
                return "\(path): owned by uid \(st.st_uid), mode \(String(st.st_mode & 0o7777, radix: 8))"
            }
            if path == "/" { return nil }
            path = POSIX.split(path).directory
            if path.isEmpty { path = "/" }
            own = false
        }
    }

    /// Serves until a byte arrives on `stop` (a `ProcessSignals` channel): then stops
    /// listening, removes the socket, kills the sandboxes under way, waits for them to be
    /// cleaned up, and returns what it did.
    ///
    /// `idleExit`: seconds without a connection (and none under way) after which the service
    /// stops by itself. Under socket activation systemd starts it again at the next client.
    public func serve(stop: Int32, idleExit: Double? = nil) -> (served: Int, declined: Int, refused: Int, idle: Bool) {
        spawnWorker()
        var p = pollfd(fd: stop, events: Int16(POLLIN), revents: 0)
        var idled = false
        while true {
            var timeout: Int32 = -1
            if let idleExit {
                // Decided and marked under one lock: a client accepted after this is declined
                // (admit), never started and then killed by the stop.
                let left = locked {
                    let left = busy > 0 ? idleExit : lastActivity + idleExit - monotonicNow()
                    if left <= 0 { stopping = true }
                    return left
                }
                if left <= 0 {
                    idled = true
                    break
                }
                timeout = Int32(min(left * 1000 + 1, 60_000))
            }
            let n = poll(&p, 1, timeout)
            if n > 0 || (n < 0 && errno != EINTR) { break }
        }
        locked { stopping = true }
        if activated {
            // systemd's socket, not ours: left listening, with whatever is queued on it for the
            // next instance. The workers see `wake` readable and end.
            var b: UInt8 = 1
            _ = write(wake.write, &b, 1)
        } else {
            var st = stat()
            if lstat(path, &st) == 0, UInt64(st.st_dev) == socketIdentity.dev, UInt64(st.st_ino) == socketIdentity.ino { unlink(path) }
            // Every worker in accept(2) takes what is queued (declined: 'D', the client launches
            // itself), then gets EINVAL and ends. The descriptor stays open: a number closed under
            // a thread in accept could be another file's by then.
            shutdown(listener, Int32(SHUT_RDWR))
        }
        return locked {
            for signals in active.values { signals.kill() }
            while busy > 0 || waiting > 0 { pthread_cond_wait(&idle, &lock) }
            return (counts.served, counts.declined, counts.refused, idled)
        }
    }

    /// The next client, or -1 with errno (EINVAL once the service stops). A passed-down
    /// socket is not shut down at the end (it is systemd's): its workers wait in poll(2) for
    /// it or for `wake`, and accept without blocking, since another worker may take the client.
    private func nextConnection() -> Int32 {
        guard activated else { return UnixSocket.accept(listener) }
        while true {
            var fds = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0), pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)]
            if poll(&fds, 2, -1) < 0 {
                if errno == EINTR { continue }
                return -1
            }
            if fds[1].revents != 0 {
                errno = EINVAL
                return -1
            }
            let conn = UnixSocket.accept(listener)
            if conn >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK) { return conn }
        }
    }

    /// Threads waiting in accept(2) for the next client. Each client is taken by a thread
    /// already waiting (no hand-over, no thread made on the launch's path); the thread that
    /// takes the last waiting place starts another, and a thread that finds two others waiting
    /// when its client is done ends.
    private var waiting = 0

    private func spawnWorker() {
        locked { waiting += 1 }
        if !detachedThread({ [self] in work() }) {
            locked {
                waiting -= 1
                if waiting == 0 { pthread_cond_broadcast(&idle) }
            }
        }
    }

    private func work() {
        // The thread's own working directory and umask, set to each client's in turn. Made by a
        // thread serving a client, it starts with that client's: the service's own first.
        let ownDirectory = ahs_unshare_fs() == 0 && fchdir(home) == 0
        if ownDirectory { umask(homeMask) }
        while true {
            let conn = nextConnection()
            if conn < 0 {
                // The service stopped (EINVAL after the shutdown); anything else (out of
                // descriptors or memory) passes: the thread never leaves while the service runs.
                if errno == EINVAL && locked({ stopping }) { break }
                if errno != EINTR && errno != ECONNABORTED { usleep(10_000) }
                continue
            }
            let another = locked {
                waiting -= 1
                busy += 1
                return waiting == 0
            }
            if another { spawnWorker() }
            handle(conn, ownDirectory: ownDirectory)
            // The service's own directory and umask again: no client's directory stays in use.
            if ownDirectory {
                _ = fchdir(home)
                umask(homeMask)
            }
            let surplus = locked {
                if waiting >= 2 { return true }
                waiting += 1
                return false
            }
            if surplus { return }
        }
        locked {
            waiting -= 1
            if waiting == 0 { pthread_cond_broadcast(&idle) }
        }
    }

    private func locked<T>(_ body: () -> T) -> T {
        pthread_mutex_lock(&lock)
        defer { pthread_mutex_unlock(&lock) }
        return body()
    }

    /// One connection, start to end, on its own thread.
    private func handle(_ conn: Int32, ownDirectory: Bool) {
        Timing.mark("served: connection accepted")
        // Only launches keep the service from its idle exit: one that declines every client
        // (of another build, cgroup or confinement) is of no use to them, and ends.
        var launched = false
        defer {
            close(conn)
            locked {
                busy -= 1
                if launched { lastActivity = monotonicNow() }
                if busy == 0 { pthread_cond_broadcast(&idle) }
            }
        }
        let peerProcess = UnixSocket.peerPidfd(conn)
        defer { if let peerProcess, peerProcess >= 0 { close(peerProcess) } }
        guard let peer = UnixSocket.peer(conn), peer.uid == 0 else {
            locked { counts.refused += 1 }
            let who = UnixSocket.peer(conn).map { "pid \($0.pid), uid \($0.uid)" } ?? "an unknown peer"
            printErr("autoharness: refused a launch from \(who): only root is served")
            return
        }
        // A client that connects and sends nothing must not hold a thread for ever.
        var limit = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        let decline = { [self] in
            locked { counts.declined += 1 }
            LaunchService.sendAll(conn, [LaunchService.declined] + Frame.u32(0))
        }
        // A request that cannot be read (too many descriptors open here, a truncated message)
        // is declined: whatever it was, nothing of it ran.
        guard let request = Self.receive(conn) else { return decline() }
        Timing.mark("served: request read")
        defer { for fd in request.fds { close(fd) } }
        limit = timeval(tv_sec: 0, tv_usec: 0)
        setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))

        // A caller confined otherwise than the service (other namespaces, a chroot, fewer
        // capabilities, filters of its own) is declined: its paths, network and limits are not
        // the service's, and its own launch keeps them.
        guard let own, let theirs = PeerConfinement.of(String(peer.pid)), own.admits(theirs, pid: peer.pid),
              isHome(request.fds[4]) else { return decline() }
        // A service a front started serves that front's cgroup alone: a sandbox is made under
        // its launcher's cgroup, and a client elsewhere would otherwise have its sandboxes
        // counted, limited and ended (with the service) where the first client ran.
        if let onlyCgroups, LaunchService.cgroupMemberships(of: String(peer.pid)) != onlyCgroups { return decline() }
        // Any other service (systemd's): a caller limited where the service is not (memory,
        // pids, CPU quota, I/O, in a cgroup of its own or an ancestor below where the two part)
        // is declined. Its own launch makes the sandbox inside those limits; served, the sandbox
        // would be outside them, under the service's cgroup.
        if onlyCgroups == nil, let limit = CgroupLimits.between(client: CgroupHost.memberships(of: String(peer.pid)),
                                                                service: CgroupHost.memberships(of: "self")) {
            printErr("autoharness: declined a launch from pid \(peer.pid), which launches it itself, inside its cgroup's limit: \(limit)")
            return decline()
        }
        // A sandbox inherits its launcher's nice value, I/O priority, CPUs, oom_score_adj and
        // resource limits where its policy sets none: the caller's, as in its own launch.
        // A caller that may use a CPU the service may not (another cpuset) is declined: its
        // sandbox would otherwise run on the service's CPUs, not on its own.
        guard let settings = CallerSettings.of(peer.pid), settings.cpusWithinThisProcess() else { return decline() }
        // All of the above was read from /proc/PID of the peer's pid. Where the kernel gives the
        // peer as a pidfd, the process that connected must still be alive now, so the pid was
        // not freed and taken by another process while it was read (a client that exits right
        // after connecting could otherwise have its pid reused by one in other cgroups).
        if let peerProcess {
            guard peerProcess >= 0, ahs_pidfd_kill(peerProcess, 0) == 0 else { return decline() }
        }
        let signals = SandboxSignals(connection: conn)
        guard ownDirectory, let prepared = admit(request, signals: signals, conn: conn) else { return decline() }
        // A client gone while its launch was prepared: nothing is started for it (one gone
        // later has its sandbox killed by the hang-up).
        var hangUp = pollfd(fd: conn, events: Int16(Self.pollReadHangUp), revents: 0)
        if poll(&hangUp, 1, 0) > 0, hangUp.revents & Int16(Self.pollReadHangUp | Int32(POLLHUP) | Int32(POLLERR)) != 0 {
            locked { active[conn] = nil }
            return decline()
        }
        if prepared.request.debug {
            printErr("autoharness[debug]: sandbox exec by the launch service at \(path) (pid \(getpid()))", to: request.fds[2])
        }
        // From here on the client knows a sandbox may run: an end of the connection no longer
        // means "launch it yourself".
        guard LaunchService.sendAll(conn, [LaunchService.launching]) else {
            locked { active[conn] = nil }
            return decline()
        }
        launched = true
        let io = SandboxExecution.LaunchIO(stdio: (request.fds[0], request.fds[1], request.fds[2]), errors: request.fds[2], signals: signals,
                                           settings: settings)
        let status = SandboxExecution.launch(prepared, io: io)
        locked {
            active[conn] = nil
            counts.served += 1
        }
        LaunchService.sendAll(conn, [LaunchService.exited] + Frame.u32(UInt32(bitPattern: status)))
    }

    /// The launch `request` asks for, registered as under way, or nil (declined, nothing ran).
    /// The thread takes the client's working directory and umask as its own here (they are the
    /// thread's alone: `unshare(CLONE_FS)` in `work`).
    private func admit(_ request: Request, signals: SandboxSignals, conn: Int32) -> SandboxExecution.Prepared? {
        guard request.launchCode == SandboxExecution.launchCode,
              request.arguments.count > 0, !ExecArguments.asksForHelp(request.arguments[...]),
              let exec = ExecArguments.parse(request.arguments[...]), exec.benchRepeat == 1,
              request.environment.filter({ LaunchService.steering($0.key) }) == ownEnvironment else { return nil }
        guard fchdir(request.fds[3]) == 0 else { return nil }
        umask(request.umask)
        let admitted = locked {
            guard !stopping, active.count < Self.concurrentLaunches else { return false }
            active[conn] = signals
            return true
        }
        guard admitted else { return nil }
        guard let prepared = prepare(exec, request.environment) else {
            locked { active[conn] = nil }
            return nil
        }
        return prepared
    }

    /// Whether `fd` is the service's working directory (`home`): the client could open it, so
    /// it may inspect the service (no Landlock domain, no LSM rule keeps it from the service).
    func isHome(_ fd: Int32) -> Bool {
        var given = stat(), own = stat()
        return fstat(fd, &given) == 0 && fstat(home, &own) == 0 && given.st_dev == own.st_dev && given.st_ino == own.st_ino
    }

    struct Request {
        var launchCode: String
        var umask: mode_t
        var arguments: [String]
        var environment: [String: String]
        var fds: [Int32]
    }

    /// Reads one request (header, body, the five descriptors), or nil for anything else, with
    /// any descriptor received closed.
    static func receive(_ conn: Int32, within seconds: Double = 10) -> Request? {
        // One deadline for the whole request: each read waits only for what is left of it, so
        // a client sending a byte at a time cannot hold a thread longer.
        let deadline = monotonicNow() + seconds
        func ready() -> Bool {
            var p = pollfd(fd: conn, events: Int16(POLLIN), revents: 0)
            while true {
                let left = deadline - monotonicNow()
                guard left > 0 else { return false }
                let r = poll(&p, 1, Int32(left * 1000) + 1)
                if r < 0 && errno == EINTR { continue }
                return r > 0
            }
        }
        var fds = [Int32](repeating: -1, count: LaunchService.descriptorCount)
        var nfds: Int32 = 0
        var header = [UInt8](repeating: 0, count: LaunchService.headerSize)
        let n = header.withUnsafeMutableBytes { ahs_recv_with_fds(conn, $0.baseAddress, UInt(LaunchService.headerSize), &fds, Int32(fds.count), &nfds) }
        let received = Array(fds[..<Int(max(nfds, 0))])
        func refuse() -> Request? {
            for fd in received { close(fd) }
            return nil
        }
        guard n > 0, nfds == Int32(LaunchService.descriptorCount) else { return refuse() }
        var have = n
        while have < LaunchService.headerSize {
            guard ready() else { return refuse() }
            let m = header.withUnsafeMutableBytes { read(conn, $0.baseAddress! + have, LaunchService.headerSize - have) }
            if m < 0 && errno == EINTR { continue }
            guard m > 0 else { return refuse() }
            have += m
        }
        guard Array(header[0..<4]) == LaunchService.magic, Frame.u32(header[4..<8]) == LaunchService.version,
              let length = Frame.u32(header[8..<12]).map(Int.init) else { return refuse() }
        guard length <= LaunchService.bodyLimit else { return refuse() }
        var body = [UInt8](repeating: 0, count: length)
        var got = 0
        while got < length {
            guard ready() else { return refuse() }
            let m = body.withUnsafeMutableBytes { read(conn, $0.baseAddress! + got, length - got) }
            if m < 0 && errno == EINTR { continue }
            guard m > 0 else { return refuse() }
            got += m
        }
        // The working directory must be one.
        var st = stat()
        guard fstat(received[3], &st) == 0, st.st_mode & S_IFMT == S_IFDIR else { return refuse() }
        guard body.last == 0 || body.isEmpty else { return refuse() }
        let strings = body.split(separator: 0, omittingEmptySubsequences: false).dropLast().map { String(decoding: $0, as: UTF8.self) }
        guard strings.count >= 3, let mask = mode_t(strings[1], radix: 8), mask <= 0o777,
              let argc = Int(strings[2]), argc >= 0, argc <= strings.count - 3 else { return refuse() }
        var environment: [String: String] = [:]
        for entry in strings[(3 + argc)...] {
            guard let eq = entry.firstIndex(of: "=") else { continue }
            environment[String(entry[..<eq])] = String(entry[entry.index(after: eq)...])
        }
        return Request(launchCode: strings[0], umask: mask, arguments: Array(strings[3..<(3 + argc)]), environment: environment, fds: received)
    }
}
