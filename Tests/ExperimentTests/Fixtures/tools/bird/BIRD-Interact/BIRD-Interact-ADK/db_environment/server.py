"""Stand-in for BIRD-Interact-ADK/db_environment/server.py (bird-bench/BIRD-Interact at
451fe2c3518ee1cf908d8139e2913483bd519381), its grading and phase logic (_submit_sql_sync):
a submission is graded against the current phase's gold (the task's sol_sql, then the
follow-up's); a passed phase 1 of a task with a follow-up moves to phase 2 and answers
has_follow_up and follow_up_query; rewards 0.7 and 0.3, in c-interact 0.5 and 0.2 after the
phase's first try.

With PostgreSQL (a server socket in PG_HOST for PG_PORT), it does what upstream's does
through shared/db_utils.py: /init_task makes the task's database <db>__<id> from
<db>_template with psql, dropdb and createdb (as _drop_and_create_db); a submission runs on
a fresh copy (phase 1 from the template, phase 2 from the phase-1 snapshot) and passes when
its result equals the gold SQL's (as upstream's test_case_default: rows compared as sets unless
conditions.order); a passed phase 1 is applied and snapshotted to <task db>__p1snap;
/execute runs SELECT-only SQL; /cleanup_task drops both. Queries run through psql where
upstream uses psycopg2 (both libpq, over the same socket). Without PostgreSQL it compares
SQL text with the gold."""
import os
import re
import subprocess

TASKS = {}
ATTEMPTS = {}


def pg_socket():
    host, port = os.environ.get("PG_HOST", ""), os.environ.get("PG_PORT", "5432")
    return host if host.startswith("/") and os.path.exists(os.path.join(host, ".s.PGSQL." + port)) else None


def pg_args():
    return ["-h", os.environ["PG_HOST"], "-p", os.environ.get("PG_PORT", "5432"), "-U", os.environ.get("PG_USER", "root")]


def pg_env():
    env = dict(os.environ)
    env["PGPASSWORD"] = os.environ.get("PG_PASSWORD", "123123")
    return env


