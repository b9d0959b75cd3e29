"""Stand-in for BIRD-Interact-ADK/orchestrator/ainteract.py (451fe2c): the services get the
task (with _interact_mode), the system agent one session and one message; the follow-up, if
any, reaches the system agent only in the DB environment's answer to a passed phase-1 submit.
The task record's follow_up is read once, after the run, for has_follow_up."""
from shared import client


def run_single_task(task_data):
    iid = task_data["instance_id"]
    payload = {"task_id": iid, "task_data": {**task_data, "_interact_mode": "a-interact"}}
    client.db("/init_task", payload)
    client.user("/init_task", payload)
    try:
        client.system("/init_session", {"task_id": iid, "mode": "a-interact", "reset": True,
                                        "state": {"task_id": iid, "db_name": task_data["selected_database"], "current_phase": 1,
                                                  "total_reward": 0.0, "phase1_completed": False, "phase2_completed": False}})
        message = "Database: %s\nTask ID: %s\n\nUser Query:\n%s\n\nSubmit your final SQL." % (
            task_data["selected_database"], iid, task_data.get("amb_user_query", ""))
        out = client.system("/run_session", {"task_id": iid, "mode": "a-interact", "message": message})
        state = out.get("state", {})
        return {"task_id": iid, "instance_id": iid, "database": task_data["selected_database"],
                "phase1_passed": state.get("phase1_completed", False), "phase2_passed": state.get("phase2_completed", False),
                "has_follow_up": bool(task_data.get("follow_up") and task_data["follow_up"].get("sol_sql")),
                "total_reward": state.get("total_reward", 0.0), "budget_used": 0, "budget_remaining": 0,
                "dialogue_history": out.get("dialogue_history", []), "tool_trajectory": out.get("tool_trajectory", []),
                "adk_events": [], "final_response": out.get("final_response", "")}
    finally:
        client.db("/cleanup_task", {"task_id": iid})
