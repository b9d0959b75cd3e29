"""A coding agent that never stops asking: each round saves a new agent.py (a solver variant
plus a comment no earlier round wrote, so no gate is a repeat), then asks for BENCHMARKS
benchmarks of one train task, STATUS status requests and a gate, until the run stops it (a
request answered 3, "the run is stopping", ends it).
For scripts/chaos (which kills the supervisor in the middle of these requests) and
scripts/bench-soak (which counts them). Before each request it prints `REQ n verb`, after it
`DONE n verb exit`, so both can tell where the supervisor was.
  looper.py [BENCHMARKS [STATUS]]     (defaults 1 and 1)"""
import json
import os
import subprocess
import sys

BENCHMARKS = int(sys.argv[1]) if len(sys.argv) > 1 else 1
STATUS = int(sys.argv[2]) if len(sys.argv) > 2 else 1
# Unique per session: $HOME and the staging copy outlive a killed supervisor, and bytes
# judged before are refused as a repeat gate.
SESSION = os.urandom(6).hex()
VARIANTS = [{}, {"add": "a + b"}, {"add": "a + b", "multiply": "a * b"}]
requests = 0


def ah(*args):
    global requests
    requests += 1
    print(f"REQ {requests} {args[0]}", flush=True)
    r = subprocess.run(["autoharness", *args], capture_output=True, text=True)
    print(f"DONE {requests} {args[0]} {r.returncode}", flush=True)
    if r.returncode == 3:  # the run is stopping: nothing more will be run
        sys.exit(0)
    return r


def save(round_, ops):
    cases = "".join(f"        if op == {op!r}: result = {expr}\n" for op, expr in sorted(ops.items()))
    text = f"""import os
# looper session {SESSION} round {round_}
class HarnessAgent:
    def run(self, instruction, workdir):
        _, op, a, b = instruction.splitlines()[0].split()
        a, b = int(a), int(b)
        result = None
{cases}        if result is not None:
            with open(os.path.join(workdir, "answer.txt"), "w") as f:
                f.write(str(result))
"""
    with open("agent/.agent.py.tmp", "w") as f:
        f.write(text)
    os.rename("agent/.agent.py.tmp", "agent/agent.py")


def train_ids():
    try:
        with open("workspace/train_results.json") as f:
            return sorted(json.load(f).get("results", {}))
    except (OSError, ValueError):
        return []


print("looper started, session", SESSION, flush=True)
round_ = 0
while True:
    round_ += 1
    save(round_, VARIANTS[round_ % len(VARIANTS)])
    ids = train_ids()
    for i in range(BENCHMARKS):
        ah("benchmark", "--task-ids", ids[(round_ + i) % len(ids)]) if ids else ah("benchmark")
    for i in range(STATUS):
        ah("status", "--json") if i % 2 else ah("status")
    ah("gate")
