import CSystemCalls
import Glibc
import WireCoding

// autoharness-exec: a task container's command server, for Harbor's agent phase on a task's
// image (`env_provider: local`, templates/terminal-bench/autoharness_harbor_env.py).
//
// Harbor and agent.py run in a runner sandbox on the host's userland; the task's commands must
// run on the task's image. So the supervisor starts the image's sandbox with this program as
// its payload (bound in read-only; static, so it needs nothing of the image), and it serves
// one Unix socket that only the runner sandbox is given. Each connection carries one request;
// commands run as the container's root, in the image's WORKDIR and ENV, in their own session.
// It exits when its stdin ends (the supervisor closes it once Harbor is done); what the
// commands left running then stays, for the verifier's tests (`keepingSurvivors`).
//
// This program holds no secret and decides nothing: everything it does, the agent's commands
// could do themselves. It only has to be correct.
//
// Wire (both ways): WireCoding's frames: one kind byte, a little-endian UInt32 length, the body.
// Requests (the first frame; strings NUL-separated):
//   "X" cwd NUL command NUL (NAME=VALUE NUL)*  run `/bin/bash -c command`; answers "o"/"e"
//                                              chunks of its stdout/stderr, then "x" with
//                                              its status (128+N for signal N). The client
//                                              closing the connection kills its process group.
//   "P" path NUL mode(octal) NUL data          write a file (parents made); "x" "0"
//   "D" path NUL mode(octal)                   make a directory and its parents; "x" "0"
//   "L" target NUL path                        make a symbolic link; "x" "0"
//   "G" path                                   read: "f" chunks then "x" "0" for a file, "d"
//                                              with NUL-separated `KIND NAME` entries (f, d,
//                                              l) for a directory, "l" with a link's target
// Any failure answers "E" with a message and ends the request.

let maxRequest = 1 << 30

func say(_ message: String) {
    let line = "autoharness-exec: \(message)\n"
    _ = line.withCString { write(2, $0, strlen($0)) }
}

func errorText(_ e: Int32 = errno) -> String { String(cString: strerror(e)) }

func writeAll(_ fd: Int32, _ bytes: [UInt8]) -> Bool { Descriptor.writeAll(fd, bytes) == nil }

func readExact(_ fd: Int32, _ count: Int) -> [UInt8]? {
    var out = [UInt8](repeating: 0, count: count)
    var done = 0
    while done < count {
        let n = out.withUnsafeMutableBytes { read(fd, $0.baseAddress! + done, count - done) }
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { return nil }
        done += n
    }
    return out
}

@discardableResult
func send(_ fd: Int32, _ kind: Character, _ body: [UInt8]) -> Bool {
    writeAll(fd, Frame.tagged([kind.asciiValue!], body))
}

@discardableResult
func send(_ fd: Int32, _ kind: Character, _ text: String) -> Bool { send(fd, kind, Array(text.utf8)) }

/// The NUL-separated fields of `body`, at most `limit` of them (the last keeps the rest).
func fields(_ body: [UInt8], limit: Int = .max) -> [[UInt8]] {
    var out: [[UInt8]] = []
    var start = 0
    for i in body.indices where body[i] == 0 && out.count < limit - 1 {
        out.append(Array(body[start..<i]))
        start = i + 1
    }
    out.append(Array(body[start...]))
    return out
}

func string(_ bytes: [UInt8]) -> String { String(decoding: bytes, as: UTF8.self) }

/// `mkdir -p` of `path` (each missing component with `mode`).
func makeDirectories(_ path: String, mode: mode_t) -> Int32? {
    var prefix = ""
    for part in path.split(separator: "/") {
        prefix += "/" + part
        if mkdir(prefix, mode) != 0 && errno != EEXIST { return errno }
    }
    return nil
}

func parent(_ path: String) -> String {
    guard let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
    return String(path[..<slash])
}

// --- requests --------------------------------------------------------------------------

