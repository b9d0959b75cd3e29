// /dev in the sandbox: the host's harmless device nodes (null, zero, full, random, urandom,
// tty) cloned by the still-privileged monitor, a tmpfs /dev holding them, its links and a
// devpts of the sandbox's own (part of the launch: launch_internal.h).
#include "launch_internal.h"

const char *const ahl_device_nodes[AHL_DEVICE_COUNT] = {"null", "zero", "full", "random", "urandom", "tty"};

/// Monitor, still privileged: clone the host's harmless device nodes. They need a mount
/// without nodev; they stay nosuid/noexec/read-only (writes to a device node are not
/// blocked by a read-only mount, so /dev/null still works).
int ahl_open_device(const char *name) {
    char src[32] = "/dev/";
    size_t n = strlen(name);
    memcpy(src + 5, name, n + 1);
    int tree = sys_open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
    if (tree < 0) return -1;
    if (ahl_set_attrs(tree, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC | MOUNT_ATTR_RDONLY, 0) < 0) { ahl_close_keep_errno(tree); return -1; }
    return tree;
}

static int bind_device(int devdir, const char *name, int tree) {
    int f = sys_openat(devdir, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0444);
    if (f >= 0) sys_close(f);
    int target = sys_openat(devdir, name, O_PATH | O_NOFOLLOW | O_CLOEXEC, 0);
    if (target < 0) return -1;
    int r = ahl_attach(tree, target);
    ahl_close_keep_errno(target);
    return r;
}

static const char *const device_links[][2] = {
    {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"}, {"/proc/self/fd/1", "stdout"},
    {"/proc/self/fd/2", "stderr"}, {"pts/ptmx", "ptmx"}};

/// The device numbers of the nodes above (Linux's fixed assignments, devices.txt): char 1:3
/// null, 1:5 zero, 1:7 full, 1:8 random, 1:9 urandom, 5:0 tty.
static const unsigned device_numbers[AHL_DEVICE_COUNT][2] = {{1, 3}, {1, 5}, {1, 7}, {1, 8}, {1, 9}, {5, 0}};

/// Fills a fresh /dev tmpfs (`dir`, its root): the device nodes, the links, and the mount
/// points of /dev/shm and /dev/pts. The nodes are binds of the host's (`device_trees`, one
/// mount each), or, with NULL, nodes made here (mknod: host root only; the monitor, own_dev).
static int fill_dev(int dir, const int *device_trees) {
    for (unsigned i = 0; i < AHL_DEVICE_COUNT; i++) {
        if (device_trees) {
            if (bind_device(dir, ahl_device_nodes[i], device_trees[i]) < 0) return -1;
        } else {
            unsigned long dev = ((unsigned long)device_numbers[i][0] << 8) | device_numbers[i][1];
            // 0666 whatever the supervisor's umask, as the host's are.
            if (sys_mknodat(dir, ahl_device_nodes[i], S_IFCHR | 0666, dev) < 0 || sys_fchmodat(dir, ahl_device_nodes[i], 0666) < 0) return -1;
        }
    }
    for (unsigned i = 0; i < sizeof device_links / sizeof device_links[0]; i++)
        if (sys_symlinkat(device_links[i][0], dir, device_links[i][1]) < 0) return -1;
    if (sys_mkdirat(dir, "shm", 0755) < 0 || sys_mkdirat(dir, "pts", 0755) < 0) return -1;
    return 0;
}

/// This sandbox's /dev, made by the monitor while it is still host root (only the initial
/// user namespace may make device nodes): a detached tmpfs holding the six nodes (mknod, by
/// their fixed numbers, 0666), the links, and the mount points of shm and pts; read-only,
/// nosuid, noexec, and not nodev, so that its nodes work. One mount, where binds of the
/// host's nodes were seven; and its inodes are this sandbox's alone: a lock, an inotify watch
/// or the times the tty driver writes into /dev/tty's inode reach no other sandbox, where
/// the host's shared nodes carried them between sandboxes, and to later ones. -1 with
/// ahl_errno set when it cannot be made (EPERM: no CAP_MKNOD, as in a container).
int ahl_own_dev(void) {
    uint64_t attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC;
    int dev = ahl_new_fs("tmpfs", 1 << 20, 0755, attrs);
    int dir = dev >= 0 ? sys_openat(dev, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0) : -1;
    int ok = dir >= 0 && fill_dev(dir, NULL) == 0 && ahl_set_attrs(dev, attrs | MOUNT_ATTR_RDONLY, 0) == 0;
    int e = ahl_errno;
    if (dir >= 0) sys_close(dir);
    if (!ok && dev >= 0) { sys_close(dev); dev = -1; }
    ahl_errno = e;
    return dev;
}

/// /dev: the tmpfs the monitor made for this sandbox with its own device nodes (`dev_tree`,
/// detached, read-only: attached as it is), or, where the monitor could not make nodes, a
/// tmpfs built here holding binds of the host's nodes the monitor cloned. Either way /dev/shm
/// is a tmpfs of this sandbox's own and /dev/pts a devpts instance of its own.
int ahl_setup_dev(int newroot, int dev_tree, const int *device_trees) {
    if (dev_tree >= 0) {
        int target = ahl_walk_create(newroot, "/dev", 1, 1);
        if (target < 0) return -1;
        int r = ahl_attach(dev_tree, target);
        ahl_close_keep_errno(target);
        if (r < 0) return -1;
    } else {
        if (ahl_mount_tmpfs_at(newroot, "/dev", 1 << 20, 0755, AHL_SAFE | MOUNT_ATTR_NOEXEC) < 0) return -1;
        int dir = ahl_walk_create(newroot, "/dev", 1, 0);
        if (dir < 0) return -1;
        int r = fill_dev(dir, device_trees);
        ahl_close_keep_errno(dir);
        if (r < 0) return -1;
    }
    if (ahl_mount_tmpfs_at(newroot, "/dev/shm", 64ull << 20, 01777, AHL_SAFE | MOUNT_ATTR_NOEXEC) < 0) return -1;
    // A private devpts instance so ptys work without exposing the host's.
    int fs = sys_fsopen("devpts", FSOPEN_CLOEXEC);
    if (fs >= 0) {
        int ok = sys_fsconfig(fs, FSCONFIG_SET_STRING, "ptmxmode", "0666", 0) == 0 &&
                 sys_fsconfig(fs, FSCONFIG_SET_STRING, "mode", "0620", 0) == 0 &&
                 sys_fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0;
        int m = ok ? sys_fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC) : -1;
        sys_close(fs);
        if (m >= 0) {
            int t = ahl_walk_create(newroot, "/dev/pts", 1, 1);
            if (t >= 0) { (void)ahl_attach(m, t); sys_close(t); }
            sys_close(m);
        }
    }
    return 0;
}
