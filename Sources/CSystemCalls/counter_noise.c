// Noise in the host-wide serials a held-out phase on the host can move and a later sandbox can
// read (see InodeNumberNoise.swift): pipe and memfd inode numbers, the process serial (pidfs)
// and the autogroup serial (every setsid). Run by the supervisor after a held-out phase, never
// between fork and exec.
#define _GNU_SOURCE
#include "ahs_syscalls.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int ahs_allowed_cpus(int *cpus, int max) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) < 0) return -errno;
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE && n < max; c++)
        if (CPU_ISSET(c, &set)) cpus[n++] = c;
    return n;
}

/// One CPU's share: `pipes` pipes and `memfds` memfds made and closed on that CPU, `threads`
/// threads started and joined from it, and `sessions` short-lived processes that each make a
/// session.
struct noise_job {
    int cpu;
    long pipes, memfds, threads, sessions;
    int error;
    char *stack;
};

static void *noise_nothing(void *arg) { return arg; }

enum { session_stack_size = 64 * 1024 };

static int session_child(void *arg) {
    (void)arg;
    // A new session takes the next number of the host's autogroup serial (whether or not
    // autogroup scheduling is on). The raw call: this child shares the thread's memory.
    syscall(SYS_setsid);
    return 0;
}

static void *noise_thread(void *arg) {
    struct noise_job *job = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(job->cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) < 0) { job->error = errno; return NULL; }
    for (long k = 0; k < job->pipes; k++) {
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0) { job->error = errno; return NULL; }
        close(p[0]);
        close(p[1]);
    }
    for (long k = 0; k < job->memfds; k++) {
        int fd = memfd_create("ah-noise", MFD_CLOEXEC);
        if (fd < 0) { job->error = errno; return NULL; }
        close(fd);
    }
    // Each thread takes a number from the host's process serial (a pidfd's inode number).
    for (long k = 0; k < job->threads; k++) {
        pthread_t t;
        int e = pthread_create(&t, NULL, noise_nothing, NULL);
        if (e != 0) { job->error = e; return NULL; }
        pthread_join(t, NULL);
    }
    // Each child makes a session and exits (about 50 us here). Shared memory and this
    // thread held until the child exits (vfork's cost, not fork's); no exit signal, so it is a
    // "clone" child that only a __WCLONE wait reaps: a wait for any child elsewhere in the
    // supervisor neither takes it nor is woken by it.
    for (long k = 0; k < job->sessions; k++) {
        pid_t pid = clone(session_child, job->stack + session_stack_size, CLONE_VM | CLONE_VFORK, NULL);
        if (pid < 0) { job->error = errno; return NULL; }
        while (waitpid(pid, NULL, __WCLONE) < 0 && errno == EINTR) {}
    }
    return NULL;
}

long long ahs_pid_serial(void) {
    // A pid's number is fixed when it is made: a child made now (it exits at once and is
    // reaped after) shows where the serial stands.
    pid_t pid = vfork();
    if (pid == 0) _exit(0);
    if (pid < 0) return -errno;
    int fd = (int)syscall(SYS_pidfd_open, pid, 0);
    int e = errno;
    long long out = -e;
    if (fd >= 0) {
        struct stat st;
        out = fstat(fd, &st) < 0 ? -errno : (long long)st.st_ino;
        close(fd);
    }
    waitpid(pid, NULL, 0);
    return out;
}

long long ahs_autogroup_serial(void) {
    // A child makes a session (the serial's next number) and reports its autogroup's id
    // through a pipe: "/autogroup-N nice K".
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) return -errno;
    pid_t pid = fork();
    if (pid == 0) {
        long long id = -ENOENT;
        char text[64];
        if (setsid() < 0) {
            id = -errno;
        } else {
            int fd = open("/proc/self/autogroup", O_RDONLY | O_CLOEXEC);
            ssize_t n = fd < 0 ? -1 : read(fd, text, sizeof text - 1);
            if (n > 0) {
                text[n] = 0;
                char *digits = strstr(text, "autogroup-");
                if (digits) id = strtoll(digits + strlen("autogroup-"), NULL, 10);
            } else {
                id = -errno;
            }
        }
        (void)!write(p[1], &id, sizeof id);
        _exit(0);
    }
    int e = errno;
    close(p[1]);
    long long id = -e;
    if (pid > 0) {
        if (read(p[0], &id, sizeof id) != (ssize_t)sizeof id) id = -EIO;
        waitpid(pid, NULL, 0);
    }
    close(p[0]);
    return id;
}

int ahs_perturb_inode_numbers(const int *cpus, const long *pipes, const long *memfds, const long *thread_counts,
                              const long *session_counts, int n, int *failed_cpu) {
    // A thread per CPU, pinned there, all at once: each CPU's counters move only through work
    // on that CPU, and the CPUs work side by side (the wall time of one CPU's share, not the
    // sum). Threads of their own, so that pinning them pins no thread the supervisor keeps.
    struct noise_job *jobs = calloc((size_t)n, sizeof *jobs);
    pthread_t *threads = calloc((size_t)n, sizeof *threads);
    int *started = calloc((size_t)n, sizeof *started);
    if (!jobs || !threads || !started) {
        free(jobs); free(threads); free(started);
        *failed_cpu = -1;
        return -ENOMEM;
    }
    int rc = 0;
    *failed_cpu = -1;
    for (int i = 0; i < n; i++) {
        jobs[i] = (struct noise_job){cpus[i], pipes[i], memfds[i], thread_counts[i], session_counts[i], 0, NULL};
        if (session_counts[i] > 0 && !(jobs[i].stack = malloc(session_stack_size))) {
            if (rc == 0) { rc = -ENOMEM; *failed_cpu = cpus[i]; }
            continue;
        }
        int e = pthread_create(&threads[i], NULL, noise_thread, &jobs[i]);
        if (e == 0) {
            started[i] = 1;
        } else if (rc == 0) {
            rc = -e;
            *failed_cpu = cpus[i];
        }
    }
    for (int i = 0; i < n; i++) {
        if (started[i]) {
            pthread_join(threads[i], NULL);
            if (jobs[i].error && rc == 0) {
                rc = -jobs[i].error;
                *failed_cpu = cpus[i];
            }
        }
        free(jobs[i].stack);
    }
    free(jobs); free(threads); free(started);
    return rc;
}
