import Foundation
@testable import Sandbox
import SandboxPolicy
import TestSupport
import Testing

/// The sandbox's mounts are out of the payload's reach by the kernel, not only by the seccomp
/// filter: the payload lives in a user namespace of its own, in init's mount namespace, which
/// init's user namespace owns; a copy of it the payload made would have every mount
/// MNT_LOCKED. To try the attack with the capabilities regained (the filter refuses every
/// route to them from inside), the test joins the payload's namespaces from the host, which
/// gives it every capability of the payload's user namespace.
@Suite("Locked mounts")
struct MountLockTests {
    @Test("with every capability of the payload's user namespace, its mounts cannot be remounted writable, moved, unmounted or cloned without their covers, nor in a copy of its mount namespace; with init's the same attack works")
    func mountsLocked() throws {
        try requireRoot()
        let sandbox = try SleepingSandbox(seconds: 10, timeout: 20)
        defer { sandbox.stop() }
        let payload = sandbox.payload(in: sandbox.waitForPayload())
        let pid = try #require(payload, "the payload never started")
        let stat = try #require(procText("/proc/\(pid)/stat"))
        let fields = stat[stat.index(after: stat.lastIndex(of: ")")!)...].split(separator: " ")
        let initPID = try #require(pid_t(fields[1]), "no parent in \(stat)")

        func userNS(_ p: pid_t) -> String { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(p)/ns/user")) ?? "?" }
        #expect(userNS(pid) != userNS(initPID), "the payload shares init's user namespace")

        func attack(_ target: pid_t, _ extra: [String] = []) throws -> [String: String] {
            let (out, stderr) = try MountAttack.run(target, extra)
            #expect(stderr.isEmpty, "attacker failed: \(stderr)")
            return out
        }
        let locked = try attack(pid)
        // Full capabilities in the payload's namespace: the refusals below are the kernel's.
        #expect(locked["caps"].map { $0.hasSuffix("ffffffff") } == true, "\(locked)")
        // init's user namespace owns the mount namespace: no change without its CAP_SYS_ADMIN.
        for attempt in ["remount-rw", "move", "umount", "clone-proc"] {
            #expect(locked[attempt] == "EPERM", "\(attempt): \(locked)")
        }
        // A copy the payload may make is its own, in a less privileged user namespace: every
        // mount in it locked (EINVAL), /proc not clonable apart from its covers.
        #expect(locked["unshare-mnt"] == "ok", "\(locked)")
        #expect(locked["copy-umount"] == "EINVAL", "\(locked)")
        #expect(locked["copy-clone-proc"] == "EINVAL", "\(locked)")

        // The same attack in init's namespaces, where the sandbox itself made the mounts: it
        // works, so the refusals above are not an accident of the attack.
        let open = try attack(initPID, ["umount-only"])
        #expect(open["umount"] == "ok", "\(open)")
    }
}
