// The supervisor's side of a sandbox's start: see ahl_spawn.h. The sandbox's own processes
// run CSandboxLaunch's code (ahl_monitor_main), which calls no C library function.
#include "ahl_spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <pthread.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define SETUP_FAILED 125

static void send_msg(int fd, int32_t kind, int32_t stage, int32_t err, int32_t index, int64_t value) {
    struct ahl_msg m = {kind, stage, err, index, value};
    (void)send(fd, &m, sizeof m, MSG_NOSIGNAL);
}

ssize_t ahl_recv_msg(int report_fd, struct ahl_msg *msg, int *fd, int32_t *sender) {
    struct iovec iov = {msg, sizeof *msg};
    union {
        char buf[CMSG_SPACE(sizeof(int)) + CMSG_SPACE(sizeof(struct ucred))];
        struct cmsghdr align;
    } u;
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = u.buf;
    mh.msg_controllen = sizeof u.buf;
    *fd = -1;
    *sender = 0;
    ssize_t n;
    do {
        n = recvmsg(report_fd, &mh, MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) return n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) memcpy(fd, CMSG_DATA(c), sizeof(int));
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
            struct ucred cred;
            memcpy(&cred, CMSG_DATA(c), sizeof cred);
            *sender = cred.pid;
        }
    }
    return n;
}

// struct clone_args up to `cgroup` (CLONE_ARGS_SIZE_VER2, Linux 5.7), spelled out here:
// <linux/sched.h> and glibc's <sched.h> define the same flags and cannot both be included.
struct ahl_clone_args {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid, set_tid_size, cgroup;
};
#define AHL_CLONE_INTO_CGROUP 0x200000000ULL

/// A fork (no shared memory, SIGCHLD on exit) whose child starts inside the cgroup `dirfd`.
/// -1 with errno when the kernel cannot (ENOSYS before 5.3, E2BIG before 5.7) or will not.
/// Like _Fork, no atfork handlers run; unlike it, glibc's cached thread id in the child still
/// names the parent's thread, which the code below the fork never consults (raw syscalls
/// only, and the monitor's own forks refresh it).
static pid_t fork_into_cgroup(int dirfd) {
    struct ahl_clone_args a;
    memset(&a, 0, sizeof a);
    a.flags = AHL_CLONE_INTO_CGROUP;
    a.exit_signal = SIGCHLD;
    a.cgroup = (uint64_t)dirfd;
    return (pid_t)syscall(SYS_clone3, &a, sizeof a);
}

/// The report socket pair and the control socket pair: 0, or an errno value and nothing open.
static int open_channels(int rep[2], int ctl[2]) {
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, rep) < 0) return errno;
    // Each message carries its sender's pid, as this process sees it (SCM_CREDENTIALS): the
    // payload's own message names the payload even if it has ended by the time it is read.
    int one = 1;
    if (setsockopt(rep[0], SOL_SOCKET, SO_PASSCRED, &one, sizeof one) < 0) {
        int e = errno;
        close(rep[0]);
        close(rep[1]);
        return e;
    }
    // A socket rather than a pipe: the supervisor can send with MSG_NOSIGNAL after the
    // monitor is gone, and closing its end still reads as EOF here.
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl) < 0) {
        int e = errno;
        close(rep[0]);
        close(rep[1]);
        return e;
    }
    return 0;
}

/// After the fork: closes the child's ends and fills `out`, or closes ours too when no child
/// was made (`pid` < 0, `err` its errno). Returns 0 or `err`.
static int spawned(pid_t pid, int err, const int rep[2], const int ctl[2], int32_t joined, struct ahl_child *out) {
    close(rep[1]);
    close(ctl[0]);
    if (pid < 0) {
        close(rep[0]);
        close(ctl[1]);
        return err;
    }
    out->pid = pid;
    out->report_fd = rep[0];
    out->control_fd = ctl[1];
    out->born_in_cgroup = joined >= 0;
    return 0;
}

int ahl_spawn(const struct ahl_plan *plan, struct ahl_child *out) {
    int rep[2], ctl[2];
    int e = open_channels(rep, ctl);
    if (e) return e;
    // Signals stay blocked in the children until the payload's last step, so a handler the
    // runtime installed can never run in a half-built process.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    // _Fork: no atfork handlers run (the runtime's could take locks another thread holds).
    // Any clone3 failure falls back to the fork: the monitor's own write to cgroup.procs then
    // joins, or reports why it cannot.
    int32_t joined = -1;
    pid_t pid = -1;
    if (plan->cgroup_into_fd >= 0 && plan->cgroup_into_join >= 0) {
        pid = fork_into_cgroup(plan->cgroup_into_fd);
        if (pid >= 0) joined = plan->cgroup_into_join;
    }
    if (pid < 0) pid = _Fork();
    if (pid == 0) {
        close(rep[0]);
        close(ctl[1]);
        ahl_monitor_main(plan, rep[1], ctl[0], joined);
    }
    e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return spawned(pid, e, rep, ctl, joined, out);
}

