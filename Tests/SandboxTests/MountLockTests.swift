import Foundation
@testable import Sandbox
import SandboxPolicy
import Testing

/// The sandbox's mounts are locked by the kernel, not only by the seccomp filter: the
/// payload lives in a user and mount namespace of its own, copied from init's, so every
/// mount is MNT_LOCKED. To try the attack with the capabilities regained (the filter
/// refuses every route to them from inside), the test joins the payload's namespaces from
/// the host, which gives it every capability of the payload's user namespace.
@Suite("Locked mounts")
struct MountLockTests {
    /// Joins the user and mount namespaces of PID (argv[1]) and tries to undo the sandbox's
    /// mounts; prints one `name errno-or-ok` line per attempt.
    static let attacker = """
        import ctypes, errno, os, sys
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
        libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        pid = sys.argv[1]
        # Both opened first: once in the sandbox's user namespace this process has no
        # capability over the host's /proc any more.
        fds = {ns: os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY) for ns in ("user", "mnt")}
        status = open("/proc/self/status")
        for ns in ("user", "mnt"):
            if libc.setns(fds[ns], 0) != 0:
                print("setns-" + ns, errno.errorcode[ctypes.get_errno()]); sys.exit(2)
            if ns == "user":
                caps = [l for l in status if l.startswith("CapEff:")][0].split()[1]
                print("caps", caps)
        def attempt(name, rc):
            print(name, "ok" if rc == 0 else errno.errorcode[ctypes.get_errno()])
        MS_RDONLY, MS_REMOUNT, MS_BIND, MS_MOVE, MNT_DETACH = 1, 32, 4096, 8192, 2
        if sys.argv[2:] == ["umount-only"]:
            attempt("umount", libc.umount2(b"/usr", MNT_DETACH)); sys.exit(0)
        # remount the read-only /usr writable
        attempt("remount-rw", libc.mount(None, b"/usr", None, MS_REMOUNT | MS_BIND, None))
        # move /usr elsewhere
        attempt("move", libc.mount(b"/usr", b"/proc", None, MS_MOVE, None))
        # unmount /usr, revealing what is beneath it
        attempt("umount", libc.umount2(b"/usr", MNT_DETACH))
        """

    @Test("with every capability of the payload's user namespace, its mounts cannot be remounted writable, moved or unmounted; in the namespace init owns the same attack works")
    func mountsLocked() throws {
        try requireRoot()
        let sandbox = try SleepingSandbox(seconds: 10, timeout: 20)
        defer { sandbox.stop() }
        let payload = sandbox.payload(in: sandbox.waitForPayload())
        let pid = try #require(payload, "the payload never started")
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        let fields = stat[stat.index(after: stat.lastIndex(of: ")")!)...].split(separator: " ")
        let initPID = try #require(pid_t(fields[1]), "no parent in \(stat)")

        func userNS(_ p: pid_t) -> String { (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(p)/ns/user")) ?? "?" }
        #expect(userNS(pid) != userNS(initPID), "the payload shares init's user namespace")

        func attack(_ target: pid_t, _ extra: [String] = []) throws -> [String: String] {
            let r = try runProcess("/usr/bin/python3", ["-c", Self.attacker, String(target)] + extra)
            #expect(r.stderr.isEmpty, "attacker failed: \(r.stderr)")
            var out: [String: String] = [:]
            for line in r.stdout.split(separator: "\n") {
                let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
                if parts.count == 2 { out[parts[0]] = parts[1] }
            }
            return out
        }
        let locked = try attack(pid)
        // Full capabilities in the payload's namespace: the refusals below are the lock's.
        #expect(locked["caps"].map { $0.hasSuffix("ffffffff") } == true, "\(locked)")
        #expect(locked["remount-rw"] == "EPERM", "\(locked)")
        #expect(locked["move"] == "EINVAL", "\(locked)")
        #expect(locked["umount"] == "EINVAL", "\(locked)")

        // The same attack in init's namespaces, where the sandbox itself made the mounts: it
        // works, so the refusals above are not an accident of the attack.
        let open = try attack(initPID, ["umount-only"])
        #expect(open["umount"] == "ok", "\(open)")
    }
}
