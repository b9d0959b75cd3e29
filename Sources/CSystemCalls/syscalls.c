// System calls Swift cannot reach through the Glibc module (hidden or variadic
// declarations), for the supervisor. Nothing here runs between fork and exec.
#include "ahs_syscalls.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <sys/socket.h>
#include <errno.h>
#include <sched.h>

#ifndef SYS_landlock_create_ruleset
#define SYS_landlock_create_ruleset 444
#endif

int ahs_memfd(const char *name) { return memfd_create(name, MFD_CLOEXEC); }

int ahs_open_path(const char *path) { return open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC); }

int ahs_accept_cloexec(int listener) { return accept4(listener, NULL, NULL, SOCK_CLOEXEC); }

int ahs_peer_credentials(int fd, int *pid, unsigned *uid) {
    struct ucred c;
    socklen_t len = sizeof c;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) < 0) return -1;
    *pid = c.pid;
    *uid = c.uid;
    return 0;
}

int ahs_landlock_abi(void) {
    // LANDLOCK_CREATE_RULESET_VERSION (1 << 0): no ruleset, just the ABI version.
    long r = syscall(SYS_landlock_create_ruleset, NULL, 0, 1U);
    return r < 0 ? -errno : (int)r;
}

int ahs_pidfd_open(int pid) { return (int)syscall(SYS_pidfd_open, pid, 0); }

int ahs_pidfd_kill(int pidfd, int sig) { return (int)syscall(SYS_pidfd_send_signal, pidfd, sig, NULL, 0); }

int ahs_make_netns(int home, int *stranded) {
    *stranded = 0;
    // Namespaces belong to threads: only this thread moves, and only for these three calls.
    if (unshare(CLONE_NEWNET) < 0) return -errno;
    int fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    int e = errno;
    if (setns(home, CLONE_NEWNET) < 0) {
        *stranded = 1;
        if (fd >= 0) close(fd);
        return -errno;
    }
    return fd >= 0 ? fd : -e;
}
