// The sandbox's filesystem: the mount building blocks (the new mount API, paths walked below
// the new root without following links), each kind of mount a plan holds, the read-only root
// and its template (part of the launch: launch_internal.h).
#include "launch_internal.h"

// ---------------------------------------------------------------------------------------
// Filesystem construction (runs in init, pid 1, inside all namespaces)

/// Who owns what walk_create and mount_symlink create: -1, whoever creates it (init, as the
/// sandbox's uid); a template root (built by the supervisor, host root) sets the sandbox's
/// host ids, so its mount points and links look as they do in a root init built.
int64_t ahl_creator_uid = -1, ahl_creator_gid = -1;

static int own_created(int dir, const char *name) {
    if (ahl_creator_uid < 0) return 0;
    return sys_fchownat(dir, name, (unsigned)ahl_creator_uid, (unsigned)ahl_creator_gid, AT_SYMLINK_NOFOLLOW);
}

/// Walks `path` (absolute) below dirfd one component at a time, never following a symlink,
/// creating missing directories. Returns an O_PATH fd for the final component, which is
/// created as a directory (want_dir) or an empty file. A planted symlink anywhere on the
/// way fails with ELOOP instead of redirecting the mount.
int ahl_walk_create(int rootfd, const char *path, int want_dir, int create_last) {
    char comp[256];
    int cur = sys_dup(rootfd);
    if (cur < 0) return -1;
    const char *p = path;
    while (*p == '/') p++;
    if (*p == 0) return cur;  // the root itself
    while (*p) {
        const char *e = p;
        while (*e && *e != '/') e++;
        size_t n = (size_t)(e - p);
        if (n >= sizeof comp) { sys_close(cur); ahl_errno = ENAMETOOLONG; return -1; }
        memcpy(comp, p, n);
        comp[n] = 0;
        while (*e == '/') e++;
        int last = (*e == 0);
        int next;
        if (!last || want_dir) {
            next = sys_openat(cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
            if (next < 0 && ahl_errno == ENOENT && (create_last || !last)) {
                // 0755 whatever the creator's umask: a template root is built under whichever
                // thread's comes first (a launch service's workers take their clients'), and
                // is shared by the sandboxes after it.
                if (sys_mkdirat(cur, comp, 0755) < 0) {
                    if (ahl_errno != EEXIST) { ahl_close_keep_errno(cur); return -1; }
                } else if (sys_fchmodat(cur, comp, 0755) < 0 || own_created(cur, comp) < 0) { ahl_close_keep_errno(cur); return -1; }
                next = sys_openat(cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
            }
        } else {
            next = sys_openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC, 0);
            if (next < 0 && ahl_errno == ENOENT && create_last) {
                int f = sys_openat(cur, comp, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, 0444);
                if (f < 0 && ahl_errno != EEXIST) { ahl_close_keep_errno(cur); return -1; }
                if (f >= 0 && sys_fchmod(f, 0444) < 0) { ahl_close_keep_errno(f); ahl_close_keep_errno(cur); return -1; }
                if (f >= 0) sys_close(f);
                if (f >= 0 && own_created(cur, comp) < 0) { ahl_close_keep_errno(cur); return -1; }
                next = sys_openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC, 0);
            }
            if (next >= 0) {
                struct stat st;
                int bad = sys_fstat(next, &st) < 0 ? ahl_errno : S_ISLNK(st.st_mode) ? ELOOP : S_ISDIR(st.st_mode) ? EISDIR : 0;
                if (bad) { sys_close(next); sys_close(cur); ahl_errno = bad; return -1; }
            }
        }
        int s = ahl_errno;
        if (next < 0 && s == ENOTDIR) {
            // O_DIRECTORY|O_NOFOLLOW on a symlink says ENOTDIR; name the real refusal.
            struct stat st;
            if (sys_fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) s = ELOOP;
        }
        sys_close(cur);
        if (next < 0) {
            ahl_errno = s;
            return -1;
        }
        cur = next;
        p = e;
    }
    return cur;
}

