// The fork->exec window of autoharness sandboxes. See ahl_launch.h for the process layout.
//
// Everything here runs in the monitor, init or the payload: single-threaded processes that
// are either the launcher (`autoharness-launch`, which has no C library) or a fork of the
// multi-threaded supervisor. So no C library function is called: system calls go through
// sys.h, and the only other functions used are memcpy, memset, strlen and their kin (the
// launcher brings its own). No malloc, no stdio, no locks. Every failure is reported as
// (stage, errno) over the report socket and ends the child with status 125.
#include "launch_internal.h"

int ahl_errno;

// scripts/bench-layers only: a launcher built with -DAHL_BENCH_LAYERS leaves out the security
// layers named in /run/autoharness-bench-layers (read by the monitor, and only if root owns
// it and no one else can write it), to measure what each costs per launch. The launcher built
// for use (scripts/build-release, swift build) has none of this: every layer below is
// unconditional there (LauncherTests checks the binaries for the switch's name).
#ifdef AHL_BENCH_LAYERS
int ahl_layers_off;
static void read_layers_off(void) {
    int f = sys_open("/run/autoharness-bench-layers", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (f < 0) return;
    struct stat st;
    char b[64];
    ssize_t k = sys_fstat(f, &st) == 0 && st.st_uid == 0 && (st.st_mode & 022) == 0 ? sys_read(f, b, sizeof b - 1) : -1;
    sys_close(f);
    b[k > 0 ? k : 0] = 0;
    static const struct { const char *name; int bit; } names[] = {
        {"covers", LAYER_COVERS}, {"seccomp", LAYER_SECCOMP}, {"lock-mounts", LAYER_LOCK_MOUNTS},
        {"landlock", LAYER_LANDLOCK}, {"verify-caps", LAYER_VERIFY_CAPS}};
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++) {
        size_t n = strlen(names[i].name);
        for (const char *q = b; *q; q++)
            if (strncmp(q, names[i].name, n) == 0) { ahl_layers_off |= names[i].bit; break; }
    }
}
#endif

// ---------------------------------------------------------------------------------------
// Small async-signal-safe helpers

static void reset_signal_dispositions(void) {
    // Handlers installed by the Swift runtime must not survive into the children, and an
    // ignored SIGPIPE would be inherited across exec by the payload.
    for (int s = 1; s <= 64; s++) {
        if (s == SIGKILL || s == SIGSTOP) continue;
        (void)sys_sigaction_default(s);
    }
}

/// Closes every descriptor except those in keep[0..n) (n <= 16).
static void close_all_except(const int *keep, int n) {
    int k[16];
    int m = 0;
    for (int i = 0; i < n && m < 16; i++)
        if (keep[i] >= 0) k[m++] = keep[i];
    for (int i = 1; i < m; i++) {  // insertion sort, tiny n
        int v = k[i], j = i - 1;
        while (j >= 0 && k[j] > v) { k[j + 1] = k[j]; j--; }
        k[j + 1] = v;
    }
    unsigned int lo = 0;
    for (int i = 0; i < m; i++) {
        if ((unsigned)k[i] > lo) (void)sys_close_range(lo, (unsigned)k[i] - 1, 0);
        lo = (unsigned)k[i] + 1;
    }
    (void)sys_close_range(lo, ~0U, 0);
}

static size_t str_len(const char *s) { return s ? strlen(s) : 0; }

/// close() that leaves ahl_errno as the failure being reported.
void ahl_close_keep_errno(int fd) {
    int s = ahl_errno;
    sys_close(fd);
    ahl_errno = s;
}

// ---------------------------------------------------------------------------------------
// The tree every sandbox clones (supervisor side, once per process)

int ahl_build_shared(int *masks_out) {
    *masks_out = -1;
    int masks = -1, procfd = -1;
    int ok = (procfd = sys_open("/proc", O_PATH | O_DIRECTORY | O_CLOEXEC)) >= 0 &&
             (masks = ahl_new_fs("tmpfs", 1 << 20, 0755, AHL_SAFE | MOUNT_ATTR_NOEXEC)) >= 0 && ahl_write_masks(masks, procfd) == 0;
    // Older kernels refuse to clone from a mount that is attached nowhere (EINVAL): then each
    // sandbox builds its own, as before.
    int probe = ok ? sys_open_tree(masks, "empty", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC) : -1;
    ok = probe >= 0;
    int e = ok ? 0 : ahl_errno ? ahl_errno : EIO;
    if (probe >= 0) sys_close(probe);
    if (procfd >= 0) sys_close(procfd);
    if (!ok) {
        if (masks >= 0) sys_close(masks);
        return e;
    }
    *masks_out = masks;
    return 0;
}

