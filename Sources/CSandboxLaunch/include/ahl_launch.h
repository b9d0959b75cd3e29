// CSandboxLaunch: everything that runs between fork and exec.
//
// The Swift supervisor is multi-threaded, so between fork() and execve() only
// async-signal-safe code may run. That code lives here and nowhere else. The supervisor
// compiles a policy into an `ahl_plan` (all strings, the seccomp BPF and the mount table
// allocated *before* the fork) and calls `ahl_spawn`. Three processes result:
//
//   monitor  (host pid namespace)  unshares the namespaces, waits for the supervisor to
//            write the id maps (it joined its cgroups itself), forks init, relays control bytes,
//            and exits with init's status. It never runs untrusted code.
//   init     (pid 1 of the sandbox) builds the filesystem, forks the payload, forwards
//            signals to it, reaps orphans, reports the payload's wait status and exits —
//            which makes the kernel kill everything left in the pid namespace.
//   payload  (pid 2) moves into a user and mount namespace of its own (which locks every
//            mount init made), drops every capability, installs seccomp last, and execs
//            the command.
//
// Every message to the supervisor is one `ahl_msg` on a SOCK_SEQPACKET socket.
#ifndef AUTOHARNESS_AHL_LAUNCH_H
#define AUTOHARNESS_AHL_LAUNCH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

enum ahl_mount_kind {
    AHL_MOUNT_BIND = 1,     // source: host path (absolute, canonical)
    AHL_MOUNT_TMPFS = 2,    // size, mode
    AHL_MOUNT_HIDE = 3,     // cover an existing file or directory with an empty read-only one
    AHL_MOUNT_SYMLINK = 4,  // source: the link text
};

enum {
    AHL_MOUNT_READONLY = 1u << 0,
    AHL_MOUNT_SOURCE_DIR = 1u << 1,  // binds: the source is a directory
    AHL_MOUNT_NO_SYMLINKS = 1u << 2, // binds: MOUNT_ATTR_NOSYMFOLLOW
    // With a template root (ahl_plan.template_fd): the entry is already in the template and the
    // sandbox mounts nothing for it; or the template holds its mount point, and the sandbox
    // mounts it there.
    AHL_MOUNT_IN_TEMPLATE = 1u << 3,
    AHL_MOUNT_POINT_IN_TEMPLATE = 1u << 4,
};

struct ahl_mount {
    uint32_t kind;
    uint32_t flags;
    const char *source;
    const char *dest;      // absolute, normalised; parents are listed before children
    uint64_t dev;          // binds: st_dev/st_ino the source had when the plan was made;
    uint64_t ino;          //        a swapped source fails the launch instead of being mounted
    uint64_t size;         // tmpfs: bytes (0: 64 MiB)
    uint32_t mode;         // tmpfs: permission bits of the root
};

struct ahl_rlimit {
    int32_t resource;
    uint64_t soft;
    uint64_t hard;
};

/// A caller's scheduling and resource settings, which the sandbox gets instead of its
/// launcher's: a launch the launch service runs for the front (LaunchService.swift) is the
/// front's launch, and a one-shot one inherits them from the front.
struct ahl_settings {
    int32_t given;                // 0: the sandbox keeps its launcher's
    int32_t sched_policy, sched_priority, sched_reset_on_fork;  // sched_setattr's
    int32_t nice, ioprio, oom_score_adj;
    uint64_t affinity[16];        // sched_setaffinity's mask, up to 1024 CPUs
    uint64_t soft[16], hard[16];  // RLIMIT_CPU (0) to RLIMIT_RTTIME (15)
};

