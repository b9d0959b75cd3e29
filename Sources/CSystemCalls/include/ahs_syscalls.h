// Small system-call shims for the supervisor (never the fork window): see syscalls.c.
#ifndef AUTOHARNESS_AHS_SYSCALLS_H
#define AUTOHARNESS_AHS_SYSCALLS_H
#include <sys/types.h>
#ifdef __cplusplus
extern "C" {
#endif
/// An anonymous in-memory file (memfd_create, MFD_CLOEXEC), or -1 with errno.
int ahs_memfd(const char *name);

/* The CPUs the calling thread may run on, at most `max` of them, into `cpus`; returns how
   many, or -errno. */
int ahs_allowed_cpus(int *cpus, int max);
/* On a thread of its own per CPU, pinned to cpus[i], all at once: takes `pipes[i]` numbers
   from the kernel's shared inode-number counter (get_next_ino: pipes, sockets, mqueue inodes)
   and `memfds[i]` from the internal shmem mount's (memfd, SysV shm) on cpus[i], closing every
   object at once; starts and joins `thread_counts[i]` threads (the process serial) and
   `session_counts[i]` processes that each make a session (the autogroup serial) from there.
   0, or -errno with the CPU it failed on in *failed_cpu. (counter_noise.c) */
int ahs_perturb_inode_numbers(const int *cpus, const long *pipes, const long *memfds, const long *thread_counts,
                              const long *session_counts, int n, int *failed_cpu);
/// The host's process serial as this kernel shows it: the inode number of a pidfd of a child
/// made for the purpose (Linux 6.5+, pidfs), or -errno.
long long ahs_pid_serial(void);
/// The host's autogroup serial as a sandbox can read it: the id of the autogroup a child gets
/// from setsid() (/proc/self/autogroup), or -errno (-ENOENT without CONFIG_SCHED_AUTOGROUP).
long long ahs_autogroup_serial(void);
/// A detached clone of the mount of `path` (a file), read-only, nosuid, noexec: a descriptor
/// (close-on-exec) to reopen through /proc/self/fd, or -1 with errno.
int ahs_readonly_clone(const char *path);
/// open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC) (O_PATH is hidden by the Glibc module).
int ahs_open_path(const char *path);

/// execveat(fd, "", argv, envp, AT_EMPTY_PATH): runs the file `fd` (an O_PATH descriptor
/// checked before) without looking its path up again. Returns only on failure (-1, errno).
int ahs_execveat_fd(int fd, char *const argv[], char *const envp[]);
/// The f_type of the file system holding `fd` (fstatfs, whose <sys/vfs.h> the Glibc module
/// does not export), or -1 with errno.
long ahs_filesystem_type(int fd);
/// The version of the glibc this process runs with ("2.36"): for a static binary, the one
/// linked into it.
const char *ahs_libc_version(void);
/// 1 when this process has no program interpreter (a static executable), else 0.
int ahs_statically_linked(void);
/// accept4(listener, NULL, NULL, SOCK_CLOEXEC) (hidden by the Glibc module).
int ahs_accept_cloexec(int listener);
/// The peer of a connected Unix socket (SO_PEERCRED): 0, or -1 with errno.
int ahs_peer_credentials(int fd, int *pid, unsigned *uid);
/// The kernel's Landlock ABI version (>= 1), or -errno (-ENOSYS: not built in, -EOPNOTSUPP:
/// disabled at boot).
int ahs_landlock_abi(void);
/// pidfd_open(pid, 0) and pidfd_send_signal(fd, sig, NULL, 0), or -1 with errno.
int ahs_pidfd_open(int pid);
int ahs_pidfd_kill(int pidfd, int sig);
/// A new network namespace made by the calling thread, which then goes back to `home` (an fd
/// of the namespace it started in): the new namespace's descriptor (O_CLOEXEC; lo down), or
/// -errno. *stranded is set to 1 when the thread could not go back: it must do nothing else.
int ahs_make_netns(int home, int *stranded);
/// Whether [addr, addr+len) of the process whose /proc/PID/maps is open on `maps_fd` lies
/// entirely in writable mappings, asked with the PROCMAP_QUERY ioctl (Linux 6.11): 1 yes,
/// 0 no, -1 when the kernel cannot answer (ENOTTY, EINVAL: older kernels; read the file).
int ahs_range_writable(int maps_fd, unsigned long long addr, unsigned long long len);
/// Asks the kernel to hand each seccomp notification on `listener` to the supervisor on the
/// notifying task's CPU and back (SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP, Linux 6.6): 0, or -1
/// with errno (EINVAL: an older kernel; notifications then work as before, only slower).
int ahs_seccomp_sync_wakeup(int listener);

/// A Unix stream socket (close-on-exec) listening at `dir`/`name` with exactly `mode`, or -1
/// with errno (ENAMETOOLONG: the path does not fit a sockaddr_un; EEXIST: a file is there, not
/// replaced). `dir` must be one no one else may write: the socket is bound in a private
/// directory made in it and renamed into place.
int ahs_unix_listen(const char *dir, const char *name, unsigned mode, int backlog);
/// For `fd`, a listening socket another process made and passed down (systemd's socket
/// activation): checks that it is a listening Unix stream socket bound to a path, and writes
/// that path (NUL-terminated) to `path`. Changes nothing. 0, or -1 with errno (ENOTSOCK,
/// EAFNOSUPPORT: not a Unix socket, ESOCKTNOSUPPORT: not a stream, EINVAL: not listening,
/// EADDRNOTAVAIL: not bound to a path, ENAMETOOLONG).
int ahs_unix_listener_path(int fd, char *path, unsigned long capacity);
/// Takes over `fd`, a passed-down listening socket that passed the checks: makes it
/// close-on-exec and non-blocking, and listens on it again (`backlog`), which makes this
/// process the one a client's SO_PEERCRED names (the kernel records the listener's credentials
/// at listen(2) and copies them to each connection). 0, or -1 with errno.
int ahs_unix_adopt_listener(int fd, int backlog);
/// The file a Unix socket is bound to, as the kernel holds it (sock_diag, UNIX_DIAG_VFS): its
/// device (as stat(2) gives st_dev) and the low 32 bits of its inode number. 0, or -1 with
/// errno (EADDRNOTAVAIL: bound to no file; ENOENT: the kernel does not know the socket, e.g.
/// one of another network namespace).
int ahs_unix_bound_file(int fd, unsigned long long *dev, unsigned *ino);
/// A Unix stream socket (close-on-exec) connected to `path`, or -1 with errno.
int ahs_unix_connect(const char *path);
/// sendmsg(sock) of `len` bytes with `nfds` descriptors attached (SCM_RIGHTS), MSG_NOSIGNAL:
/// the bytes sent, or -1 with errno.
long ahs_send_with_fds(int sock, const void *buf, unsigned long len, const int *fds, int nfds);
/// recvmsg(sock) of up to `len` bytes and up to `maxfds` descriptors (close-on-exec): the
/// bytes read (0 at the end), their descriptors in fds and their count in *nfds; or -1 with
/// errno. More descriptors than `maxfds`, or any that were not descriptors, is EBADMSG, with
/// every descriptor received already closed.
long ahs_recv_with_fds(int sock, void *buf, unsigned long len, int *fds, int maxfds, int *nfds);
/// unshare(CLONE_FS): the calling thread's own working directory, root and umask from now on
/// (a thread of a multi-threaded process may). 0, or -1 with errno.
int ahs_unshare_fs(void);

/// An empty read-only tmpfs attached nowhere: a directory descriptor (close-on-exec) that no
/// path leads to, or -1 with errno.
int ahs_detached_directory(void);

/// The ids of the BPF programs in effect for cgroup v2 directory `cgroup_fd` at `attach_type`
/// (BPF_PROG_QUERY with BPF_F_QUERY_EFFECTIVE: those attached to it and inherited from above),
/// at most `*count` of them into `ids`. 0 with `*count` set to how many there are (ENOSPC:
/// more than room, `*count` is the number needed), or -errno.
int ahs_cgroup_bpf_effective(int cgroup_fd, unsigned attach_type, unsigned *ids, unsigned *count);

/// Where `autoharness sandbox serve` listens unless told otherwise, and the front looks.
#define AHS_LAUNCH_SERVICE_SOCKET "/run/autoharness/launch.sock"
/// The launch service's wire version (Sources/SandboxCLI/LaunchService.swift): the client and the
/// service are one build, so a version mismatch is a front of another build, and declined.
#define AHS_LAUNCH_WIRE_VERSION 2
/// The front's client of the launch service (`autoharness sandbox serve`; launch_client.c):
/// hands `sandbox exec ARGS...` (argv[0..argc), the words after `exec`) to the service at
/// $AUTOHARNESS_LAUNCH_SERVICE (`off` or empty: none), else at `default_socket`, and waits for
/// the sandbox's end, passing this process's signals on. Returns the exit status of a launch
/// the service ran, or -1 when none ran: no service answered, it runs as another user, or it
/// declined the launch (the caller then launches itself).
int ahs_launch_via_service(const char *default_socket, const char *launch_code, int argc, char *const argv[]);
/// Whether `ahs_launch_via_service` found nothing listening at the socket it used (no file
/// there, or a socket no process listens on): the front then starts a service there for its
/// next launches (`LaunchService.frontStart`). 0 when it was `off`, the caller is not root, or
/// a service answered (whether or not it served).
int ahs_launch_service_absent(void);
/// Runs the executable `exe_fd` (an O_PATH descriptor of a checked file) with `argv` and
/// `envp` as a process of its own session that is no child of this one: stdin, stdout and
/// stderr /dev/null, every other descriptor closed, no signal blocked, and none of its caller's
/// scheduling and resource settings (`ahs_process_attributes`): nice 0, no I/O priority,
/// oom_score_adj 0, every CPU its cpuset allows, and PID 1's resource limits where they may be
/// raised to them; not started at all where a CPU time limit stays. Waits only for the
/// intermediate process that makes it (which exits at once). 0, or an errno.
int ahs_start_detached(int exe_fd, char *const argv[], char *const envp[]);

/// What a process passes to every process it starts and a sandbox's policy does not set:
/// scheduling and resource settings.
struct ahs_process_attributes {
    /// sched_getattr's policy (SCHED_OTHER 0, FIFO 1, RR 2, BATCH 3, IDLE 5), real-time
    /// priority, and whether SCHED_FLAG_RESET_ON_FORK is set (1).
    int sched_policy, sched_priority, sched_reset_on_fork;
    int nice;
    /// ioprio_get(IOPRIO_WHO_PROCESS): class << 13 | level; 0 when none was set.
    int ioprio;
    int oom_score_adj;
    /// sched_getaffinity's mask, for up to 1024 CPUs.
    unsigned long affinity[16];
    /// Soft and hard resource limits, RLIMIT_CPU (0) to RLIMIT_RTTIME (15).
    unsigned long long soft[16];
    unsigned long long hard[16];
};
/// Reads process `pid`'s attributes (0: the caller). 0, or -1 with errno.
int ahs_process_attributes(int pid, struct ahs_process_attributes *out);
/// sched_getaffinity of the caller into `mask` (up to 1024 CPUs). 0, or -1 with errno.
int ahs_own_affinity(unsigned long mask[16]);

/// One change fanotify reported on a watched file system (`ahs_change_watch`).
struct ahs_change {
    /// FAN_* bits (FAN_Q_OVERFLOW: changes were lost; nothing else is set then).
    unsigned long long mask;
    /// The process that made the change (its thread group), in this process's pid namespace.
    int pid;
    /// 1 when the entry `name` is directly in the watched directory.
    int in_top;
    /// The entry the change names ("" when the event names none).
    char name[256];
    /// The changed object's file handle (handle type, 4 bytes, then its bytes); 0: none.
    unsigned object_len;
    unsigned char object[132];
};
/// A fanotify group (non-blocking, close-on-exec) watching every change on the file system
/// that holds the directory `dir`, with each event's directory, name and object reported by
/// file handle; `top` (capacity 132) receives `dir`'s own handle, `top_len` its length. The
/// group fd, or -1 with errno. Needs CAP_SYS_ADMIN in the initial user namespace.
int ahs_change_watch(const char *dir, unsigned char *top, unsigned *top_len);
/// Reads the changes queued on `group` into `out` (`max` at least 512: one read returns up
/// to 8 KiB of whole events): how many, 0 when none is left, or -1 with errno.
int ahs_changes_read(int group, const unsigned char *top, unsigned top_len, struct ahs_change *out, int max);
/// The file handle of `name` in `dirfd` (not followed if a link), as `ahs_change` holds it:
/// its length, or -1 with errno.
int ahs_file_handle(int dirfd, const char *name, unsigned char *out, unsigned cap);

/// One file opened on a watched file system (`ahs_open_watch`).
struct ahs_open {
    /// FAN_OPEN(_PERM) and/or FAN_OPEN_EXEC(_PERM) (executed); FAN_Q_OVERFLOW: opens were lost.
    unsigned long long mask;
    /// The opener (its thread group), in this process's pid namespace.
    int pid;
    /// The file's path as this process sees it ("" when unknown).
    char path[4096];
    /// The opener's executable's last path component ("" when unknown).
    char exe[64];
    /// The opener's command line, its arguments NUL-separated (at most the first 1 KiB;
    /// `cmdline_len` bytes), read while the opener waits where the kernel holds it.
    char cmdline[1024];
    int cmdline_len;
    /// The file opened (read-only), its opener still held where the kernel holds it: the
    /// caller reads what it needs, then ends it with `ahs_open_done`. -1 when none.
    int fd;
    /// Set by the caller before `ahs_open_done`: the open is refused (EPERM to its opener)
    /// rather than allowed. Only a permission event's can be.
    int deny;
};
/// A fanotify group (non-blocking, close-on-exec) reporting every open and execution of a
/// file (never a directory) on the file system that holds `dir`. Where the kernel allows,
/// as permission events (`*blocking` 1): each opener waits until `ahs_opens_read` has read
/// its path and program and allowed the open, so neither can change first; else (0) as
/// notifications read after the fact. The group fd, or -1 with errno. Needs CAP_SYS_ADMIN in
/// the initial user namespace.
int ahs_open_watch(const char *dir, int *blocking);
/// Reads the opens queued on `group` into `out` (`max` at least 192), each with its file's
/// descriptor, which the caller must end with `ahs_open_done`: how many, 0 when none is
/// left, or -1 with errno.
int ahs_opens_read(int group, struct ahs_open *out, int max);
/// `path` (relative, beneath the directory `root`, reached through no link and no other
/// mount) opened read-only by the watch's own thread without raising an event on `group`: a
/// permission event for it would wait for the very thread that opens it. `blocking` as
/// `ahs_open_watch` said. The descriptor, or -1 with errno.
int ahs_open_unwatched(int group, int blocking, int root, const char *path);
/// A fanotify group (non-blocking, close-on-exec, permission events, openers by thread)
/// holding each open and execution of a file or directory on the file system that holds
/// `dir` until it is answered. The group fd, or -1 with errno (the kernel has no permission
/// events: EINVAL or EPERM).
int ahs_guard_filesystem(const char *dir);
/// How thread `tid`, held in an open of `file` (a permission event's descriptor), named it:
/// 1 by a name that reaches `file` through no symbolic link (resolved again from its root,
/// working directory or directory descriptor as its call began), or that reopens a descriptor
/// it holds of `file` (/dev/stdin, /dev/fd/N, fexecve); 0 through a link (or a name that now
/// reaches another file), -1 with errno when it cannot be told (not in an open or exec by
/// name: ENOSYS). The name it used is in `path` (`cap` bytes) whenever it was read.
int ahs_opened_by_name(int tid, int file, char *path, unsigned cap);
/// Allows an open `ahs_opens_read` returned (a permission event's opener waits for it) and
/// closes its descriptor; nothing when it has none.
void ahs_open_done(int group, struct ahs_open *open);

/// Removes every file-system and inode mark of a fanotify group (FAN_MARK_FLUSH): no event is queued
/// after it returns, and it does not wait, unlike closing the group (an SRCU grace period,
/// 2-10 ms here). 0, or -1 with errno.
int ahs_fanotify_flush(int group);
/// A close-on-exec pipe (pipe2 with O_CLOEXEC): 0, or -1 with errno.
int ahs_cloexec_pipe(int fds[2]);
/// `path` opened O_PATH beneath `root` as if `root` were the root (openat2 RESOLVE_IN_ROOT,
/// no magic links): the descriptor, or -1 with errno.
int ahs_open_path_in_root(int root, const char *path);
/// The directory `path` (relative) opened read-only beneath `dir` (openat2 RESOLVE_BENEATH,
/// RESOLVE_NO_SYMLINKS, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_XDEV): no component may be a link,
/// climb out of `dir` or cross a mount. The descriptor, or -1 with errno.
int ahs_open_directory_beneath(int dir, const char *path);
/// fstatfs(fd) with its size counts replaced (blocks, free and available: `bytes` in the
/// filesystem's blocks; files and free files: `inodes`), as the caller's struct statfs into
/// `out`: its size, or -errno.
int ahs_statfs_sizes_constant(int fd, unsigned char *out, int cap, unsigned long long bytes, unsigned long long inodes);
#ifdef __cplusplus
}
#endif

