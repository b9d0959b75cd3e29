// The fanotify watches on a verifier's file systems, for the supervisor: who changed its reward
// files (the logs directory), and what it opened and executed of the task's working copy (/app).
// Nothing here runs between fork and exec.
#include "ahs_syscalls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------
// Who changed a verifier's reward files: fanotify on the logs directory's own file system.

enum { AHS_HANDLE_CAP = 132 };

/// `fh` (a struct file_handle) as type then bytes; 0 when it does not fit.
static unsigned put_handle(const struct file_handle *fh, unsigned char *out) {
    if (fh->handle_bytes + 4 > AHS_HANDLE_CAP) return 0;
    memcpy(out, &fh->handle_type, 4);
    memcpy(out + 4, fh->f_handle, fh->handle_bytes);
    return fh->handle_bytes + 4;
}

int ahs_file_handle(int dirfd, const char *name, unsigned char *out, unsigned cap) {
    union {
        struct file_handle fh;
        unsigned char room[sizeof(struct file_handle) + 128];
    } h;
    int mount_id;
    h.fh.handle_bytes = 128;
    int flags = name[0] ? 0 : AT_EMPTY_PATH;
    if (name_to_handle_at(dirfd, name, &h.fh, &mount_id, flags) < 0) return -1;
    if (cap < AHS_HANDLE_CAP) { errno = EINVAL; return -1; }
    unsigned n = put_handle(&h.fh, out);
    if (!n) { errno = EOVERFLOW; return -1; }
    return (int)n;
}

int ahs_change_watch(const char *dir, unsigned char *top, unsigned *top_len) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    int n = ahs_file_handle(fd, "", top, AHS_HANDLE_CAP);
    int e = errno;
    close(fd);
    if (n < 0) { errno = e; return -1; }
    *top_len = (unsigned)n;
    unsigned base = FAN_CLASS_NOTIF | FAN_CLOEXEC | FAN_NONBLOCK | FAN_REPORT_DFID_NAME | FAN_REPORT_FID;
    // The target of a create or move by its own handle too (Linux 5.17); without it those
    // are known by name alone.
    int group = fanotify_init(base | FAN_REPORT_TARGET_FID, O_RDONLY | O_CLOEXEC);
    if (group < 0 && errno == EINVAL) group = fanotify_init(base, O_RDONLY | O_CLOEXEC);
    if (group < 0) return -1;
    // Opens too: a write through a shared mapping raises no FAN_MODIFY, and the close that
    // would name its writer can be put off (a descriptor in flight in a Unix socket that a
    // garbage cycle holds is closed by a kernel worker, later); the open happens at once.
    uint64_t mask = FAN_OPEN | FAN_MODIFY | FAN_ATTRIB | FAN_CLOSE_WRITE | FAN_MOVED_FROM | FAN_MOVED_TO | FAN_CREATE |
                    FAN_DELETE | FAN_DELETE_SELF | FAN_MOVE_SELF | FAN_ONDIR;
    if (fanotify_mark(group, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, mask, AT_FDCWD, dir) < 0) {
        e = errno;
        close(group);
        errno = e;
        return -1;
    }
    return group;
}

int ahs_changes_read(int group, const unsigned char *top, unsigned top_len, struct ahs_change *out, int max) {
    // Whole events only: the kernel never splits one across reads, and one is far smaller.
    static __thread unsigned char buf[8192] __attribute__((aligned(8)));
    // Every event read is returned: room for as many as the smallest fit in the buffer.
    if (max < (int)(sizeof buf / sizeof(struct fanotify_event_metadata))) { errno = EINVAL; return -1; }
    ssize_t len = read(group, buf, sizeof buf);
    if (len < 0) return errno == EAGAIN ? 0 : -1;
    int count = 0;
    const struct fanotify_event_metadata *m = (const struct fanotify_event_metadata *)buf;
    while (count < max && FAN_EVENT_OK(m, len)) {
        struct ahs_change *c = &out[count++];
        memset(c, 0, sizeof *c);
        c->mask = m->mask;
        c->pid = m->pid;
        if (m->fd >= 0) close(m->fd);
        const unsigned char *p = (const unsigned char *)m + m->metadata_len;
        const unsigned char *end = (const unsigned char *)m + m->event_len;
        while (p + sizeof(struct fanotify_event_info_header) <= end) {
            const struct fanotify_event_info_header *h = (const void *)p;
            if (h->len < sizeof *h || p + h->len > end) break;
            if (h->info_type == FAN_EVENT_INFO_TYPE_FID || h->info_type == FAN_EVENT_INFO_TYPE_DFID_NAME ||
                h->info_type == FAN_EVENT_INFO_TYPE_DFID) {
                const struct fanotify_event_info_fid *f = (const void *)p;
                const struct file_handle *fh = (const void *)f->handle;
                // The record must hold its handle whole (the kernel's always does; checked
                // anyway, so nothing here reads past a record).
                size_t fixed = sizeof *f + sizeof(struct file_handle);
                if (h->len < fixed || fh->handle_bytes > h->len - fixed) break;
                unsigned char handle[AHS_HANDLE_CAP];
                unsigned n = put_handle(fh, handle);
                if (h->info_type == FAN_EVENT_INFO_TYPE_FID) {
                    memcpy(c->object, handle, n);
                    c->object_len = n;
                } else {
                    c->in_top = n && n == top_len && memcmp(handle, top, n) == 0;
                    if (h->info_type == FAN_EVENT_INFO_TYPE_DFID_NAME) {
                        const char *name = (const char *)fh->f_handle + fh->handle_bytes;
                        const unsigned char *record_end = p + h->len;
                        size_t room = (size_t)(record_end - (const unsigned char *)name);
                        size_t k = strnlen(name, room < sizeof c->name ? room : sizeof c->name - 1);
                        memcpy(c->name, name, k);
                        c->name[k] = 0;
                    }
                }
            }
            p += h->len;
        }
        m = FAN_EVENT_NEXT(m, len);
    }
    return count;
}

