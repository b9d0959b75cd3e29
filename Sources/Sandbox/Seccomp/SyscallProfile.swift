// Every seccomp decision autoharness makes, in one place.
//
// The filter is default-deny: a syscall runs only if it is named here (or in a policy's
// `seccomp.allow`). Everything else is refused and reported through a seccomp user
// notification, so the supervisor sees each attempt (name, pid, arguments) and chooses the
// errno. Syscalls in `hardDenied` can never be re-allowed by a policy.

public enum SyscallProfile {
    /// Refused with EPERM whatever a policy says: each one either reaches kernel attack
    /// surface the payload never needs, or acts on other processes, mounts, namespaces,
    /// keys, modules or the clock.
    public static let hardDenied: Set<String> = [
        // debugging and cross-process memory (ptrace's one request that acts on no other
        // process passes: `ArgumentRules.allowedPtraceRequests`)
        "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
        "process_madvise",
        // kernel programmability and observability
        "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
        "io_uring_register", "fanotify_init", "lookup_dcookie", "syslog",
        // keyrings
        "keyctl", "add_key", "request_key",
        // mounts and namespaces
        "mount", "umount2", "pivot_root", "move_mount", "open_tree", "open_tree_attr", "fsopen",
        "fsconfig", "fsmount", "fspick", "mount_setattr", "unshare", "setns", "chroot",
        "name_to_handle_at", "open_by_handle_at", "quotactl", "quotactl_fd",
        // the machine itself
        "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
        "reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime",
        "clock_adjtime", "adjtimex", "sethostname", "setdomainname", "iopl", "ioperm",
        "modify_ldt", "vhangup", "uselib", "nfsservctl", "ustat", "sysfs", "_sysctl",
        "move_pages", "migrate_pages", "mbind", "set_mempolicy",
        "set_mempolicy_home_node", "memfd_secret", "lsm_set_self_attr",
    ]

    /// Refused with ENOSYS rather than EPERM: libc probes these and falls back to an older
    /// call that the filter *can* inspect (glibc tries clone3 before clone on every thread).
    public static let enosysFallback: Set<String> = ["clone3"]

    /// Answered by the supervisor instead of the kernel, and not reported: `sysinfo` tells
    /// every caller the host's load averages, free memory and process count, which move with
    /// whatever held-out sandboxes do (the same counters `/proc` covers inside). The
    /// supervisor writes constants matching the sandbox's `/proc/meminfo`, `/proc/uptime` and
    /// `/proc/loadavg` (total memory real, all of it free, no load, one process), which is
    /// what glibc's `sysconf(_SC_PHYS_PAGES)` and friends need.
    public static let emulated: Set<String> = ["sysinfo", "statfs", "fstatfs"]
    /// The calls that make a symbolic link or give one a new name (`seccomp.watch_links`
    /// watches them).
    public static let linkCalls: Set<String> = ["symlink", "symlinkat", "link", "linkat", "rename", "renameat", "renameat2"]

    /// Allowed only with the argument rules in `ArgumentRules` (the filter inspects them).
    public static let conditional: Set<String> = ["clone", "ioctl", "personality", "ptrace", "socket", "socketpair",
                                                  "fadvise64", "preadv2", "pwritev2", "getsockopt", "setsockopt", "fcntl", "statx",
                                                  "inotify_add_watch"]

    /// Allowed with argument rules too, where a policy allows them (`prctl` by option).
    public static let ruledWhenAllowed: Set<String> = ["prctl"]