/* Whether the symbolic link process `pid` is making (symlinkat's `dirfd`, AT_FDCWD for
   symlink; `linkpath`; `target`) leads into one of `guarded` (directories of its root, each a
   file system of its own), through procfs, a magic link or the root itself, as link_watch.c
   judges it in the caller's own view: 1 yes, 0 no, -errno when it cannot be told. */
int ahs_link_leads_into(int pid, int dirfd, const char *linkpath, const char *target, const char *const *guarded, int nguarded);
/* The same for a link given a new name: `oldpath` (relative to `olddirfd`) moved or, with
   `hard`, hard-linked to `newpath` (relative to `newdirfd`): a symbolic link judged from where
   it will be; for a move, every link below a directory too (at most 10,000 entries, else let
   go). */
int ahs_move_leads_into(int pid, int olddirfd, const char *oldpath, int newdirfd, const char *newpath, int hard,
                        const char *const *guarded, int nguarded);

/* The held-out VM's qemu with least privilege (qemu_jail.c says what it gets). In new mount,
   pid, network, IPC and UTS namespaces: binds each sources[i] at targets[i] recursively,
   read-only, noatime, nosuid, nodev (nothing read through them moves a host file's access
   time); gives `work` to uid:gid; forks. The child (killed with its parent: PR_SET_PDEATHSIG)
   makes a read-only root in `work/.root` of /usr, the loader's links, reads[] (read-only),
   `work` (writable) and `work/export` (read-only), enters it, becomes uid:gid with
   CAP_DAC_READ_SEARCH alone and no_new_privs, and execs argv[0] with argv (a failure there:
   said on stderr, exit 126). The parent waits for it, kills it when the process that started
   this one exits, and returns its wait status; -errno (and *failed the index of the failing
   share, or -1) when a step fails before the fork. */