// --- parts made ahead of time (SandboxPartsPool) ------------------------------------------

int ahl_park(void *parent) {
    // Dies with the thread that made it: a supervisor that exits or is killed between the clone
    // and the kill would otherwise leave it parked for ever (holding the descriptors it shares).
    ahl_raw6(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0, 0);
    if (ahl_raw6(SYS_getppid, 0, 0, 0, 0, 0, 0) != (long)(intptr_t)parent) ahl_raw6(SYS_exit, 0, 0, 0, 0, 0, 0);
    for (;;) ahl_raw6(SYS_pause, 0, 0, 0, 0, 0, 0);
}

int ahl_build_dev(int *dev_out) {
    ahl_errno = 0;
    *dev_out = ahl_own_dev();
    return *dev_out >= 0 ? 0 : ahl_errno ? ahl_errno : EIO;
}

// ---------------------------------------------------------------------------------------
// The payload (pid 2)

/// A sandbox built ahead (plan.hold): everything is in place but the exec, and seccomp when
/// hold is 1. Says so, then waits for the supervisor's go-ahead on the report socket (nobody
/// else reads it). Hold 1 waits before seccomp, so the wait never depends on what the
/// policy's filter allows; hold 2 after it, for filters that allow recvfrom. No untrusted
/// code has run yet. EOF or any other byte: the supervisor dropped the sandbox.
static void hold(int rep) {
    ahl_send_msg(rep, AHL_MSG_HELD, 0, 0, 0, 0);
    char go = 0;
    ssize_t n;
    do {
        n = sys_recv(rep, &go, 1, 0);  // the call hold 2 relies on the filter allowing
    } while (n < 0 && ahl_errno == EINTR);
    if (n != 1 || go != AHL_CTL_RUN) {
        if (n >= 0) ahl_errno = ECANCELED;
        ahl_fail(rep, AHL_STAGE_HOLD, 0);
    }
}

