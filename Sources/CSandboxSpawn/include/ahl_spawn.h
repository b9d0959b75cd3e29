// CSandboxSpawn: the supervisor's side of a sandbox's start (C, linked into the supervisor
// only). It creates the monitor, as the launcher executable (`ahl_spawn_exec`) or as a fork of
// the supervisor (`ahl_spawn`), and reads its reports. Unlike CSandboxLaunch it uses the C
// library: it runs in the supervisor's threads, never in a sandbox's processes (the vfork
// child of `ahl_spawn_exec` only moves descriptors and execs).
#ifndef AUTOHARNESS_AHL_SPAWN_H
#define AUTOHARNESS_AHL_SPAWN_H

#include "ahl_launch.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ahl_child {
    pid_t pid;        // the monitor (a child of the caller; wait for it)
    int report_fd;    // read ahl_msg records until EOF (CLOEXEC)
    int control_fd;   // write control bytes; closing it kills the sandbox (CLOEXEC)
    int born_in_cgroup; // 1: clone3(CLONE_INTO_CGROUP) created the monitor inside cgroup_into_fd
};

/// Forks the monitor (clone3 with CLONE_INTO_CGROUP when the plan names a v2 cgroup and the
/// kernel has it, so the monitor is never outside that cgroup; else fork, and the monitor
/// joins by itself before it creates anything). Returns 0, or an errno value if nothing was
/// started.
/// Afterwards: read AHL_MSG_UNSHARED, write /proc/PID/{setgroups,uid_map,gid_map}, write
/// AHL_CTL_GO to control_fd, then read messages.
int ahl_spawn(const struct ahl_plan *plan, struct ahl_child *out);

/// `ahl_spawn`, but the monitor is the launcher executable `launcher_fd` (opened O_PATH by the
/// caller, which vouches for it) fed `plan` as bytes: a small fresh process instead of a copy
/// of the caller, so neither it nor init nor the payload copies the caller's page tables.
/// Started by a vfork-style clone (nothing copied), or by a clone3(CLONE_INTO_CGROUP) fork
/// when the plan names a v2 cgroup. A launcher that cannot be exec'd is reported like any
/// setup stage (AHL_STAGE_EXEC_LAUNCHER). Same protocol afterwards.
int ahl_spawn_exec(const struct ahl_plan *plan, int launcher_fd, struct ahl_child *out);

/// A mount namespace for monitors to copy instead of the host's (`ahl_plan.seed_fd`): an empty
/// read-only tmpfs root holding /tmp (where init attaches the new root before its pivot), /dev
/// (where it attaches the /proc covers) and /proc (a procfs of the initial pid namespace,
/// nosuid, nodev, noexec, nothing on it: the kernel lets a user namespace mount a proc only
/// where a fully visible one is present). Built once, on a thread of its own that unshares its
/// mount namespace and pivots into the tmpfs. No sandbox process ever enters it: a monitor does,
/// as host root before it runs anything of the sandbox, only to copy it; host root can, through
/// the supervisor's descriptor. 0 and a close-on-exec descriptor, or an errno value.
int ahl_build_seed(int *seed_fd);

/// Receives one message; if it carries a file descriptor it is stored in *fd (else -1), and
/// *sender is the pid of the process that sent it, as this process sees it (0: unknown).
/// Returns the byte count (0 at EOF) or -1 with errno set.
ssize_t ahl_recv_msg(int report_fd, struct ahl_msg *msg, int *fd, int32_t *sender);

/// A user namespace for one sandbox, made ahead of time: its one uid and one gid mapped to the
/// host ids (`uid host_uid 1`, `gid host_gid 1`) and setgroups denied, exactly as the supervisor
/// writes them for a monitor that unshared its own; owned by this process's euid (host root),
/// its parent the initial user namespace. A short-lived child (CLONE_VM: no copy of this
/// process's memory) holds it while the maps are written and is killed by pid once its
/// /proc/PID/ns/user is open. 0 and a close-on-exec descriptor, or an errno value.
int ahl_make_userns(uint32_t uid, uint32_t gid, uint32_t host_uid, uint32_t host_gid, int *userns_fd);

#ifdef __cplusplus
}
#endif
#endif
