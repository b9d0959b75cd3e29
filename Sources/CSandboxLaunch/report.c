// The report channel of a launch: what the monitor, init and the payload tell the supervisor
// over the report socket (SOCK_SEQPACKET, one `ahl_msg` per send), and the names of the setup
// stages a failure is reported at. Part of the fork->exec window (launch_internal.h's rules).
#include "launch_internal.h"

void ahl_send_msg(int fd, int32_t kind, int32_t stage, int32_t err, int32_t index, int64_t value) {
    struct ahl_msg m = {kind, stage, err, index, value};
    // SOCK_SEQPACKET: one record per send, atomically; a dead supervisor just means EPIPE.
    (void)sys_send(fd, &m, sizeof m, MSG_NOSIGNAL);
}

__attribute__((noreturn)) void ahl_fail(int rep, int32_t stage, int32_t index) {
    ahl_send_msg(rep, AHL_MSG_SETUP_ERROR, stage, ahl_errno, index, 0);
    sys_exit(AHL_SETUP_FAILED);
}

int ahl_send_fd(int rep, int fd, int32_t kind) {
    struct ahl_msg m = {kind, 0, 0, 0, 0};
    struct iovec iov = {&m, sizeof m};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr mh = {0};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = u.buf;
    mh.msg_controllen = sizeof u.buf;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sys_sendmsg(rep, &mh, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

const char *ahl_stage_name(int32_t stage) {
    switch (stage) {
    case AHL_STAGE_SETGROUPS: return "drop supplementary groups";
    case AHL_STAGE_UNSHARE: return "unshare namespaces";
    case AHL_STAGE_WAIT_MAPS: return "wait for id maps";
    case AHL_STAGE_SETID: return "switch to sandbox uid/gid";
    case AHL_STAGE_UNSHARE_CGROUP: return "unshare cgroup namespace";
    case AHL_STAGE_FORK_INIT: return "fork init";
    case AHL_STAGE_MOUNT_PRIVATE: return "make mounts private";
    case AHL_STAGE_OPEN_SOURCE: return "open bind source";
    case AHL_STAGE_OPEN_DEVICE: return "clone device node";
    case AHL_STAGE_JOIN_CGROUP: return "join cgroup";
    case AHL_STAGE_PROXY_LISTENER: return "open the egress proxy's listening socket";
    case AHL_STAGE_MOUNT_ROOT: return "mount root tmpfs";
    case AHL_STAGE_MOUNT_ENTRY: return "mount";
    case AHL_STAGE_MOUNT_DEV: return "mount /dev";
    case AHL_STAGE_MOUNT_PROC: return "mount /proc";
    case AHL_STAGE_MOUNT_READONLY: return "make root read-only";
    case AHL_STAGE_DETACH_OLD_ROOT: return "detach host root";
    case AHL_STAGE_PIVOT_ROOT: return "pivot_root";
    case AHL_STAGE_HOSTNAME: return "sethostname";
    case AHL_STAGE_LOOPBACK: return "bring up loopback";
    case AHL_STAGE_SIGNALFD: return "signalfd";
    case AHL_STAGE_HOLD: return "wait to be run (sandbox built ahead)";
    case AHL_STAGE_ENTER_SEED: return "enter the seed mount namespace";
    case AHL_STAGE_FORK_PAYLOAD: return "fork payload";
    case AHL_STAGE_STDIO: return "set up stdio";
    case AHL_STAGE_RLIMIT: return "setrlimit";
    case AHL_STAGE_CHDIR: return "chdir";
    case AHL_STAGE_NO_NEW_PRIVS: return "set no_new_privs";
    case AHL_STAGE_DROP_CAPS: return "drop capabilities";
    case AHL_STAGE_VERIFY_CAPS: return "verify capabilities are empty";
    case AHL_STAGE_LANDLOCK: return "apply landlock ruleset";
    case AHL_STAGE_SECCOMP: return "install seccomp filter";
    case AHL_STAGE_SEND_LISTENER: return "hand seccomp listener to supervisor";
    case AHL_STAGE_LOCK_MOUNTS: return "lock mounts (nested user namespace)";
    case AHL_STAGE_EXEC_LAUNCHER: return "start the sandbox launcher (autoharness-launch)";
    case AHL_STAGE_ENTER_NETNS: return "enter the network namespace made for this sandbox";
    case AHL_STAGE_ENTER_USERNS: return "enter the user namespace made for this sandbox";
    default: return "sandbox setup";
    }
}
