"""The stand-in's stock system agent: submits `SELECT 1` and stops."""
from shared import client

SESSIONS = {}


def app(method, path, body):
    if path == "/health":
        return 200, {"status": "ok"}
    if path == "/init_session":
        SESSIONS[body["task_id"]] = body
        return 200, {"status": "ok"}
    if path == "/run_session":
        v = client.db("/submit", {"task_id": body["task_id"], "sql": "SELECT 1"})
        return 200, {"state": {"total_reward": v["reward"], "phase1_completed": v["passed"], "phase2_completed": False},
                     "dialogue_history": [], "tool_trajectory": [{"type": "tool", "tool": "submit_sql", "args": {"sql": "SELECT 1"},
                                                                  "result": v["message"]}], "final_response": "done"}
    return 404, {"detail": "not found"}
