import Foundation
@testable import Sandbox
import SandboxPolicy
import Testing

/// The sandbox's mounts are out of the payload's reach by the kernel, not only by the seccomp
/// filter: the payload lives in a user namespace of its own, in init's mount namespace, which
/// init's user namespace owns; a copy of it the payload made would have every mount
/// MNT_LOCKED. To try the attack with the capabilities regained (the filter refuses every
/// route to them from inside), the test joins the payload's namespaces from the host, which
/// gives it every capability of the payload's user namespace.
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
        # capability over the host's /proc any more. The mount namespace is joined first,
        # while this process is still host root (joining one needs CAP_SYS_ADMIN in the user
        # namespace that owns it); then the user namespace, with every capability in it.
        fds = {ns: os.open(f"/proc/{pid}/ns/{ns}", os.O_RDONLY) for ns in ("user", "mnt")}
        status = open("/proc/self/status")
        for ns in ("mnt", "user"):
            if libc.setns(fds[ns], 0) != 0:
                print("setns-" + ns, errno.errorcode[ctypes.get_errno()]); sys.exit(2)
            if ns == "user":
                caps = [l for l in status if l.startswith("CapEff:")][0].split()[1]
                print("caps", caps)
        def attempt(name, rc):
            print(name, "ok" if rc == 0 else errno.errorcode[ctypes.get_errno()])
        MS_RDONLY, MS_REMOUNT, MS_BIND, MS_MOVE, MNT_DETACH = 1, 32, 4096, 8192, 2
        CLONE_NEWNS, OPEN_TREE_CLONE, AT_FDCWD = 0x20000, 1, -100
        if sys.argv[2:] == ["umount-only"]:
            attempt("umount", libc.umount2(b"/usr", MNT_DETACH)); sys.exit(0)
        # remount the read-only /usr writable
        attempt("remount-rw", libc.mount(None, b"/usr", None, MS_REMOUNT | MS_BIND, None))
        # move /usr elsewhere
        attempt("move", libc.mount(b"/usr", b"/proc", None, MS_MOVE, None))
        # unmount /usr, revealing what is beneath it
        attempt("umount", libc.umount2(b"/usr", MNT_DETACH))
        # clone /proc without the covers on it (open_tree, not recursive): the real counters
        fd = libc.syscall(428, AT_FDCWD, b"/proc", OPEN_TREE_CLONE)
        attempt("clone-proc", 0 if fd >= 0 else -1)
        # a mount namespace of its own, copied from the sandbox's: its mounts locked there
        attempt("unshare-mnt", libc.unshare(CLONE_NEWNS))
        attempt("copy-umount", libc.umount2(b"/usr", MNT_DETACH))
        fd = libc.syscall(428, AT_FDCWD, b"/proc", OPEN_TREE_CLONE)
        attempt("copy-clone-proc", 0 if fd >= 0 else -1)
        """

    @Test("with every capability of the payload's user namespace, its mounts cannot be remounted writable, moved, unmounted or cloned without their covers, nor in a copy of its mount namespace; with init's the same attack works")
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