    /// Ways to ask the kernel whether a page of a file is in the page cache, or to evict one.
    /// Sandboxes share the page cache of every file they can all read (/usr, the runtime),
    /// so a held-out task could leave a pattern of resident pages that later untrusted code
    /// reads back. Left out of `defaultAllow` (refused with the default ENOSYS and reported):
    /// `mincore` (residency of mapped pages), `cachestat` (cached/evicted counts of a
    /// range), `readahead`, the AIO family (an iocb's RWF_NOWAIT is in memory the filter
    /// cannot read). Allowed only in their harmless forms (`ArgumentRules`): `fadvise64`
    /// without WILLNEED/DONTNEED (which fill and evict), `preadv2`/`pwritev2` without
    /// RWF_NOWAIT (which fails with EAGAIN exactly when a page is not cached). Plain read
    /// timing remains: the supervisor evicts what held-out sandboxes could read
    /// (`PageCacheEviction`).
    public static let pageCacheOracles: [String] = [
        "mincore", "cachestat", "readahead", "io_setup", "io_destroy", "io_submit",
        "io_getevents", "io_pgetevents", "io_cancel",
    ]

    /// The `default` profile: what ordinary programs (shells, coreutils, Python, compilers,
    /// git) need, modelled on the container runtimes' default profiles minus `hardDenied`.
    public static let defaultAllow: [String] = [
        // file descriptors and file I/O
        "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev",
        "open", "openat", "openat2", "creat", "close", "close_range",
        "lseek", "dup", "dup2", "dup3", "pipe", "pipe2", "fcntl", "flock", "fsync", "fdatasync",
        "sync", "syncfs", "sync_file_range", "truncate", "ftruncate", "fallocate",
        "copy_file_range", "sendfile", "splice", "tee", "vmsplice",
        // metadata and directories
        "stat", "fstat", "lstat", "newfstatat", "access",
        "faccessat", "faccessat2", "readlink", "readlinkat", "getdents", "getdents64", "mkdir",
        "mkdirat", "rmdir", "unlink", "unlinkat", "rename", "renameat", "renameat2", "link",
        "linkat", "symlink", "symlinkat", "chmod", "fchmod", "fchmodat", "fchmodat2", "chown",
        "fchown", "lchown", "fchownat", "utime", "utimes", "utimensat", "futimesat", "getcwd",
        "chdir", "fchdir", "umask", "mknod", "mknodat", "getxattr", "lgetxattr", "fgetxattr",
        "listxattr", "llistxattr", "flistxattr", "setxattr", "lsetxattr", "fsetxattr",
        "removexattr", "lremovexattr", "fremovexattr", "getxattrat", "listxattrat",
        "setxattrat", "removexattrat", "file_getattr", "file_setattr",
        // event and wait primitives
        "inotify_init", "inotify_init1", "inotify_rm_watch",
        "memfd_create", "eventfd", "eventfd2", "signalfd", "signalfd4", "timerfd_create",
        "timerfd_settime", "timerfd_gettime", "epoll_create", "epoll_create1", "epoll_ctl",
        "epoll_wait", "epoll_pwait", "epoll_pwait2", "poll", "ppoll", "select", "pselect6",
        // memory
        "mmap", "munmap", "mprotect", "mremap", "msync", "madvise", "brk", "mlock",
        "mlock2", "munlock", "mlockall", "munlockall", "membarrier", "pkey_mprotect",
        "pkey_alloc", "pkey_free", "get_mempolicy", "remap_file_pages", "map_shadow_stack",
        "mseal",
        // processes, threads, signals
        "fork", "vfork", "execve", "execveat", "exit", "exit_group", "wait4", "waitid", "kill",
        "tkill", "tgkill", "rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending",
        "rt_sigtimedwait", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "rt_sigsuspend",
        "sigaltstack", "pause", "pidfd_send_signal", "restart_syscall",
        "set_tid_address", "set_robust_list", "get_robust_list", "futex", "futex_waitv",
        "futex_wake", "futex_wait", "futex_requeue", "rseq", "arch_prctl", "prctl", "seccomp",
        "landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
        // identity (changing it needs capabilities the payload does not have)
        "getpid", "getppid", "gettid", "getuid", "geteuid", "getgid", "getegid", "getgroups",
        "getresuid", "getresgid", "getpgid", "getpgrp", "getsid", "setpgid", "setsid",
        "setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups",
        "setfsuid", "setfsgid", "capget", "capset",
        // scheduling, time, resources
        // Not sched_setaffinity: pinning a process to one CPU is what makes the kernel's
        // per-CPU counter batches (inode numbers) readable exactly; refused and reported.
        "sched_yield", "sched_getaffinity", "sched_getparam",
        "sched_setparam", "sched_getscheduler", "sched_setscheduler",
        "sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval",
        "sched_getattr", "sched_setattr", "getpriority", "setpriority", "ioprio_get",
        "ioprio_set", "nanosleep", "clock_nanosleep", "clock_gettime", "clock_getres",
        "gettimeofday", "time", "times", "getrusage", "getrlimit", "setrlimit", "prlimit64",
        "uname", "getrandom", "alarm", "getitimer", "setitimer", "timer_create",
        "timer_settime", "timer_gettime", "timer_getoverrun", "timer_delete", "getcpu",
        // System V and POSIX IPC (private to the sandbox's IPC namespace)
        "shmget", "shmat", "shmctl", "shmdt", "semget", "semop", "semctl", "semtimedop",
        "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend",
        "mq_timedreceive", "mq_notify", "mq_getsetattr",
        // sockets (the network namespace decides what they can reach)
        "bind", "listen", "accept", "accept4", "connect", "getsockname",
        "getpeername", "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg",
        "shutdown", "setsockopt", "getsockopt",
    ]
}

