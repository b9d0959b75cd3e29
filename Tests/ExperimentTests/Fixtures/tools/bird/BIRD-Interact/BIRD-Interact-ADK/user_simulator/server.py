TASKS = {}


def app(method, path, body):
    if path == "/health":
        return 200, {"status": "ok"}
    if path == "/init_task":
        TASKS[body["task_id"]] = body["task_data"]
        return 200, {"status": "initialized"}
    if path == "/ask":
        clear = (TASKS.get(body["task_id"]) or {}).get("query")
        return 200, {"answer": ("I mean: " + clear) if clear else "I don't know what you mean."}
    return 404, {"detail": "not found"}