__attribute__((noreturn)) static void payload_main(const struct ahl_plan *p, int rep) {
    if (sys_setsid() < 0) ahl_fail(rep, AHL_STAGE_STDIO, 0);
    for (int i = 0; i < 3; i++)
        if (p->stdio[i] >= 0 && p->stdio[i] != i && sys_dup3(p->stdio[i], i, 0) < 0) ahl_fail(rep, AHL_STAGE_STDIO, i);
    int keep[4] = {0, 1, 2, rep};
    close_all_except(keep, 4);

    for (uint32_t i = 0; i < p->n_rlimits; i++) {
        uint64_t rl[2] = {p->rlimits[i].soft, p->rlimits[i].hard};
        if (sys_prlimit(p->rlimits[i].resource, rl) < 0) ahl_fail(rep, AHL_STAGE_RLIMIT, (int32_t)i);
    }
    if (LAYER_ON(LAYER_LOCK_MOUNTS)) ahl_lock_mounts(p, rep);
    if (sys_chdir(p->cwd) < 0) ahl_fail(rep, AHL_STAGE_CHDIR, 0);

    if (sys_prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) ahl_fail(rep, AHL_STAGE_NO_NEW_PRIVS, 0);
    // Every capability goes, but on a task's image the few a container's root installs
    // packages with (keep_caps), which count only in the payload's own user namespace: over
    // the image's files and its own processes, never over a mount, the network or the host.
    if (ahl_keep_caps(p->cap_last, p->keep_caps) < 0) ahl_fail(rep, AHL_STAGE_DROP_CAPS, 0);
    if (LAYER_ON(LAYER_VERIFY_CAPS) && !ahl_caps_are(p->cap_last, p->keep_caps)) { ahl_errno = EPERM; ahl_fail(rep, AHL_STAGE_VERIFY_CAPS, 0); }
    // After no-new-privs (which landlock_restrict_self requires without CAP_SYS_ADMIN), and
    // before seccomp, so the filter never has to allow the ruleset calls for the setup.
    if (LAYER_ON(LAYER_LANDLOCK)) ahl_apply_landlock(p, rep);

    uint64_t none = 0;
    (void)sys_sigprocmask(SIG_SETMASK, &none, NULL);

    if (p->hold == 1) hold(rep);

    // Last before exec, so the filter never has to allow the setup above.
    if (p->bpf_len && LAYER_ON(LAYER_SECCOMP)) {
        struct sock_fprog prog = {(unsigned short)p->bpf_len, (struct sock_filter *)p->bpf};
        long lfd = AHL_SYS3(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER | p->seccomp_flags, &prog);
        if (lfd < 0) ahl_fail(rep, AHL_STAGE_SECCOMP, 0);
        if (ahl_send_fd(rep, (int)lfd, AHL_MSG_LISTENER) < 0) ahl_fail(rep, AHL_STAGE_SEND_LISTENER, 0);
        sys_close((int)lfd);
    }
    // The filter allows the wait's recv (the supervisor checked): the filter's load is done
    // before the go-ahead rather than after it.
    if (p->hold == 2) hold(rep);

    const char *file = p->argv[0];
    int err = ENOENT;
    if (strchr(file, '/')) {
        sys_execve(file, (char *const *)p->argv, (char *const *)p->envp);
        err = ahl_errno;
    } else {
        int saw_eacces = 0;
        const char *sp = p->search_path ? p->search_path : "/usr/bin:/bin";
        char buf[4096];
        size_t fl = strlen(file);
        while (1) {
            const char *e = strchr(sp, ':');
            size_t dl = e ? (size_t)(e - sp) : strlen(sp);
            if (dl + fl + 2 <= sizeof buf) {
                size_t k = 0;
                if (dl == 0) buf[k++] = '.';
                else { memcpy(buf, sp, dl); k = dl; }
                buf[k++] = '/';
                memcpy(buf + k, file, fl + 1);
                sys_execve(buf, (char *const *)p->argv, (char *const *)p->envp);
                if (ahl_errno == EACCES) saw_eacces = 1;
                else if (ahl_errno != ENOENT && ahl_errno != ENOTDIR) { err = ahl_errno; saw_eacces = 0; break; }
            }
            if (!e) break;
            sp = e + 1;
        }
        if (saw_eacces) err = EACCES;
    }
    ahl_send_msg(rep, AHL_MSG_EXEC_ERROR, 0, err, 0, 0);
    sys_exit(err == ENOENT || err == ENOTDIR ? 127 : 126);
}

// ---------------------------------------------------------------------------------------
// init (pid 1)

