"""autoharness: the ADK's orchestrator (orchestrator.runner) on the redacted task list, with
each task's follow-up learnt from the graders once phase 1 has passed (benchmark-runner sandbox).

    python autoharness_bird_orchestrate.py --db-port R -- <orchestrator.runner's arguments>

Run with the ADK's code directory as the working directory, as `python -m orchestrator.runner`.

The redacted task list has no follow-up: before phase 1 passes nothing on this side may know
the follow-up question. Upstream's orchestrator reads it from the task record it holds
(BIRD-Interact-ADK at 451fe2c3518ee1cf908d8139e2913483bd519381): orchestrator/cinteract.py,
run_single_task, checks `task_data["follow_up"]` and its sol_sql after phase 1 and its debug
turn, calls the user simulator's /phase_transition and sends the follow-up's query to the system
agent; orchestrator/ainteract.py reads it only for the result's has_follow_up (there the system
agent learns the question from the DB environment's /submit answer). So each task's
"follow_up" here is a mapping that asks the graders (POST /autoharness/follow_up through the DB
environment's relay on localhost:R) whenever it is read: empty until the DB environment has
passed phase 1 of a task that has a follow-up, then {query, sol_sql}, where sol_sql is a
placeholder: the gold SQL never leaves the graders' sandbox.
"""
import json
import os
import sys
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != HERE]
sys.path.insert(0, os.getcwd())

argv = sys.argv[1:]
if len(argv) < 3 or argv[0] != "--db-port" or argv[2] != "--":
    sys.exit("usage: autoharness_bird_orchestrate.py --db-port R -- <orchestrator.runner arguments>")
DB_PORT = int(argv[1])
# Loopback only, never through an egress proxy a sandbox environment may name.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class FollowUp(dict):
    """A task's follow-up as the graders have revealed it so far (the dict itself stays empty:
    serialised, as in the /init_task bodies the orchestrator posts, it is {})."""

    WITHHELD = ["-- withheld: graded by the DB environment"]

    def __init__(self, task_id):
        super().__init__()
        self._task_id = task_id
        self._query = None

    def _view(self):
        if self._query is None:
            req = urllib.request.Request("http://127.0.0.1:%d/autoharness/follow_up" % DB_PORT, method="POST",
                                         data=json.dumps({"task_id": self._task_id}).encode(),
                                         headers={"Content-Type": "application/json"})
            try:
                with OPENER.open(req, timeout=30) as r:
                    v = json.loads(r.read())
                if v.get("revealed"):
                    self._query = str(v.get("query") or "")
            except (OSError, ValueError, AttributeError) as e:
                print("autoharness: follow-up of %s not available: %s" % (self._task_id, e), file=sys.stderr)
        return {} if self._query is None else {"query": self._query, "sol_sql": list(self.WITHHELD)}

    def get(self, key, default=None):
        return self._view().get(key, default)

    def __getitem__(self, key):
        return self._view()[key]

    def __contains__(self, key):
        return key in self._view()

    def __bool__(self):
        return bool(self._view())

    def __len__(self):
        return len(self._view())

    def __iter__(self):
        return iter(self._view())

    def keys(self):
        return self._view().keys()

    def items(self):
        return self._view().items()

    def values(self):
        return self._view().values()

    def __repr__(self):
        return repr(self._view())


import orchestrator.runner as runner  # noqa: E402  (the ADK's, from the working directory)

if not callable(getattr(runner, "load_tasks", None)) or not callable(getattr(runner, "main", None)):
    sys.exit("autoharness: orchestrator.runner has no load_tasks() and main(): this BIRD-Interact-ADK is not the one "
             "autoharness_bird_orchestrate.py was written for")
_load_tasks = runner.load_tasks


def load_tasks(*a, **k):
    tasks = _load_tasks(*a, **k)
    for t in tasks:
        t["follow_up"] = FollowUp(str(t["instance_id"]))
    return tasks


runner.load_tasks = load_tasks
sys.argv = ["orchestrator.runner"] + argv[3:]
runner.main()