/// Argument-level rules for `SyscallProfile.conditional`.
public enum ArgumentRules {
    /// clone(2) flags that would create namespaces (CLONE_NEWNS … CLONE_NEWTIME). A clone
    /// carrying any of them is refused with EPERM.
    ///
    /// CLONE_PIDFD is refused with them, as `pidfd_open` is left out of `defaultAllow`: on
    /// current kernels a pidfd's inode number is the host-wide count of processes created, a
    /// counter a held-out task could move and a later sandbox read (found by a review).
    public static let namespaceFlags: UInt64 =
        0x0000_1000  // CLONE_PIDFD
        | 0x0000_0080  // CLONE_NEWTIME
        | 0x0002_0000  // CLONE_NEWNS
        | 0x0200_0000  // CLONE_NEWCGROUP
        | 0x0400_0000  // CLONE_NEWUTS
        | 0x0800_0000  // CLONE_NEWIPC
        | 0x1000_0000  // CLONE_NEWUSER
        | 0x2000_0000  // CLONE_NEWPID
        | 0x4000_0000  // CLONE_NEWNET

    /// mbind(2) flags that move pages already placed (MPOL_MF_MOVE, MPOL_MF_MOVE_ALL).
    /// `mbind` and `set_mempolicy` stay in `hardDenied` (EPERM), but a call without these
    /// flags is only a placement hint for the caller's own memory, and numpy's bundled
    /// OpenBLAS makes one per buffer when it loads (alloc_mmap, seen with `strace -k` under
    /// tau2-bench): it ignores the refusal. Such calls are refused unreported, like a clone3
    /// without namespace flags; a call that asks to move pages is reported.
    public static let mbindMoveFlags: UInt64 = 0x2 | 0x4

