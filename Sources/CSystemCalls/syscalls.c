// System calls Swift cannot reach through the Glibc module (hidden or variadic
// declarations), for the supervisor. Nothing here runs between fork and exec.
#include "ahs_syscalls.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/socket.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/vfs.h>
#include <sys/auxv.h>
#include <gnu/libc-version.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <net/if.h>
#include <sys/un.h>
#include <sys/sysmacros.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <stddef.h>
#include <spawn.h>
#include <stdio.h>
#include <linux/bpf.h>
#include <linux/loop.h>

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif

int ahs_memfd(const char *name) { return memfd_create(name, MFD_CLOEXEC); }

const char *ahs_libc_version(void) { return gnu_get_libc_version(); }

int ahs_statically_linked(void) { return getauxval(AT_BASE) == 0; }

long ahs_filesystem_type(int fd) {
    struct statfs s;
    return fstatfs(fd, &s) < 0 ? -1 : (long)s.f_type;
}

int ahs_readonly_clone(const char *path) {
    int t = open_tree(AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (t < 0) return -1;
    struct mount_attr a;
    memset(&a, 0, sizeof a);
    a.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC;
    if (mount_setattr(t, "", AT_EMPTY_PATH, &a, sizeof a) < 0) {
        int e = errno;
        close(t);
        errno = e;
        return -1;
    }
    return t;
}

int ahs_open_path(const char *path) { return open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC); }

int ahs_execveat_fd(int fd, char *const argv[], char *const envp[]) {
    return (int)syscall(SYS_execveat, fd, "", argv, envp, AT_EMPTY_PATH);
}

int ahs_accept_cloexec(int listener) { return accept4(listener, NULL, NULL, SOCK_CLOEXEC); }

int ahs_peer_credentials(int fd, int *pid, unsigned *uid) {
    struct ucred c;
    socklen_t len = sizeof c;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) < 0) return -1;
    *pid = c.pid;
    *uid = c.uid;
    return 0;
}

int ahs_landlock_abi(void) {
    // LANDLOCK_CREATE_RULESET_VERSION (1 << 0): no ruleset, just the ABI version.
    long r = syscall(SYS_landlock_create_ruleset, NULL, 0, 1U);
    return r < 0 ? -errno : (int)r;
}

int ahs_pidfd_open(int pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

int ahs_pidfd_kill(int pidfd, int sig) { return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0); }

int ahs_make_netns(int home, int *stranded) {
    *stranded = 0;
    // Namespaces belong to threads: only this thread moves, and only for these three calls.
    if (unshare(CLONE_NEWNET) < 0) return -errno;
    int fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    int e = errno;
    if (setns(home, CLONE_NEWNET) < 0) {
        *stranded = 1;
        if (fd >= 0) close(fd);
        return -errno;
    }
    return fd >= 0 ? fd : -e;
}

// PROCMAP_QUERY (<linux/fs.h> since 6.11), spelled out: build hosts' headers may predate it.
// The kernel accepts this size (the first version of the struct) and fills what it knows.
struct ahs_procmap_query {
    uint64_t size, query_flags, query_addr;
    uint64_t vma_start, vma_end, vma_flags, vma_page_size, vma_offset, inode;
    uint32_t dev_major, dev_minor, vma_name_size, build_id_size;
    uint64_t vma_name_addr, build_id_addr;
};
#define AHS_PROCMAP_QUERY _IOWR('f', 17, struct ahs_procmap_query)
#define AHS_PROCMAP_QUERY_VMA_WRITABLE 0x02

int ahs_range_writable(int maps_fd, unsigned long long addr, unsigned long long len) {
    if (len == 0 || addr > UINT64_MAX - len) return 0;
    uint64_t next = addr, end = addr + len;
    // Each answer is the mapping covering `next`, and only if it is writable (ENOENT
    // otherwise); the range may span several adjoining mappings.
    for (int i = 0; i < 64 && next < end; i++) {
        struct ahs_procmap_query q;
        memset(&q, 0, sizeof q);
        q.size = sizeof q;
        q.query_flags = AHS_PROCMAP_QUERY_VMA_WRITABLE;
        q.query_addr = next;
        if (ioctl(maps_fd, AHS_PROCMAP_QUERY, &q) < 0) {
            if (errno == ENOTTY || errno == EINVAL) return -1;
            return 0;  // ENOENT: unmapped or not writable; ESRCH: the process is gone
        }
        if (q.vma_start > next || q.vma_end <= next) return 0;
        next = q.vma_end;
    }
    return next >= end ? 1 : 0;
}

// SECCOMP_IOCTL_NOTIF_SET_FLAGS and its one flag (<linux/seccomp.h> since 6.6), spelled out
// for older build hosts' headers.
#define AHS_SECCOMP_IOCTL_NOTIF_SET_FLAGS _IOW('!', 4, uint64_t)
#define AHS_SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP 1ULL

