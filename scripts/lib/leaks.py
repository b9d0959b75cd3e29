"""What autoharness supervisors started by scripts/chaos and scripts/bench-soak may leave on
the host, found from the outside: processes, cgroups, mounts, scratch directories, broker
sockets, temporary view files, a held-out journal. One checker for both scripts.

Everything they start runs in a cgroup of their own (`Scope.launch`), made under the cgroup
the script itself runs in, in every hierarchy sandboxes can use (v1 memory, pids, cpu,
freezer; cgroup2). So "ours" needs no name pattern: any process in those cgroups, or any
cgroup below them, is the scripts'. The script is also the child subreaper of what it
starts, so a process that outlived its supervisor is re-parented to the script, not to
init, and is found by walking /proc even if it left the cgroups.
"""
import ctypes
import os
import signal
import socket
import subprocess
import time

PR_SET_CHILD_SUBREAPER = 36
SUPERVISOR_LEAF = "autoharness-supervisor"  # CgroupHost.supervisorLeaf (cgroup v2 delegation)
CONTROLLERS = ("memory", "pids", "cpu", "freezer")  # where sandbox cgroups can go (CgroupHost)
_libc = ctypes.CDLL(None, use_errno=True)


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def start_time(pid):
    """Field 22 of /proc/PID/stat (None if no such process), with the state letter."""
    text = _read(f"/proc/{pid}/stat")
    close = text.rfind(")")
    if close < 0:
        return None, None
    fields = text[close + 2:].split()
    return (int(fields[19]), fields[0]) if len(fields) > 19 else (None, None)


