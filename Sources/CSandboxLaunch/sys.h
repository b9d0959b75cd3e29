// System calls for the code between fork and exec, made directly: no C library function.
//
// The monitor, init and the payload run in `autoharness-launch`, a program with no C library
// at all (see Sources/autoharness-launch/main.c): glibc's start-up alone, which probes the CPU
// with cpuid (a trap to the hypervisor on every virtual machine), cost 0.22 ms of each
// sandbox's critical path there. The same code also runs in a fork of the supervisor (when no
// launcher is installed), where calling no glibc function is the async-signal-safe rule taken
// literally. Headers are used for types and constants only.
//
// Each wrapper returns what the kernel returned, or -1 with the error in `ahl_errno` (one
// per process: every process running this code is single-threaded).
#ifndef AUTOHARNESS_AHL_SYS_H
#define AUTOHARNESS_AHL_SYS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>

struct stat;

extern int ahl_errno;

static inline long ahl_raw6(long n, long a, long b, long c, long d, long e, long f) {
#if defined(__x86_64__)
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
#elif defined(__aarch64__)
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc #0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
    return x0;
#else
#error "autoharness-launch makes its system calls directly: add this architecture's calling sequence"
#endif
}

static inline long ahl_sys(long n, long a, long b, long c, long d, long e, long f) {
    long r = ahl_raw6(n, a, b, c, d, e, f);
    if ((unsigned long)r > -4096UL) {
        ahl_errno = (int)-r;
        return -1;
    }
    return r;
}

#define AHL_SYS0(n) ahl_sys((n), 0, 0, 0, 0, 0, 0)
#define AHL_SYS1(n, a) ahl_sys((n), (long)(a), 0, 0, 0, 0, 0)
#define AHL_SYS2(n, a, b) ahl_sys((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define AHL_SYS3(n, a, b, c) ahl_sys((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define AHL_SYS4(n, a, b, c, d) ahl_sys((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define AHL_SYS5(n, a, b, c, d, e) ahl_sys((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)
#define AHL_SYS6(n, a, b, c, d, e, f) ahl_sys((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))

#define AHL_AT_FDCWD (-100)

static inline __attribute__((noreturn)) void sys_exit(int status) {
    for (;;) ahl_raw6(SYS_exit_group, status, 0, 0, 0, 0, 0);
}

// Files and descriptors
static inline int sys_openat(int dir, const char *path, int flags, unsigned mode) { return (int)AHL_SYS4(SYS_openat, dir, path, flags, mode); }
static inline int sys_open(const char *path, int flags) { return sys_openat(AHL_AT_FDCWD, path, flags, 0); }
static inline int sys_close(int fd) { return (int)AHL_SYS1(SYS_close, fd); }
static inline int sys_close_range(unsigned lo, unsigned hi, unsigned flags) { return (int)AHL_SYS3(SYS_close_range, lo, hi, flags); }
static inline int sys_dup(int fd) { return (int)AHL_SYS1(SYS_dup, fd); }
static inline int sys_dup3(int from, int to, int flags) { return (int)AHL_SYS3(SYS_dup3, from, to, flags); }
static inline ssize_t sys_read(int fd, void *b, size_t n) { return AHL_SYS3(SYS_read, fd, b, n); }
static inline ssize_t sys_write(int fd, const void *b, size_t n) { return AHL_SYS3(SYS_write, fd, b, n); }
static inline ssize_t sys_pread(int fd, void *b, size_t n, off_t at) { return AHL_SYS4(SYS_pread64, fd, b, n, at); }
static inline int sys_fcntl(int fd, int cmd, long arg) { return (int)AHL_SYS3(SYS_fcntl, fd, cmd, arg); }
static inline int sys_fstatat(int dir, const char *path, struct stat *st, int flags) { return (int)AHL_SYS4(SYS_newfstatat, dir, path, st, flags); }
static inline int sys_fstat(int fd, struct stat *st) { return sys_fstatat(fd, "", st, 0x1000 /* AT_EMPTY_PATH */); }
static inline int sys_fstatfs(int fd, struct statfs *st) { return (int)AHL_SYS2(SYS_fstatfs, fd, st); }
static inline int sys_mkdirat(int dir, const char *path, unsigned mode) { return (int)AHL_SYS3(SYS_mkdirat, dir, path, mode); }
static inline int sys_fchmod(int fd, unsigned mode) { return (int)AHL_SYS2(SYS_fchmod, fd, mode); }
static inline int sys_fchmodat(int dir, const char *path, unsigned mode) { return (int)AHL_SYS3(SYS_fchmodat, dir, path, mode); }
static inline int sys_fchownat(int dir, const char *path, unsigned uid, unsigned gid, int flags) { return (int)AHL_SYS5(SYS_fchownat, dir, path, uid, gid, flags); }
static inline int sys_mknodat(int dir, const char *path, unsigned mode, unsigned long dev) { return (int)AHL_SYS4(SYS_mknodat, dir, path, mode, dev); }
static inline int sys_unlinkat(int dir, const char *path, int flags) { return (int)AHL_SYS3(SYS_unlinkat, dir, path, flags); }
static inline int sys_symlinkat(const char *target, int dir, const char *path) { return (int)AHL_SYS3(SYS_symlinkat, target, dir, path); }
static inline int sys_chdir(const char *path) { return (int)AHL_SYS1(SYS_chdir, path); }
static inline int sys_fchdir(int fd) { return (int)AHL_SYS1(SYS_fchdir, fd); }
static inline int sys_pipe2(int fds[2], int flags) { return (int)AHL_SYS2(SYS_pipe2, fds, flags); }
static inline void *sys_mmap(size_t len, int prot, int flags, int fd) {
    long r = AHL_SYS6(SYS_mmap, 0, len, prot, flags, fd, 0);
    return r == -1 ? NULL : (void *)r;
}
static inline int sys_ioctl(int fd, unsigned long req, void *arg) { return (int)AHL_SYS3(SYS_ioctl, fd, req, arg); }

