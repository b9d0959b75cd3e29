import CSystemCalls
import Glibc
import SupervisorIO
import WireCoding

/// Many TCP-like byte streams over one byte pipe: how the held-out VM's sandboxes reach the
/// host's egress proxy through a single virtio-serial port.
///
/// The guest's supervisor is the *opener*: each connection a guest sandbox makes to its proxy
/// port becomes a stream (`open`). The host is the *acceptor*: each stream the guest opens is
/// handed to the host's `EgressProxy` as if it had been accepted from a sandbox (`onOpen`), so
/// the allowlist, the inference gate and the audit all run on the host, outside the guest
/// (whatever the guest does, it gets no more than a sandbox on the host would).
///
/// Frames, both ways: `type u8, stream u32, length u32, payload` (WireCoding's little-endian
/// integers, `Frame.tagged`).
///
///     OPEN    opener only; payload: a tag (the sandbox class: `agent` or `tool`), ≤ 32 bytes
///     DATA    1 ... 16 KiB, never more than the peer has credited
///     EOF     no more DATA on this stream from the sender (a half close)
///     RESET   the stream is gone both ways; after the sender's EOF, what it sent before is
///             still delivered (a server that closes after its response loses nothing)
///     CREDIT  payload u32: the receiver has passed that many more bytes on
///
/// Each direction of each stream has a window of 256 KiB: a side sends DATA only within the
/// credit the other gave, and buffers what it received until its local socket takes it, so
/// a stream whose reader stalls holds at most one window and never blocks the others (the
/// single thread never blocks on anything but `poll`). Stream ids are opened in increasing
/// order; a frame for an id that was opened and has since closed is dropped (the peer may
/// not have seen the close yet). Anything else unexpected — an unknown type, an oversized
/// frame, DATA beyond the credit, an OPEN from the acceptor's side or over the stream limit,
/// a bad tag, a peer that leaves more than `maxOutgoing` unread — is a protocol error: the
/// link stops, every stream is reset, and `failure` says what happened (the host treats the
/// guest's answer as lost, and keeps the text, which the peer chose, from the coding agent).
/// What a side queues for the port is bounded: DATA only below `portHighWater`, CREDIT at
/// most once per quarter window passed on, EOF and RESET once per stream.
public final class EgressLink: @unchecked Sendable {
    public enum Role: Sendable { case opener, acceptor }

    static let window = 256 << 10
    static let maxPayload = 16 << 10
    public static let maxStreams = 64
    static let maxTag = 32
    /// Reading locals stops while this much is queued for the port.
    static let portHighWater = 1 << 20
    /// More than this queued for a peer that does not read its port ends the link.
    static let maxOutgoing = 4 << 20
    static let header = 9

    enum FrameType: UInt8 { case open = 1, data = 2, eof = 3, reset = 4, credit = 5 }

    final class Stream {
        let local: Int32
        /// Received from the peer, not yet written to `local`.
        var pending: [UInt8] = []
        var pendingStart = 0
        /// DATA bytes this side may still send.
        var credit = EgressLink.window
        /// Received DATA bytes not yet credited back (includes `pending`).
        var unacknowledged = 0
        /// Written to `local` since the last CREDIT.
        var toCredit = 0
        var readingLocal = true
        var peerEOF = false
        var shutWrite = false
        init(local: Int32) { self.local = local }
        var pendingCount: Int { pending.count - pendingStart }
    }

    private let port: Int32
    private let role: Role
    private let onOpen: (@Sendable (String, Int32) -> Void)?
    private let lock = Mutex()
    private var streams: [UInt32: Stream] = [:]
    private var nextID: UInt32 = 1
    /// The highest id opened so far (by either side's count: only the opener opens).
    private var highestID: UInt32 = 0
    private var outgoing: [UInt8] = []
    private var outgoingStart = 0
    private var incoming: [UInt8] = []
    private var stopped = false
    private var finished = false
    private var failureText: String?
    private let wake: (read: Int32, write: Int32)
    private let done = Locked<Bool>(false)

