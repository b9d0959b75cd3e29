// The held-out VM's qemu, started with least privilege (`autoharness vm-exec`).
//
// qemu emulates a guest that runs held-out tasks, so an escape from the guest into qemu must
// find nothing of the host's worth having: not the saved guest every later gate restores, not
// the ledger, the evidence key or the dataset, not the network, not a process to signal. So
// qemu runs
// - in namespaces of its own: mount, pid (it is the first process of its own, and sees no
//   other), network (no interface but its own loopback; its sockets are files in its work
//   directory, reached by path), IPC and UTS;
// - on a root of its own, read-only: a small tmpfs holding only `/usr` and the loader's links,
//   `/etc/ld.so.cache`, the files it reads (the guest's kernel), its work directory (the one
//   place it writes: the sockets it listens on), the 9p export (read-only, noatime), a `/dev`
//   of null, zero, full, random, urandom and kvm, its own `/proc` and a small `/tmp`;
// - as an unprivileged uid and gid (with kvm's group when `/dev/kvm` is there), holding one
//   capability, CAP_DAC_READ_SEARCH, which its 9p server needs to read the shares whatever
//   their modes; nothing else in its bounding set, no_new_privs set;
// - under a filter of ours below its own `-sandbox` one (`install_filter`): open_by_handle_at
//   (which, with CAP_DAC_READ_SEARCH, opens any file of a mounted file system by its handle,
//   whatever the mounts show), the keyrings, namespaces, mounts and tracing refused, sockets
//   AF_UNIX only (vsock crosses network namespaces), and system calls of another ABI end it;
// - with nothing of vm-exec's open but stdin, stdout and stderr, a session keyring and a
//   session of its own;
// - below a first process of its pid namespace that stays root and waits: it dies with
//   vm-exec, and the namespace with it, whatever qemu does to its own parent-death signal.
// The shares keep what they did before: each bound read-only and noatime, so nothing qemu
// reads moves a host file's access time.

#include "ahs_syscalls.h"
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/keyctl.h>
#include <linux/seccomp.h>
#include <sys/socket.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

// mount_setattr(2) (Linux 5.12), declared here: <linux/mount.h> clashes with <sys/mount.h> in
// glibc 2.36.
struct ahs_mount_attr { uint64_t attr_set, attr_clr, propagation, userns_fd; };
#define AHS_MOUNT_ATTR_RDONLY 0x1
#define AHS_MOUNT_ATTR_NOSUID 0x2
#define AHS_MOUNT_ATTR_NODEV 0x4
#define AHS_MOUNT_ATTR_NOEXEC 0x8
#define AHS_MOUNT_ATTR__ATIME 0x70
#define AHS_MOUNT_ATTR_NOATIME 0x10
#define AHS_AT_RECURSIVE 0x8000
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif

static int readonly_bind(const char *source, const char *target, int noexec) {
    if (mount(source, target, NULL, MS_BIND | MS_REC, NULL) < 0) return -errno;
    struct ahs_mount_attr a = {AHS_MOUNT_ATTR_RDONLY | AHS_MOUNT_ATTR_NOSUID | AHS_MOUNT_ATTR_NODEV | AHS_MOUNT_ATTR_NOATIME
                                   | (noexec ? AHS_MOUNT_ATTR_NOEXEC : 0),
                               AHS_MOUNT_ATTR__ATIME, 0, 0};
    if (syscall(SYS_mount_setattr, AT_FDCWD, target, AHS_AT_RECURSIVE, &a, sizeof a) == 0) return 0;
    if (errno != ENOSYS) return -errno;
    // Before 5.12: the top mount only (what lies below it stays as the host has it).
    if (mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOATIME | MS_NODIRATIME | MS_NOSUID | MS_NODEV | (noexec ? MS_NOEXEC : 0), NULL) < 0)
        return -errno;
    return 0;
}

// A failure in the child, before qemu runs: said on stderr (the console log's), and the child
// exits 126.
static void jail_fail(const char *what, const char *path) {
    dprintf(2, "vm-exec: %s%s%s: %s\n", what, path ? " " : "", path ? path : "", strerror(errno));
    _exit(126);
}