struct ahl_plan {
    const char *const *argv;      // NULL-terminated; argv[0] is looked up in search_path if it has no '/'
    const char *const *envp;      // NULL-terminated; the payload's whole environment
    const char *search_path;      // PATH used to find argv[0] (may be NULL)
    const char *cwd;              // absolute, inside the sandbox
    const char *hostname;
    uint32_t uid, gid;            // ids inside the user namespace (0 only with id_span > 1)
    uint32_t id_span;             // how many ids map from uid/gid on (1, or a task image's 65536):
                                  // the payload's own user namespace then maps each to itself
    uint64_t keep_caps;           // capabilities the payload keeps in its own user namespace
                                  // (bit n: capability n); 0 for every sandbox but an image's
    const struct ahl_mount *mounts;
    uint32_t n_mounts;
    const struct ahl_rlimit *rlimits;
    uint32_t n_rlimits;
    const void *bpf;              // struct sock_filter[bpf_len]
    uint32_t bpf_len;
    uint32_t seccomp_flags;       // added to SECCOMP_FILTER_FLAG_NEW_LISTENER
    int32_t loopback_up;          // bring `lo` up in the new network namespace
    int32_t keep_survivors;       // when the payload exits, init reports it (AHL_MSG_EXIT, index 1
                                  // if processes it started still run) and keeps those running
                                  // until they end or the supervisor kills the sandbox
    int32_t stdio[3];             // supervisor fds to become 0, 1, 2 (-1: inherit)
    uint32_t cap_last;            // highest capability number the kernel knows
    uint64_t root_size;           // bytes for the root tmpfs (holds only mount points)
    int *scratch_fds;             // n_mounts + AHL_DEVICE_COUNT ints the child may overwrite
    const char *const *cgroup_join; // NULL-terminated cgroup files the monitor writes "0" into to
                                    // join: v1 `tasks`, v2 `cgroup.procs`
    int32_t cgroup_into_fd;       // >= 0: the sandbox's v2 cgroup directory; the monitor is created
                                  // inside it by clone3(CLONE_INTO_CGROUP) where the kernel can
    int32_t cgroup_into_join;     // the cgroup_join entry that clone makes unnecessary (-1: none)
    uint16_t proxy_port;          // non-zero: listen on 127.0.0.1:port inside the sandbox's network
                                  // namespace and hand the socket to the supervisor (egress proxy)
    int32_t landlock;             // 0 off, 1 when the kernel has it, 2 required (fail without it)
    int32_t netns_fd;             // >= 0: a network namespace made ahead of time (NetworkNamespacePool)
                                  // for this sandbox alone: the monitor enters it instead of
                                  // unsharing one (lo down; owned by the initial user namespace)
    int32_t hold;                 // a sandbox built ahead: build everything, then wait until the
                                  // supervisor sends AHL_CTL_RUN; 1: before seccomp and exec,
                                  // 2: after seccomp (the filter allows recvfrom), before exec
    int32_t masks_fd;             // >= 0: the supervisor's shared, read-only tree (ahl_build_shared):
                                  // /proc's covering files, cloned instead of built
    int32_t dev_fd;               // >= 0: this sandbox's /dev, made ahead of time (ahl_build_dev) for
                                  // it alone; the monitor attaches it instead of making one
    int32_t seed_fd;              // >= 0: a mount namespace holding only an empty root with /tmp, /dev
                                  // and /proc (ahl_build_seed): the monitor copies it instead of the
                                  // host's, whose mounts init would detach again at once
    int32_t userns_fd;            // >= 0: this sandbox's user namespace, made ahead of time with its
                                  // id maps written (ahl_make_userns) for it alone: the monitor
                                  // enters it instead of unsharing one and waiting for the maps
    uint32_t host_uid, host_gid;  // the host ids uid and gid map to (template roots' owner; not
                                  // sent to the launcher)
    int32_t template_fd;          // >= 0: a template root for this plan (ahl_build_template): the
                                  // sandbox's root is a clone of it, holding the mounts flagged
                                  // AHL_MOUNT_IN_TEMPLATE; needs masks_fd
    uint64_t wipe_start[2];       // the supervisor's argv and environment blocks (arg_start,
    uint64_t wipe_end[2];         // env_start / arg_end, env_end of /proc/self/stat), zeroed
                                  // in the children: init's /proc/1/cmdline is world-readable
    struct ahl_settings settings; // the caller's, set by the monitor before anything else
};

/// /dev holds exactly these host nodes: null, zero, full, random, urandom, tty.
#define AHL_DEVICE_COUNT 6

/// The monitor: `plan` as the sandbox to build, `rep` the report socket, `ctl` the control
/// socket; `joined` is the cgroup_join entry clone3 already placed this process in (-1: none).
/// Runs in a single-threaded process (the launcher, or a fork of the supervisor) and never
/// returns.
__attribute__((noreturn)) void ahl_monitor_main(const struct ahl_plan *plan, int rep, int ctl, int32_t joined);

