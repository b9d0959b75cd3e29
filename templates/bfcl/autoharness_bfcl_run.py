"""Runs agent.py on BFCL tasks, in the benchmark-runner sandbox (autoharness, benchmark: bfcl).

  autoharness_bfcl_run.py --tasks TASKS.jsonl --out ANSWERS.json [--max-concurrency N]
                          [--oracle POSSIBLE_ANSWER_DIR]

TASKS.jsonl holds only this run's tasks, each {"id", "question", "function"} (the supervisor
wrote it; nothing of BFCL's possible answers is in this sandbox). For each task it calls
HarnessAgent().run(question's first turn, function) and writes ANSWERS.json:
  {"<id>": {"result": [{"<name>": "<arguments as JSON>"}, ...] | "<text>"} | {"error": "..."}}
`result` is what BFCL's function-calling handlers store for a model's reply (a list of calls
in OpenAI's form, or the text when it called nothing), so the checker reads it as it reads
theirs. A task whose agent raised, or returned something that is neither, gets `error`: it
scores 0 (never "no call").

--oracle plays BFCL's possible answers back instead of importing agent.py (the first
acceptable value of each parameter, optional ones left out): a check that the checker and the
package agree.
"""
import argparse
import concurrent.futures
import json
import os
import sys
import traceback


def as_result(answer):
    """agent.py's answer in the form BFCL's handlers store, or raises ValueError."""
    if isinstance(answer, str):
        return answer
    if not isinstance(answer, list):
        raise ValueError("agent.py returned %s, not a list of calls or a string" % type(answer).__name__)
    calls = []
    for call in answer:
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            raise ValueError("a call is not {\"name\": ..., \"arguments\": {...}}: %r" % (call,))
        arguments = call.get("arguments", {})
        if isinstance(arguments, str):
            arguments = json.loads(arguments)
        if not isinstance(arguments, dict):
            raise ValueError("the arguments of %s are not an object" % call["name"])
        calls.append({call["name"]: json.dumps(arguments)})
    return calls


OMIT = object()


def chosen(params, required=()):
    """Each parameter's first acceptable value; one that may be omitted ("" among its options)
    is, unless the function's document requires it. (BFCL's possible answers accept some
    parameters a function does not define, which the checker refuses as unexpected, and
    leave out some it requires.)"""
    values = {k: OMIT if isinstance(v, list) and "" in v and k not in required else first_value(v) for k, v in params.items()}
    return {k: v for k, v in values.items() if v is not OMIT}


def first_value(options):
    """The first acceptable value of a parameter in a possible answer ("" is omission). A
    dict's (or a list of dicts') own values are lists of options in turn, or (in a few
    answers) the value itself."""
    if not isinstance(options, list):
        return options
    for option in options:
        if option == "":
            continue
        if isinstance(option, dict):
            return chosen(option)
        if isinstance(option, list) and option and all(isinstance(x, dict) for x in option):
            return [chosen(item) for item in option]
        return option
    return OMIT


def oracle_answers(directory, tasks):
    answers = {}
    by_id = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            with open(os.path.join(directory, name)) as f:
                for line in f:
                    if line.strip():
                        entry = json.loads(line)
                        by_id[entry["id"]] = entry["ground_truth"]
    for task in tasks:
        truth = by_id.get(task["id"])
        if truth is None:
            # The relevance categories have no possible answers: irrelevance is passed by no
            # call, relevance by any call at all (BFCL checks only that one decodes).
            relevant = task["id"].startswith("live_relevance_") and task["function"]
            answers[task["id"]] = {"result": as_result([{"name": task["function"][0]["name"].replace(".", "_"), "arguments": {}}])
                                   if relevant else "None of the functions applies."}
            continue
        calls = []
        for call in truth:
            (name, params), = call.items()
            doc = next((f for f in task["function"] if f.get("name") == name), {})
            required = doc.get("parameters", {}).get("required", [])
            calls.append({"name": name.replace(".", "_"), "arguments": chosen(params, required)})
        answers[task["id"]] = {"result": as_result(calls)}
    return answers


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--max-concurrency", type=int, default=4)
    p.add_argument("--oracle")
    a = p.parse_args()
    with open(a.tasks) as f:
        tasks = [json.loads(line) for line in f if line.strip()]
    if a.oracle:
        answers = oracle_answers(a.oracle, tasks)
    else:
        sys.path.insert(0, "/work/agent")
        from agent import HarnessAgent

        def one(task):
            try:
                return task["id"], {"result": as_result(HarnessAgent().run(task["question"][0], task["function"]))}
            except Exception as e:
                traceback.print_exc()
                return task["id"], {"error": "%s: %s" % (type(e).__name__, e)}

        with concurrent.futures.ThreadPoolExecutor(max(1, a.max_concurrency)) as pool:
            answers = dict(pool.map(one, tasks))
    with open(a.out, "w") as f:
        json.dump(answers, f)
    failed = sum(1 for v in answers.values() if "error" in v)
    print("bfcl: %d task(s) answered, %d raised" % (len(answers) - failed, failed), file=sys.stderr)


if __name__ == "__main__":
    main()