int ahs_seccomp_sync_wakeup(int listener) {
    return ioctl(listener, AHS_SECCOMP_IOCTL_NOTIF_SET_FLAGS, AHS_SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP);
}

static int unix_address(const char *path, struct sockaddr_un *a) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof a->sun_path) { errno = ENAMETOOLONG; return -1; }
    memcpy(a->sun_path, path, n);
    return 0;
}

int ahs_unix_listen(const char *dir, const char *name, unsigned mode, int backlog) {
    char tmp[4096], at[4096], final[4096];
    struct sockaddr_un a;
    if ((size_t)snprintf(final, sizeof final, "%s/%s", dir, name) >= sizeof final ||
        (size_t)snprintf(tmp, sizeof tmp, "%s/.%s.XXXXXX", dir, name) >= sizeof tmp ||
        unix_address(final, &a) < 0) { errno = ENAMETOOLONG; return -1; }
    // Bound in a directory of our own (mkdtemp: 0700), where the mode is set by path with no
    // one else able to swap the file, whatever the umask; then renamed into place, never over
    // a file there. The umask is not touched: it is the whole process's.
    if (!mkdtemp(tmp)) return -1;
    int fd = -1, saved = 0;
    if ((size_t)snprintf(at, sizeof at, "%s/s", tmp) >= sizeof at || unix_address(at, &a) < 0) { saved = ENAMETOOLONG; goto out; }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) { saved = errno; goto out; }
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || chmod(at, mode) < 0 || listen(fd, backlog) < 0 ||
        renameat2(AT_FDCWD, at, AT_FDCWD, final, RENAME_NOREPLACE) < 0) {
        saved = errno;
        unlink(at);
        close(fd);
        fd = -1;
    }
out:
    rmdir(tmp);
    if (fd < 0) errno = saved;
    return fd;
}

int ahs_unix_listener_path(int fd, char *path, unsigned long capacity) {
    int value = 0;
    socklen_t len = sizeof value;
    if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &value, &len) < 0) return -1;
    if (value != AF_UNIX) { errno = EAFNOSUPPORT; return -1; }
    len = sizeof value;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &value, &len) < 0) return -1;
    if (value != SOCK_STREAM) { errno = ESOCKTNOSUPPORT; return -1; }
    len = sizeof value;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &value, &len) < 0) return -1;
    if (!value) { errno = EINVAL; return -1; }
    struct sockaddr_un a;
    socklen_t alen = sizeof a;
    memset(&a, 0, sizeof a);
    if (getsockname(fd, (struct sockaddr *)&a, &alen) < 0) return -1;
    // A name that filled sun_path has no NUL, and the kernel says so by a length past the
    // structure: such a path (and anything longer) is refused, never read past its end.
    if (alen >= sizeof a) { errno = ENAMETOOLONG; return -1; }
    // An abstract address (a leading NUL) or none: no file whose owner and mode say who may
    // connect.
    size_t n = alen > offsetof(struct sockaddr_un, sun_path) ? alen - offsetof(struct sockaddr_un, sun_path) : 0;
    if (n == 0 || a.sun_path[0] != '/') { errno = EADDRNOTAVAIL; return -1; }
    size_t plen = strnlen(a.sun_path, n);
    if (plen + 1 > capacity) { errno = ENAMETOOLONG; return -1; }
    memcpy(path, a.sun_path, plen);
    path[plen] = 0;
    return 0;
}

int ahs_unix_adopt_listener(int fd, int backlog) {
    int flags = fcntl(fd, F_GETFD);
    if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0) return -1;
    flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return -1;
    return listen(fd, backlog);
}

