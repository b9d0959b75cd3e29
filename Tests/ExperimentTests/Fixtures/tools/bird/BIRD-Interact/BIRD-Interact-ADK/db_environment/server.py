"""Stand-in for BIRD-Interact-ADK/db_environment/server.py (bird-bench/BIRD-Interact at
451fe2c3518ee1cf908d8139e2913483bd519381), its grading and phase logic (_submit_sql_sync):
a submission is graded against the current phase's gold (the task's sol_sql, then the
follow-up's); a passed phase 1 of a task with a follow-up moves to phase 2 and answers
has_follow_up and follow_up_query; rewards 0.7 and 0.3, in c-interact 0.5 and 0.2 after the
phase's first try.

With PostgreSQL (a server socket in PG_HOST for PG_PORT), it does what upstream's does
through shared/db_utils.py (the stand-in beside this one: psycopg2 pools per database, psql,
dropdb and createdb for copies): /init_task makes the task's database <db>__<id> from
<db>_template (create_task_db); a submission runs on a fresh copy (phase 1 from the template,
phase 2 from the phase-1 snapshot, reset_task_db) and passes when its result equals the gold
SQL's (as upstream's test_case_default: rows compared as sets unless conditions.order); a
passed phase 1 is applied and snapshotted to <task db>__p1snap (create_task_db with the task
database as template); /execute runs SELECT-only SQL; /cleanup_task drops both
(drop_task_db). Without PostgreSQL it compares SQL text with the gold."""
import os

TASKS = {}
ATTEMPTS = {}


def pg_socket():
    host, port = os.environ.get("PG_HOST", ""), os.environ.get("PG_PORT", "5432")
    return host if host.startswith("/") and os.path.exists(os.path.join(host, ".s.PGSQL." + port)) else None


def db():
    """shared.db_utils, imported only with PostgreSQL (it needs psycopg2, as upstream's)."""
    from shared import db_utils
    return db_utils


def run_sql(task_db, sql):
    """(rows, error) of `sql` on `task_db` through the database's pool. FAKE_DB_ENV=psql: with
    the psql program as PG_USER instead, like a DB environment that does not use psycopg2
    (autoharness's task roles do not reach it; the shared-state check still must)."""
    if os.environ.get("FAKE_DB_ENV") == "psql":
        import subprocess
        env = dict(os.environ, PGPASSWORD=os.environ.get("PG_PASSWORD", "123123"))
        r = subprocess.run(["psql", "-h", os.environ["PG_HOST"], "-p", os.environ.get("PG_PORT", "5432"), "-U", os.environ.get("PG_USER", "root"),
                            "-d", task_db, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql], env=env, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            return None, r.stderr.strip()
        return [tuple(line.split("|")) for line in r.stdout.splitlines() if line], None
    rows, err, timeout, _ = db().execute_queries(sql, task_db)
    if timeout:
        return None, "timeout"
    return (rows or []), err


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
    # As upstream's _submit_sql_sync: a fresh copy, the submission run once to see that it
    # executes, then test_case_default on the same connection and copy (the submission again,
    # then the gold, on the state the submission left).
    task_db = task["_task_db"]
    source = task["selected_database"] + "_template" if phase == 1 else task["_snapshot_db"]
    u = db()
    if os.environ.get("FAKE_DB_ENV") == "psql":
        u.reset_task_db(task_db, source)
        pred, err = run_sql(task_db, sql)
        if err:
            return False, "[exec_err_flg] Error executing submitted SQL: " + err
        want, err = run_sql(task_db, gold[0])
        ordered = (gold_task.get("conditions") or task.get("conditions") or {}).get("order")
        same = not err and bool(pred) and (pred == want if ordered else sorted(set(pred)) == sorted(set(want)))
        return same, "SQL passed test case." if same else "Your SQL is not correct."
    u.reset_task_db(task_db, source)
    pool = u._get_or_init_pool(task_db)
    conn = pool.getconn()
    try:
        _, err, timeout, _ = u.execute_queries([sql], task_db, conn)
        if err:
            return False, "[exec_err_flg] Error executing submitted SQL: " + err
        if timeout:
            return False, "[exec_err_flg] Submitted SQL execution timed out"
        try:
            u.test_case_default([sql], gold, task_db, conn, gold_task.get("conditions") or task.get("conditions") or {})
            return True, "SQL passed test case."
        except AssertionError:
            return False, "Your SQL is not correct."
    finally:
        pool.putconn(conn)


def restore(task, phase):
    """After a failed submission, as upstream's: the task's copy made again from its source."""
    if pg_socket() and os.environ.get("FAKE_DB_ENV") != "psql":
        db().reset_task_db(task["_task_db"], task["selected_database"] + "_template" if phase == 1 else task["_snapshot_db"])


def app(method, path, body):
    if path == "/health":
        return 200, {"status": "ok"}
    if path == "/init_task":
        tid, task = body["task_id"], body["task_data"]
        TASKS[tid] = task
        ATTEMPTS[tid] = {1: 0, 2: 0}
        if pg_socket():
            task["_task_db"] = db().create_task_db(task["selected_database"], tid)
        return 200, {"status": "ok", "task_id": tid}
    if path == "/execute":
        task = TASKS.get(body["task_id"])
        if task is None:
            return 404, {"detail": "Task %s not initialized" % body["task_id"]}
        if not pg_socket():
            return 200, {"result": "", "success": False, "error": "no database"}
        if not body["sql"].strip().upper().startswith(("SELECT", "WITH", "EXPLAIN")):
            return 200, {"result": "", "success": False, "error": "Only SELECT queries allowed in execute_sql"}
        rows, err = run_sql(task["_task_db"], body["sql"])
        if err:
            return 200, {"result": "", "success": False, "error": "SQL error: " + err}
        return 200, {"result": "\n".join(" | ".join(str(v) for v in r) for r in rows), "success": True}
    if path == "/submit":
        tid, sql = body["task_id"], body["sql"]
        task = TASKS.get(tid)
        if task is None:
            return 404, {"detail": "Task %s not initialized" % tid}
        phase = task.get("_current_phase", 1)
        ATTEMPTS[tid][phase] += 1
        passed, message = grade(task, phase, sql)
        if not passed:
            restore(task, phase)
            return 200, {"passed": False, "message": "SQL failed Phase %d. %s" % (phase, message), "reward": 0.0,
                         "phase_completed": None, "has_follow_up": False, "follow_up_query": None}
        first = ATTEMPTS[tid][phase] == 1
        debug = task.get("_interact_mode") == "c-interact" and not first
        reward = ({1: 0.5, 2: 0.2} if debug else {1: 0.7, 2: 0.3})[phase]
        if phase == 2:
            return 200, {"passed": True, "message": "Phase 2 correct! (Reward: %s). Task finished." % reward, "reward": reward,
                         "phase_completed": 2, "has_follow_up": False, "follow_up_query": None}
        if pg_socket():
            db().reset_task_db(task["_task_db"], task["selected_database"] + "_template")
            run_sql(task["_task_db"], sql)
            db().close_pool(task["_task_db"])
            task["_snapshot_db"] = db().create_task_db(task["_task_db"], "p1snap", template=task["_task_db"])
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
            for name in (task.get("_snapshot_db"), task.get("_task_db")):
                if name:
                    db().drop_task_db(name)
        return 200, {"status": "ok", "task_id": body.get("task_id")}
    return 404, {"detail": "not found"}