    /// The only ioctl requests that pass the filter; every other request is refused with
    /// EPERM and recorded. ioctl is the kernel's widest door (each driver and filesystem adds
    /// its own commands: line disciplines, namespace fds, filesystem flags, the seccomp
    /// notifier), so this is an allowlist of what shells, coreutils, Python, git, node/bun
    /// and Rust programs ask on a terminal, a pipe, a socket or a file. Notably refused:
    /// TIOCSTI/TIOCLINUX (push input into a terminal), TIOCSETD (line disciplines),
    /// TIOCSCTTY, NS_GET_* on namespace files, FS_IOC_GETFLAGS/SETFLAGS.
    public static let allowedIoctls: [(name: String, value: UInt32, reason: String)] = [
        ("TCGETS", 0x5401, "isatty(), tcgetattr(): every runtime asks whether stdio is a terminal"),
        ("TCSETS", 0x5402, "tcsetattr(TCSANOW): line editors (readline, node's REPL) set raw mode"),
        ("TCSETSW", 0x5403, "tcsetattr(TCSADRAIN)"),
        ("TCSETSF", 0x5404, "tcsetattr(TCSAFLUSH): password prompts, editors restoring the terminal"),
        ("TCGETS2", 0x802C_542A, "tcgetattr() in glibc ≥ 2.42 (termios2)"),
        ("TCSETS2", 0x402C_542B, "tcsetattr(TCSANOW) in glibc ≥ 2.42"),
        ("TCSETSW2", 0x402C_542C, "tcsetattr(TCSADRAIN) in glibc ≥ 2.42"),
        ("TCSETSF2", 0x402C_542D, "tcsetattr(TCSAFLUSH) in glibc ≥ 2.42"),
        ("TCSBRK", 0x5409, "tcdrain(): wait until output is written"),
        ("TCXONC", 0x540A, "tcflow()"),
        ("TCFLSH", 0x540B, "tcflush(): line editors drop pending input"),
        ("TIOCGPGRP", 0x540F, "tcgetpgrp(): shells' job control"),
        ("TIOCSPGRP", 0x5410, "tcsetpgrp(): shells' job control"),
        ("TIOCOUTQ", 0x5411, "bytes not yet sent (terminals, sockets: SIOCOUTQ)"),
        ("TIOCGWINSZ", 0x5413, "terminal size: ls, git's pager, progress bars, get_terminal_size()"),
        ("TIOCSWINSZ", 0x5414, "set the terminal size (terminal multiplexers, pexpect)"),
        ("FIONREAD", 0x541B, "bytes ready to read on a pipe, socket or terminal (SIOCINQ)"),
        ("FIONBIO", 0x5421, "non-blocking mode: Rust's set_nonblocking, libuv (node, bun)"),
        ("TIOCGSID", 0x5429, "tcgetsid()"),
        ("TIOCGPTN", 0x8004_5430, "openpty()/ptsname(): the pty number (and bun/node ask it of stdin at start)"),
        ("TIOCSPTLCK", 0x4004_5431, "openpty()/unlockpt(): unlock the new pty (the sandbox's own devpts)"),
        ("TIOCGPTPEER", 0x5441, "openpty(): open the pty's other end (glibc ≥ 2.27)"),
        ("TIOCSCTTY", 0x540E, "login_tty()/forkpty(): make the new pty the session's terminal (taking one from another session needs CAP_SYS_ADMIN)"),
        ("FIONCLEX", 0x5450, "clear close-on-exec (libuv)"),
        ("FIOCLEX", 0x5451, "set close-on-exec (libuv, older runtimes)"),
        ("FIOASYNC", 0x5452, "signal-driven I/O, as fcntl F_SETFL O_ASYNC with F_SETOWN: nginx's master refused it and spawned no worker"),
        ("FICLONE", 0x4004_9409, "reflink copy: cp --reflink=auto (coreutils ≥ 9 default) tries it first"),
        ("FICLONERANGE", 0x4020_940D, "reflink copy of a range"),
        ("SIOCGIFNAME", 0x8910, "interface name by index, in the sandbox's own network namespace"),
        ("SIOCGIFCONF", 0x8912, "list interfaces (own namespace: lo at most)"),
        ("SIOCGIFFLAGS", 0x8913, "interface flags (own namespace)"),
        ("SIOCGIFMTU", 0x8921, "interface MTU (own namespace)"),
        ("SIOCGIFINDEX", 0x8933, "if_nametoindex() (own namespace)"),
    ]