def parents():
    """pid -> ppid of every process on the host."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            text = _read(f"/proc/{name}/stat")
            close = text.rfind(")")
            if close >= 0:
                out[int(name)] = int(text[close + 2:].split()[1])
    return out


def descendants(root, table=None):
    """Processes below `root`, as {pid: start time}."""
    table = table or parents()
    children = {}
    for pid, ppid in table.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        st, _ = start_time(pid)
        if st is not None:
            out[pid] = st
        todo += children.get(pid, [])
    return out


def cgroup_hierarchies():
    """(kind, directory of this process's cgroup) for the hierarchies sandboxes use: v1
    mounts carrying one of CONTROLLERS, and cgroup2."""
    own = {}
    for line in _read("/proc/self/cgroup").splitlines():
        f = line.split(":", 2)
        if len(f) == 3:
            for c in (f[1].split(",") if f[1] else [""]):
                own[c] = f[2]
    out, seen = [], set()
    for line in _read("/proc/self/mountinfo").splitlines():
        pre, _, post = line.partition(" - ")
        pre, post = pre.split(), post.split()
        if len(pre) < 5 or len(post) < 3 or post[0] not in ("cgroup", "cgroup2"):
            continue
        root, mount = pre[3], pre[4]
        if post[0] == "cgroup2":
            kind, path = "cgroup2", own.get("")
        else:
            opts = post[2].split(",")
            hit = [c for c in CONTROLLERS if c in opts]
            kind, path = (",".join(hit), own.get(hit[0])) if hit else (None, None)
        if kind is None or path is None or not (path == root or path.startswith(root.rstrip("/") + "/")):
            continue
        rel = path[len(root):] if root != "/" else path
        d = mount + rel.rstrip("/") if rel not in ("", "/") else mount
        if d not in seen and os.path.isdir(d):
            seen.add(d)
            out.append((kind, d))
    return out


class Scope:
    """What one script run owns: its cgroups, scratch root, experiment directories, and the
    supervisors it started (pid -> start time)."""

    def __init__(self, name, scratch, experiments=()):
        self.scratch = scratch
        self.experiments = list(experiments)
        self.tracked = {}
        self.cgroups = []  # (kind, directory)
        for kind, parent in cgroup_hierarchies():
            d = f"{parent}/{name}"
            os.mkdir(d)
            self.cgroups.append((kind, d))
        if _libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")

    def placement(self):
        """The cgroup.procs files a process started now joins. A v2 cgroup whose controllers
        a supervisor enabled for children can hold no process itself: its leaf then."""
        out = []
        for kind, d in self.cgroups:
            if kind == "cgroup2" and _read(d + "/cgroup.subtree_control").strip():
                os.makedirs(d + "/" + SUPERVISOR_LEAF, exist_ok=True)
                d += "/" + SUPERVISOR_LEAF
            out.append(d + "/cgroup.procs")
        return out

    def launch(self, argv, **popen):
        """Starts argv inside the scope's cgroups (joined before exec, so nothing it forks
        starts outside) and tracks it."""
        wrapper = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
        p = subprocess.Popen(["/bin/sh", "-c", wrapper, "sh", *self.placement(), "--", *argv], **popen)
        st, _ = start_time(p.pid)
        if st is not None:
            self.tracked[p.pid] = st
        return p

    def track_tree(self, pid):
        """Adds what `pid` has started so far to the tracked processes."""
        self.tracked.update(descendants(pid))

    # -- the check --------------------------------------------------------------------------

    def reap(self):
        """Collects exited children (orphans re-parented to us). Call it only when every
        process this script waits for has been waited for."""
        me = os.getpid()
        for pid, ppid in parents().items():
            if ppid == me and start_time(pid)[1] == "Z":
                try:
                    os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:
                    pass

    def cgroup_processes(self):
        """pid -> the cgroup directory below the scope's that lists it."""
        out = {}
        for _, d in self.cgroups:
            for dirpath, _, files in os.walk(d):
                if "cgroup.procs" in files:
                    for line in _read(dirpath + "/cgroup.procs").split():
                        out.setdefault(int(line), dirpath)
        return out

    def find(self):
        """Every leftover, as (kind, description). For a quiescent point: no supervisor of
        the scope runs, so whatever is found is left over."""
        self.reap()
        found, reported = [], set()

        def process(pid, why):
            if pid not in reported:
                reported.add(pid)
                found.append(("process", f"pid {pid} ({_read(f'/proc/{pid}/comm').strip()}) {why}"))
        # Tracked ones still alive, ones re-parented to us, ones in our cgroups.
        for pid, st in sorted(self.tracked.items()):
            now, state = start_time(pid)
            if now == st and state != "Z":
                process(pid, "of a supervisor's tree is alive")
        for pid in sorted(descendants(os.getpid())):
            if start_time(pid)[1] not in (None, "Z"):
                process(pid, "was re-parented to this script")
        for pid, where in sorted(self.cgroup_processes().items()):
            process(pid, f"is in {where}")
        # Cgroups below ours (the empty v2 supervisor leaf is where supervisors are placed).
        for kind, d in self.cgroups:
            for dirpath, dirs, _ in os.walk(d):
                for name in dirs:
                    sub = f"{dirpath}/{name}"
                    if not (kind == "cgroup2" and sub == f"{d}/{SUPERVISOR_LEAF}"):
                        found.append(("cgroup", sub))
        # Mounts under the scratch root or an experiment.
        roots = [self.scratch] + self.experiments
        for line in _read("/proc/self/mountinfo").splitlines():
            f = line.split()
            if len(f) > 4 and any(f[4] == r or f[4].startswith(r + "/") for r in roots):
                found.append(("mount", f[4]))
        # Scratch directories and their owner markers.
        try:
            for name in sorted(os.listdir(self.scratch)):
                found.append(("scratch", f"{self.scratch}/{name}"))
        except FileNotFoundError:
            pass
        for exp in self.experiments:
            found += experiment_leftovers(exp)
        return found


def experiment_leftovers(exp):
    """An experiment's broker socket and its owner markers, AtomicFile temporaries of the
    views, and the held-out journal (evicted and removed by the next start)."""
    found = []
    run = f"{exp}/.autoharness/run"
    if os.path.lexists(f"{run}/broker/broker.sock"):
        found.append(("socket", f"{run}/broker/broker.sock"))
    for d, kind in ((run, "socket"), (f"{exp}/workspace", "temp file"), (f"{exp}/.autoharness", "temp file")):
        try:
            names = sorted(os.listdir(d))
        except FileNotFoundError:
            continue
        for name in names:
            if kind == "socket" and name.startswith("broker.sock.o"):
                found.append(("socket", f"{d}/{name} (owner marker)"))
            if kind == "temp file" and name.startswith(".") and ".tmp-" in name:
                found.append(("temp file", f"{d}/{name}"))
    if os.path.exists(f"{exp}/.autoharness/held-out-sources"):
        found.append(("held-out journal", f"{exp}/.autoharness/held-out-sources"))
    return found


def wait_clean(scope, seconds=10.0):
    """Leftovers still there after up to `seconds` (sandboxes end asynchronously once their
    supervisor's control sockets close)."""
    deadline = time.monotonic() + seconds
    while True:
        found = scope.find()
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def summarize(found):
    counts = {}
    for kind, _ in found:
        counts[kind] = counts.get(kind, 0) + 1
    plural = {"process": "processes", "scratch": "scratch entries", "held-out journal": "held-out journals"}
    return ", ".join(f"{n} {k if n == 1 else plural.get(k, k + 's')}" for k, n in sorted(counts.items())) or "none"