// Makes every directory of `path` (absolute) below `root`, mode 0755.
static void make_parents(const char *root, const char *path, int include_last) {
    char buf[4096];
    if ((size_t)snprintf(buf, sizeof buf, "%s%s", root, path) >= sizeof buf) { errno = ENAMETOOLONG; jail_fail("path", path); }
    size_t skip = strlen(root) + 1;
    for (char *p = buf + skip; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) < 0 && errno != EEXIST) jail_fail("mkdir", buf);
        *p = '/';
    }
    if (include_last && mkdir(buf, 0755) < 0 && errno != EEXIST) jail_fail("mkdir", buf);
}

// Binds host `path` at the same path below `root`: read-only (and noatime, nosuid, nodev; and
// noexec unless `program`, the system's directories) unless `writable`; recursively unless
// `writable` (the work directory alone, not what is mounted below it; noexec).
static void bind_same(const char *root, const char *path, int writable, int program) {
    struct stat st;
    if (stat(path, &st) < 0) jail_fail("stat", path);
    char at[4096];
    if ((size_t)snprintf(at, sizeof at, "%s%s", root, path) >= sizeof at) { errno = ENAMETOOLONG; jail_fail("path", path); }
    if (S_ISDIR(st.st_mode)) {
        make_parents(root, path, 1);
    } else {
        make_parents(root, path, 0);
        int fd = open(at, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) jail_fail("create", at);
        close(fd);
    }
    if (writable) {
        if (mount(path, at, NULL, MS_BIND, NULL) < 0 ||
            mount(NULL, at, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) jail_fail("bind", path);
    } else {
        int rc = readonly_bind(path, at, !program);
        if (rc < 0) { errno = -rc; jail_fail("read-only bind", path); }
    }
}

// The loader's directories as the host has them: a link (merged /usr) copied as a link, a
// directory bound read-only.
static void bind_system(const char *root, const char *path) {
    struct stat st;
    if (lstat(path, &st) < 0) return;
    if (S_ISLNK(st.st_mode)) {
        char target[4096], at[4096];
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n < 0) jail_fail("readlink", path);
        target[n] = 0;
        snprintf(at, sizeof at, "%s%s", root, path);
        if (symlink(target, at) < 0) jail_fail("symlink", at);
    } else if (S_ISDIR(st.st_mode)) {
        bind_same(root, path, 0, 1);
    }
}

static void drop_privileges(unsigned uid, unsigned gid, int kvm_gid) {
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0) jail_fail("keepcaps", NULL);
    for (int c = 0; prctl(PR_CAPBSET_READ, c, 0, 0, 0) >= 0; c++) {
        if (c != CAP_DAC_READ_SEARCH && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) jail_fail("bounding set", NULL);
    }
    gid_t groups[1] = {(gid_t)kvm_gid};
    if (setgroups(kvm_gid >= 0 ? 1 : 0, groups) < 0) jail_fail("setgroups", NULL);
    if (setresgid(gid, gid, gid) < 0) jail_fail("setresgid", NULL);
    if (setresuid(uid, uid, uid) < 0) jail_fail("setresuid", NULL);
    struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct d[2];
    memset(d, 0, sizeof d);
    d[0].effective = d[0].permitted = d[0].inheritable = 1u << CAP_DAC_READ_SEARCH;
    if (syscall(SYS_capset, &h, d) < 0) jail_fail("capset", NULL);
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 ||
        prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, CAP_DAC_READ_SEARCH, 0, 0) < 0) jail_fail("ambient capability", NULL);
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) jail_fail("no_new_privs", NULL);
}

#if defined(__x86_64__)
#define AHS_JAIL_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define AHS_JAIL_ARCH AUDIT_ARCH_AARCH64
#else
#error "the held-out VM's qemu filter names this machine's system-call ABI"
#endif

