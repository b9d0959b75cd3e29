// The front's side of the launch service's wire (the service and the wire itself:
// Sources/SandboxCLI/LaunchService.swift). C, and first thing in the front's main: a client
// that only hands a launch over and waits should not pay for the Swift runtime's type
// metadata, arrays and strings (a Swift client started 0.26 ms later and took 0.29 ms more
// to hand over, most of it page faults in the 23 MB front).
#include "ahs_syscalls.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int service_absent;

int ahs_launch_service_absent(void) { return service_absent; }

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

enum { body_limit = 2 << 20, header_size = 12 };

static void put32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/// Appends `s` and its NUL to the body; 0, or -1 once the body would pass its `capacity`.
static int put_string(unsigned char *body, size_t capacity, size_t *len, const char *s) {
    size_t n = strlen(s) + 1;
    if (*len + n > capacity) return -1;
    memcpy(body + *len, s, n);
    *len += n;
    return 0;
}

static int send_all(int fd, const unsigned char *p, size_t len) {
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/// The request: header, then the body (launch code, umask, argument count, arguments,
/// environment), the five descriptors on its first byte. 0, or -1 (nothing was served).
static int send_request(int conn, int service_pid, const char *launch_code, int argc, char *const argv[]) {
    // The service's working directory, opened by this process: a directory no path leads to,
    // which the kernel opens through /proc only for a caller that may inspect the service
    // (ptrace read access). One confined by Landlock, or by an LSM's ptrace rules, may not; its
    // launch is its own to make.
    char cwd_link[64];
    snprintf(cwd_link, sizeof cwd_link, "/proc/%d/cwd", service_pid);
    int proof = open(cwd_link, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (proof < 0) return -1;
    int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (cwd < 0) { close(proof); return -1; }
    char number[32];
    // The body's size first (the launch code, two numbers, the words), to allocate it once.
    size_t need = strlen(launch_code) + 1 + 2 * sizeof number;
    for (int i = 0; i < argc; i++) need += strlen(argv[i]) + 1;
    for (char **e = environ; *e; e++) need += strlen(*e) + 1;
    if (need > body_limit) { close(cwd); close(proof); return -1; }
    unsigned char *message = malloc(header_size + need);
    if (!message) { close(cwd); close(proof); return -1; }
    unsigned char *body = message + header_size;
    size_t len = 0;
    mode_t mask = umask(022);
    umask(mask);
    int bad = put_string(body, need, &len, launch_code);
    snprintf(number, sizeof number, "%o", (unsigned)mask);
    bad |= put_string(body, need, &len, number);
    snprintf(number, sizeof number, "%d", argc);
    bad |= put_string(body, need, &len, number);
    for (int i = 0; i < argc; i++) bad |= put_string(body, need, &len, argv[i]);
    for (char **e = environ; *e; e++) bad |= put_string(body, need, &len, *e);
    int rc = -1;
    if (!bad) {
        memcpy(message, "AHLS", 4);
        put32(message + 4, AHS_LAUNCH_WIRE_VERSION);
        put32(message + 8, (uint32_t)len);
        int fds[5] = { 0, 1, 2, cwd, proof };
        long sent = ahs_send_with_fds(conn, message, header_size + len, fds, 5);
        if (sent > 0 && send_all(conn, message + sent, header_size + len - (size_t)sent) == 0) rc = 0;
    }
    free(message);
    close(cwd);
    close(proof);
    return rc;
}

int ahs_launch_via_service(const char *default_socket, const char *launch_code, int argc, char *const argv[]) {
    const char *path = getenv("AUTOHARNESS_LAUNCH_SERVICE");
    if (!path) path = default_socket;
    if (!*path || strcmp(path, "off") == 0) return -1;
    // The payload's stdio is this process's: all three must be open to be passed.
    for (int fd = 0; fd <= 2; fd++)
        if (fcntl(fd, F_GETFD) < 0) return -1;
    // Sandboxes need root; so does a service that launches them (never an overflow id).
    if (geteuid() != 0) return -1;
    int conn = ahs_unix_connect(path);
    if (conn < 0) {
        service_absent = errno == ENOENT || errno == ECONNREFUSED;
        return -1;
    }
    int pid = 0;
    unsigned uid = 0;
    if (ahs_peer_credentials(conn, &pid, &uid) < 0 || uid != 0) {
        // Whoever made that socket is not root: it gets nothing of ours (stdio, environment).
        fprintf(stderr, "autoharness: not using the launch service at %s: it runs as uid %u (pid %d), not as root\n", path, uid, pid);
        close(conn);
        return -1;
    }
    // From the request on, the payload may be running: this process's signals are the
    // payload's. Blocked and read from a signalfd, so none is lost or handled twice; on a
    // decline they are unblocked again, and one that came meanwhile does what it would have.
    sigset_t relayed, old;
    sigemptyset(&relayed);
    int relay[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2 };
    for (unsigned i = 0; i < sizeof relay / sizeof relay[0]; i++) sigaddset(&relayed, relay[i]);
    sigprocmask(SIG_BLOCK, &relayed, &old);
    int sfd = signalfd(-1, &relayed, SFD_CLOEXEC);
    if (sfd < 0 || send_request(conn, pid, launch_code, argc, argv) < 0) {
        if (sfd >= 0) close(sfd);
        close(conn);
        sigprocmask(SIG_SETMASK, &old, NULL);
        return -1;
    }
    // 'D' (declined), or 'S' (the launch starts) and then 'X' and the status.
    unsigned char answer[5];
    size_t have = 0;
    int started = 0;
    int received[8], count = 0;
    while (have < sizeof answer) {
        struct pollfd p[2] = { { conn, POLLIN, 0 }, { sfd, POLLIN, 0 } };
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            break;
        }
        if (p[1].revents & POLLIN) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                unsigned char b = (unsigned char)si.ssi_signo;
                send_all(conn, &b, 1);
                if (count < 8) received[count++] = (int)si.ssi_signo;
            }
        }
        if (p[0].revents) {
            ssize_t n = read(conn, answer + have, sizeof answer - have);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            if (!started && have == 0 && answer[0] == 'S') {
                started = 1;
                // 'X' may have come with it.
                memmove(answer, answer + 1, (size_t)n - 1);
                n--;
            }
            have += (size_t)n;
        }
    }
    close(sfd);
    close(conn);
    if (have == sizeof answer && answer[0] == 'X') {
        uint32_t status = get32(answer + 1);
        return status <= 255 ? (int)status : 125;
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (!started && ((have == sizeof answer && answer[0] == 'D') || have == 0)) {
        // Nothing ran (declined, or the connection ended before the launch started: a service
        // that could not start, or was stopped): a signal that came meanwhile was meant to stop
        // this command.
        if (have == 0)
            fprintf(stderr, "autoharness: the launch service at %s closed the connection before launching; launching here\n", path);
        for (int i = 0; i < count; i++) raise(received[i]);
        return -1;
    }
    fprintf(stderr, "autoharness: the launch service at %s ended before the sandbox did; the sandbox ended with it\n", path);
    return 125;
}