struct ahs_jail {
    const char *const *sources;
    const char *const *targets;
    int nshares;
    const char *const *reads;
    int nreads;
    const char *work;
    unsigned uid, gid;
};
int ahs_exec_jailed(const struct ahs_jail *j, char *const *argv, int *failed);

/* An overlay layer's copy (FileSystem.copyLayer): copy_file_range(2) from the current offsets,
   and a descriptor's extended attributes; each returns what the call does, -1 and errno on
   failure (sys/xattr.h and copy_file_range are not in Swift's Glibc module). */
/* This thread into the network namespace `fd` (PortRelay's threads, which never leave it): 0
   or -errno. */
int ahs_setns_net(int fd);
/* `lo` up in this thread's network namespace: 0 or -errno. */
int ahs_loopback_up(void);
long ahs_copy_range(int in, long long *in_offset, int out, long long *out_offset, unsigned long len);
long ahs_flistxattr(int fd, char *list, unsigned long size);
long ahs_fgetxattr(int fd, const char *name, void *value, unsigned long size);
int ahs_fsetxattr(int fd, const char *name, const void *value, unsigned long size);

/// posix_spawn of `path` with `argv` and `envp`, stdin from /dev/null, stdout and stderr on
/// `out` and `err`, in a new session (its own process group), in `cwd` unless it is NULL or
/// empty, every signal unblocked and SIGPIPE at its default. 0 and *pid, or an errno value.
int ahs_spawn_session(const char *path, char *const argv[], char *const envp[], const char *cwd,
                      int out, int err, int *pid);

/// Binds the open file `backing` to a free loop device (LOOP_CTL_GET_FREE, then LOOP_CONFIGURE
/// with `block_size`, autoclear and direct I/O, which the kernel drops where the backing file
/// system cannot do it): the device's descriptor (read-write, close-on-exec) and its number in
/// *index, or -errno. Autoclear: the binding ends when the device's last user closes it, this
/// descriptor or a file system mounted from it.
int ahs_loop_attach(int backing, unsigned block_size, int *index);
/// ptrace(PTRACE_DETACH, pid, 0, sig): lets a child that made its parent its tracer
/// (PTRACE_TRACEME) go on untraced from its stop, with `sig`. 0 or -errno.
int ahs_ptrace_detach(int pid, int sig);

#endif