// Mounts
static inline int sys_mount(const char *src, const char *dst, const char *type, unsigned long flags, const void *data) {
    return (int)AHL_SYS5(SYS_mount, src, dst, type, flags, data);
}
static inline int sys_umount2(const char *path, int flags) { return (int)AHL_SYS2(SYS_umount2, path, flags); }
static inline int sys_pivot_root(const char *n, const char *o) { return (int)AHL_SYS2(SYS_pivot_root, n, o); }
static inline int sys_open_tree(int dir, const char *path, unsigned flags) { return (int)AHL_SYS3(SYS_open_tree, dir, path, flags); }
static inline int sys_move_mount(int fd, const char *from, int tofd, const char *to, unsigned flags) {
    return (int)AHL_SYS5(SYS_move_mount, fd, from, tofd, to, flags);
}
static inline int sys_fsopen(const char *type, unsigned flags) { return (int)AHL_SYS2(SYS_fsopen, type, flags); }
static inline int sys_fsconfig(int fd, unsigned cmd, const char *key, const void *value, int aux) {
    return (int)AHL_SYS5(SYS_fsconfig, fd, cmd, key, value, aux);
}
static inline int sys_fsmount(int fd, unsigned flags, unsigned attrs) { return (int)AHL_SYS3(SYS_fsmount, fd, flags, attrs); }
static inline int sys_mount_setattr(int fd, const char *path, unsigned flags, void *attr, size_t size) {
    return (int)AHL_SYS5(SYS_mount_setattr, fd, path, flags, attr, size);
}

// Processes, namespaces, credentials
static inline pid_t sys_fork(void) { return (pid_t)AHL_SYS5(SYS_clone, 17 /* SIGCHLD */, 0, 0, 0, 0); }
static inline pid_t sys_wait4(pid_t pid, int *status, int options) { return (pid_t)AHL_SYS4(SYS_wait4, pid, status, options, 0); }
static inline int sys_kill(pid_t pid, int sig) { return (int)AHL_SYS2(SYS_kill, pid, sig); }
static inline pid_t sys_setsid(void) { return (pid_t)AHL_SYS0(SYS_setsid); }
static inline int sys_unshare(int flags) { return (int)AHL_SYS1(SYS_unshare, flags); }
static inline int sys_setns(int fd, int type) { return (int)AHL_SYS2(SYS_setns, fd, type); }
static inline int sys_sethostname(const char *name, size_t n) { return (int)AHL_SYS2(SYS_sethostname, name, n); }
static inline int sys_prctl(int op, unsigned long a, unsigned long b, unsigned long c, unsigned long d) {
    return (int)AHL_SYS5(SYS_prctl, op, a, b, c, d);
}
static inline int sys_prlimit(int resource, const void *limit) { return (int)AHL_SYS4(SYS_prlimit64, 0, resource, limit, 0); }
static inline int sys_execve(const char *path, char *const argv[], char *const envp[]) { return (int)AHL_SYS3(SYS_execve, path, argv, envp); }
static inline int sys_sched_getaffinity(size_t size, void *mask) { return (int)AHL_SYS3(SYS_sched_getaffinity, 0, size, mask); }

// Signals: the kernel's sigset is 64 bits.
struct ahl_ksigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    uint64_t mask;
};
static inline int sys_sigaction_default(int sig) {
    struct ahl_ksigaction sa = {0, 0, 0, 0};  // SIG_DFL
    return (int)AHL_SYS4(SYS_rt_sigaction, sig, &sa, 0, sizeof sa.mask);
}
static inline int sys_sigprocmask(int how, const uint64_t *set, uint64_t *old) { return (int)AHL_SYS4(SYS_rt_sigprocmask, how, set, old, 8); }
static inline int sys_signalfd(const uint64_t *mask, int flags) { return (int)AHL_SYS4(SYS_signalfd4, -1, mask, 8, flags); }
static inline int sys_ppoll(void *fds, unsigned long n) { return (int)AHL_SYS5(SYS_ppoll, fds, n, 0, 0, 8); }

// Sockets
static inline int sys_socket(int domain, int type, int proto) { return (int)AHL_SYS3(SYS_socket, domain, type, proto); }
static inline int sys_bind(int fd, const void *addr, unsigned len) { return (int)AHL_SYS3(SYS_bind, fd, addr, len); }
static inline int sys_listen(int fd, int backlog) { return (int)AHL_SYS2(SYS_listen, fd, backlog); }
static inline ssize_t sys_send(int fd, const void *b, size_t n, int flags) { return AHL_SYS6(SYS_sendto, fd, b, n, flags, 0, 0); }
static inline ssize_t sys_recv(int fd, void *b, size_t n, int flags) { return AHL_SYS6(SYS_recvfrom, fd, b, n, flags, 0, 0); }
static inline ssize_t sys_sendmsg(int fd, const void *msg, int flags) { return AHL_SYS3(SYS_sendmsg, fd, msg, flags); }

#endif
