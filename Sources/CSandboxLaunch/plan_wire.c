// The launch plan as bytes, for the launcher executable (ahl_spawn_exec, ahl_launcher_main).
//
// The supervisor packs its `ahl_plan` into a sealed memfd before it forks; the launcher
// unpacks it into pointers into its own copy. Both ends are the same build of this file, so
// the layout is this struct's, native byte order; `magic` and `version` catch a launcher from
// another build. Every offset and count is checked against the buffer before use.
#include "ahl_launch.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define AHL_WIRE_MAGIC 0x504c4841u  // "AHLP"
#define AHL_WIRE_VERSION 12u

struct ahl_wire {
    uint32_t magic, version;
    uint64_t total;
    uint32_t n_argv, n_envp, n_mounts, n_rlimits, n_join, bpf_len;
    uint64_t argv, envp, search_path, cwd, hostname, mounts, rlimits, bpf, join;  // offsets
    uint32_t uid, gid, id_span, seccomp_flags, cap_last;
    uint64_t keep_caps;
    int32_t loopback_up, keep_survivors, landlock, cgroup_into_join, stdio[3], netns, hold, masks, template_root, dev, userns, seed;
    uint64_t root_size;
    uint16_t proxy_port;
    struct ahl_settings settings;
};

struct ahl_wire_mount {
    uint32_t kind, flags, mode, pad;
    uint64_t source, dest, dev, ino, size;  // source, dest: offsets (0: NULL)
};

struct buf {
    uint8_t *data;
    size_t len, cap;
    int failed;
};

static uint64_t put(struct buf *b, const void *p, size_t n) {
    size_t at = (b->len + 7) & ~(size_t)7;
    if (b->failed || at + n < at) { b->failed = 1; return 0; }
    if (at + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < at + n) cap *= 2;
        uint8_t *d = realloc(b->data, cap);
        if (!d) { b->failed = 1; return 0; }
        memset(d + b->cap, 0, cap - b->cap);
        b->data = d;
        b->cap = cap;
    }
    if (n) memcpy(b->data + at, p, n);
    b->len = at + n;
    return at;
}

static uint64_t put_str(struct buf *b, const char *s) { return s ? put(b, s, strlen(s) + 1) : 0; }

static uint32_t count(const char *const *v) {
    uint32_t n = 0;
    while (v && v[n]) n++;
    return n;
}

/// Strings of a NULL-terminated vector as offsets, then the offset table itself.
static uint64_t put_vec(struct buf *b, const char *const *v, uint32_t n) {
    uint64_t *off = calloc(n ? n : 1, sizeof *off);
    if (!off) { b->failed = 1; return 0; }
    for (uint32_t i = 0; i < n; i++) off[i] = put_str(b, v[i]);
    uint64_t at = put(b, off, n * sizeof *off);
    free(off);
    return at;
}

int ahl_plan_pack(const struct ahl_plan *p, int stdio_base, uint8_t **out, size_t *out_len) {
    struct buf b = {0};
    struct ahl_wire w;
    memset(&w, 0, sizeof w);
    put(&b, &w, sizeof w);  // placeholder, rewritten below
    w.magic = AHL_WIRE_MAGIC;
    w.version = AHL_WIRE_VERSION;
    w.n_argv = count(p->argv);
    w.n_envp = count(p->envp);
    w.n_join = count(p->cgroup_join);
    w.n_mounts = p->n_mounts;
    w.n_rlimits = p->n_rlimits;
    w.bpf_len = p->bpf_len;
    w.argv = put_vec(&b, p->argv, w.n_argv);
    w.envp = put_vec(&b, p->envp, w.n_envp);
    w.join = put_vec(&b, p->cgroup_join, w.n_join);
    w.search_path = put_str(&b, p->search_path);
    w.cwd = put_str(&b, p->cwd);
    w.hostname = put_str(&b, p->hostname);
    struct ahl_wire_mount *wm = calloc(p->n_mounts ? p->n_mounts : 1, sizeof *wm);
    if (!wm) { free(b.data); return ENOMEM; }
    for (uint32_t i = 0; i < p->n_mounts; i++) {
        const struct ahl_mount *m = &p->mounts[i];
        wm[i] = (struct ahl_wire_mount){m->kind, m->flags, m->mode, 0, put_str(&b, m->source), put_str(&b, m->dest),
                                        m->dev, m->ino, m->size};
    }
    w.mounts = put(&b, wm, p->n_mounts * sizeof *wm);
    free(wm);
    w.rlimits = put(&b, p->rlimits, p->n_rlimits * sizeof *p->rlimits);
    w.bpf = put(&b, p->bpf, (size_t)p->bpf_len * 8);
    w.uid = p->uid;
    w.gid = p->gid;
    w.id_span = p->id_span;
    w.keep_caps = p->keep_caps;
    w.seccomp_flags = p->seccomp_flags;
    w.cap_last = p->cap_last;
    w.loopback_up = p->loopback_up;
    w.keep_survivors = p->keep_survivors;
    w.landlock = p->landlock;
    w.cgroup_into_join = p->cgroup_into_join;
    // The launcher finds the payload's stdio at fixed numbers (stdio_base + i).
    for (int i = 0; i < 3; i++) w.stdio[i] = p->stdio[i] >= 0 ? stdio_base + i : -1;
    w.netns = p->netns_fd >= 0 ? stdio_base + 3 : -1;
    w.masks = p->masks_fd >= 0 ? stdio_base + 4 : -1;
    w.template_root = p->template_fd >= 0 ? stdio_base + 5 : -1;
    w.dev = p->dev_fd >= 0 ? stdio_base + 6 : -1;
    w.userns = p->userns_fd >= 0 ? stdio_base + 7 : -1;
    w.seed = p->seed_fd >= 0 ? stdio_base + 8 : -1;
    w.hold = p->hold;
    w.root_size = p->root_size;
    w.proxy_port = p->proxy_port;
    w.settings = p->settings;
    w.total = b.len;
    if (b.failed) { free(b.data); return ENOMEM; }
    memcpy(b.data, &w, sizeof w);
    *out = b.data;
    *out_len = b.len;
    return 0;
}