// Our filter, below qemu's own and standing without it: what qemu never calls and an escape
// would (handles past the mounts, the keyrings, namespaces, mounts, tracing, modules, BPF,
// another process's memory) fails with EPERM; clone3 with ENOSYS (its flags are out of reach:
// glibc falls back to clone), clone with a namespace flag with EPERM; sockets of any family
// but AF_UNIX (vsock shares the host's port space across network namespaces) with
// EAFNOSUPPORT; prctl(PR_SET_PDEATHSIG) with EPERM; another ABI's calls end it.
static void install_filter(void) {
    static const int denied[] = {
        SYS_open_by_handle_at, SYS_name_to_handle_at, SYS_keyctl, SYS_add_key, SYS_request_key, SYS_unshare, SYS_setns,
        SYS_ptrace, SYS_bpf, SYS_userfaultfd, SYS_perf_event_open, SYS_mount, SYS_umount2, SYS_pivot_root, SYS_chroot,
        SYS_fsopen, SYS_fsconfig, SYS_fsmount, SYS_fspick, SYS_open_tree, SYS_move_mount, SYS_mount_setattr,
        SYS_kexec_load, SYS_kexec_file_load, SYS_init_module, SYS_finit_module, SYS_delete_module,
        SYS_process_vm_readv, SYS_process_vm_writev, SYS_pidfd_getfd, SYS_kcmp,
    };
    struct sock_filter f[128];
    unsigned n = 0;
#define EMIT(x) (f[n++] = (struct sock_filter)x)
    EMIT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
    EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AHS_JAIL_ARCH, 1, 0));
    EMIT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
    EMIT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
    // x32's numbers (and anything above them) on x86_64: another ABI.
    EMIT(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));
    EMIT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
    for (size_t i = 0; i < sizeof denied / sizeof denied[0]; i++) {
        EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)denied[i], 0, 1));
        EMIT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
    }
    EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1));
    EMIT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS));
    // The first argument's low 32 bits (little-endian): clone's flags, socket's family,
    // prctl's option.
    unsigned arg0 = offsetof(struct seccomp_data, args[0]);
    EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4));
    EMIT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arg0));
    EMIT(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | 0x80, 0, 1));
    EMIT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
    EMIT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 4));
    EMIT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arg0));
    EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 0, 1));
    EMIT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    EMIT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EAFNOSUPPORT));
    EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_prctl, 0, 4));
    EMIT(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arg0));
    EMIT(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PR_SET_PDEATHSIG, 0, 1));
    EMIT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM));
    EMIT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
    EMIT(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
#undef EMIT
    struct sock_fprog prog = {(unsigned short)n, f};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) < 0) jail_fail("seccomp", NULL);
}

