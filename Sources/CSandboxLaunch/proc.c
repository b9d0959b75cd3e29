// /proc in the sandbox: its own proc mount, kernel knobs read-only, and the files that count
// for the whole host covered (part of the launch: launch_internal.h).
#include "launch_internal.h"

/// Re-binds a subtree of the fresh /proc (the working directory) onto itself read-only (kernel
/// knobs stay unwritable even for a process that somehow regained privileges in the
/// namespace). Classic mount calls, as for the covers (cover_bound): a bind and a remount of it,
/// where a clone, its attributes, the target's descriptor and the attach took five calls. The
/// subtree holds no mount yet, so the bind is the only one there to make read-only.
static int proc_readonly(const char *sub) {
    if (sys_mount(sub, sub, NULL, MS_BIND | MS_REC, NULL) < 0) return ahl_errno == ENOENT ? 0 : -1;
    return sys_mount(NULL, sub, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
}

// --- host-wide counters in /proc ---------------------------------------------------------
// /proc is the sandbox's own, but some of its files count for the whole host: forks and
// context switches since boot, cpu time, memory in use, load, open files and inodes, the
// lock table. A held-out task can move them on purpose and a later sandbox can read them
// (a review recovered held-out operands from /proc/stat's fork count), so each is covered by
// a file that never changes: plausible where tools parse it (ps, free, os.cpus), empty
// elsewhere. Values that do not move with activity (boot time, total memory, cpu count) are
// copied from the real files.

struct ahl_buf { char b[8192]; size_t n; };

static void buf_put(struct ahl_buf *o, const char *s) {
    while (*s && o->n < sizeof o->b - 1) o->b[o->n++] = *s++;
}

static void buf_num(struct ahl_buf *o, uint64_t v) {
    char tmp[24];
    int i = 0;
    do { tmp[i++] = (char)('0' + v % 10); v /= 10; } while (v && i < 23);
    while (i && o->n < sizeof o->b - 1) o->b[o->n++] = tmp[--i];
}

/// The line of `procfd/name` starting with `key`, including its newline, appended to `o`.
static void copy_line(int procfd, const char *name, const char *key, struct ahl_buf *o) {
    struct ahl_buf in;
    int fd = sys_openat(procfd, name, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return;
    ssize_t r = sys_read(fd, in.b, sizeof in.b - 1);
    sys_close(fd);
    if (r <= 0) return;
    in.b[r] = 0;
    size_t kl = strlen(key);
    for (char *line = in.b; line && *line;) {
        char *nl = strchr(line, '\n');
        if (strncmp(line, key, kl) == 0) {
            size_t len = nl ? (size_t)(nl - line) + 1 : strlen(line);
            for (size_t i = 0; i < len && o->n < sizeof o->b - 1; i++) o->b[o->n++] = line[i];
            return;
        }
        line = nl ? nl + 1 : NULL;
    }
}

static int put_file(int dirfd, const char *name, const struct ahl_buf *content) {
    int fd = sys_openat(dirfd, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0444);
    if (fd < 0) return -1;
    // 0444 whatever the creator's umask (the supervisor's, for the shared masks tree): under
    // 077 the covers were root's 0400, unreadable in every sandbox.
    if (sys_fchmod(fd, 0444) < 0) { ahl_close_keep_errno(fd); return -1; }
    ssize_t w = content->n ? sys_write(fd, content->b, content->n) : 0;
    sys_close(fd);
    return w == (ssize_t)content->n ? 0 : -1;
}

/// Covers `procfd/target` (if it exists) with `name` from the masks tmpfs `mfd`. The clone
/// is read-only, nosuid, nodev and noexec because the masks mount is (a clone keeps its
/// source mount's flags), which saves a mount_setattr per cover (22 per sandbox). The target
/// is named relative to the /proc just mounted, whose names are the kernel's: move_mount
/// follows no final symlink without MOVE_MOUNT_T_SYMLINKS, and opening the target first
/// would cost two system calls per cover.
static int cover(int mfd, const char *name, int procfd, const char *target) {
    int tree = sys_open_tree(mfd, name, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0) return -1;
    int r = sys_move_mount(tree, "", procfd, target, MOVE_MOUNT_F_EMPTY_PATH);
    ahl_close_keep_errno(tree);
    return r < 0 && ahl_errno == ENOENT ? 0 : r;
}

/// The same cover as a classic bind mount from `dir`/`name`, a path of a masks mount attached
/// in this namespace, onto `target`, relative to the working directory (the fresh /proc). One
/// system call where the clone takes three, and no anonymous mount namespace made and freed
/// per cover: 22 covers took 0.12 ms this way against 0.32-0.42 ms (Linux 6.18). The bind
/// keeps the masks mount's read-only, nosuid, nodev and noexec flags, as the clone does. The
/// targets are the kernel's own names in a /proc nothing else has touched.
static int cover_bound(const char *dir, const char *name, const char *target) {
    char src[64];
    size_t dl = strlen(dir), nl = strlen(name);
    if (dl + nl + 2 > sizeof src) { ahl_errno = ENAMETOOLONG; return -1; }
    memcpy(src, dir, dl);
    src[dl] = '/';
    memcpy(src + dl + 1, name, nl + 1);
    int r = sys_mount(src, target, NULL, MS_BIND, NULL);
    return r < 0 && ahl_errno == ENOENT ? 0 : r;
}

// The covering files live in a small tmpfs attached for a moment inside the new root (kernels
// before 6.x cannot clone from a detached mount), then detached and its mount point removed.
static const char masks_dir[] = "/.autoharness-masks";

/// /proc/cgroups of `procfd` with every controller's cgroup count 1: the counts are of the
/// whole host (how many sandboxes run now); the controllers and hierarchies stay.
static void copy_cgroups(int procfd, struct ahl_buf *o) {
    struct ahl_buf in;
    int fd = sys_openat(procfd, "cgroups", O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0) return;
    ssize_t r = sys_read(fd, in.b, sizeof in.b - 1);
    sys_close(fd);
    if (r <= 0) return;
    in.b[r] = 0;
    for (char *line = in.b; *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        if (line[0] == '#') {
            for (size_t k = 0; k < len && o->n < sizeof o->b - 1; k++) o->b[o->n++] = line[k];
        } else {
            // name TAB hierarchy TAB num_cgroups TAB enabled: the third field becomes 1.
            int field = 0;
            for (size_t k = 0; k < len && o->n < sizeof o->b - 1; k++) {
                if (line[k] == '\t') field++;
                if (field == 2 && line[k] != '\t') {
                    if (k > 0 && line[k - 1] == '\t') o->b[o->n++] = '1';
                    continue;
                }
                o->b[o->n++] = line[k];
            }
        }
        if (o->n < sizeof o->b - 1) o->b[o->n++] = '\n';
        if (!nl) break;
        line = nl + 1;
    }
}

/// Writes the covering files into the masks tmpfs `mfd` (the root of a fresh one), reading
/// the values that never move from `procfd`, and makes the mount read-only: every cover
/// cloned from it inherits that.
int ahl_write_masks(int mfd, int procfd) {
    struct ahl_buf stat = {.n = 0}, mem = {.n = 0}, load = {.n = 0}, up = {.n = 0}, empty = {.n = 0}, cgroups = {.n = 0};
    cpu_set_t cpus;
    int ncpu = 0;
    int got = sys_sched_getaffinity(sizeof cpus, &cpus);
    for (int i = 0; i < got; i++) ncpu += __builtin_popcount(((const unsigned char *)&cpus)[i]);
    if (ncpu == 0) ncpu = 1;
    buf_put(&stat, "cpu  0 0 0 0 0 0 0 0 0 0\n");
    for (int i = 0; i < ncpu; i++) { buf_put(&stat, "cpu"); buf_num(&stat, (uint64_t)i); buf_put(&stat, " 0 0 0 0 0 0 0 0 0 0\n"); }
    buf_put(&stat, "intr 0\nctxt 0\n");
    copy_line(procfd, "stat", "btime ", &stat);
    buf_put(&stat, "processes 0\nprocs_running 1\nprocs_blocked 0\nsoftirq 0 0 0 0 0 0 0 0 0 0 0\n");
    struct ahl_buf total = {.n = 0};
    copy_line(procfd, "meminfo", "MemTotal:", &total);
    const char *kb = total.n > 9 ? total.b + 9 : " 0 kB\n";  // " <n> kB\n" after the key
    buf_put(&mem, "MemTotal:"); buf_put(&mem, kb);
    buf_put(&mem, "MemFree:"); buf_put(&mem, kb);
    buf_put(&mem, "MemAvailable:"); buf_put(&mem, kb);
    buf_put(&mem, "Buffers:               0 kB\nCached:                0 kB\nSwapCached:            0 kB\n"
                  "SwapTotal:             0 kB\nSwapFree:              0 kB\nShmem:                 0 kB\n");
    buf_put(&load, "0.00 0.00 0.00 1/1 1\n");
    buf_put(&up, "1000.00 0.00\n");
    copy_cgroups(procfd, &cgroups);
    int dir = sys_openat(mfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    int ok = dir >= 0 && put_file(dir, "stat", &stat) == 0 && put_file(dir, "meminfo", &mem) == 0 &&
             put_file(dir, "loadavg", &load) == 0 && put_file(dir, "uptime", &up) == 0 && put_file(dir, "cgroups", &cgroups) == 0 &&
             put_file(dir, "empty", &empty) == 0 && sys_mkdirat(dir, "emptydir", 0555) == 0 &&
             sys_fchmodat(dir, "emptydir", 0555) == 0;
    if (dir >= 0) sys_close(dir);
    if (!ok) return -1;
    return ahl_set_attrs(mfd, AHL_SAFE | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_RDONLY, 0);
}

static const char *const covered_same[] = {"stat", "meminfo", "loadavg", "uptime", "cgroups"};
static const char *const covered_empty[] = {
    "vmstat", "schedstat", "diskstats", "softirqs", "interrupts", "locks", "zoneinfo", "buddyinfo",
    "pagetypeinfo", "slabinfo", "vmallocinfo", "key-users", "sys/fs/inode-nr", "sys/fs/inode-state",
    "sys/fs/dentry-state", "sys/fs/file-nr", "sys/kernel/random/entropy_avail"};
/// Directories of host-wide counters, covered by an empty directory: pressure stall totals;
/// each interrupt's counts (irq/N/spurious: what the interrupts cover hides); filesystems'
/// own statistics (fs/ext4/DEV/es_shrinker_info moves with any sandbox's reads); the quota
/// subsystem's counters (sys/fs/quota/syncs moves by 2 with every sync(2) of any process:
/// a channel between sandboxes, found by an attack review).
static const char *const covered_dirs[] = {"pressure", "irq", "fs", "sys/fs/quota"};
#define COUNT(a) (sizeof (a) / sizeof (a)[0])

/// Covers the host-wide counters of the fresh /proc `procfd` with files of the masks mount.
static int cover_counters(int mfd, int procfd) {
    for (unsigned i = 0; i < COUNT(covered_same); i++)
        if (cover(mfd, covered_same[i], procfd, covered_same[i]) < 0) return -1;
    for (unsigned i = 0; i < COUNT(covered_empty); i++)
        if (cover(mfd, "empty", procfd, covered_empty[i]) < 0) return -1;
    for (unsigned i = 0; i < COUNT(covered_dirs); i++)
        if (cover(mfd, "emptydir", procfd, covered_dirs[i]) < 0) return -1;
    return 0;
}

/// The masks tree of a sandbox (a clone of the supervisor's), attached on /dev of the tree init
/// starts in (the copy of the seed namespace, or of the host's), which the pivot detaches with
/// the rest of that tree; the covers are bound from there (cover_bound). Init's view before the
/// pivot: that tree, with the new root on /tmp. -1 where it has no /dev: the covers are then
/// cloned one by one.
static const char masks_spot[] = "/dev";

static int cover_counters_bound(int masks_fd, int procfd) {
    int spot = sys_open(masks_spot, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (spot < 0) return cover_counters(masks_fd, procfd);
    int clone = sys_open_tree(masks_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH);
    if (clone < 0) { ahl_close_keep_errno(spot); return -1; }
    if (ahl_attach_close(clone, spot) < 0) return -1;
    if (sys_fchdir(procfd) < 0) return -1;
    for (unsigned i = 0; i < COUNT(covered_same); i++)
        if (cover_bound(masks_spot, covered_same[i], covered_same[i]) < 0) return -1;
    for (unsigned i = 0; i < COUNT(covered_empty); i++)
        if (cover_bound(masks_spot, "empty", covered_empty[i]) < 0) return -1;
    for (unsigned i = 0; i < COUNT(covered_dirs); i++)
        if (cover_bound(masks_spot, "emptydir", covered_dirs[i]) < 0) return -1;
    return sys_chdir("/");
}

/// The covers come from the supervisor's shared masks mount (`masks_fd`, read-only) where the
/// kernel clones from detached mounts; otherwise from a masks tmpfs made here, attached for
/// the moment of the clones.
static int mask_host_counters(int newroot, int procfd, int masks_fd) {
    if (masks_fd >= 0) return cover_counters_bound(masks_fd, procfd);
    int mfd = ahl_new_fs("tmpfs", 1 << 20, 0755, AHL_SAFE | MOUNT_ATTR_NOEXEC);
    if (mfd < 0) return -1;
    int spot = ahl_walk_create(newroot, masks_dir, 1, 1);
    if (spot < 0) { ahl_close_keep_errno(mfd); return -1; }
    if (ahl_attach_close(mfd, spot) < 0) return -1;
    mfd = ahl_walk_create(newroot, masks_dir, 1, 0);
    if (mfd < 0) return -1;
    if (ahl_write_masks(mfd, procfd) < 0 || cover_counters(mfd, procfd) < 0) { ahl_close_keep_errno(mfd); return -1; }
    sys_close(mfd);
    // init's view: the new root is attached at /tmp until the pivot.
    if (sys_umount2("/tmp/.autoharness-masks", MNT_DETACH) < 0) return -1;
    return sys_unlinkat(newroot, masks_dir + 1, AT_REMOVEDIR);
}

int ahl_setup_proc(int newroot, int masks_fd) {
    // Must happen before the old tree (the seed's or the host's) is detached: the kernel lets
    // a user namespace mount proc only while a fully visible proc is present in the mount
    // namespace.
    int mfd = ahl_new_fs("proc", 0, UINT32_MAX, AHL_SAFE | MOUNT_ATTR_NOEXEC);
    if (mfd < 0) return -1;
    int target = ahl_walk_create(newroot, "/proc", 1, 1);
    if (target < 0) { ahl_close_keep_errno(mfd); return -1; }
    if (ahl_attach_close(mfd, target) < 0) return -1;
    int procfd = ahl_walk_create(newroot, "/proc", 1, 0);
    if (procfd < 0) return -1;
    if (sys_fchdir(procfd) < 0) { ahl_close_keep_errno(procfd); return -1; }
    // irq and fs are covered whole (covered_dirs).
    static const char *const ro[] = {"sys", "sysrq-trigger", "bus"};
    for (unsigned i = 0; i < sizeof ro / sizeof ro[0]; i++)
        if (proc_readonly(ro[i]) < 0) { ahl_close_keep_errno(procfd); return -1; }
    if (LAYER_ON(LAYER_COVERS) && mask_host_counters(newroot, procfd, masks_fd) < 0) { ahl_close_keep_errno(procfd); return -1; }
    sys_close(procfd);
    return sys_chdir("/");
}
