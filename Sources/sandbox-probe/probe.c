// sandbox-probe: performs exactly one named action from inside a sandbox and prints what
// happened, so the escape suite proves the attack was attempted and how it was refused.
//
//   sandbox-probe ACTION [ARG...]
//
// Output: one line `RESULT ACTION ok [detail]` or `RESULT ACTION errno NAME NUMBER`.
// Exit status: 0 when the action succeeded, 1 when it failed, 2 for usage errors. Each
// syscall is issued with harmless arguments (as bubblewrap's try-syscall does), so a refusal
// is the filter's or the kernel's answer to the call itself, not a side effect.

#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/capability.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <linux/sched.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <time.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

static const char *action;

static int report_errno(int e) {
    const char *n = strerrorname_np(e);
    printf("RESULT %s errno %s %d\n", action, n ? n : "E?", e);
    fflush(stdout);
    return 1;
}

static int report(long rc) {
    if (rc < 0) return report_errno(errno);
    printf("RESULT %s ok %ld\n", action, rc);
    fflush(stdout);
    return 0;
}

static volatile sig_atomic_t usr1_seen;
static void on_usr1(int sig) { (void)sig; usr1_seen = 1; }

static pid_t sleeper(void) {
    pid_t c = fork();
    if (c == 0) {
        for (;;) pause();
    }
    return c;
}

static int do_read(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return report_errno(errno);
    char buf[256];
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0) return report_errno(errno);
    printf("RESULT %s ok %zd %.*s\n", action, n, (int)(n > 40 ? 40 : n), buf);
    return 0;
}

static int do_write(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return report_errno(errno);
    size_t len = strlen(text);
    if (write(fd, text, len) != (ssize_t)len) return report_errno(errno);
    if (close(fd) < 0) return report_errno(errno);
    return report(0);
}

static int forkbomb(long max) {
    long n = 0;
    for (; n < max; n++) {
        pid_t c = fork();
        if (c < 0) {
            int e = errno;
            printf("RESULT forkbomb count %ld errno %s %d\n", n, strerrorname_np(e), e);
            fflush(stdout);
            return 1;
        }
        if (c == 0) {
            for (;;) pause();
        }
    }
    printf("RESULT forkbomb count %ld ok\n", n);
    return 0;
}

static int memhog(long mb) {
    long done = 0;
    for (; done < mb; done++) {
        // Every page touched through a volatile pointer, so it is really charged: an optimised
        // build elides a malloc and memset whose memory is never read (it did, and a release
        // probe "allocated" 1 GiB under a 64M limit).
        volatile char *p = malloc(1 << 20);
        if (!p) return report_errno(ENOMEM);
        for (long i = 0; i < 1 << 20; i += 4096) p[i] = 1;
    }
    printf("RESULT memhog ok %ld\n", done);
    return 0;
}

static int fill(const char *path) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return report_errno(errno);
    static char buf[1 << 16];
    memset(buf, 'x', sizeof buf);
    long long total = 0;
    for (;;) {
        ssize_t n = write(fd, buf, sizeof buf);
        if (n < 0) {
            int e = errno;
            printf("RESULT fill errno %s %d after %lld bytes\n", strerrorname_np(e), e, total);
            return 1;
        }
        total += n;
    }
}

/// SIGTERM-ignoring main process plus a daemonised (double-forked, setsid) grandchild that
/// also ignores SIGTERM. Both carry `marker` in argv so the test can look for survivors.
static int sigterm_tree(char **argv) {
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    pid_t c = fork();
    if (c == 0) {
        setsid();
        if (fork() == 0) {
            signal(SIGTERM, SIG_IGN);
            execl("/proc/self/exe", argv[0], "sleep-forever", argv[2], (char *)NULL);
            _exit(1);
        }
        _exit(0);
    }
    waitpid(c, NULL, 0);
    printf("RESULT sigterm-tree ok started\n");
    fflush(stdout);
    execl("/proc/self/exe", argv[0], "sleep-forever", argv[2], (char *)NULL);
    return report_errno(errno);
}

