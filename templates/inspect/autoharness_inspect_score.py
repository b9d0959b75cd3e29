"""Scores `benchmark: inspect`'s solve log, in the benchmark-scorer sandbox (autoharness).

  autoharness_inspect_score.py --task SPEC [--task-arg NAME=VALUE ...] --samples SAMPLES.jsonl
      --log-dir /work/run/log --task-ids-file IDS --out REWARDS.json [--traces DIR]
      [--score SCORER]

No agent.py here, and this process never imports it. The log in --log-dir was written by the
runner, where agent.py ran in inspect's own process, so everything in it is agent.py's to
write: this script takes from it, per requested sample, the output and the messages and nothing
else. Each sample is rebuilt from the experiment's frozen sample list (SAMPLES.jsonl: the
input, choices, target and metadata the task itself gave at init) and scored afresh with the
scorers of the task loaded here (not the ones the log names, nor any score the log holds), as
`inspect score` scores a log (inspect_ai/_eval/score.py, score_async, task_state_from_sample).

The reward of a sample is the value of the task's first scorer (or of --score), as inspect's
own `value_to_float` reads it (C 1, P 0.5, I 0, numbers as they are). A log that is not
exactly one JSON log of the solve task gives every sample null, as does a sample the solve
phase errored on, or one missing or repeated in the log. Writes {"<id>": reward | null} and, for
train runs, traces/<id>/verdict.json (scorer, value, answer, explanation, target, error).
"""
import argparse
import json
import os
import sys

LOG_LIMIT = 512 << 20


def trace_name(task_id):
    """autoharness's TraceName.encode: bytes outside [A-Za-z0-9_-], and a leading '.', as %XX."""
    plain = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
    return "".join(chr(b) if b in plain or (b == 0x2E and n > 0) else "%%%02X" % b
                   for n, b in enumerate(task_id.encode()))


def read_samples(path):
    out = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                out[record["id"]] = record
    return out


def find_log(directory):
    """The one JSON log in `directory`, or (None, why)."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as e:
        return None, "no solve log (%s)" % e.strerror
    logs = [n for n in names if n.endswith(".json")]
    if len(logs) != 1:
        return None, "the solve phase left %d JSON logs, not one" % len(logs)
    path = os.path.join(directory, logs[0])
    st = os.lstat(path)
    if not os.path.isfile(path) or os.path.islink(path) or st.st_size > LOG_LIMIT:
        return None, "the solve log is not a regular file of at most %d bytes" % LOG_LIMIT
    return path, None


def write_json(path, value):
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(value, f, sort_keys=True, indent=1, default=str)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--task", required=True)
    ap.add_argument("--task-arg", action="append", default=[])
    ap.add_argument("--samples", required=True)
    ap.add_argument("--log-dir", required=True)
    ap.add_argument("--task-ids-file", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--traces")
    ap.add_argument("--score")
    a = ap.parse_args()

    with open(a.task_ids_file) as f:
        wanted = [line.strip() for line in f if line.strip()]
    rewards = {i: None for i in wanted}
    verdicts = {}

    def finish():
        write_json(a.out, rewards)
        if a.traces:
            for sid, verdict in verdicts.items():
                write_json(os.path.join(a.traces, trace_name(sid), "verdict.json"), verdict)

    trusted = read_samples(a.samples)
    path, why = find_log(a.log_dir)
    if path is None:
        for sid in wanted:
            verdicts[sid] = {"error": why}
        return finish()

    from inspect_ai import score
    from inspect_ai._eval.loader import load_tasks
    from inspect_ai._util.registry import registry_info
    from inspect_ai.log import EvalPlan, EvalSample, read_eval_log
    from inspect_ai.scorer import value_to_float

    try:
        log = read_eval_log(path)
    except Exception as e:
        for sid in wanted:
            verdicts[sid] = {"error": "the solve log does not parse as an inspect log: %s" % type(e).__name__}
        return finish()
    if log.eval.task != "autoharness_solve":
        for sid in wanted:
            verdicts[sid] = {"error": "the solve log is of task %r, not the solve task" % log.eval.task}
        return finish()

    args = dict(item.partition("=")[::2] for item in a.task_arg)
    task = load_tasks([a.task], args)[0]
    scorers = task.scorer or []
    if not scorers:
        sys.exit("autoharness_inspect_score: %s has no scorer" % a.task)
    names = [registry_info(s).name for s in scorers]

    by_id = {}
    repeated = set()
    for sample in log.samples or []:
        sid = str(sample.id)
        if sid not in rewards:
            continue
        if sid in by_id or sample.epoch != 1:
            repeated.add(sid)
        by_id[sid] = sample
    fresh = []
    for sid in wanted:
        sample = by_id.get(sid)
        if sample is None or sid in repeated or sid not in trusted:
            verdicts[sid] = {"error": "not in the solve log" if sample is None else "in the solve log more than once"}
            continue
        if sample.error is not None:
            verdicts[sid] = {"error": "the solver raised: %s" % (sample.error.message or "")[:2000]}
            continue
        t = trusted[sid]
        fresh.append(EvalSample(id=sid, epoch=1, input=t["input"], choices=t.get("choices"), target=t["target"],
                                metadata=t.get("metadata") or {}, messages=sample.messages, output=sample.output,
                                attachments=sample.attachments or {}))
    if fresh:
        log.samples = fresh
        log.results = None
        log.reductions = None
        log.eval.scorers = None
        # The header is agent.py's too: the model a scorer may call, its arguments and roles
        # would otherwise be built from it (score_async's get_model(log.eval.model, ...)).
        log.eval.model_roles = None
        log.eval.model_args = {}
        log.eval.model_base_url = None
        # ... and the metrics and epoch reducer score() would look up by name.
        log.eval.metrics = None
        log.eval.config.epochs_reducer = None
        log.plan = EvalPlan()
        scored = score(log, scorers, model="none", action="overwrite", display="none", copy=False)
        pick = a.score or names[0]
        for sample in scored.samples:
            s = (sample.scores or {}).get(pick) or (sample.scores or {}).get(pick.split("/")[-1])
            sid = str(sample.id)
            if s is None:
                verdicts[sid] = {"error": "no score named %s (the task's scorers: %s)" % (pick, ", ".join(names))}
                continue
            if isinstance(s.value, dict):
                verdicts[sid] = {"error": "%s gives a score per key (%s): name one with --score" % (pick, ", ".join(s.value))}
                continue
            rewards[sid] = value_to_float()(s.value)
            verdicts[sid] = {"scorer": pick, "value": s.value, "reward": rewards[sid], "answer": s.answer,
                             "explanation": s.explanation, "target": trusted[sid]["target"]}
    finish()


if __name__ == "__main__":
    main()
