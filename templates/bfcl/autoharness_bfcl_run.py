"""Runs agent.py on BFCL tasks, in the benchmark-runner sandbox (autoharness, benchmark: bfcl).

  autoharness_bfcl_run.py --tasks TASKS.jsonl --out ANSWERS.json [--max-concurrency N]
                          [--oracle POSSIBLE_ANSWER_DIR]

TASKS.jsonl holds only this run's tasks, each {"id", "question", "function"} (and, for a
multi-turn task, its back-ends' initial state, their names and the functions held back until a
later turn); the supervisor wrote it, and nothing of BFCL's possible answers is in this sandbox.

This process is the driver; agent.py never runs in it. The driver reads the tasks, removes the
file, makes itself non-dumpable (no other process of the sandbox may read its memory or its
/proc entries) and starts worker processes (this file with --worker) that import agent.py.
A worker is sent, per call, only what a model would see: the conversation so far and the
functions offered so far, never a task's id (the id names its category, and the category
decides the answer class of the relevance ones), its later turns or its held-back functions.
For a single-turn task the driver asks once (the question's first turn, its functions). A
multi-turn task is a conversation of several user turns, driven as bfcl-eval's
function-calling handlers drive one (model_handler/base_handler.py, inference_multi_turn_FC):
each turn, agent.py is called again with the whole conversation (OpenAI chat messages: its
calls as `tool_calls`, their results as `tool` messages) until it answers without a call, at
most 20 calls per turn (BFCL's step limit: past it the task is over and fails); its calls run,
in the driver, against BFCL's own back-end classes (bound read-only from the install: their
code only). Once every task is answered the driver kills every other process of the sandbox
and only then writes ANSWERS.json:
  {"<id>": {"result": RESULT} | {"error": "..."}}
RESULT is what BFCL's handlers store for a model: for a single-turn task its reply (a list of
calls in OpenAI's form, [{"<name>": "<arguments as JSON>"}], or its text when it called
nothing); for a multi-turn task a list per turn of those replies, one per step. A task whose
agent raised, or returned something that is neither, gets `error`: it scores 0 (never "no
call").

--oracle plays BFCL's possible answers back instead of importing agent.py (the first
acceptable value of each parameter, optional ones left out): a check that the checker and the
package agree.
"""
import argparse
import concurrent.futures
import copy
import ctypes
import json
import os
import queue
import random
import signal
import subprocess
import sys
import time
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
        if "involved_classes" in task:
            # Each turn's calls, all at once, then a text reply to end the turn.
            def played(messages, functions, turn, truth=truth):
                if messages[-1].get("role") == "tool" or turn >= len(truth) or not truth[turn]:
                    return "Done."
                return [parse_call(c, functions) for c in truth[turn]]
            answers[task["id"]] = {"result": converse(task, played)}
            continue
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


# bfcl-eval's multi-turn back-ends: class name -> module of func_source_code (2026.3.23,
# constants/executable_backend_config.py); MathAPI keeps no state.
BACKENDS = {"GorillaFileSystem": "gorilla_file_system", "MathAPI": "math_api", "MessageAPI": "message_api",
            "TwitterAPI": "posting_api", "TicketAPI": "ticket_api", "TradingBot": "trading_bot",
            "TravelAPI": "travel_booking", "VehicleControlAPI": "vehicle_control"}
STEP_LIMIT = 20
# What BFCL says when a turn brings the held-back functions (constants/default_prompts.py).
MORE_FUNCTIONS = "I have updated some more functions you can choose from. What about now?"


def backends(task):
    import importlib
    out = []
    for name in task["involved_classes"]:
        module = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.func_source_code." + BACKENDS[name])
        instance = getattr(module, name)()
        if name != "MathAPI":
            instance._load_scenario(copy.deepcopy(task.get("initial_config", {}).get(name, {})),
                                    long_context=task["id"].startswith("multi_turn_long_context"))
        out.append(instance)
    return out