int ahs_unix_bound_file(int fd, unsigned long long *dev, unsigned *ino) {
    struct stat st;
    if (fstat(fd, &st) < 0) return -1;
    int nl = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0) return -1;
    struct {
        struct nlmsghdr h;
        struct unix_diag_req r;
    } req;
    memset(&req, 0, sizeof req);
    req.h.nlmsg_len = sizeof req;
    req.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.h.nlmsg_flags = NLM_F_REQUEST;
    req.r.sdiag_family = AF_UNIX;
    req.r.udiag_states = ~0U;
    req.r.udiag_ino = (unsigned)st.st_ino;
    req.r.udiag_show = UDIAG_SHOW_VFS;
    req.r.udiag_cookie[0] = req.r.udiag_cookie[1] = ~0U;  // no cookie: look up by inode
    struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
    if (sendto(nl, &req, sizeof req, 0, (struct sockaddr *)&kernel, sizeof kernel) < 0) {
        int saved = errno;
        close(nl);
        errno = saved;
        return -1;
    }
    long buf[1024];
    ssize_t len = recv(nl, buf, sizeof buf, 0);
    int saved = errno;
    close(nl);
    if (len < 0) { errno = saved; return -1; }
    for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)len); h = NLMSG_NEXT(h, len)) {
        if (h->nlmsg_type == NLMSG_ERROR) {
            struct nlmsgerr *e = NLMSG_DATA(h);
            errno = e->error ? -e->error : ENOENT;
            return -1;
        }
        if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY) continue;
        struct unix_diag_msg *m = NLMSG_DATA(h);
        if (m->udiag_ino != (unsigned)st.st_ino) continue;
        int attrs = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof *m));
        for (struct rtattr *at = (struct rtattr *)(m + 1); RTA_OK(at, attrs); at = RTA_NEXT(at, attrs)) {
            if (at->rta_type != UNIX_DIAG_VFS || RTA_PAYLOAD(at) < sizeof(struct unix_diag_vfs)) continue;
            struct unix_diag_vfs *v = RTA_DATA(at);
            // The kernel's own dev_t (20 bits of minor), as stat(2) encodes it.
            *dev = makedev(v->udiag_vfs_dev >> 20, v->udiag_vfs_dev & 0xfffff);
            *ino = v->udiag_vfs_ino;
            return 0;
        }
        // Bound to no file (abstract, or not bound).
        errno = EADDRNOTAVAIL;
        return -1;
    }
    errno = ENOENT;
    return -1;
}

int ahs_unix_connect(const char *path) {
    struct sockaddr_un a;
    if (unix_address(path, &a) < 0) return -1;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

long ahs_send_with_fds(int sock, const void *buf, unsigned long len, const int *fds, int nfds) {
    struct iovec iov = { (void *)buf, len };
    struct msghdr m = { 0 };
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    char control[CMSG_SPACE(sizeof(int) * 8)];
    if (nfds > 8) { errno = EINVAL; return -1; }
    if (nfds > 0) {
        memset(control, 0, sizeof control);
        m.msg_control = control;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
    }
    ssize_t n;
    do { n = sendmsg(sock, &m, MSG_NOSIGNAL); } while (n < 0 && errno == EINTR);
    return n;
}

long ahs_recv_with_fds(int sock, void *buf, unsigned long len, int *fds, int maxfds, int *nfds) {
    struct iovec iov = { buf, len };
    struct msghdr m = { 0 };
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    char control[CMSG_SPACE(sizeof(int) * 8)];
    if (maxfds > 8) { errno = EINVAL; return -1; }
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    *nfds = 0;
    ssize_t n;
    do { n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC); } while (n < 0 && errno == EINTR);
    if (n < 0) return -1;
    int bad = (m.msg_flags & MSG_CTRUNC) != 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) { bad = 1; continue; }
        size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
            if (*nfds < maxfds) fds[(*nfds)++] = fd;
            else { close(fd); bad = 1; }
        }
    }
    if (bad) {
        for (int i = 0; i < *nfds; i++) close(fds[i]);
        *nfds = 0;
        errno = EBADMSG;
        return -1;
    }
    return n;
}

int ahs_unshare_fs(void) { return unshare(CLONE_FS); }

int ahs_detached_directory(void) {
    int fs = (int)syscall(SYS_fsopen, "tmpfs", 1 /* FSOPEN_CLOEXEC */);
    if (fs < 0) return -1;
    // 6: FSCONFIG_CMD_CREATE; 1: FSCONFIG_SET_STRING.
    if (syscall(SYS_fsconfig, fs, 1, "size", "4k", 0) < 0 || syscall(SYS_fsconfig, fs, 6, NULL, NULL, 0) < 0) {
        int saved = errno;
        close(fs);
        errno = saved;
        return -1;
    }
    // 1: FSMOUNT_CLOEXEC; read-only, nosuid, nodev, noexec (0x1 | 0x2 | 0x4 | 0x8).
    int m = (int)syscall(SYS_fsmount, fs, 1, 0xf);
    int saved = errno;
    close(fs);
    errno = saved;
    return m;
}

int ahs_cgroup_bpf_effective(int cgroup_fd, unsigned attach_type, unsigned *ids, unsigned *count)
{
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.query.target_fd = (uint32_t)cgroup_fd;
    attr.query.attach_type = attach_type;
    attr.query.query_flags = BPF_F_QUERY_EFFECTIVE;
    attr.query.prog_ids = (uint64_t)(uintptr_t)ids;
    attr.query.prog_cnt = *count;
    long r = syscall(SYS_bpf, BPF_PROG_QUERY, &attr, sizeof attr);
    int err = errno;
    *count = attr.query.prog_cnt;
    return r < 0 ? -err : 0;
}

int ahs_cloexec_pipe(int fds[2]) { return pipe2(fds, O_CLOEXEC); }

