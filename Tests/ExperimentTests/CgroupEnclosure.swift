import Foundation
import Sandbox

/// A cgroup of one test's own, below this test process's cgroup in each hierarchy sandboxes
/// use (v1 memory, pids, cpu and freezer, and v2): supervisors started inside it make their
/// sandbox cgroups there.
///
/// Every supervisor ends the sandboxes of dead supervisors in its own cgroup when it starts.
/// A test that kills a supervisor to watch the next start sweep its leftovers would otherwise
/// race every other suite running in parallel: whichever `autoharness` starts first in this
/// process's cgroup sweeps them, and the test sees nothing left, or nothing swept.
final class CgroupEnclosure {
    /// The enclosure's directory in each hierarchy.
    let directories: [String]

    init() throws {
        let name = "ah-test-enclosure-" + UUID().uuidString.prefix(8).lowercased()
        var made: [String] = []
        for parent in Self.ownDirectories() {
            let dir = parent + "/" + name
            guard mkdir(dir, 0o755) == 0 else {
                let e = errno
                for d in made { rmdir(d) }
                throw NSError(domain: "CgroupEnclosure", code: Int(e), userInfo: [NSLocalizedDescriptionKey: "mkdir \(dir): \(String(cString: strerror(e)))"])
            }
            made.append(dir)
        }
        directories = made
    }

    /// `exe args` as a command that moves itself into the enclosure first (a shell that
    /// writes its pid to each `cgroup.procs`, then execs `exe`: the same process).
    func wrap(_ exe: String, _ args: [String]) -> (exe: String, args: [String]) {
        let moves = directories.map { "echo $$ > '\($0)/cgroup.procs' || exit 125" }.joined(separator: "; ")
        return ("/bin/sh", ["-c", moves + "; exec \"$@\"", "sh", exe] + args)
    }

    /// Sandbox cgroups in the enclosure whose names carry `pid` as their owner.
    func sandboxCgroups(ownedBy pid: Int32) -> [String] {
        directories.flatMap { dir in
            ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? [])
                .filter { $0.hasPrefix("autoharness-sbx-") && $0.contains(".o\(pid)-") }.map { dir + "/" + $0 }
        }
    }

    /// Removes the enclosure: whatever a test left in it (a failed test's sandbox cgroups,
    /// emptied by killing their processes, which this test's supervisors started), then itself.
    deinit {
        for dir in directories {
            let children = ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.hasPrefix("autoharness-") }
            for child in children {
                let path = dir + "/" + child
                for pid in ((try? String(contentsOfFile: path + "/cgroup.procs", encoding: .utf8)) ?? "").split(separator: "\n").compactMap({ Int32($0) }) {
                    kill(pid, SIGKILL)
                }
                if FileManager.default.fileExists(atPath: path + "/freezer.state") {
                    try? "THAWED".write(toFile: path + "/freezer.state", atomically: false, encoding: .utf8)
                }
                if FileManager.default.fileExists(atPath: path + "/cgroup.freeze") {
                    try? "0".write(toFile: path + "/cgroup.freeze", atomically: false, encoding: .utf8)
                }
                for _ in 0..<50 where rmdir(path) != 0 { usleep(20_000) }
            }
            for _ in 0..<50 where rmdir(dir) != 0 { usleep(20_000) }
        }
    }

    /// This process's cgroup directory in each hierarchy a supervisor makes sandbox cgroups
    /// in: where `CgroupHost` would put this process's sandboxes.
    static func ownDirectories() -> [String] {
        let host = CgroupHost.detect()
        var dirs: [String] = []
        for dir in host.v1.values.map(\.ownDirectory) + [host.v2?.ownDirectory].compactMap({ $0 }) where !dirs.contains(dir) {
            dirs.append(dir)
        }
        return dirs
    }
}