/// Splits `path` into (parent fd, last component) for symlink creation.
static int walk_parent(int rootfd, const char *path, char *last, size_t lastsz) {
    const char *slash = strrchr(path, '/');
    if (!slash || slash[1] == 0) { ahl_errno = EINVAL; return -1; }
    size_t n = strlen(slash + 1);
    if (n >= lastsz) { ahl_errno = ENAMETOOLONG; return -1; }
    memcpy(last, slash + 1, n + 1);
    char parent[4096];
    size_t pn = (size_t)(slash - path);
    if (pn >= sizeof parent) { ahl_errno = ENAMETOOLONG; return -1; }
    memcpy(parent, path, pn);
    parent[pn] = 0;
    return ahl_walk_create(rootfd, pn ? parent : "/", 1, 1);
}

int ahl_set_attrs(int mfd, uint64_t set, int recursive) {
    struct mount_attr a;
    memset(&a, 0, sizeof a);
    a.attr_set = set;
    a.propagation = MS_PRIVATE;
    return sys_mount_setattr(mfd, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &a, sizeof a);
}

int ahl_attach(int mfd, int targetfd) {
    return sys_move_mount(mfd, "", targetfd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH);
}

/// ahl_attach(), then close both descriptors, keeping attach's error.
int ahl_attach_close(int mfd, int targetfd) {
    int r = ahl_attach(mfd, targetfd);
    ahl_close_keep_errno(targetfd);
    ahl_close_keep_errno(mfd);
    return r;
}

/// A detached tmpfs (or other simple fs) mount fd.
int ahl_new_fs(const char *type, uint64_t size, uint32_t mode, uint64_t attrs) {
    int fs = sys_fsopen(type, FSOPEN_CLOEXEC);
    if (fs < 0) return -1;
    char buf[32];
    if (size) {
        // decimal bytes, by hand (no snprintf in the fork window)
        char tmp[24];
        int i = 0;
        uint64_t v = size;
        do { tmp[i++] = (char)('0' + v % 10); v /= 10; } while (v && i < 23);
        int j = 0;
        while (i) buf[j++] = tmp[--i];
        buf[j] = 0;
        if (sys_fsconfig(fs, FSCONFIG_SET_STRING, "size", buf, 0) < 0) goto bad;
    }
    if (mode != UINT32_MAX) {
        buf[0] = '0';
        buf[1] = (char)('0' + ((mode >> 9) & 7));
        buf[2] = (char)('0' + ((mode >> 6) & 7));
        buf[3] = (char)('0' + ((mode >> 3) & 7));
        buf[4] = (char)('0' + (mode & 7));
        buf[5] = 0;
        if (sys_fsconfig(fs, FSCONFIG_SET_STRING, "mode", buf, 0) < 0) goto bad;
    }
    if (sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) goto bad;
    int m = sys_fsmount(fs, FSMOUNT_CLOEXEC, (unsigned)attrs);
    ahl_close_keep_errno(fs);
    return m;
bad:
    ahl_close_keep_errno(fs);
    return -1;
}


/// Clones a bind source while the monitor is still fully privileged in the host's mount
/// namespace, so any host path the policy names is reachable (as with a root-run bwrap) and
/// the payload's unprivileged host uid never has to traverse it. The clone is a detached
/// tree; init attaches it inside the sandbox later.
int ahl_open_source(const struct ahl_mount *m) {
    int tree = sys_open_tree(AT_FDCWD, m->source, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_SYMLINK_NOFOLLOW);
    if (tree < 0) return -1;
    struct stat st;
    if (sys_fstat(tree, &st) < 0) { ahl_close_keep_errno(tree); return -1; }
    if ((uint64_t)st.st_dev != m->dev || (uint64_t)st.st_ino != m->ino) {
        // The path now names a different object than the one the policy was compiled
        // against (swapped between planning and mounting): refuse rather than mount it.
        sys_close(tree);
        ahl_errno = ESTALE;
        return -1;
    }
    uint64_t attrs = AHL_SAFE | ((m->flags & AHL_MOUNT_READONLY) ? MOUNT_ATTR_RDONLY : 0) |
                     ((m->flags & AHL_MOUNT_NO_SYMLINKS) ? MOUNT_ATTR_NOSYMFOLLOW : 0);
    if (ahl_set_attrs(tree, attrs, 1) < 0) { ahl_close_keep_errno(tree); return -1; }
    return tree;
}

