TASKS = {}
PHASE = {}


def app(method, path, body):
    if path == "/health":
        return 200, {"status": "ok"}
    if path == "/init_task":
        tid = body["task_id"]
        TASKS[tid] = body["task_data"]
        PHASE[tid] = 1
        return 200, {"status": "initialized"}
    if path == "/submit":
        tid, sql = body["task_id"], body["sql"].strip().lower()
        task, phase = TASKS.get(tid) or {}, PHASE.get(tid, 1)
        gold = (task.get("sol_sql") or [None])[0] if phase == 1 else ((task.get("follow_up") or {}).get("sol_sql") or [None])[0]
        if gold is None or sql != gold.lower():
            return 200, {"passed": False, "message": "SQL failed Phase %d. Your SQL is not correct." % phase, "reward": 0.0,
                         "phase_completed": None, "has_follow_up": False, "follow_up_query": None}
        follow = task.get("follow_up") or {}
        if phase == 1 and follow.get("sol_sql"):
            PHASE[tid] = 2
            return 200, {"passed": True, "message": "Phase 1 correct! (Reward: 0.7). Moving to Phase 2.", "reward": 0.7,
                         "phase_completed": 1, "has_follow_up": True, "follow_up_query": follow.get("query")}
        return 200, {"passed": True, "message": "Phase %d correct! (Reward: %s). Task finished." % (phase, 0.7 if phase == 1 else 0.3),
                     "reward": 0.7 if phase == 1 else 0.3, "phase_completed": phase, "has_follow_up": False, "follow_up_query": None}
    if path == "/cleanup_task":
        TASKS.pop(body.get("task_id"), None)
        return 200, {"status": "cleaned"}
    return 404, {"detail": "not found"}
