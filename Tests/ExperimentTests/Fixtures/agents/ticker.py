"""Keeps a thread ticking every 10 ms while it asks for a gate whose tasks take 1.5 s each:
the gap in its ticks shows whether it could run while the gate's held-out tasks ran."""
import os
import subprocess
import threading
import time

ticks = []
stop = False


def tick():
    while not stop:
        ticks.append(time.monotonic())
        time.sleep(0.01)


t = threading.Thread(target=tick, daemon=True)
t.start()
time.sleep(0.2)
with open("agent/.tmp", "w") as f:
    f.write("import time\nclass HarnessAgent:\n    def run(self, instruction, workdir):\n        time.sleep(1.5)\n")
os.rename("agent/.tmp", "agent/agent.py")
t0 = time.monotonic()
r = subprocess.run(["autoharness", "gate"], capture_output=True, text=True)
t1 = time.monotonic()
stop = True
t.join()
gaps = [b - a for a, b in zip(ticks, ticks[1:])]
print(r.stdout, r.stderr)
print(f"GATE {t1 - t0:.2f} MAXGAP {max(gaps):.2f}", flush=True)
