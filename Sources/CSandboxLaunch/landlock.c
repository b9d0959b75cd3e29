// Landlock: a second wall under the mounts (part of the launch: launch_internal.h). Defined
// here rather than taken from <linux/landlock.h>, whose copy on older build hosts lacks the
// newer rights; the kernel accepts the smaller ruleset struct and reports its ABI, and only
// rights it knows are used.
#include "launch_internal.h"

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#define SYS_landlock_add_rule 445
#define SYS_landlock_restrict_self 446
#endif
#define AHL_LL_WRITE_FILE (1ULL << 1)
#define AHL_LL_REMOVE_DIR (1ULL << 4)
#define AHL_LL_REMOVE_FILE (1ULL << 5)
#define AHL_LL_MAKE_CHAR (1ULL << 6)
#define AHL_LL_MAKE_DIR (1ULL << 7)
#define AHL_LL_MAKE_REG (1ULL << 8)
#define AHL_LL_MAKE_SOCK (1ULL << 9)
#define AHL_LL_MAKE_FIFO (1ULL << 10)
#define AHL_LL_MAKE_BLOCK (1ULL << 11)
#define AHL_LL_MAKE_SYM (1ULL << 12)
#define AHL_LL_REFER (1ULL << 13)     // ABI 2
#define AHL_LL_TRUNCATE (1ULL << 14)  // ABI 3

struct ahl_ll_ruleset { uint64_t handled_access_fs; };
struct ahl_ll_path_beneath { uint64_t allowed_access; int32_t parent_fd; } __attribute__((packed));

static int ll_allow(int ruleset, const char *path, uint64_t access, uint64_t file_rights) {
    int fd = sys_open(path, O_PATH | O_CLOEXEC);
    if (fd < 0) return -1;
    struct stat st;
    if (sys_fstat(fd, &st) < 0) { sys_close(fd); return -1; }
    // A rule on a file may name only rights that apply to files.
    struct ahl_ll_path_beneath rule = {S_ISDIR(st.st_mode) ? access : (access & file_rights), fd};
    long r = AHL_SYS4(SYS_landlock_add_rule, ruleset, 1 /* LANDLOCK_RULE_PATH_BENEATH */, &rule, 0);
    int e = ahl_errno;
    sys_close(fd);
    ahl_errno = e;
    return r < 0 ? -1 : 0;
}

// Writes (create, write, truncate, remove, rename in, link in) are allowed only beneath the
// plan's read-write binds and tmpfs mounts, plus writing (not creating) the device nodes under
// /dev. Reads and execution are not Landlock's business here: the mounts decide those.
void ahl_apply_landlock(const struct ahl_plan *p, int rep) {
    if (!p->landlock) return;
    long abi = AHL_SYS3(SYS_landlock_create_ruleset, 0, 0, 1U /* LANDLOCK_CREATE_RULESET_VERSION */);
    if (abi < 1) {
        if (p->landlock == 2) ahl_fail(rep, AHL_STAGE_LANDLOCK, -1);
        return;
    }
    uint64_t handled = AHL_LL_WRITE_FILE | AHL_LL_REMOVE_DIR | AHL_LL_REMOVE_FILE | AHL_LL_MAKE_CHAR |
                       AHL_LL_MAKE_DIR | AHL_LL_MAKE_REG | AHL_LL_MAKE_SOCK | AHL_LL_MAKE_FIFO |
                       AHL_LL_MAKE_BLOCK | AHL_LL_MAKE_SYM;
    if (abi >= 2) handled |= AHL_LL_REFER;
    if (abi >= 3) handled |= AHL_LL_TRUNCATE;
    uint64_t file_rights = handled & (AHL_LL_WRITE_FILE | AHL_LL_TRUNCATE);
    struct ahl_ll_ruleset attr = {handled};
    int rs = (int)AHL_SYS3(SYS_landlock_create_ruleset, &attr, sizeof attr, 0);
    if (rs < 0) ahl_fail(rep, AHL_STAGE_LANDLOCK, -1);
    for (uint32_t i = 0; i < p->n_mounts; i++) {
        const struct ahl_mount *m = &p->mounts[i];
        int writable = m->kind == AHL_MOUNT_TMPFS || (m->kind == AHL_MOUNT_BIND && !(m->flags & AHL_MOUNT_READONLY));
        if (writable && ll_allow(rs, m->dest, handled, file_rights) < 0) ahl_fail(rep, AHL_STAGE_LANDLOCK, (int32_t)i);
    }
    if (ll_allow(rs, "/dev", file_rights, file_rights) < 0) ahl_fail(rep, AHL_STAGE_LANDLOCK, -2);
    (void)ll_allow(rs, "/dev/shm", handled, file_rights);  // present when init made it
    if (AHL_SYS2(SYS_landlock_restrict_self, rs, 0) < 0) ahl_fail(rep, AHL_STAGE_LANDLOCK, -1);
    sys_close(rs);
}

