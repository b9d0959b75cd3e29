"""Writes the demo benchmark: unit conversions in Harbor's task layout.

    python3 make_benchmark.py OUT_DIR

Each task asks for one conversion ("Convert 7 km to m."); its test compares /app/answer.txt
with the exact value (to 0.01) and prints expected and produced values, which is what the
train traces show the coding agent. Every unit pair appears with several values, so what is
learned from a train task's trace carries over to held-out tasks with the same pair; a few
pairs occur only once, so not everything can be learned.
"""
import os
import random
import sys

# (from, to, factor); the baseline agent.py knows the first three.
PAIRS = [
    ("km", "m", 1000), ("kg", "g", 1000), ("h", "min", 60),
    ("m", "cm", 100), ("mi", "km", 1.609344), ("ft", "in", 12), ("yd", "ft", 3), ("in", "cm", 2.54),
    ("lb", "kg", 0.45359237), ("oz", "g", 28.349523125), ("t", "kg", 1000),
    ("min", "s", 60), ("day", "h", 24), ("week", "day", 7),
    ("l", "ml", 1000), ("gal", "l", 3.785411784), ("cup", "ml", 236.5882365),
    ("KiB", "B", 1024), ("MiB", "KiB", 1024), ("GB", "MB", 1000),
]
# Pairs that occur once only (whichever split they land in, nothing else teaches them).
RARE = [("nmi", "m", 1852), ("ha", "m2", 10000), ("acre", "m2", 4046.8564224), ("mph", "kmh", 1.609344)]

TEST_SH = """#!/bin/bash
# reward 1 when /app/answer.txt holds {expected} (to 0.01); the result also as a CTRF test report
# (logs/ctrf.json, the format Harbor's verifiers write with pytest-json-ctrf)
got=$(tr -d " \\n" < /app/answer.txt 2>/dev/null)
echo "expected: {expected}"
echo "got: ${{got:-<nothing>}}"
# The reward is written by this script itself: only the test script's own process may write it.
ok=$(python3 - "$got" <<'PY'
import json, sys
got = sys.argv[1]
try:
    ok = abs(float(got) - {expected}) < 0.01
except ValueError:
    ok = False
test = {{"name": "tests/test.sh::convert {pair}", "status": "passed" if ok else "failed"}}
if not ok:
    test["message"] = "The test failed in the call phase due to an assertion error"
    test["trace"] = "E   AssertionError: expected {expected}, got %s\\ntests/test.sh:4: AssertionError" % (got or "nothing")
report = {{"results": {{"tool": {{"name": "demo"}}, "summary": {{"tests": 1, "passed": int(ok), "failed": int(not ok)}}, "tests": [test]}}}}
json.dump(report, open("/logs/verifier/ctrf.json", "w"))
print(1 if ok else 0)
PY
)
echo "${{ok:-0}}" > /logs/verifier/reward.txt
"""


def fmt(x):
    return f"{x:.2f}".rstrip("0").rstrip(".")


def main(out):
    rng = random.Random(7)
    tasks = []
    for a, b, f in PAIRS:
        for _ in range(3):
            tasks.append((a, b, f, rng.choice([2, 3, 5, 7, 12, 15, 24, 40, 75, 120])))
    for a, b, f in RARE:
        tasks.append((a, b, f, rng.choice([3, 8, 20])))
    os.makedirs(os.path.join(out, "tasks"), exist_ok=True)
    for i, (a, b, f, v) in enumerate(tasks):
        tid = f"conv-{i:02d}"
        d = os.path.join(out, "tasks", tid)
        os.makedirs(os.path.join(d, "tests"), exist_ok=True)
        os.makedirs(os.path.join(d, "solution"), exist_ok=True)
        expected = fmt(v * f)
        with open(os.path.join(d, "instruction.md"), "w") as fh:
            fh.write(f"Convert {v} {a} to {b}.\nWrite only the number, rounded to 2 decimals, to answer.txt in the working directory.\n")
        with open(os.path.join(d, "task.toml"), "w") as fh:
            fh.write(f'# demo: unit conversion\n[agent]\ntimeout_sec = 20\n\n[verifier]\ntimeout_sec = 20\n\n[metadata]\npair = "{a}->{b}"\n')
        with open(os.path.join(d, "tests", "test.sh"), "w") as fh:
            fh.write(TEST_SH.format(expected=expected, pair=f"{a}->{b}"))
        with open(os.path.join(d, "solution", "solve.sh"), "w") as fh:
            fh.write(f"#!/bin/bash\necho {expected} > /app/answer.txt\n")
        os.chmod(os.path.join(d, "tests", "test.sh"), 0o755)
        os.chmod(os.path.join(d, "solution", "solve.sh"), 0o755)
    print(f"{len(tasks)} tasks in {out}")


if __name__ == "__main__":
    main(sys.argv[1])