// ---------------------------------------------------------------------------------------
// What a verifier opened and executed of the task's working copy: fanotify on /app's file
// system. As permission events where the kernel has them: the opener is held until its path
// and program are read, so it can neither rename the file nor exec another program first.

int ahs_open_watch(const char *dir, int *blocking) {
    static const struct { unsigned cls; uint64_t mask; } kinds[] = {
        {FAN_CLASS_CONTENT, FAN_OPEN_PERM | FAN_OPEN_EXEC_PERM},
        {FAN_CLASS_NOTIF, FAN_OPEN | FAN_OPEN_EXEC},
    };
    int e = EINVAL;
    for (unsigned k = 0; k < 2; k++) {
        int group = fanotify_init(kinds[k].cls | FAN_CLOEXEC | FAN_NONBLOCK, O_RDONLY | O_LARGEFILE | O_CLOEXEC);
        if (group < 0) { e = errno; continue; }
        if (fanotify_mark(group, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, kinds[k].mask, AT_FDCWD, dir) == 0) {
            *blocking = k == 0;
            return group;
        }
        e = errno;
        close(group);
        // Only a kernel without permission events is worth the second try.
        if (e != EINVAL && e != EPERM) break;
    }
    errno = e;
    return -1;
}

int ahs_guard_filesystem(const char *dir) {
    // FAN_REPORT_TID (0x100): the opener's thread, whose system call is read while it waits.
    int group = fanotify_init(FAN_CLASS_CONTENT | FAN_CLOEXEC | FAN_NONBLOCK | 0x100, O_RDONLY | O_LARGEFILE | O_CLOEXEC);
    if (group < 0) return -1;
    // Directories too: a descriptor of one opened through a link would let the names below
    // it be opened relatively, through no link of their own.
    if (fanotify_mark(group, FAN_MARK_ADD | FAN_MARK_FILESYSTEM, FAN_OPEN_PERM | FAN_OPEN_EXEC_PERM | FAN_ONDIR, AT_FDCWD, dir) < 0) {
        int e = errno;
        close(group);
        errno = e;
        return -1;
    }
    return group;
}

/// The NUL-terminated string at `address` in `tid`'s memory, into `out` (`cap` bytes): its
/// length, or -1 with errno (ENAMETOOLONG when no NUL came within `cap`).
static int read_string(int tid, unsigned long long address, char *out, size_t cap) {
    char mem[64];
    snprintf(mem, sizeof mem, "/proc/%d/mem", tid);
    int fd = open(mem, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t got = 0;
    while (got < cap) {
        // Up to the end of the page first: the next page may not be mapped.
        size_t room = 4096 - ((address + got) & 4095);
        if (room > cap - got) room = cap - got;
        ssize_t n = pread(fd, out + got, room, (off_t)(address + got));
        if (n <= 0) { int e = n < 0 ? errno : EFAULT; close(fd); errno = e; return -1; }
        void *nul = memchr(out + got, 0, (size_t)n);
        if (nul) { close(fd); return (int)((char *)nul - out); }
        got += (size_t)n;
    }
    close(fd);
    errno = ENAMETOOLONG;
    return -1;
}

/// The system call `tid` is in: its number and first arguments. A thread that queued its
/// event can still read as running for a moment (its wait begins after): read again, for up
/// to 50 ms. -1 with errno when it never shows one.
static int current_call(int tid, long *nr, unsigned long long a[6]) {
    char proc[64], text[512];
    snprintf(proc, sizeof proc, "/proc/%d/syscall", tid);
    for (int tries = 0; tries < 2500; tries++) {
        int fd = open(proc, O_RDONLY | O_CLOEXEC);
        if (fd < 0) return -1;
        ssize_t n = read(fd, text, sizeof text - 1);
        int e = errno;
        close(fd);
        if (n <= 0) { errno = n < 0 ? e : ENODATA; return -1; }
        text[n] = 0;
        // "NR ARG1 ... ARG6 SP PC" while the thread is in a system call.
        if (sscanf(text, "%ld %llx %llx %llx %llx %llx %llx", nr, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5]) >= 3) return 0;
        usleep(20);
    }
    errno = EBUSY;
    return -1;
}

