"""The fake model's answers for BFCL tasks (BfclTests): for each task a rule keyed by its
request's text whose turn makes the calls a plan says (fake_model.py's `answers`).

  bfcl_answers.py --package DIR --templates DIR PLAN.json   (PLAN: [[task id, kind], ...])

Kinds: right (the possible answer's first acceptable values, as the oracle plays them),
stringly (the same, every number written as a string: BFCL's type check fails, an agent.py
that coerces to the documented types passes), missing (a required parameter left out), extra
(the right call made twice), call (a call where none fits: an irrelevance task), text (no call).
A multi-turn task gets a rule per turn, keyed by that turn's request: `right` makes the possible
answer's calls of the turn, `short` leaves out each turn's last call.
Prints the rules as JSON.
"""
import importlib.util
import json
import os
import sys

args = dict(zip(sys.argv[1:-1:2], sys.argv[2:-1:2]))
plan = json.load(open(sys.argv[-1]))
spec = importlib.util.spec_from_file_location("bfcl_run", os.path.join(args["--templates"], "bfcl", "autoharness_bfcl_run.py"))
run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run)
data = os.path.join(args["--package"], "data")


def lines(path):
    return {e["id"]: e for e in (json.loads(l) for l in open(path) if l.strip())}


DOCS = {"GorillaFileSystem": "gorilla_file_system.json", "MathAPI": "math_api.json", "MessageAPI": "message_api.json",
        "TwitterAPI": "posting_api.json", "TicketAPI": "ticket_api.json", "TradingBot": "trading_bot.json",
        "TravelAPI": "travel_booking.json", "VehicleControlAPI": "vehicle_control.json"}

rules = []
for task_id, kind in plan:
    category = task_id.rsplit("_", 1)[0]
    task = lines(os.path.join(data, "BFCL_v4_%s.json" % category))[task_id]
    if category.startswith("multi_turn"):
        functions = [json.loads(l) for b in task["involved_classes"]
                     for l in open(os.path.join(data, "multi_turn_func_doc", DOCS[b])) if l.strip()]
        truth = lines(os.path.join(data, "possible_answer", "BFCL_v4_%s.json" % category))[task_id]["ground_truth"]
        for turn, calls in zip(task["question"], truth):
            parsed = [run.parse_call(c, functions) for c in calls]
            if kind == "short":
                parsed = parsed[:-1]
            rules.append({"when": turn[-1]["content"],
                          "turn": [{"tool": c["name"], "input": c["arguments"]} for c in parsed] or [{"text": "Nothing to do."}]})
        continue
    calls = []
    truth_path = os.path.join(data, "possible_answer", "BFCL_v4_%s.json" % category)
    if os.path.exists(truth_path):
        for call in lines(truth_path)[task_id]["ground_truth"]:
            (name, params), = call.items()
            doc = next(f for f in task["function"] if f["name"] == name)
            required = doc["parameters"].get("required", [])
            calls.append({"tool": name.replace(".", "_"), "input": run.chosen(params, required), "required": required})
    if kind == "stringly":
        for c in calls:
            c["input"] = {k: str(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for k, v in c["input"].items()}
    elif kind == "missing":
        c = calls[0]
        c["input"].pop(c["required"][0])
    elif kind == "extra":
        calls = calls + calls[:1]
    elif kind == "call":
        f = task["function"][0]
        calls = [{"tool": f["name"].replace(".", "_"), "input": {}}]
    elif kind == "text":
        calls = []
    turn = [{"tool": c["tool"], "input": c["input"]} for c in calls] or [{"text": "None of these functions applies."}]
    rules.append({"when": task["question"][0][-1]["content"], "turn": turn})
print(json.dumps(rules))
