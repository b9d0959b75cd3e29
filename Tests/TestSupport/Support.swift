import Foundation
import Testing

/// The binaries under test, from the same build directory as this test bundle.
public enum Built {
    public static let directory: String = {
        if let d = ProcessInfo.processInfo.environment["AUTOHARNESS_BUILD_DIR"] { return d }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
        // swift-testing may run from inside the .xctest bundle directory
        while !FileManager.default.fileExists(atPath: dir.appendingPathComponent("autoharness").path), dir.path != "/" {
            dir = dir.deletingLastPathComponent()
        }
        return dir.path
    }()
    public static var autoharness: String { directory + "/autoharness" }
    /// `sandbox exec`'s front, which hands everything else to the `autoharness` beside it.
    public static var front: String { directory + "/autoharness-front" }
    public static var probe: String { directory + "/sandbox-probe" }
    public static var packageRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }
}

public struct Run {
    public var status: Int32
    public var stdout: String
    public var stderr: String

    public init(status: Int32, stdout: String, stderr: String) {
        self.status = status
        self.stdout = stdout
        self.stderr = stderr
    }

    /// The probe's `RESULT` line split into words (after the action name).
    public var result: [String] {
        guard let line = stdout.split(separator: "\n").first(where: { $0.hasPrefix("RESULT ") }) else { return [] }
        return line.split(separator: " ").dropFirst(2).map(String.init)
    }
    /// `EPERM` for `RESULT x errno EPERM 1`, nil when the action succeeded.
    public var errnoName: String? { result.first == "errno" && result.count > 1 ? result[1] : nil }
    public var succeeded: Bool { result.first == "ok" }
}

/// Sandbox tests need root: they fail loudly without it (in CI and elsewhere), never skip.
public func requireRoot() throws {
    try #require(getuid() == 0, "the sandbox escape suite must run as root (it builds real namespaces); CI=\(ProcessInfo.processInfo.environment["CI"] ?? "unset")")
}

/// Runs `autoharness ARGS`, returning status and output. `stdinPath` feeds stdin from a file.
/// An `init` that does not choose `--images` gets `--images none`: init's default (auto)
/// builds every Dockerfile task's image where podman is, and whether a test's tasks run on
/// images must not depend on the machine (the image tests ask for it).
public func autoharness(_ args: [String], environment: [String: String]? = nil, stdinPath: String? = nil) throws -> Run {
    let chosen = args.first != "init" || args.contains("--images") ? args : args + ["--images", "none"]
    return try runProcess(Built.autoharness, chosen, environment: environment, stdinPath: stdinPath)
}

/// Copies a program a test will run, by `cp` (modes kept): a descriptor the test process held
/// open for writing would be inherited by a child another test spawns meanwhile, and the copy
/// could not be run (ETXTBSY) while that child lives.
public func copyExecutable(_ from: String, to: String) throws {
    let r = try runProcess("/bin/cp", ["--preserve=mode", from, to])
    guard r.status == 0 else { throw CopyFailed(message: "cp \(from) \(to): \(r.stderr)") }
}

public struct CopyFailed: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

public func runProcess(_ exe: String, _ args: [String], environment: [String: String]? = nil, stdinPath: String? = nil) throws -> Run {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: exe)
    p.arguments = args
    if let environment { p.environment = environment }
    let dir = FileManager.default.temporaryDirectory
    let outURL = dir.appendingPathComponent("ah-out-\(UUID().uuidString)")
    let errURL = dir.appendingPathComponent("ah-err-\(UUID().uuidString)")
    FileManager.default.createFile(atPath: outURL.path, contents: nil)
    FileManager.default.createFile(atPath: errURL.path, contents: nil)
    defer {
        try? FileManager.default.removeItem(at: outURL)
        try? FileManager.default.removeItem(at: errURL)
    }
    let out = try FileHandle(forWritingTo: outURL)
    let err = try FileHandle(forWritingTo: errURL)
    p.standardOutput = out
    p.standardError = err
    p.standardInput = stdinPath.flatMap { FileHandle(forReadingAtPath: $0) } ?? FileHandle.nullDevice
    try p.run()
    p.waitUntilExit()
    try out.close()
    try err.close()
    return Run(
        status: p.terminationStatus,
        stdout: (try? String(contentsOf: outURL, encoding: .utf8)) ?? "",
        stderr: (try? String(contentsOf: errURL, encoding: .utf8)) ?? "")
}

