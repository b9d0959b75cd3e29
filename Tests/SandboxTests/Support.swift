import Foundation
import Testing

/// The binaries under test, from the same build directory as this test bundle.
enum Built {
    static let directory: String = {
        if let d = ProcessInfo.processInfo.environment["AUTOHARNESS_BUILD_DIR"] { return d }
        let exe = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var dir = URL(fileURLWithPath: exe).deletingLastPathComponent()
        // swift-testing may run from inside the .xctest bundle directory
        while !FileManager.default.fileExists(atPath: dir.appendingPathComponent("autoharness").path), dir.path != "/" {
            dir = dir.deletingLastPathComponent()
        }
        return dir.path
    }()
    static var autoharness: String { directory + "/autoharness" }
    static var probe: String { directory + "/sandbox-probe" }
    static var packageRoot: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().path
    }
}

struct Run {
    var status: Int32
    var stdout: String
    var stderr: String

    /// The probe's `RESULT` line split into words (after the action name).
    var result: [String] {
        guard let line = stdout.split(separator: "\n").first(where: { $0.hasPrefix("RESULT ") }) else { return [] }
        return line.split(separator: " ").dropFirst(2).map(String.init)
    }
    /// `EPERM` for `RESULT x errno EPERM 1`, nil when the action succeeded.
    var errnoName: String? { result.first == "errno" && result.count > 1 ? result[1] : nil }
    var succeeded: Bool { result.first == "ok" }
}

/// Sandbox tests need root: they fail loudly without it (in CI and elsewhere), never skip.
func requireRoot() throws {
    try #require(getuid() == 0, "the sandbox escape suite must run as root (it builds real namespaces); CI=\(ProcessInfo.processInfo.environment["CI"] ?? "unset")")
}

/// Runs `autoharness ARGS`, returning status and output. `stdinPath` feeds stdin from a file.
func autoharness(_ args: [String], environment: [String: String]? = nil, stdinPath: String? = nil) throws -> Run {
    try run(Built.autoharness, args, environment: environment, stdinPath: stdinPath)
}

func run(_ exe: String, _ args: [String], environment: [String: String]? = nil, stdinPath: String? = nil) throws -> Run {
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

/// `autoharness sandbox exec [extra] --ro PROBE:/probe -- /probe ACTION ARGS...`
func probe(_ action: String, _ args: String..., options: [String] = [], policy: String = "base") throws -> Run {
    try autoharness(["sandbox", "exec", "--policy", policy, "--timeout", "30", "--ro", "\(Built.probe):/probe"] + options
        + ["--", "/probe", action] + args)
}

/// A fresh directory under /tmp, removed at the end of the test.
final class TempDir {
    let path: String
    init(mode: Int = 0o755) throws {
        path = NSTemporaryDirectory() + "ah-test-" + UUID().uuidString.prefix(8).lowercased()
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        chmod(path, mode_t(mode))
    }
    func file(_ name: String, _ contents: String) throws -> String {
        let p = path + "/" + name
        try contents.write(toFile: p, atomically: false, encoding: .utf8)
        return p
    }
    deinit { try? FileManager.default.removeItem(atPath: path) }
}

/// Reads an audit JSONL file into dictionaries.
func auditEvents(_ path: String) throws -> [[String: Any]] {
    let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    return try text.split(separator: "\n").map {
        try #require(JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any])
    }
}

/// Host processes whose command line contains `marker`.
func hostProcesses(containing marker: String) -> [Int32] {
    let fm = FileManager.default
    return ((try? fm.contentsOfDirectory(atPath: "/proc")) ?? []).compactMap { Int32($0) }.filter { pid in
        guard let data = fm.contents(atPath: "/proc/\(pid)/cmdline") else { return false }
        return String(decoding: data, as: UTF8.self).contains(marker)
    }
}
