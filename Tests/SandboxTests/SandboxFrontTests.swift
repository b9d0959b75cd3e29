import Foundation
import Testing
import TestSupport

/// autoharness-front runs `sandbox exec` itself only from the full CLI's policy cache, and
/// hands everything else to the full CLI unchanged. These tests fail if the front uses a
/// policy the full CLI would not load now, answers differently from it, or runs a full CLI
/// anyone but root could have replaced.
@Suite("sandbox exec's front")
struct SandboxFrontTests {
    /// A private cache, timing marks on stderr that say which path a launch took, and no
    /// launch service.
    static func environment(cache: String) -> [String: String] {
        var env = ProcessInfo.processInfo.environment
        env["AUTOHARNESS_CACHE_DIR"] = cache
        env["AUTOHARNESS_TIMING"] = "1"
        // The front's own launches: no launch service (nor one it would start for the next).
        env["AUTOHARNESS_LAUNCH_SERVICE"] = "off"
        return env
    }

    static func handedOver(_ r: Run) -> Bool { r.stderr.contains("timing: handed over to the full CLI") }

    /// A cache directory of the test's own, root's alone.
    static func privateCache(in dir: TempDir) throws -> String {
        let path = dir.path + "/cache"
        try #require(mkdir(path, 0o700) == 0)
        return path
    }

    /// `dir` laid out as `scripts/install` lays out a prefix: `bin/autoharness` the front,
    /// `libexec/autoharness/` the full CLI and its launcher. Returns `bin`. Copies, not hard
    /// links: a link changes the built files' ctime, which is part of their identity, and so of
    /// every cache key stored by the build's full CLI: the tests beside this one, caching with
    /// it, would miss (they did, one run in a few).
    static func installedLayout(in dir: TempDir) -> String {
        chmod(dir.path, 0o755)
        let bin = dir.path + "/bin", libexec = dir.path + "/libexec/autoharness"
        for d in [bin, dir.path + "/libexec", libexec] { #expect(mkdir(d, 0o755) == 0) }
        for (from, to) in [(Built.front, bin + "/autoharness"), (Built.autoharness, libexec + "/autoharness"),
                           (Built.directory + "/autoharness-launch", libexec + "/autoharness-launch")] {
            #expect((try? copyExecutable(from, to: to)) != nil && chmod(to, 0o755) == 0, "copy \(from)")
        }
        return bin
    }

    @Test("after the full CLI cached the policy, the front launches itself, with the full CLI's output and status")
    func cachedLaunchRunsInTheFront() throws {
        try requireRoot()
        let dir = try TempDir()
        let cache = try Self.privateCache(in: dir)
        let env = Self.environment(cache: cache)
        let command = ["sandbox", "exec", "-v", "--policy", "base", "--env", "GREETING=hi", "--",
                       "/bin/sh", "-c", "echo $GREETING; id -u; exit 7"]
        let first = try runProcess(Built.front, command, environment: env)
        #expect(Self.handedOver(first), "an empty cache must be a miss: \(first.stderr)")
        let full = try runProcess(Built.autoharness, command, environment: env)
        let second = try runProcess(Built.front, command, environment: env)
        #expect(!Self.handedOver(second) && second.stderr.contains("sandbox exec by the front: policy base"), "\(second.stderr)")
        for r in [first, full, second] {
            #expect(r.status == 7 && r.stdout == full.stdout && r.stdout.hasPrefix("hi\n"), "\(r.status) \(r.stdout) \(r.stderr)")
        }
        // The front's sandbox is the full CLI's: the same uid, and a refused call reported.
        let probe = ["sandbox", "exec", "--policy", "base", "--ro", Built.probe + ":/probe", "--", "/probe", "mount"]
        _ = try runProcess(Built.autoharness, probe, environment: env)
        let refused = try runProcess(Built.front, probe, environment: env)
        #expect(!Self.handedOver(refused) && refused.errnoName == "EPERM" && refused.stderr.contains("1 audit event: mount"), "\(refused.stdout) \(refused.stderr)")
    }

    @Test("an edited layer, or a new file that shadows one, is a miss: the next launch through the front gets the new policy")
    func editedOrShadowedPolicyIsAMiss() throws {
        try requireRoot()
        let dir = try TempDir()
        let data = dir.path + "/data"
        try FileManager.default.createDirectory(atPath: data, withIntermediateDirectories: true)
        try "SECRET".write(toFile: data + "/secret", atomically: false, encoding: .utf8)
        let cache = try Self.privateCache(in: dir)
        let early = dir.path + "/early", late = dir.path + "/late"
        for d in [early, late] { try FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true) }
        let open = "extends: base\nfilesystem:\n  mounts:\n    - ro: \(data)\n"
        let hidden = open + "    - hide: \(data)/secret\n"
        try open.write(toFile: late + "/p.yaml", atomically: false, encoding: .utf8)
        let env = Self.environment(cache: cache)
        let command = ["sandbox", "exec", "--policy-dir", early, "--policy-dir", late, "--policy", "p", "--", "/usr/bin/cat", data + "/secret"]

        _ = try runProcess(Built.autoharness, command, environment: env)
        let cached = try runProcess(Built.front, command, environment: env)
        #expect(!Self.handedOver(cached) && cached.status == 0 && cached.stdout == "SECRET", "\(cached.stderr)")

        // Shadowed: the same name, now found in a directory searched earlier.
        try hidden.write(toFile: early + "/p.yaml", atomically: false, encoding: .utf8)
        let shadowed = try runProcess(Built.front, command, environment: env)
        #expect(Self.handedOver(shadowed) && shadowed.status != 0 && !shadowed.stdout.contains("SECRET"), "\(shadowed.stdout) \(shadowed.stderr)")

        // Edited in place, after the full CLI cached the shadowing file.
        #expect(unlink(early + "/p.yaml") == 0)
        let recached = try runProcess(Built.autoharness, command, environment: env)
        let again = try runProcess(Built.front, command, environment: env)
        #expect(!Self.handedOver(again), "the full CLI: \(recached.status) \(recached.stderr)\nthe front: \(again.stderr)")
        try hidden.write(toFile: late + "/p.yaml", atomically: false, encoding: .utf8)
        let edited = try runProcess(Built.front, command, environment: env)
        #expect(Self.handedOver(edited) && edited.status != 0 && !edited.stdout.contains("SECRET"), "\(edited.stdout) \(edited.stderr)")
    }

