import Foundation

/// The attack on a sandbox's mounts with every capability of its payload's user namespace
/// (MountLockTests, and a task image's root, which keeps a few capabilities of its own).
public enum MountAttack {
    /// Joins the user and mount namespaces of PID (argv[1]) and tries to undo the sandbox's
    /// mount at $MOUNT_TARGET (/usr by default); prints one `name errno-or-ok` line per attempt.
    public static let script = """
        import ctypes, errno, os, sys
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]
        libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        pid = sys.argv[1]
        target = os.environ.get("MOUNT_TARGET", "/usr").encode()
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
            attempt("umount", libc.umount2(target, MNT_DETACH)); sys.exit(0)
        # remount the read-only /usr writable
        attempt("remount-rw", libc.mount(None, target, None, MS_REMOUNT | MS_BIND, None))
        # move /usr elsewhere
        attempt("move", libc.mount(target, b"/proc", None, MS_MOVE, None))
        # unmount /usr, revealing what is beneath it
        attempt("umount", libc.umount2(target, MNT_DETACH))
        # clone /proc without the covers on it (open_tree, not recursive): the real counters
        fd = libc.syscall(428, AT_FDCWD, b"/proc", OPEN_TREE_CLONE)
        attempt("clone-proc", 0 if fd >= 0 else -1)
        # a mount namespace of its own, copied from the sandbox's: its mounts locked there
        attempt("unshare-mnt", libc.unshare(CLONE_NEWNS))
        attempt("copy-umount", libc.umount2(target, MNT_DETACH))
        fd = libc.syscall(428, AT_FDCWD, b"/proc", OPEN_TREE_CLONE)
        attempt("copy-clone-proc", 0 if fd >= 0 else -1)
        """

    /// Runs the attack on `pid` (host root joins its namespaces): one entry per attempt,
    /// `ok` or the errno's name, `caps` the capabilities it then held; and its stderr.
    public static func run(_ pid: pid_t, _ extra: [String] = [], target: String = "/usr") throws -> (results: [String: String], stderr: String) {
        let r = try runProcess("/usr/bin/python3", ["-c", script, String(pid)] + extra, environment: ["MOUNT_TARGET": target])
        var out: [String: String] = [:]
        for line in r.stdout.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
            if parts.count == 2 { out[parts[0]] = parts[1] }
        }
        return (out, r.stderr)
    }
}
