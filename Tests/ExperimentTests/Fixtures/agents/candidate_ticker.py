"""ticker.py with candidates (loop.candidates): keeps a thread ticking every 10 ms, submits two
candidates whose tasks take 0.5 s each, and asks for a gate. The gate runs both on the train
split before it judges one: the gap in the ticks shows whether the agent could run at any
point of it (the ranking included). Prints the gate's answer and agent/agent.py after it."""
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


def write(source):
    with open("agent/.tmp", "w") as f:
        f.write(source)
    os.rename("agent/.tmp", "agent/agent.py")


threading.Thread(target=tick, daemon=True).start()
time.sleep(0.2)
slow = "import time\nclass HarnessAgent:\n    def run(self, instruction, workdir):\n        time.sleep(0.5)\n"
for n in (1, 2):
    write(slow + f"# candidate {n}\n")
    r = subprocess.run(["autoharness", "candidate", "-m", f"try {n}"], capture_output=True, text=True)
    print(f"CANDIDATE-EXIT {r.returncode}", r.stdout.strip(), r.stderr.strip(), flush=True)
t0 = time.monotonic()
r = subprocess.run(["autoharness", "gate"], capture_output=True, text=True)
t1 = time.monotonic()
stop = True
gaps = [b - a for a, b in zip(ticks, ticks[1:])]
print(r.stdout, r.stderr)
print("AGENT-PY " + open("agent/agent.py").read().strip().splitlines()[-1], flush=True)
print(f"GATE {t1 - t0:.2f} MAXGAP {max(gaps):.2f}", flush=True)
