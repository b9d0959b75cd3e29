# Sourced by the benchmarks that compare against bubblewrap (bench-sandbox, bench-layers), so
# both measure the same anchor. bwrap_anchor WORK: sets BWRAP to an equally tight bubblewrap
# (no network, all namespaces, no capabilities — bwrap run as root keeps them unless told —,
# read-only /usr and its links, private /proc, /dev and /tmp, WORK/app read-write at /app and
# WORK/agent read-only at /agent). bench-layers' "bwrap's mounts" policy restates these mounts.
bwrap_anchor() {
    BWRAP=(bwrap --unshare-all --cap-drop ALL --die-with-parent --ro-bind /usr /usr
           --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/sbin /sbin
           --proc /proc --dev /dev --tmpfs /tmp --bind "$1/app" /app --ro-bind "$1/agent" /agent
           --chdir /app --clearenv --setenv PATH /usr/bin:/bin)
}
