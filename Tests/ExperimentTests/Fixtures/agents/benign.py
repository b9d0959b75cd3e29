"""A benign scripted coding agent, behaving like a real one would on the `arith` fixture.

Start 1: reads status, runs the train benchmark, reads the failing traces, teaches agent.py
the first operation it sees failing (saving like an editor: temp file + rename), gates,
writes a note, and exits as if its session ended. Start 2 (the supervisor's restart, with
the continuation prompt): reads its notes, teaches the remaining operations, leaves the
operator a note, gates again with a message.
"""
import os
import subprocess

START = int(os.environ.get("AUTOHARNESS_AGENT_START", "1"))


def ah(*args):
    r = subprocess.run(["autoharness", *args], capture_output=True, text=True)
    print(f"$ autoharness {' '.join(args)} -> {r.returncode}\n{r.stdout}{r.stderr}", flush=True)
    return r


def save(text):
    tmp = "agent/.agent.py.swp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, "agent/agent.py")


def solver(ops):
    table = {"add": "a + b", "multiply": "a * b"}
    lines = "\n".join(f"        if op == {op!r}: result = {table[op]}" for op in sorted(ops))
    return f'''import os
class HarnessAgent:
    def run(self, instruction, workdir):
        _, op, a, b = instruction.splitlines()[0].split()
        a, b = int(a), int(b)
        result = None
{lines}
        if result is not None:
            with open(os.path.join(workdir, "answer.txt"), "w") as f:
                f.write(str(result))
'''


def failing_ops():
    ops = []
    for tid in sorted(os.listdir("workspace/traces/latest")):
        d = f"workspace/traces/latest/{tid}"
        if open(f"{d}/reward.txt").read().strip() not in ("1", "1.0"):
            op = open(f"{d}/instruction.md").read().split()[1]
            if op not in ops:
                ops.append(op)
    return ops


print("prompt:", os.environ.get("AUTOHARNESS_PROMPT"), flush=True)
if START == 1:
    ah("status")
    ah("benchmark")
    ops = failing_ops()
    print("failing operations in train traces:", ops, flush=True)
    save(solver(ops[:1]))
    ah("gate")
    with open("workspace/learnings.md", "a") as f:
        f.write(f"learned: {ops[0]}; still failing: {', '.join(ops[1:])}\n")
else:
    notes = open("workspace/learnings.md").read()
    print("notes:", notes, flush=True)
    history = open("history/git-log.txt").read()
    print("history:", history.splitlines()[0], "|", [l for l in history.splitlines() if "iteration" in l][:1], flush=True)
    print("history shows the ledger head:", "Ledger-Head" in history, flush=True)
    ah("benchmark")
    save(solver(["add", "multiply"]))
    ah("needs-human", "a key for the held-out account, please")
    ah("gate", "-m", "teach every operation")
    with open("workspace/learnings.md", "a") as f:
        f.write("learned: all operations\n")
