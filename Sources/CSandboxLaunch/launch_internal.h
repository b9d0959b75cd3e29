// What the launch's facilities (launch.c and the files beside it, one per facility, as
// nsjail keeps mnt.cc, user.cc, net.cc) share. Hidden symbols: nothing here is an interface of
// the target. The same rules as launch.c: no C library function, system calls through sys.h.
#ifndef AHL_LAUNCH_INTERNAL_H
#define AHL_LAUNCH_INTERNAL_H

#include "ahl_launch.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/vfs.h>
#include <linux/magic.h>
#include <sys/wait.h>

#include "sys.h"

// A C library call slipping back in fails the build here (and the launcher's link).
#undef errno
#undef htons
#undef htonl
#pragma GCC poison errno open openat close close_range dup dup2 read write pread fcntl fstat fstatat mkdirat
#pragma GCC poison unlinkat symlinkat chdir fchdir pipe2 ioctl mount umount2 open_tree move_mount fsopen fsconfig fsmount
#pragma GCC poison mount_setattr _Fork fork waitpid kill setsid unshare setns sethostname prctl setrlimit execve
#pragma GCC poison sched_getaffinity sigaction sigprocmask signalfd poll socket bind listen send recv sendmsg
#pragma GCC poison syscall _exit malloc free calloc realloc sigfillset sigemptyset htons htonl


#define AHL_HIDDEN __attribute__((visibility("hidden")))

// report.c
/// The status a process of the launch ends with when its setup failed.
#define AHL_SETUP_FAILED 125
/// One message to the supervisor over the report socket (a dead supervisor is ignored).
AHL_HIDDEN void ahl_send_msg(int fd, int32_t kind, int32_t stage, int32_t err, int32_t index, int64_t value);
/// Reports (stage, errno, index) over the report socket and ends the process with status 125.
AHL_HIDDEN __attribute__((noreturn)) void ahl_fail(int rep, int32_t stage, int32_t index);

/// Hands `fd` to the supervisor over the report socket (a message of `kind`): 0, or -1.
AHL_HIDDEN int ahl_send_fd(int rep, int fd, int32_t kind);

// net.c
AHL_HIDDEN int ahl_loopback_up(void);
/// The monitor, in the sandbox's network namespace: the proxy's listener, handed over.
AHL_HIDDEN void ahl_open_proxy_listener(const struct ahl_plan *p, int rep);
/// The monitor, still host root: enters the namespace made for this sandbox (or makes one),
/// lo up, the host counters of its /proc/net hidden.
AHL_HIDDEN void ahl_enter_network_namespace(const struct ahl_plan *p, int rep);

// userns.c
/// Moves the payload into a user namespace of its own, nested below the sandbox's, which owns
/// the mount namespace: the payload's capabilities there reach no mount. Its ids map to
/// themselves (a span of them on a task's image). A failure ends the process through `ahl_fail`.
AHL_HIDDEN void ahl_lock_mounts(const struct ahl_plan *p, int rep);

// caps.c
/// Drops every capability (and, with `bounding`, the bounding and ambient sets): 0, or -1.
AHL_HIDDEN int ahl_drop_all_caps(uint32_t cap_last, int bounding);
/// Keeps `keep` (bit n: capability n) as the permitted, effective and bounding sets and drops
/// every other capability, the inheritable and ambient sets: 0, or -1.
AHL_HIDDEN int ahl_keep_caps(uint32_t cap_last, uint64_t keep);
/// Whether the calling thread holds exactly `keep` and has no_new_privs (`ahl_caps_are(.., 0)`:
/// no capability in any set).
AHL_HIDDEN int ahl_caps_are(uint32_t cap_last, uint64_t keep);

// landlock.c
/// Landlock under the mounts, as the plan asks (`landlock`: 0 off, 1 where the kernel has it,
/// 2 required); a failure ends the process through `ahl_fail`.
AHL_HIDDEN void ahl_apply_landlock(const struct ahl_plan *p, int rep);

// Benchmark builds only (AHL_BENCH_LAYERS): layers switched off to measure each one's cost.
#ifdef AHL_BENCH_LAYERS
enum { LAYER_COVERS = 1, LAYER_SECCOMP = 2, LAYER_LOCK_MOUNTS = 4, LAYER_LANDLOCK = 8, LAYER_VERIFY_CAPS = 16 };
AHL_HIDDEN extern int ahl_layers_off;
#define LAYER_ON(bit) (!(ahl_layers_off & (bit)))
#else
#define LAYER_ON(bit) 1
#endif

/// What every mount of the sandbox's carries.
#define AHL_SAFE ((uint64_t)(MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV))

// mounts.c
/// Who files the sandbox creates are owned by (the payload's ids; -1: not set yet).
AHL_HIDDEN extern int64_t ahl_creator_uid, ahl_creator_gid;
/// The template root's clone this sandbox's root is made from, or -1.
AHL_HIDDEN extern int ahl_root_clone;
/// The monitor, still privileged: a detached clone of a bind mount's source.
AHL_HIDDEN int ahl_open_source(const struct ahl_mount *m);
/// Whether the template root already holds this mount.
AHL_HIDDEN int ahl_templated(const struct ahl_mount *m);
/// Init: the sandbox's whole filesystem, as the plan says; a failure ends it through ahl_fail.
AHL_HIDDEN void ahl_setup_filesystem(const struct ahl_plan *p, int rep, const int *trees, int dev_tree, const int *device_trees);
// The mount building blocks, for the facilities beside mounts.c.
/// Opens (creating, as the sandbox's creator, when `create_last`) `path` below `rootfd`.
AHL_HIDDEN int ahl_walk_create(int rootfd, const char *path, int want_dir, int create_last);
AHL_HIDDEN int ahl_set_attrs(int mfd, uint64_t set, int recursive);
AHL_HIDDEN int ahl_attach(int mfd, int targetfd);
/// ahl_attach(), then both descriptors closed, keeping its error.
AHL_HIDDEN int ahl_attach_close(int mfd, int targetfd);
/// A detached tmpfs (or other simple fs) mount fd.
AHL_HIDDEN int ahl_new_fs(const char *type, uint64_t size, uint32_t mode, uint64_t attrs);
AHL_HIDDEN int ahl_mount_tmpfs_at(int newroot, const char *dest, uint64_t size, uint32_t mode, uint64_t attrs);
/// close() that leaves ahl_errno as the failure being reported.
AHL_HIDDEN void ahl_close_keep_errno(int fd);

// dev.c
AHL_HIDDEN extern const char *const ahl_device_nodes[AHL_DEVICE_COUNT];
/// The monitor, still privileged: a clone of the host's device node `name`.
AHL_HIDDEN int ahl_open_device(const char *name);
AHL_HIDDEN int ahl_own_dev(void);
AHL_HIDDEN int ahl_setup_dev(int newroot, int dev_tree, const int *device_trees);

// proc.c
AHL_HIDDEN int ahl_write_masks(int mfd, int procfd);
AHL_HIDDEN int ahl_setup_proc(int newroot, int masks_fd);

#endif