// ---------------------------------------------------------------------------------------
// The launcher executable (autoharness-launch)
//
// The monitor, init and the payload used to be forks of the supervisor: each fork copied
// the page tables of a 100 MB process and the payload's exec tore them down again, about
// 2 ms of CPU per sandbox, none of it sandboxing. Started through the launcher, the monitor
// is a fresh small process running the same code (ahl_monitor_main), fed the plan as bytes.

/// The child between the fork and the launcher's exec: moves the descriptors to the numbers
/// the launcher expects (via copies above them, so no source is overwritten before it is
/// moved) and execs the launcher by its descriptor. Async-signal-safe only; with CLONE_VM it
/// runs on its own stack in the caller's memory, which it does not write.
struct exec_args {
    int launcher_fd, plan_fd, rep, ctl;
    int stdio[3];
    int netns, masks, template_root, dev, userns, seed;
    const char *mode;  // "into": clone3 already placed this process in the cgroup_into_join cgroup
};

static int exec_launcher(void *arg) {
    const struct exec_args *a = arg;
    enum { N = 12 };
    int src[N] = {a->plan_fd, a->rep, a->ctl, a->stdio[0], a->stdio[1], a->stdio[2], a->netns, a->masks, a->template_root,
                  a->dev, a->userns, a->seed};
    int dst[N] = {LAUNCHER_PLAN_FD, LAUNCHER_REPORT_FD, LAUNCHER_CONTROL_FD, LAUNCHER_STDIO_FD, LAUNCHER_STDIO_FD + 1,
                  LAUNCHER_STDIO_FD + 2, LAUNCHER_NETNS_FD, LAUNCHER_MASKS_FD, LAUNCHER_TEMPLATE_FD, LAUNCHER_DEV_FD,
                  LAUNCHER_USERNS_FD, LAUNCHER_SEED_FD};
    int tmp[N];
    // The launcher's own descriptor may be one of the target numbers too.
    int launcher = fcntl(a->launcher_fd, F_DUPFD_CLOEXEC, 64);
    if (launcher < 0) goto failed;
    for (int i = 0; i < N; i++) {
        tmp[i] = src[i] < 0 ? -1 : fcntl(src[i], F_DUPFD_CLOEXEC, 64);
        if (src[i] >= 0 && tmp[i] < 0) goto failed;
    }
    for (int i = 0; i < N; i++)
        if (tmp[i] >= 0 && dup2(tmp[i], dst[i]) < 0) goto failed;
    {
        char *const argv[] = {(char *)"sandbox-init", (char *)a->mode, NULL};
        char *const envp[] = {NULL};
        syscall(SYS_execveat, launcher, "", argv, envp, AT_EMPTY_PATH);
    }
failed:
    send_msg(a->rep, AHL_MSG_SETUP_ERROR, AHL_STAGE_EXEC_LAUNCHER, errno, 0, 0);
    _exit(SETUP_FAILED);
}

int ahl_spawn_exec(const struct ahl_plan *plan, int launcher_fd, struct ahl_child *out) {
    uint8_t *bytes = NULL;
    size_t len = 0;
    int e = ahl_plan_pack(plan, LAUNCHER_STDIO_FD, &bytes, &len);
    if (e) return e;
    // Sealed: nothing can change the plan between here and the launcher's read.
    int pfd = (int)syscall(SYS_memfd_create, "autoharness-plan", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (pfd < 0) { e = errno; free(bytes); return e; }
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(pfd, bytes + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) { e = n < 0 ? errno : EIO; free(bytes); close(pfd); return e; }
        done += (size_t)n;
    }
    free(bytes);
    if (fcntl(pfd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE) < 0 || lseek(pfd, 0, SEEK_SET) < 0) {
        e = errno;
        close(pfd);
        return e;
    }

    int rep[2], ctl[2];
    if ((e = open_channels(rep, ctl))) {
        close(pfd);
        return e;
    }
    struct exec_args a = {launcher_fd, pfd, rep[1], ctl[0], {plan->stdio[0], plan->stdio[1], plan->stdio[2]},
                         plan->netns_fd, plan->masks_fd, plan->template_fd, plan->dev_fd, plan->userns_fd, plan->seed_fd, "fork"};
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int32_t joined = -1;
    pid_t pid = -1;
    if (plan->cgroup_into_fd >= 0 && plan->cgroup_into_join >= 0) {
        // clone3 has no separate-stack form that plain C can use safely, so this is a fork
        // (one page-table copy) that is born in its cgroup and execs at once.
        pid = fork_into_cgroup(plan->cgroup_into_fd);
        if (pid == 0) {
            a.mode = "into";
            exec_launcher(&a);
        }
        if (pid > 0) joined = plan->cgroup_into_join;
    }
    if (pid < 0) {
        // Shares our memory and stops us until it has exec'd: nothing is copied. The stack
        // is this frame's; the child only reads `a`.
        char stack[32768] __attribute__((aligned(16)));
        pid = clone(exec_launcher, stack + sizeof stack, CLONE_VM | CLONE_VFORK | SIGCHLD, &a);
    }
    e = errno;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    close(pfd);
    return spawned(pid, e, rep, ctl, joined, out);
}

