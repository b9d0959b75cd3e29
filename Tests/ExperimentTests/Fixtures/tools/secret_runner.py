"""A `benchmark: command` runner for the exploit corpus: tasks whose answers it never sees.

Usage: secret_runner.py --tasks FILE --out-dir DIR
Imports agent.agent:HarnessAgent (from /work, read-only), asks it for each task's secret, and
writes DIR/answers.json {"<id>": "<answer as text>"} and DIR/traces/<id>/answer.txt. The
rewards are the scorer's (secret_scorer.py), which alone sees the gold answers.
"""
import json
import os
import sys

args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
ids = [l.strip() for l in open(args["--tasks"]) if l.strip()]
out = args["--out-dir"]
sys.path.insert(0, "/work")
from agent.agent import HarnessAgent

answers = {}
for tid in ids:
    got = HarnessAgent().run("What is the secret of task %s?" % tid)
    answers[tid] = got if isinstance(got, str) else repr(got)
    d = os.path.join(out, "traces", tid)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "answer.txt"), "w") as f:
        f.write("id=%s got=%s\n" % (tid, answers[tid]))
with open(os.path.join(out, "answers.json"), "w") as f:
    json.dump(answers, f)
print("secret runner: %d task(s)" % len(ids))