    /// personality(2) values allowed: PER_LINUX, PER_LINUX|ADDR_NO_RANDOMIZE, and the query.
    public static let allowedPersonalities: [UInt64] = [0, 0x0004_0000, 0xFFFF_FFFF]

    /// ptrace(2) requests allowed: PTRACE_TRACEME, which a program's anti-debugging check
    /// makes (Terminal-Bench 2.0's vulnerable-secret refuses to run when it fails; Docker's
    /// default profile allows ptrace), and PTRACE_DETACH. TRACEME makes the caller traceable by
    /// its parent and gives the caller nothing over any process. DETACH is the one request the
    /// parent can then make of it: let its own stopped tracee go on untraced, with a signal it
    /// could have sent with kill(2) (the exec server lets a command it runs go this way, as the
    /// sandbox's init, which no filter holds, does its payload). Every other request is refused
    /// here (EPERM, reported). `ptrace` stays in `SyscallProfile.hardDenied`: no policy can
    /// allow more of it.
    public static let allowedPtraceRequests: [UInt64] = [0, 17]

    /// prctl's PR_SET_SECCOMP option, allowed only when a policy allows `seccomp`.
    public static let prctlSetSeccomp: UInt32 = 22

    /// The only prctl options that pass (PR_SET_SECCOMP besides where a policy allows
    /// `seccomp`); every other is refused with EPERM and recorded. prctl is a multiplexer the
    /// kernel grows every few releases (core-scheduling cookies, KSM merging, syscall user
    /// dispatch, futex hashing, ...), so what passes is what runtimes ask at start-up and
    /// for their threads and children.
    public static let allowedPrctlOptions: [(name: String, value: UInt32, reason: String)] = [
        ("PR_SET_PDEATHSIG", 1, "a child's signal when its parent dies (node, Python's subprocess users, Rust's command runners)"),
        ("PR_GET_PDEATHSIG", 2, "its query"),
        ("PR_GET_DUMPABLE", 3, "whether the process may dump core / be traced"),
        ("PR_SET_DUMPABLE", 4, "Codex CLI and other agents turn it off for themselves"),
        ("PR_GET_KEEPCAPS", 7, "capability flags (the sandbox has no capabilities)"),
        ("PR_SET_KEEPCAPS", 8, "the same"),
        // 5, 6 and 9-12 are other architectures' (EINVAL on x86_64), 13-14 the legacy
        // timing mode: nothing behind them, and with them 1-16 is one range compare.
        ("PR_GET_UNALIGN", 5, "other architectures' (EINVAL here)"),
        ("PR_SET_UNALIGN", 6, "other architectures' (EINVAL here)"),
        ("PR_GET_FPEMU", 9, "other architectures' (EINVAL here)"),
        ("PR_SET_FPEMU", 10, "other architectures' (EINVAL here)"),
        ("PR_GET_FPEXC", 11, "other architectures' (EINVAL here)"),
        ("PR_SET_FPEXC", 12, "other architectures' (EINVAL here)"),
        ("PR_GET_TIMING", 13, "legacy: always statistical timing"),
        ("PR_SET_TIMING", 14, "legacy: only statistical timing is accepted"),
        ("PR_SET_NAME", 15, "thread names: Python, node, Rust, Go, Java"),
        ("PR_GET_NAME", 16, "thread names"),
        ("PR_GET_SECCOMP", 21, "whether a filter is on"),
        ("PR_CAPBSET_READ", 23, "libcap, capsh: read the bounding set"),
        ("PR_CAPBSET_DROP", 24, "sandboxing helpers drop bounding capabilities (EPERM without CAP_SETPCAP)"),
        ("PR_GET_TSC", 25, "whether rdtsc traps"),
        ("PR_SET_TSC", 26, "make rdtsc trap (narrows the caller's own timing)"),
        ("PR_GET_SECUREBITS", 27, "libcap"),
        ("PR_SET_SECUREBITS", 28, "libcap (EPERM without CAP_SETPCAP)"),
        ("PR_SET_TIMERSLACK", 29, "timer slack of the calling thread"),
        ("PR_GET_TIMERSLACK", 30, "its query"),
        ("PR_SET_CHILD_SUBREAPER", 36, "init-like programs (tini, dumb-init, test runners) reap orphans"),
        ("PR_GET_CHILD_SUBREAPER", 37, "its query"),
        ("PR_SET_NO_NEW_PRIVS", 38, "every sandboxing helper sets it (already set)"),
        ("PR_GET_NO_NEW_PRIVS", 39, "its query"),
        ("PR_GET_TID_ADDRESS", 40, "checkpoint and debugging tools"),
        ("PR_SET_THP_DISABLE", 41, "transparent huge pages off for the process (databases, JVMs)"),
        ("PR_GET_THP_DISABLE", 42, "its query"),
        ("PR_CAP_AMBIENT", 47, "libcap reads and clears the ambient set"),
        ("PR_GET_SPECULATION_CTRL", 52, "browsers and JITs ask about speculative-store mitigation"),
        ("PR_SET_SPECULATION_CTRL", 53, "and turn it on for themselves"),
        ("PR_SET_MDWE", 65, "memory-deny-write-execute for the process (systemd services)"),
        ("PR_GET_MDWE", 66, "its query"),
        ("PR_GET_SHADOW_STACK_STATUS", 74, "shadow stacks (glibc with CET)"),
        ("PR_SET_SHADOW_STACK_STATUS", 75, "the same"),
        ("PR_LOCK_SHADOW_STACK_STATUS", 76, "the same"),
        ("PR_GET_AUXV", 0x4155_5856, "the auxiliary vector"),
        ("PR_SET_VMA", 0x5356_4D41, "names of anonymous mappings (glibc ≥ 2.39, Go, JVMs)"),
        ("PR_SET_PTRACER", 0x5961_6D61, "Yama: who may trace the process (crash handlers; ptrace itself is refused)"),
    ]