/// Whether `tid`'s descriptor `n` is `file` (the same inode).
static int holds(int tid, long long n, int file) {
    char proc[64];
    snprintf(proc, sizeof proc, "/proc/%d/fd/%lld", tid, n);
    struct stat x, y;
    return stat(proc, &x) == 0 && fstat(file, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

/// The descriptor a name of the form /dev/fd/N, /dev/stdin (0), /proc/self/fd/N, ... reopens;
/// -1 for any other name.
static long long reopened_descriptor(const char *path) {
    if (!strcmp(path, "/dev/stdin")) return 0;
    if (!strcmp(path, "/dev/stdout")) return 1;
    if (!strcmp(path, "/dev/stderr")) return 2;
    static const char *const prefixes[] = {"/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"};
    for (unsigned i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        size_t k = strlen(prefixes[i]);
        if (strncmp(path, prefixes[i], k)) continue;
        char *end;
        long long n = strtoll(path + k, &end, 10);
        return (end != path + k && !*end && n >= 0) ? n : -1;
    }
    return -1;
}

int ahs_opened_by_name(int tid, int file, char *path, unsigned cap) {
    path[0] = 0;
    long nr = -1;
    unsigned long long a[6] = {0};
    if (current_call(tid, &nr, a) < 0) return -1;
    long long dirfd = AT_FDCWD;
    unsigned long long name = 0;
    // This machine's numbers (x86_64, aarch64): <sys/syscall.h>'s.
    if (0) {
#ifdef SYS_open
    } else if (nr == SYS_open) { name = a[0];
#endif
#ifdef SYS_creat
    } else if (nr == SYS_creat) { name = a[0];
#endif
    } else if (nr == SYS_execve) { name = a[0];
    } else if (nr == SYS_openat || nr == 437 /* SYS_openat2 */ || nr == SYS_execveat) { dirfd = (int)a[0]; name = a[1];
    } else {
        errno = ENOSYS;  // an open by no name of its own
        return -1;
    }
    if (read_string(tid, name, path, cap) < 0) return -1;
    // execveat of a descriptor itself (fexecve): the file was opened, and judged, before.
    if (!path[0]) {
        if (nr == SYS_execveat && dirfd >= 0 && holds(tid, dirfd, file)) return 1;
        errno = ENOENT;
        return -1;
    }
    // A reopen of a descriptor the opener holds of this very file (`cat /dev/stdin < FILE`):
    // that descriptor's own open was judged.
    long long reopened = reopened_descriptor(path);
    if (reopened >= 0) return holds(tid, reopened, file);
    // The name resolved again, as the opener's kernel walk began it (its root for an absolute
    // name, else its working directory or the directory descriptor), but through no link at all.
    // struct open_how: RESOLVE_NO_MAGICLINKS 0x02, RESOLVE_NO_SYMLINKS 0x04, RESOLVE_IN_ROOT 0x10.
    char proc[64];
    if (path[0] == '/') snprintf(proc, sizeof proc, "/proc/%d/root", tid);
    else if (dirfd == AT_FDCWD) snprintf(proc, sizeof proc, "/proc/%d/cwd", tid);
    else snprintf(proc, sizeof proc, "/proc/%d/fd/%lld", tid, dirfd);
    int base = open(proc, O_PATH | O_CLOEXEC);
    if (base < 0) return -1;
    struct { unsigned long long flags, mode, resolve; } how = {O_PATH | O_CLOEXEC, 0, 0x02 | 0x04 | (path[0] == '/' ? 0x10 : 0)};
    int again, e;
    // RESOLVE_IN_ROOT's `..` fails with EAGAIN while a rename runs anywhere: again.
    int tries = 0;
    do { again = (int)syscall(437 /* SYS_openat2 */, base, path, &how, sizeof how); e = errno; } while (again < 0 && e == EAGAIN && ++tries < 100);
    close(base);
    if (again < 0) {
        if (e == ELOOP || e == EXDEV) return 0;  // a link (or a magic one) on the way
        errno = e;
        return -1;
    }
    struct stat x, y;
    int same = fstat(again, &x) == 0 && fstat(file, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
    close(again);
    return same;
}

int ahs_fanotify_flush(int group) {
    // The path is not looked up for a flush; "/" keeps older kernels' checks content. Inode
    // marks (a guard's) are flushed on their own.
    int r = fanotify_mark(group, FAN_MARK_FLUSH | FAN_MARK_FILESYSTEM, 0, AT_FDCWD, "/");
    int e = errno;
    if (fanotify_mark(group, FAN_MARK_FLUSH, 0, AT_FDCWD, "/") < 0 && r == 0) return -1;
    errno = e;
    return r;
}

int ahs_opens_read(int group, struct ahs_open *out, int max) {
    static __thread unsigned char buf[4096] __attribute__((aligned(8)));
    if (max < (int)(sizeof buf / sizeof(struct fanotify_event_metadata))) { errno = EINVAL; return -1; }
    ssize_t len = read(group, buf, sizeof buf);
    if (len < 0) return errno == EAGAIN ? 0 : -1;
    int count = 0;
    const struct fanotify_event_metadata *m = (const struct fanotify_event_metadata *)buf;
    while (count < max && FAN_EVENT_OK(m, len)) {
        struct ahs_open *o = &out[count++];
        memset(o, 0, sizeof *o);
        o->mask = m->mask;
        o->pid = m->pid;
        if (m->fd >= 0) {
            char link[64];
            snprintf(link, sizeof link, "/proc/self/fd/%d", m->fd);
            ssize_t n = readlink(link, o->path, sizeof o->path - 1);
            o->path[n > 0 ? n : 0] = 0;
        }
        if (m->pid > 0) {
            char link[64], exe[4096];
            snprintf(link, sizeof link, "/proc/%d/exe", m->pid);
            ssize_t n = readlink(link, exe, sizeof exe - 1);
            if (n > 0) {
                exe[n] = 0;
                const char *base = strrchr(exe, '/');
                base = base ? base + 1 : exe;
                snprintf(o->exe, sizeof o->exe, "%s", base);
            }
            snprintf(link, sizeof link, "/proc/%d/cmdline", m->pid);
            int fd = open(link, O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                ssize_t got = read(fd, o->cmdline, sizeof o->cmdline);
                o->cmdline_len = got > 0 ? (int)got : 0;
                close(fd);
            }
        }
        // The file stays open, its opener held, for the caller to read (`ahs_open_done`).
        o->fd = m->fd;
        m = FAN_EVENT_NEXT(m, len);
    }
    return count;
}

int ahs_open_unwatched(int group, int blocking, int root, const char *path) {
    // O_PATH first: it raises no open event, and pins the inode the ignore mark goes on,
    // so the open that follows is of that inode whatever the path names by then. Beneath
    // `root` only, through no link and no other mount: the tree is one a sandbox can still
    // change, and a link it made must not lead this (root's) thread anywhere on the host.
    // struct open_how (linux/openat2.h): RESOLVE_NO_XDEV 0x01, RESOLVE_NO_MAGICLINKS 0x02,
    // RESOLVE_NO_SYMLINKS 0x04, RESOLVE_BENEATH 0x08.
    struct { unsigned long long flags, mode, resolve; } how = {O_PATH | O_NOFOLLOW | O_CLOEXEC, 0, 0x01 | 0x02 | 0x04 | 0x08};
    int pinned = (int)syscall(437 /* SYS_openat2 */, root, path, &how, sizeof how);
    if (pinned < 0) return -1;
    uint64_t mask = blocking ? (FAN_OPEN_PERM | FAN_OPEN_EXEC_PERM) : (FAN_OPEN | FAN_OPEN_EXEC);
    int fd = -1, e = 0;
    // Marked and opened through the descriptor's magic link (fanotify_mark takes no O_PATH
    // descriptor as its object).
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", pinned);
    if (fanotify_mark(group, FAN_MARK_ADD | FAN_MARK_IGNORED_MASK, mask, AT_FDCWD, link) == 0) {
        fd = open(link, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
        e = errno;
        (void)fanotify_mark(group, FAN_MARK_REMOVE | FAN_MARK_IGNORED_MASK, mask, AT_FDCWD, link);
    } else {
        e = errno;
    }
    close(pinned);
    errno = e;
    return fd;
}

void ahs_open_done(int group, struct ahs_open *o) {
    if (o->fd < 0) return;
    // A permission event's opener waits for this answer: allowed, unless refused (`deny`).
    if (o->mask & (FAN_OPEN_PERM | FAN_OPEN_EXEC_PERM)) {
        struct fanotify_response r = {.fd = o->fd, .response = o->deny ? FAN_DENY : FAN_ALLOW};
        ssize_t w;
        do { w = write(group, &r, sizeof r); } while (w < 0 && errno == EINTR);
    }
    close(o->fd);
    o->fd = -1;
}
