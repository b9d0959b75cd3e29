"""Stand-in for BIRD-Interact-ADK/orchestrator/cinteract.py (451fe2c), its phase structure:
phase 1, one debug turn if it failed; then, only if phase 1 passed and the task record's
follow_up has sol_sql, the user simulator's /phase_transition and a message with the
follow-up's query, and one debug turn if that failed. The reward is the system agent's
session total."""
from shared import client


def run_single_task(task_data):
    iid = task_data["instance_id"]
    payload = {"task_id": iid, "task_data": {**task_data, "_interact_mode": "c-interact"}}
    client.db("/init_task", payload)
    client.user("/init_task", payload)
    messages = []

    def run(message):
        messages.append(message)
        return client.system("/run_session", {"task_id": iid, "mode": "c-interact", "message": message})

    try:
        client.system("/init_session", {"task_id": iid, "mode": "c-interact",
                                        "state": {"task_id": iid, "mode": "c-interact", "db_name": task_data["selected_database"]}})
        out = run("User Query:\n%s\n\nAsk questions with ask_user, then call submit_sql." % task_data.get("amb_user_query", ""))
        state = out.get("state", {})
        p1 = state.get("phase1_completed", False)
        debug_passed = False
        if not p1:
            out = run("Your SQL is not correct. You have one more chance. Please fix and call submit_sql.")
            state = out.get("state", {})
            debug_passed = state.get("phase1_completed", False)
        has_follow_up = bool(task_data.get("follow_up") and task_data["follow_up"].get("sol_sql"))
        best_p1 = p1 or debug_passed
        p2 = False
        if best_p1 and has_follow_up:
            follow_up_query = task_data["follow_up"].get("query", "")
            client.user("/phase_transition", {"task_id": iid})
            out = run("Phase 1 is complete. Here is a follow-up question:\n\n%s\n\nGenerate the PostgreSQL query and call submit_sql."
                      % follow_up_query)
            state = out.get("state", {})
            p2 = state.get("phase2_completed", False)
            if not p2:
                out = run("Your SQL is not correct. You have one more chance. Please fix and call submit_sql.")
                state = out.get("state", {})
                p2 = state.get("phase2_completed", False)
        return {"task_id": iid, "instance_id": iid, "database": task_data["selected_database"],
                "phase1_passed": best_p1, "phase2_passed": p2, "has_follow_up": has_follow_up,
                "total_reward": state.get("total_reward", 0.0), "orchestrator_messages": messages,
                "tool_trajectory": state.get("tool_trajectory", []), "dialogue_history": state.get("dialogue_history", [])}
    finally:
        client.db("/cleanup_task", {"task_id": iid})