def psql(db, sql):
    """(rows, error): rows as tuples of text."""
    r = subprocess.run(["psql", *pg_args(), "-d", db, "-X", "-q", "-A", "-t", "-F", "\x1f", "-v", "ON_ERROR_STOP=1", "-c", sql],
                       env=pg_env(), capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return None, r.stderr.strip() or "psql exited %d" % r.returncode
    return [tuple(line.split("\x1f")) for line in r.stdout.splitlines() if line], None


def recreate(db, template):
    subprocess.run(["psql", *pg_args(), "-d", "postgres", "-X", "-q", "-c",
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s' AND pid <> pg_backend_pid();" % db],
                   env=pg_env(), check=True, capture_output=True, timeout=60)
    subprocess.run(["dropdb", "--if-exists", *pg_args(), db], env=pg_env(), check=True, capture_output=True, timeout=60)
    subprocess.run(["createdb", *pg_args(), db, "--template", template], env=pg_env(), check=True, capture_output=True, timeout=60)


def drop(db):
    subprocess.run(["dropdb", "--if-exists", *pg_args(), db], env=pg_env(), check=True, capture_output=True, timeout=60)


def grade(task, phase, sql):
    """(passed, message)."""
    gold_task = task if phase == 1 else (task.get("follow_up") or {})
    gold = gold_task.get("sol_sql") or []
    if isinstance(gold, str):
        gold = [gold]
    if not gold:
        return False, "Test case execution failed."
    if not pg_socket():
        return sql.strip().lower() == gold[0].lower(), "Your SQL is not correct."
    db = task["_task_db"]
    recreate(db, task["selected_database"] + "_template" if phase == 1 else task["_snapshot_db"])
    pred, err = psql(db, sql)
    if err:
        return False, "[exec_err_flg] Error executing submitted SQL: " + err
    recreate(db, task["selected_database"] + "_template" if phase == 1 else task["_snapshot_db"])
    want, err = psql(db, gold[0])
    if err:
        return False, "Your SQL is not correct."
    ordered = (gold_task.get("conditions") or task.get("conditions") or {}).get("order")
    same = pred == want if ordered else sorted(set(pred)) == sorted(set(want))
    return same, "SQL passed test case." if same else "Your SQL is not correct."


def app(method, path, body):
    if path == "/health":
        return 200, {"status": "ok"}
    if path == "/init_task":
        tid, task = body["task_id"], body["task_data"]
        TASKS[tid] = task
        ATTEMPTS[tid] = {1: 0, 2: 0}
        if pg_socket():
            task["_task_db"] = "%s__%s" % (task["selected_database"], re.sub(r"[^A-Za-z0-9_]", "_", tid))
            recreate(task["_task_db"], task["selected_database"] + "_template")
        return 200, {"status": "ok", "task_id": tid}
    if path == "/execute":
        task = TASKS.get(body["task_id"])
        if task is None:
            return 404, {"detail": "Task %s not initialized" % body["task_id"]}
        if not pg_socket():
            return 200, {"result": "", "success": False, "error": "no database"}
        if not body["sql"].strip().upper().startswith(("SELECT", "WITH", "EXPLAIN")):
            return 200, {"result": "", "success": False, "error": "Only SELECT queries allowed in execute_sql"}
        rows, err = psql(task["_task_db"], body["sql"])
        if err:
            return 200, {"result": "", "success": False, "error": "SQL error: " + err}
        return 200, {"result": "\n".join(" | ".join(r) for r in rows), "success": True}
    if path == "/submit":
        tid, sql = body["task_id"], body["sql"]
        task = TASKS.get(tid)
        if task is None:
            return 404, {"detail": "Task %s not initialized" % tid}
        phase = task.get("_current_phase", 1)
        ATTEMPTS[tid][phase] += 1
        passed, message = grade(task, phase, sql)
        if not passed:
            return 200, {"passed": False, "message": "SQL failed Phase %d. %s" % (phase, message), "reward": 0.0,
                         "phase_completed": None, "has_follow_up": False, "follow_up_query": None}
        first = ATTEMPTS[tid][phase] == 1
        debug = task.get("_interact_mode") == "c-interact" and not first
        reward = ({1: 0.5, 2: 0.2} if debug else {1: 0.7, 2: 0.3})[phase]
        if phase == 2:
            return 200, {"passed": True, "message": "Phase 2 correct! (Reward: %s). Task finished." % reward, "reward": reward,
                         "phase_completed": 2, "has_follow_up": False, "follow_up_query": None}
        if pg_socket():
            recreate(task["_task_db"], task["selected_database"] + "_template")
            psql(task["_task_db"], sql)
            task["_snapshot_db"] = task["_task_db"] + "__p1snap"
            recreate(task["_snapshot_db"], task["_task_db"])
        follow = task.get("follow_up") or {}
        if follow.get("sol_sql"):
            task["_current_phase"] = 2
            ATTEMPTS[tid][2] = 0
            return 200, {"passed": True, "message": "Phase 1 correct! (Reward: %s). Moving to Phase 2." % reward, "reward": reward,
                         "phase_completed": 1, "has_follow_up": True,
                         "follow_up_query": follow.get("query", "Please complete the follow-up task.")}
        return 200, {"passed": True, "message": "Phase 1 correct! (Reward: %s). Task finished." % reward, "reward": reward,
                     "phase_completed": 1, "has_follow_up": False, "follow_up_query": None}
    if path == "/cleanup_task":
        task = TASKS.pop(body.get("task_id"), None)
        if task and pg_socket():
            for db in (task.get("_snapshot_db"), task.get("_task_db")):
                if db:
                    drop(db)
        return 200, {"status": "ok", "task_id": body.get("task_id")}
    return 404, {"detail": "not found"}
