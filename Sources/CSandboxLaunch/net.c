// The sandbox's network: its loopback brought up, a network namespace made ahead of time
// entered, and the egress proxy's listener made in it (part of the launch: launch_internal.h).
#include "launch_internal.h"

int ahl_loopback_up(void) {
    int s = sys_socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (s < 0) return -1;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    memcpy(ifr.ifr_name, "lo", 3);
    int r = sys_ioctl(s, SIOCGIFFLAGS, &ifr);
    if (r == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        r = sys_ioctl(s, SIOCSIFFLAGS, &ifr);
    }
    int e = ahl_errno;
    sys_close(s);
    ahl_errno = e;
    return r;
}

/// Egress proxy: the only way out of a `proxy` sandbox is a socket that listens on the
/// sandbox's own loopback but is served by the supervisor, which dials out from the host
/// namespace to allowlisted destinations only. Made by the monitor in the sandbox's network
/// namespace once the supervisor has written the id maps (it reads nothing else before), and
/// handed over. Port 3128 needs no capability; lo is up by then.
void ahl_open_proxy_listener(const struct ahl_plan *p, int rep) {
    int ls = sys_socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    sa.sin_port = __builtin_bswap16(p->proxy_port);  // network byte order (little-endian hosts)
    sa.sin_addr.s_addr = __builtin_bswap32(INADDR_LOOPBACK);
    if (ls < 0 || sys_bind(ls, (struct sockaddr *)&sa, sizeof sa) < 0 || sys_listen(ls, 64) < 0 ||
        ahl_send_fd(rep, ls, AHL_MSG_PROXY_LISTENER) < 0)
        ahl_fail(rep, AHL_STAGE_PROXY_LISTENER, 0);
    sys_close(ls);
}

/// A network namespace made ahead of time for this sandbox alone (NetworkNamespacePool):
/// entered while the monitor is still host root, which owns it (the initial user namespace
/// made it), so lo is brought up here; nothing in the sandbox's own user namespace can
/// reconfigure it afterwards.
void ahl_enter_network_namespace(const struct ahl_plan *p, int rep) {
    if (sys_setns(p->netns_fd, CLONE_NEWNET) < 0) ahl_fail(rep, AHL_STAGE_ENTER_NETNS, 0);
    sys_close(p->netns_fd);
    if ((p->loopback_up || p->proxy_port) && ahl_loopback_up() < 0) ahl_fail(rep, AHL_STAGE_LOOPBACK, 0);
}