enum { ioprio_who_process = 1, rlimit_count = 16 };

int ahs_process_attributes(int pid, struct ahs_process_attributes *out) {
    memset(out, 0, sizeof *out);
    errno = 0;
    out->nice = getpriority(PRIO_PROCESS, (id_t)pid);
    if (out->nice == -1 && errno) return -1;
    long io = syscall(SYS_ioprio_get, ioprio_who_process, pid);
    if (io < 0) return -1;
    out->ioprio = (int)io;
    // struct sched_attr's first fields (SCHED_ATTR_SIZE_VER0, 48 bytes): size, policy, flags,
    // nice, priority.
    struct { uint32_t size, policy; uint64_t flags; int32_t nice; uint32_t priority; uint64_t runtime, deadline, period; } sa;
    memset(&sa, 0, sizeof sa);
    if (syscall(SYS_sched_getattr, pid, &sa, sizeof sa, 0) < 0) return -1;
    out->sched_policy = (int)sa.policy;
    out->sched_priority = (int)sa.priority;
    out->sched_reset_on_fork = (sa.flags & 1) != 0;
    if (sched_getaffinity(pid, sizeof out->affinity, (cpu_set_t *)out->affinity) < 0) return -1;
    for (int r = 0; r < rlimit_count; r++) {
        struct rlimit l;
        if (prlimit(pid, r, NULL, &l) < 0) {
            if (errno == EINVAL) { out->soft[r] = out->hard[r] = RLIM_INFINITY; continue; }  // a kernel without it
            return -1;
        }
        out->soft[r] = l.rlim_cur;
        out->hard[r] = l.rlim_max;
    }
    char path[64], text[16] = { 0 };
    snprintf(path, sizeof path, pid ? "/proc/%d/oom_score_adj" : "/proc/self/oom_score_adj", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    if (n <= 0) { errno = EIO; return -1; }
    out->oom_score_adj = atoi(text);
    return 0;
}

/// The detached process's own settings: none of its caller's (see ahs_start_detached), as far
/// as the kernel lets it raise them (limits above its caller's need CAP_SYS_RESOURCE). Each
/// launch it runs takes its own caller's (CallerSettings.swift).
static void neutral_settings(void) {
    setpriority(PRIO_PROCESS, 0, 0);
    syscall(SYS_ioprio_set, ioprio_who_process, 0, 0);
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)!write(fd, "0", 1);
        close(fd);
    }
    // The kernel keeps the CPUs the cpuset allows of a mask of all.
    unsigned long all[16];
    memset(all, 0xff, sizeof all);
    sched_setaffinity(0, sizeof all, (cpu_set_t *)all);
    for (int r = 0; r < rlimit_count; r++) {
        struct rlimit l;
        if (prlimit(1, r, NULL, &l) == 0) setrlimit(r, &l);
    }
}