int ahs_statfs_sizes_constant(int fd, unsigned char *out, int cap, unsigned long long bytes, unsigned long long inodes) {
    struct statfs s;
    if (cap < (int)sizeof s) return -EINVAL;
    if (fstatfs(fd, &s) < 0) return -errno;
    unsigned long long block = s.f_bsize > 0 ? (unsigned long long)s.f_bsize : 1;
    s.f_blocks = s.f_bfree = s.f_bavail = bytes / block;
    s.f_files = s.f_ffree = inodes;
    memcpy(out, &s, sizeof s);
    return (int)sizeof s;
}

int ahs_open_path_in_root(int root, const char *path) {
    // struct open_how: flags, mode, resolve (linux/openat2.h); RESOLVE_IN_ROOT 0x10,
    // RESOLVE_NO_MAGICLINKS 0x02.
    struct { unsigned long long flags, mode, resolve; } how = {O_PATH | O_CLOEXEC, 0, 0x10 | 0x02};
    return (int)syscall(437 /* SYS_openat2 */, root, path, &how, sizeof how);
}

int ahs_open_directory_beneath(int dir, const char *path) {
    // RESOLVE_NO_XDEV 0x01, RESOLVE_NO_MAGICLINKS 0x02, RESOLVE_NO_SYMLINKS 0x04, RESOLVE_BENEATH 0x08.
    struct { unsigned long long flags, mode, resolve; } how = {O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0, 0x01 | 0x02 | 0x04 | 0x08};
    return (int)syscall(437 /* SYS_openat2 */, dir, path, &how, sizeof how);
}

long ahs_copy_range(int in, long long *in_offset, int out, long long *out_offset, unsigned long len) {
    return (long)syscall(SYS_copy_file_range, in, (loff_t *)in_offset, out, (loff_t *)out_offset, len, 0);
}
long ahs_flistxattr(int fd, char *list, unsigned long size) { return (long)flistxattr(fd, list, size); }
long ahs_fgetxattr(int fd, const char *name, void *value, unsigned long size) { return (long)fgetxattr(fd, name, value, size); }
int ahs_fsetxattr(int fd, const char *name, const void *value, unsigned long size) { return fsetxattr(fd, name, value, size, 0); }

int ahs_setns_net(int fd) { return setns(fd, CLONE_NEWNET) == 0 ? 0 : -errno; }

int ahs_loopback_up(void) {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -errno;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    memcpy(ifr.ifr_name, "lo", 3);
    int r = ioctl(s, SIOCGIFFLAGS, &ifr);
    if (r == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        r = ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    int e = errno;
    close(s);
    return r == 0 ? 0 : -e;
}

int ahs_spawn_session(const char *path, char *const argv[], char *const envp[], const char *cwd,
                      int out, int err, int *pid) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int e = posix_spawn_file_actions_init(&actions);
    if (e) return e;
    e = posix_spawnattr_init(&attributes);
    if (e) { posix_spawn_file_actions_destroy(&actions); return e; }
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    if (!e) e = posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    if (!e) e = posix_spawn_file_actions_adddup2(&actions, out, 1);
    if (!e) e = posix_spawn_file_actions_adddup2(&actions, err, 2);
    if (!e && cwd && *cwd) e = posix_spawn_file_actions_addchdir_np(&actions, cwd);
    if (!e) e = posix_spawnattr_setsigmask(&attributes, &none);
    if (!e) e = posix_spawnattr_setsigdefault(&attributes, &defaults);
    if (!e) e = posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    if (!e) e = posix_spawn(pid, path, &actions, &attributes, argv, envp);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return e;
}

int ahs_loop_attach(int backing, unsigned block_size, int *index) {
    int control = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
    if (control < 0) return -errno;
    int result = -EBUSY;
    /* Another process may take the free device between the question and the configure: the
       configure then fails with EBUSY and the next free one is asked for. */
    for (int attempt = 0; attempt < 16; attempt++) {
        int n = ioctl(control, LOOP_CTL_GET_FREE);
        if (n < 0) { result = -errno; break; }
        char path[32];
        snprintf(path, sizeof path, "/dev/loop%d", n);
        int fd = open(path, O_RDWR | O_CLOEXEC);
        if (fd < 0) { result = -errno; break; }
        struct loop_config config;
        memset(&config, 0, sizeof config);
        config.fd = (unsigned)backing;
        config.block_size = block_size;
        config.info.lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO;
        if (ioctl(fd, LOOP_CONFIGURE, &config) == 0) {
            *index = n;
            result = fd;
            break;
        }
        result = -errno;
        close(fd);
        if (result != -EBUSY) break;
    }
    close(control);
    return result;
}

int ahs_ptrace_detach(int pid, int sig) {
    return syscall(SYS_ptrace, 17 /* PTRACE_DETACH */, pid, 0, sig) < 0 ? -errno : 0;
}