    @Test("what the front does not run itself, the full CLI answers exactly as when called directly")
    func everythingElseIsTheFullCLI() throws {
        try requireRoot()
        let dir = try TempDir()
        let cache = try Self.privateCache(in: dir)
        var env = ProcessInfo.processInfo.environment
        env["AUTOHARNESS_CACHE_DIR"] = cache
        env["AUTOHARNESS_LAUNCH_SERVICE"] = "off"
        let lines: [[String]] = [
            ["sandbox", "exec", "--help"],
            ["sandbox", "exec", "--", "/bin/echo", "-h"],
            ["sandbox", "exec", "--no-such-option", "--", "/bin/true"],
            ["sandbox", "exec", "--policy", "base"],
            ["sandbox", "exec", "--policy", "no-such-policy", "--", "/bin/true"],
            ["sandbox", "exec", "--var", "novalue", "--", "/bin/true"],
            ["sandbox", "exec", "--ro", "/no/such/source", "--", "/bin/true"],
            ["policy", "show", "base"],
            ["--version"],
            [],
        ]
        for line in lines {
            let full = try runProcess(Built.autoharness, line, environment: env)
            let front = try runProcess(Built.front, line, environment: env)
            #expect(front.status == full.status && front.stdout == full.stdout && front.stderr == full.stderr,
                    "\(line): front \(front.status) \(front.stderr) / full \(full.status) \(full.stderr)")
        }
    }

    @Test("the front runs no full CLI that someone other than root could have replaced, and says why it cannot run")
    func fullCLIMustBeRoots() throws {
        try requireRoot()
        let dir = try TempDir()
        let bin = dir.path + "/bin"
        #expect(mkdir(bin, 0o755) == 0)
        let front = bin + "/autoharness-front", full = bin + "/autoharness"
        try copyExecutable(Built.front, to: front)
        let alone = try runProcess(front, ["sandbox", "exec", "--", "/bin/true"])
        #expect(alone.status == 2 && alone.stderr.contains("cannot find the full command line") && alone.stderr.contains(full), "\(alone.stderr)")
        // Installed under the full CLI's name, alone: it never runs itself (it would forever).
        let own = dir.path + "/own"
        #expect(mkdir(own, 0o755) == 0 && link(Built.front, own + "/autoharness") == 0)
        let itself = try runProcess(own + "/autoharness", ["--version"])
        #expect(itself.status == 2 && itself.stderr.contains(own + "/autoharness: is this front"), "\(itself.status) \(itself.stderr)")

        // mkdir where the full CLI should be: handed the front's arguments, it makes the
        // marker directory, so the marker exists only if it passed the checks and ran.
        let marker = dir.path + "/ran"
        try FileManager.default.copyItem(atPath: "/usr/bin/mkdir", toPath: full)
        chmod(full, 0o755)
        #expect(try runProcess(front, [marker]).status == 0 && FileManager.default.fileExists(atPath: marker))
        #expect(rmdir(marker) == 0)
        let changes: [(String, () -> Int32)] = [
            ("writable by others", { chmod(full, 0o757) }),
            ("owned by another user", { chmod(full, 0o755); return chown(full, 65534, 65534) }),
            ("in a directory others may write", { chown(full, 0, 0); return chmod(bin, 0o777) }),
        ]
        for (what, change) in changes {
            #expect(change() == 0)
            let r = try runProcess(front, [marker])
            #expect(r.status == 2 && r.stderr.contains(full) && !FileManager.default.fileExists(atPath: marker), "\(what): \(r.status) \(r.stderr)")
        }
    }

    @Test("installed as scripts/install lays it out, the front launches with the monitor the full CLI would use, not one beside the front")
    func installedLayoutUsesTheFullCLIsLauncher() throws {
        try requireRoot()
        let dir = try TempDir()
        let bin = Self.installedLayout(in: dir)
        // A root-owned program under the launcher's name beside the front.
        #expect(link("/usr/bin/false", bin + "/autoharness-launch") == 0)
        let cache = try Self.privateCache(in: dir)
        var env = Self.environment(cache: cache)
        env.removeValue(forKey: "AUTOHARNESS_LAUNCHER")
        let command = ["sandbox", "exec", "--policy-dir", Built.packageRoot + "/policies", "--", "/bin/sh", "-c", "echo ran"]
        let first = try runProcess(bin + "/autoharness", command, environment: env)
        #expect(Self.handedOver(first) && first.status == 0 && first.stdout == "ran\n", "\(first.status) \(first.stderr)")
        let second = try runProcess(bin + "/autoharness", command, environment: env)
        #expect(!Self.handedOver(second) && second.status == 0 && second.stdout == "ran\n", "\(second.status) \(second.stderr)")
    }

    @Test("a front of another build of the launch code than the full CLI's hands every launch over, never using the full CLI's entries")
    func frontOfAnotherBuildHandsOver() throws {
        try requireRoot()
        let dir = try TempDir()
        let bin = Self.installedLayout(in: dir)
        #expect(mkdir(dir.path + "/other", 0o755) == 0)
        // The same front with another digest of the launch code: one hex digit changed.
        var bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: Built.front)))
        let marker = Array("autoharness-launch-code:".utf8)
        var patched = 0
        var i = 0
        while i + marker.count < bytes.count {
            if bytes[i] == marker[0], Array(bytes[i..<i + marker.count]) == marker {
                let at = i + marker.count
                bytes[at] = bytes[at] == UInt8(ascii: "0") ? UInt8(ascii: "1") : UInt8(ascii: "0")
                patched += 1
                i = at
            }
            i += 1
        }
        #expect(patched >= 1, "the front carries no launch-code digest")
        let other = dir.path + "/other/autoharness"
        try Data(bytes).write(to: URL(fileURLWithPath: other))
        chmod(other, 0o755)

        let cache = try Self.privateCache(in: dir)
        var env = Self.environment(cache: cache)
        env.removeValue(forKey: "AUTOHARNESS_LAUNCHER")
        let command = ["sandbox", "exec", "--policy-dir", Built.packageRoot + "/policies", "--", "/bin/sh", "-c", "echo ran"]
        for _ in 0..<2 {
            let r = try runProcess(other, command, environment: env)
            #expect(Self.handedOver(r) && r.status == 0 && r.stdout == "ran\n", "\(r.status) \(r.stderr)")
        }
        // The entry is there, and a front of the full CLI's own build uses it.
        let same = try runProcess(bin + "/autoharness", command, environment: env)
        #expect(!Self.handedOver(same) && same.status == 0 && same.stdout == "ran\n", "\(same.status) \(same.stderr)")
    }
}
