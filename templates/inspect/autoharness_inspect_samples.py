"""Lists an inspect_ai task's samples, once, at `autoharness init --benchmark inspect`.

  autoharness_inspect_samples.py --task SPEC [--task-arg NAME=VALUE ...] --out SAMPLES.jsonl

SPEC is what `inspect eval` takes: a task file (`tasks/mine.py@name`) or a registered task
(`inspect_evals/<name>`). The task is loaded as `inspect eval` loads it
(inspect_ai/_eval/loader.py, load_tasks) and its dataset read in order; each sample becomes one
line of SAMPLES.jsonl:
  {"id": "<id>", "input": <str or chat messages>, "choices": [...] | null,
   "target": <str or list>, "metadata": {...} | null}
A sample without an id gets its position (1, 2, ...), as inspect numbers it in a log; chat
messages lose their random `id`, so the same task lists the same bytes each time. The
file is the experiment's frozen copy of the benchmark: the supervisor splits it, gives the
runner each requested sample's id, input and choices only, and the scorer the whole line.

Samples that need what `benchmark: inspect` does not provide yet are refused by name: files
copied into a sandbox, a setup script, a per-sample sandbox. Exit 2 with a message on stderr.
"""
import argparse
import json
import sys


def fail(message):
    print("autoharness_inspect_samples: " + message, file=sys.stderr)
    sys.exit(2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", required=True)
    ap.add_argument("--task-arg", action="append", default=[])
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    args = {}
    for item in a.task_arg:
        name, sep, value = item.partition("=")
        if not sep:
            fail("--task-arg %r is not NAME=VALUE" % item)
        args[name] = value

    from inspect_ai._eval.loader import load_tasks
    from inspect_ai.model import ChatMessageBase

    try:
        tasks = load_tasks([a.task], args)
    except Exception as e:  # the operator's task file: say what it raised
        fail("loading %s: %s: %s" % (a.task, type(e).__name__, e))
    if len(tasks) != 1:
        fail("%s names %d tasks; name one (FILE@TASK)" % (a.task, len(tasks)))
    task = tasks[0]
    seen = set()
    lines = []
    for position, sample in enumerate(task.dataset, start=1):
        sid = str(sample.id if sample.id is not None else position)
        if sid in seen:
            fail("%s: sample id %r appears twice" % (a.task, sid))
        seen.add(sid)
        for field in ("files", "setup", "sandbox"):
            if getattr(sample, field, None):
                fail("%s: sample %s has %s, which benchmark: inspect does not provide yet" % (a.task, sid, field))
        if isinstance(sample.input, str):
            given = sample.input
        else:
            given = [m.model_dump(mode="json", exclude_none=True, exclude={"id"}) if isinstance(m, ChatMessageBase) else m for m in sample.input]
        lines.append(json.dumps({"id": sid, "input": given, "choices": sample.choices, "target": sample.target,
                                 "metadata": sample.metadata}, sort_keys=True, default=str))
    if not lines:
        fail("%s has no samples" % a.task)
    with open(a.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    from inspect_ai._util.registry import registry_info

    names = []
    for s in task.scorer or []:
        try:
            names.append(registry_info(s).name)
        except Exception:
            names.append(getattr(s, "__qualname__", type(s).__name__))
    print(json.dumps({"samples": len(lines), "task": task.name, "scorers": names}))


if __name__ == "__main__":
    main()