/// A NUL-terminated string at `off` inside [0, len), or NULL for offset 0.
static int str_at(const uint8_t *d, size_t len, uint64_t off, const char **s) {
    if (off == 0) { *s = NULL; return 0; }
    if (off >= len || !memchr(d + off, 0, len - off)) return -1;
    *s = (const char *)(d + off);
    return 0;
}

static int range_ok(size_t len, uint64_t off, uint64_t n, uint64_t size) {
    if (n == 0) return 1;
    if (size && n > (UINT64_MAX / size)) return 0;
    uint64_t bytes = n * size;
    return off <= len && bytes <= len - off && (off & 7) == 0;
}

static int vec_at(const uint8_t *d, size_t len, uint64_t off, uint32_t n, const char ***out) {
    if (!range_ok(len, off, n, sizeof(uint64_t))) return -1;
    const char **v = calloc((size_t)n + 1, sizeof *v);
    if (!v) return -1;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t o;
        memcpy(&o, d + off + i * sizeof o, sizeof o);
        if (o == 0 || str_at(d, len, o, &v[i]) < 0) { free(v); return -1; }
    }
    *out = v;
    return 0;
}

int ahl_plan_unpack(const uint8_t *d, size_t len, struct ahl_plan *p) {
    struct ahl_wire w;
    if (len < sizeof w) return EINVAL;
    memcpy(&w, d, sizeof w);
    if (w.magic != AHL_WIRE_MAGIC || w.version != AHL_WIRE_VERSION || w.total != len) return EINVAL;
    memset(p, 0, sizeof *p);
    const char **argv, **envp, **join;
    if (w.n_argv == 0 || vec_at(d, len, w.argv, w.n_argv, &argv) < 0 || vec_at(d, len, w.envp, w.n_envp, &envp) < 0 ||
        vec_at(d, len, w.join, w.n_join, &join) < 0)
        return EINVAL;
    p->argv = argv;
    p->envp = envp;
    p->cgroup_join = join;
    if (str_at(d, len, w.search_path, &p->search_path) < 0 || str_at(d, len, w.cwd, &p->cwd) < 0 ||
        str_at(d, len, w.hostname, &p->hostname) < 0 || !p->cwd)
        return EINVAL;
    if (!range_ok(len, w.mounts, w.n_mounts, sizeof(struct ahl_wire_mount)) ||
        !range_ok(len, w.rlimits, w.n_rlimits, sizeof(struct ahl_rlimit)) || !range_ok(len, w.bpf, w.bpf_len, 8))
        return EINVAL;
    struct ahl_mount *mounts = calloc(w.n_mounts ? w.n_mounts : 1, sizeof *mounts);
    struct ahl_rlimit *rl = calloc(w.n_rlimits ? w.n_rlimits : 1, sizeof *rl);
    int *scratch = calloc((size_t)w.n_mounts + AHL_DEVICE_COUNT, sizeof *scratch);
    if (!mounts || !rl || !scratch) return ENOMEM;
    for (uint32_t i = 0; i < w.n_mounts; i++) {
        struct ahl_wire_mount m;
        memcpy(&m, d + w.mounts + i * sizeof m, sizeof m);
        mounts[i] = (struct ahl_mount){.kind = m.kind, .flags = m.flags, .dev = m.dev, .ino = m.ino, .size = m.size, .mode = m.mode};
        if (str_at(d, len, m.source, &mounts[i].source) < 0 || str_at(d, len, m.dest, &mounts[i].dest) < 0 || !mounts[i].dest)
            return EINVAL;
    }
    if (w.n_rlimits) memcpy(rl, d + w.rlimits, w.n_rlimits * sizeof *rl);
    p->mounts = mounts;
    p->n_mounts = w.n_mounts;
    p->rlimits = rl;
    p->n_rlimits = w.n_rlimits;
    p->bpf = w.bpf_len ? d + w.bpf : NULL;
    p->bpf_len = w.bpf_len;
    p->uid = w.uid;
    p->gid = w.gid;
    p->id_span = w.id_span;
    p->keep_caps = w.keep_caps;
    p->seccomp_flags = w.seccomp_flags;
    p->cap_last = w.cap_last;
    p->loopback_up = w.loopback_up;
    p->keep_survivors = w.keep_survivors;
    p->landlock = w.landlock;
    p->cgroup_into_fd = -1;
    p->cgroup_into_join = w.cgroup_into_join;
    for (int i = 0; i < 3; i++) p->stdio[i] = w.stdio[i];
    p->netns_fd = w.netns;
    p->masks_fd = w.masks;
    p->template_fd = w.template_root;
    p->dev_fd = w.dev;
    p->userns_fd = w.userns;
    p->seed_fd = w.seed;
    p->hold = w.hold;
    p->root_size = w.root_size;
    p->proxy_port = w.proxy_port;
    p->settings = w.settings;
    p->scratch_fds = scratch;
    return 0;
}
