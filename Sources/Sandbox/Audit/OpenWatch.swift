import CSystemCalls
import Glibc

/// What was opened and executed on one file system while it was watched: fanotify on the file
/// system that holds a directory, read on a thread of its own. Where the kernel has permission
/// events (`blocking`), each opener waits until its file's path and its program have been read
/// and the open allowed: it can neither rename or remove the file nor exec another program
/// first. Elsewhere they are notifications, read as they arrive, and an opener that was quick
/// enough is seen with its file's later name, or no program. Which opens matter is `keep`'s
/// call, given the file open read-only (its opener still held) to read before it goes on;
/// at most `limit` distinct (path, executed) pairs are kept, the rest only counted.
/// A watch allows every open; a guard (`init(guarding:)`) refuses what `keep` says. Needs CAP_SYS_ADMIN in the initial
/// user namespace.
public final class OpenWatch: @unchecked Sendable {
    public struct Open: Sendable, Equatable {
        /// The file's path as the supervisor sees it.
        public var path: String
        /// Executed (execve of the file itself), not only opened.
        public var executed: Bool
        /// The opener's executable's name ("" when it was gone).
        public var exe: String
        /// The opener's arguments (the first 1 KiB of its command line; empty when it was gone).
        public var arguments: [String] = []
        /// What `keep` said of it (shown after its path), if anything.
        public var note: String?
        /// Set by `keep` of a guard (`init(guarding:)`): why the open is refused. Its opener
        /// gets EPERM; the open is kept whatever `keep` returns.
        public var refused: String?

        public init(path: String, executed: Bool, exe: String, arguments: [String] = [], note: String? = nil) {
            self.path = path
            self.executed = executed
            self.exe = exe
            self.arguments = arguments
            self.note = note
        }
    }

    /// What the watch saw, once stopped.
    public struct Seen: Sendable {
        /// Two watches' (two file systems) as one.
        public func merged(with other: Seen) -> Seen {
            Seen(opens: opens + other.opens, more: more + other.more, overflowed: overflowed || other.overflowed, blocking: blocking && other.blocking)
        }

        public var opens: [Open]
        /// Kept opens beyond `limit`, not listed.
        public var more: Int
        /// The kernel dropped events: what ran cannot be told whole.
        public var overflowed: Bool
        /// Opens were held until read (permission events); false: read after the fact.
        public var blocking: Bool
    }

    // linux/fanotify.h: FAN_OPEN_EXEC, FAN_OPEN_EXEC_PERM, FAN_Q_OVERFLOW
    static let executed: UInt64 = 0x1000 | 0x40000
    static let overflow: UInt64 = 0x4000

    private let group: Int32
    /// A guard's events name the opener's thread, a watch's its thread group.
    private let reportsThreads: Bool
    private let stopPipe: (read: Int32, write: Int32)
    /// Whether to keep an open, given its event; it may add a note.
    public typealias Keep = @Sendable (inout Open, Event) -> Bool

    /// What `keep` may use of an open while its opener waits.
    public struct Event {
        /// The file opened, read-only (-1 when none).
        public let file: Int32
        let group: Int32
        let blocking: Bool
        /// The opener: its thread for a guard, its thread group for a watch.
        public let opener: Int32

        /// How the opener named the file, while it waits (a guard's events): `named` true by a
        /// name that reaches it through no link, false through one (or a name that now reaches
        /// another file), nil when it cannot be told (`why`); `name` what it passed.
        public func namedWithoutLinks() -> (named: Bool?, name: String, why: String) {
            var buffer = [CChar](repeating: 0, count: 4096)
            let r = ahs_opened_by_name(opener, file, &buffer, UInt32(buffer.count))
            let e = errno
            let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            return (r < 0 ? nil : r == 1, name, r < 0 ? String(cString: strerror(e)) : "")
        }

        /// `path` (relative to the directory `root`, on the watched file system, reached
        /// through no link and no other mount) opened read-only without raising an event: one
        /// would wait for this very thread. The caller closes it; -1 with errno.
        public func openUnwatched(root: Int32, _ path: String) -> Int32 {
            ahs_open_unwatched(group, blocking ? 1 : 0, root, path)
        }
    }
    private let keep: Keep
    private let limit: Int
    private var seen: Seen
    private var keys = Set<String>()
    private let done = OneShot()

    /// Starts watching the file system that holds `directory`.
    /// - Throws: `SandboxError` (`.io`) naming the directory and errno.
    public convenience init(directory: String, limit: Int = 200, keep: @escaping Keep) throws(SandboxError) {
        var blocking: Int32 = 0
        let g = ahs_open_watch(directory, &blocking)
        guard g >= 0 else { throw SandboxError(.io, "fanotify (opens) on \(directory): \(String(cString: strerror(errno)))") }
        try self.init(group: g, blocking: blocking != 0, limit: limit, keep: keep)
    }