static long i386_getpid(void) {
#if defined(__x86_64__)
    long r;
    // getpid is 20 on i386; int 0x80 enters the compat (i386) syscall table.
    __asm__ volatile("int $0x80" : "=a"(r) : "a"(20L) : "memory");
    return r;
#else
    return -ENOSYS;
#endif
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: sandbox-probe ACTION [ARG...]\n");
        return 2;
    }
    action = argv[1];
    const char *a2 = argc > 2 ? argv[2] : NULL;
    const char *a3 = argc > 3 ? argv[3] : NULL;
#define IS(x) (strcmp(action, x) == 0)
    if (IS("read") && a2) return do_read(a2);
    if (IS("write") && a2) return do_write(a2, a3 ? a3 : "probe\n");
    if (IS("create") && a2) {
        char p[4096];
        snprintf(p, sizeof p, "%s/probe-created", a2);
        int fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644);
        return fd < 0 ? report_errno(errno) : report(0);
    }
    if (IS("symlink-read") && a2 && a3) {  // plant DIR/link -> TARGET, then read through it
        char p[4096];
        snprintf(p, sizeof p, "%s/probe-link", a2);
        unlink(p);
        if (symlink(a3, p) < 0) return report_errno(errno);
        return do_read(p);
    }
    if (IS("hardlink") && a2 && a3) return report(link(a2, a3));
    if (IS("mount")) return report(mount("tmpfs", a2 ? a2 : "/tmp", "tmpfs", 0, NULL));
    if (IS("umount") && a2) return report(umount2(a2, MNT_DETACH));
    if (IS("unshare-user")) return report(unshare(CLONE_NEWUSER));
    if (IS("unshare-mount")) return report(unshare(CLONE_NEWNS));
    if (IS("setns")) {
        int fd = open("/proc/self/ns/net", O_RDONLY);
        if (fd < 0) return report_errno(errno);
        return report(setns(fd, CLONE_NEWNET));
    }
    if (IS("ptrace-sibling")) {
        pid_t c = sleeper();
        long r = syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, c, 0, 0);
        int e = errno;
        kill(c, SIGKILL);
        errno = e;
        return report(r);
    }
    /* The payload (pid 2) makes init its tracer, then gets a signal: a stop init lets go of,
       not its end (the handler runs). */
    if (IS("traceme-self")) {
        if (syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0) != 0) return report_errno(errno);
        signal(SIGUSR1, on_usr1);
        raise(SIGUSR1);
        usleep(300000);
        return report(usr1_seen ? 1 : 0);
    }
    /* PTRACE_TRACEME passes; the parent it makes a tracer can make no request of its stopped
       tracee (PTRACE_PEEKDATA refused). */
    if (IS("ptrace-traceme")) {
        int ready[2], status = 0;
        char b = 0;
        if (pipe(ready) != 0) return report_errno(errno);
        pid_t c = fork();
        if (c == 0) {
            b = syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0) == 0 ? 'y' : 'n';
            if (write(ready[1], &b, 1) == 1) raise(SIGSTOP);
            _exit(0);
        }
        long r = read(ready[0], &b, 1) == 1 && b == 'y' && waitpid(c, &status, 0) == c ? syscall(SYS_ptrace, 2, c, 0, 0) : -2;
        int e = errno;
        kill(c, SIGKILL);
        waitpid(c, NULL, 0);
        if (r != -1 || (e != EPERM && e != ENOSYS)) return report_errno(r == -2 ? EPERM : e);
        printf("RESULT %s ok traceme, peek refused %s %s\n", action, strerrorname_np(e), WIFSTOPPED(status) ? "stopped" : "not-stopped");
        fflush(stdout);
        return 0;
    }
    if (IS("process-vm-readv")) {
        pid_t c = sleeper();
        char buf[8];
        static char src[8] = "secret";
        struct iovec l = {buf, sizeof buf}, r = {src, sizeof src};
        long rc = syscall(SYS_process_vm_readv, c, &l, 1, &r, 1, 0);
        int e = errno;
        kill(c, SIGKILL);
        errno = e;
        return report(rc);
    }
    if (IS("io-uring-setup")) {
        struct io_uring_params p;
        memset(&p, 0, sizeof p);
        return report(syscall(SYS_io_uring_setup, 1, &p));
    }
    if (IS("bpf")) {
        union bpf_attr attr;
        memset(&attr, 0, sizeof attr);
        return report(syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr));
    }
    if (IS("perf-event-open")) {
        struct perf_event_attr attr;
        memset(&attr, 0, sizeof attr);
        attr.size = sizeof attr;
        attr.type = PERF_TYPE_SOFTWARE;
        attr.config = PERF_COUNT_SW_CPU_CLOCK;
        return report(syscall(SYS_perf_event_open, &attr, 0, -1, -1, 0));
    }
    if (IS("keyctl")) return report(syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
    if (IS("add-key")) return report(syscall(SYS_add_key, "user", "probe", "x", 1, KEY_SPEC_SESSION_KEYRING));
    if (IS("kexec-load")) return report(syscall(SYS_kexec_load, 0, 0, NULL, 0));
    if (IS("init-module")) return report(syscall(SYS_init_module, NULL, 0, ""));
    if (IS("open-by-handle-at")) {
        char buf[sizeof(struct file_handle) + 64];
        memset(buf, 0, sizeof buf);
        struct file_handle *h = (struct file_handle *)buf;
        h->handle_bytes = 8;
        return report(syscall(SYS_open_by_handle_at, AT_FDCWD, h, O_RDONLY));
    }
    if (IS("userfaultfd")) return report(syscall(SYS_userfaultfd, 0));
    if (IS("pidfd-open")) return report(syscall(SYS_pidfd_open, getpid(), 0));
    // NUMA memory policy on a page of our own: as OpenBLAS (numpy's) does at start-up (a
    // hint, flags 0), and asking the kernel to move pages already placed (MPOL_MF_MOVE = 2).
    if (IS("mbind-hint") || IS("mbind-move")) {
        void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page == MAP_FAILED) return report_errno(errno);
        return report(syscall(SYS_mbind, page, 4096, 1 /* MPOL_PREFERRED */, NULL, 0, IS("mbind-move") ? 2 : 0));
    }
    // Page-cache residency oracles and eviction, on a file every sandbox can read.
    if (IS("mincore") || IS("cachestat") || IS("readahead") || IS("fadvise-dontneed") ||
        IS("fadvise-willneed") || IS("fadvise-sequential") || IS("preadv2-nowait") || IS("preadv2") ||
        IS("io-setup")) {
        int fd = open(a2 ? a2 : "/proc/self/exe", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return report_errno(errno);
        if (IS("mincore")) {
            void *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
            unsigned char vec[1];
            if (m == MAP_FAILED) return report_errno(errno);
            return report(syscall(SYS_mincore, m, 4096, vec));
        }
        if (IS("cachestat")) {
            struct { uint64_t off, len; } range = {0, 0};
            uint64_t cs[5];
            return report(syscall(451 /* cachestat */, fd, &range, cs, 0));
        }
        if (IS("readahead")) return report(syscall(SYS_readahead, fd, 0, 4096));
        if (IS("fadvise-dontneed")) return report(syscall(SYS_fadvise64, fd, 0, 0, POSIX_FADV_DONTNEED));
        if (IS("fadvise-willneed")) return report(syscall(SYS_fadvise64, fd, 0, 0, POSIX_FADV_WILLNEED));
        if (IS("fadvise-sequential")) return report(syscall(SYS_fadvise64, fd, 0, 0, POSIX_FADV_SEQUENTIAL));
        char buf[64];
        struct iovec iov = {buf, sizeof buf};
        if (IS("preadv2-nowait")) return report(syscall(SYS_preadv2, fd, &iov, 1, 0, 0, 0x8 /* RWF_NOWAIT */));
        if (IS("preadv2")) return report(syscall(SYS_preadv2, fd, &iov, 1, 0, 0, 0));
        unsigned long ctx = 0;
        return report(syscall(SYS_io_setup, 1, &ctx));
    }
    // statx by mask: STATX_MNT_ID_UNIQUE (0x4000) reads a host-wide mount serial; the rest
    // (the basic fields, STATX_MNT_ID 0x1000) describe the file.
    if (IS("statx-mnt-id-unique") || IS("statx-mnt-id") || IS("statx-basic")) {
        unsigned char stx[256];
        unsigned mask = IS("statx-mnt-id-unique") ? 0x4000 | 0x7ff : IS("statx-mnt-id") ? 0x1000 | 0x7ff : 0x7ff;
        return report(syscall(SYS_statx, AT_FDCWD, "/", 0, mask, stx));
    }
    // inotify by event mask: the rename pair's cookie is a host-wide counter.
    if (IS("inotify-moves") || IS("inotify-modify")) {
        int in = (int)syscall(SYS_inotify_init1, 02000000 /* IN_CLOEXEC */);
        if (in < 0) return report_errno(errno);
        unsigned mask = IS("inotify-moves") ? 0x40 | 0x80 | 0x2 : 0x2 | 0x4 | 0x100 | 0x200 | 0x400 | 0x800;
        return report(syscall(SYS_inotify_add_watch, in, "/tmp", mask));
    }
    if (IS("tiocsti")) {
        char c = 'x';
        return report(ioctl(0, TIOCSTI, &c));
    }
    if (IS("tiocsti-highbits")) {  // upper 32 bits set: the kernel ignores them, so must the filter
        char c = 'x';
        return report(syscall(SYS_ioctl, 0, 0xdead00000000UL | TIOCSTI, &c));
    }
    if (IS("ioctl-ns-get-userns")) {  // NS_GET_USERNS: not on the allowlist
        int fd = open("/proc/self/ns/uts", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return report(-1);
        return report(ioctl(fd, 0xB701, 0));
    }
    if (IS("ioctl-fs-getflags")) {  // FS_IOC_GETFLAGS: not on the allowlist
        int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
        long flags = 0;
        if (fd < 0) return report(-1);
        return report(ioctl(fd, 0x80086601, &flags));
    }
    if (IS("ioctl-tiocsetd")) {  // TIOCSETD: line disciplines, a long history of kernel bugs
        int ldisc = 0;
        return report(ioctl(0, 0x5423, &ldisc));
    }
    if (IS("fionread")) {  // allowed: bytes waiting in a pipe
        int p[2], n = -1;
        if (pipe(p) < 0 || write(p[1], "abc", 3) != 3) return report(-1);
        if (ioctl(p[0], 0x541B, &n) < 0) return report(-1);
        return report(n);
    }
    if (IS("tiocgwinsz")) {  // a harmless ioctl that must still pass the filter
        struct winsize w;
        return report(ioctl(0, TIOCGWINSZ, &w));
    }
    if (IS("int80")) {
        long r = i386_getpid();
        if (r < 0 && r > -4096) return report_errno((int)-r);
        return report(r);
    }
    if (IS("x32")) return report(syscall(0x40000000 | SYS_getpid));
    if (IS("clone3-newuser")) {
        struct clone_args ca;
        memset(&ca, 0, sizeof ca);
        ca.flags = CLONE_NEWUSER;
        ca.exit_signal = SIGCHLD;
        long r = syscall(SYS_clone3, &ca, sizeof ca);
        if (r == 0) _exit(0);
        return report(r);
    }
    if (IS("clone-newuser")) {
        long r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
        if (r == 0) _exit(0);
        return report(r);
    }
    if (IS("clone-pidfd")) {  // a pidfd of the child, written to *parent_tid (its inode: the host's pid serial)
        int pidfd = -1;
        long r = syscall(SYS_clone, CLONE_PIDFD | SIGCHLD, 0, &pidfd, 0, 0);
        if (r == 0) _exit(0);
        return report(r);
    }
    if (IS("thread")) {  // an ordinary clone (what pthread_create does) must work
        pid_t c = fork();
        if (c == 0) _exit(7);
        int st;
        waitpid(c, &st, 0);
        return report(WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    }
    if (IS("chroot")) return report(chroot("/tmp"));
    if (IS("capset-raise")) {
        struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct d[2];
        memset(d, 0xff, sizeof d);
        return report(syscall(SYS_capset, &h, d));
    }
    if (IS("setuid0")) return report(setuid(0));
    if (IS("personality")) return report(personality(PER_LINUX32));
    if (IS("mknod")) return report(mknod(a2 ? a2 : "/tmp/probe-null", S_IFCHR | 0666, makedev(1, 3)));
    if (IS("socket-packet")) return report(socket(AF_PACKET, SOCK_RAW, 0));
    if (IS("socket-netlink-route")) return report(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 0 /* NETLINK_ROUTE */));
    // A protocol the kernel may lack: on a kernel with modules, asking loads its module.
    if (IS("socket-sctp")) return report(socket(AF_INET, SOCK_STREAM, 132 /* IPPROTO_SCTP */));
    if (IS("socket-dccp-highbits")) return report(syscall(SYS_socket, AF_INET6, SOCK_DCCP, 0x100000000L | 33 /* IPPROTO_DCCP */));
    if (IS("socket-udp")) return report(socket(AF_INET, SOCK_DGRAM, 17 /* IPPROTO_UDP */));
    if (IS("socket-netlink-audit")) return report(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 9 /* NETLINK_AUDIT */));
    if (IS("socket-netlink-uevent")) return report(socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, 15 /* NETLINK_KOBJECT_UEVENT */));
    // Socket options that return host-wide identifiers (the socket-cookie and network
    // namespace-cookie counters, a pidfd whose inode number counts the host's processes, a
    // NAPI queue id), one no kernel has yet, and harmless ones that must still pass. The raw
    // syscall carries garbage above the 32 bits the kernel reads, as an attacker would.
    if (IS("so-cookie") || IS("so-netns-cookie") || IS("so-cookie-highbits") || IS("so-peerpidfd") || IS("so-napi-id") ||
        IS("so-future-option") || IS("getsockopt-sndbuf") || IS("getsockopt-error") || IS("getsockopt-protocol") ||
        IS("getsockopt-tcp-nodelay")) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0) return report_errno(errno);
        uint64_t v = 0;
        socklen_t len = sizeof v;
        long level = SOL_SOCKET, name = 57 /* SO_COOKIE */;
        if (IS("so-netns-cookie")) name = 71 /* SO_NETNS_COOKIE */;
        if (IS("so-peerpidfd")) name = 77 /* SO_PEERPIDFD */;
        if (IS("so-napi-id")) name = 56 /* SO_INCOMING_NAPI_ID */;
        if (IS("so-future-option")) name = 200;
        if (IS("getsockopt-error")) name = SO_ERROR;
        if (IS("getsockopt-protocol")) name = 38 /* SO_PROTOCOL */;
        if (IS("so-cookie-highbits")) { level |= 0x100000000L; name |= 0x700000000L; }
        if (IS("getsockopt-sndbuf")) name = SO_SNDBUF;
        if (IS("getsockopt-tcp-nodelay")) { level = IPPROTO_TCP; name = 1; /* TCP_NODELAY */ }
        return report(syscall(SYS_getsockopt, s, level, name, &v, &len));
    }
    // SCM_PIDFD: with SO_PASSPIDFD (76, Linux 6.5) set, every message received on a Unix
    // socket carries a pidfd of its sender, whose inode number counts the host's processes.
    // The probe asks for it on a socketpair of its own, sends itself a byte and prints the
    // pidfd's inode number when one arrives. Harmless options must still pass.
    if (IS("so-passpidfd") || IS("setsockopt-future-option") || IS("setsockopt-reuseaddr") || IS("setsockopt-keepalive") ||
        IS("setsockopt-rcvtimeo") || IS("setsockopt-tcp-nodelay")) {
        int sv[2];
        if (IS("so-passpidfd") && socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0) return report_errno(errno);
        if (!IS("so-passpidfd")) { sv[0] = socket(AF_INET, SOCK_STREAM, 0); if (sv[0] < 0) return report_errno(errno); }
        int one = 1;
        struct timeval tv = { 5, 0 };
        long level = SOL_SOCKET, name = 76 /* SO_PASSPIDFD */;
        const void *value = &one;
        socklen_t len = sizeof one;
        if (IS("setsockopt-future-option")) name = 200;
        if (IS("setsockopt-reuseaddr")) name = SO_REUSEADDR;
        if (IS("setsockopt-keepalive")) name = SO_KEEPALIVE;
        if (IS("setsockopt-rcvtimeo")) { name = SO_RCVTIMEO; value = &tv; len = sizeof tv; }
        if (IS("setsockopt-tcp-nodelay")) { level = IPPROTO_TCP; name = 1; }
        if (syscall(SYS_setsockopt, sv[0], level, name, value, len) != 0) return report_errno(errno);
        if (!IS("so-passpidfd")) return report(0);
        if (send(sv[1], "x", 1, 0) != 1) return report_errno(errno);
        char byte, control[CMSG_SPACE(sizeof(int))];
        struct iovec iov = { &byte, 1 };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control };
        if (recvmsg(sv[0], &msg, 0) != 1) return report_errno(errno);
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == 0x04 /* SCM_PIDFD */) {
                int fd;
                memcpy(&fd, CMSG_DATA(c), sizeof fd);
                struct stat st;
                if (fstat(fd, &st) != 0) return report_errno(errno);
                printf("ok %llu\n", (unsigned long long)st.st_ino);
                return 0;
            }
        }
        printf("ok no-pidfd\n");
        return 0;
    }
    // prctl and fcntl by allowlist: options nobody's runtime asks (core-scheduling cookies,
    // dnotify on a shared directory, leases) and ones a later kernel adds are refused; the
    // ordinary ones pass. The raw syscall carries garbage above the 32 bits the kernel reads.
    if (IS("prctl-sched-core")) return report(syscall(SYS_prctl, 62 /* PR_SCHED_CORE */, 0 /* GET */, 0, 0 /* PIDTYPE_PID */, 0));
    if (IS("prctl-future-option")) return report(syscall(SYS_prctl, 0x700000000L | 200, 0, 0, 0, 0));
    if (IS("prctl-set-name")) return report(syscall(SYS_prctl, 15 /* PR_SET_NAME */, "probe-thread", 0, 0, 0));
    if (IS("prctl-set-vma")) {
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        long r = syscall(SYS_prctl, 0x53564d41 /* PR_SET_VMA */, 0 /* ANON_NAME */, p, 4096, "probe");
        // Kernels built without CONFIG_ANON_VMA_NAME answer EINVAL: the filter let it through.
        return report(r != 0 && errno == EINVAL ? 0 : r);
    }
    if (IS("fcntl-notify") || IS("fcntl-setlease") || IS("fcntl-future") || IS("fcntl-ofd-lock") || IS("fcntl-pipe-size")) {
        int fd = IS("fcntl-notify") ? open("/tmp", O_RDONLY | O_DIRECTORY) : open("/tmp/probe-fcntl", O_RDWR | O_CREAT, 0600);
        if (fd < 0) return report_errno(errno);
        if (IS("fcntl-notify")) return report(syscall(SYS_fcntl, fd, 1026 /* F_NOTIFY */, 0x1 /* DN_ACCESS */));
        if (IS("fcntl-setlease")) return report(syscall(SYS_fcntl, fd, 1024 /* F_SETLEASE */, F_RDLCK));
        if (IS("fcntl-future")) return report(syscall(SYS_fcntl, fd, 0x700000000L | 2000, 0));
        if (IS("fcntl-pipe-size")) {
            int pfd[2];
            if (pipe(pfd) != 0) return report_errno(errno);
            long r = syscall(SYS_fcntl, pfd[0], 1031 /* F_SETPIPE_SZ */, 65536);
            return report(r > 0 ? 0 : r);
        }
        struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
        return report(syscall(SYS_fcntl, fd, 37 /* F_OFD_SETLK */, &fl));
    }
    if (IS("sched-setaffinity")) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(0, &set);
        return report(sched_setaffinity(0, sizeof set, &set));
    }
    if (IS("socketpair-unix") || IS("socketpair-inet")) {
        int sv[2];
        return report(socketpair(IS("socketpair-unix") ? AF_UNIX : AF_INET, SOCK_STREAM, 0, sv));
    }
    if (IS("kill") && a2) return report(kill((pid_t)atol(a2), a3 ? atoi(a3) : 0));
    if (IS("connect") && a2 && a3) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (s < 0) return report_errno(errno);
        struct sockaddr_in sa;
        memset(&sa, 0, sizeof sa);
        sa.sin_family = AF_INET;
        sa.sin_port = htons((uint16_t)atoi(a3));
        inet_pton(AF_INET, a2, &sa.sin_addr);
        return report(connect(s, (struct sockaddr *)&sa, sizeof sa));
    }
    if (IS("forkbomb")) return forkbomb(a2 ? atol(a2) : 100000);
    if (IS("memhog")) return memhog(a2 ? atol(a2) : 4096);
    if (IS("fill") && a2) return fill(a2);
    if (IS("sigterm-tree") && a2) return sigterm_tree(argv);
    if (IS("sleep-forever")) {
        signal(SIGTERM, SIG_IGN);
        for (;;) pause();
    }
    if (IS("syscall-bench") && a2) {
        // ns per getppid over N calls; with "trivial", first install a one-instruction
        // allow-all filter, which measures the kernel's fixed cost of having any filter.
        static struct sock_filter prog_buf[4096];
        struct sock_fprog prog = {0, prog_buf};
        if (a3 && strcmp(a3, "trivial") == 0) {
            prog_buf[0] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
            prog.len = 1;
        } else if (a3) {
            // a file holding an exported program: an entry of autoharness's filter cache (key
            // text, NUL, the program's length as 8 bytes little-endian, the program, an 8-byte
            // hash: RootOwnedCache.swift)
            static unsigned char file[1 << 16];
            int fd = open(a3, O_RDONLY);
            ssize_t n = fd < 0 ? -1 : read(fd, file, sizeof file);
            if (n <= 0) return report_errno(errno);
            unsigned char *nul = memchr(file, 0, (size_t)n);
            if (!nul || (size_t)(file + n - nul) < 1 + 8 + 8) return report_errno(EINVAL);
            uint64_t len = 0;
            for (int i = 7; i >= 0; i--) len = len << 8 | nul[1 + i];
            if (len != (uint64_t)(file + n - (nul + 1 + 8 + 8)) || len % sizeof(struct sock_filter) || len > sizeof prog_buf)
                return report_errno(EINVAL);
            prog.len = (unsigned short)(len / sizeof(struct sock_filter));
            memcpy(prog_buf, nul + 1 + 8, len);
        }
        if (prog.len && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0))
            return report_errno(errno);
        long n = atol(a2);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long i = 0; i < n; i++) syscall(SYS_getppid);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / (double)n;
        printf("RESULT syscall-bench ok %.1f\n", ns);
        return 0;
    }
    if (IS("flood") && a2) {  // COUNT refused calls spread over DISTINCT unknown syscall numbers
        long n = atol(a2), distinct = a3 ? atol(a3) : 1;
        for (long i = 0; i < n; i++) syscall(1000 + (i % distinct));
        printf("RESULT flood ok %ld\n", n);
        return 0;
    }
    if (IS("stack-filter")) {  // install our own errno filter (would hide later calls from the audit)
        struct sock_filter f[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
        struct sock_fprog prog = {1, f};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return report_errno(errno);
        return report(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog));
    }
    if (IS("prctl-seccomp")) {
        struct sock_filter f[] = {BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)};
        struct sock_fprog prog = {1, f};
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) return report_errno(errno);
        return report(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0));
    }
    if (IS("exit") && a2) return atoi(a2);
    if (IS("raise") && a2) {
        raise(atoi(a2));
        return 3;
    }
    fprintf(stderr, "sandbox-probe: unknown action or missing argument: %s\n", action);
    return 2;
}