def execute(instances, call):
    """One call against the back-ends, its result as the text BFCL's executor gives a model."""
    name = call["name"]
    method = None if name.startswith("_") else next((getattr(i, name) for i in instances if callable(getattr(i, name, None))), None)
    if method is None:
        return "Error during execution: name '%s' is not defined" % name
    try:
        result = method(**call["arguments"])
    except Exception as e:
        return "Error during execution: %s" % e
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            pass
    return str(result)


def converse(task, answer):
    """A multi-turn task: `answer(messages, functions)` is agent.py (or the oracle) for one
    step; returns the result per turn and step."""
    instances = backends(task)
    functions = list(task["function"])
    missed = task.get("missed_function") or {}
    messages, turns = [], []
    for index, turn in enumerate(task["question"]):
        if str(index) in missed:
            functions += missed[str(index)]
            turn = [{"role": "user", "content": MORE_FUNCTIONS}]
        messages += turn
        steps = []
        while True:
            result = as_result(answer(messages, functions, index))
            steps.append(result)
            if isinstance(result, str) or not result:
                messages.append({"role": "assistant", "content": result or ""})
                break
            calls = [{"id": "call_%d_%d_%d" % (index, len(steps), n), "name": name, "arguments": json.loads(arguments)}
                     for n, c in enumerate(result) for name, arguments in c.items()]
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}} for c in calls]})
            for c in calls:
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": execute(instances, c)})
            if len(steps) > STEP_LIMIT:
                turns.append(steps)
                return turns  # forced to quit: fewer turns than the task has, and it fails
        turns.append(steps)
    return turns