    /// The only fcntl commands that pass; every other is refused with EPERM and recorded:
    /// what libc, Python, node, git and databases use on descriptors, locks and pipes and
    /// seals. Not passed: F_NOTIFY (dnotify: watch another process's accesses to a shared
    /// directory), the leases F_SETLEASE/F_GETLEASE (see another process open a file),
    /// F_CANCELLK, and whatever a later kernel adds.
    public static let allowedFcntlCommands: [(name: String, value: UInt32, reason: String)] = [
        ("F_DUPFD", 0, "dup to a number at or above"), ("F_GETFD", 1, "close-on-exec"), ("F_SETFD", 2, "close-on-exec"),
        ("F_GETFL", 3, "status flags"), ("F_SETFL", 4, "non-blocking, append"),
        ("F_GETLK", 5, "record locks (sqlite, git, pip)"), ("F_SETLK", 6, "record locks"), ("F_SETLKW", 7, "record locks"),
        ("F_SETOWN", 8, "SIGIO owner"), ("F_GETOWN", 9, "SIGIO owner"), ("F_SETSIG", 10, "SIGIO signal"), ("F_GETSIG", 11, "SIGIO signal"),
        ("F_SETOWN_EX", 15, "SIGIO owner"), ("F_GETOWN_EX", 16, "SIGIO owner"),
        ("F_OFD_GETLK", 36, "open-file-description locks (sqlite, glibc's lockf users)"), ("F_OFD_SETLK", 37, "the same"), ("F_OFD_SETLKW", 38, "the same"),
        ("F_DUPFD_QUERY", 1027, "whether two descriptors share a file"), ("F_CREATED_QUERY", 1028, "whether an open created the file"),
        ("F_DUPFD_CLOEXEC", 1030, "dup with close-on-exec: everywhere"),
        ("F_SETPIPE_SZ", 1031, "pipe buffer size (node, Python's subprocess)"), ("F_GETPIPE_SZ", 1032, "its query"),
        ("F_ADD_SEALS", 1033, "memfd seals"), ("F_GET_SEALS", 1034, "memfd seals"),
        ("F_GET_RW_HINT", 1035, "write-life hints"), ("F_SET_RW_HINT", 1036, "write-life hints"),
        ("F_GET_FILE_RW_HINT", 1037, "write-life hints"), ("F_SET_FILE_RW_HINT", 1038, "write-life hints"),
    ]

