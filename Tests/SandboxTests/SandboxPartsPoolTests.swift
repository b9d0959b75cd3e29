import CSandboxSpawn
import Foundation
@testable import Sandbox
import SandboxPolicy
import Testing
import TestSupport

/// Each sandbox's /dev and user namespace made ahead of time (`SandboxPartsPool`).
@Suite("Sandbox parts made ahead of time: /dev and the user namespace with its id maps", .serialized)
struct SandboxPartsPoolTests {
    static func run(_ script: String, identity: Identity = Identity(), out: String, parts: SandboxPartsPool?) throws -> (SandboxResult, String) {
        var options = RunOptions()
        options.parts = parts
        return try runCapturing(try shellPlan(script, mounts: minimalMounts, out: out, identity: identity), out: out, options: options)
    }

    /// What the sandbox's user namespace is: its init's maps (as the payload's nested namespace
    /// sees them), setgroups, the ids inside, and a file it creates (owned by the host ids).
    static let probe = "id -u; id -g; id -G; cat /proc/1/uid_map /proc/1/gid_map /proc/1/setgroups; touch /out/made-$$; echo PID $$"

    @Test("a sandbox in a user namespace made ahead has exactly its plan's identity: the maps, setgroups denied, the ids inside and on the host, no supplementary groups",
          arguments: [Identity(), Identity(uid: 2000, gid: 3000, hostUID: 61000, hostGID: 62000)])
    func sameIdentity(identity: Identity) throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        let parts = SandboxPartsPool(capacity: 2)
        defer { parts.close() }
        parts.prepare(for: identity)
        #expect(parts.waitUntilReady(for: identity) && parts.failures.isEmpty, "\(parts.failures)")
        let (ahead, text) = try Self.run(Self.probe, identity: identity, out: out.path, parts: parts)
        #expect(parts.counts.namespaces == 1, "the sandbox took a namespace made ahead")
        #expect(ahead.termination == .exited(0), "\(text)")
        // The same sandbox with the namespace unshared by the monitor and mapped by the supervisor.
        let (own, ownText) = try Self.run(Self.probe, identity: identity, out: out.path, parts: nil)
        #expect(own.termination == .exited(0), "\(ownText)")
        func lines(_ t: String) -> [Substring] { t.split(separator: "\n").filter { !$0.hasPrefix("PID ") } }
        #expect(lines(text) == lines(ownText), "\(text)\n---\n\(ownText)")
        // Seen from inside, the maps' outside ids read as the payload's own (its nested namespace
        // maps them to themselves); the host ids show in what the sandbox made (below).
        let inside = "\(identity.uid) \(identity.uid) 1"
        #expect(text.split(separator: "\n").contains { $0.split(separator: " ", omittingEmptySubsequences: true).joined(separator: " ") == inside }, "\(text)")
        #expect(text.contains("deny"), "\(text)")
        #expect(text.hasPrefix("\(identity.uid)\n\(identity.gid)\n\(identity.gid)\n"), "\(text)")
        // On the host, what it made belongs to the host ids.
        let pid = try #require(text.split(separator: "\n").first { $0.hasPrefix("PID ") }?.dropFirst(4))
        var st = stat()
        #expect(stat(out.path + "/made-\(pid)", &st) == 0 && st.st_uid == identity.hostUID && st.st_gid == identity.hostGID)
    }

    @Test("namespaces made ahead are each for one sandbox and one identity: never the same one twice, never another identity's")
    func oneEach() throws {
        try requireRoot()
        let a = Identity(), b = Identity(uid: 2000, gid: 2000, hostUID: 61000, hostGID: 61000)
        let parts = SandboxPartsPool(capacity: 2)
        defer { parts.close() }
        parts.prepare(for: a)
        #expect(parts.waitUntilReady(for: a))
        // Nothing made for b yet: b's first sandbox gets none (and its monitor unshares its own).
        #expect(parts.takeUserNamespace(for: b) == nil)
        let first = try #require(parts.takeUserNamespace(for: a))
        let second = try #require(parts.takeUserNamespace(for: a))
        defer { close(first); close(second) }
        var s1 = stat(), s2 = stat()
        #expect(fstat(first, &s1) == 0 && fstat(second, &s2) == 0)
        #expect(s1.st_ino != s2.st_ino, "two different namespaces")
        #expect(parts.takeUserNamespace(for: a) == nil, "taken ones are gone until a refill")
        #expect(fcntl(first, F_GETFD) & FD_CLOEXEC != 0, "ready descriptors are close-on-exec")
        parts.refill()
        #expect(parts.waitUntilReady(for: b), "b is kept ready once asked for")
    }

    @Test("the /dev made ahead is the sandbox's own: its own device number, the six nodes, read-only, and two sandboxes never get the same")
    func ownDevice() throws {
        try requireRoot()
        let out = try TempDir(mode: 0o777)
        let parts = SandboxPartsPool(capacity: 2)
        defer { parts.close() }
        #expect(parts.waitUntilReady() && parts.failures.isEmpty, "\(parts.failures)")
        let script = "stat -c %d /dev; ls -l /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty | cut -c1-10,30-36; touch /dev/x 2>&1"
        let (_, one) = try Self.run(script, out: out.path, parts: parts)
        let (_, two) = try Self.run(script, out: out.path, parts: parts)
        #expect(parts.counts.devices == 2)
        let d1 = one.split(separator: "\n").first, d2 = two.split(separator: "\n").first
        #expect(d1 != nil && d1 != d2, "\(one)\n\(two)")
        #expect(one.contains("crw-rw-rw-") && one.contains("Read-only file system"), "\(one)")
        let (_, own) = try Self.run(script, out: out.path, parts: nil)
        #expect(Array(own.split(separator: "\n").dropFirst()) == Array(one.split(separator: "\n").dropFirst()), "\(own)\n---\n\(one)")
    }
}