    /// Guards the file system that holds `directory` (one of its own): each open or execution
    /// of a file or directory there waits until `keep` has seen it, which may refuse it
    /// (`Open.refused`). Only where the kernel has permission events.
    /// - Throws: `SandboxError` (`.io`) naming the directory and errno.
    public convenience init(guarding directory: String, limit: Int = 200, keep: @escaping Keep) throws(SandboxError) {
        let g = ahs_guard_filesystem(directory)
        guard g >= 0 else { throw SandboxError(.io, "fanotify (guard) on \(directory): \(String(cString: strerror(errno)))") }
        try self.init(group: g, blocking: true, reportsThreads: true, limit: limit, keep: keep)
    }

    private init(group g: Int32, blocking: Bool, reportsThreads: Bool = false, limit: Int, keep: @escaping Keep) throws(SandboxError) {
        self.reportsThreads = reportsThreads
        var fds: [Int32] = [-1, -1]
        guard ahs_cloexec_pipe(&fds) == 0 else {
            let e = errno
            close(g)
            throw SandboxError(.io, "pipe for the open watch: \(String(cString: strerror(e)))")
        }
        group = g
        seen = Seen(opens: [], more: 0, overflowed: false, blocking: blocking)
        stopPipe = (fds[0], fds[1])
        self.keep = keep
        self.limit = limit
        guard detachedThread({ [self] in loop() }) else {
            close(g)
            close(fds[0])
            close(fds[1])
            throw SandboxError(.io, "no thread for the open watch")
        }
    }

    /// Stops watching and returns what was seen, every queued event read (and allowed).
    public func stop() -> Seen {
        var byte: UInt8 = 1
        _ = write(stopPipe.write, &byte, 1)
        done.wait()
        close(stopPipe.read)
        close(stopPipe.write)
        return seen
    }

    /// Reads until stopped, then what is left. The group is closed at once if it cannot be
    /// read: closing it allows every open still waiting, so a verifier never hangs on a watch
    /// that failed (which is then reported as incomplete).
    private func loop() {
        var buffer = [ahs_open](repeating: ahs_open(), count: 192)
        var stopping = false
        while true {
            var fds = [pollfd(fd: group, events: Int16(POLLIN), revents: 0), pollfd(fd: stopPipe.read, events: Int16(POLLIN), revents: 0)]
            if !stopping {
                let r = poll(&fds, 2, -1)
                if r < 0 && errno == EINTR { continue }
                if r < 0 { seen.overflowed = true; break }
                // Stopping: the marks go first, so what is queued now is all there will be.
                if fds[1].revents != 0 { stopping = true; _ = ahs_fanotify_flush(group) }
            }
            let n = ahs_opens_read(group, &buffer, Int32(buffer.count))
            if n < 0 && errno == EINTR { continue }
            if n < 0 { seen.overflowed = true; break }
            if n == 0 {
                if stopping { break }
                continue
            }
            for i in 0..<Int(n) {
                buffer[i].deny = take(&buffer[i]) ? 1 : 0
                ahs_open_done(group, &buffer[i])
            }
        }
        // Read whole: let go of off the verifier's path (`FanotifyRelease`); a group that
        // could not be read is closed here and now, which allows every open still waiting.
        if seen.overflowed { close(group) } else { FanotifyRelease.release(group) }
        done.signal()
    }

    /// Reads one open; whether it is refused.
    private func take(_ e: inout ahs_open) -> Bool {
        if e.mask & Self.overflow != 0 { seen.overflowed = true; return false }
        // The supervisor's own (never the sandbox's): not what is watched. A guard reports
        // threads, any of the supervisor's (looked up only there: a watch's opens are many).
        if e.pid == getpid() || (reportsThreads && e.pid > 0 && access("/proc/self/task/\(e.pid)", F_OK) == 0) { return false }
        let path = withUnsafeBytes(of: &e.path) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let exe = withUnsafeBytes(of: &e.exe) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
        let count = Int(max(0, min(e.cmdline_len, Int32(MemoryLayout.size(ofValue: e.cmdline)))))
        let arguments = withUnsafeBytes(of: &e.cmdline) { raw in
            raw.prefix(count).split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        }
        var open = Open(path: path, executed: e.mask & Self.executed != 0, exe: exe, arguments: arguments)
        let kept = keep(&open, Event(file: e.fd, group: group, blocking: seen.blocking, opener: e.pid))
        let refused = open.refused != nil && seen.blocking
        guard kept || refused else { return false }
        let key = (open.executed ? "x:" : "r:") + path + (open.refused.map { " " + $0 } ?? "")
        guard keys.insert(key).inserted else { return refused }
        if seen.opens.count < limit { seen.opens.append(open) } else { seen.more += 1 }
        return refused
    }
}

/// A one-shot signal between the watch's thread and `stop` (Glibc's semaphore: this target
/// has no Dispatch).
private final class OneShot: @unchecked Sendable {
    private var sem = sem_t()
    init() { sem_init(&sem, 0, 0) }
    deinit { sem_destroy(&sem) }
    func signal() { sem_post(&sem) }
    func wait() { while sem_wait(&sem) != 0 && errno == EINTR {} }
}