    /// posix_fadvise advice allowed (argument 3 of fadvise64 on x86_64): NORMAL, RANDOM,
    /// SEQUENTIAL, NOREUSE. WILLNEED (3) fills the page cache, DONTNEED (4) evicts from it.
    public static let allowedFadvice: [UInt64] = [0, 1, 2, 5]

    /// RWF_NOWAIT: a read that fails instead of waiting for a page not in the cache.
    public static let rwfNowait: UInt64 = 0x8

    /// STATX_MNT_ID_UNIQUE (Linux 6.8): statx(2) then reports a mount's 64-bit id, which one
    /// host-wide counter hands out to every mount made anywhere (each sandbox's dozens, and
    /// every copy of a mount tree), never reused. Read from inside two sandboxes launched one
    /// after the other it was 69 apart on this host; a held-out agent.py that chose whether its
    /// task's verifier ran at all (by timing out while busy) moved it by a verifier's mounts, a
    /// bit per task a later train sandbox could count. A statx asking for it is refused with
    /// EPERM; every other mask bit passes (STATX_MNT_ID, 0x1000, is the reused small id that
    /// /proc/self/mountinfo shows).
    public static let statxUniqueMountID: UInt64 = 0x4000

    /// IN_MOVED_FROM | IN_MOVED_TO: inotify pairs the two halves of a rename with a cookie
    /// from one host-wide counter that every rename on the host moves (fsnotify_get_cookie),
    /// watched or not. A sandbox that renamed 100,000 times moved the cookie the next sandbox
    /// read by 100,031: a held-out agent.py's chosen count, read exactly. A watch
    /// asking for either event is refused with EPERM and recorded; watches for changes,
    /// creation, deletion, attributes and a watched file's own move (no cookie) pass, so
    /// `tail -f` still follows a file, while a watcher that tracks renames (libuv's fs.watch,
    /// Python's watchdog) gets the refusal.
    public static let inotifyMoveEvents: UInt64 = 0x40 | 0x80

    /// getsockopt(2) options allowed at level SOL_SOCKET, an allowlist: every other one is
    /// refused. Several read kernel-wide state: SO_COOKIE (57) numbers every socket from one
    /// counter, SO_NETNS_COOKIE (71) every network namespace (a held-out task left its
    /// instruction's hash in the first and a later train task read it back, ~33 bits per
    /// gate); SO_PEERPIDFD (77, Linux 6.5) hands out a pidfd whose inode number
    /// counts every process and thread created anywhere (6.5 bits per gate decoded);
    /// SO_INCOMING_NAPI_ID (56), SO_INCOMING_CPU (49) and SO_MEMINFO (55) name host queues,
    /// CPUs and memory. A list of refusals had to grow with each one found, and new options
    /// come with new kernels, so what passes is the options of Linux 2.6.32 and before that
    /// describe the socket itself, 0-39: DEBUG, REUSEADDR, TYPE, ERROR, DONTROUTE, BROADCAST,
    /// SNDBUF, RCVBUF, KEEPALIVE, OOBINLINE, NO_CHECK, PRIORITY, LINGER, BSDCOMPAT, REUSEPORT,
    /// PASSCRED, PEERCRED, RCVLOWAT, SNDLOWAT, RCVTIMEO, SNDTIMEO, the security and filter
    /// options, PEERNAME, TIMESTAMP, ACCEPTCONN, PEERSEC, the buffer overrides, PASSSEC,
    /// TIMESTAMPNS, MARK, TIMESTAMPING, PROTOCOL, DOMAIN (0 is no option: the kernel answers
    /// ENOPROTOOPT). None of them reads a counter or another process. The kernel reads level
    /// and name as 32-bit ints, and so does the filter.
    ///
    /// setsockopt(2) at SOL_SOCKET passes the same options: SO_PASSPIDFD (76, Linux 6.5) makes
    /// every message a Unix socket receives carry a pidfd of its sender (SCM_PIDFD), the same
    /// host-wide serial SO_PEERPIDFD handed out (a sandbox with no network read it, 5 apart
    /// from one launch to the next); SO_INCOMING_CPU, SO_ATTACH_REUSEPORT_*, SO_ZEROCOPY, the
    /// busy-poll and pacing options and whatever a later kernel adds reach per-host queues.
    public static let solSocket: UInt32 = 1
    public static let allowedSocketOptionRanges: [ClosedRange<UInt32>] = [0...39]
    public static var allowedSocketOptions: [UInt32] { allowedSocketOptionRanges.flatMap { Array($0) } }

