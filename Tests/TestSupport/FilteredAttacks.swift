import Testing

/// An attack the seccomp filter must refuse: probe action, the errno the caller must see, and
/// the syscall name the audit log must show.
public struct FilteredAttack: CustomTestStringConvertible, Sendable {
    public var action: String
    public var errno: String
    public var audited: String
    public var testDescription: String { "\(action) is refused with \(errno) and audited as \(audited)" }

    public init(action: String, errno: String, audited: String) {
        self.action = action
        self.errno = errno
        self.audited = audited
    }

    /// The escape suite's syscall-level attacks (SeccompEscapeTests; the OCI export is held to
    /// the same list under podman, OCISeccompTests).
    public static let all: [FilteredAttack] = [
        .init(action: "mount", errno: "EPERM", audited: "mount"),
        .init(action: "unshare-user", errno: "EPERM", audited: "unshare"),
        .init(action: "unshare-mount", errno: "EPERM", audited: "unshare"),
        .init(action: "setns", errno: "EPERM", audited: "setns"),
        .init(action: "ptrace-sibling", errno: "EPERM", audited: "ptrace"),
        .init(action: "process-vm-readv", errno: "EPERM", audited: "process_vm_readv"),
        .init(action: "io-uring-setup", errno: "EPERM", audited: "io_uring_setup"),
        .init(action: "bpf", errno: "EPERM", audited: "bpf"),
        .init(action: "perf-event-open", errno: "EPERM", audited: "perf_event_open"),
        .init(action: "keyctl", errno: "EPERM", audited: "keyctl"),
        .init(action: "add-key", errno: "EPERM", audited: "add_key"),
        .init(action: "kexec-load", errno: "EPERM", audited: "kexec_load"),
        .init(action: "init-module", errno: "EPERM", audited: "init_module"),
        .init(action: "open-by-handle-at", errno: "EPERM", audited: "open_by_handle_at"),
        .init(action: "userfaultfd", errno: "EPERM", audited: "userfaultfd"),
        .init(action: "tiocsti", errno: "EPERM", audited: "ioctl"),
        // The kernel reads ioctl's request as 32 bits; garbage above them must not slip past.
        .init(action: "tiocsti-highbits", errno: "EPERM", audited: "ioctl"),
        // ioctl is an allowlist: anything not named in ArgumentRules.allowedIoctls.
        .init(action: "ioctl-ns-get-userns", errno: "EPERM", audited: "ioctl"),
        .init(action: "ioctl-fs-getflags", errno: "EPERM", audited: "ioctl"),
        .init(action: "ioctl-tiocsetd", errno: "EPERM", audited: "ioctl"),
        .init(action: "int80", errno: "ENOSYS", audited: "i386:getpid"),
        .init(action: "x32", errno: "ENOSYS", audited: "x32:getpid"),
        // clone3 hides its flags in memory the filter cannot read: always ENOSYS (libc falls
        // back to clone); the supervisor reads the flags and reports namespace requests.
        .init(action: "clone3-newuser", errno: "ENOSYS", audited: "clone3"),
        .init(action: "clone-newuser", errno: "EPERM", audited: "clone"),
        // A pidfd of the child: its inode number is the host's process serial.
        .init(action: "clone-pidfd", errno: "EPERM", audited: "clone"),
        .init(action: "mbind-move", errno: "EPERM", audited: "mbind"),
        .init(action: "chroot", errno: "EPERM", audited: "chroot"),
        .init(action: "personality", errno: "EPERM", audited: "personality"),
        // A refused socket form is answered as a family or protocol the kernel lacks.
        .init(action: "socket-packet", errno: "EAFNOSUPPORT", audited: "socket"),
        .init(action: "socket-netlink-audit", errno: "EAFNOSUPPORT", audited: "socket"),
        .init(action: "socket-netlink-uevent", errno: "EAFNOSUPPORT", audited: "socket"),
        // NETLINK_ROUTE where the network mode is none (base): its route and neighbour
        // lookups move statistics the kernel keeps for the whole host (Policy.effectiveSeccomp).
        .init(action: "socket-netlink-route", errno: "EAFNOSUPPORT", audited: "socket"),
        // Protocols by allowlist: a module the kernel would load for any sandbox after.
        .init(action: "socket-sctp", errno: "EAFNOSUPPORT", audited: "socket"),
        .init(action: "socket-dccp-highbits", errno: "EAFNOSUPPORT", audited: "socket"),
        .init(action: "socketpair-inet", errno: "EPERM", audited: "socketpair"),
        // Page-cache residency oracles and eviction (a held-out task's pattern of resident
        // pages in a shared file must not be readable by a later sandbox).
        .init(action: "mincore", errno: "ENOSYS", audited: "mincore"),
        .init(action: "cachestat", errno: "ENOSYS", audited: "cachestat"),
        .init(action: "readahead", errno: "ENOSYS", audited: "readahead"),
        .init(action: "io-setup", errno: "ENOSYS", audited: "io_setup"),
        .init(action: "fadvise-dontneed", errno: "EPERM", audited: "fadvise64"),
        .init(action: "fadvise-willneed", errno: "EPERM", audited: "fadvise64"),
        .init(action: "preadv2-nowait", errno: "EPERM", audited: "preadv2"),
        // Host-wide identifiers: the socket-cookie and netns-cookie counters, also
        // with garbage above the 32 bits the kernel reads; and the pinning that makes the
        // per-CPU inode-number batches exact.
        .init(action: "so-cookie", errno: "EPERM", audited: "getsockopt"),
        .init(action: "so-netns-cookie", errno: "EPERM", audited: "getsockopt"),
        .init(action: "so-cookie-highbits", errno: "EPERM", audited: "getsockopt"),
        .init(action: "so-peerpidfd", errno: "EPERM", audited: "getsockopt"),
        .init(action: "so-napi-id", errno: "EPERM", audited: "getsockopt"),
        .init(action: "so-future-option", errno: "EPERM", audited: "getsockopt"),
        // setsockopt by the same allowlist: SO_PASSPIDFD hands every received message's
        // sender as a pidfd (SCM_PIDFD), whose inode number is the host's process serial.
        .init(action: "so-passpidfd", errno: "EPERM", audited: "setsockopt"),
        // statx's unique mount id: a host-wide serial of every mount made (Linux 6.8).
        .init(action: "statx-mnt-id-unique", errno: "EPERM", audited: "statx"),
        // inotify's rename cookie: a host-wide serial of every rename made.
        .init(action: "inotify-moves", errno: "EPERM", audited: "inotify_add_watch"),
        .init(action: "setsockopt-future-option", errno: "EPERM", audited: "setsockopt"),
        // prctl and fcntl by allowlist (ArgumentRules.allowedPrctlOptions, allowedFcntlCommands).
        .init(action: "prctl-sched-core", errno: "EPERM", audited: "prctl"),
        .init(action: "prctl-future-option", errno: "EPERM", audited: "prctl"),
        .init(action: "fcntl-notify", errno: "EPERM", audited: "fcntl"),
        .init(action: "fcntl-setlease", errno: "EPERM", audited: "fcntl"),
        .init(action: "fcntl-future", errno: "EPERM", audited: "fcntl"),
        .init(action: "sched-setaffinity", errno: "ENOSYS", audited: "sched_setaffinity"),
    ]
}