/// main() of the launcher: plan on fd 3 (a sealed memfd), report socket on 4, control socket
/// on 5, stdio at 6-8, the plan's network namespace (if any) at 9, the shared masks at 10, its
/// template root at 11, its /dev at 12, its user namespace at 13.
int ahl_launcher_main(int argc, char **argv);
/// What the launcher's own entry point and allocator need (it has no C library): exit_group,
/// and fresh anonymous read-write pages (NULL on failure).
__attribute__((noreturn)) void ahl_exit(int status);
void *ahl_map_pages(size_t len);
enum { LAUNCHER_PLAN_FD = 3, LAUNCHER_REPORT_FD = 4, LAUNCHER_CONTROL_FD = 5, LAUNCHER_STDIO_FD = 6, LAUNCHER_NETNS_FD = 9,
       LAUNCHER_MASKS_FD = 10, LAUNCHER_TEMPLATE_FD = 11, LAUNCHER_DEV_FD = 12, LAUNCHER_USERNS_FD = 13,
       LAUNCHER_SEED_FD = 14 };

/// The read-only tree every sandbox of this process clones instead of building it: the files
/// that cover /proc's host-wide counters. A detached mount, close-on-exec. Needs a kernel that
/// clones from detached mounts (6.x); returns 0, or an errno value (EINVAL: the kernel cannot)
/// and -1. Call it from one thread at a time: it reports errors through CSandboxLaunch's
/// process-wide errno.
int ahl_build_shared(int *masks_fd);

/// A template root for `plan`, built in the caller's (the supervisor's) mount namespace: a
/// detached read-only tmpfs holding the entries flagged AHL_MOUNT_IN_TEMPLATE (read-only binds
/// and symlinks, each cloned and checked as a sandbox would) and the mount points of those
/// flagged AHL_MOUNT_POINT_IN_TEMPLATE, /dev and /proc. A sandbox clones it whole (one call)
/// where it would make a root and mount each entry. 0, or an errno value and -1 (EINVAL: the
/// kernel cannot attach to a detached mount). One thread at a time, as ahl_build_shared.
int ahl_build_template(const struct ahl_plan *plan, int *template_fd);

/// One sandbox's /dev, made ahead of time by the supervisor (host root): the detached read-only
/// tmpfs with its own six device nodes that the monitor would otherwise make (own_dev). 0, or
/// an errno value and -1 (EPERM: no CAP_MKNOD). One thread at a time, as ahl_build_shared.
int ahl_build_dev(int *dev_fd);

/// The body of ahl_make_userns's child, which shares the supervisor's memory: waits to be
/// killed, by direct system calls only (no C library: its thread-local state is the caller's).
/// `parent`: the caller's pid; the child dies with the calling thread (PR_SET_PDEATHSIG).
int ahl_park(void *parent);

/// The plan as bytes (malloc'd; stdio descriptors renumbered from stdio_base, the network
/// namespace to stdio_base + 3, the shared masks tree to stdio_base + 4, the template root to
/// stdio_base + 5, the /dev to stdio_base + 6, the user namespace to stdio_base + 7) and back
/// (pointers into `bytes`, which must outlive the plan). 0 or an errno value.
int ahl_plan_pack(const struct ahl_plan *plan, int stdio_base, uint8_t **bytes, size_t *len);
int ahl_plan_unpack(const uint8_t *bytes, size_t len, struct ahl_plan *plan);

// Control bytes, supervisor -> monitor. Any byte 1..64 is a signal to forward to the payload.
enum { AHL_CTL_GO = 'G', AHL_CTL_KILL = 'K' };

/// Held plans (`hold` set): the payload, ready to exec (before or after seccomp), reports
/// AHL_MSG_HELD and waits for this byte, sent by the supervisor on report_fd (the only
/// message that travels that way). Anything else, or EOF, ends the sandbox unrun.
enum { AHL_CTL_RUN = 'R' };