func serveExec(_ client: Int32, _ body: [UInt8]) {
    let f = fields(body)
    guard f.count >= 2 else { send(client, "E", "malformed exec request"); return }
    let cwd = string(f[0]), command = f[1]
    // The container's environment (the image's ENV), with the request's on top.
    var environment: [String] = []
    var given: [String: String] = [:]
    for entry in f.dropFirst(2) where !entry.isEmpty {
        let text = string(entry)
        guard let eq = text.firstIndex(of: "=") else { continue }
        given[String(text[..<eq])] = text
    }
    var e = environ
    while let p = e.pointee {
        let text = String(cString: p)
        let name = text.firstIndex(of: "=").map { String(text[..<$0]) } ?? text
        if given[name] == nil { environment.append(text) }
        e += 1
    }
    environment += given.values

    var outPipe: [Int32] = [-1, -1], errPipe: [Int32] = [-1, -1]
    guard ahs_cloexec_pipe(&outPipe) == 0, ahs_cloexec_pipe(&errPipe) == 0 else {
        send(client, "E", "pipe: \(errorText())")
        return
    }
    // Its own session: the client's timeout kills the command's whole process group, and a
    // command's terminal signals never reach this server.
    let argv = ["/bin/bash", "-c", string(command)]
    var pid: pid_t = 0
    let cArgs = argv.map { strdup($0) } + [nil]
    let cEnv = environment.map { strdup($0) } + [nil]
    defer { (cArgs + cEnv).forEach { free($0) } }
    let spawned = ahs_spawn_session("/bin/bash", cArgs, cEnv, cwd, outPipe[1], errPipe[1], &pid)
    close(outPipe[1]); close(errPipe[1])
    defer { close(outPipe[0]); close(errPipe[0]) }
    guard spawned == 0 else {
        send(client, "E", "/bin/bash: \(errorText(spawned))\(cwd.isEmpty ? "" : " (in \(cwd))")")
        return
    }
    // Until the command exits (its pidfd), or both pipes end first: a daemon it started may
    // hold them open for ever (`server &`), so once the command is gone, what is in the pipes
    // is sent and the rest is the daemon's own business, as with `docker exec`.
    let exited = ahs_pidfd_open(pid)
    defer { if exited >= 0 { close(exited) } }
    var open = [outPipe[0], errPipe[0]]
    var buffer = [UInt8](repeating: 0, count: 65536)
    var clientGone = false, draining = false
    // A command that made this server its tracer (PTRACE_TRACEME, an anti-debugging check)
    // stops at each signal it gets, which no pidfd shows: it is let go on, untraced, with that
    // signal (the trap after an exec dropped). Its end, if met here, is kept for the reply.
    var ended: Int32?
    func reap(_ options: Int32) {
        var st: Int32 = 0
        while ended == nil {
            let w = waitpid(pid, &st, options | 0x4000_0000 /* __WALL */)
            if w < 0 && errno == EINTR { continue }
            guard w == pid else { return }
            guard st & 0xff == 0x7f else { ended = st; return }  // not WIFSTOPPED: its end
            let sig = (st >> 8) & 0xff
            _ = ahs_ptrace_detach(pid, sig == SIGTRAP ? 0 : sig)
        }
    }
    while !open.isEmpty && !clientGone {
        reap(WNOHANG)
        var polls = open.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
        polls.append(pollfd(fd: client, events: Int16(POLLIN) | 0x2000 /* POLLRDHUP */, revents: 0))
        if exited >= 0 && !draining { polls.append(pollfd(fd: exited, events: Int16(POLLIN), revents: 0)) }
        if poll(&polls, nfds_t(polls.count), draining ? 0 : 250) < 0 {
            if errno == EINTR { continue }
            break
        }
        if exited >= 0 && !draining && polls.removeLast().revents != 0 {
            draining = true
            for fd in open { _ = fcntl(fd, F_SETFL, O_NONBLOCK) }
            continue
        }
        if polls.removeLast().revents != 0 { clientGone = true; break }
        var progress = false
        for p in polls where p.revents != 0 {
            let n = buffer.withUnsafeMutableBytes { read(p.fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { progress = true; continue }
            if n <= 0 {
                if n < 0 && errno == EAGAIN { continue }
                open.removeAll { $0 == p.fd }
                continue
            }
            progress = true
            if !send(client, p.fd == outPipe[0] ? "o" : "e", Array(buffer[0..<n])) { clientGone = true }
        }
        if draining && !progress { break }
    }
    if clientGone { kill(-pid, SIGKILL) }
    reap(0)
    let status = ended ?? 0
    let code = status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + (status & 0x7f)
    if !clientGone { send(client, "x", String(code)) }
}

func servePut(_ client: Int32, _ body: [UInt8]) {
    let f = fields(body, limit: 3)
    guard f.count == 3, let mode = mode_t(string(f[1]), radix: 8) else { send(client, "E", "malformed put request"); return }
    let path = string(f[0])
    if let e = makeDirectories(parent(path), mode: 0o755) { send(client, "E", "\(parent(path)): \(errorText(e))"); return }
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode)
    guard fd >= 0 else { send(client, "E", "\(path): \(errorText())"); return }
    defer { close(fd) }
    guard writeAll(fd, f[2]) else { send(client, "E", "\(path): \(errorText())"); return }
    fchmod(fd, mode)
    send(client, "x", "0")
}

func serveMkdir(_ client: Int32, _ body: [UInt8]) {
    let f = fields(body)
    guard f.count == 2, let mode = mode_t(string(f[1]), radix: 8) else { send(client, "E", "malformed mkdir request"); return }
    if let e = makeDirectories(string(f[0]), mode: mode) { send(client, "E", "\(string(f[0])): \(errorText(e))"); return }
    send(client, "x", "0")
}

func serveLink(_ client: Int32, _ body: [UInt8]) {
    let f = fields(body)
    guard f.count == 2 else { send(client, "E", "malformed link request"); return }
    let path = string(f[1])
    if let e = makeDirectories(parent(path), mode: 0o755) { send(client, "E", "\(parent(path)): \(errorText(e))"); return }
    unlink(path)
    guard symlink(string(f[0]), path) == 0 else { send(client, "E", "\(path): \(errorText())"); return }
    send(client, "x", "0")
}

func serveGet(_ client: Int32, _ body: [UInt8]) {
    let path = string(body)
    var st = stat()
    guard lstat(path, &st) == 0 else { send(client, "E", "\(path): \(errorText())"); return }
    switch st.st_mode & S_IFMT {
    case S_IFLNK:
        var target = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let n = readlink(path, &target, target.count - 1)
        guard n >= 0 else { send(client, "E", "\(path): \(errorText())"); return }
        send(client, "l", target[0..<n].map { UInt8(bitPattern: $0) })
    case S_IFDIR:
        guard let dir = opendir(path) else { send(client, "E", "\(path): \(errorText())"); return }
        defer { closedir(dir) }
        var listing: [UInt8] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                Array(raw.prefix { $0 != 0 })
            }
            if name == [46] || name == [46, 46] { continue }
            var est = stat()
            let full = path.hasSuffix("/") ? path + string(name) : path + "/" + string(name)
            guard lstat(full, &est) == 0 else { continue }
            let kind: UInt8 = switch est.st_mode & S_IFMT {
            case S_IFDIR: 100  // d
            case S_IFLNK: 108  // l
            case S_IFREG: 102  // f
            default: 0
            }
            guard kind != 0 else { continue }
            listing += [kind, 32] + name + [0]
        }
        send(client, "d", listing)
    case S_IFREG:
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { send(client, "E", "\(path): \(errorText())"); return }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 1 << 20)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n < 0 { send(client, "E", "\(path): \(errorText())"); return }
            if n == 0 { break }
            guard send(client, "f", Array(buffer[0..<n])) else { return }
        }
        send(client, "x", "0")
    default:
        send(client, "E", "\(path): not a file, directory or link")
    }
}

