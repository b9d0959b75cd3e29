"""Grades BFCL answers with bfcl-eval's own checker, in the benchmark-scorer sandbox
(autoharness, benchmark: bfcl). agent.py is not in this sandbox and this process never imports
it; the answers are data it reads, JSON only.

  autoharness_bfcl_score.py --package DIR --task-ids-file IDS --answers ANSWERS.json
                            --out REWARDS.json [--traces DIR]

The tasks and their possible answers come from the installed package (DIR/data/BFCL_v4_*.json
and DIR/data/possible_answer/), never from the runner's copy. Each answer is graded as
bfcl-eval 2026.3.23's eval_checker/eval_runner.py grades a function-calling model's result:
`_evaluate_single_ast_entry` (decode_ast of BFCL's OpenAI function-calling handler, then
ast_checker) for the AST categories, `_evaluate_single_relevance_entry` for relevance and
irrelevance, `_evaluate_single_multi_turn_entry` (decode_execute, then multi_turn_checker,
which executes the calls and the possible answer's on BFCL's back-ends and compares their
state and output turn by turn) for multi-turn. MODEL_CONFIG names the registry entry whose handler decodes the answers: an
OpenAI function-calling model, whose tools cannot have "." in their names
(underscore_to_dot), as agent.py's tools do not.

REWARDS.json: {"<id>": 1.0 | 0.0 | null}; null when the runner has no answer for the task or
agent.py raised on it. --traces (train runs only): DIR/<id>/verdict.json, the checker's
verdict ({"valid", "error_type", "error"}), and answer.json, what was graded.
"""
import argparse
import ast
import importlib.util
import json
import os
import re
import stat
import sys
import types

MODEL_CONFIG = "gpt-5-mini-2025-08-07-FC"


def load_model_config():
    """Puts bfcl_eval.constants.model_config in sys.modules as the installed file defines it,
    except that of BFCL's model handlers only MODEL_CONFIG's is imported (the others' names are
    bound to None). The file imports every vendor's handler and SDK: about 5 s of CPU for each
    scorer run on a 2-core host, 4 of them for handlers this scorer never uses. MODEL_CONFIG's
    registry entry, ModelConfig and the handler class that decodes the answers are the
    installed ones, read from the file the package ships."""
    spec = importlib.util.find_spec("bfcl_eval.constants.model_config")
    with open(spec.origin) as f:
        tree = ast.parse(f.read(), spec.origin)
    needed = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                if isinstance(key, ast.Constant) and key.value == MODEL_CONFIG and isinstance(value, ast.Call):
                    for kw in value.keywords:
                        if kw.arg == "model_handler" and isinstance(kw.value, ast.Name):
                            needed = kw.value.id
    if needed is None:
        sys.exit(f"{spec.origin}: no registry entry {MODEL_CONFIG} naming its model_handler")
    body = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("bfcl_eval.model_handler."):
            kept = [a for a in node.names if (a.asname or a.name) == needed]
            if kept:
                body.append(ast.ImportFrom(module=node.module, names=kept, level=node.level))
            body += [ast.Assign(targets=[ast.Name(id=a.asname or a.name, ctx=ast.Store())], value=ast.Constant(value=None))
                     for a in node.names if (a.asname or a.name) != needed]
        else:
            body.append(node)
    tree.body = body
    ast.fix_missing_locations(tree)
    module = types.ModuleType(spec.name)
    module.__file__, module.__spec__ = spec.origin, spec
    sys.modules[spec.name] = module
    exec(compile(tree, spec.origin, "exec"), module.__dict__)


load_model_config()
from bfcl_eval.constants.enums import Language, ReturnFormat  # noqa: E402 (after the registry)
from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING  # noqa: E402
from bfcl_eval.eval_checker import eval_runner  # noqa: E402

RELEVANCE = ("irrelevance", "live_irrelevance", "live_relevance")
MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def multi_turn_result(result, names):
    """agent.py's multi-turn answer, with every call BFCL's checker could not run as a call
    made text. The checker builds `name(key=repr(value), ...)` from each call and passes it to
    eval (multi_turn_eval/multi_turn_utils.py, execute_multi_turn_func_call): a name or key
    agent.py chose that is not a plain identifier would be code run here, where the rewards
    are written. Only the task's own functions, called with identifier keys and JSON values,
    reach it; anything else is a step that made no call (the checker skips those)."""
    if not isinstance(result, list):
        return result
    turns = []
    for turn in result:
        steps = []
        for step in turn if isinstance(turn, list) else []:
            if isinstance(step, list) and all(isinstance(c, dict) and len(c) == 1 for c in step):
                ok = True
                for call in step:
                    (name, arguments), = call.items()
                    try:
                        decoded = json.loads(arguments) if isinstance(arguments, str) else None
                    except ValueError:
                        decoded = None
                    ok = ok and name in names and isinstance(decoded, dict) and all(
                        isinstance(k, str) and IDENTIFIER.fullmatch(k) for k in decoded)
                steps.append(step if ok else "a call that is not one of the task's functions")
            else:
                steps.append(step if isinstance(step, str) else "")
        turns.append(steps)
    return turns