// In the child, the first process of the new pid namespace: builds the root at `root` (an
// empty directory), enters it and execs qemu.
static void enter_jail(const char *root, const struct ahs_jail *j, int alive, char *const *argv) {
    if (mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "size=4m,nr_inodes=4096,mode=0755") < 0) jail_fail("tmpfs", root);
    char at[4096];
    // /dev, /proc and /tmp first: a path bound below (the work directory in /dev/shm or
    // /tmp) is then made inside them.
    // /dev: the few nodes qemu opens.
    snprintf(at, sizeof at, "%s/dev", root);
    if (mkdir(at, 0755) < 0 || mount("tmpfs", at, "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755") < 0) jail_fail("/dev", NULL);
    static const char *const nodes[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/kvm"};
    for (size_t i = 0; i < sizeof nodes / sizeof nodes[0]; i++) {
        if (access(nodes[i], F_OK) != 0) continue;
        char node[4096];
        snprintf(node, sizeof node, "%s%s", root, nodes[i]);
        int fd = open(node, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) jail_fail("create", node);
        close(fd);
        if (mount(nodes[i], node, NULL, MS_BIND, NULL) < 0 ||
            mount(NULL, node, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NOEXEC, NULL) < 0) jail_fail("bind", nodes[i]);
    }
    snprintf(at, sizeof at, "%s/proc", root);
    if (mkdir(at, 0555) < 0 || mount("proc", at, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) jail_fail("/proc", NULL);
    snprintf(at, sizeof at, "%s/tmp", root);
    if (mkdir(at, 01777) < 0 || mount("tmpfs", at, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=16m,nr_inodes=1024,mode=1777") < 0)
        jail_fail("/tmp", NULL);
    static const char *const system_paths[] = {"/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin"};
    for (size_t i = 0; i < sizeof system_paths / sizeof system_paths[0]; i++) bind_system(root, system_paths[i]);
    if (access("/etc/ld.so.cache", R_OK) == 0) bind_same(root, "/etc/ld.so.cache", 0, 0);
    for (int i = 0; i < j->nreads; i++) bind_same(root, j->reads[i], 0, 0);
    bind_same(root, j->work, 1, 0);
    snprintf(at, sizeof at, "%s/export", j->work);
    bind_same(root, at, 0, 0);
    snprintf(at, sizeof at, "%s/.old", root);
    if (mkdir(at, 0700) < 0) jail_fail("mkdir", at);
    if (syscall(SYS_pivot_root, root, at) < 0) jail_fail("pivot_root", root);
    if (chdir("/") < 0 || umount2("/.old", MNT_DETACH) < 0 || rmdir("/.old") < 0) jail_fail("leaving the host's root", NULL);
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0) jail_fail("read-only root", NULL);
    if (chdir(j->work) < 0) jail_fail("chdir", j->work);
    // This process stays as the pid namespace's first, root and doing nothing but wait: it
    // dies with vm-exec (its parent-death signal, which no uid change clears here), and the
    // kernel then ends every process of the namespace, whatever qemu did to its own signals.
    // qemu, another uid, can neither signal nor trace it.
    pid_t qemu = fork();
    if (qemu < 0) jail_fail("fork", NULL);
    if (qemu == 0) {
        setsid();
        // A session keyring of its own, not the supervisor's (the filter then refuses keyctl).
        if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, 0) < 0) jail_fail("session keyring", NULL);
        // /dev/kvm's group, unless it is root's (then the node's mode must let others in).
        struct stat kvm;
        int kvm_gid = stat("/dev/kvm", &kvm) == 0 && kvm.st_gid != 0 ? (int)kvm.st_gid : -1;
        drop_privileges(j->uid, j->gid, kvm_gid);
        // Nothing of vm-exec's but stdin, stdout and stderr: a descriptor of a host directory
        // or socket would open the host past every mount.
        if (syscall(SYS_close_range, 3, ~0u, 0) < 0) jail_fail("close_range", NULL);
        install_filter();
        execv(argv[0], argv);
        jail_fail("exec", argv[0]);
    }
    close(alive);
    for (;;) {
        int status;
        pid_t r = waitpid(-1, &status, 0);
        if (r == qemu) _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
        if (r < 0 && errno != EINTR) _exit(125);
    }
}

int ahs_exec_jailed(const struct ahs_jail *j, char *const *argv, int *failed) {
    *failed = -1;
    if (unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) < 0) return -errno;
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) return -errno;
    for (int i = 0; i < j->nshares; i++) {
        int rc = readonly_bind(j->sources[i], j->targets[i], 1);
        if (rc < 0) { *failed = i; return rc; }
    }
    // qemu makes its own sockets (the monitor's, the incoming state's) in its work directory.
    if (chown(j->work, j->uid, j->gid) < 0) return -errno;
    char root[4096];
    if ((size_t)snprintf(root, sizeof root, "%s/.root", j->work) >= sizeof root) return -ENAMETOOLONG;
    if (mkdir(root, 0700) < 0) return -errno;
    pid_t starter = getppid();
    // The child is the first process of its pid namespace, where its parent has no pid: it
    // tells the parent alive by this pipe's write end, which only the parent holds.
    int alive[2];
    if (pipe2(alive, O_CLOEXEC) < 0) return -errno;
    pid_t child = fork();
    if (child < 0) { int e = errno; close(alive[0]); close(alive[1]); return -e; }
    if (child == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        close(alive[1]);
        struct pollfd p = {alive[0], POLLIN, 0};
        if (poll(&p, 1, 0) != 0) _exit(127);  // the parent died before the signal was armed
        enter_jail(root, j, alive[0], argv);
    }
    close(alive[0]);
    for (;;) {
        int status;
        pid_t r = waitpid(child, &status, WNOHANG);
        if (r == child) return status;
        if (r < 0 && errno != EINTR) return -errno;
        // The supervisor that started this process is gone: so is the guest.
        if (getppid() != starter) kill(child, SIGKILL);
        usleep(100000);
    }
}