func serve(_ client: Int32) {
    defer { close(client) }
    guard let header = readExact(client, 5) else { return }
    let length = Int(Frame.u32(header[1...]) ?? 0)
    guard length <= maxRequest else { send(client, "E", "request too large (\(length) bytes)"); return }
    guard let body = readExact(client, length) else { return }
    switch header[0] {
    case UInt8(ascii: "X"): serveExec(client, body)
    case UInt8(ascii: "P"): servePut(client, body)
    case UInt8(ascii: "D"): serveMkdir(client, body)
    case UInt8(ascii: "L"): serveLink(client, body)
    case UInt8(ascii: "G"): serveGet(client, body)
    default: send(client, "E", "unknown request \(header[0])")
    }
}

// --- the server ------------------------------------------------------------------------

let arguments = CommandLine.arguments
guard arguments.count == 2 else {
    say("usage: autoharness-exec SOCKET (the payload of a task container; see autoharness_harbor_env.py)")
    exit(2)
}
signal(SIGPIPE, SIG_IGN)
let socketPath = arguments[1]
let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
guard listener >= 0 else { say("socket: \(errorText())"); exit(1) }
var address = sockaddr_un()
address.sun_family = sa_family_t(AF_UNIX)
let pathBytes = Array(socketPath.utf8)
guard pathBytes.count < MemoryLayout.size(ofValue: address.sun_path) else { say("\(socketPath): too long for a socket"); exit(1) }
withUnsafeMutableBytes(of: &address.sun_path) { raw in
    for (i, b) in pathBytes.enumerated() { raw[i] = b }
}
unlink(socketPath)
let bound = withUnsafePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
}
guard bound == 0, chmod(socketPath, 0o666) == 0, listen(listener, 64) == 0 else {
    say("\(socketPath): \(errorText())")
    exit(1)
}

final class Connection: @unchecked Sendable {
    let fd: Int32
    init(_ fd: Int32) { self.fd = fd }
}

/// A request's thread (a global function: a closure here would belong to the main actor).
func serveOnThread(_ raw: UnsafeMutableRawPointer?) -> UnsafeMutableRawPointer? {
    let c = Unmanaged<Connection>.fromOpaque(raw!).takeRetainedValue()
    serve(c.fd)
    return nil
}

while true {
    var polls = [pollfd(fd: listener, events: Int16(POLLIN), revents: 0), pollfd(fd: 0, events: Int16(POLLIN), revents: 0)]
    if poll(&polls, 2, -1) < 0 {
        if errno == EINTR { continue }
        say("poll: \(errorText())")
        exit(1)
    }
    if polls[1].revents != 0 {
        // The supervisor closed stdin: Harbor is done with this container.
        var byte: UInt8 = 0
        if read(0, &byte, 1) <= 0 { exit(0) }
    }
    guard polls[0].revents & Int16(POLLIN) != 0 else { continue }
    let client = ahs_accept_cloexec(listener)
    if client < 0 { continue }
    // A thread per request: Harbor may run several commands at once.
    let connection = Unmanaged.passRetained(Connection(client)).toOpaque()
    var thread = pthread_t()
    let started = pthread_create(&thread, nil, serveOnThread, connection)
    if started == 0 {
        pthread_detach(thread)
    } else {
        Unmanaged<Connection>.fromOpaque(connection).release()
        send(client, "E", "no thread: \(errorText(started))")
        close(client)
    }
}
