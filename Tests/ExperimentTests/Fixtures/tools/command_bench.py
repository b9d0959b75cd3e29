"""A `benchmark: command` tool for tests: tasks `sq-N` ask for N squared.

Usage: command_bench.py --tasks FILE --out FILE
It imports agent.agent:HarnessAgent (from /work, read-only), asks it each task, writes
/work/out/traces/<id>/answer.txt and the rewards JSON. FAKE_MODE changes what it reports:
  omit-odd  odd N missing from the output      null-first  the first id's reward is null
  string    the first id's reward is "yes"      garbage     the output is not JSON
  crash     exits 3 before writing anything     list        the output is a JSON list
  leak      each trace also gets FAKE_SECRET's value
"""
import errno
import json
import os
import sys

args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
ids = [l.strip() for l in open(args["--tasks"]) if l.strip()]
mode = os.environ.get("FAKE_MODE", "")
out = args["--out"]
if mode == "crash":
    print("fake tool: crashing", file=sys.stderr)
    sys.exit(3)

# The agent's code is read-only here: a run cannot edit what is being evaluated.
try:
    open("/work/agent/agent.py", "a").close()
    agent_write = "allowed"
except OSError as e:
    agent_write = errno.errorcode.get(e.errno, str(e.errno))

sys.path.insert(0, "/work")
from agent.agent import HarnessAgent

rewards = {}
for i, tid in enumerate(ids):
    n = int(tid.split("-")[1])
    got = str(HarnessAgent().run("square %d" % n)).strip()
    d = os.path.join(os.path.dirname(out), "traces", tid)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "answer.txt"), "w") as f:
        f.write("id=%s expected=%d got=%s agent_write=%s\n" % (tid, n * n, got, agent_write))
        if mode == "leak":
            f.write("key=%s\n" % os.environ.get("FAKE_SECRET", ""))
    if mode == "omit-odd" and n % 2 == 1:
        continue
    rewards[tid] = 1.0 if got == str(n * n) else 0.0
    if i == 0 and mode == "null-first":
        rewards[tid] = None
    if i == 0 and mode == "string":
        rewards[tid] = "yes"

with open(out, "w") as f:
    if mode == "garbage":
        f.write("{not json")
    elif mode == "list":
        json.dump(list(rewards.values()), f)
    else:
        json.dump(rewards, f)
print("fake tool: %d task(s), mode %r" % (len(ids), mode))