def category(task_id):
    m = re.fullmatch(r"(.+)_[0-9][0-9-]*", task_id)
    return m.group(1) if m else None


def read_lines(path):
    out = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                entry = json.loads(line)
                out[entry["id"]] = entry
    return out


def trace_name(task_id):
    """The trace directory autoharness reads for a task (TraceName.encode): bytes outside
    [A-Za-z0-9_-], and a leading ".", written %XX."""
    plain = set(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
    return "".join(chr(b) if b in plain or (b == 0x2E and n > 0) else "%%%02X" % b
                   for n, b in enumerate(task_id.encode()))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--package", required=True)
    p.add_argument("--task-ids-file", required=True)
    p.add_argument("--answers", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--traces")
    a = p.parse_args()
    with open(a.task_ids_file) as f:
        ids = [line.strip() for line in f if line.strip()]
    try:
        # Not blocking on a FIFO, and only a regular file: the runner's sandbox made it.
        fd = os.open(a.answers, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        with os.fdopen(fd) as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError("not a regular file")
            answers = json.load(f)
        if not isinstance(answers, dict):
            answers = {}
    except (OSError, ValueError, RecursionError) as e:
        print("bfcl checker: no answers (%s)" % type(e).__name__, file=sys.stderr)
        answers = {}
    data = os.path.join(a.package, "data")
    tasks, truths = {}, {}
    docs = {}
    for c in sorted({category(i) for i in ids} - {None}):
        tasks.update(read_lines(os.path.join(data, "BFCL_v4_%s.json" % c)))
        if c in MULTI_TURN and not docs:
            for backend, file in MULTI_TURN_FUNC_DOC_FILE_MAPPING.items():
                with open(os.path.join(data, "multi_turn_func_doc", file)) as f:
                    docs[backend] = {json.loads(line)["name"] for line in f if line.strip()}
        if c not in RELEVANCE:
            truths.update(read_lines(os.path.join(data, "possible_answer", "BFCL_v4_%s.json" % c)))
    handler = eval_runner.get_handler(MODEL_CONFIG)
    rewards = {}
    for task_id in ids:
        c, task, answer = category(task_id), tasks.get(task_id), answers.get(task_id)
        if task is None or not isinstance(answer, dict) or "result" not in answer:
            rewards[task_id] = None
            continue
        result = answer["result"]
        try:
            verdict = grade(handler, task_id, c, task, result, truths, docs)
        except RecursionError:
            verdict = {"valid": False, "error_type": "autoharness:answer_too_deep", "error": ["the answer nests too deeply to check"]}
        rewards[task_id] = 1.0 if verdict.get("valid") is True else 0.0
        if a.traces:
            trace(a.traces, task_id, c, task, result, verdict)
    with open(a.out, "w") as f:
        json.dump(rewards, f)
    passed = sum(1 for r in rewards.values() if r == 1.0)
    print("bfcl checker: %d of %d task(s) passed" % (passed, len(ids)), file=sys.stderr)


def grade(handler, task_id, c, task, result, truths, docs):
    """BFCL's verdict on one answer."""
    if c in RELEVANCE:
        return eval_runner._evaluate_single_relevance_entry(handler, task_id, result, task, MODEL_CONFIG, c)
    if c in MULTI_TURN:
        names = set().union(*(docs.get(b, set()) for b in task.get("involved_classes", [])))
        verdict = eval_runner._evaluate_single_multi_turn_entry(
            handler, task_id, multi_turn_result(result, names), truths[task_id]["ground_truth"], dict(task), MODEL_CONFIG, c)
        if isinstance(verdict.get("error"), dict):  # the multi-turn checker nests its verdict
            verdict["error_type"] = verdict["error"].get("error_type")
            verdict["error"] = verdict["error"].get("error_message", [])
        return verdict
    return eval_runner._evaluate_single_ast_entry(
        handler, task_id, result, truths[task_id]["ground_truth"], task, MODEL_CONFIG, c, Language.PYTHON, ReturnFormat.PYTHON)


def trace(directory, task_id, c, task, result, verdict):
    """A train task's trace: the checker's verdict and what it graded."""
    d = os.path.join(directory, trace_name(task_id))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "verdict.json"), "w") as f:
        json.dump({"valid": verdict.get("valid") is True, "category": c,
                   "error_type": verdict.get("error_type"), "error": verdict.get("error", [])}, f, indent=1, default=str)
    try:
        text = json.dumps({"question": task["question"], "function": task.get("function"), "result": result}, indent=1, default=str)
    except RecursionError:
        text = json.dumps({"question": task["question"], "function": task.get("function"), "result": "(nested too deeply to show)"}, indent=1)
    with open(os.path.join(d, "answer.json"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