/// The monitor's clone of the plan's template root (-1: none, build the root per sandbox);
/// init, its fork, attaches it as the new root.
int ahl_root_clone = -1;

/// Whether entry `m` is in the cloned template root (and so not mounted again).
int ahl_templated(const struct ahl_mount *m) {
    return ahl_root_clone >= 0 && (m->flags & AHL_MOUNT_IN_TEMPLATE);
}

static int mount_bind(const struct ahl_mount *m, int tree, int newroot) {
    int target = ahl_walk_create(newroot, m->dest, (m->flags & AHL_MOUNT_SOURCE_DIR) != 0, 1);
    if (target < 0) return -1;
    int r = ahl_attach(tree, target);
    ahl_close_keep_errno(target);
    return r;
}

int ahl_mount_tmpfs_at(int newroot, const char *dest, uint64_t size, uint32_t mode, uint64_t attrs) {
    int mfd = ahl_new_fs("tmpfs", size ? size : (64ull << 20), mode, attrs);
    if (mfd < 0) return -1;
    int target = ahl_walk_create(newroot, dest, 1, 1);
    if (target < 0) { ahl_close_keep_errno(mfd); return -1; }
    return ahl_attach_close(mfd, target);
}

static int mount_hide(const struct ahl_mount *m, int newroot) {
    // Only existing objects (provided by an earlier bind) are hidden; nothing to do otherwise.
    int target = ahl_walk_create(newroot, m->dest, 0, 0);
    if (target < 0 && ahl_errno == EISDIR) target = ahl_walk_create(newroot, m->dest, 1, 0);
    if (target < 0) return ahl_errno == ENOENT ? 0 : -1;
    struct stat st;
    if (sys_fstat(target, &st) < 0) { ahl_close_keep_errno(target); return -1; }
    // Hidden things read as "Permission denied": mode 0, owned by nobody the payload can act as.
    int mfd = ahl_new_fs("tmpfs", 4096, 0, AHL_SAFE | MOUNT_ATTR_NOEXEC | (S_ISDIR(st.st_mode) ? MOUNT_ATTR_RDONLY : 0));
    if (mfd >= 0 && !S_ISDIR(st.st_mode)) {
        // An empty mode-0 file on a private, never-attached tmpfs, bound over the target.
        int f = sys_openat(mfd, "empty", O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0000);
        int file = f < 0 ? -1 : sys_open_tree(mfd, "empty", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
        if (f >= 0) sys_close(f);
        int s = ahl_errno;
        sys_close(mfd);
        mfd = file;
        if (mfd >= 0 && ahl_set_attrs(mfd, AHL_SAFE | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOEXEC, 0) < 0) { s = ahl_errno; sys_close(mfd); mfd = -1; }
        ahl_errno = s;
    }
    if (mfd < 0) { ahl_close_keep_errno(target); return -1; }
    return ahl_attach_close(mfd, target);
}

static int mount_symlink(const struct ahl_mount *m, int newroot) {
    char last[256];
    int parent = walk_parent(newroot, m->dest, last, sizeof last);
    if (parent < 0) return -1;
    int r = sys_symlinkat(m->source, parent, last);
    if (r == 0) r = own_created(parent, last);
    ahl_close_keep_errno(parent);
    return r;
}



static int make_readonly(int newroot, const char *path, uint64_t attrs) {
    int fd = ahl_walk_create(newroot, path, 1, 0);
    if (fd < 0) return -1;
    int r = ahl_set_attrs(fd, attrs | MOUNT_ATTR_RDONLY, 0);
    ahl_close_keep_errno(fd);
    return r;
}

void ahl_setup_filesystem(const struct ahl_plan *p, int rep, const int *trees, int dev_tree, const int *device_trees) {
    // Stop mount events propagating between the host and the sandbox in either direction.
    if (sys_mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) ahl_fail(rep, AHL_STAGE_MOUNT_PRIVATE, 0);

    // The sandbox root: an empty tmpfs that holds only mount points and ends read-only. It
    // is attached over /tmp of this private namespace just long enough to pivot into it.
    // A plan whose first entry binds a directory at / (a task's image: an overlay the
    // supervisor mounted over the image's files, `PlanOverrides.imageRoot`) has that tree as
    // its root instead: every other entry is mounted inside it, and it stays writable when
    // the bind is (a container's root is), its writes landing in the overlay's upper layer.
    const struct ahl_mount *root_bind =
        p->n_mounts && p->mounts[0].kind == AHL_MOUNT_BIND && p->mounts[0].dest[0] == '/' && p->mounts[0].dest[1] == 0
            ? &p->mounts[0] : NULL;
    uint64_t rs = p->root_size ? p->root_size : (4ull << 20);
    int rootm = root_bind ? trees[0] : ahl_root_clone >= 0 ? ahl_root_clone : ahl_new_fs("tmpfs", rs, 0755, AHL_SAFE);
    if (rootm < 0) ahl_fail(rep, AHL_STAGE_MOUNT_ROOT, 0);
    int spot = sys_open("/tmp", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (spot < 0 || ahl_attach(rootm, spot) < 0) ahl_fail(rep, AHL_STAGE_MOUNT_ROOT, 0);
    sys_close(spot);
    sys_close(rootm);
    uint32_t first = root_bind ? 1 : 0;
    int newroot = sys_open("/tmp", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (newroot < 0) ahl_fail(rep, AHL_STAGE_MOUNT_ROOT, 0);

    for (uint32_t i = first; i < p->n_mounts; i++) {
        const struct ahl_mount *m = &p->mounts[i];
        if (ahl_templated(m)) continue;
        int r;
        switch (m->kind) {
        case AHL_MOUNT_BIND: r = mount_bind(m, trees[i], newroot); break;
        case AHL_MOUNT_TMPFS: r = ahl_mount_tmpfs_at(newroot, m->dest, m->size, m->mode, AHL_SAFE); break;
        case AHL_MOUNT_HIDE: r = mount_hide(m, newroot); break;
        case AHL_MOUNT_SYMLINK: r = mount_symlink(m, newroot); break;
        default: ahl_errno = EINVAL; r = -1;
        }
        if (r < 0) ahl_fail(rep, AHL_STAGE_MOUNT_ENTRY, (int32_t)i);
        if (m->kind == AHL_MOUNT_BIND) sys_close(trees[i]);
    }
    if (ahl_setup_dev(newroot, dev_tree, device_trees) < 0) ahl_fail(rep, AHL_STAGE_MOUNT_DEV, 0);
    // Before the old tree (the seed's or the host's) is detached: the kernel lets a user
    // namespace mount proc only while a fully visible proc exists in its mount namespace.
    if (ahl_setup_proc(newroot, p->masks_fd) < 0) ahl_fail(rep, AHL_STAGE_MOUNT_PROC, 0);
    // The monitor's /dev holds its own device nodes, so it is not nodev (own_dev); one built
    // here is, and its nodes are binds of the host's.
    uint64_t dev_attrs = dev_tree >= 0 ? MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC : AHL_SAFE | MOUNT_ATTR_NOEXEC;
    if (make_readonly(newroot, "/dev", dev_attrs) < 0) ahl_fail(rep, AHL_STAGE_MOUNT_READONLY, 0);
    if ((!root_bind || (root_bind->flags & AHL_MOUNT_READONLY)) && make_readonly(newroot, "/", AHL_SAFE) < 0)
        ahl_fail(rep, AHL_STAGE_MOUNT_READONLY, 0);
    sys_close(newroot);

    // pivot_root(".", ".") stacks the old root on top of the new one; detaching it drops
    // the whole old tree (the seed's copy, or the host's) from this namespace.
    if (sys_chdir("/tmp") < 0) ahl_fail(rep, AHL_STAGE_PIVOT_ROOT, 0);
    if (sys_pivot_root(".", ".") < 0) ahl_fail(rep, AHL_STAGE_PIVOT_ROOT, 0);
    if (sys_umount2(".", MNT_DETACH) < 0) ahl_fail(rep, AHL_STAGE_DETACH_OLD_ROOT, 0);
    if (sys_chdir("/") < 0) ahl_fail(rep, AHL_STAGE_PIVOT_ROOT, 0);
}


// --- template roots ------------------------------------------------------------------------
// A long-lived supervisor launches the same plan's read-only binds and symlinks for every
// sandbox. It builds them once into a template root (ahl_build_template, below), and each
// sandbox's monitor clones that whole tree in one call (`ahl_root_clone`) where init would make a
// root tmpfs and walk, create and attach every entry. What the sandbox gets is the same tree:
// the template's root is the read-only root every sandbox had, holding only mount points and
// symlinks; its binds are clones of the same sources, checked against the plan's st_dev/st_ino
// the same way. Everything a sandbox writes to (tmpfs, read-write binds), /dev and /proc stays
// the sandbox's own and is mounted by init as before, on mount points the template holds.

int ahl_build_template(const struct ahl_plan *p, int *template_out) {
    *template_out = -1;
    ahl_errno = 0;
    uint64_t rs = p->root_size ? p->root_size : (4ull << 20);
    int root = ahl_new_fs("tmpfs", rs, 0755, AHL_SAFE);
    if (root < 0) return ahl_errno ? ahl_errno : EIO;
    ahl_creator_uid = p->host_uid;
    ahl_creator_gid = p->host_gid;
    int r = sys_fchownat(root, "", p->host_uid, p->host_gid, 0x1000 /* AT_EMPTY_PATH */);
    for (uint32_t i = 0; i < p->n_mounts && r == 0; i++) {
        const struct ahl_mount *m = &p->mounts[i];
        if (m->flags & AHL_MOUNT_IN_TEMPLATE) {
            if (m->kind == AHL_MOUNT_BIND && (m->flags & AHL_MOUNT_READONLY)) {
                int tree = ahl_open_source(m);
                r = tree < 0 ? -1 : mount_bind(m, tree, root);
                if (tree >= 0) ahl_close_keep_errno(tree);
            } else if (m->kind == AHL_MOUNT_SYMLINK) {
                r = mount_symlink(m, root);
            } else {
                // Only what no sandbox can write to is shared.
                ahl_errno = EINVAL;
                r = -1;
            }
        } else if (m->flags & AHL_MOUNT_POINT_IN_TEMPLATE) {
            int dir = m->kind == AHL_MOUNT_TMPFS || (m->kind == AHL_MOUNT_BIND && (m->flags & AHL_MOUNT_SOURCE_DIR));
            if (m->kind != AHL_MOUNT_BIND && m->kind != AHL_MOUNT_TMPFS) {
                ahl_errno = EINVAL;
                r = -1;
            } else {
                int fd = ahl_walk_create(root, m->dest, dir, 1);
                if (fd < 0) r = -1;
                else sys_close(fd);
            }
        }
    }
    static const char *const points[] = {"/dev", "/proc"};
    for (unsigned i = 0; i < 2 && r == 0; i++) {
        int fd = ahl_walk_create(root, points[i], 1, 1);
        if (fd < 0) r = -1;
        else sys_close(fd);
    }
    ahl_creator_uid = ahl_creator_gid = -1;
    // Read-only now rather than at the end of each sandbox's build: init only mounts on it.
    if (r == 0) r = ahl_set_attrs(root, AHL_SAFE | MOUNT_ATTR_RDONLY, 0);
    // The kernel must clone from it too (see ahl_build_shared).
    int probe = r == 0 ? sys_open_tree(root, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE | AT_EMPTY_PATH) : -1;
    if (probe < 0) {
        int e = ahl_errno ? ahl_errno : EIO;
        sys_close(root);
        return e;
    }
    sys_close(probe);
    *template_out = root;
    return 0;
}