def cleanup(scope, remove_scratch=True):
    """Ends whatever is left (only processes in the scope's cgroups or re-parented to this
    script: ours by construction), unmounts, removes the scope's cgroups and scratch root."""
    for _ in range(50):
        victims = set(scope.cgroup_processes()) | set(descendants(os.getpid()))
        victims = {p for p in victims if start_time(p)[1] not in (None, "Z")}
        for kind, d in scope.cgroups:  # a frozen task acts on SIGKILL only once thawed
            for dirpath, _, files in os.walk(d):
                if "freezer.state" in files:
                    _write(dirpath + "/freezer.state", "THAWED")
                if "cgroup.freeze" in files:
                    _write(dirpath + "/cgroup.freeze", "0")
        for p in victims:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        scope.reap()
        if not victims:
            break
        time.sleep(0.1)
    roots = [scope.scratch] + scope.experiments
    for _ in range(3):
        mounts = [line.split()[4] for line in _read("/proc/self/mountinfo").splitlines()
                  if len(line.split()) > 4 and any(line.split()[4].startswith(r + "/") for r in roots)]
        for m in reversed(mounts):
            subprocess.run(["umount", "-l", m], stderr=subprocess.DEVNULL)
    problems = []
    for _, d in scope.cgroups:
        for dirpath, dirs, _ in sorted(os.walk(d), key=lambda w: -w[0].count("/")):
            try:
                os.rmdir(dirpath)
            except OSError as e:
                problems.append(f"{dirpath}: {e.strerror}")
    if remove_scratch:
        subprocess.run(["rm", "-rf", "--one-file-system", scope.scratch])
    return problems


def _write(path, text):
    try:
        with open(path, "w") as f:
            f.write(text)
    except OSError:
        pass


def self_test(scope, experiment):
    """Makes one leftover of each kind and checks that `find` names it: a checker that
    cannot fail proves nothing. Returns a list of failures (empty: every kind was caught)."""
    failures = []

    def expect(kind, make, undo):
        before = scope.find()
        if before:
            failures.append(f"not clean before the {kind} check: {before}")
            return
        thing = make()
        try:
            found = [k for k, _ in scope.find()]
            if kind not in found:
                failures.append(f"a {kind} leftover was not found (found: {found})")
            else:
                print(f"self-test: a planted {kind} is found")
        finally:
            undo(thing)
        after = wait_clean(scope, 5)
        if after:
            failures.append(f"after removing the planted {kind}: {after}")

    os.makedirs(scope.scratch, exist_ok=True)
    expect("scratch", lambda: os.mkdir(scope.scratch + "/deadbeef"), lambda _: os.rmdir(scope.scratch + "/deadbeef"))

    def mount():
        os.mkdir(scope.scratch + "/m")
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "chaos-self-test", scope.scratch + "/m"], check=True)

    def unmount(_):
        subprocess.run(["umount", scope.scratch + "/m"], check=True)
        os.rmdir(scope.scratch + "/m")
    expect("mount", mount, unmount)
    sub = scope.cgroups[0][1] + "/autoharness-sbx-selftest"
    expect("cgroup", lambda: os.mkdir(sub), lambda _: os.rmdir(sub))

    def started():
        p = scope.launch(["sleep", "600"])
        time.sleep(0.2)
        return p

    def stopped(p):
        p.kill()
        p.wait()
    expect("process", started, stopped)

    def orphan():
        # A grandchild whose parent exits: re-parented to this script (the subreaper).
        p = subprocess.Popen(["/bin/sh", "-c", "sleep 600 & echo $!"], stdout=subprocess.PIPE, text=True)
        pid = int(p.stdout.readline())
        p.wait()
        return pid

    def kill_orphan(pid):
        os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        scope.reap()
    expect("process", orphan, kill_orphan)
    path = f"{experiment}/.autoharness/run/broker/broker.sock"

    def bind():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        s = socket.socket(socket.AF_UNIX)
        s.bind(path)
        return s

    def unbind(s):
        s.close()
        os.unlink(path)
    expect("socket", bind, unbind)
    tmp = f"{experiment}/workspace/.results.tsv.tmp-1-abc"
    expect("temp file", lambda: open(tmp, "w").close(), lambda _: os.unlink(tmp))
    return failures