__attribute__((noreturn)) static void init_main(const struct ahl_plan *p, int rep, int life, const int *trees, int dev_tree, const int *device_trees) {
    // If the monitor dies, so does the sandbox (init's death kills the namespace). The pipe
    // below covers the window before this prctl takes effect.
    (void)sys_prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);

    ahl_setup_filesystem(p, rep, trees, dev_tree, device_trees);
    for (unsigned i = 0; i < AHL_DEVICE_COUNT; i++)
        if (device_trees[i] >= 0) sys_close(device_trees[i]);
    if (dev_tree >= 0) sys_close(dev_tree);
    if (p->masks_fd >= 0) sys_close(p->masks_fd);
    if (p->hostname && sys_sethostname(p->hostname, strlen(p->hostname)) < 0) ahl_fail(rep, AHL_STAGE_HOSTNAME, 0);
    // The monitor brought lo up in the network namespace (net.c); init has no say over it.

    uint64_t all = ~0ull;
    int sfd = sys_signalfd(&all, SFD_CLOEXEC);
    if (sfd < 0) ahl_fail(rep, AHL_STAGE_SIGNALFD, 0);

    pid_t child = sys_fork();  // async-signal-safe: no atfork handlers in a forked child
    if (child < 0) ahl_fail(rep, AHL_STAGE_FORK_PAYLOAD, 0);
    if (child == 0) {
        sys_close(sfd);
        sys_close(life);
        payload_main(p, rep);
    }
    ahl_send_msg(rep, AHL_MSG_STARTED, 0, 0, child, 0);

    // init keeps nothing the payload could borrow: not dumpable (so its memory cannot be
    // opened through /proc/1/mem) before anything else, then no capabilities and no new
    // privileges. If that cannot be done, the sandbox does not run.
    if (sys_prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || sys_prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
        ahl_drop_all_caps(p->cap_last, 1) < 0) {
        (void)sys_kill(child, SIGKILL);
        ahl_fail(rep, AHL_STAGE_DROP_CAPS, -1);
    }

    // keep_survivors: once the payload has exited, the processes it started and left running
    // (a server a task's tests query) go on until none is left, or until the supervisor has
    // the monitor kill init. Signals are no longer forwarded then: the payload's pid may
    // already name one of them.
    int payload_done = 0, payload_status = 0, reported = 0;
    struct pollfd fds[2] = {{sfd, POLLIN, 0}, {life, POLLIN, 0}};
    for (;;) {
        int n = sys_ppoll(fds, 2);
        if (n < 0) {
            if (ahl_errno == EINTR) continue;
            sys_exit(AHL_SETUP_FAILED);
        }
        if (fds[1].revents) sys_exit(AHL_SETUP_FAILED);  // monitor gone: take the sandbox down
        if (fds[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (sys_read(sfd, &si, sizeof si) != sizeof si) continue;
            if (si.ssi_signo == SIGCHLD) {
                int st;
                pid_t w;
                while ((w = sys_wait4(-1, &st, WNOHANG | __WALL)) > 0) {
                    // A child that made init its tracer (PTRACE_TRACEME, as an anti-debugging
                    // check does) reports each signal it gets as a stop, which is not its end:
                    // it goes on untraced with that signal (the trap after an exec dropped).
                    if (WIFSTOPPED(st)) {
                        int sig = WSTOPSIG(st);
                        (void)AHL_SYS4(SYS_ptrace, 17 /* PTRACE_DETACH */, w, 0, sig == SIGTRAP ? 0 : sig);
                        continue;
                    }
                    if (w == child) {
                        payload_done = 1;
                        payload_status = st;
                    }
                }
                if (!payload_done) continue;
                // w < 0 (ECHILD): init has no child left, so nothing else runs in the namespace
                // (every process in it descends from init, and orphans become its children).
                int alone = w < 0;
                if (!reported) {
                    ahl_send_msg(rep, AHL_MSG_EXIT, 0, 0, p->keep_survivors && !alone ? 1 : 0, payload_status);
                    reported = 1;
                }
                // Exiting kills every process left in the namespace, including daemonised
                // grandchildren.
                if (!p->keep_survivors || alone)
                    sys_exit(WIFEXITED(payload_status) ? WEXITSTATUS(payload_status) : 128 + WTERMSIG(payload_status));
            } else if (!payload_done) {
                (void)sys_kill(child, (int)si.ssi_signo);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// monitor (host pid namespace)

/// The caller's settings (`ahl_settings`), for the monitor and so for everything it starts.
/// Each is the caller's where the kernel lets this process take it; where it does not (raising
/// a limit needs CAP_SYS_RESOURCE, a higher priority CAP_SYS_NICE, which a container may lack),
/// the monitor keeps its own, which is then the stricter one: a limit is lowered to the
/// caller's but never raised past this process's hard limit, a nice value or oom_score_adj
/// only goes up, a CPU mask only narrows. So the sandbox never gets more than its caller had.
static void take_settings(const struct ahl_settings *s) {
    if (!s->given) return;
    for (int r = 0; r < 16; r++) {
        uint64_t rl[2] = {s->soft[r], s->hard[r]};
        if (sys_prlimit(r, rl) == 0) continue;
        uint64_t cur[2];
        if (AHL_SYS4(SYS_prlimit64, 0, r, 0, cur) < 0) continue;  // a resource this kernel lacks
        if (rl[1] > cur[1]) rl[1] = cur[1];
        if (rl[0] > rl[1]) rl[0] = rl[1];
        (void)sys_prlimit(r, rl);
    }
    // Each refused only where it would give more than this process has (see above). The
    // policy first (SCHED_IDLE, BATCH, a real-time one), with the caller's nice value; where
    // that nice value is refused (lower than this process's), the policy alone.
    struct { uint32_t size, policy; uint64_t flags; int32_t nice; uint32_t priority; uint64_t runtime, deadline, period; } sa = {
        48, (uint32_t)s->sched_policy, s->sched_reset_on_fork ? 1u : 0u, s->nice, (uint32_t)s->sched_priority, 0, 0, 0};
    if (AHL_SYS3(SYS_sched_setattr, 0, &sa, 0) < 0) {
        sa.nice = 20 - (int32_t)AHL_SYS2(SYS_getpriority, PRIO_PROCESS, 0);
        (void)AHL_SYS3(SYS_sched_setattr, 0, &sa, 0);
    }
    (void)AHL_SYS3(SYS_setpriority, PRIO_PROCESS, 0, s->nice);
    (void)AHL_SYS3(SYS_ioprio_set, 1 /* IOPRIO_WHO_PROCESS */, 0, s->ioprio);
    (void)AHL_SYS3(SYS_sched_setaffinity, 0, sizeof s->affinity, s->affinity);
    char text[16], digits[12];
    int n = 0, d = 0, v = s->oom_score_adj < 0 ? -s->oom_score_adj : s->oom_score_adj;
    do { digits[d++] = (char)('0' + v % 10); v /= 10; } while (v && d < 11);
    if (s->oom_score_adj < 0) text[n++] = '-';
    while (d) text[n++] = digits[--d];
    int fd = sys_open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)sys_write(fd, text, (size_t)n);
        sys_close(fd);
    }
}

__attribute__((noreturn)) void ahl_monitor_main(const struct ahl_plan *p, int rep, int ctl, int32_t joined) {
    // A fork of the supervisor (no launcher) may copy a template build's owner mid-way.
    ahl_creator_uid = ahl_creator_gid = -1;
    reset_signal_dispositions();
#ifdef AHL_BENCH_LAYERS
    read_layers_off();
#endif
    take_settings(&p->settings);
    // Out of the caller's session: a terminal's ^C goes to the supervisor, which forwards it
    // exactly once, rather than to every process of the sandbox.
    (void)sys_setsid();
    // This process is a copy of the supervisor. /proc/PID/cmdline of the sandbox's init (our
    // child) is readable from inside without any ptrace check, so the supervisor's command
    // line (--var values, host paths) and environment are wiped from the copy.
    for (int i = 0; i < 2; i++)
        if (p->wipe_start[i] && p->wipe_end[i] > p->wipe_start[i])
            memset((void *)(uintptr_t)p->wipe_start[i], 0, (size_t)(p->wipe_end[i] - p->wipe_start[i]));
    (void)sys_prctl(PR_SET_NAME, (unsigned long)"sandbox-init", 0, 0, 0);
    ahl_enter_network_namespace(p, rep);

    // stdio 0-2 of the supervisor are inherited when the plan does not override them; the
    // shared masks tree is init's to clone from.
    int keep_all[13] = {0, 1, 2, rep, ctl, p->stdio[0], p->stdio[1], p->stdio[2], p->masks_fd, p->template_fd, p->dev_fd, p->userns_fd,
                        p->seed_fd};
    close_all_except(keep_all, 13);

    // Bind sources and device nodes are cloned now, as host root in the host's mount
    // namespace; init attaches the detached trees once the new root exists.
    int *trees = p->scratch_fds;
    int *device_trees = p->scratch_fds + p->n_mounts;
    // The template root, whole: its binds were cloned and checked when it was built.
    if (p->template_fd >= 0) {
        if (p->masks_fd < 0) { ahl_errno = EINVAL; ahl_fail(rep, AHL_STAGE_MOUNT_ROOT, 1); }
        ahl_root_clone = sys_open_tree(p->template_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH);
        if (ahl_root_clone < 0) ahl_fail(rep, AHL_STAGE_MOUNT_ROOT, 1);
        sys_close(p->template_fd);
    }
    for (uint32_t i = 0; i < p->n_mounts; i++) {
        trees[i] = -1;
        if (p->mounts[i].kind == AHL_MOUNT_BIND && !ahl_templated(&p->mounts[i]) && (trees[i] = ahl_open_source(&p->mounts[i])) < 0)
            ahl_fail(rep, AHL_STAGE_OPEN_SOURCE, (int32_t)i);
    }
    // /dev with nodes of its own; without CAP_MKNOD (or where an LSM refuses), binds of the
    // host's nodes instead.
    int dev_tree = p->dev_fd >= 0 ? p->dev_fd : ahl_own_dev();
    if (dev_tree < 0 && ahl_errno != EPERM && ahl_errno != EACCES) ahl_fail(rep, AHL_STAGE_MOUNT_DEV, -1);
    for (unsigned i = 0; i < AHL_DEVICE_COUNT; i++) {
        device_trees[i] = -1;
        if (dev_tree < 0 && (device_trees[i] = ahl_open_device(ahl_device_nodes[i])) < 0) ahl_fail(rep, AHL_STAGE_OPEN_DEVICE, (int32_t)i);
    }

    // Join the sandbox's cgroups before anything else is forked, so every process of the
    // sandbox is born inside them. A task moving itself ("0" into v1 `tasks` or v2
    // `cgroup.procs`) also skips the supervisor's lookup by pid. Done while still root on
    // the host (the cgroup files belong to host root). `joined`: the v2 entry clone3 already
    // placed this process in.
    if (p->cgroup_join) {
        for (int32_t i = 0; p->cgroup_join[i]; i++) {
            if (i == joined) continue;
            int f = sys_open(p->cgroup_join[i], O_WRONLY | O_CLOEXEC);
            if (f < 0 || sys_write(f, "0", 1) != 1) ahl_fail(rep, AHL_STAGE_JOIN_CGROUP, i);
            sys_close(f);
        }
    }

    // Host supplementary groups (e.g. gid 0) would otherwise stay attached to every
    // sandboxed process as unmapped-but-effective groups. Drop them while still privileged.
    // Raw syscalls for credentials: glibc's wrappers broadcast the change to every thread it
    // believes the process has, and after sys_fork() that list still names the supervisor's
    // threads, which do not exist here: the broadcast would wait for them forever. This
    // process is single-threaded; the kernel's per-thread credentials are exactly right.
    if (AHL_SYS2(SYS_setgroups, 0, 0) < 0) ahl_fail(rep, AHL_STAGE_SETGROUPS, 0);
    // The mount namespace the one below is copied from: the seed's two mounts rather than the
    // host's whole table (every path this process needs was opened above, as host root in the
    // host's namespace).
    if (p->seed_fd >= 0) {
        if (sys_setns(p->seed_fd, CLONE_NEWNS) < 0) ahl_fail(rep, AHL_STAGE_ENTER_SEED, 0);
        sys_close(p->seed_fd);
    }
    // Not the network: the monitor has made or entered it already (net.c).
    int ns = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS;
    // A user namespace made ahead of time for this sandbox has its id maps already (written
    // by the supervisor, as it would write them now): entered, it makes this process what
    // unsharing one and waiting for the maps would, and the namespaces below are its own.
    if (p->userns_fd >= 0) {
        if (sys_setns(p->userns_fd, CLONE_NEWUSER) < 0) ahl_fail(rep, AHL_STAGE_ENTER_USERNS, 0);
        sys_close(p->userns_fd);
    } else {
        ns |= CLONE_NEWUSER;
    }
    if (sys_unshare(ns) < 0) ahl_fail(rep, AHL_STAGE_UNSHARE, 0);
    ahl_send_msg(rep, AHL_MSG_UNSHARED, 0, 0, 0, 0);

    if (p->userns_fd < 0) {
        char go = 0;
        ssize_t n;
        do {
            n = sys_read(ctl, &go, 1);
        } while (n < 0 && ahl_errno == EINTR);
        if (n != 1 || go != AHL_CTL_GO) { ahl_errno = ECANCELED; ahl_fail(rep, AHL_STAGE_WAIT_MAPS, 0); }
    }

    if (AHL_SYS3(SYS_setresgid, p->gid, p->gid, p->gid) < 0 || AHL_SYS3(SYS_setresuid, p->uid, p->uid, p->uid) < 0)
        ahl_fail(rep, AHL_STAGE_SETID, 0);
    // After joining the sandbox cgroups, so they become its cgroup namespace root.
    if (sys_unshare(CLONE_NEWCGROUP) < 0) ahl_fail(rep, AHL_STAGE_UNSHARE_CGROUP, 0);

    // lo is up already (net.c).
    if (p->proxy_port) ahl_open_proxy_listener(p, rep);

    int life[2];
    if (sys_pipe2(life, O_CLOEXEC) < 0) ahl_fail(rep, AHL_STAGE_FORK_INIT, 0);
    pid_t init = sys_fork();
    if (init < 0) ahl_fail(rep, AHL_STAGE_FORK_INIT, 0);
    if (init == 0) {
        sys_close(life[1]);
        sys_close(ctl);
        init_main(p, rep, life[0], trees, dev_tree, device_trees);
    }
    sys_close(life[0]);
    // The detached bind and device trees are init's now; the monitor keeps none of them open
    // for the sandbox's lifetime.
    for (uint32_t i = 0; i < p->n_mounts; i++)
        if (trees[i] >= 0) sys_close(trees[i]);
    for (unsigned i = 0; i < AHL_DEVICE_COUNT; i++)
        if (device_trees[i] >= 0) sys_close(device_trees[i]);
    if (dev_tree >= 0) sys_close(dev_tree);
    if (p->masks_fd >= 0) sys_close(p->masks_fd);
    if (ahl_root_clone >= 0) sys_close(ahl_root_clone);
    ahl_send_msg(rep, AHL_MSG_INIT_PID, 0, 0, 0, init);

    int pfd = (int)AHL_SYS2(SYS_pidfd_open, init, 0);
    if (pfd < 0) {
        // Without it the monitor could not notice init's exit; never run unsupervised.
        (void)sys_kill(init, SIGKILL);
        ahl_fail(rep, AHL_STAGE_FORK_INIT, 0);
    }
    // Setup is over. From here the monitor only waits for init and relays signals to it
    // (same uid: no capability needed), so it keeps none: with every capability of the
    // sandbox's user namespace it could remount the sandbox's tree, and it lives where the
    // sandbox cannot see it, but it should not be worth taking over either.
    if (sys_prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0 || sys_prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
        ahl_drop_all_caps(p->cap_last, 1) < 0 || (LAYER_ON(LAYER_VERIFY_CAPS) && !ahl_caps_are(p->cap_last, 0))) {
        (void)sys_kill(init, SIGKILL);
        ahl_fail(rep, AHL_STAGE_DROP_CAPS, -2);
    }
    struct pollfd fds[2] = {{pfd, POLLIN, 0}, {ctl, POLLIN, 0}};
    int nfds = 2;
    for (;;) {
        int r = sys_ppoll(fds, (unsigned long)nfds);
        if (r < 0 && ahl_errno != EINTR) break;
        if (r <= 0) continue;
        if (fds[0].revents) break;
        if (nfds == 2 && fds[1].revents) {
            unsigned char buf[32];
            ssize_t k = sys_read(ctl, buf, sizeof buf);
            if (k <= 0) {
                // The supervisor is gone or gave up: the sandbox must not outlive it.
                (void)sys_kill(init, SIGKILL);
                nfds = 1;
                continue;
            }
            for (ssize_t i = 0; i < k; i++) {
                if (buf[i] == AHL_CTL_KILL) (void)sys_kill(init, SIGKILL);
                else if (buf[i] >= 1 && buf[i] < 65) (void)sys_kill(init, buf[i]);
            }
        }
    }
    int st = 0;
    while (sys_wait4(init, &st, 0) < 0 && ahl_errno == EINTR) {}
    sys_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
}

// ---------------------------------------------------------------------------------------
// The launcher executable (autoharness-launch): started by ahl_spawn_exec with the plan in a
// sealed memfd and its descriptors at the LAUNCHER_* numbers.

void ahl_exit(int status) { sys_exit(status); }

void *ahl_map_pages(size_t len) { return sys_mmap(len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1); }

int ahl_launcher_main(int argc, char **argv) {
    // The sockets arrive without close-on-exec (dup2 clears it); the payload keeps the report
    // socket until its exec and must not keep it past: it could speak for init.
    if (sys_fcntl(LAUNCHER_REPORT_FD, F_SETFD, FD_CLOEXEC) < 0 || sys_fcntl(LAUNCHER_CONTROL_FD, F_SETFD, FD_CLOEXEC) < 0)
        return AHL_SETUP_FAILED;
    struct stat st;
    if (sys_fstat(LAUNCHER_PLAN_FD, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size > (64 << 20)) {
        static const char msg[] = "autoharness-launch: started without a plan; it is run by autoharness, not by hand\n";
        (void)sys_write(2, msg, sizeof msg - 1);
        return AHL_SETUP_FAILED;
    }
    // The memfd is sealed against writes: mapping it is reading it.
    size_t size = (size_t)st.st_size;
    const uint8_t *bytes = sys_mmap(size, PROT_READ, MAP_PRIVATE, LAUNCHER_PLAN_FD);
    sys_close(LAUNCHER_PLAN_FD);
    struct ahl_plan plan;
    int e = bytes ? ahl_plan_unpack(bytes, size, &plan) : ahl_errno;
    if (e) {
        ahl_errno = e;
        ahl_fail(LAUNCHER_REPORT_FD, AHL_STAGE_EXEC_LAUNCHER, 1);
    }
    int32_t joined = argc > 1 && strcmp(argv[1], "into") == 0 ? plan.cgroup_into_join : -1;
    ahl_monitor_main(&plan, LAUNCHER_REPORT_FD, LAUNCHER_CONTROL_FD, joined);
}