def parse_call(text, functions):
    """A possible answer's call, `name(arg=value, ...)` (positional arguments in the order of
    the function's documented parameters), as {"name", "arguments"}."""
    import ast
    node = ast.parse(text, mode="eval").body
    name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
    doc = next((f for f in functions if f["name"] == name), {})
    order = list(doc.get("parameters", {}).get("properties", {}))
    arguments = {order[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    arguments.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return {"name": name, "arguments": arguments}


class Worker:
    """One agent.py process: a request is a line of JSON {"new", "messages", "functions"}
    ("new": a fresh HarnessAgent for a new task), a reply a line {"answer"} or {"error"} on a
    pipe of its own (agent.py's prints go to the run's output)."""

    def __init__(self):
        replies_r, replies_w = os.pipe()
        self.process = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", str(replies_w)],
                                        stdin=subprocess.PIPE, pass_fds=(replies_w,), close_fds=True, text=True)
        os.close(replies_w)
        self.replies = os.fdopen(replies_r, "r")

    def ask(self, messages, functions, new=False):
        self.process.stdin.write(json.dumps({"new": new, "messages": messages, "functions": functions}) + "\n")
        self.process.stdin.flush()
        line = self.replies.readline()
        if not line:
            raise RuntimeError("agent.py's process ended (exit %s)" % self.process.poll())
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["answer"]


def worker(reply_fd):
    """A worker: imports agent.py and answers the driver's requests."""
    replies = os.fdopen(reply_fd, "w")
    sys.path.insert(0, "/work/agent")
    from agent import HarnessAgent
    agent = None
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["new"] or agent is None:
                agent = HarnessAgent()
            answer = agent.run(request["messages"], request["functions"])
            text = json.dumps({"answer": answer})
        except Exception as e:
            traceback.print_exc()
            text = json.dumps({"error": "%s: %s" % (type(e).__name__, e)})
        replies.write(text + "\n")
        replies.flush()


# The initial PID namespace's inode number, fixed by the kernel (PROC_PID_INIT_INO).
INITIAL_PID_NAMESPACE = 0xEFFFFFFC


def own_pid_namespace(outer):
    """Whether this process is in a PID namespace of its own: neither the host's first one nor
    the supervisor's (`outer`, its inode number, passed by the adapter). Only there does
    kill(-1) reach no process but the sandbox's. (NSpid in /proc/self/status cannot tell: it
    lists pids from the /proc mount's namespace down, and the sandbox mounts its own /proc.)"""
    ino = os.stat("/proc/self/ns/pid").st_ino
    return ino not in (INITIAL_PID_NAMESPACE, outer)


def running(pid):
    """Whether `pid` is a process that can still act (a zombie cannot)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def kill_others(outer):
    """Ends every process of the sandbox but this one (and its init): agent.py's workers and
    anything they left behind, so nothing rewrites the answers once they are written."""
    if not own_pid_namespace(outer):
        print("bfcl: not in a PID namespace of its own: agent.py's processes are not ended", file=sys.stderr)
        return
    me = os.getpid()
    for _ in range(100):
        try:
            os.kill(-1, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG) == (0, 0):
                    break
            except ChildProcessError:
                break
        alive = [p for p in map(int, filter(str.isdigit, os.listdir("/proc"))) if p not in (me, 1) and running(p)]
        if not alive:
            return
        time.sleep(0.05)
    raise RuntimeError("processes of agent.py survived SIGKILL: %s" % alive[:5])


def drive(tasks, concurrency):
    """Every task answered by agent.py in worker processes; the answers by task id. The tasks
    go out in a random order: the run's ids are in /work/in/task_ids.txt, in the order the
    supervisor wrote the tasks, so asking in that order would tell agent.py which id (and
    category) each question has by counting."""
    tasks = list(tasks)
    random.SystemRandom().shuffle(tasks)
    workers = queue.Queue()
    for _ in range(max(1, min(concurrency, len(tasks)))):
        workers.put(Worker())

    def one(task):
        w = workers.get()
        try:
            if "involved_classes" in task:
                first = [True]

                def step(messages, functions, turn):
                    new, first[0] = first[0], False
                    return w.ask(messages, functions, new=new)
                return task["id"], {"result": converse(task, step)}
            return task["id"], {"result": as_result(w.ask(task["question"][0], task["function"], new=True))}
        except Exception as e:
            traceback.print_exc()
            if w.process.poll() is not None:
                w = Worker()  # the task's agent.py ended: the next task gets a fresh one
            return task["id"], {"error": "%s: %s" % (type(e).__name__, e)}
        finally:
            workers.put(w)

    with concurrent.futures.ThreadPoolExecutor(workers.qsize()) as pool:
        return dict(pool.map(one, tasks))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker(int(sys.argv[2]))
    p = argparse.ArgumentParser()
    p.add_argument("--tasks", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--max-concurrency", type=int, default=4)
    p.add_argument("--oracle")
    p.add_argument("--outer-pid-namespace", type=int, default=0,
                   help="the supervisor's PID namespace inode: agent.py's processes are ended only in another")
    a = p.parse_args()
    with open(a.tasks) as f:
        tasks = [json.loads(line) for line in f if line.strip()]
    if a.oracle:
        answers = oracle_answers(a.oracle, tasks)
    else:
        os.unlink(a.tasks)
        if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE, 0
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0)")
        answers = drive(tasks, a.max_concurrency)
        kill_others(a.outer_pid_namespace)
    text = {}
    for task_id, answer in answers.items():
        try:
            text[task_id] = json.dumps(answer)
        except (TypeError, ValueError, RecursionError) as e:
            text[task_id] = json.dumps({"error": "the answer does not encode: %s" % type(e).__name__})
    if os.path.lexists(a.out):
        os.unlink(a.out)
    with os.fdopen(os.open(a.out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644), "w") as f:
        f.write("{" + ", ".join("%s: %s" % (json.dumps(k), v) for k, v in text.items()) + "}")
    failed = sum(1 for v in answers.values() if "error" in v)
    print("bfcl: %d task(s) answered, %d raised" % (len(answers) - failed, failed), file=sys.stderr)


if __name__ == "__main__":
    main()