/// Starts this test binary again, running only the test `name`, with `key=value` in its
/// environment; child-only tests are `.enabled(if:)` that variable, so they are skipped in
/// every ordinary run.
///
/// Why not `fork()`: the test process is multi-threaded, and a forked child keeps only the
/// calling thread — locks other threads held (in the Swift runtime, SQLite, malloc arenas)
/// stay locked forever in the child. A fresh exec has no such state.
public func spawnTestChild(_ name: String, _ key: String, _ value: String) throws -> Process {
    let child = Process()
    child.executableURL = URL(fileURLWithPath: try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
    child.arguments = ["--testing-library", "swift-testing", "--filter", name]
    var environment = ProcessInfo.processInfo.environment
    environment[key] = value
    child.environment = environment
    child.standardOutput = FileHandle.nullDevice
    child.standardError = FileHandle.nullDevice
    try child.run()
    return child
}

/// A fresh directory under /tmp, removed at the end of the test (kept, for a look after a
/// failure, when AUTOHARNESS_KEEP_TEST_DIRS=1).
public final class TempDir {
    public let path: String
    public init(mode: Int = 0o755) throws {
        path = NSTemporaryDirectory() + "ah-test-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        chmod(path, mode_t(mode))
    }
    /// The path of `name` in the directory (nothing is created).
    public func file(_ name: String) -> String { path + "/" + name }
    /// Directory entries, sorted (hidden ones included).
    public func entries() throws -> [String] { try FileManager.default.contentsOfDirectory(atPath: path).sorted() }
    public func file(_ name: String, _ contents: String) throws -> String {
        let p = path + "/" + name
        try contents.write(toFile: p, atomically: false, encoding: .utf8)
        return p
    }
    deinit {
        if ProcessInfo.processInfo.environment["AUTOHARNESS_KEEP_TEST_DIRS"] == "1" { return }
        try? FileManager.default.removeItem(atPath: path)
    }
}

/// Reads an audit JSONL file into dictionaries.
public func auditEvents(_ path: String) throws -> [[String: Any]] {
    let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    return try text.split(separator: "\n").map {
        try #require(JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
    }
}

/// Host processes whose command line contains `marker`.
public func hostProcesses(containing marker: String) -> [Int32] {
    let fm = FileManager.default
    return ((try? fm.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { Int32($0) }.filter { pid in
        guard let data = fm.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
        return String(decoding: data, as: UTF8.self).contains(marker)
    }
}

/// Processes whose command line contains `marker` and that nobody still running owns: no
/// ancestor is a live supervisor (`autoharness`, another test's run in this parallel suite)
/// or this test process (its own helpers). What a finished run left behind, and only that:
/// its leftovers were reparented away from it when it exited.
public func leftoverProcesses(containing marker: String) -> [Int32] {
    let me = getpid()
    func parentAndName(_ pid: Int32) -> (Int32, String)? {
        guard let stat = procText("/proc/\(pid)/stat"),
              let open = stat.firstIndex(of: "("), let close = stat.lastIndex(of: ")") else { return nil }
        let name = String(stat[stat.index(after: open)..<close])
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 1, let ppid = Int32(fields[1]) else { return nil }
        return (ppid, name)
    }
    return hostProcesses(containing: marker).filter { pid in
        var p = pid
        for _ in 0..<64 {
            guard let (parent, _) = parentAndName(p), parent > 1 else { return true }
            if parent == me { return false }
            if parentAndName(parent)?.1 == "autoharness" { return false }
            p = parent
        }
        return true
    }
}

/// True when `pid` sits in a frozen cgroup (v2 `cgroup.events` frozen 1, or v1 freezer
/// FROZEN), read through this host's cgroup mounts.
public func inFrozenCgroup(_ pid: Int32) -> Bool {
    let mounts = procText("/proc/self/mountinfo") ?? ""
    var v2Mount: String?, freezerMount: String?
    for line in mounts.split(separator: "\n") {
        let halves = line.components(separatedBy: " - ")
        guard halves.count == 2 else { continue }
        let pre = halves[0].split(separator: " "), post = halves[1].split(separator: " ")
        guard pre.count >= 5, post.count >= 3 else { continue }
        if post[0] == "cgroup2" { v2Mount = v2Mount ?? String(pre[4]) }
        if post[0] == "cgroup", post[2].split(separator: ",").contains("freezer") { freezerMount = String(pre[4]) }
    }
    let cgroups = procText("/proc/\(pid)/cgroup") ?? ""
    for line in cgroups.split(separator: "\n") {
        let f = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard f.count == 3 else { continue }
        if f[1].isEmpty, let m = v2Mount,
           let events = try? String(contentsOfFile: m + f[2] + "/cgroup.events", encoding: .utf8),
           events.contains("frozen 1") { return true }
        if f[1].split(separator: ",").contains("freezer"), let m = freezerMount,
           let state = try? String(contentsOfFile: m + f[2] + "/freezer.state", encoding: .utf8),
           state.hasPrefix("FROZEN") { return true }
    }
    return false
}

/// A TCP echo server on the host's loopback (this test's own network namespace), run by
/// python3; `port` is where it listens.
public final class HostEchoServer {
    let process = Process()
    public let port: Int

    /// Listening on `address` on a free port, in network namespace `netns` (`ip netns`) if
    /// given; returns once it listens (a busy machine takes seconds to start python there).
    public init(address: String = "127.0.0.1", netns: String? = nil) throws {
        let portFile = NSTemporaryDirectory() + "ah-echo-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: portFile) }
        process.executableURL = URL(fileURLWithPath: netns == nil ? "/usr/bin/python3" : "/usr/sbin/ip")
        process.arguments = (netns.map { ["netns", "exec", $0, "/usr/bin/python3"] } ?? []) + ["-c", """
            import socket, sys, threading
            s = socket.socket(); s.bind(("\(address)", 0)); s.listen(16)
            open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
            import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
            def serve(c):
                c.sendall(b"echo:" + c.recv(100)); c.close()
            while True:
                c, _ = s.accept(); threading.Thread(target=serve, args=(c,)).start()
            """, portFile]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        var port = 0
        for _ in 0..<1200 where port == 0 {
            usleep(25_000)
            port = (try? String(contentsOfFile: portFile, encoding: .utf8)).flatMap { Int($0) } ?? 0
        }
        self.port = port
        try #require(port > 0, "echo server did not start")
    }

    deinit {
        // SIGKILL, not terminate(): Foundation's Process started from a test thread hands the
        // child a blocked signal mask, so python would never see SIGTERM.
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}


/// A `sleep` child of this test that runs until the object goes: a live owner for tests of
/// what a live process's leftovers are spared.
public final class LiveProcess {
    private let process = Process()
    public var pid: Int32 { process.processIdentifier }

    public init() throws {
        process.executableURL = URL(fileURLWithPath: "/bin/sleep")
        process.arguments = ["600"]
        try process.run()
    }

    deinit {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }
}

/// `stat` mode bits (permissions only).
public func permissions(_ path: String) throws -> mode_t {
    var st = stat()
    try #require(stat(path, &st) == 0, "stat \(path): errno \(errno)")
    return st.st_mode & 0o7777
}

/// A value shared between test threads.
public final class SharedValue<Value>: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Value
    public init(_ value: Value) { self.value = value }
    public func withLock<R>(_ body: (inout Value) throws -> R) rethrows -> R {
        lock.lock()
        defer { lock.unlock() }
        return try body(&value)
    }
}

/// The whole text of a /proc (or /sys) file, read until read(2) returns 0; nil when it cannot
/// be opened. Not `String(contentsOfFile:)`: Foundation takes the first short read of a file
/// whose size says 0 for its end, and the kernel hands a seq_file such as /proc/self/mountinfo
/// out one page at a time, so with more than about forty mounts on the host the lines past the
/// first page (the newest mounts) were silently missing.
public func procText(_ path: String) -> String? {
    let fd = open(path, O_RDONLY | O_CLOEXEC)
    guard fd >= 0 else { return nil }
    defer { close(fd) }
    var out: [UInt8] = []
    var buf = [UInt8](repeating: 0, count: 4096)
    while true {
        let n = buf.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
        if n < 0 && errno == EINTR { continue }
        guard n > 0 else { return n == 0 ? String(decoding: out, as: UTF8.self) : nil }
        out.append(contentsOf: buf[0..<n])
    }
}

/// Whether process `pid` is gone (or a zombie not yet reaped) within `seconds`, looked at every
/// 0.1 s; if not, it is killed (a test's own process, by pid) and false is returned.
public func endsWithin(_ pid: Int32, seconds: Double) -> Bool {
    for _ in 0..<max(1, Int(seconds * 10)) {
        usleep(100_000)
        let status = procText("/proc/\(pid)/status") ?? ""
        if !status.contains("State:") || status.contains("State:\tZ") { return true }
    }
    kill(pid, SIGKILL)
    return false
}