    /// Socket address families allowed: AF_UNIX, AF_INET, AF_INET6, and AF_NETLINK only with
    /// protocol NETLINK_ROUTE (what getifaddrs and `ip` use; audit, netfilter, uevent and
    /// the other netlink families reach kernel state no payload needs).
    public static let allowedSocketFamilies: [UInt64] = [1, 2, 10]
    /// socket(2) protocols allowed with those families: the default (0), ICMP and ICMPv6 (ping
    /// sockets), TCP, UDP and MPTCP (built into the kernel, Go's listeners try it). Any other
    /// (SCTP, DCCP, UDP-Lite, ...) is refused and recorded: on a kernel with loadable modules,
    /// asking for a protocol the kernel lacks loads its module, for every sandbox after and
    /// with a module's attack surface, and shows in /proc/net/protocols (a review's note).
    /// The kernel reads the protocol as an int, and so does the filter.
    public static let allowedSocketProtocols: [UInt32] = [0, 1, 6, 17, 58, 262]
    public static let netlinkFamily: UInt64 = 16
    public static let netlinkRoute: UInt64 = 0

    /// socketpair(2) families allowed: AF_UNIX only (the only family Linux implements it for
    /// is AF_UNIX anyway; anything else is a probe).
    public static let allowedSocketpairFamilies: [UInt64] = [1]

    /// Masked-equality rules `(value & mask) == match` over the low 32 bits whose union is
    /// every 32-bit value except `excluded`.
    ///
    /// libseccomp cannot combine an unconditional allow with a conditional refusal for the
    /// same syscall, cannot AND two comparisons on one argument, and its ordered comparisons
    /// consult the upper 32 bits — which the kernel ignores for ioctl's `unsigned int`
    /// request, so `request > X` would admit TIOCSTI with garbage in the high word. A set of
    /// prefix classes compared under a 32-bit mask has none of those problems.
    public static func complementPrefixes(excluding excluded: [UInt32]) -> [(mask: UInt32, match: UInt32)] {
        var rules: [(mask: UInt32, match: UInt32)] = []
        func cover(prefix: UInt32, depth: Int) {
            let mask: UInt32 = depth == 0 ? 0 : ~UInt32(0) << UInt32(32 - depth)
            let hits = excluded.filter { $0 & mask == prefix }
            if hits.isEmpty {
                rules.append((mask, prefix))
                return
            }
            if depth == 32 { return }  // an excluded value itself
            let bit = UInt32(1) << UInt32(31 - depth)
            cover(prefix: prefix, depth: depth + 1)
            cover(prefix: prefix | bit, depth: depth + 1)
        }
        cover(prefix: 0, depth: 0)
        return rules
    }
}
