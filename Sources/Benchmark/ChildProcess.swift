import FoundationEssentials
import Glibc
import Sandbox
import SupervisorIO

/// How the supervisor runs a short helper program of its own host and takes what it prints:
/// git for the experiment's history, a tool's `--version`, a Python's import check, the
/// PostgreSQL programs that build a held-out guest's server, the demo's shell steps. Its
/// standard input is empty unless `input` is given (never the supervisor's own), its output is
/// read as it comes (so a chatty program never blocks on a full pipe) and kept up to
/// `outputCap` bytes, and with a `timeout` the child is killed by its pid once it passes.
/// Programs that talk to the supervisor while they run (qemu, the Ray driver, `harbor
/// download` with its progress line) keep their own loops.
public enum ChildProcess {
    /// What happens to the child's standard error.
    public enum StandardError: Sendable {
        /// Into the same capture as its standard output (a failure's reason is often there).
        case merged
        /// Thrown away.
        case discarded
        /// The supervisor's own standard error (the operator sees it as it comes).
        case inherited
    }

    public struct Finished: Sendable {
        /// The exit status, or the signal number when `signaled`.
        public var status: Int32
        public var signaled: Bool
        /// Killed at the timeout.
        public var timedOut: Bool
        /// What it printed, the first `outputCap` bytes of it.
        public var output: String
        /// It printed more than `outputCap` bytes.
        public var truncated: Bool

        public var succeeded: Bool { status == 0 && !signaled && !timedOut }
    }

    /// The most output kept by default (a git log or a dump's progress is far less).
    public static let defaultOutputCap = 16 << 20

    /// Runs `argv` (an absolute path first) and returns once it has exited and its output is
    /// read. Spawned here rather than with Foundation's `Process`, whose wait lasts as long as
    /// any descendant keeps a descriptor it gave the child (a daemon a program left behind held
    /// a timed-out run for as long as the daemon lived).
    /// - Throws: when the program cannot be started (the error names it).
    public static func run(_ argv: [String], environment: [String: String]? = nil, input: String? = nil,
                           standardError: StandardError = .merged, timeout: Double? = nil,
                           outputCap: Int = defaultOutputCap) throws -> Finished {
        precondition(!argv.isEmpty, "ChildProcess.run needs a program")
        // Close-on-exec from the start: a sandbox another thread launches meanwhile must not
        // hold an end (its read end would wait for that sandbox).
        guard let output = closeOnExecPipe() else { throw BenchmarkError(.io, "\(argv[0]): a pipe for its output: \(ErrnoName.describe(errno))") }
        defer { close(output.read) }
        var feed: (read: Int32, write: Int32) = (-1, -1)
        if input != nil {
            guard let f = closeOnExecPipe() else {
                let e = errno
                close(output.write)
                throw BenchmarkError(.io, "\(argv[0]): a pipe for its input: \(ErrnoName.describe(e))")
            }
            feed = f
        }
        let pid: pid_t
        do {
            pid = try spawn(argv, environment: environment ?? ProcessInfo.processInfo.environment,
                            stdin: feed.read, stdout: output.write, standardError: standardError)
        } catch {
            close(output.write)
            if feed.read >= 0 { close(feed.read); close(feed.write) }
            throw error
        }
        close(output.write)
        if feed.read >= 0 {
            close(feed.read)
            // Written beside the reading, so neither side waits on a full pipe.
            let writer = feed.write
            let bytes = Array((input ?? "").utf8)
            let started = detachedThread {
                var done = 0
                while done < bytes.count {
                    let n = bytes[done...].withUnsafeBytes { Glibc.write(writer, $0.baseAddress, $0.count) }
                    if n < 0 && errno == EINTR { continue }
                    if n <= 0 { break }
                    done += n
                }
                close(writer)
            }
            if !started { close(writer) }
        }
        let deadline = timeout.map { monotonicNow() + $0 }
        var timedOut = false
        var kept: [UInt8] = []
        var truncated = false
        var buffer = [UInt8](repeating: 0, count: 65536)
        // After the kill, what a descendant still holds open is waited for this long.
        var drainUntil: Double?
        while true {
            let now = monotonicNow()
            if let deadline, !timedOut, now >= deadline {
                timedOut = true
                kill(pid, SIGKILL)
                drainUntil = now + 1
            }
            if let drainUntil, now >= drainUntil { break }
            let until = drainUntil ?? deadline
            let wait = until.map { Int32(max(0, ($0 - now) * 1000).rounded(.up)) } ?? -1
            var pfd = pollfd(fd: output.read, events: Int16(POLLIN), revents: 0)
            let ready = poll(&pfd, 1, wait)
            if ready < 0 { if errno == EINTR { continue } else { break } }
            if ready == 0 { continue }
            let n = buffer.withUnsafeMutableBytes { read(output.read, $0.baseAddress, $0.count) }
            if n < 0 { if errno == EINTR { continue } else { break } }
            if n == 0 { break }
            let room = max(0, outputCap - kept.count)
            if n > room { truncated = true }
            kept.append(contentsOf: buffer.prefix(min(n, room)))
        }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        // WIFSIGNALED / WTERMSIG / WEXITSTATUS (sys/wait.h macros, not imported).
        let signal = status & 0x7f
        let signaled = signal != 0 && signal != 0x7f
        return Finished(status: signaled ? signal : (status >> 8) & 0xff, signaled: signaled, timedOut: timedOut,
                        output: String(decoding: kept, as: UTF8.self), truncated: truncated)
    }

    /// posix_spawn of `argv` with the given descriptors as 0, 1 and 2 (stdin -1: /dev/null),
    /// the default action for every signal and none blocked.
    private static func spawn(_ argv: [String], environment: [String: String], stdin: Int32, stdout: Int32,
                              standardError: StandardError) throws -> pid_t {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if stdin >= 0 {
            posix_spawn_file_actions_adddup2(&actions, stdin, 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        posix_spawn_file_actions_adddup2(&actions, stdout, 1)
        switch standardError {
        case .merged: posix_spawn_file_actions_adddup2(&actions, stdout, 2)
        case .discarded: posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
        case .inherited: break
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t(), all = sigset_t()
        sigemptyset(&none)
        sigfillset(&all)
        posix_spawnattr_setsigmask(&attributes, &none)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))
        let args = argv.map { strdup($0) } + [nil]
        let env = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for a in args { free(a) }
            for e in env { free(e) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, argv[0], &actions, &attributes, args, env)
        guard rc == 0 else { throw BenchmarkError(.io, "\(argv[0]): cannot start it: \(ErrnoName.describe(rc))") }
        return pid
    }
}
