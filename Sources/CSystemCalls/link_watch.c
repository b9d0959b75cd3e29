// Where a symbolic link a sandboxed process is making would lead, judged by the supervisor
// while the caller waits in its symlink or symlinkat call (the seccomp notifier).
//
// A verifier's test can be led to make a link into its own answer key from what agent.py left
// (a tar member, a committed git link) and then compare the key with itself by `stat` alone
// (GNU diff, Python's filecmp), open it by O_PATH, or resolve the link first: no open of the key
// through a link is ever seen. The link itself is: its target is resolved here in the caller's
// view (its root, the directory the name is relative to), component by component, from the
// caller's root with RESOLVE_IN_ROOT, and judged to lead into a guarded directory when any
// prefix of the target reaches it (by its device: each guarded directory is a file system of its
// own), reaches procfs, passes a magic link, or is the root itself; or when a component of it is
// `proc`, or `fd`, `stdin`, `stdout`, `stderr` after `dev` (the supervisor's /proc/self is not
// the caller's, so such a target is judged by its name). A prefix that does not exist ends the
// walk, unless it is a link, whose own target is judged the same way.

#include "ahs_syscalls.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <unistd.h>

#define AHS_PROC_SUPER_MAGIC 0x9fa0
#define AHS_PATH 4096

static int open_in_root(int root, const char *path, int nofollow) {
    // struct open_how: flags, mode, resolve; RESOLVE_IN_ROOT 0x10, RESOLVE_NO_MAGICLINKS 0x02.
    struct { unsigned long long flags, mode, resolve; } how = {O_PATH | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0), 0, 0x10 | 0x02};
    return (int)syscall(437 /* SYS_openat2 */, root, path, &how, sizeof how);
}

static int same(const struct stat *a, const struct stat *b) { return a->st_dev == b->st_dev && a->st_ino == b->st_ino; }

// The path of directory `dir` below `root` ("" for the root itself), found by walking `..` and
// naming each directory in its parent: 0, or -errno (-EXDEV: not below root).
static int path_in_root(int root, int dir, char *out, size_t cap) {
    struct stat rs, cs;
    if (fstat(root, &rs) < 0) return -errno;
    char path[AHS_PATH] = "";
    int cur = fcntl(dir, F_DUPFD_CLOEXEC, 0);
    if (cur < 0) return -errno;
    int rc = 0;
    for (int depth = 0; depth < 256; depth++) {
        if (fstat(cur, &cs) < 0) { rc = -errno; break; }
        if (same(&cs, &rs)) break;
        int parent = openat(cur, "..", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (parent < 0) { rc = -errno; break; }
        struct stat ps;
        if (fstat(parent, &ps) < 0 || same(&ps, &cs)) { close(parent); rc = -EXDEV; break; }
        int listing = fcntl(parent, F_DUPFD_CLOEXEC, 0);
        DIR *d = listing >= 0 ? fdopendir(listing) : NULL;
        if (!d) { if (listing >= 0) close(listing); close(parent); rc = -EIO; break; }
        const char *found = NULL;
        char name[256];
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            struct stat es;
            if (fstatat(parent, e->d_name, &es, AT_SYMLINK_NOFOLLOW) == 0 && same(&es, &cs)) {
                snprintf(name, sizeof name, "%s", e->d_name);
                found = name;
                break;
            }
        }
        closedir(d);
        if (!found) { close(parent); rc = -ENOENT; break; }
        char next[AHS_PATH];
        if ((size_t)snprintf(next, sizeof next, "/%s%s", found, path) >= sizeof next) { close(parent); rc = -ENAMETOOLONG; break; }
        memcpy(path, next, sizeof path);
        close(cur);
        cur = parent;
    }
    close(cur);
    if (rc == 0 && (size_t)snprintf(out, cap, "%s", path) >= cap) rc = -ENAMETOOLONG;
    return rc;
}

static int named_magic(const char *path) {
    char copy[AHS_PATH];
    snprintf(copy, sizeof copy, "%s", path);
    int after_dev = 0;
    for (char *save = NULL, *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (!strcmp(c, "proc")) return 1;
        if (after_dev && (!strcmp(c, "fd") || !strcmp(c, "stdin") || !strcmp(c, "stdout") || !strcmp(c, "stderr"))) return 1;
        after_dev = !strcmp(c, "dev");
    }
    return 0;
}