enum ahl_msg_kind {
    AHL_MSG_UNSHARED = 1,     // namespaces exist; the supervisor may write id maps now (not with
                              // a user namespace made ahead, whose maps are written)
    AHL_MSG_INIT_PID = 2,     // value: host pid of the sandbox's init
    AHL_MSG_LISTENER = 3,     // carries the seccomp notification fd (SCM_RIGHTS)
    AHL_MSG_SETUP_ERROR = 4,  // stage, err, index (mount index for mount stages)
    AHL_MSG_EXEC_ERROR = 5,   // err: execve's errno
    AHL_MSG_EXIT = 6,         // value: the payload's wait status; index 1: processes it started
                              // still run (keep_survivors)
    AHL_MSG_STARTED = 7,      // index: the payload's pid inside the sandbox
    AHL_MSG_PROXY_LISTENER = 8, // carries the listening socket of the egress proxy (SCM_RIGHTS)
    AHL_MSG_HELD = 9,         // held plans: the sandbox is built; the payload waits for AHL_CTL_RUN
};

enum ahl_stage {
    AHL_STAGE_NONE = 0,
    AHL_STAGE_SETGROUPS,
    AHL_STAGE_UNSHARE,
    AHL_STAGE_WAIT_MAPS,
    AHL_STAGE_SETID,
    AHL_STAGE_UNSHARE_CGROUP,
    AHL_STAGE_FORK_INIT,
    AHL_STAGE_MOUNT_PRIVATE,
    AHL_STAGE_OPEN_SOURCE,       // index: which plan mount
    AHL_STAGE_OPEN_DEVICE,
    AHL_STAGE_JOIN_CGROUP,       // index: which cgroup_join entry
    AHL_STAGE_PROXY_LISTENER,
    AHL_STAGE_MOUNT_ROOT,
    AHL_STAGE_MOUNT_ENTRY,       // index: which plan mount
    AHL_STAGE_MOUNT_DEV,
    AHL_STAGE_MOUNT_PROC,
    AHL_STAGE_MOUNT_READONLY,
    AHL_STAGE_DETACH_OLD_ROOT,
    AHL_STAGE_PIVOT_ROOT,
    AHL_STAGE_HOSTNAME,
    AHL_STAGE_LOOPBACK,
    AHL_STAGE_SIGNALFD,
    AHL_STAGE_FORK_PAYLOAD,
    AHL_STAGE_STDIO,
    AHL_STAGE_RLIMIT,            // index: which plan rlimit
    AHL_STAGE_CHDIR,
    AHL_STAGE_NO_NEW_PRIVS,
    AHL_STAGE_DROP_CAPS,
    AHL_STAGE_VERIFY_CAPS,
    AHL_STAGE_LANDLOCK,          // index: which plan mount (-1: the ruleset itself, -2: /dev)
    AHL_STAGE_SECCOMP,
    AHL_STAGE_SEND_LISTENER,
    AHL_STAGE_LOCK_MOUNTS,       // index: 0 unshare, 1 setgroups, 2 uid_map, 3 gid_map
    AHL_STAGE_EXEC_LAUNCHER,     // index: 0 moving descriptors or exec, 1 reading the plan
    AHL_STAGE_ENTER_NETNS,       // setns into the plan's network namespace
    AHL_STAGE_HOLD,              // held plans: waiting for AHL_CTL_RUN
    AHL_STAGE_ENTER_USERNS,      // setns into the user namespace made for this sandbox
    AHL_STAGE_ENTER_SEED,        // setns into the seed mount namespace
    AHL_STAGE_COUNT
};

struct ahl_msg {
    int32_t kind;
    int32_t stage;
    int32_t err;
    int32_t index;
    int64_t value;
};

/// A readable name for a stage ("mount /proc"), for `sandbox: <stage>: <strerror>` messages.
const char *ahl_stage_name(int32_t stage);

/// Reads /proc/PID/status text (capability sets as 16 lower-case hex digits each): 1 when
/// CapPrm, CapEff and CapBnd are exactly `keep`, CapInh and CapAmb are zero and NoNewPrivs is
/// 1; 0 when any set differs or NoNewPrivs is not 1; -1 when a field is missing or malformed
/// (the caller then asks by system call). `keep` 0: no capability at all.
int ahl_status_caps_are(const char *text, size_t len, uint64_t keep);

/// ahl_status_caps_are of the status file at `path` (/proc/thread-self/status), read only if
/// it is on procfs and its Pid line is `tid`: -1 otherwise, or when it cannot be read.
int ahl_status_file_caps_are(const char *path, int32_t tid, uint64_t keep);

#ifdef __cplusplus
}
#endif
#endif
