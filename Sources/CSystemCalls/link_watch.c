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
    for (int depth = 0;; depth++) {
        if (fstat(cur, &cs) < 0) { rc = -errno; break; }
        if (same(&cs, &rs)) break;
        if (depth == 256) { rc = -ELOOP; break; }  // deeper than judged: not told
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
        // By the entry's inode number first (no call per entry: a directory may hold 100,000);
        // then, for a mount point (whose entry names the directory below the mount), each
        // subdirectory by its status.
        for (int pass = 0; pass < 2 && !found; pass++) {
            rewinddir(d);
            while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
                if (pass == 0 && e->d_ino != cs.st_ino) continue;
                if (pass == 1 && e->d_type != DT_DIR && e->d_type != DT_UNKNOWN) continue;
                struct stat es;
                if (fstatat(parent, e->d_name, &es, AT_SYMLINK_NOFOLLOW) == 0 && same(&es, &cs)) {
                    snprintf(name, sizeof name, "%s", e->d_name);
                    found = name;
                    break;
                }
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
            // Missing: a link (to somewhere the supervisor's view lacks) is judged by its target;
            // a directory that does not exist yet followed by `..` may lead anywhere once it
            // does (a git checkout makes the link before the directory).
            int link = open_in_root(g->root, prefix, 1);
            if (link < 0) return strstr(target + i, "/..") != NULL;
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

static int open_guard(struct guard *g, int pid, const char *const *guarded, int nguarded) {
    char at[64];
    g->ndevs = 0;
    snprintf(at, sizeof at, "/proc/%d/root", pid);
    g->root = open(at, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (g->root < 0) return -errno;
    if (fstat(g->root, &g->root_st) < 0) { int e = errno; close(g->root); return -e; }
    for (int k = 0; k < nguarded && g->ndevs < 8; k++) {
        int fd = open_in_root(g->root, guarded[k], 0);
        struct stat st;
        if (fd < 0) continue;
        // Only a file system of its own is told by its device.
        if (fstat(fd, &st) == 0 && st.st_dev != g->root_st.st_dev) g->devs[g->ndevs++] = st.st_dev;
        close(fd);
    }
    // None of them in the caller's view: it has chrooted away from them (root on a task's
    // image may), so a link it makes is judged where it cannot be seen whether it leads to the
    // key from the sandbox's own root, where the test would follow it. Counted as leading in.
    if (nguarded > 0 && g->ndevs == 0) {
        close(g->root);
        return 1;
    }
    return 0;
}

// The directory holding `name` (relative to the caller's `dirfd` or cwd, or absolute), as the
// kernel finds it: its path below the root in `dir`, the last component in `*last`. -errno
// when it cannot be told; -ENOENT when it does not exist (the call fails itself).
static int name_parent(const struct guard *g, int pid, int dirfd, const char *name, char *dir, size_t cap, const char **last) {
    char at[64], base_path[AHS_PATH], full[AHS_PATH];
    if (dirfd == AT_FDCWD) snprintf(at, sizeof at, "/proc/%d/cwd", pid);
    else snprintf(at, sizeof at, "/proc/%d/fd/%d", pid, dirfd);
    int base = open(at, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (base < 0) return -errno;
    int rc = path_in_root(g->root, base, base_path, sizeof base_path);
    close(base);
    if (rc < 0) return rc;
    if ((size_t)snprintf(full, sizeof full, "%s%s%s", name[0] == '/' ? "" : base_path, name[0] == '/' ? "" : "/", name) >= sizeof full) return -ENAMETOOLONG;
    char *slash = strrchr(full, '/');
    *slash = 0;
    *last = name + (strrchr(name, '/') ? strrchr(name, '/') - name + 1 : 0);
    // A directory named through procfs (/proc/self/cwd/...): the caller's, not one the
    // supervisor's /proc/self reaches; not told.
    if (named_magic(full)) return -ELOOP;
    int parent = open_in_root(g->root, full[0] ? full : "/", 0);
    // Through a magic link or out of the root: the supervisor cannot follow it, the kernel can.
    if (parent < 0) return errno == ENOENT || errno == ENOTDIR ? -ENOENT : -errno;
    rc = path_in_root(g->root, parent, dir, cap);
    close(parent);
    return rc;
}

// A link at `dir`/`name` (the caller's view) with `target`: 1 when it leads into a guarded
// directory, 0 when not, -errno when it cannot be told.
static int judge_at(const struct guard *g, const char *dir, const char *target) {
    char resolved[AHS_PATH];
    if ((size_t)snprintf(resolved, sizeof resolved, "%s%s%s", target[0] == '/' ? "" : dir, target[0] == '/' ? "" : "/", target) >= sizeof resolved) return 1;
    return judge(g, resolved, 0);
}

int ahs_link_leads_into(int pid, int dirfd, const char *linkpath, const char *target, const char *const *guarded, int nguarded) {
    struct guard g;
    int rc = open_guard(&g, pid, guarded, nguarded);
    if (rc != 0) return rc;
    char dir[AHS_PATH];
    const char *last;
    rc = name_parent(&g, pid, dirfd, linkpath, dir, sizeof dir, &last);
    if (rc == 0) rc = judge_at(&g, dir, target);
    else if (rc == -ENOENT) rc = 0;  // the call fails itself
    close(g.root);
    return rc;
}

// A link at `existing`/`rel` once a move is done (`existing` is there now; `rel`, directories
// of the moved tree, is not yet): its target's leading `..` are taken against `rel` by name
// (real directories once moved), the rest resolved as `judge` does.
static int judge_moved(const struct guard *g, const char *existing, const char *rel, const char *target) {
    if (target[0] == '/') return judge(g, target, 0);
    char stack[AHS_PATH], rest[AHS_PATH] = "", copy[AHS_PATH];
    snprintf(stack, sizeof stack, "%s", rel);
    snprintf(copy, sizeof copy, "%s", target);
    int descended = 0;
    for (char *save = NULL, *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (!descended && !strcmp(c, ".")) continue;
        if (!descended && !strcmp(c, "..") && stack[0]) {
            char *slash = strrchr(stack, '/');
            if (slash) *slash = 0; else stack[0] = 0;
            continue;
        }
        if (strcmp(c, "..")) descended = 1;
        size_t n = strlen(rest);
        if ((size_t)snprintf(rest + n, sizeof rest - n, "/%s", c) >= sizeof rest - n) return 1;
    }
    char resolved[AHS_PATH];
    if ((size_t)snprintf(resolved, sizeof resolved, "%s%s%s%s", existing, stack[0] ? "/" : "", stack, rest) >= sizeof resolved) return 1;
    return judge(g, resolved[0] ? resolved : "/", 0);
}

// Judges every link below `fd` (a directory about to be at `existing`/`rel` in the caller's
// view), at most 10,000 entries and 32 levels (more: -E2BIG, not told): 1 when one leads into
// a guarded directory from where it will be.
static int judge_tree(const struct guard *g, int fd, const char *existing, const char *rel, int depth, int *seen) {
    if (depth > 32) return -E2BIG;
    int listing = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = listing >= 0 ? fdopendir(listing) : NULL;
    if (!d) { if (listing >= 0) close(listing); return -EIO; }
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (++*seen > 10000) { rc = -E2BIG; break; }
        struct stat st;
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) continue;
        if (S_ISLNK(st.st_mode)) {
            char to[AHS_PATH];
            ssize_t n = readlinkat(fd, e->d_name, to, sizeof to - 1);
            if (n <= 0) continue;
            to[n] = 0;
            rc = judge_moved(g, existing, rel, to);
        } else if (S_ISDIR(st.st_mode)) {
            char below[AHS_PATH];
            if ((size_t)snprintf(below, sizeof below, "%s/%s", rel, e->d_name) >= sizeof below) { rc = 1; break; }
            int sub = openat(fd, e->d_name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
            if (sub < 0) continue;
            rc = judge_tree(g, sub, existing, below, depth + 1, seen);
            close(sub);
        }
    }
    closedir(d);
    return rc;
}

int ahs_move_leads_into(int pid, int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int hard,
                        const char *const *guarded, int nguarded) {
    struct guard g;
    int rc = open_guard(&g, pid, guarded, nguarded);
    if (rc != 0) return rc;
    char from[AHS_PATH], to[AHS_PATH];
    const char *oldlast, *newlast;
    int old = -1;
    rc = name_parent(&g, pid, olddirfd, oldpath, from, sizeof from, &oldlast);
    if (rc == 0) rc = name_parent(&g, pid, newdirfd, newpath, to, sizeof to, &newlast);
    if (rc == -ENOENT) { rc = 0; goto out; }  // the call fails itself
    if (rc < 0) goto out;
    char oldname[AHS_PATH];
    snprintf(oldname, sizeof oldname, "%s/%s", from, oldlast);
    old = open_in_root(g.root, oldname[0] ? oldname : "/", 1);
    if (old < 0) { rc = 0; goto out; }
    struct stat st;
    if (fstat(old, &st) < 0) { rc = -errno; goto out; }
    if (S_ISLNK(st.st_mode)) {
        char target[AHS_PATH];
        ssize_t n = readlinkat(old, "", target, sizeof target - 1);
        if (n <= 0) { rc = -EIO; goto out; }
        target[n] = 0;
        rc = judge_at(&g, to, target);
    } else if (S_ISDIR(st.st_mode) && !hard) {
        int seen = 0;
        rc = judge_tree(&g, old, to, newlast, 0, &seen);
    }
out:
    if (old >= 0) close(old);
    close(g.root);
    // A tree too large to judge (a package's files moved into place) is let go unrecorded.
    return rc == -E2BIG ? 0 : rc;
}