    /// `port`: a connected byte pipe (the virtio-serial port, or the host's socket to qemu);
    /// the link owns it from here and closes it when it ends. `onOpen` (acceptor) gets each
    /// stream the peer opens: its tag and a socket the callee owns.
    public init(port: Int32, role: Role, onOpen: (@Sendable (String, Int32) -> Void)? = nil) {
        self.port = port
        self.role = role
        self.onOpen = onOpen
        var p: [Int32] = [-1, -1]
        if socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0, &p) != 0 { p = [-1, -1] }
        wake = (p[0], p[1])
        let flags = fcntl(port, F_GETFL)
        if flags >= 0 { _ = fcntl(port, F_SETFL, flags | O_NONBLOCK) }
    }

    public func start() {
        detachedThread { [self] in loop() }
    }

    /// The protocol error that ended the link, if one did (the peer closing is not one).
    public var failure: String? { lock.withLock { failureText } }

    /// A new stream to the peer (opener only): a socket the caller owns, or nil when the link
    /// has ended or holds `maxStreams` streams already.
    public func open(tag: String) -> Int32? {
        guard role == .opener, Self.validTag(tag) else { return nil }
        let fd: Int32? = lock.withLock {
            guard !stopped, !finished, streams.count < Self.maxStreams else { return nil }
            var pair: [Int32] = [-1, -1]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else { return nil }
            _ = fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK)
            guard nextID < UInt32.max else { return nil }
            let id = nextID
            nextID += 1
            highestID = id
            streams[id] = Stream(local: pair[0])
            queue(.open, id, Array(tag.utf8))
            return pair[1]
        }
        if fd != nil { poke() }
        return fd
    }

    /// Ends the link: every stream is reset (its socket sees the connection end) and the port
    /// closed. Returns once the link's thread is gone, or after `timeout` seconds.
    public func stop(timeout: Double = 5) {
        lock.withLock { stopped = true }
        poke()
        let end = monotonicNow() + timeout
        while !done.withLock({ done.value }) && monotonicNow() < end { usleep(2_000) }
    }

    /// Waits (at most `timeout` seconds) for the link to end by itself: the peer closed the
    /// port, or a protocol error. True if it has.
    public func waitUntilEnded(timeout: Double) -> Bool {
        let end = monotonicNow() + timeout
        while !done.withLock({ done.value }) {
            if monotonicNow() >= end { return false }
            usleep(5_000)
        }
        return true
    }

    /// `accept4(SOCK_CLOEXEC)` on `listener` (a connection never crosses an exec).
    public static func acceptCloexec(_ listener: Int32) -> Int32 { ahs_accept_cloexec(listener) }

    static func validTag(_ tag: String) -> Bool {
        !tag.isEmpty && tag.utf8.count <= maxTag && tag.utf8.allSatisfy { ($0 >= 0x61 && $0 <= 0x7a) || ($0 >= 0x30 && $0 <= 0x39) || $0 == 0x2d }
    }

    private func poke() {
        var b: UInt8 = 1
        _ = write(wake.write, &b, 1)
    }

    // MARK: - the link's thread (everything below runs on it, under `lock` except `poll`)

    private func loop() {
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            var fds: [pollfd] = []
            var ids: [UInt32] = []
            let exit: Bool = lock.withLock {
                if stopped || finished { return true }
                fds.append(pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0))
                let wantOut = outgoing.count > outgoingStart
                fds.append(pollfd(fd: port, events: Int16(POLLIN) | (wantOut ? Int16(POLLOUT) : 0), revents: 0))
                let portBusy = outgoing.count - outgoingStart >= Self.portHighWater
                for (id, s) in streams {
                    var ev: Int16 = 0
                    if s.readingLocal && s.credit > 0 && !portBusy { ev |= Int16(POLLIN) }
                    if s.pendingCount > 0 { ev |= Int16(POLLOUT) }
                    ids.append(id)
                    // Nothing to do on a stream waiting for credit (or for the port): left
                    // out, or its hang-up would wake the loop at once until then.
                    fds.append(pollfd(fd: ev == 0 && s.readingLocal ? -1 : s.local, events: ev, revents: 0))
                }
                return false
            }
            if exit { break }
            let r = poll(&fds, nfds_t(fds.count), 1000)
            if r < 0 && errno != EINTR { fail("poll: \(ErrnoName.describe(errno))"); break }
            guard r > 0 else { continue }
            lock.withLock {
                if fds[0].revents != 0 {
                    var sink = [UInt8](repeating: 0, count: 64)
                    while read(wake.read, &sink, sink.count) > 0 {}
                }
                if fds[1].revents & Int16(POLLOUT) != 0 { flushPort() }
                if fds[1].revents & (Int16(POLLIN) | Int16(POLLHUP) | Int16(POLLERR)) != 0 { readPort(&buffer) }
                for (i, id) in ids.enumerated() where !finished {
                    let ev = fds[i + 2].revents
                    guard ev != 0, let s = streams[id] else { continue }
                    if ev & Int16(POLLOUT) != 0 || (ev & (Int16(POLLHUP) | Int16(POLLERR)) != 0 && s.pendingCount > 0) {
                        writeLocal(id, s)
                    }
                    if streams[id] != nil, ev & (Int16(POLLIN) | Int16(POLLHUP) | Int16(POLLERR)) != 0, s.readingLocal {
                        readLocal(id, s, &buffer)
                    }
                    // Hung up both ways while the peer may still write: nothing local will
                    // ever read it (and poll would report the hang-up at once, forever).
                    if streams[id] != nil, ev & (Int16(POLLHUP) | Int16(POLLERR)) != 0, !s.readingLocal {
                        queue(.reset, id)
                        drop(id, s)
                    }
                }
                if !finished { flushPort() }
            }
        }
        lock.withLock {
            finished = true
            for (_, s) in streams { shutdown(s.local, Int32(SHUT_RDWR)); close(s.local) }
            streams.removeAll()
            close(port)
        }
        done.withLock { done.value = true }
    }

    // The wake pair lives as long as the link: `stop()` may poke after the thread has ended,
    // and a write to a closed number could land in whatever file reused it.
    deinit {
        close(wake.read)
        close(wake.write)
    }

    private func fail(_ why: String) {
        lock.withLock { failNoLock(why) }
    }

    private func failNoLock(_ why: String) {
        if failureText == nil { failureText = why }
        finished = true
    }

    private func queue(_ type: FrameType, _ id: UInt32, _ payload: [UInt8] = []) {
        guard outgoing.count - outgoingStart <= Self.maxOutgoing else {
            return failNoLock("the peer left more than \(Self.maxOutgoing) bytes unread")
        }
        outgoing += Self.frame(type.rawValue, id, payload)
    }

    /// One frame's bytes (`type` raw: a test sends types that do not exist).
    static func frame(_ type: UInt8, _ id: UInt32, _ payload: [UInt8]) -> [UInt8] {
        Frame.tagged([type] + Frame.u32(id), payload)
    }

    private func flushPort() {
        while outgoing.count > outgoingStart {
            let n = outgoing.withUnsafeBytes { Glibc.write(port, $0.baseAddress! + outgoingStart, $0.count - outgoingStart) }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN { break }
                // The peer is gone: an end, not a protocol error.
                finished = true
                return
            }
            outgoingStart += n
        }
        if outgoingStart == outgoing.count {
            outgoing.removeAll(keepingCapacity: outgoing.count <= 1 << 20)
            outgoingStart = 0
        } else if outgoingStart > 1 << 20 {
            outgoing.removeFirst(outgoingStart)
            outgoingStart = 0
        }
    }

    private func readPort(_ buffer: inout [UInt8]) {
        while !finished {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(port, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN { return }
                finished = true
                return
            }
            if n == 0 {
                // The peer closed (qemu exited, the guest powered off): the link ends.
                finished = true
                return
            }
            incoming += buffer[0..<n]
            parseFrames()
        }
    }

    private func parseFrames() {
        var at = 0
        defer { if at > 0 { incoming.removeFirst(at) } }
        while !finished && incoming.count - at >= Self.header {
            let type = incoming[at]
            let id = Self.u32(incoming, at + 1), length = Int(Self.u32(incoming, at + Self.header - 4))
            guard let t = FrameType(rawValue: type) else { return failNoLock("an unknown frame type \(type)") }
            guard length <= Self.maxPayload else { return failNoLock("a frame of \(length) bytes (at most \(Self.maxPayload))") }
            guard incoming.count - at >= Self.header + length else { return }
            let payload = Array(incoming[(at + Self.header)..<(at + Self.header + length)])
            at += Self.header + length
            handle(t, id, payload)
        }
    }

    /// The u32 at `b[i...]` (the caller checked four bytes are there).
    static func u32(_ b: [UInt8], _ i: Int) -> UInt32 { Frame.u32(b[i...]) ?? 0 }

    private func handle(_ type: FrameType, _ id: UInt32, _ payload: [UInt8]) {
        if type == .open {
            guard role == .acceptor else { return failNoLock("the acceptor opened a stream") }
            guard highestID < UInt32.max, id == highestID + 1 else { return failNoLock("stream \(id) opened out of order (after \(highestID))") }
            guard streams.count < Self.maxStreams else { return failNoLock("more than \(Self.maxStreams) streams") }
            guard let tag = String(validating: payload, as: UTF8.self), Self.validTag(tag) else { return failNoLock("a malformed stream tag") }
            highestID = id
            var pair: [Int32] = [-1, -1]
            guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &pair) == 0 else {
                queue(.reset, id)
                return
            }
            _ = fcntl(pair[0], F_SETFL, fcntl(pair[0], F_GETFL) | O_NONBLOCK)
            streams[id] = Stream(local: pair[0])
            if let onOpen { onOpen(tag, pair[1]) } else { close(pair[1]) }
            return
        }
        guard id >= 1 && id <= highestID else { return failNoLock("a frame for stream \(id), which was never opened") }
        // A stream that has closed here: the peer's frames already on the way are dropped.
        guard let s = streams[id] else { return }
        switch type {
        case .open: break
        case .data:
            guard !payload.isEmpty else { return failNoLock("an empty DATA frame") }
            guard !s.peerEOF else { return failNoLock("DATA after EOF on stream \(id)") }
            s.unacknowledged += payload.count
            guard s.unacknowledged <= Self.window else { return failNoLock("DATA beyond the window on stream \(id)") }
            if s.pendingStart > 0 && s.pendingStart == s.pending.count { s.pending.removeAll(keepingCapacity: true); s.pendingStart = 0 }
            s.pending += payload
            writeLocal(id, s)
        case .eof:
            guard payload.isEmpty else { return failNoLock("a malformed EOF") }
            s.peerEOF = true
            writeLocal(id, s)
        case .reset:
            guard s.peerEOF else { return drop(id, s) }
            // After its EOF: the peer's side is gone, but what it sent is still passed on;
            // nothing more is read from (or sent for) this stream.
            s.readingLocal = false
            writeLocal(id, s)
        case .credit:
            guard payload.count == 4 else { return failNoLock("a malformed CREDIT") }
            let n = Int(Self.u32(payload, 0))
            guard n > 0, s.credit + n <= Self.window else { return failNoLock("a CREDIT beyond the window on stream \(id)") }
            s.credit += n
        }
    }

    /// Moves received bytes to the local socket; credits them back; passes the peer's EOF on.
    private func writeLocal(_ id: UInt32, _ s: Stream) {
        while s.pendingCount > 0 {
            let n = s.pending.withUnsafeBytes { Glibc.send(s.local, $0.baseAddress! + s.pendingStart, $0.count - s.pendingStart, Int32(MSG_NOSIGNAL)) }
            if n < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN { break }
                // The local side is gone: so is the stream.
                queue(.reset, id)
                return drop(id, s)
            }
            s.pendingStart += n
            s.toCredit += n
        }
        if s.pendingCount == 0 {
            s.pending.removeAll(keepingCapacity: s.pending.count <= Self.window)
            s.pendingStart = 0
        } else if s.pendingStart >= Self.window {
            // Never more than a window behind the read position (a reader that always lags).
            s.pending.removeFirst(s.pendingStart)
            s.pendingStart = 0
        }
        // Credit in batches of a quarter window: a sender blocks only with a whole window
        // unacknowledged, which by then is at least that much passed on (or still pending,
        // credited when it drains). Per byte it would be a frame back per frame in.
        if s.toCredit >= Self.window / 4 {
            let n = UInt32(s.toCredit)
            queue(.credit, id, Frame.u32(n))
            s.unacknowledged -= s.toCredit
            s.toCredit = 0
        }
        if s.peerEOF && s.pendingCount == 0 && !s.shutWrite {
            shutdown(s.local, Int32(SHUT_WR))
            s.shutWrite = true
        }
        closeIfDone(id, s)
    }

    private func readLocal(_ id: UInt32, _ s: Stream, _ buffer: inout [UInt8]) {
        let want = min(s.credit, Self.maxPayload)
        guard want > 0 else { return }
        let n = buffer.withUnsafeMutableBytes { recv(s.local, $0.baseAddress, want, 0) }
        if n < 0 {
            if errno == EINTR || errno == EAGAIN { return }
            queue(.reset, id)
            return drop(id, s)
        }
        if n == 0 {
            s.readingLocal = false
            queue(.eof, id)
            return closeIfDone(id, s)
        }
        s.credit -= n
        queue(.data, id, Array(buffer[0..<n]))
    }

    private func closeIfDone(_ id: UInt32, _ s: Stream) {
        if !s.readingLocal && s.peerEOF && s.pendingCount == 0 { drop(id, s) }
    }

    private func drop(_ id: UInt32, _ s: Stream) {
        shutdown(s.local, Int32(SHUT_RDWR))
        close(s.local)
        streams[id] = nil
    }
}
