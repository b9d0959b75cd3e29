"""Tries to stay alive through a gate, the ways a SIGSTOP-based pause could be evaded:
a process whose thread-group leader has exited (raw SYS_exit, the leader is a zombie while a
second thread keeps ticking) and which re-arms SIGCONT to itself with a POSIX timer every
5 ms, and a process that forks a short-lived child every few milliseconds (forks in flight
while the pause is taken). Every tick goes to one file; the widest gap in ticks during the
gate shows whether anything of the coding agent ran while held-out tasks did."""
import ctypes
import os
import signal
import subprocess
import time

TICKS = os.path.join(os.environ.get("HOME", "/tmp"), "ticks")
fd = os.open(TICKS, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)


def tick(tag):
    os.write(fd, b"%s %.6f\n" % (tag, time.monotonic()))


def zombie_leader():
    import threading
    libc = ctypes.CDLL(None, use_errno=True)

    class sigevent(ctypes.Structure):
        _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int), ("notify", ctypes.c_int),
                    ("pad", ctypes.c_int * 12)]

    class timespec(ctypes.Structure):
        _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]

    class itimerspec(ctypes.Structure):
        _fields_ = [("interval", timespec), ("value", timespec)]

    def ticker():
        while True:
            tick(b"thread")
            time.sleep(0.01)

    # With SIGCONT's default disposition the kernel drops the timer's signal; a handler
    # makes every expiry a real SIGCONT, which resumes a stopped thread group.
    signal.signal(signal.SIGCONT, lambda *_: None)
    threading.Thread(target=ticker, daemon=True).start()
    ev = sigevent(signo=signal.SIGCONT, notify=0)  # SIGEV_SIGNAL
    timer = ctypes.c_void_p()
    assert libc.timer_create(1, ctypes.byref(ev), ctypes.byref(timer)) == 0, ctypes.get_errno()
    every = timespec(0, 5_000_000)
    assert libc.timer_settime(timer, 0, ctypes.byref(itimerspec(every, every)), None) == 0
    libc.syscall(60, 0)  # SYS_exit: only this (leader) thread ends


def forker():
    while True:
        pid = os.fork()
        if pid == 0:
            tick(b"child")
            os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.003)


pids = []
for body in (zombie_leader, forker):
    pid = os.fork()
    if pid == 0:
        body()
        os._exit(0)
    pids.append(pid)


def ticks(since=0.0):
    """(thread, child) ticks after `since`."""
    counts = {b"thread": 0, b"child": 0}
    with open(TICKS, "rb") as f:
        for line in f:
            tag, _, at = line.partition(b" ")
            if tag in counts and line.endswith(b"\n") and float(at) > since:
                counts[tag] += 1
    return counts[b"thread"], counts[b"child"]


def live(least, since=0.0, limit=60.0):
    """Waits until both attacks have ticked `least` times after `since` (a busy machine can
    take seconds to schedule them), for at most `limit` seconds."""
    end = time.monotonic() + limit
    while min(ticks(since)) < least and time.monotonic() < end:
        time.sleep(0.05)


# Both attacks live before the gate: a fixed pause once saw only 16 ticks on a busy machine.
live(30)
state = next((l.split()[1] for l in open(f"/proc/{pids[0]}/status") if l.startswith("State:")), "?")
threads = len(os.listdir(f"/proc/{pids[0]}/task"))
with open("agent/.tmp", "w") as f:
    f.write("import time\nclass HarnessAgent:\n    def run(self, instruction, workdir):\n        time.sleep(1.5)\n")
os.rename("agent/.tmp", "agent/agent.py")
t0 = time.monotonic()
r = subprocess.run(["autoharness", "gate"], capture_output=True, text=True)
t1 = time.monotonic()
live(5, since=t1, limit=30.0)
for p in pids:
    os.kill(p, signal.SIGKILL)
times = sorted(float(l.split()[1]) for l in open(TICKS))
inside = [t for t in times if t0 <= t <= t1]
edges = [t0] + inside + [t1]
gap = max(b - a for a, b in zip(edges, edges[1:]))
after = sum(1 for t in times if t > t1)
before = sum(1 for t in times if t < t0)
print(r.stdout, r.stderr)
print(f"LEADER {state} THREADS {threads} BEFORE {before} AFTER {after}", flush=True)
print(f"GATE {t1 - t0:.2f} MAXGAP {gap:.2f}", flush=True)
