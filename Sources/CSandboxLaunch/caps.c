// Capabilities: dropping every set, and checking that none is left (part of the launch:
// launch_internal.h).
#include "launch_internal.h"

int ahl_drop_all_caps(uint32_t cap_last, int bounding) {
    if (bounding) return ahl_keep_caps(cap_last, 0);
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    return (int)AHL_SYS2(SYS_capset, &h, d);
}

int ahl_keep_caps(uint32_t cap_last, uint64_t keep) {
    for (uint32_t c = 0; c <= cap_last; c++)
        if (!(c < 64 && (keep >> c & 1)) && sys_prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && ahl_errno != EINVAL) return -1;
    if (sys_prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && ahl_errno != EINVAL) return -1;
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    d[0].effective = d[0].permitted = (uint32_t)keep;
    d[1].effective = d[1].permitted = (uint32_t)(keep >> 32);
    return (int)AHL_SYS2(SYS_capset, &h, d);
}

/// The value of `key` (e.g. "CapBnd:") in /proc/PID/status text: the characters after the
/// key's tab up to the end of its line, or NULL when the key is not at the start of a line.
static const char *status_field(const char *text, size_t len, const char *key, size_t *vlen) {
    size_t kl = strlen(key);
    for (size_t i = 0; i + kl < len; i++) {
        if ((i == 0 || text[i - 1] == '\n') && strncmp(text + i, key, kl) == 0 && text[i + kl] == '\t') {
            size_t v = i + kl + 1, e = v;
            while (e < len && text[e] != '\n') e++;
            *vlen = e - v;
            return text + v;
        }
    }
    return NULL;
}

int ahl_status_caps_are(const char *text, size_t len, uint64_t keep) {
    // Inheritable and ambient always empty; permitted, effective and bounding exactly `keep`.
    static const char *const sets[] = {"CapInh:", "CapPrm:", "CapEff:", "CapBnd:", "CapAmb:"};
    const uint64_t want[] = {0, keep, keep, keep, 0};
    size_t n;
    for (unsigned i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        // The kernel writes each set as 16 lower-case hex digits; anything else is no answer.
        const char *v = status_field(text, len, sets[i], &n);
        if (!v || n != 16) return -1;
        uint64_t value = 0;
        for (size_t k = 0; k < n; k++) {
            if ((v[k] < '0' || v[k] > '9') && (v[k] < 'a' || v[k] > 'f')) return -1;
            value = value << 4 | (uint64_t)(v[k] <= '9' ? v[k] - '0' : v[k] - 'a' + 10);
        }
        if (value != want[i]) return 0;
    }
    const char *v = status_field(text, len, "NoNewPrivs:", &n);
    if (!v || n == 0) return -1;
    return n == 1 && v[0] == '1' ? 1 : 0;
}

int ahl_status_file_caps_are(const char *path, int32_t tid, uint64_t keep) {
    char buf[4096];
    int fd = sys_open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return -1;
    // Only procfs's answer counts: a file on any other filesystem is not read at all.
    struct statfs fs;
    if (sys_fstatfs(fd, &fs) < 0 || fs.f_type != PROC_SUPER_MAGIC) {
        sys_close(fd);
        return -1;
    }
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf && (r = sys_read(fd, buf + got, sizeof buf - got)) > 0) got += (size_t)r;
    sys_close(fd);
    if (got >= sizeof buf) return -1;
    // And only about the caller: the Pid line of /proc/thread-self/status is the calling
    // thread's id (another process's or thread's status bound over it names another).
    size_t n;
    const char *v = status_field(buf, got, "Pid:", &n);
    if (!v || n == 0 || n > 10) return -1;
    int64_t pid = 0;
    for (size_t k = 0; k < n; k++) {
        if (v[k] < '0' || v[k] > '9') return -1;
        pid = pid * 10 + (v[k] - '0');
    }
    if (pid != tid) return -1;
    return ahl_status_caps_are(buf, got, keep);
}

/// Whether the calling thread holds exactly `keep` (permitted, effective, bounding) and no
/// other capability in any set (inheritable and ambient empty), and has no_new_privs, as the
/// kernel reports it. One read of /proc/thread-self/status answers all six where 83 system
/// calls did (capget, then PR_CAPBSET_READ and PR_CAP_AMBIENT_IS_SET for each capability);
/// capabilities and no_new_privs are per thread, so it is the calling thread's file, and its
/// Pid line must name the caller. Where it cannot be read or is not that (no /proc where the
/// caller looks: the monitor once init has pivoted their shared mount namespace, a host
/// without /proc), the system calls answer.
int ahl_caps_are(uint32_t cap_last, uint64_t keep) {
    int verdict = ahl_status_file_caps_are("/proc/thread-self/status", (int32_t)AHL_SYS0(SYS_gettid), keep);
    if (verdict >= 0) return verdict;
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    if (AHL_SYS2(SYS_capget, &h, d) < 0) return 0;
    for (int i = 0; i < 2; i++) {
        uint32_t want = (uint32_t)(keep >> (32 * i));
        if (d[i].effective != want || d[i].permitted != want || d[i].inheritable) return 0;
    }
    for (uint32_t c = 0; c <= cap_last; c++) {
        if (sys_prctl(PR_CAPBSET_READ, c, 0, 0, 0) != (c < 64 && (keep >> c & 1))) return 0;
        if (sys_prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, c, 0, 0) > 0) return 0;
    }
    return sys_prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) == 1;
}