// ---------------------------------------------------------------------------------------
// User namespaces made ahead of time (SandboxPartsPool)

static int write_proc_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    size_t n = strlen(text);
    ssize_t w = write(fd, text, n);
    int e = w < 0 ? errno : (size_t)w != n ? EIO : 0;
    close(fd);
    return e;
}

int ahl_make_userns(uint32_t uid, uint32_t gid, uint32_t host_uid, uint32_t host_gid, int *out) {
    *out = -1;
    size_t size = 64 << 10;
    void *stack = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stack == MAP_FAILED) return errno;
    // The child starts with every signal blocked (SIGKILL ends it): no handler of this
    // process runs on its stack.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    // CLONE_FILES: the descriptor table is shared, not copied (nothing of it is closed or kept
    // when the child ends).
    pid_t pid = clone(ahl_park, (char *)stack + size, CLONE_VM | CLONE_FILES | CLONE_NEWUSER | SIGCHLD, (void *)(intptr_t)getpid());
    int e = pid < 0 ? errno : 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        munmap(stack, size);
        return e;
    }
    char path[64], map[64];
    snprintf(path, sizeof path, "/proc/%d/setgroups", (int)pid);
    e = write_proc_file(path, "deny");
    if (!e) {
        snprintf(path, sizeof path, "/proc/%d/uid_map", (int)pid);
        snprintf(map, sizeof map, "%u %u 1\n", uid, host_uid);
        e = write_proc_file(path, map);
    }
    if (!e) {
        snprintf(path, sizeof path, "/proc/%d/gid_map", (int)pid);
        snprintf(map, sizeof map, "%u %u 1\n", gid, host_gid);
        e = write_proc_file(path, map);
    }
    int fd = -1;
    if (!e) {
        snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) e = errno;
    }
    kill(pid, SIGKILL);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
    // Only now: the child ran on it.
    munmap(stack, size);
    if (e) {
        if (fd >= 0) close(fd);
        return e;
    }
    *out = fd;
    return 0;
}

// ---------------------------------------------------------------------------------------
// The seed mount namespace

struct seed_job { int fd, err; };

static void *build_seed(void *arg) {
    struct seed_job *job = arg;
    job->fd = -1;
    // This thread's own mount namespace (and, with it, its own root and working directory);
    // the process's other threads keep the host's.
    int ok = unshare(CLONE_NEWNS) == 0 && mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
             mount("seed", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16k,mode=0755") == 0 &&
             mkdir("/tmp/tmp", 0755) == 0 && mkdir("/tmp/dev", 0755) == 0 && mkdir("/tmp/proc", 0755) == 0 &&
             mount("proc", "/tmp/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0 &&
             chdir("/tmp") == 0 && syscall(SYS_pivot_root, ".", ".") == 0 && umount2(".", MNT_DETACH) == 0 &&
             chdir("/") == 0 && mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0;
    if (ok) job->fd = open("/proc/thread-self/ns/mnt", O_RDONLY | O_CLOEXEC);
    job->err = job->fd >= 0 ? 0 : errno ? errno : EIO;
    return NULL;
}

int ahl_build_seed(int *out) {
    *out = -1;
    struct seed_job job = {-1, 0};
    pthread_t t;
    int e = pthread_create(&t, NULL, build_seed, &job);
    if (e) return e;
    pthread_join(t, NULL);
    if (job.err) return job.err;
    *out = job.fd;
    return 0;
}
