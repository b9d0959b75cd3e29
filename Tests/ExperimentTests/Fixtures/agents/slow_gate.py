"""Writes an agent.py whose tasks take far longer than a test waits, then gates: the test
kills the supervisor with SIGKILL while this gate is running."""
import os
import subprocess

with open("agent/.tmp", "w") as f:
    f.write("import time\nclass HarnessAgent:\n    def run(self, instruction, workdir):\n        time.sleep(120)\n")
os.rename("agent/.tmp", "agent/agent.py")
print("gating", flush=True)
r = subprocess.run(["autoharness", "gate"], capture_output=True, text=True)
print(r.returncode, r.stdout, r.stderr, flush=True)
