"""Stand-in for BIRD-Interact-ADK/user_simulator/server.py (451fe2c): /ask answers from the
task's clear `query` in phase 1; /phase_transition switches to phase 2, where (as upstream's
reference SQL becomes the follow-up's) it answers from the follow-up."""
TASKS = {}
PHASE = {}


def app(method, path, body):
    if path == "/health":
        return 200, {"status": "ok"}
    if path == "/init_task":
        TASKS[body["task_id"]] = body["task_data"]
        PHASE[body["task_id"]] = 1
        return 200, {"status": "initialized"}
    if path == "/phase_transition":
        if body["task_id"] not in TASKS:
            return 404, {"detail": "Task %s not initialized" % body["task_id"]}
        PHASE[body["task_id"]] = 2
        return 200, {"status": "ok", "phase": 2}
    if path == "/ask":
        task = TASKS.get(body["task_id"]) or {}
        if PHASE.get(body["task_id"]) == 2:
            follow = (task.get("follow_up") or {}).get("query")
            return 200, {"answer": ("The follow-up: " + follow) if follow else "I don't know what you mean."}
        clear = task.get("query")
        return 200, {"answer": ("I mean: " + clear) if clear else "I don't know what you mean."}
    return 404, {"detail": "not found"}
