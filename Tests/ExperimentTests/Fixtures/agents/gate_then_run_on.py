"""Asks for one gate, then says whether it ran on after it: HeldOutSettleRunTests, where the
clean-up after the gate's held-out phase fails and the agent must be ended, not thawed."""
import os
import subprocess
import time

with open("agent/.tmp", "w") as f:
    f.write("class HarnessAgent:\n    def run(self, instruction, workdir):\n        pass  # a candidate\n")
os.rename("agent/.tmp", "agent/agent.py")
print("GATE-REQUESTED", flush=True)
r = subprocess.run(["autoharness", "gate"], capture_output=True, text=True)
print("THAWED", r.returncode, r.stdout, r.stderr, flush=True)
time.sleep(2)
print("STILL-RUNNING", flush=True)
