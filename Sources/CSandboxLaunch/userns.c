// The payload's own user namespace (launch.c's payload stage): why it has one, its id maps.
#include "launch_internal.h"

static int write_self(const char *file, const char *text) {
    int fd = sys_open(file, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = strlen(text);
    ssize_t w = sys_write(fd, text, n);
    ahl_close_keep_errno(fd);
    if (w < 0) return -1;
    if ((size_t)w != n) { ahl_errno = EIO; return -1; }
    return 0;
}

/// `v` in decimal at `out`, by hand (no snprintf in the fork window); returns its length.
static size_t put_decimal(char *out, uint32_t v) {
    char digits[12];
    int n = 0;
    do { digits[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    for (int i = 0; i < n; i++) out[i] = digits[n - 1 - i];
    return (size_t)n;
}

static void put_id_map(char *out, uint32_t id) {
    // "ID ID 1\n"
    size_t k = put_decimal(out, id);
    out[k++] = ' ';
    k += put_decimal(out + k, id);
    memcpy(out + k, " 1\n", 4);
}

/// lock_mounts for a task's image, whose sandbox maps a span of ids (root and the image's
/// system users, which apt and dpkg switch to and chown files to). A process may write only a
/// one-id map into a namespace it made itself; a longer one needs CAP_SETUID and CAP_SETGID
/// in the parent namespace. So a child stays behind in the sandbox's namespace, where it holds
/// them (this process is uid 0 there and has dropped nothing yet), and writes this process's
/// maps once it has moved: the same span, each id to itself, so files look as they did.
/// setgroups stays "allow" (the supervisor wrote it so): apt drops its groups with setgroups.
static void lock_mounts_span(const struct ahl_plan *p, int rep) {
    int go[2];
    if (sys_pipe2(go, O_CLOEXEC) < 0) ahl_fail(rep, AHL_STAGE_LOCK_MOUNTS, 0);
    pid_t self = (pid_t)AHL_SYS0(SYS_getpid);
    pid_t writer = sys_fork();
    if (writer < 0) ahl_fail(rep, AHL_STAGE_LOCK_MOUNTS, 0);
    if (writer == 0) {
        sys_close(go[1]);
        char c = 0;
        ssize_t n;
        do {
            n = sys_read(go[0], &c, 1);
        } while (n < 0 && ahl_errno == EINTR);
        if (n != 1) sys_exit(1);
        // "/proc/PID/uid_map" and "0 0 SPAN\n", by hand (no snprintf in the fork window).
        char path[40] = "/proc/", map[32] = "0 0 ";
        size_t k = 6 + put_decimal(path + 6, (uint32_t)self);
        size_t m = 4 + put_decimal(map + 4, p->id_span);
        map[m++] = '\n';
        map[m] = 0;
        memcpy(path + k, "/uid_map", 9);
        if (write_self(path, map) < 0) sys_exit(2);
        memcpy(path + k, "/gid_map", 9);
        if (write_self(path, map) < 0) sys_exit(3);
        sys_exit(0);
    }
    sys_close(go[0]);
    if (sys_unshare(CLONE_NEWUSER) < 0) ahl_fail(rep, AHL_STAGE_LOCK_MOUNTS, 0);
    if (sys_write(go[1], "g", 1) != 1) ahl_fail(rep, AHL_STAGE_LOCK_MOUNTS, 0);
    sys_close(go[1]);
    int status = 0;
    pid_t r;
    do {
        r = sys_wait4(writer, &status, 0);
    } while (r < 0 && ahl_errno == EINTR);
    if (r != writer || (status & 0x7f) != 0 || ((status >> 8) & 0xff) != 0) {
        int code = r == writer && (status & 0x7f) == 0 ? (status >> 8) & 0xff : 0;
        ahl_errno = EPERM;
        ahl_fail(rep, AHL_STAGE_LOCK_MOUNTS, code == 3 ? 3 : 2);
    }
}

/// Mounts the payload could undo, had it the capabilities, are out of its reach: the payload
/// moves into a user namespace of its own and stays in init's mount namespace, which init's
/// user namespace owns. Every change to a mount namespace's tree (unmount, move, remount,
/// mount, bind, open_tree's clone, pivot_root) needs CAP_SYS_ADMIN in the user namespace
/// that owns it, so even with every capability of its new namespace (which it drops right
/// after) the payload can change nothing; and a mount namespace it copied for itself would
/// be copied into a less privileged user namespace, every mount MNT_LOCKED and its
/// read-only/nosuid/nodev/noexec flags locked, so nothing there could be unmounted to reveal
/// what a mount covers or remounted writable either. The kernel, not our seccomp filter,
/// holds this. Unlike a copy of the namespace made for the payload, it costs no copy of the
/// sandbox's mounts (43 for `benchmark-task`), at the start nor at the end.
/// The ids map to themselves: files look exactly as they did.
void ahl_lock_mounts(const struct ahl_plan *p, int rep) {
    // The id change in the monitor left this process non-dumpable, which makes its /proc
    // files root's, and once in the new namespace it has no capability over them. exec
    // makes it dumpable anyway; doing it now lets it write its own id maps.
    if (sys_prctl(PR_SET_DUMPABLE, 1, 0, 0, 0) < 0) ahl_fail(rep, AHL_STAGE_LOCK_MOUNTS, 0);
    if (p->id_span > 1) {
        lock_mounts_span(p, rep);
        return;
    }
    if (sys_unshare(CLONE_NEWUSER) < 0) ahl_fail(rep, AHL_STAGE_LOCK_MOUNTS, 0);
    char map[32];
    if (write_self("/proc/self/setgroups", "deny") < 0) ahl_fail(rep, AHL_STAGE_LOCK_MOUNTS, 1);
    put_id_map(map, p->uid);
    if (write_self("/proc/self/uid_map", map) < 0) ahl_fail(rep, AHL_STAGE_LOCK_MOUNTS, 2);
    put_id_map(map, p->gid);
    if (write_self("/proc/self/gid_map", map) < 0) ahl_fail(rep, AHL_STAGE_LOCK_MOUNTS, 3);
}

