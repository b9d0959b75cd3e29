"""The scorer of secret_runner.py: compares each answer, as text, with the gold.

Usage: secret_scorer.py --tasks FILE --answers FILE --gold FILE --out FILE
Reads the runner's answers.json (read-only, /work/run) and the gold answers (bound in this
sandbox alone), writes {"<id>": 1.0 or 0.0}. An answer that is not a string scores 0: the
comparison is of JSON text, never of an object the agent made.
"""
import json
import sys

args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
ids = [l.strip() for l in open(args["--tasks"]) if l.strip()]
gold = json.load(open(args["--gold"]))
try:
    answers = json.load(open(args["--answers"]))
except (OSError, ValueError):
    answers = {}
if not isinstance(answers, dict):
    answers = {}
rewards = {}
for tid in ids:
    got = answers.get(tid)
    rewards[tid] = 1.0 if isinstance(got, str) and got.strip() == gold[tid] else 0.0
with open(args["--out"], "w") as f:
    json.dump(rewards, f)
print("secret scorer: %d task(s)" % len(ids))
