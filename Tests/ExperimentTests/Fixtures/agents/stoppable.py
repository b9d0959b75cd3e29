"""For a host without a cgroup freezer, where the supervisor stops the coding agent for each
gate instead of freezing it. Start 1 leaves a daemon (its own session, reparented) appending
a wall-clock tick to $HOME/ticks every 10 ms, then asks for a gate. Start 2 prints the prompt
it was given (the first gate's answer must be in it) and asks for a second gate."""
import os
import subprocess
import time

start = os.environ["AUTOHARNESS_AGENT_START"]
ticks = os.path.join(os.environ["HOME"], "ticks")

if start == "1":
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open(ticks, "a") as f:
                while True:
                    f.write(f"{time.time():.3f}\n")
                    f.flush()
                    time.sleep(0.01)
        os._exit(0)
    time.sleep(0.3)
    body = "import time\nclass HarnessAgent:\n    def run(self, instruction, workdir):\n        time.sleep(1.5)\n"
else:
    print("PROMPT " + repr(os.environ["AUTOHARNESS_PROMPT"]), flush=True)
    body = "import time\nclass HarnessAgent:\n    def run(self, instruction, workdir):\n        time.sleep(1.5)  # again\n"
with open("agent/.tmp", "w") as f:
    f.write(body)
os.rename("agent/.tmp", "agent/agent.py")
print(f"GATE-REQUESTED {time.time():.3f}", flush=True)
r = subprocess.run(["autoharness", "gate"], capture_output=True, text=True)
print("UNREACHABLE: the gate answered a live agent", r.stdout, flush=True)