int ahs_own_affinity(unsigned long mask[16]) {
    memset(mask, 0, 16 * sizeof *mask);
    return sched_getaffinity(0, 16 * sizeof *mask, (cpu_set_t *)mask);
}

/// Closes every descriptor from 3 on but `keep`, as close_range(2) does where it is missing
/// (before Linux 5.9): the entries of /proc/self/fd, read with getdents64 into a buffer on the
/// stack (nothing here may allocate: a lock another thread of the caller held stays held).
static void close_all_but(int keep) {
    int dir = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) return;
    char buf[4096];
    for (;;) {
        long n = syscall(SYS_getdents64, dir, buf, sizeof buf);
        if (n <= 0) break;
        for (long off = 0; off < n;) {
            unsigned short reclen = *(unsigned short *)(buf + off + 16);
            const char *name = buf + off + 19;
            int fd = 0, digits = 0;
            for (; name[digits] >= '0' && name[digits] <= '9'; digits++) fd = fd * 10 + (name[digits] - '0');
            if (digits > 0 && !name[digits] && fd > 2 && fd != keep && fd != dir) close(fd);
            off += reclen;
        }
    }
    close(dir);
}

int ahs_start_detached(int exe_fd, char *const argv[], char *const envp[]) {
    // _Fork: no atfork handlers (a runtime's could wait on a lock another thread holds).
    pid_t child = _Fork();
    if (child < 0) return errno;
    if (child == 0) {
        // The intermediate process: its child is reparented when it exits, so this process
        // never waits for, nor reaps, what it started.
        pid_t started = _Fork();
        if (started != 0) _exit(started < 0 ? 1 : 0);
        setsid();
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        // dup2 clears close-on-exec on the copies: stdio is /dev/null, not the caller's pipes
        // (a caller reading the front's output to its end would wait for this process).
        if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) _exit(127);
        if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) < 0) close_all_but(exe_fd);
        neutral_settings();
        // Where its caller's CPU time limit could not be raised (no CAP_SYS_RESOURCE), a
        // service would be killed once its launches together had used it, and the launches
        // under way with it: none is started.
        struct rlimit cpu;
        if (getrlimit(RLIMIT_CPU, &cpu) < 0 || cpu.rlim_cur != RLIM_INFINITY) _exit(0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        syscall(SYS_execveat, exe_fd, "", argv, envp, AT_EMPTY_PATH);
        _exit(127);
    }
    int status;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR) return errno;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : ECHILD;
}
