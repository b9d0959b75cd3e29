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

/// Entries every network namespace's /proc/net shows that print the host's counters, not the
/// namespace's: every loopback packet of any namespace moves softnet_stat's first column (a
/// sandbox read another's 1,234 datagrams as +1,245), route lookups rt_cache, neighbour
/// lookups arp_cache and ndisc_cache, and sockstat, sockstat6 and protocols hold the host's
/// socket memory. A cover cannot hide them (/proc/net is each process's /proc/PID/net); the
/// kernel keeps an entry's mode per namespace, so each sandbox's copy is made mode 0 by host
/// root, its owner, and nothing in the sandbox can read it or make it readable again.
static const char *const host_counters[] = {"softnet_stat", "stat/rt_cache", "stat/arp_cache", "stat/ndisc_cache",
                                            "sockstat", "sockstat6", "protocols"};

static int hide_net_counters(int netdir) {
    for (unsigned i = 0; i < sizeof host_counters / sizeof host_counters[0]; i++)
        if (sys_fchmodat(netdir, host_counters[i], 0) < 0 && ahl_errno != ENOENT) return -1;  // ENOENT: not on this kernel
    return 0;
}

/// The sandbox's network namespace, always owned by the initial user namespace: one made
/// ahead of time for this sandbox alone (NetworkNamespacePool) entered, or a new one made
/// here, while the monitor is still host root. So lo is brought up here and the host counters
/// hidden (the entries belong to host root: the sandbox's own root could not change them);
/// nothing in the sandbox's own user namespace can reconfigure it afterwards.
void ahl_enter_network_namespace(const struct ahl_plan *p, int rep) {
    if (p->netns_fd >= 0) {
        if (sys_setns(p->netns_fd, CLONE_NEWNET) < 0) ahl_fail(rep, AHL_STAGE_ENTER_NETNS, 0);
        sys_close(p->netns_fd);
    } else if (sys_unshare(CLONE_NEWNET) < 0) {
        ahl_fail(rep, AHL_STAGE_UNSHARE, 0);
    }
    if ((p->loopback_up || p->proxy_port) && ahl_loopback_up() < 0) ahl_fail(rep, AHL_STAGE_LOOPBACK, 0);
    // A task image's root binds the ports below 1024 a container's root does (nginx on 80,
    // sshd on 22): this namespace's own setting, which reaches no other namespace; written
    // while this process is host root (the namespace belongs to the initial user namespace).
    if (p->id_span > 1) {
        int f = sys_open("/proc/sys/net/ipv4/ip_unprivileged_port_start", O_WRONLY | O_CLOEXEC);
        if (f < 0 || sys_write(f, "0", 1) != 1) ahl_fail(rep, AHL_STAGE_LOOPBACK, 1);
        sys_close(f);
    }
    if (LAYER_ON(LAYER_COVERS)) {
        // The host's /proc still: this thread's entry is the namespace just entered.
        int net = sys_open("/proc/thread-self/net", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (net < 0 || hide_net_counters(net) < 0) ahl_fail(rep, AHL_STAGE_ENTER_NETNS, 0);
        sys_close(net);
    }
}