struct guard { int root; struct stat root_st; dev_t devs[8]; int ndevs; };

// `target` (absolute, in the caller's view): 1 when it leads into a guarded directory, else 0.
static int judge(const struct guard *g, const char *target, int depth) {
    if (depth > 8 || named_magic(target)) return 1;
    char prefix[AHS_PATH];
    size_t len = strlen(target);
    if (len >= sizeof prefix) return 1;
    for (size_t i = 1; i <= len; i++) {
        if (i < len && target[i] != '/') continue;
        if (i < len && target[i - 1] == '/') continue;
        memcpy(prefix, target, i);
        prefix[i] = 0;
        int fd = open_in_root(g->root, prefix, 0);
        if (fd < 0) {
            if (errno == ELOOP || errno == EXDEV) return 1;
            if (errno != ENOENT) return 0;
            // Missing: a link (to somewhere the supervisor's view lacks) is judged by its target.
            int link = open_in_root(g->root, prefix, 1);
            if (link < 0) return 0;
            char to[AHS_PATH];
            ssize_t n = readlinkat(link, "", to, sizeof to - 1);
            close(link);
            if (n <= 0) return 0;
            to[n] = 0;
            char next[AHS_PATH];
            if (to[0] == '/') {
                snprintf(next, sizeof next, "%s%s", to, target + i);
            } else {
                char *slash = strrchr(prefix, '/');
                if (slash) *slash = 0;
                snprintf(next, sizeof next, "%s/%s%s", prefix, to, target + i);
            }
            return judge(g, next, depth + 1);
        }
        struct stat st;
        struct statfs fs;
        int into = fstat(fd, &st) < 0 || fstatfs(fd, &fs) < 0 || fs.f_type == AHS_PROC_SUPER_MAGIC || (i == len && same(&st, &g->root_st));
        for (int k = 0; k < g->ndevs && !into; k++) into = st.st_dev == g->devs[k];
        close(fd);
        if (into) return 1;
    }
    return 0;
}

int ahs_link_leads_into(int pid, int dirfd, const char *linkpath, const char *target, const char *const *guarded, int nguarded) {
    char at[64];
    struct guard g = {.ndevs = 0};
    snprintf(at, sizeof at, "/proc/%d/root", pid);
    g.root = open(at, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (g.root < 0) return -errno;
    int rc = 0, base = -1, parent = -1;
    if (fstat(g.root, &g.root_st) < 0) { rc = -errno; goto out; }
    for (int k = 0; k < nguarded && g.ndevs < 8; k++) {
        int fd = open_in_root(g.root, guarded[k], 0);
        struct stat st;
        if (fd < 0) continue;
        // Only a file system of its own is told by its device.
        if (fstat(fd, &st) == 0 && st.st_dev != g.root_st.st_dev) g.devs[g.ndevs++] = st.st_dev;
        close(fd);
    }
    if (dirfd == AT_FDCWD) snprintf(at, sizeof at, "/proc/%d/cwd", pid);
    else snprintf(at, sizeof at, "/proc/%d/fd/%d", pid, dirfd);
    base = open(at, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (base < 0) { rc = -errno; goto out; }
    char dir[AHS_PATH], full[AHS_PATH];
    if ((rc = path_in_root(g.root, base, dir, sizeof dir)) < 0) goto out;
    if ((size_t)snprintf(full, sizeof full, "%s%s%s", linkpath[0] == '/' ? "" : dir, linkpath[0] == '/' ? "" : "/", linkpath) >= sizeof full) {
        rc = -ENAMETOOLONG;
        goto out;
    }
    // The directory the link is made in, as the kernel will find it.
    char *slash = strrchr(full, '/');
    *slash = 0;
    parent = open_in_root(g.root, full[0] ? full : "/", 0);
    if (parent < 0) { rc = 0; goto out; }  // the call itself fails
    if ((rc = path_in_root(g.root, parent, dir, sizeof dir)) < 0) goto out;
    char resolved[AHS_PATH];
    if ((size_t)snprintf(resolved, sizeof resolved, "%s%s%s", target[0] == '/' ? "" : dir, target[0] == '/' ? "" : "/", target) >= sizeof resolved) {
        rc = 1;
        goto out;
    }
    rc = judge(&g, resolved, 0);
out:
    if (parent >= 0) close(parent);
    if (base >= 0) close(base);
    close(g.root);
    return rc;
}