extension SandboxPartsPoolTests {
    @Test("a supervisor that exits while its pool makes a user namespace leaves no process behind (the namespace's holder dies with it)")
    func nothingOutlivesTheSupervisor() throws {
        try requireRoot()
        // `--bench-repeat` installs the pool and exits right after its last launch, often while
        // the pool thread refills: an earlier build left the parked child running there.
        // Output to /dev/null and a plain wait: a process left behind holding the supervisor's
        // descriptors must not keep the test waiting for an end of file.
        for _ in 0..<40 {
            var pid: pid_t = 0
            var actions: posix_spawn_file_actions_t = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            for fd: Int32 in [0, 1, 2] { posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0) }
            let argv = [Built.autoharness, "sandbox", "exec", "--bench-repeat", "2", "--policy", "base", "--", "/bin/true"]
            var cargs = argv.map { strdup($0) } + [nil]
            defer { for a in cargs { free(a) } }
            #expect(posix_spawn(&pid, Built.autoharness, &actions, nil, &cargs, environ) == 0)
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            #expect(status == 0)
        }
        usleep(300_000)
        var orphans: [String] = []
        for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? [] where Int32(name) != nil {
            guard let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(name)/exe"), exe == Built.autoharness,
                  let stat = procText("/proc/\(name)/stat"),
                  let close = stat.lastIndex(of: ")") else { continue }
            // The parked holder keeps the supervisor's name; a sandbox's monitor calls itself
            // sandbox-init (and other tests may leave those to the host's init on purpose).
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            if fields.count > 1, fields[1] == "1", stat.contains("(autoharness)") { orphans.append("\(name): \(stat.prefix(80))") }
        }
        #expect(orphans.isEmpty, "\(orphans)")
    }
}

extension SandboxPartsPoolTests {
    @Test("parts made ahead are thrown away on request (they carry the time they were made), and those made after are new")
    func discardedPartsAreRemade() throws {
        try requireRoot()
        let identity = Identity()
        let parts = SandboxPartsPool(capacity: 2)
        defer { parts.close() }
        parts.prepare(for: identity)
        #expect(parts.waitUntilReady(for: identity))
        usleep(50_000)  // the parts made before are now 50 ms old
        #expect(parts.discardReady() == 4)
        #expect(parts.takeDevice() == nil && parts.takeUserNamespace(for: identity) == nil, "nothing made before is handed out")
        // tmpfs stamps its inodes from the coarse clock.
        var now = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &now)
        parts.refill()
        #expect(parts.waitUntilReady(for: identity))
        let dev = try #require(parts.takeDevice())
        defer { close(dev) }
        var st = stat()
        #expect(fstatat(dev, "null", &st, 0) == 0)
        let made = Double(st.st_ctim.tv_sec) + Double(st.st_ctim.tv_nsec) / 1e9
        let discarded = Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
        #expect(made >= discarded - 0.005, "made after the discard: \(made) against \(discarded)")
    }
}
